#pragma once
// FlashInfer's batch prefill over the paged KV cache on mma.sync tensor cores; it also serves
// the decode of large GQA groups (vLLM's use_tensor_cores rule: group > 4), whose query heads
// fill the rows of a 16-row tile.
//
// One CTA of 4 warps runs one work item of the plan, (request, q tile, kv chunk), for one kv
// head: kTileQ packed query rows (row = token x group + head within the group) against the
// chunk's keys, in tiles of kTileKv keys gathered page by page through the CSR table into a
// double-buffered shared-memory ring. The warps split the q tile (kTileQ 64/128: 4 x 16 or
// 4 x 32 rows) or, for kTileQ 16, the keys of every kv tile (4 x 16 keys), whose per-warp states
// merge in shared memory at the end. Shared-memory rows are XOR-swizzled in 16-byte chunks
// (chunk ^ row % 8), so the 8 rows one ldmatrix reads fall in 8 different bank groups.
// fp8 caches stay raw in the ring, swizzled the same way: ldmatrix reads the fp8 rows as if they
// were 16-bit and the codes widen in registers into the MMA operands, which are fp16 whatever the
// model dtype (a bf16 Q is stored once as fp16 x 2^-8, given back in the score scale; Q is stored
// in A-fragment order there, not swizzled: fp8_q_slot, one 16-byte load per fragment);
// kernels/common/mma_fp8.cuh has the operand layouts, and the epilogues put the even/odd dim column
// blocks of O back in order. The row maxima are lazy (mma_softmax_update<true>) over fp8 caches and
// on the 16-row q tile, which serves the tensor-core decode.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/mma_fp8.cuh"
#include "kernels/common/mma_softmax.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/flashinfer/fi_attention.cuh"
#include "kernels/flashinfer/fi_params.hpp"

namespace attn::fi {

template <int kHeadDim_, class Element_, bool kKvFp8_, int kTileQ_>
struct PrefillTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kKvFp8 = kKvFp8_;
  static constexpr int kTileQ = kTileQ_;
  static constexpr int kThreads = 128;
  static constexpr int kWarpsQ = kTileQ == 16 ? 1 : 4;
  static constexpr int kWarpsKv = 4 / kWarpsQ;
  static constexpr int kMmaQ = kTileQ / (16 * kWarpsQ);  // 16-row fragments per warp
  // 16-key blocks per warp and kv tile: 64 keys per tile; 32 where the O accumulator is large
  // (hd256, or two row fragments per warp: 64 keys there spill ~170 bytes at 255 registers).
  static constexpr int kMmaKv = kWarpsKv > 1 ? 1 : (kHeadDim <= 128 && kMmaQ == 1 ? 4 : 2);
  static constexpr int kTileKv = kWarpsKv * kMmaKv * 16;
  static constexpr int kNFrags = kMmaKv * 2;  // 8-key blocks of S per warp
  static constexpr int kDFrags = kHeadDim / 8;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a 16-bit row
  static constexpr int kRawChunks = kHeadDim / 16;  // 16-byte chunks of an fp8 row
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kKSteps = kHeadDim / 16;
  // Q: swizzled rows on a 16-bit cache; 16-byte fragment slots on an fp8 one (fp8_q_slot, a warp's
  // 32 lanes reading 512 consecutive bytes). Either way kTileQ x kHeadDim 16-bit elements.
  static constexpr int kQBytes = kTileQ * kRowBytes;
  // Lazy row maxima (mma_softmax_update<true>) over fp8 caches and on the 16-row decode tile; the
  // 16-bit prefill tiles keep exact ones (FLASH_ATTN's mma.sync kernel makes the same split).
  static constexpr bool kLazyMax = kKvFp8 || kTileQ == 16;
  static constexpr int kTileBytes = kTileKv * kRowBytes;       // one 16-bit K or V tile
  static constexpr int kRawTileBytes = kTileKv * kHeadDim;     // one fp8 K or V tile
  static constexpr int kStages = 2;
  static constexpr int kMainBytes = kQBytes + kStages * 2 * (kKvFp8 ? kRawTileBytes : kTileBytes);
  static constexpr int kTableOffset = kMainBytes;  // row addresses of kStages tiles after the ring
  static constexpr int kTableBytes = kStages * kTileKv * 8;
  static constexpr int kEpiBytes = kWarpsKv > 1 ? kWarpsKv * kTileQ * (kHeadDim + 2) * 4 : 0;
  static constexpr int kSmemBytes =
      kMainBytes + kTableBytes > kEpiBytes ? kMainBytes + kTableBytes : kEpiBytes;
  static_assert(kTileQ == 16 || kTileQ == 64 || kTileQ == 128, "FlashInfer's q tiles");
  static_assert(kChunks >= 8, "the swizzle needs 8 chunks per row");
  static_assert(kTileKv <= kThreads, "one thread per row of a tile's address table");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of kChunks chunks per row.
// An fp8 row of hd64 has 4 chunks, so two rows share a 128-byte line: there the XOR takes row / 2
// and the 8 rows one ldmatrix reads still fall in 8 different bank groups.
template <int kChunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(kChunks >= 8 || kChunks == 4, "rows of 4 or at least 8 chunks");
  if constexpr (kChunks >= 8) {
    return (row * kChunks + (chunk ^ (row & 7))) * 16;
  } else {
    return (row * kChunks + (chunk ^ ((row >> 1) & 3))) * 16;
  }
}

