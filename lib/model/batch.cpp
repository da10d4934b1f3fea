// Batch generation: input values through the counter-based generator, the block allocator
// (null block 0, shared prefix blocks, shuffled or contiguous physical order), the block table
// and slot mapping, and the work count of one attention call.
#include "model/batch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/dtype_convert.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/parallel.hpp"
#include "model/backend_names.hpp"

namespace attn {
namespace {

// x after the fp8 cache round trip with `scale` (stored = x / scale), exactly as a device
// reshape_and_cache + dequantizing load computes it.
float fp8_round_trip(DType cache, float x, float scale) {
  if (cache == DType::fp8_e4m3) return static_cast<float>(e4m3_to_float(float_to_e4m3(x / scale)) * scale);
  return static_cast<float>(e5m2_to_float(float_to_e5m2(x / scale)) * scale);
}

float fp8_range(DType cache) { return cache == DType::fp8_e4m3 ? kE4m3Max : kE5m2Max; }

std::string where(const BatchShape& shape) { return shape.label.empty() ? std::string("<batch>") : shape.label; }

// Deterministic 64-bit stream for the block shuffle (splitmix64 over a seeded counter).
class BlockRng {
 public:
  explicit BlockRng(uint64_t seed) : state_(mix64(seed ^ 0x626c6f636b73ull /* "blocks" */)) {}
  // Uniform in [0, n) (multiply-shift: bias below 2^-32 for any block count).
  uint64_t below(uint64_t n) {
    state_ += 0x9e3779b97f4a7c15ull;
    const uint64_t x = mix64(state_);
    return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
  }

 private:
  uint64_t state_;
};

// max |f(token, head, d)| over every new token of the batch, in parallel over requests.
template <class F>
float max_abs_over_new_tokens(const std::vector<RequestShape>& reqs, int heads, int dims, F&& f) {
  float best = 0.0f;
  std::mutex m;
  parallel_for(static_cast<int64_t>(reqs.size()), [&](int64_t begin, int64_t end) {
    float local = 0.0f;
    for (int64_t r = begin; r < end; ++r) {
      for (int pos = reqs[r].context_len; pos < reqs[r].seq_len(); ++pos)
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < dims; ++d) local = std::max(local, std::fabs(f(static_cast<int>(r), pos, h, d)));
    }
    std::lock_guard<std::mutex> lock(m);
    best = std::max(best, local);
  });
  return best;
}

}  // namespace

// ---- values ------------------------------------------------------------------------------------

// Queries are never in the shared prefix (it lies inside every context), so their generator
// id is the request's own (request_ids[req] when the batch was cut from a larger one).
float Batch::q_input(int req, int pos, int head, int d) const {
  const uint32_t id = request_ids.empty() ? static_cast<uint32_t>(req) : request_ids[static_cast<size_t>(req)];
  return round_to(spec.dtype, q_amplitude * regime_value(regime, seed, ValueTensor::q, id,
                                                   static_cast<uint32_t>(pos), static_cast<uint32_t>(head),
                                                   static_cast<uint32_t>(d)));
}

// vLLM's query quantization (fp8 e4m3 cache, FlashAttention-3): the layer stores e4m3(q / q_scale)
// and the backend multiplies by q_scale again. Holding the round trip here gives every backend and
// the reference the same query, and a backend that computes on the codes recovers them exactly.
float Batch::q(int req, int pos, int head, int d) const {
  const float x = q_input(req, pos, head, d);
  return spec.q_fp8() ? round_to(spec.dtype, fp8_round_trip(DType::fp8_e4m3, x, spec.q_scale)) : x;
}

float Batch::k_input(int req, int pos, int kv_head, int d) const {
  return round_to(spec.dtype, regime_value(regime, seed, ValueTensor::k, value_req(req, pos), static_cast<uint32_t>(pos),
                                        static_cast<uint32_t>(kv_head), static_cast<uint32_t>(d)));
}

float Batch::v_input(int req, int pos, int kv_head, int d) const {
  return round_to(spec.dtype, regime_value(regime, seed, ValueTensor::v, value_req(req, pos), static_cast<uint32_t>(pos),
                                        static_cast<uint32_t>(kv_head), static_cast<uint32_t>(d)));
}

