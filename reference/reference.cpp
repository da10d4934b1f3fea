#include "reference/reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/parallel.hpp"
#include "core/values.hpp"
#include "reference/head_attention.hpp"

namespace attn {
namespace {

// Latent rows up-projected per GEMM in MLA units: bounds the [rows, kv_lora_rank] scratch.
constexpr int64_t kLatentBlock = 1024;

[[noreturn]] void bad_batch(const std::string& what) {
  throw InputError("compute_reference: inconsistent batch: " + what);
}

// Everything compute_reference needs from the spec, resolved once.
struct Shape {
  bool mla = false;
  int hq = 0;         // query heads
  int hkv = 0;        // kv heads (MLA: 1, the latent)
  int group = 1;      // q heads per kv head
  int dqk = 0;        // q/k head size (MLA: nope + rope)
  int dv = 0;         // v head size (MLA: v_head_dim)
  double scale = 0;
};

Shape resolve_shape(const Batch& b) {
  const AttentionSpec& s = b.spec;
  Shape sh;
  sh.mla = s.use_mla;
  sh.hq = s.num_q_heads;
  if (sh.hq <= 0) bad_batch("num_q_heads = " + std::to_string(sh.hq));
  if (sh.mla) {
    sh.hkv = 1;
    sh.group = sh.hq;
    sh.dqk = s.mla.qk_head_dim();
    sh.dv = s.mla.v_head_dim;
    if (s.mla.kv_lora_rank <= 0 || s.mla.qk_nope_head_dim <= 0 || s.mla.qk_rope_head_dim < 0 || sh.dv <= 0) {
      bad_batch("MLA dimensions must be positive");
    }
  } else {
    sh.hkv = s.num_kv_heads;
    if (sh.hkv <= 0 || sh.hq % sh.hkv != 0) {
      bad_batch("num_kv_heads = " + std::to_string(sh.hkv) + " must divide num_q_heads = " +
                std::to_string(sh.hq));
    }
    sh.group = sh.hq / sh.hkv;
    sh.dqk = s.head_size_qk;
    sh.dv = s.head_size_v;
    if (sh.dqk <= 0 || sh.dv <= 0) bad_batch("head sizes must be positive");
  }
  // The spec arrives resolved; the default is repeated here so a hand-built spec still works.
  sh.scale = s.scale > 0 ? static_cast<double>(s.scale) : 1.0 / std::sqrt(static_cast<double>(sh.dqk));
  return sh;
}

void check_batch(const Batch& b, const Shape& sh) {
  const int n = b.num_reqs();
  if (b.query_start_loc.size() != static_cast<size_t>(n) + 1 || b.query_start_loc[0] != 0) {
    bad_batch("query_start_loc must hold num_reqs + 1 offsets starting at 0");
  }
  for (int r = 0; r < n; ++r) {
    const RequestShape& rq = b.requests[r];
    if (rq.context_len < 0 || rq.query_len < 0) bad_batch("negative length in request " + std::to_string(r));
    if (b.query_start_loc[r + 1] - b.query_start_loc[r] != rq.query_len) {
      bad_batch("query_start_loc disagrees with query_len of request " + std::to_string(r));
    }
  }
  // A feature the spec asks for but the batch lacks would be silently dropped: refuse instead.
  if (b.spec.sinks != !b.sinks.empty() || (!b.sinks.empty() && b.sinks.size() != static_cast<size_t>(sh.hq))) {
    bad_batch("sinks must hold one logit per q head exactly when spec.sinks is set");
  }
  if (b.spec.alibi != !b.alibi.empty() || (!b.alibi.empty() && b.alibi.size() != static_cast<size_t>(sh.hq))) {
    bad_batch("alibi must hold one slope per q head exactly when spec.alibi is set");
  }
  if (b.spec.sliding_window < 0 || b.local_attention_chunk < 0 || b.spec.logits_soft_cap < 0) {
    bad_batch("sliding_window, local_attention_chunk and logits_soft_cap must be >= 0");
  }
}

// The (request, q head) pairs to check, as flags indexed req * hq + head. When sampling, each
// pair gets the key mix64(mix64(seed) ^ index): mix64 is a bijection, so the keys are distinct
// and the choice is the same for the same seed. Every request is checked first, by its pair of
// least key (the requests of least such keys when there are fewer pairs than requests), then the
// remaining pairs of least key: uniform sampling left many requests of a large batch unchecked
// (48 pairs over 79 requests: ~36 of them, against 48 now), and a kernel's bug often sits in one
// request's tiles (its last page, its split, its prefill chunk).
std::vector<uint8_t> choose_pairs(int64_t num_reqs, int64_t heads, int64_t max_pairs, uint64_t seed) {
  const int64_t total = num_reqs * heads;
  if (max_pairs <= 0 || max_pairs >= total) return std::vector<uint8_t>(static_cast<size_t>(total), 1);
  const uint64_t salt = mix64(seed + 0x9e3779b97f4a7c15ull);
  std::vector<uint64_t> keys(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) keys[i] = mix64(salt ^ static_cast<uint64_t>(i));
  auto by_key = [&](int64_t a, int64_t c) { return keys[a] < keys[c]; };
  std::vector<int64_t> firsts(static_cast<size_t>(num_reqs));  // each request's pair of least key
  for (int64_t r = 0; r < num_reqs; ++r) {
    int64_t best = r * heads;
    for (int64_t i = best + 1; i < (r + 1) * heads; ++i) best = by_key(i, best) ? i : best;
    firsts[r] = best;
  }
  std::vector<uint8_t> chosen(static_cast<size_t>(total), 0);
  const int64_t n_first = std::min(max_pairs, num_reqs);
  std::nth_element(firsts.begin(), firsts.begin() + n_first, firsts.end(), by_key);
  for (int64_t i = 0; i < n_first; ++i) chosen[firsts[i]] = 1;
  std::vector<int64_t> rest;
  rest.reserve(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i)
    if (!chosen[i]) rest.push_back(i);
  const int64_t n_rest = max_pairs - n_first;
  std::nth_element(rest.begin(), rest.begin() + n_rest, rest.end(), by_key);
  for (int64_t i = 0; i < n_rest; ++i) chosen[rest[i]] = 1;
  return chosen;
}

// A work unit: one request and one kv head (MHA: its K/V serve the whole q-head group) or one
// q head (MLA: every head up-projects the latent into its own K/V).
struct WorkUnit {
  int req = 0;
  int head = 0;
  double cost = 0;  // rough multiply-adds, for scheduling the largest first
};

struct UnitBytes {
  int req = 0;
  int64_t keys = 0;
  int values_per_key = 0;
  double bytes = 0;
};

class ReferenceRunner {
 public:
  ReferenceRunner(const Batch& b, const Shape& sh, const std::vector<uint8_t>& chosen, Perturbation perturb,
                  std::optional<int> mla_flow, ReferenceResult& out)
      : b_(b), sh_(sh), chosen_(chosen), perturb_(perturb), mla_flow_(sh.mla ? mla_flow : std::nullopt), out_(out) {}

