// FLASHMLA host side: device buffers of one batch, get_mla_metadata in plan(), and the decode
// data flow of vLLM in run():
//   concat_and_cache_mla (new latents into the cache)
//   q' = [q_nope · W_UK[h]^T (512) ‖ q_pe (64)]     batched GEMM over heads (cuBLAS) + copy
//   o_latent, lse = flashmla_decode(q', latent cache)  fp32; split pieces to fp32 scratch
//   merge_attn_states over the split requests (ragged partials: num_splits)
//   o = o_latent · W_UV[h]                           fp32 batched GEMM over heads (cuBLAS), cast
// vLLM keeps o_latent in bf16; here it stays fp32 up to W_UV, because that round trip alone
// adds about one output rounding (measured 1.7 x the bf16 floor with it, against the 1.6 x
// budget; docs/PERF_NOTES.md, FLASHMLA). It costs 4 bytes per latent element written and read
// again (0.3 % of the cache bytes of a 16-head 8k decode).
#include "backends/flashmla/flashmla_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "backends/device_output.hpp"
#include "backends/flashmla/flashmla_prefill.hpp"
#include "backends/flashmla/flashmla_util.hpp"
#include "backends/flashmla/mla_metadata.hpp"
#include "core/device.hpp"
#include "core/device_cache.hpp"
#include "core/dtype.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "kernels/cache/cache_launch.hpp"
#include "kernels/common/cast_launch.hpp"
#include "kernels/common/merge_launch.hpp"
#include "kernels/flashmla/flashmla_launch.hpp"
#include "model/kv_cache.hpp"

namespace attn {
namespace {

using flashmla::cublas_check;
using flashmla::upload;

class FlashMlaInstance final : public BackendInstance {
 public:
  FlashMlaInstance(const Batch& b, const CommonAttentionMetadata& m, const RunOptions& opts, const FlashMlaOptions& fo)
      : batch_(b), meta_(m), opts_(opts), kernel_only_(fo.kernel_only), decode_kernel_(fo.decode_kernel),
        fused_merge_(fo.fused_merge && ab_switch_on("ATTN_FLASHMLA_FUSED_MERGE")),
        kv_evict_first_(ab_switch_on("ATTN_FLASHMLA_EVICT_FIRST")) {
    const AttentionSpec& s = b.spec;
    const MlaDims& md = s.mla;
    num_sms_ = query_device_info().num_sms;
    if (num_sms_ <= 0) num_sms_ = opts.num_sms;
    const int H = s.num_q_heads;
    const std::size_t es = dtype_size(s.dtype);

    // Internal order: decodes, then prefills, each in batch order; token_of_ maps back.
    q_len_ = mla_decode_query_len(b);
    std::vector<int> order;
    for (int r = 0; r < b.num_reqs(); ++r)
      if (b.requests[r].query_len == q_len_) order.push_back(r);
    num_decodes_ = static_cast<int>(order.size());
    std::vector<int32_t> pf_q, pf_ctx;
    for (int r = 0; r < b.num_reqs(); ++r)
      if (b.requests[r].query_len != q_len_) {
        order.push_back(r);
        pf_q.push_back(b.requests[r].query_len);
        pf_ctx.push_back(b.requests[r].context_len);
      }
    std::vector<int32_t> seq_lens, block_table;
    std::vector<int64_t> slot_mapping;
    for (int r : order) {
      seq_lens.push_back(m.seq_lens[r]);
      block_table.insert(block_table.end(), m.block_table.begin() + int64_t{r} * m.max_blocks_per_req,
                         m.block_table.begin() + int64_t{r + 1} * m.max_blocks_per_req);
      for (int i = 0; i < b.requests[r].query_len; ++i) {
        token_of_.push_back(b.query_start_loc[r] + i);
        slot_mapping.push_back(m.slot_mapping[b.query_start_loc[r] + i]);
      }
    }
    decode_seq_lens_.assign(seq_lens.begin(), seq_lens.begin() + num_decodes_);
    const int64_t T = b.num_tokens();

    layout_ = make_cache_layout(b, CacheFormat::flashmla);
    view_ = cache_view(layout_);
    caches_ = LayerCaches(b, layout_, opts.num_layers, stream_, opts.nan_all_but_last_layer,
                          opts.nan_keys);  // one per layer

    // Inputs in the model dtype, internal order: q [T, H, 192], latent [T, 576]; W_UK and W_UV
    // [H, 512, 128] (W_UV also as fp32 for the decode's fp32 up-projection).
    std::vector<uint8_t> q(static_cast<std::size_t>(T * H * md.qk_head_dim()) * es);
    std::vector<uint8_t> latent(static_cast<std::size_t>(T * md.latent_dim()) * es);
    int64_t t = 0;
    for (int r : order) {
      for (int i = 0; i < b.requests[r].query_len; ++i, ++t) {
        const int pos = b.requests[r].context_len + i;
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < md.qk_head_dim(); ++d)
            store_as(s.dtype, q.data(), static_cast<std::size_t>((t * H + h) * md.qk_head_dim() + d), b.q(r, pos, h, d));
        const bool nan_k_pe = nan_in_input(opts.nan_keys, r, pos, 0);  // RunOptions::nan_keys: k_pe only
        for (int d = 0; d < md.latent_dim(); ++d)
          store_as(s.dtype, latent.data(), static_cast<std::size_t>(t * md.latent_dim() + d),
                   nan_k_pe && d >= md.kv_lora_rank ? std::numeric_limits<float>::quiet_NaN()
                                                    : b.latent_input(r, pos, d));
      }
    }
    const std::size_t wn = static_cast<std::size_t>(H) * md.kv_lora_rank * md.v_head_dim;
    std::vector<uint8_t> w_uk(wn * es), w_uv(wn * es);
    std::vector<float> w_uv32(wn);
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < md.kv_lora_rank; ++c)
        for (int d = 0; d < md.v_head_dim; ++d) {
          const std::size_t i = (static_cast<std::size_t>(h) * md.kv_lora_rank + c) * md.v_head_dim + d;
          store_as(s.dtype, w_uk.data(), i, b.w_uk(h, c, d));
          store_as(s.dtype, w_uv.data(), i, b.w_uv(h, c, d));
          w_uv32[i] = b.w_uv(h, c, d);  // values of the model dtype
        }
    q_ = upload(q);
    latent_ = upload(latent);
    w_uk_ = upload(w_uk);
    w_uv_ = upload(w_uv);
    w_uv32_ = upload(w_uv32);
    nan_latent_ = DeviceBuffer(std::max<int64_t>(T, 1) * md.latent_dim() * es);
    launch_fill_nan(nan_latent_.data(), std::max<int64_t>(T, 1) * md.latent_dim(), s.dtype, stream_);

