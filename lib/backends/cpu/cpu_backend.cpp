#include "backends/cpu/cpu_backend.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backends/cpu/cpu_attention.hpp"
#include "backends/cpu/cpu_cache_ops.hpp"
#include "backends/cpu/cpu_mla.hpp"
#include "backends/cpu/merge_attn_states.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "model/kv_cache.hpp"

namespace attn {

namespace {

using cpu::PagedWorkItem;

CacheFormat cache_format_for(const AttentionSpec& s) {
  if (s.use_mla) return CacheFormat::flashmla;
  return s.kv_layout == KvLayout::NHD ? CacheFormat::flash_attn : CacheFormat::flashinfer;
}

// The two passes of cascade attention as plain paged-attention metadata.
// Prefix: every query token of the batch, as one request, non-causal over the shared blocks.
// Suffix: each request over its own blocks, its block-table row and seq_len shifted past the
// prefix (positions move with them, so the causal mask is unchanged).
struct CascadeMetadata {
  CommonAttentionMetadata prefix, suffix;
};

CascadeMetadata make_cascade_metadata(const CommonAttentionMetadata& m, int prefix_len, int block_size) {
  const int prefix_blocks = prefix_len / block_size;
  CascadeMetadata c;
  CommonAttentionMetadata& p = c.prefix;
  p.num_reqs = 1;
  p.num_actual_tokens = m.num_actual_tokens;
  p.query_start_loc = {0, static_cast<int32_t>(m.num_actual_tokens)};
  p.seq_lens = {prefix_len};
  p.num_computed_tokens = {prefix_len};
  p.max_query_len = static_cast<int>(m.num_actual_tokens);
  p.max_seq_len = prefix_len;
  p.block_table.assign(m.block_table.begin(), m.block_table.begin() + prefix_blocks);  // request 0's shared blocks
  p.max_blocks_per_req = prefix_blocks;
  p.causal = false;

  CommonAttentionMetadata& s = c.suffix;
  s = m;
  s.max_blocks_per_req = m.max_blocks_per_req - prefix_blocks;
  s.block_table.clear();
  for (int r = 0; r < m.num_reqs; ++r) {
    const auto row = m.block_table.begin() + int64_t{r} * m.max_blocks_per_req;
    s.block_table.insert(s.block_table.end(), row + prefix_blocks, row + m.max_blocks_per_req);
    s.seq_lens[r] -= prefix_len;
    s.num_computed_tokens[r] -= prefix_len;
  }
  s.max_seq_len -= prefix_len;
  return c;
}

class CpuInstance final : public BackendInstance {
 public:
  CpuInstance(const Batch& b, const CommonAttentionMetadata& m, const RunOptions& opts, const CpuBackendOptions& cpu)
      : b_(b), m_(m), opts_(opts), cpu_(cpu) {
    const AttentionSpec& s = b_.spec;
    layout_ = make_cache_layout(b_, cache_format_for(s));
    caches_.resize(static_cast<size_t>(std::max(1, opts_.num_layers)));
    require_host_bytes(static_cast<double>(layout_.bytes()) * static_cast<double>(caches_.size()),
                       fmt::format("cpu: the KV cache ({} blocks of {} tokens), one per layer ([run] num_layers = {}),",
                                   layout_.num_blocks, layout_.block_size, caches_.size()));
    for (auto& cache : caches_) {
      cache.resize(layout_.bytes());
      fill_cache_host(b_, layout_, cache.data());
    }
    // All-ones bytes: a NaN in every cache dtype (RunOptions::nan_all_but_last_layer).
    if (opts_.nan_all_but_last_layer)
      for (size_t l = 0; l + 1 < caches_.size(); ++l) std::fill(caches_[l].begin(), caches_[l].end(), uint8_t{0xff});
    for (const TokenKey& nan_key : opts_.nan_keys) {  // RunOptions::nan_keys
      if (is_new_token_key(b_, nan_key)) continue;  // fill_inputs plants it
      const ElementRange key = cached_key_elements(b_, layout_, nan_key);
      const int64_t es = static_cast<int64_t>(dtype_size(layout_.dtype));
      for (auto& cache : caches_) std::fill_n(cache.begin() + key.first * es, key.count * es, uint8_t{0xff});
    }
    fill_inputs();
    const int64_t rows = b_.num_tokens() * s.num_q_heads;
    o_.assign(static_cast<size_t>(rows * s.head_size_v), std::numeric_limits<float>::quiet_NaN());
    lse_.assign(static_cast<size_t>(rows), std::numeric_limits<float>::quiet_NaN());
  }