  std::vector<WorkUnit> units() const {
    std::vector<WorkUnit> list;
    for (int r = 0; r < b_.num_reqs(); ++r) {
      const RequestShape& rq = b_.requests[r];
      if (rq.query_len == 0) continue;
      const double keys = static_cast<double>(key_span(r).size());
      for (int u = 0; u < (sh_.mla ? sh_.hq : sh_.hkv); ++u) {
        int heads = 0;
        for (int h = first_head(u); h < first_head(u) + head_count(); ++h) heads += chosen(r, h);
        if (heads == 0) continue;
        const double build = sh_.mla ? keys * b_.spec.mla.kv_lora_rank * (sh_.dqk + sh_.dv) : keys;
        list.push_back({r, u, build + keys * rq.query_len * heads * (sh_.dqk + sh_.dv)});
      }
    }
    std::sort(list.begin(), list.end(), [](const WorkUnit& a, const WorkUnit& c) { return a.cost > c.cost; });
    return list;
  }

  // The largest float64 working set of one unit: its K/V span (MLA: the latent rows, and the
  // absorbed decode's 576 + 512 columns) and its query rows.
  UnitBytes largest_unit_bytes(const std::vector<WorkUnit>& list) const {
    UnitBytes big;
    for (const WorkUnit& u : list) {
      const int64_t keys = key_span(u.req).size();
      int values = sh_.dqk + sh_.dv;
      if (sh_.mla) values += 2 * b_.spec.mla.kv_lora_rank + b_.spec.mla.qk_rope_head_dim;
      const double bytes = (static_cast<double>(keys) * values +
                            2.0 * b_.requests[u.req].query_len * (values + sh_.dv)) * sizeof(double);
      if (bytes > big.bytes) big = {u.req, keys, values, bytes};
    }
    return big;
  }

