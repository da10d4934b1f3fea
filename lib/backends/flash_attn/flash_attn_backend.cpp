// FLASH_ATTN host side: device buffers of one batch, the schedule, and the launch sequence
// reshape_and_cache_flash -> forward pass(es) -> merge_attn_states.
#include "backends/flash_attn/flash_attn_backend.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "backends/device_output.hpp"
#include "backends/mha_step.hpp"
#include "backends/flash_attn/flash_attn_plan.hpp"
#include "core/device.hpp"
#include "core/device_upload.hpp"
#include "core/device_cache.hpp"
#include "core/env.hpp"
#include "kernels/cache/cache_launch.hpp"
#include "kernels/common/merge_launch.hpp"
#include "kernels/flash_attn/flash_attn_launch.hpp"
#include "model/kv_cache.hpp"

namespace attn {
namespace {

class FlashAttnInstance final : public BackendInstance {
 public:
  FlashAttnInstance(const Batch& b, const CommonAttentionMetadata& m, const RunOptions& opts)
      : batch_(b), meta_(m), opts_(opts), config_(make_flash_attn_config(b.spec)) {
    const AttentionSpec& s = b.spec;
    const DeviceInfo device = query_device_info();
    num_sms_ = device.num_sms;
    if (num_sms_ <= 0) num_sms_ = opts.num_sms;
    stream_share_ = flash_attn_stream_share(device);
    const int64_t T = b.num_tokens();
    const int D = s.head_size_qk;

    // Caches, one per layer: NaN everywhere, then the context tokens (bit-identical to
    // Batch::k()/v()); the step's inputs and outputs.
    step_ = MhaStepBuffers(b, m, CacheFormat::flash_attn, opts, stream_);

    block_table_ = upload_vector(m.block_table);
    seq_lens_ = upload_vector(m.seq_lens);
    small_cache_ = b.num_blocks * s.block_size < (int64_t{1} << 31) &&
                   b.num_tokens() * s.num_kv_heads * s.head_size_qk / 8 < (int64_t{1} << 31);
    from_scratch_ = m.num_reqs > 0;
    for (int r = 0; r < m.num_reqs; ++r) from_scratch_ = from_scratch_ && m.seq_lens[r] == m.query_len(r);
    query_start_loc_ = upload_vector(m.query_start_loc);
    if (s.kv_fp8()) {
      k_descale_ = upload_vector(std::vector<float>(static_cast<std::size_t>(m.num_reqs) * s.num_kv_heads, s.k_scale));
      v_descale_ = upload_vector(std::vector<float>(static_cast<std::size_t>(m.num_reqs) * s.num_kv_heads, s.v_scale));
    }
    if (!b.alibi.empty()) alibi_ = upload_vector(b.alibi);
    if (!b.sinks.empty()) sinks_ = upload_vector(b.sinks);

    // The schedule decides the workspace; plan() recomputes the same schedule later.
    schedule_ = plan_flash_attn(b, m, opts, num_sms_, stream_share_);
    const int partials = schedule_.num_partials();
    if (partials > 0) {
      o_partial_ = DeviceBuffer(static_cast<std::size_t>(partials) * T * s.num_q_heads * D * sizeof(float));
      lse_partial_ = DeviceBuffer(static_cast<std::size_t>(partials) * T * s.num_q_heads * sizeof(float));
    }
    // Tile lists hold at most one entry per (sequence, m_block) of the smallest block_m.
    int64_t max_tiles = 1;
    for (int r = 0; r < m.num_reqs; ++r) max_tiles += (static_cast<int64_t>(m.query_len(r)) * s.gqa_ratio() + 15) / 16;
    tiles_ = DeviceBuffer(max_tiles * 2 * sizeof(int32_t));
    prefix_tiles_ = DeviceBuffer((T * s.gqa_ratio() / 16 + 2) * 2 * sizeof(int32_t));
    prefix_meta_ = DeviceBuffer(3 * sizeof(int32_t));  // query_start_loc {0, T}, seq_lens {prefix}
    work_counters_ = DeviceBuffer(4 * sizeof(int32_t));
    work_counters_.memset_async(0, stream_);  // then zero after every launch (the kernel's last CTA)
    upload_schedule();
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void plan() override {
    schedule_ = plan_flash_attn(batch_, meta_, opts_, num_sms_, stream_share_);
    upload_schedule();
  }

  // Every layer in turn: its cache write, its passes, its merge (each layer's output is the
  // batch's; the last one's is what fetch() reads).
  void run() override { run_layers(true); }
  void run_attention() override { run_layers(false); }

  void run_layers(bool write) {
    for (layer_ = 0; layer_ < step_.caches.size(); ++layer_) run_layer(write);
    layer_ = 0;
  }

  void run_layer(bool write) {
    const AttentionSpec& s = batch_.spec;
    // A pass of decodes alone on the decode tiling, or a prefill from scratch on the sm_90a kernel,
    // writes the step's new keys itself (FlashAttnParams::fused_cache_write): no write kernel, and
    // no launch, ahead of it.
    const bool fused = write && fused_write_;
    if (write && !fused) write_cache(step_.k_new.data(), step_.v_new.data());

    FlashAttnParams p = base_params();
    if (fused) {
      p.fused_cache_write = 1;
      p.after_cache_write = 0;
      p.k_new = step_.k_new.data();
      p.v_new = step_.v_new.data();
      p.new_kv_stride = int64_t{s.num_kv_heads} * s.head_size_qk;
      p.slot_mapping = step_.slot_mapping.as<int64_t>();
    }
    if (schedule_.cascade) {
      // Prefix: every query token against the shared blocks (block-table row 0), no mask.
      FlashAttnParams pre = p;
      pre.query_start_loc = prefix_meta_.as<int32_t>();
      pre.seq_lens = prefix_meta_.as<int32_t>() + 2;
      pre.tiles = prefix_tiles_.as<int32_t>();
      pre.num_tiles = schedule_.prefix.num_tiles();
      pre.num_splits = schedule_.prefix.num_splits;
      pre.causal = 0;
      pre.sinks = nullptr;  // counted once, in the suffix pass
      pre.partial_offset = 0;
      pre.split_cluster = 0;
      pre.work_counters = nullptr;
      pre.claim_front_ctas = 0;
      pre.work_order = nullptr;  // the main pass's list
      pre.work_rounds = pre.work_ctas = 0;
      pre.mean_item_key_tiles = prefix_item_tiles_;
      pre.rows_from_end = schedule_.prefix.rows_from_end ? 1 : 0;
      launch_flash_attn_fwd(pre, config_, schedule_.prefix.tiling, stream_);
      p.kv_begin = schedule_.prefix_len;
      p.partial_offset = schedule_.prefix.num_splits;
    }
    if (schedule_.num_partials() == 0) {
      p.o_partial = nullptr;
      p.lse_partial = nullptr;
    }
    launch_flash_attn_fwd(p, config_, schedule_.main.tiling, stream_);
    if (schedule_.num_partials() > 0) {
      const MergeAttnParams mp =
          merge_params(o_partial_.as<float>(), lse_partial_.as<float>(), step_.o.data(), step_.lse.as<float>(),
                       schedule_.num_partials(), static_cast<int>(batch_.num_tokens()), s.num_q_heads, s.head_size_v);
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
    AttentionOutput out =
        download_output(step_.o, step_.lse, s.dtype, batch_.num_tokens(), s.num_q_heads, s.head_size_v);
    // The fp8 tensor-core path rounds P to e4m3 before P V (its own budget, DESIGN.md).
    if (fp8_mma()) out.coarse_roundings.push_back(DType::fp8_e4m3);
    return out;
  }

  bool on_device() const override { return true; }
  void* stream() const override { return static_cast<void*>(stream_.get()); }
  std::string plan_summary() const override {
    return schedule_.summary() + (fp8_mma() ? " mma=e4m3" : "") + (fused_write_ ? " write=in-kernel" : "");
  }

 private:
  // Whether a pass runs on fp8 tensor cores (flash_attn_uses_fp8_mma).
  bool fp8_mma() const {
    return flash_attn_uses_fp8_mma(config_, schedule_.main.tiling) ||
           (schedule_.cascade && flash_attn_uses_fp8_mma(config_, schedule_.prefix.tiling));
  }

  // The schedule's host-side choices, then its lists to the device.
  void upload_schedule() {
    fused_write_ = fused_cache_write();
    main_item_tiles_ = mean_item_key_tiles(schedule_.main);
    prefix_item_tiles_ = schedule_.cascade ? mean_item_key_tiles(schedule_.prefix) : 0;
    const auto& main = schedule_.main.tiles;
    if (!main.empty()) tiles_.upload_async(main.data(), main.size() * sizeof(int32_t), stream_);
    const auto& order = schedule_.main.work_order;
    if (order.size() * sizeof(int32_t) > work_order_.bytes()) work_order_ = DeviceBuffer(order.size() * sizeof(int32_t));
    if (!order.empty()) work_order_.upload_async(order.data(), order.size() * sizeof(int32_t), stream_);
    if (schedule_.cascade) {
      const auto& pre = schedule_.prefix.tiles;
      prefix_host_ = {0, static_cast<int32_t>(batch_.num_tokens()), schedule_.prefix_len};
      prefix_meta_.upload_async(prefix_host_.data(), 3 * sizeof(int32_t), stream_);
      if (!pre.empty()) prefix_tiles_.upload_async(pre.data(), pre.size() * sizeof(int32_t), stream_);
    }
  }

  // The step's cache write inside the attention: one pass (no cascade) over a cache of the model
  // dtype, whose rows the kernel copies as they are, on the mma.sync decode tiling (passes of decodes
  // alone, head sizes from 128: its kFusedWrite) or on the sm_90a prefill where every sequence starts
  // from scratch (flash_attn_sm90_fused_write). ATTN_FA_FUSED_DECODE_WRITE=0 and
  // ATTN_FA_FUSED_PREFILL_WRITE=0 keep the write kernel ahead (A/B timing in one binary).
  bool fused_cache_write() const {
    static const bool decodes = ab_switch_on("ATTN_FA_FUSED_DECODE_WRITE");
    const AttentionSpec& s = batch_.spec;
    const FlashAttnTiling& t = schedule_.main.tiling;
    if (schedule_.cascade || s.kv_cache_dtype != s.dtype || s.head_size_qk != s.head_size_v) return false;
    if (flash_attn_uses_sm90(config_, t)) return from_scratch_ && small_cache_ && flash_attn_sm90_fused_write(config_, t);
    return decodes && t.decode && s.head_size_qk >= 128;
  }

  void write_cache(const void* k, const void* v) {
    ReshapeAndCacheParams rc = cache_write_params(batch_, step_.view, step_.caches.data(layer_),
                                                  step_.slot_mapping.as<int64_t>(), k, v);
    // Both kernels overlap the write (they start at once and wait for it before their new keys).
    // The sm_90a kernel needs whole SMs, so a small step's write is packed onto few of them; the
    // mma.sync decode tiling shares SMs with the write's CTAs and keeps a CTA per token.
    const FlashAttnTiling& next = schedule_.cascade ? schedule_.prefix.tiling : schedule_.main.tiling;
    if (flash_attn_uses_sm90(config_, next))
      rc.tokens_per_cta = overlapped_cache_write_tokens_per_cta(rc.num_tokens, num_sms_);
    if (rc.num_tokens > 0) launch_reshape_and_cache_flash(rc, stream_);
  }

  FlashAttnParams base_params() const {
    const AttentionSpec& s = batch_.spec;
    FlashAttnParams p{};
    p.q = step_.q.data();
    p.k_cache = step_.caches.as<uint8_t>(layer_) + step_.view.k_offset * dtype_size(s.kv_cache_dtype);
    p.v_cache = step_.caches.as<uint8_t>(layer_) + step_.view.v_offset * dtype_size(s.kv_cache_dtype);
    p.block_table = block_table_.as<int32_t>();
    p.seq_lens = seq_lens_.as<int32_t>();
    p.query_start_loc = query_start_loc_.as<int32_t>();
    p.tiles = tiles_.as<int32_t>();
    p.k_descale = s.kv_fp8() ? k_descale_.as<float>() : nullptr;
    p.v_descale = s.kv_fp8() ? v_descale_.as<float>() : nullptr;
    p.alibi_slopes = alibi_.empty() ? nullptr : alibi_.as<float>();
    p.sinks = sinks_.empty() ? nullptr : sinks_.as<float>();
    p.o = step_.o.data();
    p.lse = step_.lse.as<float>();
    p.lse_token_stride = s.num_q_heads;
    p.lse_head_stride = 1;
    p.o_partial = o_partial_.empty() ? nullptr : o_partial_.as<float>();
    p.lse_partial = lse_partial_.empty() ? nullptr : lse_partial_.as<float>();
    p.partial_offset = 0;
    p.num_tokens = static_cast<int>(batch_.num_tokens());
    p.num_q_heads = s.num_q_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_size = s.head_size_qk;
    p.block_size = s.block_size;
    p.block_table_stride = meta_.max_blocks_per_req;
    p.num_tiles = schedule_.main.num_tiles();
    p.num_splits = schedule_.main.num_splits;
    p.split_cluster = schedule_.main.cluster_merge ? 1 : 0;
    p.work_counters = schedule_.main.dynamic_items ? work_counters_.as<int32_t>() : nullptr;
    p.claim_front_ctas = schedule_.main.claim_front_ctas;
    p.work_order = schedule_.main.work_order.empty() ? nullptr : work_order_.as<int32_t>();
    p.work_rounds = schedule_.main.work_rounds;
    p.work_ctas = schedule_.main.work_ctas;
    p.mean_item_key_tiles = main_item_tiles_;
    p.rows_from_end = schedule_.main.rows_from_end ? 1 : 0;
    p.kv_block_stride = step_.view.k.block;
    p.kv_token_stride = step_.view.k.slot;
    p.kv_head_stride = step_.view.k.head;
    p.softmax_scale = s.scale;
    p.softcap = s.logits_soft_cap;
    p.causal = meta_.causal ? 1 : 0;
    p.window = s.sliding_window;
    p.local_chunk = batch_.local_attention_chunk;
    p.kv_begin = 0;
    p.kv_fp8_e5m2 = s.kv_cache_dtype == DType::fp8_e5m2 ? 1 : 0;
    p.q_scale = s.q_scale;
    p.after_cache_write = 1;  // run() launches the passes right after write_cache
    return p;
  }

  Batch batch_;
  CommonAttentionMetadata meta_;
  RunOptions opts_;
  FlashAttnConfig config_;
  int num_sms_ = 0;
  double stream_share_ = kH100StreamShare;  // flash_attn_stream_share of the device
  Stream stream_;
  FlashAttnSchedule schedule_;
  int main_item_tiles_ = 0, prefix_item_tiles_ = 0;  // mean_item_key_tiles of the schedule's passes
  bool from_scratch_ = false;  // every request's keys are its new tokens (seq_len = query_len)
  // Every cache slot and every 16-byte chunk of the step's K below 2^31 (the 32-bit index math of the
  // sm_90a fused write's copy).
  bool small_cache_ = false;
  bool fused_write_ = false;  // fused_cache_write() of the schedule: decided once, not per layer and run
  std::vector<int32_t> prefix_host_;
  MhaStepBuffers step_;           // caches, Q/K/V, O and LSE (batch order)
  int layer_ = 0;                 // the layer run() / poison() is at
  DeviceBuffer block_table_;      // [num_reqs, max_blocks_per_req]
  DeviceBuffer seq_lens_;         // [num_reqs]
  DeviceBuffer query_start_loc_;  // [num_reqs + 1]
  DeviceBuffer k_descale_, v_descale_;  // [num_reqs, Hkv] fp8 only
  DeviceBuffer alibi_, sinks_;    // [Hq]
  DeviceBuffer o_partial_;        // [num_partials, num_tokens, Hq, D] float
  DeviceBuffer lse_partial_;      // [num_partials, num_tokens, Hq] float
  DeviceBuffer tiles_;            // [num_tiles, 2] main / suffix pass
  DeviceBuffer prefix_tiles_;     // [num_tiles, 2] cascade prefix pass
  DeviceBuffer prefix_meta_;      // {0, num_tokens, prefix_len}
  DeviceBuffer work_counters_;    // [3] the dynamic schedule's counters (FlashAttnParams::work_counters)
  DeviceBuffer work_order_;       // [work_ctas, work_rounds] the main pass's balanced rounds
};

class FlashAttnBackend final : public Backend {
 public:
  std::string name() const override { return "flash_attn"; }
  std::string description() const override {
    return "paged varlen attention (mma.sync tensor cores), split-KV decode, cascade over shared prefixes";
  }
  std::vector<std::string> features() const override {
    return {
#if defined(ATTN_QUICK_BUILD)
        "head sizes: 128, 192 (quick build)",
#else
        "head sizes: 64, 96, 128, 192, 256",
#endif
        "dtypes: fp16, bf16; kv cache: model dtype, fp8_e4m3, fp8_e5m2 (per-sequence descales)",
        "quantized queries (q_scale) over an fp8_e4m3 cache: Q K^T and P V on fp8 tensor cores (sm_90a prefill, head size 128)",
        "cache: FA layout (2, num_blocks, block_size, Hkv, D), NHD, block size a multiple of 16",
        "causal with context, non-causal, GQA/MQA packed into the query tile, sliding window, local attention",
        "logits soft cap, ALiBi, sinks",
        "split-KV (FlashDecoding) with LSE merge; cascade prefix + suffix + merge_attn_states",
    };
  }
  // The kernels' reason, and one head size for Q.K and V: the kernels take qk 192 / v 128 only
  // in the sm_90a kernel's tiles (the MLA prefill's), which a pass with decodes may not get.
  static std::string unsupported_reason(const AttentionSpec& spec) {
    if (!spec.use_mla && spec.head_size_qk != spec.head_size_v)  // MLA: the kernels' reason names FLASHMLA
      return "head_size_qk " + std::to_string(spec.head_size_qk) + " != head_size_v " + std::to_string(spec.head_size_v) +
             ": FLASH_ATTN takes one head size for Q.K and V (give [model] head_size)";
    return flash_attn_unsupported_reason(make_flash_attn_config(spec));
  }
  Support available() const override {
    std::string why;
    if (!cuda_device_present(&why)) return Support::no(why);
    return Support::yes();
  }
  Support supports(const AttentionSpec& spec, const Batch& /*batch*/) const override {
    const std::string why = unsupported_reason(spec);
    if (!why.empty()) return Support::no(why);
    return Support::yes();
  }
  std::unique_ptr<BackendInstance> create(const Batch& batch, const CommonAttentionMetadata& m,
                                          const RunOptions& opts) const override {
    const std::string why = unsupported_reason(batch.spec);
    if (!why.empty()) throw RuntimeError("FLASH_ATTN cannot run this batch: " + why);
    return std::make_unique<FlashAttnInstance>(batch, m, opts);
  }
};

}  // namespace

std::unique_ptr<Backend> make_flash_attn_backend() { return std::make_unique<FlashAttnBackend>(); }

}  // namespace attn
