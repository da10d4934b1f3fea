#pragma once
// Online softmax on the host (FlashAttention's running max / rescale), in fp32.
//
// A set of query rows streams over tiles of keys. Each row keeps a running maximum m, the
// running sum l of exp(logit - m) and the unnormalised output acc; when a tile raises the
// maximum, l and acc are rescaled by exp(m_old - m_new). Each row only ever touches keys in
// its own visible range [lo, hi), so masked keys are never loaded into a product (a masked
// key times a NaN page tail would still be NaN).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace attn::cpu {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Eight independent partial sums so the compiler can vectorise without reassociating.
inline float dot(const float* a, const float* b, int n) {
  float acc[8] = {};
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[d + j] * b[d + j];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; d < n; ++d) s += a[d] * b[d];
  return s;
}

// y += a * x
inline void axpy(float* y, const float* x, float a, int n) {
  for (int d = 0; d < n; ++d) y[d] += a * x[d];
}

// What one query row may see, in the key positions of its (virtual) request.
struct RowMask {
  int32_t lo = 0;            // first visible key
  int32_t hi = 0;            // one past the last visible key
  int32_t pos = 0;           // the row's own position (ALiBi distance)
  float alibi_slope = 0.0f;  // logit -= slope * |pos - key|; 0 = no bias
};

// Visible range of the query at position `pos` of a request with `seq_len` keys: causal, keys
// 0 .. pos and, with a window, key > pos - window; non-causal, every key (no window).
inline RowMask make_row_mask(int32_t pos, int32_t seq_len, bool causal, int window, float alibi_slope) {
  RowMask r;
  r.pos = pos;
  r.alibi_slope = alibi_slope;
  if (!causal) {
    r.lo = 0;
    r.hi = seq_len;
    return r;
  }
  r.hi = std::min(pos + 1, seq_len);
  r.lo = window > 0 ? std::max(0, pos - window + 1) : 0;
  return r;
}

class OnlineSoftmax {
 public:
  void reset(int rows, int head_size_v) {
    rows_ = rows;
    dv_ = head_size_v;
    m_.assign(static_cast<size_t>(rows), kNegInf);
    l_.assign(static_cast<size_t>(rows), 0.0f);
    acc_.assign(static_cast<size_t>(rows) * static_cast<size_t>(dv_), 0.0f);
  }

  // Folds keys [key0, key0 + n) into every row. q: [rows, dqk], already multiplied by the
  // softmax scale; k: [n, dqk]; v: [n, dv]; masks: [rows].
  void update(const float* q, int dqk, const RowMask* masks, const float* k, const float* v, int key0, int n,
              float soft_cap) {
    if (static_cast<int>(s_.size()) < n) s_.resize(static_cast<size_t>(n));
    for (int r = 0; r < rows_; ++r) {
      const RowMask& mk = masks[r];
      const int lo = std::max(mk.lo, key0), hi = std::min(mk.hi, key0 + n);
      if (lo >= hi) continue;
      const float* qr = q + static_cast<int64_t>(r) * dqk;
      float block_max = kNegInf;
      for (int key = lo; key < hi; ++key) {
        float s = dot(qr, k + static_cast<int64_t>(key - key0) * dqk, dqk);
        if (soft_cap > 0.0f) s = soft_cap * std::tanh(s / soft_cap);
        if (mk.alibi_slope != 0.0f) s -= mk.alibi_slope * static_cast<float>(std::abs(mk.pos - key));
        s_[key - lo] = s;
        block_max = std::max(block_max, s);
      }
      float* acc = acc_.data() + static_cast<int64_t>(r) * dv_;
      const float m_new = std::max(m_[r], block_max);
      if (m_new > m_[r] && m_[r] != kNegInf) {  // rescale what was accumulated so far
        const float alpha = std::exp(m_[r] - m_new);
        l_[r] *= alpha;
        for (int d = 0; d < dv_; ++d) acc[d] *= alpha;
      }
      m_[r] = m_new;
      float sum = 0.0f;
      for (int key = lo; key < hi; ++key) {
        const float p = std::exp(s_[key - lo] - m_new);
        sum += p;
        axpy(acc, v + static_cast<int64_t>(key - key0) * dv_, p, dv_);
      }
      l_[r] += sum;
    }
  }

  // Row r's normalised output o[dv] and natural-log LSE. `sink` is an extra logit counted in
  // the denominator only (kNegInf = none). A row that saw no key gets o = 0, lse = sink. A row
  // whose every score was NaN keeps m = -inf (std::max(-inf, NaN) is -inf) but l = NaN: it gets
  // NaN o and LSE, as on the GPU kernels (has_keys_or_nan), never the 0 of a keyless row.
  void finalize_row(int r, float sink, float* o, float* lse) const {
    const float m = std::max(m_[r], sink);
    if (m == kNegInf && l_[r] == 0.0f) {
      for (int d = 0; d < dv_; ++d) o[d] = 0.0f;
      *lse = kNegInf;
      return;
    }
    const float scale_keys = m_[r] == kNegInf ? 0.0f : std::exp(m_[r] - m);
    const float denom = l_[r] * scale_keys + (sink == kNegInf ? 0.0f : std::exp(sink - m));
    const float w = scale_keys / denom;
    const float* acc = acc_.data() + static_cast<int64_t>(r) * dv_;
    for (int d = 0; d < dv_; ++d) o[d] = acc[d] * w;
    *lse = m + std::log(denom);
  }

 private:
  int rows_ = 0, dv_ = 0;
  std::vector<float> m_;    // [rows] running max
  std::vector<float> l_;    // [rows] running sum of exp(logit - m)
  std::vector<float> acc_;  // [rows, dv] unnormalised output
  std::vector<float> s_;    // [keys in a tile] logits of one row
};

}  // namespace attn::cpu