    block_table_ = upload(block_table);
    seq_lens_ = upload(seq_lens);
    slot_mapping_ = upload(slot_mapping);

    const int64_t rows = std::max<int64_t>(T, 1) * H;
    const int64_t decode_rows = std::max<int64_t>(decode_tokens(), 1) * H;
    q_abs_ = DeviceBuffer(decode_rows * md.latent_dim() * es);
    o_latent_ = DeviceBuffer(decode_rows * md.kv_lora_rank * sizeof(float));
    o32_ = DeviceBuffer(decode_rows * md.v_head_dim * sizeof(float));
    o_ = DeviceBuffer(rows * md.v_head_dim * es);
    lse_ = DeviceBuffer(rows * sizeof(float));

    // The decode schedule; buffers are sized for any schedule of this batch shape, so that
    // plan() may run again (new lengths) under a captured graph: the grid is (m_blocks, parts),
    // fixed by the SM count and heads, and every partition adds at most one piece to the
    // batch's requests, so num_splits[batch] <= batch + parts.
    schedule_ = flashmla::get_mla_metadata(decode_seq_lens_, std::max(q_len_, 1) * H, 1, num_sms_);
    tile_md_ = DeviceBuffer(static_cast<std::size_t>(schedule_.num_parts) * flashmla::kMetadataSize * sizeof(int32_t));
    num_splits_ = DeviceBuffer((static_cast<std::size_t>(num_decodes_) + 1) * sizeof(int32_t));
    const int64_t max_pieces = num_decodes_ + schedule_.num_parts;
    o_accum_ = DeviceBuffer(max_pieces * std::max(q_len_, 1) * H * md.kv_lora_rank * sizeof(float));
    lse_accum_ = DeviceBuffer(max_pieces * std::max(q_len_, 1) * H * sizeof(float));
    // One count per (request, m_block), zeroed once: the kernel's CTA that counts a request's last
    // piece zeroes it again (FlashMlaDecodeParams::merge_counters).
    const int64_t m_blocks = (int64_t{std::max(q_len_, 1)} * H + kFlashMlaBlockM - 1) / kFlashMlaBlockM;
    merge_counters_ = DeviceBuffer(static_cast<std::size_t>(std::max(num_decodes_, 1) * m_blocks) * sizeof(int32_t));
    merge_counters_.memset_async(0, stream_);
    upload_schedule();