// kE5m2: the format of an fp8 cache (e5m2, else e4m3), fixed per kernel (fp8_widen.cuh says why).
template <class Tr, bool kE5m2>
__global__ void __launch_bounds__(Tr::kThreads) fi_prefill_kernel(const __grid_constant__ FiAttentionParams p) {
  using Element = typename Tr::Element;
  constexpr int D = Tr::kHeadDim, kTileQ = Tr::kTileQ, kTileKv = Tr::kTileKv, kChunks = Tr::kChunks;
  constexpr int kMmaQ = Tr::kMmaQ, kNFrags = Tr::kNFrags, kDFrags = Tr::kDFrags;
  constexpr bool kFp8 = Tr::kKvFp8;
  // Operand dtype of the MMAs: fp16 on an fp8 cache (mma_fp8.cuh), else the model dtype.
  using MmaT = std::conditional_t<kFp8, __half, Element>;
  // A bf16 Q goes to fp16 x kFp8QScale in shared memory once it landed.
  constexpr bool kQToHalf = kFp8 && !std::is_same_v<Element, __half>;
  extern __shared__ __align__(16) uint8_t smem[];

  const int work = blockIdx.x;
  if (work >= *p.num_work) return;  // CUDA-graph padding
  const int kvh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_q = warp % Tr::kWarpsQ, warp_kv = warp / Tr::kWarpsQ;
  const int g = lane / 4, tq = lane % 4;

  const int r = p.request_indices[work];
  const int q_tile = p.qo_tile_indices[work];
  const int chunk = p.kv_tile_indices[work];
  const int G = p.num_qo_heads / p.num_kv_heads;
  const int q_start = p.qo_indptr[r];
  const int q_len = p.qo_indptr[r + 1] - q_start;
  const int num_chunks = q_len > 0 ? (p.o_indptr[r + 1] - p.o_indptr[r]) / q_len : 1;
  const FiKeyRange kr = chunk_keys(p, r, chunk);
  const int row0 = q_tile * kTileQ;  // first packed row of the tile
  const int pos_base = kr.kv_len - q_len;  // position of query token 0
  const int qi_first = row0 / G;
  const int qi_last = min(q_len - 1, (row0 + kTileQ - 1) / G);

  // Keys any row of the tile sees within this chunk, and those every row sees (no mask).
  int key_lo = kr.begin, key_hi = kr.end;
  if (p.causal) key_hi = min(key_hi, pos_base + qi_last + 1);
  if (p.window_left >= 0) key_lo = max(key_lo, pos_base + qi_first - p.window_left);
  const int plain_lo = p.window_left >= 0 ? pos_base + qi_last - p.window_left : kr.begin;
  const int plain_hi = p.causal ? min(kr.end, pos_base + qi_first + 1) : kr.end;
  const int num_tiles = key_hi > key_lo ? (key_hi - key_lo + kTileKv - 1) / kTileKv : 0;

  uint8_t* sQ = smem;
  uint8_t* sKV = smem + Tr::kQBytes;  // [stage][K, V] tiles, 16-bit or raw fp8

  // ---- Q tile: packed row r -> (token row / G, head kvh * G + row % G) ----
  auto q_row = [&](int row, bool& valid) {
    const int qi = (row0 + row) / G;
    valid = qi < q_len;
    const int64_t tok = q_start + (valid ? qi : 0);
    return static_cast<const Element*>(p.q) + (tok * p.num_qo_heads + kvh * G + (row0 + row) % G) * D;
  };
  if constexpr (!kFp8) {
    for (int c = tid; c < kTileQ * kChunks; c += Tr::kThreads) {
      const int row = c / kChunks, col = c % kChunks;
      bool valid;
      cp_async_16(sQ + swizzle<kChunks>(row, col), q_row(row, valid) + col * 8, valid);
    }
  } else {
    // In A-fragment order, one 4-byte pair at a time; each thread fills whole slots, so the
    // conversion below touches only its own copies.
    for (int c = tid; c < kTileQ * kChunks; c += Tr::kThreads) fp8_q_slot_copy<Tr::kKSteps>(sQ, c, q_row);
  }
  if constexpr (kQToHalf) cp_async_commit();  // its own group: converted before the first tile lands

  // ---- K/V tile loader: keys past the range are zero-filled and never read from memory ----
  const int page_first = p.kv.indptr[r];
  constexpr int kKvBytes = Tr::kKvFp8 ? 1 : 2;
  constexpr int kLoadChunks = D * kKvBytes / 16;  // 16-byte loads per cache row
  const RowAddressTable<kTileKv, Tr::kStages> table{reinterpret_cast<int64_t*>(smem + Tr::kTableOffset), tid};
  auto load_tile = [&](int t, int stage) {
    const int64_t* addr = table.tile(t);
    for (int c = tid; c < kTileKv * kLoadChunks; c += Tr::kThreads) {
      const int row = c / kLoadChunks, col = c % kLoadChunks;
      const int key = key_lo + t * kTileKv + row;
      const bool valid = key < key_hi;
      const int64_t off = addr[row] + col * 16;
      if constexpr (Tr::kKvFp8) {
        uint8_t* dst = sKV + stage * 2 * Tr::kRawTileBytes + swizzle<Tr::kRawChunks>(row, col);
        cp_async_16(dst, static_cast<const uint8_t*>(p.kv.k) + off, valid);
        cp_async_16(dst + Tr::kRawTileBytes, static_cast<const uint8_t*>(p.kv.v) + off, valid);
      } else {
        uint8_t* dst = sKV + stage * 2 * Tr::kTileBytes + swizzle<kChunks>(row, col);
        cp_async_16(dst, static_cast<const uint8_t*>(p.kv.k) + off, valid);
        cp_async_16(dst + Tr::kTileBytes, static_cast<const uint8_t*>(p.kv.v) + off, valid);
      }
    }
  };

  ScoreScale sc = score_scale(p);
  // A bf16 Q multiplies as fp16 x kFp8QScale: the scores get the power of two back (exact).
  if constexpr (kQToHalf) sc.q *= 1.f / kFp8QScale;
  const bool softcap = sc.cap2 > 0.f;
  const int warp_row0 = warp_q * kMmaQ * 16;  // this warp's first row in the tile
  const int warp_key0 = warp_kv * Tr::kMmaKv * 16;

  float acc_o[kMmaQ][kDFrags][4];
  float row_max[kMmaQ][2], row_sum[kMmaQ][2];
#pragma unroll
  for (int mi = 0; mi < kMmaQ; ++mi) {
#pragma unroll
    for (int d = 0; d < kDFrags; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mi][d][e] = 0.f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }

#pragma unroll
  for (int n = 0; n < Tr::kStages; ++n) {
    uint32_t slot;
    const int page_id = table.fetch(p.kv, page_first, key_lo, key_hi, n, num_tiles, slot);
    table.store(p.kv, n, page_id, slot, kvh, kKvBytes);
  }
  __syncthreads();  // the first kStages tables
  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();
  if constexpr (kQToHalf) {
    // Each thread converts the Q chunks it copied (its own group, complete once at most the
    // tile group is pending); the main loop's first barrier publishes them.
    cp_async_wait<1>();
    for (int c = tid; c < kTileQ * kChunks; c += Tr::kThreads) fp8_q_to_half(sQ + c * 16);
  }

  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait<0>();
    __syncthreads();  // tile t landed for all; every warp is done with tile t - 1
    if (t + 1 < num_tiles) load_tile(t + 1, (t + 1) % Tr::kStages);
    cp_async_commit();
    uint32_t next_slot;  // table of tile t + kStages, stored at the end of the iteration
    const int next_page = table.fetch(p.kv, page_first, key_lo, key_hi, t + Tr::kStages, num_tiles, next_slot);

    const uint8_t* sK;
    const uint8_t* sV;
    if constexpr (Tr::kKvFp8) {
      sK = sKV + (t % Tr::kStages) * 2 * Tr::kRawTileBytes;
      sV = sK + Tr::kRawTileBytes;
    } else {
      sK = sKV + (t % Tr::kStages) * 2 * Tr::kTileBytes;
      sV = sK + Tr::kTileBytes;
    }

    // ---- S = Q K^T ----
    float acc_s[kMmaQ][kNFrags][4];
#pragma unroll
    for (int mi = 0; mi < kMmaQ; ++mi)
#pragma unroll
      for (int j = 0; j < kNFrags; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mi][j][e] = 0.f;
    if constexpr (!kFp8) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[kMmaQ][4];
#pragma unroll
        for (int mi = 0; mi < kMmaQ; ++mi)
          ldmatrix_x4(a[mi], sQ + swizzle<kChunks>(warp_row0 + mi * 16 + lane % 16, 2 * ks + lane / 16));
#pragma unroll
        for (int nj = 0; nj < Tr::kMmaKv; ++nj) {
          uint32_t b[4];
          const int key = warp_key0 + nj * 16 + (lane % 8) + (lane / 16) * 8;
          ldmatrix_x4(b, sK + swizzle<kChunks>(key, 2 * ks + (lane / 8) % 2));
#pragma unroll
          for (int mi = 0; mi < kMmaQ; ++mi) {
            mma_16816<Element>(acc_s[mi][2 * nj], a[mi], b[0], b[1]);
            mma_16816<Element>(acc_s[mi][2 * nj + 1], a[mi], b[2], b[3]);
          }
        }
      }
    } else {
      // One ldmatrix.x4 covers 4 raw K matrices of 8 keys x 16 dims (one chunk): 4 key blocks of
      // one k-step, or 2 key blocks x 2 k-steps (kTileQ 16: 16 keys per warp).
      constexpr int kNPer = kNFrags % 4 == 0 ? 4 : 2;
      constexpr int kKPer = 4 / kNPer;
#pragma unroll
      for (int kp = 0; kp < D / 16 / kKPer; ++kp) {
        uint32_t a[kKPer][kMmaQ][4];
#pragma unroll
        for (int h = 0; h < kKPer; ++h)
#pragma unroll
          for (int mi = 0; mi < kMmaQ; ++mi)
            fp8_q_slot_fragment(
                a[h][mi], sQ + 2 * fp8_q_slot<Tr::kKSteps>(warp_row0 / 16 + mi, kKPer * kp + h, lane));
#pragma unroll
        for (int nb = 0; nb < kNFrags / kNPer; ++nb) {
          uint32_t raw[4];  // [key block nb * kNPer + i % kNPer, k-step kKPer * kp + i / kNPer]
          const int key = fp8_k_lane_key<kNPer>(lane, warp_key0, nb);
          ldmatrix_x4(raw, sK + swizzle<Tr::kRawChunks>(key, kKPer * kp + fp8_k_lane_kstep<kNPer>(lane)));
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint2 bb = fp8_k_fragment<kE5m2>(raw[i]);
#pragma unroll
            for (int mi = 0; mi < kMmaQ; ++mi)
              mma_16816<MmaT>(acc_s[mi][nb * kNPer + i % kNPer], a[i / kNPer][mi], bb.x, bb.y);
          }
        }
      }
    }

    // ---- scores in log2 units, masks, online softmax ----
    const int tile_key0 = key_lo + t * kTileKv;
    const bool need_mask = tile_key0 < plain_lo || tile_key0 + kTileKv > plain_hi;
    const bool plain = !softcap && !need_mask;
    const float s_scale = plain ? sc.q : 1.f;