  void run(const WorkUnit& u) const {
    const ref::KeyRange span = key_span(u.req);
    if (mla_flow_ && b_.requests[u.req].query_len == *mla_flow_) {
      run_absorbed_decode(u.req, u.head, span);
      return;
    }
    Eigen::MatrixXd k, v;  // [span keys, dqk], [span keys, dv]
    if (sh_.mla) {
      build_mla_kv(u.req, u.head, span, k, v);
      if (mla_flow_) {  // the prefill flow stores the up-projected K/V in the model dtype
        round_to_model(k.leftCols(b_.spec.mla.qk_nope_head_dim));
        round_to_model(v);
      }
    } else {
      // A shifted GQA map: the group of kv head u reads kv head u + 1.
      const int kvh = perturb_ == Perturbation::gqa_shifted ? (u.head + 1) % sh_.hkv : u.head;
      build_kv(u.req, kvh, span, k, v);
    }
    Eigen::MatrixXd q, o;
    Eigen::VectorXd lse;
    for (int h = first_head(u.head); h < first_head(u.head) + head_count(); ++h) {
      if (!chosen(u.req, h)) continue;
      build_q(u.req, h, q);
      ref::attend_head(q, b_.requests[u.req].context_len, k, v, span.lo, visibility(u.req), logit_rule(h), o,
                       lse);
      store(u.req, h, o, lse);
    }
  }

 private:
  // q heads [first, first + count) served by a unit: the GQA group of kv head u, or q head u
  // itself under MLA.
  int first_head(int unit_head) const { return sh_.mla ? unit_head : unit_head * sh_.group; }
  int head_count() const { return sh_.mla ? 1 : sh_.group; }
  bool chosen(int req, int h) const { return chosen_[static_cast<size_t>(req) * sh_.hq + h] != 0; }

  ref::Visibility visibility(int req) const {
    ref::Visibility vis;
    vis.causal = b_.spec.causal();
    vis.seq_len = b_.requests[req].seq_len();
    vis.sliding_window = b_.spec.sliding_window;
    vis.local_chunk = b_.local_attention_chunk;
    switch (perturb_) {
      case Perturbation::causal_plus_one: vis.extra_hi = 1; break;
      case Perturbation::window_plus_one:
        if (vis.sliding_window > 0) vis.sliding_window += 1;
        break;
      case Perturbation::local_chunk_minus_one:
        if (vis.local_chunk > 0) vis.extra_lo = -1;
        break;
      case Perturbation::cascade_block_dropped:
        if (b_.shared_prefix_len > 0 && b_.spec.block_size > 0) {
          vis.hidden_lo = b_.shared_prefix_len - b_.spec.block_size;
          vis.hidden_hi = b_.shared_prefix_len;
        }
        break;
      default: break;
    }
    return vis;
  }

  // Keys any query row of the request can see: the first row's lo to the last row's hi
  // (both ends grow with the position). Keys outside are never visible, so not built.
  ref::KeyRange key_span(int req) const {
    const RequestShape& rq = b_.requests[req];
    const ref::Visibility vis = visibility(req);
    return {vis.keys_of(rq.context_len).lo, vis.keys_of(rq.seq_len() - 1).hi};
  }