    if (!pf_q.empty()) prefill_ = std::make_unique<MlaPrefill>(s, pf_q, pf_ctx, fo.workspace_tokens, stream_);

    cublas_check(cublasCreate(&cublas_), "cublasCreate");
    cublas_check(cublasSetStream(cublas_, stream_.get()), "cublasSetStream");
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  ~FlashMlaInstance() override {
    if (cublas_) cublasDestroy(cublas_);
  }

  // The decode schedule (get_mla_metadata); the prefill's chunk plan depends on the batch shape
  // only and is made once in the constructor.
  void plan() override {
    schedule_ = flashmla::get_mla_metadata(decode_seq_lens_, std::max(q_len_, 1) * batch_.spec.num_q_heads, 1, num_sms_);
    upload_schedule();
  }

  // Every layer in turn over its own cache, on the one schedule (each layer's output is the
  // batch's; the last one's is what fetch() reads).
  void run() override { run_layers(true); }
  // kernel_only: run() writes the caches once already, so both time the kernel alone.
  void run_attention() override { run_layers(false); }

  void run_layers(bool write) {
    if (kernel_only_) {
      // Caches and q' once, as the whole path would leave them: the kernel reads real values.
      for (layer_ = 0; layer_ < caches_.size(); ++layer_) {
        if (!absorbed_) write_cache(latent_.data());
        if (!absorbed_ && layer_ == 0) absorb_q();
        run_decode_kernel();
      }
      layer_ = 0;
      absorbed_ = true;
      return;
    }
    for (layer_ = 0; layer_ < caches_.size(); ++layer_) run_layer(write);
    layer_ = 0;
  }

  void run_layer(bool write) {
    if (write) write_cache(latent_.data());
    absorb_q();
    run_decode_kernel();
    up_project_o();
    if (prefill_) {
      const AttentionSpec& s = batch_.spec;
      const std::size_t es = dtype_size(s.dtype);
      const int64_t td = decode_tokens();
      MlaPrefillInputs in;
      in.q = static_cast<const uint8_t*>(q_.data()) + td * s.num_q_heads * s.mla.qk_head_dim() * es;
      in.kv_cache = caches_.data(layer_);
      in.block_table = block_table_.as<int32_t>() + int64_t{num_decodes_} * meta_.max_blocks_per_req;
      in.block_table_stride = meta_.max_blocks_per_req;
      in.kv_block_stride = view_.k.block;
      in.block_size = s.block_size;
      in.w_uk = w_uk_.data();
      in.w_uv = w_uv_.data();
      in.o = static_cast<uint8_t*>(o_.data()) + td * s.num_q_heads * s.mla.v_head_dim * es;
      in.lse = lse_.as<float>() + td * s.num_q_heads;
      prefill_->run(in, cublas_, stream_);
    }
  }

  void poison() override {
    poison_outputs();
    for (layer_ = 0; layer_ < caches_.size(); ++layer_) write_cache(nan_latent_.data());
    layer_ = 0;
  }

  // O and LSE, and the decode's intermediates (a step that skipped one would show).
  void poison_outputs() override {
    const AttentionSpec& s = batch_.spec;
    const int64_t rows = batch_.num_tokens() * s.num_q_heads, decode_rows = decode_tokens() * s.num_q_heads;
    launch_fill_nan(o_.data(), rows * s.mla.v_head_dim, s.dtype, stream_);
    launch_fill_nan(lse_.data(), rows, DType::f32, stream_);
    launch_fill_nan(o_latent_.data(), decode_rows * s.mla.kv_lora_rank, DType::f32, stream_);
    launch_fill_nan(o32_.data(), decode_rows * s.mla.v_head_dim, DType::f32, stream_);
    launch_fill_nan(q_abs_.data(), decode_rows * s.mla.latent_dim(), s.dtype, stream_);
  }