#pragma unroll
    for (int mi = 0; mi < kMmaQ; ++mi) {
      if (!plain) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int qi = (row0 + warp_row0 + mi * 16 + g + 8 * h) / G;
          const int pos = pos_base + qi;
#pragma unroll
          for (int j = 0; j < kNFrags; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = tile_key0 + warp_key0 + j * 8 + 2 * tq + e;
              const bool visible = key < key_hi && (!p.causal || key <= pos) &&
                                   (p.window_left < 0 || key >= pos - p.window_left);
              acc_s[mi][j][2 * h + e] = visible ? sc.apply(acc_s[mi][j][2 * h + e] * sc.q) : -INFINITY;
            }
        }
      }
      mma_softmax_update<Tr::kLazyMax>(acc_s[mi], acc_o[mi], row_max[mi], row_sum[mi], s_scale);
    }

    // ---- O += P V ----
#pragma unroll
    for (int kk = 0; kk < Tr::kMmaKv; ++kk) {
      uint32_t a[kMmaQ][4];
#pragma unroll
      for (int mi = 0; mi < kMmaQ; ++mi) p_fragment<MmaT>(a[mi], acc_s[mi], kk);
      const int key = warp_key0 + kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
      if constexpr (!kFp8) {
#pragma unroll
        for (int dj = 0; dj < D / 16; ++dj) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, sV + swizzle<kChunks>(key, 2 * dj + lane / 16));
#pragma unroll
          for (int mi = 0; mi < kMmaQ; ++mi) {
            mma_16816<Element>(acc_o[mi][2 * dj], a[mi], b[0], b[1]);
            mma_16816<Element>(acc_o[mi][2 * dj + 1], a[mi], b[2], b[3]);
          }
        }
      } else {
        // One ldmatrix.x4.trans: 16 keys x 32 fp8 dims (two chunks) = the B fragments of 4 O
        // column blocks, even and odd dims of each chunk.
#pragma unroll
        for (int dq = 0; dq < D / 32; ++dq) {
          uint32_t raw[4];  // [chunk 2 dq + i / 2][keys 0-7 | 8-15]
          ldmatrix_x4_trans(raw, sV + swizzle<Tr::kRawChunks>(key, 2 * dq + lane / 16));
#pragma unroll
          for (int gi = 0; gi < 2; ++gi) {
            const uint4 b = fp8_v_fragments<kE5m2>(raw[2 * gi], raw[2 * gi + 1]);
#pragma unroll
            for (int mi = 0; mi < kMmaQ; ++mi) {
              mma_16816<MmaT>(acc_o[mi][4 * dq + 2 * gi], a[mi], b.x, b.y);
              mma_16816<MmaT>(acc_o[mi][4 * dq + 2 * gi + 1], a[mi], b.z, b.w);
            }
          }
        }
      }
    }
    table.store(p.kv, t + Tr::kStages, next_page, next_slot, kvh, kKvBytes);
  }
  cp_async_wait<0>();

  if constexpr (Tr::kWarpsKv == 1) {
    // A warp owns whole rows: normalize and store from registers.
#pragma unroll
    for (int mi = 0; mi < kMmaQ; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sum = quad_sum(row_sum[mi][h]);
        const int prow = row0 + warp_row0 + mi * 16 + g + 8 * h;
        const int qi = prow / G;
        if (qi >= q_len) continue;
        const int head = kvh * G + prow % G;
        const float lse2 = has_keys_or_nan(sum) ? row_max[mi][h] + log2f(sum) : -INFINITY;
        const float inv = sum > 0.f ? sc.v / sum : 0.f;
        if constexpr (!kFp8) {
#pragma unroll
          for (int d = 0; d < kDFrags; ++d) {
            const float out[2] = {acc_o[mi][d][2 * h] * inv, acc_o[mi][d][2 * h + 1] * inv};
            write_row<Element, D, 2>(p, r, num_chunks, chunk, qi, head, out, lse2, d * 8 + 2 * tq, d == 0 && tq == 0);
          }
        } else {
          // Column blocks (2b, 2b + 1) hold the even and odd dims 16b + 4t + {0..3}.
#pragma unroll
          for (int b = 0; b < kDFrags / 2; ++b) {
            const float4 o = fp8_o_dims(acc_o[mi][2 * b], acc_o[mi][2 * b + 1], h);
            const float out[4] = {o.x * inv, o.y * inv, o.z * inv, o.w * inv};
            write_row<Element, D, 4>(p, r, num_chunks, chunk, qi, head, out, lse2, b * 16 + 4 * tq, b == 0 && tq == 0);
          }
        }
      }
    return;
  }

  // ---- the warps split the keys: merge their (max, sum, O) in shared memory ----
  __syncthreads();
  float* sO = reinterpret_cast<float*>(smem);       // [kWarpsKv][kTileQ][D]
  float* sM = sO + Tr::kWarpsKv * kTileQ * D;       // [kWarpsKv][kTileQ]
  float* sS = sM + Tr::kWarpsKv * kTileQ;           // [kWarpsKv][kTileQ]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = quad_sum(row_sum[0][h]);
    const int row = g + 8 * h;
    if (tq == 0) {
      sM[warp_kv * kTileQ + row] = row_max[0][h];
      sS[warp_kv * kTileQ + row] = sum;
    }
    if constexpr (!kFp8) {
#pragma unroll
      for (int d = 0; d < kDFrags; ++d)
        *reinterpret_cast<float2*>(sO + (warp_kv * kTileQ + row) * D + d * 8 + 2 * tq) =
            make_float2(acc_o[0][d][2 * h], acc_o[0][d][2 * h + 1]);
    } else {
      // Column blocks (2b, 2b + 1) hold the even and odd dims 16b + 4t + {0..3}.
#pragma unroll
      for (int b = 0; b < kDFrags / 2; ++b)
        *reinterpret_cast<float4*>(sO + (warp_kv * kTileQ + row) * D + b * 16 + 4 * tq) =
            fp8_o_dims(acc_o[0][2 * b], acc_o[0][2 * b + 1], h);
    }
  }
  __syncthreads();
  for (int c = tid; c < kTileQ * (D / 4); c += Tr::kThreads) {
    const int row = c / (D / 4), dim0 = (c % (D / 4)) * 4;
    const int prow = row0 + row;
    const int qi = prow / G;
    if (qi >= q_len) continue;
    OnlineSoftmaxRow st;
    float out[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < Tr::kWarpsKv; ++w) {
      const float corr = st.absorb(sM[w * kTileQ + row], sS[w * kTileQ + row]);
      const float4 v = *reinterpret_cast<const float4*>(sO + (w * kTileQ + row) * D + dim0);
      out[0] = out[0] * corr + st.last_weight * v.x;
      out[1] = out[1] * corr + st.last_weight * v.y;
      out[2] = out[2] * corr + st.last_weight * v.z;
      out[3] = out[3] * corr + st.last_weight * v.w;
    }
    const float inv = st.d > 0.f ? sc.v / st.d : 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] *= inv;
    write_row<Element, D, 4>(p, r, num_chunks, chunk, qi, kvh * G + prow % G, out, st.lse2(), dim0, dim0 == 0);
  }
}

}  // namespace attn::fi