  void plan() override {
    const AttentionSpec& s = b_.spec;
    if (s.use_mla) {
      mla_ = cpu::plan_mla(m_.query_start_loc.data(), m_.seq_lens.data(), m_.block_table.data(), m_.num_reqs,
                           m_.max_blocks_per_req, s.num_q_heads, s.mla, b_.block_size, cpu_.mla_workspace_tokens);
      summary_ = fmt::format("cascade=off (mla) decodes={} prefills={} context_chunks={}", mla_.decode_reqs.size(),
                             mla_.prefill_reqs.size(), mla_.num_context_chunks);
      if (mla_.num_context_chunks > 0) summary_ += fmt::format(" chunk={}", mla_.context_chunk);
    } else if (b_.local_attention_chunk > 0) {
      // Chunked local attention runs as ordinary attention over virtual requests, each with its
      // own (offset) block-table row; cascade never combines with it.
      local_ = make_local_attention_virtual_batches(b_.local_attention_chunk, m_, b_.block_size).metadata;
      work_ = plan_work(local_);
      summary_ = fmt::format("cascade=off (local attention) local_chunk={} virtual_reqs={}", b_.local_attention_chunk,
                             local_.num_reqs);
    } else {
      const std::string why_not = cascade_blocker();
      if (why_not.empty()) {
        const int prefix = common_prefix_len(b_, m_);
        cascade_ = make_cascade_metadata(m_, prefix, b_.block_size);
        prefix_work_ = plan_work(cascade_.prefix);
        work_ = plan_work(cascade_.suffix);
        o_prefix_.resize(o_.size());
        lse_prefix_.resize(lse_.size());
        use_cascade_ = true;
        summary_ = fmt::format("cascade=on prefix={}", prefix);
      } else {
        use_cascade_ = false;
        work_ = plan_work(m_);
        summary_ = fmt::format("cascade=off ({})", why_not);
      }
    }
    planned_ = true;
  }

  void run() override { run_layers(true); }
  void run_attention() override { run_layers(false); }

  void run_layers(bool write) {
    if (!planned_) plan();
    for (auto& cache : caches_) {
      if (write) write_cache(cache.data());
      attend(cache.data());
    }
  }

  void poison_outputs() override {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill(o_.begin(), o_.end(), nan);
    std::fill(lse_.begin(), lse_.end(), nan);
  }

  void poison() override {
    poison_outputs();
    for (auto& cache : caches_) {
      cpu::poison_cache_slots(cache.data(), layout_, m_.slot_mapping.data(), m_.num_actual_tokens);
    }
  }

  AttentionOutput fetch() override {
    AttentionOutput out;
    out.num_tokens = b_.num_tokens();
    out.num_heads = b_.spec.num_q_heads;
    out.head_size_v = b_.spec.head_size_v;
    out.o = o_;
    out.lse = lse_;
    out.precision = DType::f32;  // fp32 arithmetic and fp32 outputs: held to the fp32 budget
    return out;
  }

  std::string plan_summary() const override { return summary_; }