float Batch::k(int req, int pos, int kv_head, int d) const {
  const float x = k_input(req, pos, kv_head, d);
  return spec.kv_fp8() ? fp8_round_trip(spec.kv_cache_dtype, x, spec.k_scale) : x;
}

float Batch::v(int req, int pos, int kv_head, int d) const {
  const float x = v_input(req, pos, kv_head, d);
  return spec.kv_fp8() ? fp8_round_trip(spec.kv_cache_dtype, x, spec.v_scale) : x;
}

float Batch::latent_input(int req, int pos, int d) const {
  return round_to(spec.dtype, regime_value(regime, seed, ValueTensor::latent, value_req(req, pos), static_cast<uint32_t>(pos),
                                        0u, static_cast<uint32_t>(d)));
}

float Batch::latent(int req, int pos, int d) const {
  const float x = latent_input(req, pos, d);
  return spec.kv_fp8() ? fp8_round_trip(spec.kv_cache_dtype, x, spec.k_scale) : x;
}

// Divided by sqrt(kv_lora_rank) so that kv_c · W stays O(1) like the other inputs.
float Batch::w_uk(int head, int c, int d) const {
  const float g = gen_value(seed, ValueTensor::w_uk, 0u, static_cast<uint32_t>(c), static_cast<uint32_t>(head),
                            static_cast<uint32_t>(d));
  return round_to(spec.dtype, g / std::sqrt(static_cast<float>(spec.mla.kv_lora_rank)));
}

float Batch::w_uv(int head, int c, int d) const {
  const float g = gen_value(seed, ValueTensor::w_uv, 0u, static_cast<uint32_t>(c), static_cast<uint32_t>(head),
                            static_cast<uint32_t>(d));
  return round_to(spec.dtype, g / std::sqrt(static_cast<float>(spec.mla.kv_lora_rank)));
}

// ---- value regime ([data]) ------------------------------------------------------------------------

// Defaults put every declared feature where it changes the output (docs/SCENARIOS.md, [data]):
// scores of std 4/3 in general; with a soft cap, of std cap / 25, so the top scores of a row
// (~4 std) reach a sixth of the cap, where the tanh bends them enough to move the output by
// several budgets while the softmax stays spread enough for window and causal limits to
// matter too (a std of cap / 2 makes rows one-hot and hides a window off-by-one); sinks centred on 3 x the score std, comparable to the
// largest scores of a row (as gpt-oss's learned sinks are), rather than small constants.
namespace {

void resolve_data(Batch& b, const DataConfig& d) {
  const AttentionSpec& s = b.spec;
  b.data = d;
  b.regime.bell = d.normal ? 1u : 0u;
  if (d.k_outlier_channels > 0) {
    // Exactly k_outlier_channels of the head's dims, spread evenly (at most the head size: the parser).
    b.regime.k_outlier_count = static_cast<uint32_t>(std::min(d.k_outlier_channels, s.head_size_qk));
    b.regime.k_outlier_dims = static_cast<uint32_t>(s.head_size_qk);
    b.regime.k_outlier_scale = static_cast<float>(d.k_outlier_scale);
  }
  constexpr double kPlainStd = 4.0 / 3.0;
  double logit_std = kPlainStd;
  if (d.logit_std) {
    logit_std = *d.logit_std;
  } else if (s.logits_soft_cap > 0) {
    logit_std = s.logits_soft_cap / 25.0;
  }
  // MLA's scale is 1/sqrt(qk 192) over 576-wide latent scores: keep its calibrated default.
  if (!s.use_mla || d.logit_std) b.q_amplitude = static_cast<float>(3.0 * logit_std);
  if (s.sinks) {
    b.sink_centre = static_cast<float>(d.sink_logit.value_or(3.0 * logit_std));
    b.sink_spread = static_cast<float>(logit_std);
  }
}

}  // namespace

// ---- make_batch ----------------------------------------------------------------------------------

namespace {

// An InputError naming the scenario file and the line of `key` where the shape came from a file,
// else the batch's label at line 0.
InputError shape_error(const BatchShape& shape, const std::string& key, const std::string& value,
                       const std::string& what, const std::string& hint = {}) {
  const BatchOrigin& o = shape.origin;
  return InputError(InputSite{o.file.empty() ? where(shape) : o.file, o.line(key), key, value, what, hint});
}

// The key that sizes the batch (named by errors about its size).
InputError size_error(const BatchShape& shape, const std::string& what, const std::string& hint) {
  const BatchOrigin& o = shape.origin;
  if (o.size_key.empty())
    return shape_error(shape, "requests", std::to_string(shape.requests.size()), what, hint);
  return shape_error(shape, o.size_key, o.size_value, what, hint);
}

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

}  // namespace