  ref::LogitRule logit_rule(int h) const {
    ref::LogitRule rule;
    rule.scale = sh_.scale;
    rule.soft_cap = perturb_ == Perturbation::softcap_no_tanh ? 0.0 : b_.spec.logits_soft_cap;
    if (!b_.alibi.empty() && perturb_ != Perturbation::alibi_dropped) rule.alibi_slope = b_.alibi[h];
    if (!b_.sinks.empty() && perturb_ != Perturbation::sinks_dropped) {
      rule.has_sink = true;
      rule.sink = b_.sinks[h];
    }
    return rule;
  }

  // q: [query_len, dqk], row i = the new token at position context_len + i.
  void build_q(int req, int h, Eigen::MatrixXd& q) const {
    const RequestShape& rq = b_.requests[req];
    q.resize(rq.query_len, sh_.dqk);
    // An ignored query scale: the kernel would multiply by the codes' values, q / q_scale.
    const bool unscaled = perturb_ == Perturbation::fp8_scales_ignored && b_.spec.q_fp8();
    const double q_mul = unscaled ? 1.0 / b_.spec.q_scale : 1.0;
    for (int i = 0; i < rq.query_len; ++i) {
      for (int d = 0; d < sh_.dqk; ++d) q(i, d) = q_mul * b_.q(req, rq.context_len + i, h, d);
    }
    // MLA's rotary part dropped: q_pe (the last qk_rope_head_dim columns) as zeros, so q_pe . k_pe
    // leaves every score, in the up-projected and the absorbed form alike.
    if (sh_.mla && perturb_ == Perturbation::mla_rope_dropped)
      q.rightCols(b_.spec.mla.qk_rope_head_dim).setZero();
  }

  // k: [span, dqk], v: [span, dv] of kv head kvh, as read back from the cache.
  void build_kv(int req, int kvh, ref::KeyRange span, Eigen::MatrixXd& k, Eigen::MatrixXd& v) const {
    k.resize(span.size(), sh_.dqk);
    v.resize(span.size(), sh_.dv);
    // Ignored fp8 scales: the kernel would multiply by the stored codes' values, x / scale.
    const bool unscaled = perturb_ == Perturbation::fp8_scales_ignored && b_.spec.kv_fp8();
    const double k_mul = unscaled ? 1.0 / b_.spec.k_scale : 1.0, v_mul = unscaled ? 1.0 / b_.spec.v_scale : 1.0;
    for (int64_t j = 0; j < span.size(); ++j) {
      const int pos = static_cast<int>(span.lo + j);
      for (int d = 0; d < sh_.dqk; ++d) k(j, d) = k_mul * b_.k(req, pos, kvh, d);
      for (int d = 0; d < sh_.dv; ++d) v(j, d) = v_mul * b_.v(req, pos, kvh, d);
    }
  }

  template <class M>
  void round_to_model(M&& m) const {
    for (Eigen::Index c = 0; c < m.cols(); ++c)
      for (Eigen::Index r = 0; r < m.rows(); ++r)
        m(r, c) = static_cast<double>(round_to(b_.spec.dtype, static_cast<float>(m(r, c))));
  }