 private:
  // New tokens' inputs in the model dtype, and the MLA up-projections as fp32 (a host engine
  // converts weights once at load time).
  void fill_inputs() {
    const AttentionSpec& s = b_.spec;
    const int64_t n = b_.num_tokens();
    const size_t esize = dtype_size(s.dtype);
    q_.resize(static_cast<size_t>(n * s.num_q_heads * s.head_size_qk) * esize);
    if (s.use_mla) {
      latent_.resize(static_cast<size_t>(n * s.mla.latent_dim()) * esize);
    } else {
      k_.resize(static_cast<size_t>(n * s.num_kv_heads * s.head_size_qk) * esize);
      v_.resize(static_cast<size_t>(n * s.num_kv_heads * s.head_size_v) * esize);
    }
    for (int r = 0; r < b_.num_reqs(); ++r) {
      const int ctx = b_.requests[r].context_len;
      for (int64_t t = b_.query_start_loc[r]; t < b_.query_start_loc[r + 1]; ++t) {
        const int pos = ctx + static_cast<int>(t - b_.query_start_loc[r]);
        for (int h = 0; h < s.num_q_heads; ++h) {
          for (int d = 0; d < s.head_size_qk; ++d) {
            store_as(s.dtype, q_.data(), static_cast<size_t>((t * s.num_q_heads + h) * s.head_size_qk + d),
                     b_.q(r, pos, h, d));
          }
        }
        if (s.use_mla) {
          const bool nan_k_pe = nan_in_input(opts_.nan_keys, r, pos, 0);  // RunOptions::nan_keys: k_pe only
          for (int d = 0; d < s.mla.latent_dim(); ++d) {
            store_as(s.dtype, latent_.data(), static_cast<size_t>(t * s.mla.latent_dim() + d),
                     nan_k_pe && d >= s.mla.kv_lora_rank ? std::numeric_limits<float>::quiet_NaN()
                                                         : b_.latent_input(r, pos, d));
          }
          continue;
        }
        for (int h = 0; h < s.num_kv_heads; ++h) {
          const bool nan_k = nan_in_input(opts_.nan_keys, r, pos, h);  // RunOptions::nan_keys
          for (int d = 0; d < s.head_size_qk; ++d) {
            store_as(s.dtype, k_.data(), static_cast<size_t>((t * s.num_kv_heads + h) * s.head_size_qk + d),
                     nan_k ? std::numeric_limits<float>::quiet_NaN() : b_.k_input(r, pos, h, d));
          }
          for (int d = 0; d < s.head_size_v; ++d) {
            store_as(s.dtype, v_.data(), static_cast<size_t>((t * s.num_kv_heads + h) * s.head_size_v + d),
                     b_.v_input(r, pos, h, d));
          }
        }
      }
    }
    if (s.use_mla) {
      const MlaDims& md = s.mla;
      w_uk_.resize(static_cast<size_t>(s.num_q_heads) * md.kv_lora_rank * md.qk_nope_head_dim);
      w_uv_.resize(static_cast<size_t>(s.num_q_heads) * md.kv_lora_rank * md.v_head_dim);
      for (int h = 0; h < s.num_q_heads; ++h) {
        for (int c = 0; c < md.kv_lora_rank; ++c) {
          for (int d = 0; d < md.qk_nope_head_dim; ++d) {
            w_uk_[(static_cast<size_t>(h) * md.kv_lora_rank + c) * md.qk_nope_head_dim + d] = b_.w_uk(h, c, d);
          }
          for (int d = 0; d < md.v_head_dim; ++d) {
            w_uv_[(static_cast<size_t>(h) * md.kv_lora_rank + c) * md.v_head_dim + d] = b_.w_uv(h, c, d);
          }
        }
      }
    }
  }

  // Empty when cascade runs; else why not (for the results row).
  std::string cascade_blocker() const {
    const AttentionSpec& s = b_.spec;
    if (opts_.cascade == CascadeMode::off) return "off by option";
    const int prefix = common_prefix_len(b_, m_);
    if (prefix <= 0) return "no common prefix";
    if (opts_.cascade == CascadeMode::on) {
      // Forced on still needs a prefix pass that does not depend on query positions.
      if (s.alibi) return "alibi needs query positions in the prefix pass";
      if (s.sliding_window > 0) return "sliding window needs query positions in the prefix pass";
      return {};
    }
    std::vector<int32_t> query_lens(static_cast<size_t>(m_.num_reqs));
    for (int r = 0; r < m_.num_reqs; ++r) query_lens[static_cast<size_t>(r)] = m_.query_len(r);
    const CascadeDecision d = use_cascade_attention(prefix, query_lens, s.num_q_heads, s.num_kv_heads, s.alibi,
                                                    s.sliding_window > 0, b_.local_attention_chunk > 0, opts_.num_sms);
    if (d.use) return {};
    return d.reason.empty() ? std::string("use_cascade_attention said no") : d.reason;
  }

  std::vector<PagedWorkItem> plan_work(const CommonAttentionMetadata& m) const {
    return cpu::plan_paged_attention(m.query_start_loc.data(), m.num_reqs, b_.spec.num_q_heads, b_.spec.num_kv_heads,
                                     cpu_.rows_per_item);
  }

  void write_cache(void* cache) const {
    const AttentionSpec& s = b_.spec;
    if (s.use_mla) {
      cpu::ConcatAndCacheMlaParams p;
      p.latent = latent_.data();
      p.dtype = s.dtype;
      p.slot_mapping = m_.slot_mapping.data();
      p.num_tokens = m_.num_actual_tokens;
      p.cache = cache;
      p.layout = &layout_;
      p.scale = s.k_scale;
      cpu::concat_and_cache_mla(p);
      return;
    }
    cpu::ReshapeAndCacheParams p;
    p.key = k_.data();
    p.value = v_.data();
    p.dtype = s.dtype;
    p.slot_mapping = m_.slot_mapping.data();
    p.num_tokens = m_.num_actual_tokens;
    p.cache = cache;
    p.layout = &layout_;
    p.k_scale = s.k_scale;
    p.v_scale = s.v_scale;
    cpu::reshape_and_cache(p);
  }