BatchSize batch_size_of(const std::vector<RequestShape>& requests, int block_size, int shared_prefix_len) {
  BatchSize z;
  const int64_t shared = shared_prefix_len / block_size;
  z.num_reqs = static_cast<int64_t>(requests.size());
  z.used_blocks = shared;
  for (const RequestShape& rq : requests) {
    const int64_t nb = (static_cast<int64_t>(rq.context_len) + rq.query_len + block_size - 1) / block_size;
    z.num_tokens += rq.query_len;
    z.used_blocks += nb - shared;
    z.max_blocks_per_req = std::max(z.max_blocks_per_req, nb);
  }
  return z;
}

double batch_host_bytes(const BatchSize& z, int64_t num_blocks, bool shuffled) {
  const double n = static_cast<double>(z.num_reqs), used = static_cast<double>(z.used_blocks);
  double bytes = n * (2 * sizeof(RequestShape) + sizeof(int32_t) /* query_start_loc */ + sizeof(int) /* blocks_of */);
  bytes += n * static_cast<double>(z.max_blocks_per_req) * sizeof(int32_t);  // block table
  bytes += static_cast<double>(z.num_tokens) * sizeof(int64_t);               // slot mapping
  bytes += used * sizeof(int32_t);                                            // physical block ids
  if (shuffled) {  // the shuffle's scratch: every id of the pool, or a map of the displaced ones
    const double pool = static_cast<double>(std::max<int64_t>(num_blocks - 1, 0));
    bytes += pool <= 4 * used ? pool * sizeof(int32_t) : used * 48.0;
  }
  return bytes;
}

HostBytes run_host_bytes(const AttentionSpec& spec, const BatchShape& shape, const BatchSize& z) {
  HostBytes h;
  const int64_t num_blocks = shape.num_blocks != 0 ? shape.num_blocks : z.used_blocks + 1;
  h.batch = batch_host_bytes(z, num_blocks, shape.block_allocation == BlockAllocation::shuffled);
  // The common metadata and its permuted copy each hold the block table, the slot mapping and
  // the per-request arrays again; summarize_batch marks every physical block with a byte.
  h.metadata = 2 * h.batch + static_cast<double>(num_blocks);
  // Doubles throughout: heads x head sizes x tokens overflows int64 for sizes the parser accepts.
  const double tokens = static_cast<double>(z.num_tokens), heads = spec.num_q_heads;
  const double qk = spec.head_size_qk, v = spec.head_size_v;
  const double kv_entry = spec.use_mla ? static_cast<double>(spec.mla.latent_dim())
                                       : static_cast<double>(spec.num_kv_heads) * (qk + v);
  // The features whose perturbed reference the run computes (pipeline's declared_features, counted
  // generously: causal counts even when every query is a decode).
  const int features = spec.causal() + (spec.sliding_window > 0) + (shape.local_attention_chunk > 0) +
                       (spec.logits_soft_cap > 0) + spec.sinks + spec.alibi + (spec.kv_fp8() || spec.q_fp8()) +
                       (!spec.use_mla && spec.num_kv_heads > 1) + (shape.shared_prefix_len > 0) + spec.use_mla;
  const double references = spec.use_mla ? 3 : 2;  // the reference, the MLA flow's, one perturbed
  const double backends = static_cast<double>(all_backend_names().size());
  const double per_head = qk * (sizeof(float) + sizeof(double))        // Q: float and model dtype (<= 8 B)
                          + references * (v * sizeof(double) + 9.0)    // float64 o, lse, checked flag
                          + v * sizeof(float) * (features + 3 + backends);  // feature outputs, out, again (or the NaN
                                                                            // probe's), buffer, kept
  h.per_token = tokens * (heads * per_head + kv_entry * 2 * sizeof(float));  // + new K/V, float and model dtype
  return h;
}