  void synchronize() override { stream_.synchronize(); }

  AttentionOutput fetch() override {
    if (kernel_only_)
      throw RuntimeError("FLASHMLA kernel_only instance: run() skips W_UK/W_UV and produces no O (timing only)");
    const AttentionSpec& s = batch_.spec;
    stream_.synchronize();
    // Back to batch order.
    AttentionOutput out =
        download_output(o_, lse_, s.dtype, batch_.num_tokens(), s.num_q_heads, s.head_size_v, token_of_);
    // vLLM's data flow rounds one intermediate to the model dtype before O: the absorbed q_latent
    // (decode; o_latent stays fp32 here) or the up-projected K/V (prefill). The reference of that
    // flow includes the rounding.
    out.mla_flow_decode_q_len = mla_decode_query_len(batch_);
    return out;
  }

  bool on_device() const override { return true; }
  void* stream() const override { return static_cast<void*>(stream_.get()); }
  std::string plan_summary() const override {
    int split_reqs = 0, idle = 0;
    for (int r = 0; r < num_decodes_; ++r) split_reqs += schedule_.splits_of(r) > 1;
    for (int i = 0; i < schedule_.num_parts; ++i) idle += schedule_.partition(i).begin_req > schedule_.partition(i).end_req;
    std::string out = fmt::format("cascade=off (mla) decodes={} q_len={} parts={} payload={} pieces={} split_reqs={} idle_parts={}",
                                  num_decodes_, q_len_, schedule_.num_parts, schedule_.payload, schedule_.num_splits.back(),
                                  split_reqs, idle);
    if (num_decodes_ > 0) {
      FlashMlaDecodeParams p{};
      p.q_len = q_len_;
      p.num_heads = batch_.spec.num_q_heads;
      p.num_cache_blocks = layout_.num_blocks;
      const std::string kernel = flashmla_decode_kernel_name(p, batch_.spec.dtype, decode_kernel_);
      out += " decode_kernel=";
      out += kernel;
      // Who merges the split requests: the seesaw kernel itself (up to kFlashMlaMergeMaxPieces
      // pieces) or the combine kernel.
      if (split_reqs > 0) out += fused_merge_ && kernel == "wgmma" ? " merge=kernel" : " merge=combine";
    }
    if (prefill_) {
      out += ' ';
      out += prefill_->summary();
    }
    if (kernel_only_) out += " kernel_only";
    return out;
  }

 private:
  int64_t decode_tokens() const { return int64_t{num_decodes_} * q_len_; }

  void upload_schedule() {
    max_pieces_ = 1;
    for (int r = 0; r < num_decodes_; ++r) max_pieces_ = std::max(max_pieces_, schedule_.splits_of(r));
    if (schedule_.num_parts > 0)
      tile_md_.upload_async(schedule_.tile_scheduler_metadata.data(),
                            schedule_.tile_scheduler_metadata.size() * sizeof(int32_t), stream_);
    num_splits_.upload_async(schedule_.num_splits.data(), schedule_.num_splits.size() * sizeof(int32_t), stream_);
  }

