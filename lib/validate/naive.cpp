#include "validate/naive.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace attn {

namespace {

// Arithmetic of one precision: T is the accumulator type, round() models a store in the
// model dtype (identity in exact mode).
template <class T>
struct Arith {
  DType dtype;
  bool rounds;
  T round(T x) const { return rounds ? static_cast<T>(round_to(dtype, static_cast<float>(x))) : x; }
};

// Keys [lo, hi) visible to the query at absolute position p of a sequence of length seq_len.
struct KeyRange {
  int lo, hi;
};
KeyRange visible_keys(const Batch& b, int seq_len, int p) {
  if (!b.spec.causal()) return {0, seq_len};
  int lo = 0;
  if (b.spec.sliding_window > 0) lo = std::max(lo, p - b.spec.sliding_window + 1);
  if (b.local_attention_chunk > 0) lo = std::max(lo, p / b.local_attention_chunk * b.local_attention_chunk);
  return {lo, p + 1};
}

// The K and V rows of one (request, head) as the kernel reads them.
template <class T>
struct HeadKv {
  int seq_len = 0, dqk = 0, dv = 0;
  std::vector<T> k;  // [seq_len, dqk]
  std::vector<T> v;  // [seq_len, dv]
};

template <class T>
HeadKv<T> load_mha_kv(const Batch& b, int req, int kv_head, const Arith<T>& a, bool unquantized) {
  HeadKv<T> kv;
  kv.seq_len = b.requests[req].seq_len();
  kv.dqk = b.spec.head_size_qk;
  kv.dv = b.spec.head_size_v;
  kv.k.resize(static_cast<size_t>(kv.seq_len) * kv.dqk);
  kv.v.resize(static_cast<size_t>(kv.seq_len) * kv.dv);
  for (int pos = 0; pos < kv.seq_len; ++pos) {
    for (int d = 0; d < kv.dqk; ++d) {
      const float x = unquantized ? b.k_input(req, pos, kv_head, d) : b.k(req, pos, kv_head, d);
      kv.k[static_cast<size_t>(pos) * kv.dqk + d] = a.round(x);  // fp8 dequantizes into the model dtype
    }
    for (int d = 0; d < kv.dv; ++d) {
      const float x = unquantized ? b.v_input(req, pos, kv_head, d) : b.v(req, pos, kv_head, d);
      kv.v[static_cast<size_t>(pos) * kv.dv + d] = a.round(x);
    }
  }
  return kv;
}

// MLA: up-project the latent cache of one request for q head `head`, as a prefill kernel
// does: k = [kv_c . W_UK[head] || k_pe], v = kv_c . W_UV[head], each rounded to the model dtype.
template <class T>
HeadKv<T> load_mla_kv(const Batch& b, int req, int head, const Arith<T>& a, bool unquantized) {
  const MlaDims& m = b.spec.mla;
  const int rank = m.kv_lora_rank, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim;
  HeadKv<T> kv;
  kv.seq_len = b.requests[req].seq_len();
  kv.dqk = nope + rope;
  kv.dv = m.v_head_dim;
  std::vector<T> w_uk(static_cast<size_t>(rank) * nope);   // [rank, nope]
  std::vector<T> w_uv(static_cast<size_t>(rank) * kv.dv);  // [rank, v_head_dim]
  for (int c = 0; c < rank; ++c) {
    for (int d = 0; d < nope; ++d) w_uk[static_cast<size_t>(c) * nope + d] = b.w_uk(head, c, d);
    for (int d = 0; d < kv.dv; ++d) w_uv[static_cast<size_t>(c) * kv.dv + d] = b.w_uv(head, c, d);
  }
  kv.k.assign(static_cast<size_t>(kv.seq_len) * kv.dqk, T(0));
  kv.v.assign(static_cast<size_t>(kv.seq_len) * kv.dv, T(0));
  std::vector<T> latent(static_cast<size_t>(m.latent_dim()));  // [kv_c (rank) || k_pe (rope)]
  std::vector<T> acc_k(nope), acc_v(kv.dv);
  for (int pos = 0; pos < kv.seq_len; ++pos) {
    for (int d = 0; d < m.latent_dim(); ++d) {
      latent[d] = a.round(unquantized ? b.latent_input(req, pos, d) : b.latent(req, pos, d));
    }
    std::fill(acc_k.begin(), acc_k.end(), T(0));
    std::fill(acc_v.begin(), acc_v.end(), T(0));
    for (int c = 0; c < rank; ++c) {
      const T x = latent[c];
      for (int d = 0; d < nope; ++d) acc_k[d] += x * w_uk[static_cast<size_t>(c) * nope + d];
      for (int d = 0; d < kv.dv; ++d) acc_v[d] += x * w_uv[static_cast<size_t>(c) * kv.dv + d];
    }
    T* k = &kv.k[static_cast<size_t>(pos) * kv.dqk];
    for (int d = 0; d < nope; ++d) k[d] = a.round(acc_k[d]);
    for (int d = 0; d < rope; ++d) k[nope + d] = latent[rank + d];
    for (int d = 0; d < kv.dv; ++d) kv.v[static_cast<size_t>(pos) * kv.dv + d] = a.round(acc_v[d]);
  }
  return kv;
}

// One output row: softmax(scale * q.K^T (+ cap, ALiBi, sink)) . V, written to out[0, dv).
template <class T>
void attend_row(const Batch& b, const HeadKv<T>& kv, const std::vector<T>& q, int head, int p,
                const Arith<T>& a, std::vector<T>& logits, double* out) {
  const AttentionSpec& s = b.spec;
  const KeyRange keys = visible_keys(b, kv.seq_len, p);
  const bool has_sink = !b.sinks.empty();
  const T sink = has_sink ? static_cast<T>(b.sinks[head]) : T(0);
  const T slope = b.alibi.empty() ? T(0) : static_cast<T>(b.alibi[head]);
  T m = has_sink ? sink : -std::numeric_limits<T>::infinity();
  for (int j = keys.lo; j < keys.hi; ++j) {
    const T* k = &kv.k[static_cast<size_t>(j) * kv.dqk];
    T dot = 0;
    for (int d = 0; d < kv.dqk; ++d) dot += q[d] * k[d];
    T x = static_cast<T>(s.scale) * dot;
    if (s.logits_soft_cap > 0) {
      const T cap = static_cast<T>(s.logits_soft_cap);
      x = cap * std::tanh(x / cap);
    }
    x -= slope * static_cast<T>(std::abs(p - j));
    logits[j - keys.lo] = x;
    m = std::max(m, x);
  }
  std::fill(out, out + kv.dv, 0.0);
  if (keys.hi <= keys.lo) return;  // no visible key: O = 0 (with or without a sink)
  T l = has_sink ? std::exp(sink - m) : T(0);
  std::vector<T> acc(kv.dv, T(0));
  for (int j = keys.lo; j < keys.hi; ++j) {
    const T pj = std::exp(logits[j - keys.lo] - m);
    l += pj;  // the row sum uses P before rounding, as a fused kernel keeps it in fp32
    const T pr = a.round(pj);
    const T* v = &kv.v[static_cast<size_t>(j) * kv.dv];
    for (int d = 0; d < kv.dv; ++d) acc[d] += pr * v[d];
  }
  for (int d = 0; d < kv.dv; ++d) out[d] = static_cast<double>(a.round(acc[d] / l));
}

template <class T>
std::vector<double> run_naive(const Batch& b, const std::vector<uint8_t>& rows, const NaiveOptions& opts) {
  const AttentionSpec& s = b.spec;
  const int64_t num_tokens = b.num_tokens();
  const int hq = s.num_q_heads;
  const int dv = s.head_size_v;
  if (!rows.empty() && rows.size() != static_cast<size_t>(num_tokens) * hq) {
    throw RuntimeError("naive_attention: row mask has " + std::to_string(rows.size()) + " entries, expected " +
                       std::to_string(num_tokens * hq) + " (num_tokens x num_q_heads)");
  }
  const Arith<T> a{s.dtype, opts.precision == NaiveOptions::Precision::model};
  std::vector<double> out(static_cast<size_t>(num_tokens) * hq * dv, std::numeric_limits<double>::quiet_NaN());
  auto wanted = [&](int64_t t, int h) { return rows.empty() || rows[static_cast<size_t>(t) * hq + h] != 0; };

  // Work items: (request, kv head) for MHA, whose K/V serve the whole GQA group;
  // (request, q head) for MLA, whose up-projected K/V are per head.
  const int heads_per_item = s.use_mla ? 1 : s.gqa_ratio();
  const int items_per_req = hq / heads_per_item;
  const int64_t num_items = static_cast<int64_t>(b.num_reqs()) * items_per_req;
  parallel_for(
      num_items,
      [&](int64_t begin, int64_t end) {
        std::vector<T> q(static_cast<size_t>(s.head_size_qk));
        std::vector<T> logits;
        for (int64_t item = begin; item < end; ++item) {
          const int req = static_cast<int>(item / items_per_req);
          const int group = static_cast<int>(item % items_per_req);
          const int h0 = group * heads_per_item;
          const int64_t t0 = b.query_start_loc[req], t1 = b.query_start_loc[req + 1];
          bool any = false;
          for (int64_t t = t0; t < t1 && !any; ++t)
            for (int h = h0; h < h0 + heads_per_item && !any; ++h) any = wanted(t, h);
          if (!any) continue;
          const HeadKv<T> kv = s.use_mla ? load_mla_kv<T>(b, req, h0, a, opts.unquantized)
                                         : load_mha_kv<T>(b, req, group, a, opts.unquantized);
          logits.resize(static_cast<size_t>(kv.seq_len));
          const int context = b.requests[req].context_len;
          for (int64_t t = t0; t < t1; ++t) {
            const int p = context + static_cast<int>(t - t0);
            for (int h = h0; h < h0 + heads_per_item; ++h) {
              if (!wanted(t, h)) continue;
              for (int d = 0; d < s.head_size_qk; ++d)
                q[d] = opts.unquantized ? b.q_input(req, p, h, d) : b.q(req, p, h, d);
              attend_row<T>(b, kv, q, h, p, a, logits, &out[(static_cast<size_t>(t) * hq + h) * dv]);
            }
          }
        }
      },
      opts.threads);
  return out;
}

}  // namespace