  cpu::PagedAttentionParams paged_params(const void* cache, const CommonAttentionMetadata& m,
                                         const std::vector<PagedWorkItem>& work, float* o, float* lse,
                                         bool with_sinks) const {
    const AttentionSpec& s = b_.spec;
    cpu::PagedAttentionParams p;
    p.q = q_.data();
    p.q_dtype = s.dtype;
    p.cache = cache;
    p.layout = &layout_;
    p.k_scale = s.k_scale;
    p.v_scale = s.v_scale;
    p.query_start_loc = m.query_start_loc.data();
    p.seq_lens = m.seq_lens.data();
    p.block_table = m.block_table.data();
    p.num_reqs = m.num_reqs;
    p.max_blocks_per_req = m.max_blocks_per_req;
    p.num_q_heads = s.num_q_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_size_qk = s.head_size_qk;
    p.head_size_v = s.head_size_v;
    p.scale = s.scale;
    p.causal = m.causal && s.causal();
    p.window = s.sliding_window;
    p.soft_cap = s.logits_soft_cap;
    p.alibi_slopes = s.alibi ? b_.alibi.data() : nullptr;
    p.sinks = with_sinks && s.sinks ? b_.sinks.data() : nullptr;
    p.o = o;
    p.lse = lse;
    p.work = work.data();
    p.num_work = static_cast<int64_t>(work.size());
    p.threads = opts_.threads;
    return p;
  }

  void attend(const void* cache) {
    const AttentionSpec& s = b_.spec;
    if (s.use_mla) {
      cpu::MlaParams p;
      p.q = q_.data();
      p.dtype = s.dtype;
      p.w_uk = w_uk_.data();
      p.w_uv = w_uv_.data();
      p.cache = cache;
      p.layout = &layout_;
      p.kv_scale = s.k_scale;
      p.query_start_loc = m_.query_start_loc.data();
      p.seq_lens = m_.seq_lens.data();
      p.block_table = m_.block_table.data();
      p.num_reqs = m_.num_reqs;
      p.max_blocks_per_req = m_.max_blocks_per_req;
      p.num_heads = s.num_q_heads;
      p.dims = s.mla;
      p.scale = s.scale;
      p.soft_cap = s.logits_soft_cap;
      p.sinks = s.sinks ? b_.sinks.data() : nullptr;
      p.o = o_.data();
      p.lse = lse_.data();
      p.threads = opts_.threads;
      cpu::mla_attention(p, mla_);
      return;
    }
    if (b_.local_attention_chunk > 0) {
      cpu::paged_attention(paged_params(cache, local_, work_, o_.data(), lse_.data(), true));
      return;
    }
    if (!use_cascade_) {
      cpu::paged_attention(paged_params(cache, m_, work_, o_.data(), lse_.data(), true));
      return;
    }
    // Cascade: the sink joins the suffix pass only, so the merged denominator counts it once.
    cpu::paged_attention(paged_params(cache, cascade_.prefix, prefix_work_, o_prefix_.data(), lse_prefix_.data(), false));
    cpu::paged_attention(paged_params(cache, cascade_.suffix, work_, o_.data(), lse_.data(), true));
    cpu::MergeAttnStatesParams mp;
    mp.out = o_.data();
    mp.out_lse = lse_.data();
    mp.prefix_o = o_prefix_.data();
    mp.prefix_lse = lse_prefix_.data();
    mp.suffix_o = o_.data();
    mp.suffix_lse = lse_.data();
    mp.num_tokens = b_.num_tokens();
    mp.num_heads = s.num_q_heads;
    mp.head_size = s.head_size_v;
    mp.threads = opts_.threads;
    cpu::merge_attn_states(mp);
  }