  // The split-KV kernel over the decodes, then the combine of their split requests.
  void run_decode_kernel() {
    const AttentionSpec& s = batch_.spec;
    const int td = static_cast<int>(decode_tokens());
    if (td == 0) return;
    FlashMlaDecodeParams p{};
    p.q = q_abs_.data();
    p.kv_cache = caches_.data(layer_);
    p.block_table = block_table_.as<int32_t>();
    p.seq_lens = seq_lens_.as<int32_t>();
    p.tile_scheduler_metadata = tile_md_.as<int32_t>();
    p.num_splits = num_splits_.as<int32_t>();
    p.o = o_latent_.as<float>();
    p.lse = lse_.as<float>();
    p.o_accum = o_accum_.as<float>();
    p.lse_accum = lse_accum_.as<float>();
    p.batch = num_decodes_;
    p.q_len = q_len_;
    p.num_heads = s.num_q_heads;
    p.block_table_stride = meta_.max_blocks_per_req;
    p.num_parts = schedule_.num_parts;
    p.kv_block_stride = view_.k.block;
    p.num_cache_blocks = layout_.num_blocks;
    p.softmax_scale = s.scale;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    ATTN_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    p.merge_counters = fused_merge_ ? merge_counters_.as<int32_t>() : nullptr;
    // The cache evict-first where there are partials to keep in L2 for the merge: with every request
    // in one piece it only makes the second m_block CTA of a 128-head partition miss L2 more often
    // (64 x 4k: 1.002-1.004 x the time). A graph being captured keeps it for later schedules.
    p.kv_evict_first = kv_evict_first_ && (max_pieces_ > 1 || capture != cudaStreamCaptureStatusNone) ? 1 : 0;
    const bool merged = launch_flashmla_decode(p, s.dtype, decode_kernel_, stream_);

    // Combine: every (token, head) row is visited; requests in one piece (and, where the kernel
    // merged them, requests of up to kFlashMlaMergeMaxPieces pieces) return at once. It is left out
    // where that leaves it nothing to merge, except in a graph being captured: a replay must serve
    // whatever schedule plan() uploads later.
    const int merged_upto = merged ? kFlashMlaMergeMaxPieces : 1;
    if (max_pieces_ <= merged_upto && capture == cudaStreamCaptureStatusNone) return;
    MergeAttnParams mp{};
    mp.o_partial = o_accum_.as<float>();
    mp.lse_partial = lse_accum_.as<float>();
    mp.o = o_latent_.data();
    mp.lse = lse_.as<float>();
    mp.lse_token_stride = s.num_q_heads;
    mp.lse_head_stride = 1;
    mp.num_partials = 0;
    mp.num_tokens = td;
    mp.num_heads = s.num_q_heads;
    mp.head_size = s.mla.kv_lora_rank;
    mp.seq_partials = num_splits_.as<int32_t>();
    mp.tokens_per_seq = q_len_;
    mp.merged_upto = merged_upto;
    launch_merge_attn_states(mp, DType::f32, stream_);
  }

  void write_cache(const void* latent) {
    const AttentionSpec& s = batch_.spec;
    ConcatAndCacheMlaParams c{};
    c.kv_c = latent;
    c.k_pe = static_cast<const uint8_t*>(latent) + s.mla.kv_lora_rank * dtype_size(s.dtype);
    c.kv_c_stride = s.mla.latent_dim();
    c.k_pe_stride = s.mla.latent_dim();
    c.slot_mapping = slot_mapping_.as<int64_t>();
    c.cache = caches_.data(layer_);
    c.block_stride = view_.k.block;
    c.entry_stride = view_.k.slot;
    c.num_tokens = batch_.num_tokens();
    c.kv_lora_rank = s.mla.kv_lora_rank;
    c.rope_dim = s.mla.qk_rope_head_dim;
    c.block_size = s.block_size;
    c.scale = s.k_scale;
    c.input_dtype = s.dtype;
    c.cache_dtype = s.kv_cache_dtype;
    if (c.num_tokens > 0) launch_concat_and_cache_mla(c, stream_);
  }

  cudaDataType_t cuda_type() const { return batch_.spec.dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF; }

  // q'[t, h, 0:512] = q_nope[t, h] · W_UK[h]^T, q'[t, h, 512:576] = q_pe[t, h]. Column-major
  // view per head h: q'^T (512 x T, ld H*576) = W_UK[h] (col-major 128 x 512, op T) · q_nope^T
  // (128 x T, ld H*192).
  void absorb_q() {
    const AttentionSpec& s = batch_.spec;
    const MlaDims& md = s.mla;
    const int T = static_cast<int>(decode_tokens()), H = s.num_q_heads;
    if (T == 0) return;
    const float one = 1.f, zero = 0.f;
    cublas_check(cublasGemmStridedBatchedEx(
                     cublas_, CUBLAS_OP_T, CUBLAS_OP_N, md.kv_lora_rank, T, md.qk_nope_head_dim, &one, w_uk_.data(),
                     cuda_type(), md.qk_nope_head_dim, int64_t{md.kv_lora_rank} * md.qk_nope_head_dim, q_.data(),
                     cuda_type(), H * md.qk_head_dim(), md.qk_head_dim(), &zero, q_abs_.data(), cuda_type(),
                     H * md.latent_dim(), md.latent_dim(), H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "W_UK absorption GEMM");
    const std::size_t es = dtype_size(s.dtype);
    ATTN_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(q_abs_.data()) + md.kv_lora_rank * es, md.latent_dim() * es,
                                      static_cast<const uint8_t*>(q_.data()) + md.qk_nope_head_dim * es,
                                      md.qk_head_dim() * es, md.qk_rope_head_dim * es, static_cast<std::size_t>(T) * H,
                                      cudaMemcpyDeviceToDevice, stream_));
  }

