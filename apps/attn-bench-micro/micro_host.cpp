// Host-side costs that sit on every run's critical path: building a batch and its metadata
// (what `attn-bench describe` does), replaying a request trace, and the per-step metadata work
// of a serving engine (build, reorder, split, cascade decision) on a large mixed batch.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sys/resource.h>

#include "backends/flashinfer/fi_plan.hpp"
#include "backends/flashmla/mla_metadata.hpp"
#include "metadata/common.hpp"
#include "model/batch.hpp"
#include "model/scenario.hpp"
#include "model/trace.hpp"

namespace attn {
namespace {

// Streaming multiprocessors of the device the cascade cost model is asked about (H100 SXM).
constexpr int kNumSms = 132;

// Bytes of the per-request and per-token arrays of a metadata object.
double metadata_bytes(const CommonAttentionMetadata& m) {
  return static_cast<double>((m.query_start_loc.size() + m.seq_lens.size() + m.num_computed_tokens.size() +
                              m.block_table.size()) * sizeof(int32_t) +
                             m.slot_mapping.size() * sizeof(int64_t));
}

// Minor page faults of this process so far. Building metadata writes megabytes of fresh vectors;
// when the allocator hands that memory back to the kernel between iterations, first-touch page
// faults can cost more than the work itself, so the benchmarks report them per iteration.
int64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

std::string trace_path() {
#ifdef ATTN_SOURCE_DIR
  const std::string root = ATTN_SOURCE_DIR;
#else
  const char* env = std::getenv("ATTN_SOURCE_DIR");
  const std::string root = env ? env : "";
#endif
  if (root.empty()) return {};
  return root + "/scenarios/traces/azure_llm_2023_conv.csv";
}

// A 1024-request chunked-prefill step: 64 groups of 15 decodes (contexts 1k..5k) followed by one
// prefill chunk, so decodes and prefills interleave and the reorder has work to do; every
// request starts with a 512-token shared prefix, so the cascade rule runs its cost model.
Batch mixed_batch(int num_requests) {
  std::string spec;
  for (int g = 0; g < num_requests / 16; ++g)
    spec += fmt::format("{}15x1@{},1x{}@{}", g ? "," : "", 1024 + 64 * g, 128 + 16 * (g % 8), 512 + 32 * g);
  Scenario s = scenario_from_cli("llama3-8b", spec);
  s.batch.shared_prefix_len = 512;
  return make_batch(s.spec, expand_shapes(s).front(), s.seed);
}

// `describe` on 256 decodes at 32k context: scenario, batch (paging for 2M tokens), metadata,
// work counts.
void BM_DescribeLlama3_256x32k(benchmark::State& state) {
  double bytes = 0;
  int64_t reqs = 0;
  const int64_t faults0 = minor_faults();
  for (auto _ : state) {
    const Scenario s = scenario_from_cli("llama3-8b", "256x1@32768");
    const Batch b = make_batch(s.spec, expand_shapes(s).front(), s.seed);
    const CommonAttentionMetadata m = build_common_metadata(b);
    const WorkCounts w = count_work(b);
    benchmark::DoNotOptimize(m.block_table.data());
    benchmark::DoNotOptimize(w.flops);
    bytes = metadata_bytes(m);
    reqs = m.num_reqs;
  }
  state.SetItemsProcessed(state.iterations() * reqs);                            // requests
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));     // metadata built
  state.counters["faults"] = benchmark::Counter(static_cast<double>(minor_faults() - faults0),
                                                benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_DescribeLlama3_256x32k)->Unit(benchmark::kMillisecond);

// Reading the shipped trace (CSV parse only).
void BM_LoadTraceCsv(benchmark::State& state) {
  const std::string path = trace_path();
  if (path.empty() || !std::filesystem::exists(path)) {
    state.SkipWithError(("trace not found (set ATTN_SOURCE_DIR): " + path).c_str());
    return;
  }
  int64_t rows = 0;
  for (auto _ : state) {
    const std::vector<TraceRequest> t = load_trace_csv(path);
    benchmark::DoNotOptimize(t.data());
    rows = static_cast<int64_t>(t.size());
  }
  state.SetItemsProcessed(state.iterations() * rows);  // trace rows
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(std::filesystem::file_size(path)));
}
BENCHMARK(BM_LoadTraceCsv)->Unit(benchmark::kMillisecond);

