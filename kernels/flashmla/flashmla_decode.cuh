#pragma once
// FLASHMLA split-KV decode (mma.sync version, sm_80+ PTX; see flashmla_params.hpp for the data
// layout). One CTA = one m_block of up to 64 packed rows x one scheduler partition; it walks the partition's
// (request, key range) pieces. Per 64-key tile the 576-wide K rows are staged once in shared
// memory and serve both products: S = Q·K^T over all 576 columns and O += P·V with V = the
// first 512 columns of the same rows.
//
// Warps: 8 = kWarpsM row groups (16 packed rows each) x kWarpsN = 8 / kWarpsM column groups.
// For S, warp (wm, wn) takes rows 16wm.. and keys 64/kWarpsN x wn.. of the tile; the column
// groups of a row exchange their row maxima through shared memory and write P (16-bit) there, so
// that each warp multiplies its 16 rows of P by all 64 keys of V for its 512/kWarpsN output
// columns. kWarpsM follows the packed rows of a request: 16 heads x q_len 1 take one row group
// (all 8 warps busy on 16 rows, 16 x 64 fp32 accumulators each) instead of padding to 64 rows;
// 128 heads take 4 row groups of 64 rows (16 x 256 accumulators, 128 registers per thread).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/lse_merge.cuh"  // has_keys_or_nan
#include "kernels/common/ptx.cuh"
#include "kernels/flashmla/flashmla_launch.hpp"
#include "kernels/flashmla/flashmla_params.hpp"