  Batch b_;
  CommonAttentionMetadata m_;
  RunOptions opts_;
  CpuBackendOptions cpu_;
  KvCacheLayout layout_;
  std::vector<std::vector<uint8_t>> caches_;  // [num_layers] each layout_.bytes()
  std::vector<uint8_t> q_;       // [num_tokens, num_q_heads, head_size_qk] model dtype
  std::vector<uint8_t> k_;       // [num_tokens, num_kv_heads, head_size_qk] model dtype (MHA)
  std::vector<uint8_t> v_;       // [num_tokens, num_kv_heads, head_size_v] model dtype (MHA)
  std::vector<uint8_t> latent_;  // [num_tokens, 576] model dtype (MLA)
  std::vector<float> w_uk_;      // [num_q_heads, kv_lora_rank, qk_nope_head_dim] (MLA)
  std::vector<float> w_uv_;      // [num_q_heads, kv_lora_rank, v_head_dim] (MLA)
  std::vector<float> o_;         // [num_tokens, num_q_heads, head_size_v]
  std::vector<float> lse_;       // [num_tokens, num_q_heads]

  // plan() products
  bool planned_ = false;
  bool use_cascade_ = false;
  std::string summary_;
  CommonAttentionMetadata local_;        // virtual requests of chunked local attention
  CascadeMetadata cascade_;
  std::vector<PagedWorkItem> work_;         // the main (or suffix) pass
  std::vector<PagedWorkItem> prefix_work_;  // cascade prefix pass
  std::vector<float> o_prefix_;             // [num_tokens, num_q_heads, head_size_v]
  std::vector<float> lse_prefix_;           // [num_tokens, num_q_heads]
  cpu::MlaPlan mla_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options) : options_(options) {}

  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "portable paged attention on the host threads (vLLM CPU_ATTN); fp32 online softmax";
  }
  std::vector<std::string> features() const override {
    return {
        "caches: flash_attn (NHD), flashinfer (HND), flashmla (MLA); any block size",
        "dtypes: fp32/fp16/bf16 model; kv cache same or fp8_e4m3/fp8_e5m2 with k/v scales",
        "masks: causal with context, non-causal, sliding window, chunked local attention (virtual batches)",
        "logits: soft cap, ALiBi, sinks; any GQA ratio",
        "cascade: shared-prefix pass + suffix pass merged by LSE (auto = vLLM's rule)",
        "MLA: absorbed 576-wide decode, chunked-context prefill; no window, ALiBi or local attention",
        "outputs: O and LSE in fp32",
    };
  }
  Support available() const override { return Support::yes(); }

  Support supports(const AttentionSpec& s, const Batch& b) const override {
    if (is_fp8(s.dtype)) return Support::no(fmt::format("model dtype {} is a cache-only dtype", to_string(s.dtype)));
    if (s.num_q_heads <= 0 || s.num_kv_heads <= 0 || s.num_q_heads % s.num_kv_heads != 0) {
      return Support::no(fmt::format("num_q_heads {} is not a multiple of num_kv_heads {}", s.num_q_heads,
                                     s.num_kv_heads));
    }
    if (s.head_size_qk <= 0 || s.head_size_v <= 0 || b.block_size <= 0) {
      return Support::no("head sizes and block size must be positive");
    }
    if (s.logits_soft_cap < 0) return Support::no("negative logits_soft_cap");
    if (s.use_mla) {
      if (s.num_kv_heads != 1) return Support::no("MLA needs num_kv_heads = 1 (one latent cache entry per token)");
      if (s.head_size_qk != s.mla.qk_head_dim() || s.head_size_v != s.mla.v_head_dim) {
        return Support::no(fmt::format("MLA head sizes {}/{} differ from the MLA dims {}/{}", s.head_size_qk,
                                       s.head_size_v, s.mla.qk_head_dim(), s.mla.v_head_dim));
      }
      if (s.sliding_window > 0) return Support::no("MLA with sliding window: the chunked-context prefill is position-free");
      if (s.alibi) return Support::no("MLA with ALiBi: the chunked-context prefill is position-free");
      if (b.local_attention_chunk > 0) return Support::no("MLA with chunked local attention");
      if (!s.causal()) return Support::no("MLA is decoder-only (causal)");
      return Support::yes();
    }
    if (b.local_attention_chunk > 0) {
      if (b.local_attention_chunk % b.block_size != 0) {
        return Support::no(fmt::format("local attention chunk {} is not a multiple of block_size {}",
                                       b.local_attention_chunk, b.block_size));
      }
      if (!s.causal()) return Support::no("chunked local attention is decoder-only (causal)");
    }
    return Support::yes();
  }

  std::unique_ptr<BackendInstance> create(const Batch& b, const CommonAttentionMetadata& m,
                                          const RunOptions& opts) const override {
    if (const Support s = supports(b.spec, b); !s) throw InputError("cpu backend: " + s.reason);
    return std::make_unique<CpuInstance>(b, m, opts, options_);
  }

 private:
  CpuBackendOptions options_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace attn