namespace attn::fi {

// Host side of one prefill instantiation: grid (padded work items, kv heads), the kernel of the
// cache's fp8 format.
template <int kHeadDim, class Element, bool kKvFp8, int kTileQ>
void run_fi_prefill(const FiAttentionParams& p, int grid_work, cudaStream_t stream) {
  using Tr = PrefillTraits<kHeadDim, Element, kKvFp8, kTileQ>;
  static const cudaError_t configured[2] = {
      cudaFuncSetAttribute(fi_prefill_kernel<Tr, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes),
      cudaFuncSetAttribute(fi_prefill_kernel<Tr, kKvFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes)};
  (void)configured;
  const auto kernel = kKvFp8 && p.kv_fp8_e5m2 ? fi_prefill_kernel<Tr, kKvFp8> : fi_prefill_kernel<Tr, false>;
  kernel<<<dim3(grid_work, p.num_kv_heads), Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
}

#define ATTN_FI_PREFILL_INSTANTIATE_ONE(D, E, F, Q) \
  template void run_fi_prefill<D, E, F, Q>(const FiAttentionParams&, int, cudaStream_t);
#define ATTN_FI_PREFILL_INSTANTIATE_TILES(D, E, F) \
  ATTN_FI_PREFILL_INSTANTIATE_ONE(D, E, F, 16)     \
  ATTN_FI_PREFILL_INSTANTIATE_ONE(D, E, F, 64)     \
  ATTN_FI_PREFILL_INSTANTIATE_ONE(D, E, F, 128)
#define ATTN_FI_PREFILL_INSTANTIATE_TILES_256(D, E, F) \
  ATTN_FI_PREFILL_INSTANTIATE_ONE(D, E, F, 16)         \
  ATTN_FI_PREFILL_INSTANTIATE_ONE(D, E, F, 64)
// The prefill instantiations of one head size (fi_prefill_hd<N>.cu): both model dtypes, the
// model-dtype and the fp8 cache, q tiles 16/64/128 (hd256: 16/64, FlashInfer's rule).
#define ATTN_FI_PREFILL_INSTANTIATE_HEAD_SIZE(D, TILES)    \
  TILES(D, __half, false)                                  \
  TILES(D, __half, true)                                   \
  TILES(D, __nv_bfloat16, false)                           \
  TILES(D, __nv_bfloat16, true)

}  // namespace attn::fi