void check_batch_size(const AttentionSpec& spec, const BatchShape& shape, const BatchSize& z) {
  const int block_size = spec.block_size;
  const std::string size = std::to_string(z.num_reqs) + " requests, " + std::to_string(z.num_tokens) + " new tokens";
  if (z.num_tokens > kInt32Max)
    throw size_error(shape,
                     "the batch (" + size + ") has more new tokens than int32 query_start_loc holds (2147483647)",
                     "fewer requests or shorter queries");
  const int64_t needed = z.used_blocks + 1;  // + the null block 0
  if (needed > kInt32Max)
    throw size_error(shape,
                     "the batch (" + size + ") needs " + std::to_string(needed) + " cache blocks of " +
                         std::to_string(block_size) +
                         " tokens (null block 0 included), more than int32 block ids number (2147483647)",
                     "fewer or shorter requests, or a larger block_size");
  if (shape.num_blocks != 0 && shape.num_blocks < needed)
    throw shape_error(shape, "batch.num_blocks", std::to_string(shape.num_blocks),
                      "too small: the batch needs " + std::to_string(needed) + " blocks (null block 0 included)",
                      "use num_blocks = 0 for just enough");
  if (shape.num_blocks > kInt32Max)
    throw shape_error(shape, "batch.num_blocks", std::to_string(shape.num_blocks),
                      "does not fit the int32 block ids of the block table (at most 2147483647)");
  const HostBytes h = run_host_bytes(spec, shape, z);
  const double bytes = h.total();
  if (bytes < 16e6) return;  // not worth a look at /proc/meminfo
  const BatchOrigin& o = shape.origin;
  const std::string key = o.size_key.empty() ? "requests" : o.size_key;
  const std::string value = o.size_key.empty() ? std::to_string(z.num_reqs) : o.size_value;
  require_host_bytes(bytes, input_error_message(o.file.empty() ? where(shape) : o.file, o.line(key), key, value,
                                                "the batch (" + size + "; block table " + std::to_string(z.num_reqs) +
                                                    " x " + std::to_string(z.max_blocks_per_req) +
                                                    " int32, slot mapping, per-request arrays: " +
                                                    format_bytes(h.batch) + "; their metadata copies: " +
                                                    format_bytes(h.metadata) + "; Q, K/V, reference and outputs of " +
                                                    std::to_string(spec.num_q_heads) + " heads x " +
                                                    std::to_string(spec.head_size_qk) + "/" +
                                                    std::to_string(spec.head_size_v) + " per token: " +
                                                    format_bytes(h.per_token) + ")"));
}