namespace attn::mla {

using namespace attn::kern;

template <int kWarpsM_>
struct DecodeTraits {
  static constexpr int kHeadDimK = kFlashMlaHeadDimK;
  static constexpr int kHeadDimV = kFlashMlaHeadDimV;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = 8 / kWarpsM;
  static constexpr int kBlockM = 16 * kWarpsM;  // packed rows per CTA (<= kFlashMlaBlockM)
  static constexpr int kBlockN = kFlashMlaBlockN;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kWarpKeys = kBlockN / kWarpsN;        // S columns per warp
  static constexpr int kWarpCols = kHeadDimV / kWarpsN;      // O columns per warp
  static constexpr int kChunks = kHeadDimK * 2 / 16;         // 16-byte chunks of a 576-wide row (72)
  static constexpr int kStages = 2;
  // Q, K rows and P rows are XOR-swizzled by 16-byte chunk (chunk ^ (row & 7)): a row is a
  // multiple of 128 bytes, so the 8 rows one ldmatrix reads hit 8 different bank groups. Padding
  // the rows instead would not fit: Q + 2 K stages already take 221 KB of the 227 KB.
  static constexpr int kQElems = kBlockM * kHeadDimK;
  static constexpr int kKElems = kBlockN * kHeadDimK;
  static constexpr int kPElems = kBlockM * kBlockN;
  // Q + kStages K tiles + P + row maxima and sums of every column group.
  static constexpr int kSmemBytes = (kQElems + kStages * kKElems + kPElems) * 2 + 2 * kWarpsN * kBlockM * 4;
  static_assert(kBlockM <= kFlashMlaBlockM && kWarpKeys % 8 == 0 && kChunks % 8 == 0, "tile shape");
};

// Element offset of (row, 16-byte chunk) in a swizzled row-major tile with `chunks` chunks per row.
__device__ __forceinline__ int swz(int row, int chunk, int chunks) { return row * chunks * 8 + ((chunk ^ (row & 7)) * 8); }

template <class Element, int kWarpsM>
__global__ void __launch_bounds__(DecodeTraits<kWarpsM>::kThreads, 1)
    flashmla_decode_kernel(const __grid_constant__ FlashMlaDecodeParams p) {
  using Tr = DecodeTraits<kWarpsM>;
  constexpr int kC = Tr::kChunks;
  extern __shared__ __align__(128) uint8_t smem[];
  Element* sQ = reinterpret_cast<Element*>(smem);
  Element* sK = sQ + Tr::kQElems;                        // [kStages][64 keys][576]
  Element* sP = sK + Tr::kStages * Tr::kKElems;          // [kBlockM rows][64 keys]
  float* sMax = reinterpret_cast<float*>(sP + Tr::kPElems);  // [kWarpsN][kBlockM]
  float* sSum = sMax + Tr::kWarpsN * Tr::kBlockM;        // [kWarpsN][kBlockM]

  // The combine (merge_attn_states, launched with programmatic stream serialization) may launch
  // now: its CTAs take the SMs this grid leaves (idle partitions, early finishers) and wait there
  // for the partials, instead of launching after this grid's last CTA.
  pdl_launch_dependents();
  const int m_block = blockIdx.x;
  const int32_t* md = p.tile_scheduler_metadata + blockIdx.y * 8;
  const int begin_req = md[0], begin_token = md[1], end_req = md[2], end_token = md[3], begin_split = md[4];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp % Tr::kWarpsM, wn = warp / Tr::kWarpsM;
  const int g = lane / 4, tq = lane % 4;
  const int rows = p.q_len * p.num_heads;  // packed rows of one request
  const int row0 = m_block * Tr::kBlockM;
  const bool warp_active = row0 + wm * 16 < rows;  // warp-uniform: some of its 16 rows are real
  const float scale_log2 = p.softmax_scale * kLog2e;
  const Element* q_base = static_cast<const Element*>(p.q);
  const Element* kv = static_cast<const Element*>(p.kv_cache);

  // The causal limit of this thread's two rows (g, g + 8 of the warp's 16): query i of a request
  // sees keys <= seq_len - q_len + i.
  int row_q[2];
  for (int h = 0; h < 2; ++h) row_q[h] = (row0 + wm * 16 + g + 8 * h) / p.num_heads;

  for (int req = begin_req; req <= end_req; ++req) {
    const int seq_len = p.seq_lens[req];
    const int kbegin = req == begin_req ? begin_token : 0;
    const int kend = req == end_req ? end_token : seq_len;
    const int split = req == begin_req ? begin_split : 0;
    const int split_base = p.num_splits[req];
    const bool no_split = p.num_splits[req + 1] - split_base == 1;
    const int32_t* table = p.block_table + static_cast<int64_t>(req) * p.block_table_stride;

    // Q tile of this request (padding rows zero-filled), committed with the first K tile.
    for (int i = tid; i < Tr::kBlockM * kC; i += Tr::kThreads) {
      const int r = i / kC, c = i % kC, row = row0 + r;
      const bool valid = row < rows;
      const Element* src = valid ? q_base + ((static_cast<int64_t>(req) * p.q_len + row / p.num_heads) * p.num_heads +
                                             row % p.num_heads) * Tr::kHeadDimK + c * 8
                                 : q_base;
      cp_async_16(sQ + swz(r, c, kC), src, valid);
    }
    // Keys past kend (the page tail holds NaN) are zero-filled, so that P = 0 never meets NaN V.
    auto load_tile = [&](int n, int stage) {
      const Element* blk = kv + static_cast<int64_t>(table[n]) * p.kv_block_stride;
      Element* dst = sK + stage * Tr::kKElems;
      for (int i = tid; i < Tr::kBlockN * kC; i += Tr::kThreads) {
        const int r = i / kC, c = i % kC;
        const bool valid = n * Tr::kBlockN + r < kend;
        cp_async_16(dst + swz(r, c, kC), valid ? blk + static_cast<int64_t>(r) * Tr::kHeadDimK + c * 8 : kv, valid);
      }
    };
    const int n_begin = kbegin / Tr::kBlockN, n_end = (kend + Tr::kBlockN - 1) / Tr::kBlockN;
    if (n_begin < n_end) load_tile(n_begin, 0);
    cp_async_commit();

    uint32_t qf[Tr::kWarpKeys == 8 ? Tr::kHeadDimV / 16 : 1][4];  // Q fragments, dims < 512 (16-row variant)
    float acc_o[Tr::kWarpCols / 8][4];
    for (auto& f : acc_o) f[0] = f[1] = f[2] = f[3] = 0.f;
    float m_i[2] = {-INFINITY, -INFINITY};  // running max of scaled logits, log2 units
    float l_i[2] = {0.f, 0.f};              // this thread's share of the row sums

    for (int n = n_begin; n < n_end; ++n) {
      const int stage = (n - n_begin) % Tr::kStages;
      if (n + 1 < n_end) {
        load_tile(n + 1, (stage + 1) % Tr::kStages);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const Element* sKc = sK + stage * Tr::kKElems;

      // S = Q K^T: 16 rows x kWarpKeys keys per warp, over the 36 k-steps of 576.
      float s[Tr::kWarpKeys / 8][4];
      for (auto& f : s) f[0] = f[1] = f[2] = f[3] = 0.f;
      if (warp_active) {
        const int qrow = wm * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        if constexpr (Tr::kWarpKeys >= 16) {
#pragma unroll 4
          for (int ks = 0; ks < Tr::kHeadDimK / 16; ++ks) {
            uint32_t a[4];
            ldmatrix_x4(a, sQ + swz(qrow, ks * 2 + lane / 16, kC));
#pragma unroll
            for (int nj = 0; nj < Tr::kWarpKeys / 16; ++nj) {
              uint32_t b[4];
              ldmatrix_x4(b, sKc + swz(wn * Tr::kWarpKeys + nj * 16 + (lane % 8) + (lane / 16) * 8,
                                       ks * 2 + (lane / 8) % 2, kC));
              mma_16816<Element>(s[2 * nj], a, b[0], b[1]);
              mma_16816<Element>(s[2 * nj + 1], a, b[2], b[3]);
            }
          }
        } else {
          // 16 rows, 8 keys per warp: the Q fragments of the whole piece live in registers
          // (loaded at its first tile), since re-reading the 18 KB of Q per tile and warp for
          // 8 keys doubled the shared-memory traffic of a tile. One ldmatrix.x4 holds the B
          // fragments of two k-steps.
          // The 4 rope k-steps still come from shared memory (room for the accumulators).
          constexpr int kRegSteps = Tr::kHeadDimV / 16;
          if (n == n_begin) {
#pragma unroll
            for (int ks = 0; ks < kRegSteps; ++ks) ldmatrix_x4(qf[ks], sQ + swz(qrow, ks * 2 + lane / 16, kC));
          }
#pragma unroll
          for (int ks = 0; ks < Tr::kHeadDimK / 16; ks += 2) {
            uint32_t b[4];
            ldmatrix_x4(b, sKc + swz(wn * Tr::kWarpKeys + (lane % 8), ks * 2 + lane / 8, kC));
            if (ks < kRegSteps) {
              mma_16816<Element>(s[0], qf[ks], b[0], b[1]);
              mma_16816<Element>(s[0], qf[ks + 1], b[2], b[3]);
            } else {
              uint32_t a0[4], a1[4];
              ldmatrix_x4(a0, sQ + swz(qrow, ks * 2 + lane / 16, kC));
              ldmatrix_x4(a1, sQ + swz(qrow, ks * 2 + 2 + lane / 16, kC));
              mma_16816<Element>(s[0], a0, b[0], b[1]);
              mma_16816<Element>(s[0], a1, b[2], b[3]);
            }
          }
        }
      }
      // Mask (key range of the piece, causal limit of each row) and this half's row maxima.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int f = 0; f < Tr::kWarpKeys / 8; ++f) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n * Tr::kBlockN + wn * Tr::kWarpKeys + f * 8 + 2 * tq + (e % 2);
          const int h = e / 2;
          const bool visible = key < kend && key <= seq_len - p.q_len + row_q[h];
          s[f][e] = visible ? s[f][e] * scale_log2 : -INFINITY;
          mx[h] = fmaxf(mx[h], s[f][e]);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        if (tq == 0) sMax[wn * Tr::kBlockM + wm * 16 + g + 8 * h] = mx[h];
      }
      __syncthreads();
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * 16 + g + 8 * h;
        float m_new = m_i[h];
#pragma unroll
        for (int j = 0; j < Tr::kWarpsN; ++j) m_new = fmaxf(m_new, sMax[j * Tr::kBlockM + r]);
        // A row that has seen no key yet keeps m = -inf; shift by 0 so exp2 gives 0, not NaN.
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        alpha[h] = fast_exp2(m_i[h] - m_use);
        m_i[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int f = 0; f < Tr::kWarpKeys / 8; ++f) {
          s[f][2 * h] = fast_exp2(s[f][2 * h] - m_use);
          s[f][2 * h + 1] = fast_exp2(s[f][2 * h + 1] - m_use);
          sum += s[f][2 * h] + s[f][2 * h + 1];
        }
        l_i[h] = l_i[h] * alpha[h] + sum;
      }
      // P (16-bit) to shared memory: every column group of the row group needs all 64 keys.
#pragma unroll
      for (int f = 0; f < Tr::kWarpKeys / 8; ++f) {
        const int key = wn * Tr::kWarpKeys + f * 8 + 2 * tq;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * 16 + g + 8 * h;
          *reinterpret_cast<uint32_t*>(sP + swz(r, key / 8, Tr::kBlockN / 8) + key % 8) =
              pack2<Element>(s[f][2 * h], s[f][2 * h + 1]);
        }
      }
#pragma unroll
      for (auto& f : acc_o) {
        f[0] *= alpha[0];
        f[1] *= alpha[0];
        f[2] *= alpha[1];
        f[3] *= alpha[1];
      }
      __syncthreads();

      // O += P V: 16 rows x kWarpCols columns per warp over the 64 keys of the tile.
      if (warp_active) {
#pragma unroll
        for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
          uint32_t a[4];
          ldmatrix_x4(a, sP + swz(wm * 16 + (lane % 8) + ((lane / 8) % 2) * 8, kk * 2 + lane / 16, Tr::kBlockN / 8));
#pragma unroll
          for (int dj = 0; dj < Tr::kWarpCols / 16; ++dj) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, sKc + swz(kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8,
                                           (wn * Tr::kWarpCols + dj * 16) / 8 + lane / 16, kC));
            mma_16816<Element>(acc_o[2 * dj], a, b[0], b[1]);
            mma_16816<Element>(acc_o[2 * dj + 1], a, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // the next iteration's load overwrites this stage; sP and sMax are reused
    }
    cp_async_wait<0>();  // an empty piece still committed its Q load

    // Epilogue: the column groups used the same maxima, so their row sums add up.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_i[h] += __shfl_xor_sync(0xffffffffu, l_i[h], 1);
      l_i[h] += __shfl_xor_sync(0xffffffffu, l_i[h], 2);
      if (tq == 0) sSum[wn * Tr::kBlockM + wm * 16 + g + 8 * h] = l_i[h];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * 16 + g + 8 * h, row = row0 + r;
      if (row >= rows) continue;
      float l = 0.f;
#pragma unroll
      for (int j = 0; j < Tr::kWarpsN; ++j) l += sSum[j * Tr::kBlockM + r];
      // No visible key: O = 0 and LSE = -inf (merge_attn_states weighs such a piece with 0).
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = has_keys_or_nan(l) ? m_i[h] * 0.6931471805599453f + logf(l) : -INFINITY;
      const int64_t token = static_cast<int64_t>(req) * p.q_len + row / p.num_heads;
      const int head = row % p.num_heads;
      const int64_t out_row = no_split ? token * p.num_heads + head : static_cast<int64_t>(split_base + split) * rows + row;
      float* o = (no_split ? p.o : p.o_accum) + out_row * Tr::kHeadDimV + wn * Tr::kWarpCols;
#pragma unroll
      for (int f = 0; f < Tr::kWarpCols / 8; ++f)
        *reinterpret_cast<float2*>(o + f * 8 + 2 * tq) = make_float2(acc_o[f][2 * h] * inv, acc_o[f][2 * h + 1] * inv);
      if (wn == 0 && tq == 0) (no_split ? p.lse : p.lse_accum)[out_row] = lse;
    }
    __syncthreads();  // sQ and sSum are rewritten by the next request
  }
}