  // o[t, h] = o_latent[t, h] · W_UV[h] in fp32: o^T (128 x T, ld H*128) = W_UV[h] (col-major
  // 128 x 512) · o_latent^T (512 x T, ld H*512); then o rounded once to the model dtype.
  void up_project_o() {
    const AttentionSpec& s = batch_.spec;
    const MlaDims& md = s.mla;
    const int T = static_cast<int>(decode_tokens()), H = s.num_q_heads;
    if (T == 0) return;
    const float one = 1.f, zero = 0.f;
    cublas_check(cublasGemmStridedBatchedEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, md.v_head_dim, T, md.kv_lora_rank, &one,
                                            w_uv32_.data(), CUDA_R_32F, md.v_head_dim,
                                            int64_t{md.kv_lora_rank} * md.v_head_dim, o_latent_.data(), CUDA_R_32F,
                                            H * md.kv_lora_rank, md.kv_lora_rank, &zero, o32_.data(), CUDA_R_32F,
                                            H * md.v_head_dim, md.v_head_dim, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "W_UV up-projection GEMM");
    launch_cast_from_f32(o32_.as<float>(), o_.data(), int64_t{T} * H * md.v_head_dim, s.dtype, stream_);
  }

  Batch batch_;
  CommonAttentionMetadata meta_;
  RunOptions opts_;
  int num_sms_ = 0;
  int q_len_ = 0;               // of the decodes (0: none)
  int num_decodes_ = 0;         // requests [0, num_decodes_) of the internal order
  std::vector<int64_t> token_of_;        // [T] batch token of each internal token
  std::vector<int32_t> decode_seq_lens_;  // [num_decodes]
  std::unique_ptr<MlaPrefill> prefill_;   // null without prefills
  bool kernel_only_ = false;  // run() = decode kernel + combine (FlashMlaOptions)
  FlashMlaKernel decode_kernel_ = FlashMlaKernel::automatic;
  bool absorbed_ = false;
  Stream stream_;
  cublasHandle_t cublas_ = nullptr;
  KvCacheLayout layout_;
  CacheView view_;
  flashmla::MlaMetadata schedule_;
  bool fused_merge_ = true;      // FlashMlaOptions::fused_merge
  int max_pieces_ = 1;           // the most pieces the schedule cuts a request into
  bool kv_evict_first_ = true;   // FlashMlaDecodeParams::kv_evict_first (ATTN_FLASHMLA_EVICT_FIRST=0: off)
  LayerCaches caches_;          // [num_layers] each [num_blocks, 64, 576] model dtype
  int layer_ = 0;               // the layer run() / poison() is at
  DeviceBuffer q_;              // [T, H, 192] model dtype: q_nope (128) ‖ q_pe (64)
  DeviceBuffer latent_;         // [T, 576] new tokens' kv_c ‖ k_pe
  DeviceBuffer nan_latent_;     // [T, 576] NaN: poison() writes it into the new slots
  DeviceBuffer w_uk_;           // [H, 512, 128] model dtype
  DeviceBuffer w_uv_;           // [H, 512, 128] model dtype (prefill up-projection)
  DeviceBuffer w_uv32_;         // [H, 512, 128] fp32 holding the same values (decode)
  DeviceBuffer block_table_;    // [batch, max_blocks_per_req]
  DeviceBuffer seq_lens_;       // [batch]
  DeviceBuffer slot_mapping_;   // [T] int64
  DeviceBuffer q_abs_;          // [T_decode, H, 576] absorbed query
  DeviceBuffer o_latent_;       // [T_decode, H, 512] fp32
  DeviceBuffer o32_;            // [T_decode, H, 128] fp32 W_UV product
  DeviceBuffer o_;              // [T, H, 128] model dtype
  DeviceBuffer lse_;            // [T, H] float
  DeviceBuffer tile_md_;        // [parts, 8]
  DeviceBuffer num_splits_;     // [batch + 1]
  DeviceBuffer o_accum_;        // [batch + parts, q_len * H, 512] float
  DeviceBuffer lse_accum_;      // [batch + parts, q_len * H] float
  DeviceBuffer merge_counters_; // [batch, m_blocks] int32, zero between launches
};