Batch make_batch(const AttentionSpec& spec, const BatchShape& shape, uint64_t seed) {
  if (spec.block_size <= 0)
    throw shape_error(shape, "model.block_size", std::to_string(spec.block_size), "must be > 0");
  if (shape.shared_prefix_len < 0 || shape.shared_prefix_len % spec.block_size != 0)
    throw shape_error(shape, "batch.shared_prefix_len", std::to_string(shape.shared_prefix_len),
                      "must be a non-negative multiple of block_size (" + std::to_string(spec.block_size) + ")",
                      "shared prefixes are shared as whole blocks");
  if (shape.local_attention_chunk < 0)
    throw shape_error(shape, "batch.local_attention_chunk", std::to_string(shape.local_attention_chunk),
                      "must be >= 0");
  if (shape.requests.size() > static_cast<size_t>(kInt32Max))
    throw size_error(shape, "more than 2147483647 requests", "fewer requests");
  for (size_t r = 0; r < shape.requests.size(); ++r) {
    const RequestShape& rq = shape.requests[r];
    if (rq.context_len < 0 || rq.query_len < 1 || static_cast<int64_t>(rq.context_len) + rq.query_len > kInt32Max)
      throw shape_error(shape, "request " + std::to_string(r),
                        std::to_string(rq.query_len) + "@" + std::to_string(rq.context_len),
                        "needs context_len >= 0, query_len >= 1 and their sum within int32");
    if (rq.context_len < shape.shared_prefix_len)
      throw shape_error(shape, "batch.shared_prefix_len", std::to_string(shape.shared_prefix_len),
                        "exceeds the context_len " + std::to_string(rq.context_len) + " of request " +
                            std::to_string(r),
                        "the shared prefix must already be in every request's cache");
  }
  // Everything below is sized by the batch: check it fits int32 indices and host memory first.
  const BatchSize size = batch_size_of(shape.requests, spec.block_size, shape.shared_prefix_len);
  check_batch_size(spec, shape, size);

  Batch b;
  b.label = shape.label;
  b.spec = spec;
  b.seed = seed;
  b.requests = shape.requests;
  b.shared_prefix_len = shape.shared_prefix_len;
  b.local_attention_chunk = shape.local_attention_chunk;
  resolve_data(b, shape.data);
  b.step = shape.step;
  b.block_size = spec.block_size;
  if (b.spec.scale == 0.0f) b.spec.scale = 1.0f / std::sqrt(static_cast<float>(spec.head_size_qk));

  const int n = b.num_reqs();
  // query_start_loc: tokens are flattened in batch order (the total fits int32: checked above).
  b.query_start_loc.assign(static_cast<size_t>(n) + 1, 0);
  int64_t total_tokens = 0;
  for (int r = 0; r < n; ++r) {
    total_tokens += b.requests[r].query_len;
    b.query_start_loc[r + 1] = static_cast<int32_t>(total_tokens);
  }

  // ---- scales: "calc" = max |x| over the new tokens / fp8 range (vLLM's calc_kv_scales) ----
  b.spec.k_scale_calc = b.spec.v_scale_calc = false;
  if (spec.kv_fp8() && (spec.k_scale_calc || spec.v_scale_calc)) {
    const float range = fp8_range(spec.kv_cache_dtype);
    auto resolve = [&](float amax) { return amax > 0.0f ? amax / range : 1.0f; };
    if (spec.use_mla) {
      // One latent cache entry holds both keys and values: both scales come from it.
      const float amax = max_abs_over_new_tokens(b.requests, 1, spec.mla.latent_dim(),
                                                 [&](int r, int pos, int, int d) { return b.latent_input(r, pos, d); });
      if (spec.k_scale_calc) b.spec.k_scale = resolve(amax);
      if (spec.v_scale_calc) b.spec.v_scale = resolve(amax);
    } else {
      if (spec.k_scale_calc)
        b.spec.k_scale = resolve(max_abs_over_new_tokens(
            b.requests, spec.num_kv_heads, spec.head_size_qk,
            [&](int r, int pos, int h, int d) { return b.k_input(r, pos, h, d); }));
      if (spec.v_scale_calc)
        b.spec.v_scale = resolve(max_abs_over_new_tokens(
            b.requests, spec.num_kv_heads, spec.head_size_v,
            [&](int r, int pos, int h, int d) { return b.v_input(r, pos, h, d); }));
    }
  } else if (!spec.kv_fp8()) {
    b.spec.k_scale = b.spec.v_scale = 1.0f;  // scales only mean something for fp8 caches
  }
  // The query's scale, "calc" the same way over every query value before its quantization (the
  // parser allows q_scale only over an fp8 e4m3 cache without MLA).
  b.spec.q_scale_calc = false;
  if (spec.q_scale_calc) {
    const float amax = max_abs_over_new_tokens(b.requests, spec.num_q_heads, spec.head_size_qk,
                                               [&](int r, int pos, int h, int d) { return b.q_input(r, pos, h, d); });
    b.spec.q_scale = amax > 0.0f ? amax / fp8_range(DType::fp8_e4m3) : 1.0f;
  }

  if (spec.sinks) {
    b.sinks.resize(static_cast<size_t>(spec.num_q_heads));
    for (int h = 0; h < spec.num_q_heads; ++h)
      b.sinks[h] = b.sink_centre + b.sink_spread * gen_value(seed, ValueTensor::sink, 0u, 0u, static_cast<uint32_t>(h), 0u);
  }
  if (spec.alibi) b.alibi = alibi_slopes(spec.num_q_heads);

  // ---- block allocation ----
  // Every request needs ceil(seq_len / bs) blocks (its new tokens' slots included). The first
  // shared_blocks() of each row are the one shared copy of the prefix; the rest are private.
  const int bs = b.block_size;
  const int shared = b.shared_blocks();
  std::vector<int> blocks_of(static_cast<size_t>(n));
  int64_t used = shared;
  int max_blocks = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t nb = (static_cast<int64_t>(b.requests[r].seq_len()) + bs - 1) / bs;
    blocks_of[r] = static_cast<int>(nb);
    used += nb - shared;
    max_blocks = std::max(max_blocks, blocks_of[r]);
  }
  // Sizes checked by check_batch_size: the ids fit int32 and num_blocks holds them all.
  b.num_blocks = shape.num_blocks == 0 ? used + 1 : shape.num_blocks;

  // Physical ids handed out in allocation order (shared prefix first, then request by request).
  // Shuffled: the first `used` draws of a seeded Fisher-Yates shuffle of 1..num_blocks-1, so
  // neighbouring logical blocks are scattered over the whole cache as after a long-running
  // server's frees and reallocations. When the cache is much larger than the batch, the partial
  // shuffle remembers only the displaced entries, so memory follows the blocks in use.
  std::vector<int32_t> physical(static_cast<size_t>(used));
  if (shape.block_allocation == BlockAllocation::shuffled) {
    BlockRng rng(seed);
    const uint64_t pool = static_cast<uint64_t>(b.num_blocks - 1);
    if (pool <= 4 * static_cast<uint64_t>(used)) {
      std::vector<int32_t> ids(pool);
      for (uint64_t i = 0; i < pool; ++i) ids[i] = static_cast<int32_t>(i + 1);
      for (uint64_t i = 0; i < static_cast<uint64_t>(used); ++i) {
        std::swap(ids[i], ids[i + rng.below(pool - i)]);
        physical[i] = ids[i];
      }
    } else {
      std::unordered_map<uint64_t, int32_t> displaced;  // position -> id now there (default: position + 1)
      displaced.reserve(static_cast<size_t>(used));
      auto at = [&](uint64_t i) {
        auto it = displaced.find(i);
        return it == displaced.end() ? static_cast<int32_t>(i + 1) : it->second;
      };
      for (uint64_t i = 0; i < static_cast<uint64_t>(used); ++i) {
        const uint64_t j = i + rng.below(pool - i);
        physical[i] = at(j);
        displaced[j] = at(i);  // position i is never read again
      }
    }
  } else {
    for (size_t i = 0; i < physical.size(); ++i) physical[i] = static_cast<int32_t>(i + 1);
  }

  b.max_blocks_per_req = max_blocks;
  b.block_table.assign(static_cast<size_t>(n) * max_blocks, 0);
  size_t next = static_cast<size_t>(shared);
  for (int r = 0; r < n; ++r) {
    int32_t* row = b.block_table.data() + static_cast<size_t>(r) * max_blocks;  // [max_blocks_per_req]
    for (int j = 0; j < shared; ++j) row[j] = physical[j];
    for (int j = shared; j < blocks_of[r]; ++j) row[j] = physical[next++];
  }

  // slot_mapping: the cache slot of every new token.
  b.slot_mapping.resize(static_cast<size_t>(total_tokens));
  for (int r = 0; r < n; ++r) {
    const int32_t* row = b.block_table.data() + static_cast<size_t>(r) * max_blocks;
    int64_t t = b.query_start_loc[r];
    for (int pos = b.requests[r].context_len; pos < b.requests[r].seq_len(); ++pos, ++t)
      b.slot_mapping[t] = static_cast<int64_t>(row[pos / bs]) * bs + pos % bs;
  }
  return b;
}

