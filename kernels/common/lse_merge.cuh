#pragma once
// The arithmetic of an LSE merge of partial attention states, shared by merge_attn_states (the
// merge kernel of every backend) and the FLASHMLA seesaw decode, whose last piece of a split
// request merges the request in the kernel. Both go through these steps in the same order, so a
// row merged by either comes out with the same bits (a test compares them).
//
// Partial i (LSE l_i, normalized O o_i) weighs w_i = e^(l_i - m) / sum_j e^(l_j - m), m the
// largest l (2^ in base 2); a partial with l = -inf weighs 0, and when every l is -inf the row has
// no visible key: O = 0, LSE = -inf.
#include <cuda_runtime.h>

#include <cmath>

namespace attn::kern {

__device__ __forceinline__ float lse_weight(float x, bool base2) { return base2 ? exp2f(x) : expf(x); }

// Whether a denominator (a sum of e^(s - m) over a row's keys, or of a merge's weights) stands for
// keys: > 0, or NaN, which a NaN score or value carried into it. Every LSE is taken as
// `has_keys_or_nan(sum) ? m + log(sum) : -inf`, so a NaN sum gives a NaN LSE, never the -inf of a
// row without keys: a split piece or cascade level with LSE -inf weighs 0 in a merge, so a NaN read
// (an unwritten cache slot, a page tail) would otherwise vanish into a finite, wrong output.
__device__ __forceinline__ bool has_keys_or_nan(float sum) { return !(sum == 0.f); }

struct LseMerge {
  float m_use;  // the largest LSE, 0 when every one is -inf
  float inv;    // 1 / sum of e^(l_i - m_use), 0 when that sum is 0
  float lse;    // the merged LSE (-inf: no partial holds a key)
  // The weight of a partial whose LSE is l.
  __device__ __forceinline__ float weight(float l, bool base2) const { return lse_weight(l - m_use, base2) * inv; }
};

// The merge of `count` LSEs, lse_at(i) the i-th. kMax > 0: count <= kMax and the loops are
// unrolled (lse_at may index a register array); kMax = 0: plain loops.
template <int kMax, class LseAt>
__device__ __forceinline__ LseMerge lse_merge(LseAt lse_at, int count, bool base2) {
  float m = -INFINITY, total = 0.f;
  if constexpr (kMax > 0) {
#pragma unroll
    for (int i = 0; i < kMax; ++i)
      if (i < count) m = fmaxf(m, lse_at(i));
  } else {
    for (int i = 0; i < count; ++i) m = fmaxf(m, lse_at(i));
  }
  LseMerge r;
  r.m_use = m == -INFINITY ? 0.f : m;
  if constexpr (kMax > 0) {
#pragma unroll
    for (int i = 0; i < kMax; ++i)
      if (i < count) total += lse_weight(lse_at(i) - r.m_use, base2);
  } else {
    for (int i = 0; i < count; ++i) total += lse_weight(lse_at(i) - r.m_use, base2);
  }
  r.inv = total > 0.f ? 1.f / total : 0.f;
  r.lse = has_keys_or_nan(total) ? r.m_use + (base2 ? log2f(total) : logf(total)) : -INFINITY;
  return r;
}

// Two partials (FLASH_ATTN's decode splits merged in a cluster): lse_merge<2> and both weights, each
// e^ taken once (the same values as lse_merge<2> and LseMerge::weight give; fewer registers).
__device__ __forceinline__ LseMerge lse_merge2(float l0, float l1, bool base2, float& w0, float& w1) {
  const float m = fmaxf(l0, l1);
  LseMerge r;
  r.m_use = m == -INFINITY ? 0.f : m;
  w0 = lse_weight(l0 - r.m_use, base2);
  w1 = lse_weight(l1 - r.m_use, base2);
  const float total = w0 + w1;
  r.inv = total > 0.f ? 1.f / total : 0.f;
  r.lse = has_keys_or_nan(total) ? r.m_use + (base2 ? log2f(total) : logf(total)) : -INFINITY;
  w0 *= r.inv;
  w1 *= r.inv;
  return r;
}

// acc += w v, partial after partial in index order, acc starting at zero. A side of weight 0 may
// hold anything (never read into the sum). The fused multiply-add is explicit so that every
// caller rounds the same way (the first term: w v + 0).
__device__ __forceinline__ void lse_merge_add(float& acc, float w, float v) {
  if (w != 0.f) acc = __fmaf_rn(w, v, acc);
}

}  // namespace attn::kern