  // vLLM's MLA decode for q head h: q_latent = q_nope · W_UK[h]^T rounded to the model dtype,
  // the attention over the latent rows (keys [kv_c ‖ k_pe], values kv_c) with the query
  // [q_latent ‖ q_pe], then o = o_latent · W_UV[h]. Without the rounding this is the up-projected
  // form of run() (q_nope · (kv_c W_UK)^T = (q_nope W_UK^T) · kv_c^T); with it, the exact result
  // of the flow.
  void run_absorbed_decode(int req, int h, ref::KeyRange span) const {
    const MlaDims& m = b_.spec.mla;
    const int rank = m.kv_lora_rank, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim;
    Eigen::MatrixXd w_uk, w_uv;
    mla_weights(h, w_uk, w_uv);
    const int64_t n = span.size();
    Eigen::MatrixXd k(n, rank + rope), v(n, rank);  // [span, rank + rope], [span, rank]
    for (int64_t j = 0; j < n; ++j) {
      const int pos = static_cast<int>(span.lo + j);
      for (int c = 0; c < rank; ++c) k(j, c) = v(j, c) = b_.latent(req, pos, c);
      for (int d = 0; d < rope; ++d) k(j, rank + d) = b_.latent(req, pos, rank + d);
    }
    Eigen::MatrixXd q;  // [query_len, nope + rope]
    build_q(req, h, q);
    Eigen::MatrixXd qa(q.rows(), rank + rope);
    qa.leftCols(rank).noalias() = q.leftCols(nope) * w_uk.transpose();
    round_to_model(qa.leftCols(rank));
    qa.rightCols(rope) = q.rightCols(rope);
    Eigen::MatrixXd o_latent;
    Eigen::VectorXd lse;
    ref::attend_head(qa, b_.requests[req].context_len, k, v, span.lo, visibility(req), logit_rule(h), o_latent, lse);
    store(req, h, o_latent * w_uv, lse);
  }

  // W_UK[h] [rank, nope] and W_UV[h] [rank, dv] of MLA head h.
  void mla_weights(int h, Eigen::MatrixXd& w_uk, Eigen::MatrixXd& w_uv) const {
    const MlaDims& m = b_.spec.mla;
    w_uk.resize(m.kv_lora_rank, m.qk_nope_head_dim);
    w_uv.resize(m.kv_lora_rank, m.v_head_dim);
    for (int c = 0; c < m.kv_lora_rank; ++c) {
      for (int d = 0; d < m.qk_nope_head_dim; ++d) w_uk(c, d) = b_.w_uk(h, c, d);
      for (int d = 0; d < m.v_head_dim; ++d) w_uv(c, d) = b_.w_uv(h, c, d);
    }
  }

  // MLA head h: k = [kv_c · W_UK[h] ‖ k_pe]  [span, nope + rope],  v = kv_c · W_UV[h]  [span, dv],
  // with kv_c [span, rank] and k_pe [span, rope] read back from the latent cache.
  void build_mla_kv(int req, int h, ref::KeyRange span, Eigen::MatrixXd& k, Eigen::MatrixXd& v) const {
    const MlaDims& m = b_.spec.mla;
    Eigen::MatrixXd w_uk, w_uv;  // [rank, nope], [rank, dv]
    mla_weights(h, w_uk, w_uv);
    const int64_t n = span.size();
    k.resize(n, sh_.dqk);
    v.resize(n, sh_.dv);
    Eigen::MatrixXd kv_c(std::min(n, kLatentBlock), m.kv_lora_rank);  // [block, rank]
    for (int64_t j0 = 0; j0 < n; j0 += kLatentBlock) {
      const int64_t nb = std::min(kLatentBlock, n - j0);
      for (int64_t j = 0; j < nb; ++j) {
        const int pos = static_cast<int>(span.lo + j0 + j);
        for (int c = 0; c < m.kv_lora_rank; ++c) kv_c(j, c) = b_.latent(req, pos, c);
        for (int d = 0; d < m.qk_rope_head_dim; ++d) {
          k(j0 + j, m.qk_nope_head_dim + d) = b_.latent(req, pos, m.kv_lora_rank + d);
        }
      }
      k.block(j0, 0, nb, m.qk_nope_head_dim).noalias() = kv_c.topRows(nb) * w_uk;
      v.middleRows(j0, nb).noalias() = kv_c.topRows(nb) * w_uv;
    }
  }

  void store(int req, int h, const Eigen::MatrixXd& o, const Eigen::VectorXd& lse) const {
    const int64_t t0 = b_.query_start_loc[req];
    for (int64_t i = 0; i < o.rows(); ++i) {
      const size_t row = static_cast<size_t>((t0 + i) * sh_.hq + h);
      for (int d = 0; d < sh_.dv; ++d) out_.o[row * sh_.dv + d] = o(i, d);
      out_.lse[row] = lse(i);
      out_.checked[row] = 1;
    }
  }