VisibleKeys visible_keys(const Batch& b, int64_t p, int64_t seq_len) {
  if (!b.spec.causal()) return {0, seq_len - 1};
  int64_t lo = 0;
  if (b.spec.sliding_window > 0) lo = std::max<int64_t>(lo, p - b.spec.sliding_window + 1);
  if (b.local_attention_chunk > 0) lo = std::max<int64_t>(lo, p / b.local_attention_chunk * b.local_attention_chunk);
  return {lo, p};
}

// ---- count_work ------------------------------------------------------------------------------

namespace {

// Sum over p in [p0, p1] of (p - lo(p) + 1) for a causal request, in closed form: the lower
// bound is piecewise linear in p (0, p - w + 1 or the chunk start), so split at the window
// edge and at every chunk boundary (O(query_len / chunk) pieces, each summed arithmetically).
int64_t causal_pairs(const Batch& b, int64_t p0, int64_t p1) {
  const int64_t w = b.spec.sliding_window, C = b.local_attention_chunk;
  // Sum of (p - lo + 1) over p in [a, e] with lo = max(fixed, p - w + 1 if w).
  auto span_sum = [&](int64_t a, int64_t e, int64_t fixed) -> int64_t {
    int64_t total = 0;
    if (a > e) return 0;
    // Where the window bound overtakes `fixed`: p - w + 1 > fixed  <=>  p > fixed + w - 1.
    int64_t split = w > 0 ? std::clamp<int64_t>(fixed + w - 1, a - 1, e) : e;
    // p in [a, split]: count = p - fixed + 1 (arithmetic series).
    if (split >= a) total += (split - a + 1) * ((a - fixed + 1) + (split - fixed + 1)) / 2;
    // p in (split, e]: count = w.
    if (w > 0 && e > split) total += (e - split) * w;
    return total;
  };
  if (C <= 0) return span_sum(p0, p1, 0);
  int64_t total = 0;
  for (int64_t a = p0; a <= p1;) {
    const int64_t start = a / C * C, e = std::min(p1, start + C - 1);
    total += span_sum(a, e, start);
    a = e + 1;
  }
  return total;
}

}  // namespace

