// FLASHINFER host side: vLLM's metadata builder (decodes first, CSR page tables), the plan
// (split-KV work lists), and the run: reshape_and_cache_flash -> decode wrapper + prefill
// wrapper (each merged in base 2 where it split) -> for cascade, the merge of the two levels.
#include "backends/flashinfer/flashinfer_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "backends/device_output.hpp"
#include "backends/mha_step.hpp"
#include "backends/flash_attn/flash_attn_plan.hpp"
#include "backends/flashinfer/fi_plan.hpp"
#include "core/device.hpp"
#include "core/device_cache.hpp"
#include "core/device_upload.hpp"
#include "core/env.hpp"
#include "kernels/cache/cache_launch.hpp"
#include "kernels/common/merge_launch.hpp"
#include "kernels/flash_attn/flash_attn_launch.hpp"
#include "kernels/flashinfer/fi_launch.hpp"
#include "model/kv_cache.hpp"

namespace attn {
namespace {

using flashinfer::PagedKvCsr;

constexpr float kLn2 = 0.6931471805599453f;

// vLLM's use_tensor_cores rule (group > 4), and every fp8 cache: the tensor-core kernel widens fp8
// in registers and ran the fp8 64 x 4k decode in 223.6 us against 356.8 us on CUDA cores, whose
// per-key instruction count does not shrink with the bytes (docs/PERF_NOTES.md).
// ATTN_FI_TENSOR_CORE_DECODE=1 puts every decode on tensor cores, =0 every decode the CUDA-core
// kernel serves (groups 1-4): A/B switches for the two kernels on the same batch.
bool decode_on_tensor_cores(const FiKernelConfig& c) {
  const char* force = std::getenv("ATTN_FI_TENSOR_CORE_DECODE");
  const std::string f = force != nullptr ? force : "";
  if (fi_decode_uses_tensor_cores(c.group) || f == "1") return true;
  if (f == "0") return false;
  return is_fp8(c.kv_dtype);
}

bool sm90_prefill_enabled(const FlashInferOptions& o) {
  static const bool env_on = ab_switch_on("ATTN_FI_SM90");
  return o.sm90_prefill && env_on;
}

// The shared sm_90a kernel's view of the layer. Its cache addressing is by strides, so the
// FlashInfer layout (K and V halves of each page, NHD or HND) is described as NHD.
FlashAttnConfig sm90_config(const AttentionSpec& s) {
  return FlashAttnConfig{s.num_q_heads, s.num_kv_heads, s.head_size_qk, s.head_size_v, s.dtype,
                         s.kv_cache_dtype, s.block_size, KvLayout::NHD, false};
}

FiKernelConfig kernel_config(const AttentionSpec& s) {
  return {s.head_size_qk, s.dtype, s.kv_cache_dtype, s.num_kv_heads > 0 ? s.num_q_heads / s.num_kv_heads : 0};
}

// Why vLLM's FlashInfer backend (or this build of it) does not run `spec`; "" when it does.
std::string unsupported_reason(const AttentionSpec& s, const Batch* b) {
  if (s.use_mla) return "MLA layers are served by FLASHMLA, not FLASHINFER";
  if (s.alibi) return "ALiBi is not supported by vLLM's FlashInfer backend";
  if (s.sinks) return "attention sinks are not supported by vLLM's FlashInfer backend of the seed";
  if (b && b->local_attention_chunk > 0) return "chunked local attention is not supported by this FlashInfer backend";
  if (s.head_size_qk != s.head_size_v)
    return fmt::format("head_size_qk {} != head_size_v {}", s.head_size_qk, s.head_size_v);
  if (s.num_kv_heads <= 0 || s.num_q_heads % s.num_kv_heads != 0)
    return fmt::format("num_q_heads {} is not a multiple of num_kv_heads {}", s.num_q_heads, s.num_kv_heads);
  return fi_unsupported_reason(kernel_config(s));
}

// One wrapper launch: the decode (CUDA cores or tensor cores) or the prefill of a batch part,
// or a cascade level, with its CSR table and work list on the device.
struct Pass {
  std::string name;
  bool cuda_core_decode = false;  // else the prefill kernel
  bool causal = true;
  int token_begin = 0, num_tokens = 0;  // internal token rows of this part
  int slot = -1;                        // -1: the final O; >= 0: the cascade level's first fp32 slot
  int num_slots = 1;                    // cascade level 0 on the sm_90a kernel: one slot per kv split
  PagedKvCsr csr;
  int cta_tile_q = 0;
  int chunk_pages = 0;
  bool split = false;
  int num_work = 0, padded_work = 0;
  int partial_rows = 0;
  // The prefill on the sm_90a kernel (FlashInferOptions::sm90_prefill): its tiles (request,
  // m_block of sm90_block_m packed rows, most keys first) and the key count of each request.
  bool sm90 = false;
  FlashAttnTiling tiling;
  std::vector<int32_t> tiles, kv_lens;
  // Fixed rounds balanced by cost over work_ctas CTAs (balance_fixed_rounds; FlashInfer's SM90 plan
  // likewise hands each CTA its work, longest first to the least loaded one); empty: the snake.
  std::vector<int32_t> work_order;
  int work_rounds = 0, work_ctas = 0;
  int mean_item_key_tiles = 0;  // FlashAttnParams::mean_item_key_tiles
  bool rows_from_end = false;   // FlashAttnParams::rows_from_end (the tiles' make_flash_attn_pass)
  int l2_groups = 0;  // groups of (kv head, sequence) pairs the list is dealt in (FlashAttnPass::l2_groups)
  DeviceBuffer work_order_d;
  std::vector<float> descales;  // fp8 cache: [2][num_reqs * Hkv], k_scale then v_scale
  DeviceBuffer tiles_d, kv_lens_d, descales_d;
  std::vector<int32_t> request_indices, qo_tile_indices, kv_tile_indices, o_indptr, merge_indptr;
  // device copies
  DeviceBuffer qo_indptr_d, indptr_d, indices_d, last_page_len_d, request_d, qo_tile_d, kv_tile_d, o_indptr_d,
      merge_d, scalars_d;  // scalars: {chunk_pages, num_work}
  std::vector<int32_t> scalars;
};

class FlashInferInstance final : public BackendInstance {
 public:
  FlashInferInstance(const Batch& b, const CommonAttentionMetadata& m, const RunOptions& opts, const FlashInferOptions& fo)
      : batch_(b), meta_(m), opts_(opts), options_(fo), config_(kernel_config(b.spec)),
        hyper_(flashinfer::hyperparameters_of(b.spec)) {
    const AttentionSpec& s = b.spec;
    num_sms_ = query_device_info().num_sms;
    if (num_sms_ <= 0) num_sms_ = opts.num_sms;
    const int64_t T = b.num_tokens();
    const int D = s.head_size_qk;

    // vLLM's reorder: decodes first. Internal token row i holds batch token token_of_[i].
    std::vector<int32_t> query_lens(static_cast<std::size_t>(m.num_reqs));
    for (int r = 0; r < m.num_reqs; ++r) query_lens[static_cast<std::size_t>(r)] = m.query_len(r);
    const std::vector<int> order = reorder_batch_to_split_decodes_and_prefills(query_lens, 1);
    internal_ = permute_requests(m, order);
    for (int r : order)
      for (int i = 0; i < m.query_len(r); ++i) token_of_.push_back(m.query_start_loc[static_cast<std::size_t>(r)] + i);

    // Caches, one per layer; Q and O in internal order, K and V in the batch's (the slot mapping's).
    step_ = MhaStepBuffers(b, m, CacheFormat::flashinfer, opts, stream_, token_of_);

    const int64_t rows = std::max<int64_t>(T, 1) * s.num_q_heads;

    max_grid_ = fi_decode_blocks_per_sm(config_) * num_sms_;
    plan_passes();  // sizes the workspaces; plan() recomputes the same schedule later
    int64_t partial_rows = 1;
    for (const Pass& p : passes_) partial_rows = std::max<int64_t>(partial_rows, p.partial_rows);
    tmp_o_ = DeviceBuffer(partial_rows * s.num_q_heads * D * sizeof(float));
    tmp_lse_ = DeviceBuffer(partial_rows * s.num_q_heads * sizeof(float));
    if (cascade_.use) {
      slot_o_ = DeviceBuffer(cascade_slots_ * rows * D * sizeof(float));
      slot_lse_ = DeviceBuffer(cascade_slots_ * rows * sizeof(float));
    }
    upload_passes();
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void plan() override {
    plan_passes();  // the schedule setup sized the workspaces for: same batch, same device
    upload_passes();
  }

  // Every layer in turn over its own cache, on the one plan (each layer's output is the batch's;
  // the last one's is what fetch() reads).
  void run() override { run_layers(true); }
  void run_attention() override { run_layers(false); }

  void run_layers(bool write) {
    for (layer_ = 0; layer_ < step_.caches.size(); ++layer_) run_layer(write);
    layer_ = 0;
  }

  void run_layer(bool write) {
    const AttentionSpec& s = batch_.spec;
    // The layer's hyper-parameters must be the planned ones (infer_global_hyperparameters).
    flashinfer::check_hyperparameters(hyper_, flashinfer::hyperparameters_of(s));
    if (write) write_cache(step_.k_new.data(), step_.v_new.data());
    for (const Pass& p : passes_) run_pass(p);
    if (cascade_.use) {
      // O = merge(level 0: the shared prefix, in one slot per kv split; level 1: each request's own
      // pages, the last slot), base 2.
      MergeAttnParams mp =
          merge_params(slot_o_.as<float>(), slot_lse_.as<float>(), step_.o.data(), step_.lse.as<float>(),
                       cascade_slots_, static_cast<int>(batch_.num_tokens()), s.num_q_heads, s.head_size_v);
      mp.lse_base2 = 1;
      launch_merge_attn_states(mp, s.dtype, stream_);
    }
  }

  void poison_outputs() override { step_.poison_outputs(batch_.spec, batch_.num_tokens(), stream_); }
  void poison() override {
    poison_outputs();
    for (layer_ = 0; layer_ < step_.caches.size(); ++layer_) write_cache(step_.nan_kv.data(), step_.nan_kv.data());
    layer_ = 0;
  }

  void synchronize() override { stream_.synchronize(); }

  AttentionOutput fetch() override {
    const AttentionSpec& s = batch_.spec;
    stream_.synchronize();
    // Internal rows back to batch order; FlashInfer's base-2 LSE to the natural log.
    AttentionOutput out = download_output(step_.o, step_.lse, s.dtype, batch_.num_tokens(), s.num_q_heads,
                                          s.head_size_v, token_of_, kLn2);
    return out;
  }

  bool on_device() const override { return true; }
  void* stream() const override { return static_cast<void*>(stream_.get()); }

  std::string plan_summary() const override {
    std::string out;
    for (const Pass& p : passes_) {
      if (!out.empty()) out += " ";
      if (p.sm90) {
        out += fmt::format("{}:sm90 tile_q={} work={}", p.name, p.cta_tile_q, p.num_work);
        if (p.num_slots > 1) out += fmt::format(" splits={}", p.num_slots);
        if (!p.work_order.empty()) out += " rounds=balanced";
        if (p.l2_groups > 0) out += fmt::format(" l2_groups={}", p.l2_groups);
        continue;
      }
      out += fmt::format("{}:{} work={} chunk_pages={}", p.name,
                         p.cuda_core_decode ? std::string("cuda_cores") : fmt::format("tile_q={}", p.cta_tile_q),
                         p.num_work, p.chunk_pages);
      if (p.padded_work > p.num_work) out += fmt::format(" padded_work={}", p.padded_work);
    }
    out += cascade_.use ? fmt::format(" cascade=on prefix={}", cascade_.prefix_len)
                        : fmt::format(" cascade=off ({})", cascade_.reason);
    return out;
  }

 private:
  // The schedule of every wrapper (host arrays only).
  void plan_passes() {
    const AttentionSpec& s = batch_.spec;
    const int ps = s.block_size;
    passes_.clear();
    // vLLM's FlashInfer builder never takes the cascade for a cache dtype other than the model's,
    // and asks that before its cost rule: FlashInfer's cascade wrapper has no kv dtype of its own
    // (use_cascade_attention, seed 001). `--cascade on` cannot force it either, as ALiBi or a
    // window cannot for FLASH_ATTN.
    if (opts_.cascade != CascadeMode::off && s.kv_cache_dtype != s.dtype) {
      cascade_ = CascadeChoice{};
      cascade_.reason = fmt::format("kv cache dtype {} differs from the model dtype {}: FlashInfer's cascade "
                                    "wrapper takes one dtype", to_string(s.kv_cache_dtype), to_string(s.dtype));
    } else {
      cascade_ = choose_cascade(batch_, internal_, opts_.cascade, num_sms_);
    }
    const int skip_pages = cascade_.use ? cascade_.prefix_len / ps : 0;
    const flashinfer::FlashInferMetadata md = flashinfer::build_flashinfer_metadata(internal_, ps, skip_pages);
    const int T = static_cast<int>(internal_.num_actual_tokens);
    int level1_slot = -1;
    cascade_slots_ = 0;

    if (cascade_.use) {
      // Level 0: every token against the shared prefix pages, as one query block, no mask.
      Pass p;
      p.name = "cascade_prefix";
      p.causal = false;
      p.token_begin = 0;
      p.num_tokens = T;
      p.slot = 0;
      p.csr.qo_indptr = {0, T};
      p.csr.paged_kv_indptr = {0, skip_pages};
      p.csr.paged_kv_indices.assign(internal_.block_table.begin(), internal_.block_table.begin() + skip_pages);
      p.csr.paged_kv_last_page_len = {ps};
      // On sm_90a, the warp-specialised kernel (FlashInfer's Hopper prefill) with FLASH_ATTN's kv
      // splits writes its fp32 partials straight into slots 0 .. splits - 1; else FlashInfer's
      // own prefill plan and kernel fill slot 0.
      if (!plan_sm90_pass(p)) plan_prefill_pass(p);
      level1_slot = p.num_slots;
      cascade_slots_ = p.num_slots + 1;
      passes_.push_back(std::move(p));
    }
    if (md.split.num_decodes > 0) {
      Pass p;
      p.name = "decode";
      p.causal = internal_.causal;
      p.token_begin = 0;
      p.num_tokens = static_cast<int>(md.split.num_decode_tokens);
      p.slot = level1_slot;
      p.csr = md.decode;
      if (decode_on_tensor_cores(config_)) {
        plan_prefill_pass(p);
      } else {
        const int capture = opts_.graph_capture_size > 0 ? std::max(opts_.graph_capture_size, p.csr.num_reqs()) : 0;
        const flashinfer::DecodePlan dp = flashinfer::plan_decode(p.csr, s.num_kv_heads, ps, max_grid_, capture);
        p.cuda_core_decode = true;
        p.chunk_pages = dp.chunk_pages;
        p.request_indices = dp.request_indices;
        p.kv_tile_indices = dp.kv_tile_indices;
        p.o_indptr = dp.o_indptr;
        p.num_work = dp.num_work();
        p.padded_work = dp.padded_work;
        p.split = dp.split_kv;
        p.partial_rows = p.split ? dp.num_work() : 0;
      }
      passes_.push_back(std::move(p));
    }
    if (md.split.num_prefills > 0) {
      Pass p;
      p.name = "prefill";
      p.causal = internal_.causal;
      p.token_begin = static_cast<int>(md.split.num_decode_tokens);
      p.num_tokens = static_cast<int>(md.split.num_prefill_tokens);
      p.slot = level1_slot;
      p.csr = md.prefill;
      if (!plan_sm90_pass(p)) plan_prefill_pass(p);
      passes_.push_back(std::move(p));
    }
  }

  // The prefill part (or cascade level 0) on the sm_90a kernel, when it can take it: the final O or
  // level 0's slots (level 1 keeps FlashInfer's kernels), a cache of the model dtype or fp8, pages
  // of a multiple of 16 tokens, and no request small enough for a decode tile.
  bool plan_sm90_pass(Pass& p) const {
    const AttentionSpec& s = batch_.spec;
    const bool level0 = p.slot == 0;
    if (!sm90_prefill_enabled(options_) || (p.slot >= 0 && !level0) || (s.kv_cache_dtype != s.dtype && !s.kv_fp8()))
      return false;
    const FlashAttnConfig c = sm90_config(s);
    if (!flash_attn_unsupported_reason(c).empty() || !flash_attn_sm90_available(c)) return false;
    std::vector<int32_t> q_lens, kv_lens;
    for (int r = 0; r < p.csr.num_reqs(); ++r) {
      q_lens.push_back(p.csr.qo_indptr[static_cast<std::size_t>(r) + 1] - p.csr.qo_indptr[static_cast<std::size_t>(r)]);
      kv_lens.push_back(p.csr.kv_len(r, s.block_size));
    }
    FlashAttnPass fp = make_flash_attn_pass(q_lens, kv_lens, p.causal, s.num_q_heads / s.num_kv_heads,
                                            s.head_size_qk, s.num_kv_heads, num_sms_, 0, Sm90Passes::prefills);
    if (!flash_attn_uses_sm90(c, fp.tiling)) return false;
    // Level 0 (all tokens against the shared prefix: few tiles, many keys) takes the split rule's
    // kv splits, each into its own slot; the final O is written unsplit.
    if (!level0) fp.num_splits = 1;
    if (sm90_balance_enabled())
      balance_fixed_rounds(fp, s.num_kv_heads, s.head_size_qk, num_sms_, l2_group_elem_bytes(s.kv_cache_dtype));
    p.work_order = fp.work_order;
    p.work_rounds = fp.work_rounds;
    p.work_ctas = fp.work_ctas;
    p.mean_item_key_tiles = mean_item_key_tiles(fp);
    p.rows_from_end = fp.rows_from_end;
    p.l2_groups = fp.l2_groups;
    p.sm90 = true;
    p.cuda_core_decode = false;
    p.tiling = fp.tiling;
    p.tiles = fp.tiles;
    if (s.kv_fp8()) {
      // The kernel reads a descale per (request, kv head); FlashInfer's scales are one host float
      // each for the layer, so every entry is the same.
      const std::size_t n = kv_lens.size() * static_cast<std::size_t>(s.num_kv_heads);
      p.descales.assign(n, s.k_scale);
      p.descales.insert(p.descales.end(), n, s.v_scale);
    }
    p.kv_lens = std::move(kv_lens);
    p.cta_tile_q = fp.tiling.block_m;
    p.num_work = p.padded_work = fp.num_tiles();
    p.split = false;
    p.partial_rows = 0;
    p.num_slots = fp.num_splits;
    return true;
  }

  void plan_prefill_pass(Pass& p) const {
    const AttentionSpec& s = batch_.spec;
    const flashinfer::PrefillPlan pp =
        flashinfer::plan_prefill(p.csr, s.num_q_heads, s.num_kv_heads, s.head_size_qk, s.block_size, num_sms_);
    p.cuda_core_decode = false;
    p.cta_tile_q = pp.cta_tile_q;
    p.chunk_pages = pp.chunk_pages;
    p.request_indices = pp.request_indices;
    p.qo_tile_indices = pp.qo_tile_indices;
    p.kv_tile_indices = pp.kv_tile_indices;
    p.o_indptr = pp.o_indptr;
    p.merge_indptr = pp.merge_indptr;
    p.num_work = pp.num_work();
    p.padded_work = pp.num_work();
    p.split = pp.split_kv;
    p.partial_rows = pp.split_kv ? pp.o_indptr.back() : 0;
  }

  void upload_passes() {
    for (Pass& p : passes_) {
      p.qo_indptr_d = upload_vector(p.csr.qo_indptr);
      p.indptr_d = upload_vector(p.csr.paged_kv_indptr);
      p.indices_d = upload_vector(p.csr.paged_kv_indices);
      p.last_page_len_d = upload_vector(p.csr.paged_kv_last_page_len);
      p.request_d = upload_vector(p.request_indices);
      p.qo_tile_d = upload_vector(p.qo_tile_indices);
      p.kv_tile_d = upload_vector(p.kv_tile_indices);
      p.o_indptr_d = upload_vector(p.o_indptr);
      p.merge_d = upload_vector(p.merge_indptr);
      p.scalars = {p.chunk_pages, p.num_work};
      p.scalars_d = upload_vector(p.scalars);
      p.tiles_d = upload_vector(p.tiles);
      p.kv_lens_d = upload_vector(p.kv_lens);
      if (!p.work_order.empty()) p.work_order_d = upload_vector(p.work_order);
      if (!p.descales.empty()) p.descales_d = upload_vector(p.descales);
    }
  }

  void run_pass(const Pass& pass) {
    const AttentionSpec& s = batch_.spec;
    const int H = s.num_q_heads, D = s.head_size_qk;
    const int64_t T = batch_.num_tokens();
    const std::size_t es = dtype_size(s.dtype);
    const std::size_t kv_es = dtype_size(s.kv_cache_dtype);
    if (pass.num_tokens == 0) return;
    if (pass.sm90) return run_sm90_pass(pass);

    FiAttentionParams p{};
    p.q = step_.q.as<uint8_t>() + static_cast<std::size_t>(pass.token_begin) * H * D * es;
    p.qo_indptr = pass.qo_indptr_d.as<int32_t>();
    p.kv.k = step_.caches.as<uint8_t>(layer_) + step_.view.k_offset * kv_es;
    p.kv.v = step_.caches.as<uint8_t>(layer_) + step_.view.v_offset * kv_es;
    p.kv.indptr = pass.indptr_d.as<int32_t>();
    p.kv.indices = pass.indices_d.as<int32_t>();
    p.kv.last_page_len = pass.last_page_len_d.as<int32_t>();
    p.kv.page_size = s.block_size;
    p.kv.page_size_div = FastDivU32(static_cast<uint32_t>(s.block_size));
    p.kv.page_stride = step_.view.k.block;
    p.kv.head_stride = step_.view.k.head;
    p.kv.slot_stride = step_.view.k.slot;
    p.request_indices = pass.request_d.as<int32_t>();
    p.qo_tile_indices = pass.cuda_core_decode ? nullptr : pass.qo_tile_d.as<int32_t>();
    p.kv_tile_indices = pass.kv_tile_d.as<int32_t>();
    p.o_indptr = pass.o_indptr_d.as<int32_t>();
    p.kv_chunk_pages = pass.scalars_d.as<int32_t>();
    p.num_work = pass.scalars_d.as<int32_t>() + 1;
    const int64_t row0 = static_cast<int64_t>(pass.token_begin) * H;
    if (pass.slot < 0) {
      p.o = step_.o.as<uint8_t>() + static_cast<std::size_t>(row0) * D * es;
      p.lse = step_.lse.as<float>() + row0;
      p.o_is_f32 = 0;
    } else {
      p.o = slot_o_.as<float>() + (pass.slot * T * H + row0) * D;
      p.lse = slot_lse_.as<float>() + pass.slot * T * H + row0;
      p.o_is_f32 = 1;
    }
    p.tmp_o = tmp_o_.as<float>();
    p.tmp_lse = tmp_lse_.as<float>();
    p.num_qo_heads = H;
    p.num_kv_heads = s.num_kv_heads;
    p.cta_tile_q = pass.cta_tile_q;
    p.sm_scale = hyper_.sm_scale;
    p.logits_soft_cap = hyper_.logits_soft_cap;
    p.window_left = hyper_.window_left;
    p.causal = pass.causal ? 1 : 0;
    p.k_scale = s.kv_fp8() ? s.k_scale : 1.f;
    p.v_scale = s.kv_fp8() ? s.v_scale : 1.f;
    p.kv_fp8_e5m2 = s.kv_cache_dtype == DType::fp8_e5m2 ? 1 : 0;
    if (pass.cuda_core_decode) {
      launch_fi_decode(p, config_, pass.padded_work, stream_);
    } else {
      launch_fi_prefill(p, config_, pass.padded_work, stream_);
    }
    if (!pass.split) return;
    // Split requests: their partial rows -> O (a request or token with one chunk was written
    // directly and is skipped by the merge).
    MergeAttnParams mp = merge_params(tmp_o_.as<float>(), tmp_lse_.as<float>(), p.o, p.lse, 0, pass.num_tokens, H, D);
    mp.seq_partials = pass.cuda_core_decode ? pass.o_indptr_d.as<int32_t>() : pass.merge_d.as<int32_t>();
    mp.tokens_per_seq = 1;
    mp.lse_base2 = 1;
    launch_merge_attn_states(mp, pass.slot < 0 ? s.dtype : DType::f32, stream_);
  }

  // The prefill part through the sm_90a kernel: the CSR page table as an indptr-addressed block
  // table, one split, O and the base-2 LSE straight into this part's rows.
  void run_sm90_pass(const Pass& pass) {
    const AttentionSpec& s = batch_.spec;
    const int H = s.num_q_heads, D = s.head_size_qk;
    const std::size_t es = dtype_size(s.dtype), kv_es = dtype_size(s.kv_cache_dtype);
    const int64_t row0 = static_cast<int64_t>(pass.token_begin) * H;
    FlashAttnParams p{};
    p.q = step_.q.as<uint8_t>() + static_cast<std::size_t>(row0) * D * es;
    p.k_cache = step_.caches.as<uint8_t>(layer_) + step_.view.k_offset * kv_es;
    p.v_cache = step_.caches.as<uint8_t>(layer_) + step_.view.v_offset * kv_es;
    if (s.kv_fp8()) {
      p.k_descale = pass.descales_d.as<float>();
      p.v_descale = p.k_descale + pass.kv_lens.size() * static_cast<std::size_t>(s.num_kv_heads);
      p.kv_fp8_e5m2 = s.kv_cache_dtype == DType::fp8_e5m2 ? 1 : 0;
    }
    p.block_table = pass.indices_d.as<int32_t>();
    p.block_table_indptr = pass.indptr_d.as<int32_t>();
    p.seq_lens = pass.kv_lens_d.as<int32_t>();
    p.query_start_loc = pass.qo_indptr_d.as<int32_t>();
    p.tiles = pass.tiles_d.as<int32_t>();
    p.work_order = pass.work_order.empty() ? nullptr : pass.work_order_d.as<int32_t>();
    p.work_rounds = pass.work_rounds;
    p.work_ctas = pass.work_ctas;
    p.mean_item_key_tiles = pass.mean_item_key_tiles;
    p.rows_from_end = pass.rows_from_end ? 1 : 0;
    p.o = step_.o.as<uint8_t>() + static_cast<std::size_t>(row0) * D * es;
    p.lse = step_.lse.as<float>() + row0;
    p.lse_token_stride = H;
    p.lse_head_stride = 1;
    p.lse_base2 = 1;  // FlashInfer keeps LSEs in log2 units
    if (pass.slot >= 0) {
      // Cascade level 0 (every token, from row 0): split s writes slot pass.slot + s of
      // [slots, num_tokens, Hq, D] fp32 and its LSE.
      p.o_partial = slot_o_.as<float>();
      p.lse_partial = slot_lse_.as<float>();
      p.partial_offset = pass.slot;
    }
    p.num_tokens = pass.num_tokens;
    p.num_q_heads = H;
    p.num_kv_heads = s.num_kv_heads;
    p.head_size = D;
    p.block_size = s.block_size;
    p.num_tiles = pass.num_work;
    p.num_splits = pass.num_slots;
    p.kv_block_stride = step_.view.k.block;
    p.kv_token_stride = step_.view.k.slot;
    p.kv_head_stride = step_.view.k.head;
    p.softmax_scale = hyper_.sm_scale;
    p.softcap = hyper_.logits_soft_cap;
    p.causal = pass.causal ? 1 : 0;
    p.window = hyper_.window_left >= 0 ? hyper_.window_left + 1 : 0;  // keys >= pos - window_left
    launch_flash_attn_fwd(p, sm90_config(s), pass.tiling, stream_);
  }

  void write_cache(const void* k, const void* v) {
    ReshapeAndCacheParams rc = cache_write_params(batch_, step_.view, step_.caches.data(layer_),
                                                  step_.slot_mapping.as<int64_t>(), k, v);
    // The CUDA-core decode and the sm_90a kernel overlap the write (they start at once and wait
    // for it before their new keys) when theirs is the first pass that runs.
    const auto first = std::find_if(passes_.begin(), passes_.end(), [](const Pass& p) { return p.num_tokens > 0; });
    if (first != passes_.end() && (first->cuda_core_decode || first->sm90))
      rc.tokens_per_cta = overlapped_cache_write_tokens_per_cta(rc.num_tokens, num_sms_);
    if (rc.num_tokens > 0) launch_reshape_and_cache_flash(rc, stream_);
  }

  Batch batch_;
  CommonAttentionMetadata meta_;
  CommonAttentionMetadata internal_;  // decodes first
  RunOptions opts_;
  FlashInferOptions options_;
  FiKernelConfig config_;
  flashinfer::PlanHyperparameters hyper_;  // fixed at plan time
  int num_sms_ = 0;
  int max_grid_ = 0;
  Stream stream_;
  CascadeChoice cascade_;
  std::vector<Pass> passes_;
  std::vector<int64_t> token_of_;  // [num_tokens] batch token of each internal row
  int layer_ = 0;                  // the layer run() / poison() is at
  // Caches [num_layers], each (num_pages, 2, page_size, Hkv, D) NHD or (num_pages, 2, Hkv, page_size,
  // D) HND; Q, O and LSE (base 2) in internal order, K, V and the slot mapping in the batch's.
  MhaStepBuffers step_;
  DeviceBuffer tmp_o_, tmp_lse_;   // [partial rows, Hq, D] / [partial rows, Hq] fp32, base 2
  // cascade: [slots, num_tokens, Hq, D] / [slots, num_tokens, Hq] fp32, base 2: level 0's kv splits,
  // then level 1
  DeviceBuffer slot_o_, slot_lse_;
  int cascade_slots_ = 0;
};

class FlashInferBackend final : public Backend {
 public:
  std::string name() const override { return "flashinfer"; }
  std::string description() const override {
    return "FlashInfer plan/run over CSR paged KV: CUDA-core and tensor-core decode, paged prefill, split-KV, "
           "2-level cascade";
  }
  std::vector<std::string> features() const override {
    return {
#if defined(ATTN_QUICK_BUILD)
        "head sizes: 128 (quick build)",
#else
        "head sizes: 64, 128, 256",
#endif
        "dtypes: fp16, bf16; kv cache: model dtype, fp8_e4m3, fp8_e5m2 (k_scale/v_scale host floats)",
        "cache: FlashInfer layout (num_pages, 2, page_size, Hkv, D) NHD or (num_pages, 2, Hkv, page_size, D) HND",
        "decode: CUDA cores for GQA group <= 4 over a 16-bit cache, tensor cores (the prefill kernel) above and over fp8",
        "causal with context, window_left, logits soft cap (fixed at plan time)",
        "split-KV plan (FlashInfer's scheduler), merge in base 2; 2-level cascade over a shared prefix",
        "sm_90a: prefills (16-bit or fp8 cache) on the warp-specialised wgmma kernel (one tile per 128 packed rows, 192 at head size 64)",
        "not supported (skipped with the reason): ALiBi, sinks, chunked local attention, MLA",
    };
  }
  Support available() const override {
    std::string why;
    if (!cuda_device_present(&why)) return Support::no(why);
    return Support::yes();
  }
  Support supports(const AttentionSpec& spec, const Batch& batch) const override {
    const std::string why = unsupported_reason(spec, &batch);
    if (!why.empty()) return Support::no(why);
    return Support::yes();
  }
  std::unique_ptr<BackendInstance> create(const Batch& batch, const CommonAttentionMetadata& m,
                                          const RunOptions& opts) const override {
    const std::string why = unsupported_reason(batch.spec, &batch);
    if (!why.empty()) throw RuntimeError("FLASHINFER cannot run this batch: " + why);
    return std::make_unique<FlashInferInstance>(batch, m, opts, options_);
  }
  explicit FlashInferBackend(const FlashInferOptions& options) : options_(options) {}

 private:
  FlashInferOptions options_;
};

}  // namespace

std::unique_ptr<Backend> make_flashinfer_backend(const FlashInferOptions& options) {
  return std::make_unique<FlashInferBackend>(options);
}

}  // namespace attn