  const Batch& b_;
  const Shape& sh_;
  const std::vector<uint8_t>& chosen_;
  const Perturbation perturb_;
  const std::optional<int> mla_flow_;  // ReferenceOptions::mla_flow_decode_q_len (MLA batches only)
  ReferenceResult& out_;  // units write disjoint (token, head) rows
};

}  // namespace

const char* to_string(Perturbation p) {
  switch (p) {
    case Perturbation::none: return "none";
    case Perturbation::causal_plus_one: return "causal";
    case Perturbation::window_plus_one: return "window";
    case Perturbation::local_chunk_minus_one: return "local_chunk";
    case Perturbation::softcap_no_tanh: return "soft_cap";
    case Perturbation::sinks_dropped: return "sinks";
    case Perturbation::alibi_dropped: return "alibi";
    case Perturbation::fp8_scales_ignored: return "fp8_scales";
    case Perturbation::gqa_shifted: return "gqa_map";
    case Perturbation::cascade_block_dropped: return "cascade_split";
    case Perturbation::mla_rope_dropped: return "mla_rope";
  }
  return "?";
}

ReferenceResult compute_reference(const Batch& b, const ReferenceOptions& opts) {
  const Shape sh = resolve_shape(b);
  check_batch(b, sh);

  ReferenceResult out;
  out.num_tokens = b.num_tokens();
  out.num_heads = sh.hq;
  out.head_size_v = sh.dv;
  const size_t rows = static_cast<size_t>(out.num_tokens) * sh.hq;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  out.o.assign(rows * sh.dv, nan);  // rows never computed stay NaN
  out.lse.assign(rows, nan);
  out.checked.assign(rows, 0);

  out.pairs_total = static_cast<int64_t>(b.num_reqs()) * sh.hq;
  const std::vector<uint8_t> chosen = choose_pairs(b.num_reqs(), sh.hq, opts.max_pairs, opts.sample_seed);
  out.pairs_checked = std::count(chosen.begin(), chosen.end(), uint8_t{1});

  const ReferenceRunner runner(b, sh, chosen, opts.perturbation, opts.mla_flow_decode_q_len, out);
  const std::vector<WorkUnit> units = runner.units();
  // Units differ in cost by orders of magnitude (a 32k prefill vs a short decode), so workers
  // pull them largest first from a shared counter instead of taking fixed slices.
  const int threads = opts.threads > 0 ? opts.threads : default_threads();
  int64_t workers = std::min<int64_t>(threads, static_cast<int64_t>(units.size()));
  // Each worker holds one unit's K/V span in float64: a long context takes GBs per worker, so
  // there are no more workers than the memory holds, and a span that does not fit at all fails
  // here, naming the request, instead of with std::bad_alloc in a worker.
  if (!units.empty()) {
    const UnitBytes big = runner.largest_unit_bytes(units);
    const double outputs = static_cast<double>(rows) * (sh.dv + 1) * sizeof(double) + static_cast<double>(rows);
    const RequestShape& rq = b.requests[static_cast<size_t>(big.req)];
    const std::size_t avail = require_host_bytes(outputs + big.bytes,
                       fmt::format("{}: the float64 reference of request {} (context_len = {}, query_len = {}: "
                                   "{} keys x {} values per worker, + {} of outputs)",
                                   b.label, big.req, rq.context_len, rq.query_len, big.keys, big.values_per_key,
                                   format_bytes(outputs)));
    if (avail > 0)
      workers = std::clamp<int64_t>(static_cast<int64_t>((static_cast<double>(avail) - outputs) / big.bytes), 1,
                                    workers);
  }
  std::atomic<size_t> next{0};
  parallel_for(
      workers,
      [&](int64_t, int64_t) {
        for (size_t i = next++; i < units.size(); i = next++) runner.run(units[i]);
      },
      static_cast<int>(std::max<int64_t>(workers, 1)));
  return out;
}

}  // namespace attn