// FLOPs: 2 multiply-adds per visible (q, k) pair and head for QK^T and for PV.
//   MHA/GQA: 2 · (head_size_qk + head_size_v) per pair and q head.
//   MLA: decode tokens (requests of mla_decode_query_len: one new token, or two where the batch's
//   shortest query is two) are counted in the absorbed form the decode kernel runs (576-wide MQA
//   scores over the latent cache, 512-wide values): 2 · (576 + 512); prefill tokens in the
//   up-projected MHA form (192-wide q·k, 128-wide values): 2 · (192 + 128). The W_UK/W_UV
//   projections themselves are not attention and are not counted.
// Bytes: Q read + O written (model dtype), new K/V written and each distinct visible cache token
//   read once per kv head (cache dtype). MLA reads and writes one 576-wide latent entry per token
//   (K and V share it).
int mla_decode_query_len(const Batch& b) {
  int d = 0;
  for (const RequestShape& r : b.requests)
    if (r.query_len >= 1 && r.query_len <= 2 && (d == 0 || r.query_len < d)) d = r.query_len;
  return d;
}

WorkCounts count_work(const Batch& b) {
  const AttentionSpec& s = b.spec;
  const int mla_decode_len = s.use_mla ? mla_decode_query_len(b) : 0;
  const double model_bytes = static_cast<double>(dtype_size(s.dtype));
  const double cache_bytes = static_cast<double>(dtype_size(s.kv_cache_dtype));
  WorkCounts w;
  double flops_per_head_pairs = 0;  // sum over tokens of pairs x (width of that token's form)
  for (int r = 0; r < b.num_reqs(); ++r) {
    const RequestShape& rq = b.requests[r];
    const int64_t seq = rq.seq_len(), p0 = rq.context_len, p1 = seq - 1;
    int64_t pairs, lo_first, hi_last;
    if (!s.causal()) {
      pairs = static_cast<int64_t>(rq.query_len) * seq;
      lo_first = 0;
      hi_last = seq - 1;
    } else {
      pairs = causal_pairs(b, p0, p1);
      lo_first = visible_keys(b, p0, seq).lo;
      hi_last = p1;
    }
    // Both bounds are non-decreasing in p and lo(p + 1) <= p + 1, so the union of the rows'
    // ranges is one interval.
    w.kv_tokens_read += hi_last - lo_first + 1;
    w.attended_pairs += pairs;
    double width;
    if (s.use_mla)
      width = rq.query_len == mla_decode_len ? s.mla.latent_dim() + s.mla.kv_lora_rank
                                             : s.mla.qk_head_dim() + s.mla.v_head_dim;
    else
      width = s.head_size_qk + s.head_size_v;
    flops_per_head_pairs += static_cast<double>(pairs) * width;
  }
  w.flops = 2.0 * flops_per_head_pairs * s.num_q_heads;

  const double tokens = static_cast<double>(b.num_tokens());
  const double q_bytes = tokens * s.num_q_heads * s.head_size_qk * model_bytes;
  const double o_bytes = tokens * s.num_q_heads * s.head_size_v * model_bytes;
  const double kv_entry = s.use_mla ? static_cast<double>(s.mla.latent_dim()) * cache_bytes
                                    : static_cast<double>(s.num_kv_heads) * (s.head_size_qk + s.head_size_v) * cache_bytes;
  w.cache_write_bytes = tokens * kv_entry;
  w.bytes = q_bytes + o_bytes + w.cache_write_bytes + static_cast<double>(w.kv_tokens_read) * kv_entry;
  return w;
}

}  // namespace attn
