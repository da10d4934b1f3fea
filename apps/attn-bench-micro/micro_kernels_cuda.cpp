// Google Benchmark cases of the CUDA kernels, timed with CUDA events (UseManualTime): the
// paged-cache write (reshape_and_cache_flash), the device cache fill, and, when this build has
// the FLASH_ATTN backend, decode 64x4k and prefill 2x4k through its BackendInstance; the FLASHMLA
// decode (kernel + combine alone, and the whole W_UK -> kernel -> W_UV path) on the shapes.
// Counters: GB/s (bytes read + written) and TFLOP/s where the case does arithmetic. Every
// iteration starts from a cold, clean L2, as attn-bench's own timing (timing/cold_l2.hpp).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#if defined(ATTN_WITH_CUDA)
#include "backends/flash_attn/flash_attn_plan.hpp"
#include "backends/flashmla/flashmla_backend.hpp"
#endif
#include "core/device.hpp"
#include "core/device_cache.hpp"
#include "kernels/cache/cache_launch.hpp"
#include "metadata/common.hpp"
#include "model/batch.hpp"
#include "model/kv_cache.hpp"
#include "timing/cold_l2.hpp"

namespace attn {
namespace {

// Times `launch` with events around each iteration, L2 flushed before each (outside the events);
// sets GB/s and TFLOP/s from per-iteration bytes and flops over the event time (not the host time).
template <class F>
void time_with_events(benchmark::State& state, cudaStream_t stream, double bytes, double flops, F&& launch) {
  ColdL2 cold(stream);
  for (int i = 0; i < 3; ++i) launch();  // warm-up: module load, first touch
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  Event start, stop;
  double total_s = 0;
  for (auto _ : state) {
    cold.flush(stream);
    start.record(stream);
    launch();
    stop.record(stream);
    stop.synchronize();
    const double s = stop.elapsed_ms_since(start) * 1e-3;
    total_s += s;
    state.SetIterationTime(s);
  }
  const double iters = static_cast<double>(state.iterations());
  if (total_s > 0) {
    state.counters["GB/s"] = bytes * iters / total_s / 1e9;
    if (flops > 0) state.counters["TFLOP/s"] = flops * iters / total_s / 1e12;
  }
  state.counters["bytes"] = bytes;
}

std::string no_device_reason() {
  std::string why;
  return cuda_device_present(&why) ? std::string() : why;
}

// ---- reshape_and_cache_flash ------------------------------------------------------------------

// Args: num_tokens, cache dtype (as int DType). 8 kv heads x 128, bf16 input, NHD, shuffled slots.
void BM_ReshapeAndCacheFlash(benchmark::State& state) {
  if (const std::string why = no_device_reason(); !why.empty()) return state.SkipWithError(why.c_str());
  const int64_t num_tokens = state.range(0);
  const auto cache_dtype = static_cast<DType>(state.range(1));
  const int H = 8, D = 128;
  KvCacheLayout l;
  l.dtype = cache_dtype;
  l.block_size = 16;
  l.num_kv_heads = H;
  l.head_size_k = l.head_size_v = D;
  l.num_blocks = std::max<int64_t>(4 * num_tokens / l.block_size, 64);  // slots spread over a larger cache
  Stream stream;
  DeviceBuffer key(static_cast<size_t>(num_tokens * H * D * 2)), value(key.bytes()), cache(l.bytes());
  key.memset_async(0x3e, stream);
  value.memset_async(0x3d, stream);
  std::vector<int64_t> slots(static_cast<size_t>(l.num_blocks * l.block_size));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(7));
  slots.resize(static_cast<size_t>(num_tokens));
  DeviceBuffer d_slots(slots.size() * sizeof(int64_t));
  d_slots.upload(slots.data(), d_slots.bytes());
  const CacheView v = cache_view(l);
  const size_t es = dtype_size(cache_dtype);
  ReshapeAndCacheParams p{};
  p.key = key.data();
  p.value = value.data();
  p.key_stride = p.value_stride = H * D;
  p.slot_mapping = d_slots.as<const int64_t>();
  p.k_cache = cache.as<char>() + v.k_offset * es;
  p.v_cache = cache.as<char>() + v.v_offset * es;
  p.k_strides = v.k;
  p.v_strides = v.v;
  p.num_tokens = num_tokens;
  p.num_kv_heads = H;
  p.head_size_k = p.head_size_v = D;
  p.block_size = l.block_size;
  p.k_scale = 0.05f;
  p.v_scale = 0.05f;
  p.input_dtype = DType::bf16;
  p.cache_dtype = cache_dtype;
  const double bytes = static_cast<double>(num_tokens) * 2 * H * D * (2 + es) + num_tokens * 8.0;
  time_with_events(state, stream, bytes, 0, [&] { launch_reshape_and_cache_flash(p, stream); });
  state.SetLabel(std::string("bf16->") + std::string(to_string(cache_dtype)));
}
BENCHMARK(BM_ReshapeAndCacheFlash)
    ->ArgNames({"tokens", "dtype"})
    ->Args({64, static_cast<int>(DType::bf16)})
    ->Args({2048, static_cast<int>(DType::bf16)})
    ->Args({8192, static_cast<int>(DType::bf16)})
    ->Args({8192, static_cast<int>(DType::fp8_e4m3)})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// ---- device cache fill -----------------------------------------------------------------------

Batch llama_batch(int count, int query_len, int context, int shared_prefix, DType kv_dtype) {
  const ModelPreset* preset = find_preset("llama3-8b");
  AttentionSpec spec = preset ? preset->spec : AttentionSpec{};
  spec.kv_cache_dtype = kv_dtype;
  if (is_fp8(kv_dtype)) spec.k_scale = spec.v_scale = 0.02f;
  BatchShape shape;
  shape.requests.assign(static_cast<size_t>(count), RequestShape{context, query_len});
  shape.shared_prefix_len = shared_prefix;
  return make_batch(spec, shape, 1234);
}

// Args: decode requests x 4096 context, shared prefix (0 or 4096 with 128 requests).
void BM_CacheFillDevice(benchmark::State& state) {
  if (const std::string why = no_device_reason(); !why.empty()) return state.SkipWithError(why.c_str());
  const auto kv_dtype = static_cast<DType>(state.range(2));
  const Batch b = llama_batch(static_cast<int>(state.range(0)), 1, 4096, static_cast<int>(state.range(1)), kv_dtype);
  const KvCacheLayout l = make_cache_layout(b, CacheFormat::flash_attn);
  Stream stream;
  DeviceBuffer cache(l.bytes());
  const DeviceCacheFill fill(b, l);
  time_with_events(state, stream, fill.bytes_written(), 0, [&] { fill.launch(cache.data(), stream); });
  state.SetLabel(std::to_string(fill.context_tokens()) + " context tokens, " + std::to_string(l.bytes() >> 20) +
                 " MiB cache, " + std::string(to_string(kv_dtype)));
}
BENCHMARK(BM_CacheFillDevice)
    ->ArgNames({"reqs", "prefix", "dtype"})
    ->Args({64, 0, static_cast<int>(DType::bf16)})
    ->Args({64, 0, static_cast<int>(DType::fp8_e4m3)})
    ->Args({128, 4096, static_cast<int>(DType::bf16)})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// ---- attention through the FLASH_ATTN backend (when this build has it) ----------------------

bool iequals(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

struct AttentionCase {
  const char* name;
  int count, query_len, context;
};

void run_attention_case(benchmark::State& state, const AttentionCase& c) {
  if (const std::string why = no_device_reason(); !why.empty()) return state.SkipWithError(why.c_str());
  const auto registry = make_registry();
  const Backend* fa = nullptr;
  for (const auto& be : registry)
    if (iequals(be->name(), "flash_attn")) fa = be.get();
  if (!fa) return state.SkipWithError("FLASH_ATTN backend not in this build");
  if (Support s = fa->available(); !s) return state.SkipWithError(s.reason.c_str());
  const Batch b = llama_batch(c.count, c.query_len, c.context, 0, DType::bf16);
  if (Support s = fa->supports(b.spec, b); !s) return state.SkipWithError(s.reason.c_str());
  const CommonAttentionMetadata m = build_common_metadata(b);
  std::unique_ptr<BackendInstance> inst = fa->create(b, m, RunOptions{});
  inst->plan();
  const WorkCounts w = count_work(b);
  const auto stream = static_cast<cudaStream_t>(inst->stream());
  time_with_events(state, stream, w.bytes, w.flops, [&] { inst->run(); });
  state.SetLabel(c.name);
}

const AttentionCase kDecode{"decode 64x1@4096 llama3-8b bf16", 64, 1, 4096};
const AttentionCase kPrefill{"prefill 2x4096@0 llama3-8b bf16", 2, 4096, 0};

void BM_FlashAttnDecode(benchmark::State& state) { run_attention_case(state, kDecode); }
void BM_FlashAttnPrefill(benchmark::State& state) { run_attention_case(state, kPrefill); }
BENCHMARK(BM_FlashAttnDecode)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FlashAttnPrefill)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The FLASH_ATTN planner's pass over a mixed step on the sm_90a kernel, host only: tiles, the split
// rule and the simulation of both item schedules (claim_items_dynamically), which runs once per
// work item. range(0) decodes at 4k beside 4 prefill chunks of 512 on 2k, 8 kv heads, 132 SMs.
void BM_FlashAttnPlanMixed(benchmark::State& state) {
  const int decodes = static_cast<int>(state.range(0));
  std::vector<int32_t> query_lens(static_cast<std::size_t>(decodes), 1), seq_lens(static_cast<std::size_t>(decodes), 4097);
  for (int i = 0; i < 4; ++i) {
    query_lens.push_back(512);
    seq_lens.push_back(2048 + 512);
  }
  bool dynamic = false;
  for (auto _ : state) {
    const FlashAttnPass pass =
        make_flash_attn_pass(query_lens, seq_lens, true, 4, 128, 8, 132, 0, Sm90Passes::mixed, nullptr);
    benchmark::DoNotOptimize(pass.tiles.data());
    dynamic = pass.dynamic_items;
  }
  state.counters["dynamic"] = dynamic ? 1 : 0;
}
BENCHMARK(BM_FlashAttnPlanMixed)->Arg(16)->Arg(48)->Arg(1024)->Unit(benchmark::kMicrosecond);

// The balanced fixed rounds of an sm_90a prefill pass (balance_fixed_rounds), host only: range(0)
// causal prefills of range(1) tokens, 32/8 heads of size 128, 132 SMs (8 x 1k: 2048 work items).
void BM_FlashAttnBalanceRounds(benchmark::State& state) {
  const std::vector<int32_t> lens(static_cast<std::size_t>(state.range(0)), static_cast<int32_t>(state.range(1)));
  FlashAttnPass pass = make_flash_attn_pass(lens, lens, true, 4, 128, 8, 132, 0, Sm90Passes::prefills, nullptr);
  for (auto _ : state) {
    balance_fixed_rounds(pass, 8, 128, 132);
    benchmark::DoNotOptimize(pass.work_order.data());
  }
  state.counters["items"] = static_cast<double>(pass.num_tiles()) * 8;
}
BENCHMARK(BM_FlashAttnBalanceRounds)->Args({8, 1024})->Args({1, 16384})->Args({32, 4096})->Unit(benchmark::kMicrosecond);

// ---- FLASHMLA decode: the kernel alone (+ combine) and the whole path ------------------------

#if defined(ATTN_WITH_CUDA)
// Args: heads, requests, context, q_len; DeepSeek-V3 MLA, bf16, 64-token blocks. Bytes and FLOPs
// of the kernel: the latent cache read once (576 x 2 bytes per key), q' and o_latent; 2 x (576 +
// 512) FLOPs per (query row, visible key).
void run_flashmla_case(benchmark::State& state, bool kernel_only) {
  if (const std::string why = no_device_reason(); !why.empty()) return state.SkipWithError(why.c_str());
  const int heads = static_cast<int>(state.range(0)), count = static_cast<int>(state.range(1));
  const int context = static_cast<int>(state.range(2)), q_len = static_cast<int>(state.range(3));
  const auto backend = make_flashmla_backend(FlashMlaOptions{kernel_only});
  if (Support s = backend->available(); !s) return state.SkipWithError(s.reason.c_str());
  const ModelPreset* preset = find_preset("deepseek-v3");
  if (!preset) return state.SkipWithError("no deepseek-v3 preset");
  AttentionSpec spec = preset->spec;
  spec.num_q_heads = heads;
  BatchShape shape;
  shape.label = "flashmla";
  shape.requests.assign(static_cast<size_t>(count), RequestShape{context, q_len});
  const Batch b = make_batch(spec, shape, 1);
  if (Support s = backend->supports(b.spec, b); !s) return state.SkipWithError(s.reason.c_str());
  const CommonAttentionMetadata m = build_common_metadata(b);
  std::unique_ptr<BackendInstance> inst = backend->create(b, m, RunOptions{});
  inst->plan();
  double bytes = 0, flops = 0;
  for (const RequestShape& r : b.requests) {
    bytes += double(r.seq_len()) * 576 * 2;
    for (int i = 0; i < r.query_len; ++i) flops += 2.0 * (576 + 512) * heads * (r.context_len + i + 1);
  }
  bytes += double(b.num_tokens()) * heads * (576 + 512) * 2;
  if (!kernel_only) flops += double(b.num_tokens()) * heads * 2 * 512 * (128 + 128);  // W_UK, W_UV
  const auto stream = static_cast<cudaStream_t>(inst->stream());
  time_with_events(state, stream, bytes, flops, [&] { inst->run(); });
  state.SetLabel(inst->plan_summary());
}
void BM_FlashMlaDecodeKernel(benchmark::State& state) { run_flashmla_case(state, true); }
void BM_FlashMlaDecodePath(benchmark::State& state) { run_flashmla_case(state, false); }
#define ATTN_FLASHMLA_SHAPES                                                                              \
  ->Args({16, 128, 8191, 1})->Args({16, 64, 4095, 1})->Args({128, 64, 4095, 1})->Args({128, 32, 16383, 1}) \
      ->Args({16, 64, 4094, 2})->UseManualTime()->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_FlashMlaDecodeKernel) ATTN_FLASHMLA_SHAPES;
BENCHMARK(BM_FlashMlaDecodePath) ATTN_FLASHMLA_SHAPES;
// The kernel's cost per launch at 16 heads: 132 requests of one block (one per partition: the
// launch's start and end with next to nothing streamed), then 64 requests of 1k and 2k keys, the
// ladder up to 64 x 4k and 128 x 8k above; a line through the rungs gives the streaming rate and
// the cost of a launch (kernel + combine).
void BM_FlashMlaDecodeLadder(benchmark::State& state) { run_flashmla_case(state, true); }
BENCHMARK(BM_FlashMlaDecodeLadder)
    ->Args({16, 132, 63, 1})->Args({16, 64, 1023, 1})->Args({16, 64, 2047, 1})->UseManualTime()->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace attn