std::vector<double> naive_attention(const Batch& b, const std::vector<uint8_t>& rows, const NaiveOptions& opts) {
  if (opts.precision == NaiveOptions::Precision::model) return run_naive<float>(b, rows, opts);
  return run_naive<double>(b, rows, opts);
}

double masked_rel_l2(const std::vector<double>& a, const std::vector<double>& b, const std::vector<uint8_t>& rows,
                     int64_t head_size_v) {
  if (a.size() != b.size()) {
    throw RuntimeError("masked_rel_l2: sizes differ (" + std::to_string(a.size()) + " vs " +
                       std::to_string(b.size()) + ")");
  }
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!rows.empty() && !rows[i / static_cast<size_t>(head_size_v)]) continue;
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) continue;
    err2 += (a[i] - b[i]) * (a[i] - b[i]);
    ref2 += b[i] * b[i];
  }
  if (ref2 == 0) return std::sqrt(err2);
  return std::sqrt(err2 / ref2);
}

double quantization_rel_l2(const Batch& b, const std::vector<uint8_t>& rows, int threads) {
  if (!b.spec.kv_fp8()) return -1;
  NaiveOptions cached{NaiveOptions::Precision::exact, false, threads};
  NaiveOptions unquantized{NaiveOptions::Precision::exact, true, threads};
  return masked_rel_l2(naive_attention(b, rows, cached), naive_attention(b, rows, unquantized), rows,
                       b.spec.head_size_v);
}

}  // namespace attn