class FlashMlaBackend final : public Backend {
 public:
  explicit FlashMlaBackend(const FlashMlaOptions& options) : options_(options) {}
  std::string name() const override { return "flashmla"; }
  std::string description() const override {
    return "MLA: absorbed 576-wide split-KV decode (get_mla_metadata + LSE combine), chunked-context prefill on FA hd192";
  }
  std::vector<std::string> features() const override {
    return {
        "MLA only (DeepSeek-V2/V3 dims 512/64/128/128), fp16/bf16, latent cache (num_blocks, 64, 576)",
        "decodes of 1 or 2 new tokens (causal between them) on the split-KV kernel, any head count",
        "prefills (MLA common): chunked context (gather, up-project, FA hd192 non-causal, LSE merge) + causal self pass",
        "tile scheduler get_mla_metadata (64-key blocks, fixed cost 5 per piece), split pieces merged by LSE",
        "W_UK absorption and W_UV up-projection as cuBLAS batched GEMMs",
        "not supported: ALiBi, sliding window, soft cap, sinks, fp8 cache, non-decoder attention",
    };
  }
  Support available() const override {
    std::string why;
    if (!cuda_device_present(&why)) return Support::no(why);
    const DeviceInfo d = query_device_info();
    if (d.cc_major < 9)
      return Support::no("FlashMLA is not supported on this device (compute capability " + d.cc() +
                         "; the decode tile needs sm_90's 227 KB of shared memory)");
    return Support::yes();
  }
  Support supports(const AttentionSpec& spec, const Batch& batch) const override {
    const std::string why = flashmla_unsupported_reason(spec, batch);
    return why.empty() ? Support::yes() : Support::no(why);
  }
  std::unique_ptr<BackendInstance> create(const Batch& batch, const CommonAttentionMetadata& m,
                                          const RunOptions& opts) const override {
    const std::string why = flashmla_unsupported_reason(batch.spec, batch);
    if (!why.empty()) throw RuntimeError("FLASHMLA cannot run this batch: " + why);
    return std::make_unique<FlashMlaInstance>(batch, m, opts, options_);
  }

 private:
  FlashMlaOptions options_;
};

}  // namespace

std::string flashmla_unsupported_reason(const AttentionSpec& s, const Batch& b) {
  if (!s.use_mla) return "FLASHMLA serves MLA layers only (use_mla = false)";
  if (s.alibi || s.sliding_window > 0 || s.logits_soft_cap > 0)
    return "FlashMLAImpl does not support one of the following: alibi_slopes, sliding_window, blocksparse_params, "
           "logits_soft_cap";
  if (!s.causal())
    return "Encoder self-attention and encoder/decoder cross-attention are not implemented for FlashMLAImpl";
  if (s.kv_fp8()) return "FlashMLA with FP8 KV cache not yet supported";
  if (s.sinks) return "attention sinks are not supported by FlashMLA";
  if (b.local_attention_chunk > 0) return "chunked local attention is not supported by FlashMLA";
  if (s.dtype != DType::bf16 && s.dtype != DType::f16)
    return fmt::format("model dtype {} not supported (fp16 or bf16)", to_string(s.dtype));
  if (s.kv_cache_dtype != s.dtype) return fmt::format("kv cache dtype {} must equal the model dtype", to_string(s.kv_cache_dtype));
  if (s.block_size != kFlashMlaBlockN) return fmt::format("block size {} not supported (FlashMLA pages hold 64 tokens)", s.block_size);
  const MlaDims& md = s.mla;
  if (s.num_kv_heads != 1 || md.kv_lora_rank != kFlashMlaHeadDimV || md.latent_dim() != kFlashMlaHeadDimK ||
      md.qk_nope_head_dim != 128 || md.v_head_dim != 128)
    return fmt::format("MLA dims kv_lora_rank {} rope {} nope {} v {} with {} kv heads not supported (512/64/128/128, 1)",
                       md.kv_lora_rank, md.qk_rope_head_dim, md.qk_nope_head_dim, md.v_head_dim, s.num_kv_heads);
  return {};
}

std::unique_ptr<Backend> make_flashmla_backend(const FlashMlaOptions& options) {
  return std::make_unique<FlashMlaBackend>(options);
}

}  // namespace attn