// Replaying the whole shipped trace through the scheduler model (default budget: 8192 tokens,
// 256 sequences, 15 ms per step) until it drains.
void BM_ReplayTrace(benchmark::State& state) {
  const std::string path = trace_path();
  if (path.empty() || !std::filesystem::exists(path)) {
    state.SkipWithError(("trace not found (set ATTN_SOURCE_DIR): " + path).c_str());
    return;
  }
  const std::vector<TraceRequest> trace = load_trace_csv(path);
  const SchedulerConfig cfg;
  int64_t steps = 0, tokens = 0;
  for (auto _ : state) {
    steps = 0;
    tokens = 0;
    replay_trace(trace, cfg, [&](const ScheduledStep& st) {
      ++steps;
      for (const RequestShape& r : st.requests) tokens += r.query_len;
      return true;
    });
    benchmark::DoNotOptimize(tokens);
  }
  state.SetItemsProcessed(state.iterations() * steps);  // scheduler steps
  state.counters["steps"] = static_cast<double>(steps);
  state.counters["requests"] = static_cast<double>(trace.size());
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_ReplayTrace)->Unit(benchmark::kMillisecond);

// Everything a step needs before its kernels: common metadata, decode-first reorder applied to
// it, the split, the shared prefix and the cascade decision. Target: < 1 ms for 1024 requests.
void BM_StepMetadataMixed(benchmark::State& state) {
  const Batch b = mixed_batch(static_cast<int>(state.range(0)));
  const AttentionSpec& spec = b.spec;
  double bytes = 0;
  bool cascade = false;
  const int64_t faults0 = minor_faults();
  for (auto _ : state) {
    const CommonAttentionMetadata m = build_common_metadata(b);
    std::vector<int32_t> q(m.num_reqs);  // [num_reqs]
    for (int r = 0; r < m.num_reqs; ++r) q[r] = m.query_len(r);
    const std::vector<int> order = reorder_batch_to_split_decodes_and_prefills(q);
    const CommonAttentionMetadata pm = permute_requests(m, order);
    const DecodePrefillSplit split = split_decodes_and_prefills(pm);
    for (int r = 0; r < pm.num_reqs; ++r) q[r] = pm.query_len(r);
    const int prefix = common_prefix_len(b, pm);
    const CascadeDecision d = use_cascade_attention(prefix, q, spec.num_q_heads, spec.num_kv_heads, spec.alibi,
                                                    spec.sliding_window > 0, b.local_attention_chunk > 0, kNumSms);
    benchmark::DoNotOptimize(split.num_decode_tokens);
    benchmark::DoNotOptimize(pm.slot_mapping.data());
    bytes = metadata_bytes(m) + metadata_bytes(pm);
    cascade = d.use;
  }
  state.SetItemsProcessed(state.iterations() * b.num_reqs());                   // requests
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));    // metadata written
  state.counters["tokens"] = static_cast<double>(b.num_tokens());
  state.counters["cascade"] = cascade ? 1 : 0;
  state.counters["faults"] = benchmark::Counter(static_cast<double>(minor_faults() - faults0),
                                                benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_StepMetadataMixed)->Arg(1024)->Unit(benchmark::kMicrosecond);

