#pragma once
// The online-softmax step on mma.sync m16n8k16 accumulators, shared by the tensor-core kernels
// (FLASH_ATTN, FLASHINFER). A 16-row fragment of S is held as s[j][0..3] over its 8-key column
// blocks j: this thread's rows are g = lane / 4 (elements 0, 1) and g + 8 (elements 2, 3), its
// keys 8j + 2(lane % 4) + {0, 1}; the four lanes of a quad share a row. The O accumulator uses the
// same row layout over 8-wide dim blocks.
#include <cmath>

#include "kernels/common/online_softmax.cuh"
#include "kernels/common/ptx.cuh"

namespace attn::kern {

// Folds one fragment's scores into the running (row_max, row_sum) of its two rows and rescales
// O. Scores times s_scale are log2 units (s_scale = 1 when they already are, or the softmax
// scale folded into the exponent on unmasked tiles: one FFMA per score; s_scale > 0). s becomes P.
// row_sum is this thread's partial sum; reduce it over the quad (quad_sum) before use.
// kLazy: lazy maxima, as OnlineSoftmaxRow::update_lazy. A row's max moves only when the fragment's
// scores exceed it by more than 2^kLazyRescaleLog2 (so P <= 256, as exact in either 16-bit type as
// P <= 1), and the warp skips O's multiplies when none of its rows moved, which after the first
// key tiles is nearly always: 64 multiplies a thread at head size 128, an eighth of the fp8
// decode's instructions (ncu). The caller picks it where ptxas shows it costs no spill.
template <bool kLazy = false, int kNFrags, int kDFrags>
__device__ __forceinline__ void mma_softmax_update(float (&s)[kNFrags][4], float (&o)[kDFrags][4], float (&row_max)[2],
                                                   float (&row_sum)[2], float s_scale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kNFrags; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float m_use, corr;
    bool grow = true;
    if constexpr (kLazy) {
      mx *= s_scale;
      grow = mx > row_max[h] + OnlineSoftmaxRow::kLazyRescaleLog2;  // also a row's first visible key
      const float m_new = grow ? mx : row_max[h];
      m_use = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: keep P = 0
      corr = grow ? fast_exp2(row_max[h] - m_use) : 1.f;
      row_max[h] = m_new;
    } else {
      mx = fmaxf(row_max[h], mx * s_scale);
      m_use = mx == -INFINITY ? 0.f : mx;  // no visible key yet: keep P = 0
      corr = fast_exp2(row_max[h] - m_use);
      row_max[h] = mx;
    }
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kNFrags; ++j) {
      s[j][2 * h] = fast_exp2(fmaf(s[j][2 * h], s_scale, -m_use));
      s[j][2 * h + 1] = fast_exp2(fmaf(s[j][2 * h + 1], s_scale, -m_use));
      sum += s[j][2 * h] + s[j][2 * h + 1];
    }
    row_sum[h] = row_sum[h] * corr + sum;
    if (!kLazy || __any_sync(0xffffffffu, grow)) {  // warp-uniform
#pragma unroll
      for (int d = 0; d < kDFrags; ++d) {
        o[d][2 * h] *= corr;
        o[d][2 * h + 1] *= corr;
      }
    }
  }
}

// A row's value summed over the four lanes of its quad.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// P (the fragment's probabilities, two 8-key blocks 2kk and 2kk + 1) as the A operand of P.V.
template <class Element, int kNFrags>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&s)[kNFrags][4], int kk) {
  a[0] = pack2<Element>(s[2 * kk][0], s[2 * kk][1]);
  a[1] = pack2<Element>(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack2<Element>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = pack2<Element>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

}  // namespace attn::kern
