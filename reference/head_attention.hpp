#pragma once
// One (request, q head) of exact attention in float64 over a dense range of keys. Private to
// reference/: the masks and the logit transforms here are the definition every backend is
// checked against.
#include <cstdint>

#include <Eigen/Dense>

namespace attn::ref {

// Keys a query row sees, as the half-open range [lo, hi) of absolute key positions.
struct KeyRange {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t size() const { return hi > lo ? hi - lo : 0; }
};

// Which keys a query at absolute position p (context_len + i) sees. Every mask of the project
// is an interval, and both ends are non-decreasing in p, which the tiling below relies on:
//   non-causal (encoder):  keys 0 .. seq_len - 1, whatever the window or chunk
//   causal:                keys 0 .. p
//     sliding window w > 0:  and key > p - w       (lo >= p - w + 1)
//     local chunk C > 0:     and key >= floor(p / C) * C
struct Visibility {
  bool causal = true;
  int64_t seq_len = 0;
  int64_t sliding_window = 0;
  int64_t local_chunk = 0;
  // Sensitivity perturbations only (reference.hpp, Perturbation): a causal row's hi moves by
  // extra_hi (clamped to seq_len), a windowed/chunked row's lo by extra_lo (clamped to 0), and
  // keys [hidden_lo, hidden_hi) are masked out.
  int64_t extra_hi = 0, extra_lo = 0;
  int64_t hidden_lo = 0, hidden_hi = 0;

  KeyRange keys_of(int64_t p) const;
};

// Per-head logit transforms, applied in this order:
//   s = scale * q.k;  s = cap * tanh(s / cap) (cap > 0);  s -= alibi_slope * |p - key|.
// A sink adds exp(sink) to the softmax denominator only (it has no value row).
struct LogitRule {
  double scale = 1.0;
  double soft_cap = 0.0;
  double alibi_slope = 0.0;
  bool has_sink = false;
  double sink = 0.0;
};

// q:   [num_rows, head_size_qk]  row i is the query at absolute position first_pos + i
// k:   [num_keys, head_size_qk]  row j is the key at absolute position key_begin + j
// v:   [num_keys, head_size_v]
// o:   [num_rows, head_size_v]   out (resized here)
// lse: [num_rows]                out, natural log of the softmax denominator (sink included)
// The keys [key_begin, key_begin + num_keys) must cover every row's visible range. A row that
// sees no key gets o = 0 and lse = -inf, or lse = sink when a sink is present.
void attend_head(const Eigen::MatrixXd& q, int64_t first_pos, const Eigen::MatrixXd& k,
                 const Eigen::MatrixXd& v, int64_t key_begin, const Visibility& vis,
                 const LogitRule& rule, Eigen::MatrixXd& o, Eigen::VectorXd& lse);

}  // namespace attn::ref