// Local-attention virtual batches of the same step (chunk 1024, 64 pages per virtual row).
void BM_LocalAttentionVirtualBatches(benchmark::State& state) {
  const Batch b = mixed_batch(static_cast<int>(state.range(0)));
  const CommonAttentionMetadata m = build_common_metadata(b);
  constexpr int kChunk = 1024;
  int64_t virtual_reqs = 0;
  double bytes = 0;
  for (auto _ : state) {
    const LocalAttentionBatch v = make_local_attention_virtual_batches(kChunk, m, b.block_size);
    benchmark::DoNotOptimize(v.metadata.block_table.data());
    virtual_reqs = v.metadata.num_reqs;
    bytes = metadata_bytes(v.metadata);
  }
  state.SetItemsProcessed(state.iterations() * virtual_reqs);  // virtual requests
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["virtual_reqs"] = static_cast<double>(virtual_reqs);
}
BENCHMARK(BM_LocalAttentionVirtualBatches)->Arg(1024)->Unit(benchmark::kMicrosecond);

// FlashMLA's get_mla_metadata for a ragged decode batch (128 heads, q_len 1, 132 SMs): the
// host half of the FLASHMLA backend's plan().
void BM_GetMlaMetadata(benchmark::State& state) {
  std::vector<int32_t> lens(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < lens.size(); ++i) lens[i] = static_cast<int32_t>(512 + (i * 7919) % 16384);
  int parts = 0;
  for (auto _ : state) {
    const flashmla::MlaMetadata md = flashmla::get_mla_metadata(lens, 128, 1, 132);
    benchmark::DoNotOptimize(md.tile_scheduler_metadata.data());
    parts = md.num_parts;
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));  // requests scheduled
  state.counters["parts"] = parts;
}
BENCHMARK(BM_GetMlaMetadata)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond);

// A decode batch of n requests of 1k-17k keys, pages of 16.
CommonAttentionMetadata decode_metadata(int n) {
  CommonAttentionMetadata m;
  m.num_reqs = n;
  m.query_start_loc.resize(static_cast<size_t>(n) + 1);
  std::iota(m.query_start_loc.begin(), m.query_start_loc.end(), 0);
  for (int r = 0; r < n; ++r) m.seq_lens.push_back(1024 + (r * 7919) % 16384);
  m.num_computed_tokens = m.seq_lens;
  m.max_query_len = 1;
  m.max_seq_len = *std::max_element(m.seq_lens.begin(), m.seq_lens.end());
  m.max_blocks_per_req = (m.max_seq_len + 15) / 16;
  m.block_table.resize(static_cast<size_t>(n) * m.max_blocks_per_req);
  std::iota(m.block_table.begin(), m.block_table.end(), 1);
  return m;
}

// FLASHINFER's metadata builder: the CSR page table of the batch (copies every page id once).
void BM_FlashInferCsr(benchmark::State& state) {
  const CommonAttentionMetadata m = decode_metadata(static_cast<int>(state.range(0)));
  int64_t pages = 0;
  for (auto _ : state) {
    const flashinfer::FlashInferMetadata md = flashinfer::build_flashinfer_metadata(m, 16);
    benchmark::DoNotOptimize(md.decode.paged_kv_indices.data());
    pages = static_cast<int64_t>(md.decode.paged_kv_indices.size());
  }
  state.SetBytesProcessed(state.iterations() * pages * 4);
  state.counters["pages"] = static_cast<double>(pages);
}
BENCHMARK(BM_FlashInferCsr)->Arg(256)->Unit(benchmark::kMicrosecond);

// FLASHINFER decode plan(): the split-KV schedule of that batch (8 kv heads, 2 x 132 resident
// CTAs). Target (issue 8): < 20 us for 256 requests.
void BM_FlashInferPlanDecode(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const flashinfer::FlashInferMetadata md = flashinfer::build_flashinfer_metadata(decode_metadata(n), 16);
  int work = 0;
  for (auto _ : state) {
    const flashinfer::DecodePlan p = flashinfer::plan_decode(md.decode, 8, 16, 2 * 132);
    benchmark::DoNotOptimize(p.request_indices.data());
    work = p.num_work();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["work_items"] = work;
}
BENCHMARK(BM_FlashInferPlanDecode)->Arg(256)->Arg(8)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace attn
