#pragma once
// The online-softmax state of one query row in log2 units (scores already multiplied by
// log2 e): a max m kept within 2^8 of the running max, denominator d = sum 2^(s - m), and the
// factor that rescales an output accumulated against an older m. Shared by the kernels that keep a row's state in
// one thread (CUDA-core decode) or merge per-slice states in shared memory.
#include <cmath>

#include "kernels/common/lse_merge.cuh"  // has_keys_or_nan
#include "kernels/common/ptx.cuh"

namespace attn::kern {

struct OnlineSoftmaxRow {
  float m = -INFINITY;  // the max p is taken against (log2 units, within 2^8 of the true one); -inf: none yet
  float d = 0.f;        // sum of 2^(s - m) over the keys seen
  float last_weight = 0.f;  // absorb(): the weight of the absorbed state's output

  // Folds N scores in: s[j] becomes p_j = 2^(s_j - m) (0 for masked -inf scores). Returns the
  // factor by which an output accumulated so far must be multiplied. The max the probabilities
  // are taken against (m) only moves when the scores exceed it by more than kLazyRescaleLog2:
  // below that, p_j <= 2^kLazyRescaleLog2 and the factor is exactly 1, so the caller can skip
  // rescaling its output. d, the output and m stay consistent (d = sum 2^(s - m)), so lse2()
  // and absorb() hold as with an exact running max; only the scale of the intermediate sums
  // differs, far from fp32's range at 2^8. (FlashAttention-4 re-bases the same way.)
  static constexpr float kLazyRescaleLog2 = 8.f;
  template <int N>
  __device__ __forceinline__ float update_lazy(float (&s)[N]) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < N; ++j) mx = fmaxf(mx, s[j]);
    const bool grow = mx > m + kLazyRescaleLog2;  // also the first visible key (m = -inf)
    const float m_new = grow ? mx : m;
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: keep P = 0
    const float corr = grow ? fast_exp2(m - m_use) : 1.f;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      s[j] = fast_exp2(s[j] - m_use);
      sum += s[j];
    }
    d = d * corr + sum;
    m = m_new;
    return corr;
  }

  // Merges another state (m2, d2) in. Returns the factor for this state's output; the other
  // output's factor is left in last_weight.
  __device__ __forceinline__ float absorb(float m2, float d2) {
    const float mx = fmaxf(m, m2);
    const float m_use = mx == -INFINITY ? 0.f : mx;
    const float corr = exp2f(m - m_use);
    last_weight = exp2f(m2 - m_use);
    d = d * corr + d2 * last_weight;
    m = mx;
    return corr;
  }

  // log2 of the denominator over every key seen (FlashInfer's LSE); -inf with no key, NaN when a
  // NaN reached the denominator.
  __device__ __forceinline__ float lse2() const { return has_keys_or_nan(d) ? m + log2f(d) : -INFINITY; }
};

// The end of a row whose state (m, d) an attention sink joins: the sink's logit sink2 (log2 units)
// takes its share of the denominator and contributes no value (use_sink; else sink2 is ignored).
// weight scales the output accumulated against m; lse2 is log2 of the denominator. A row with no
// visible key and no sink gets weight 0 and lse2 -inf. Shared by the register epilogues of the
// FLASH_ATTN kernels (mma.sync and sm_90a), whose quads each hold whole rows.
struct RowEnd {
  float weight, lse2;
};
__device__ __forceinline__ RowEnd end_row(float m, float d, bool use_sink, float sink2) {
  const float mx = use_sink ? fmaxf(m, sink2) : m;
  const float m_use = mx == -INFINITY ? 0.f : mx;
  const float w = exp2f(m - m_use);
  const float total = d * w + (use_sink ? exp2f(sink2 - m_use) : 0.f);
  // The hardware's approximate reciprocal and log2 (~1 ulp and ~2^-22 absolute: far below the
  // 16-bit output's rounding and the LSE's budget): the IEEE reciprocal's slow-path branch and the
  // software log2f's polynomial were ~110 of the sm_90a epilogue's ~655 instructions per warp and
  // item (ncu, 8 x 1k). total stays far below 2^126, where __fdividef would return 0.
  const float inv = total > 0.f ? __fdividef(1.f, total) : 0.f;
  return {w * inv, has_keys_or_nan(total) ? m_use + __log2f(total) : -INFINITY};
}

}  // namespace attn::kern