template <class Element, int kWarpsM>
void launch_rows(const FlashMlaDecodeParams& p, cudaStream_t stream) {
  using Tr = DecodeTraits<kWarpsM>;
  static const cudaError_t attr = cudaFuncSetAttribute(
      flashmla_decode_kernel<Element, kWarpsM>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  (void)attr;  // a failure shows up as the launch error
  const int rows = p.q_len * p.num_heads;
  const dim3 grid(static_cast<unsigned>((rows + Tr::kBlockM - 1) / Tr::kBlockM), static_cast<unsigned>(p.num_parts));
  flashmla_decode_kernel<Element, kWarpsM><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
}

// The CTA's rows follow the packed rows of a request: 16, 32 or 64 (several m_blocks above 64).
template <class Element>
void run_flashmla_decode(const FlashMlaDecodeParams& p, cudaStream_t stream) {
  const int rows = p.q_len * p.num_heads;
  if (rows <= 16) {
    launch_rows<Element, 1>(p, stream);
  } else if (rows <= 32) {
    launch_rows<Element, 2>(p, stream);
  } else {
    launch_rows<Element, 4>(p, stream);
  }
}

}  // namespace attn::mla

#define ATTN_FLASHMLA_INSTANTIATE(Element) \
  template void run_flashmla_decode<Element>(const FlashMlaDecodeParams&, cudaStream_t);
