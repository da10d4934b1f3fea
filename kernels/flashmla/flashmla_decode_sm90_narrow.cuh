#pragma once
// FLASHMLA split-KV decode for Hopper (sm_90a) where a request has at most 32 packed query rows
// (16 heads, q_len 1 or 2: DeepSeek-V3 at tensor parallel 8): the same products as
// flashmla_decode_sm90.cuh, transposed. The seesaw kernel makes the query rows the MMA's M, which
// is 64 on a warpgroup, so a 16-row request computed 4 x the useful tensor work and each 64-key
// block held its buffer through those padded products while the next block's copies waited (on an
// H200, 16-head decodes ran ~1.2 x faster with either product left out; docs/PERF_NOTES.md,
// FLASHMLA, thirtieth session). Here the keys are M and the query rows N (16 or 32):
//
//   S^T = K Q^T     64 keys x N, K-major A (the cached rows) and B (Q), 36 k-steps m64nNk16
//   column softmax  a query row's max and sum over the block's keys: within a thread (2 keys),
//                   the 8 lanes sharing its columns (shuffles) and the 4 warps (shared memory)
//   P stored        [N rows][64 keys], the K-major B of the next product
//   O^T += V^T P^T  512 dims x N: 8 tiles of 64 dims, A = the block's first 512 columns read
//                   M-major (transposed), 4 k-steps of 16 keys each
//
// A CTA is one consumer warpgroup (warps 0-3) and one producer warp (warp 4) on one scheduler
// partition; a request's rows never need a second m_block. Lane 0 of the producer loads each
// block whole (9 boxes of 64 columns x 64 slots, one full barrier) into one of two 72 KB buffers,
// which the consumers free once its P V completed, and each piece's Q (9 boxes of 64 columns x N
// rows). The lazy maxima, the -inf / 0 conventions of a row without keys, the zeroed V rows past a
// piece's end (the NaN page tail) and the outputs (normalized O and LSE, direct or per piece) are
// those of the seesaw kernel.
//
// Shared-memory layout of an R x 576 tile (K buffers: R = 64; Q: R = N): 9 column blocks of 64
// elements, each [R rows][128 B], 16-byte chunk c of row r at chunk c ^ (r % 8) (the TMA 128-byte
// swizzle), every block on a 1024-byte boundary; the stored P is one such block of N rows.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/mbarrier.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/sm90_image.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/flashmla/flashmla_launch.hpp"
#include "kernels/flashmla/flashmla_partition.cuh"
#include "kernels/flashmla/flashmla_params.hpp"

namespace attn::mla::sm90 {

using namespace attn::kern;

// kN: query rows per tile (the products' N), 16 or 32.
template <int kN>
struct NarrowTraits {
  static constexpr int kThreads = 160;                            // 4 consumer warps + 1 producer warp
  static constexpr int kBlockKeys = kFlashMlaBlockN;              // 64 keys per buffer (one cache block)
  static constexpr int kColBlocks = kFlashMlaHeadDimK / 64;       // 9
  static constexpr int kVTiles = kFlashMlaHeadDimV / 64;          // 8 tiles of 64 dims in O^T
  static constexpr int kKColBytes = kBlockKeys * 128;             // 8 KB
  static constexpr int kKBytes = kColBlocks * kKColBytes;         // 72 KB
  static constexpr int kQColBytes = kN * 128;                     // 2 or 4 KB
  static constexpr int kQBytes = kColBlocks * kQColBytes;         // 18 or 36 KB
  static constexpr int kPBytes = kN * 128;                        // P: [kN rows][64 keys] 16-bit
  static constexpr int kAccS = kN / 2;                            // S^T accumulators per thread
  static constexpr int kCols = kN / 4;                            // query rows (columns) per thread
  static constexpr int kRedFloats = 4 * kN;                       // [warp][row] maxima or sums
  static constexpr int kBarriers = 8;                             // K full/empty (4), Q full/empty (4)
  static constexpr int kSmemBytes = 2 * kKBytes + 2 * kQBytes + kPBytes + kRedFloats * 4 + kBarriers * 8 + 1024;
  static_assert(kN == 16 || kN == 32, "m64n16 or m64n32 products");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
};
// Named barrier of the consumer warpgroup (0 is __syncthreads).
constexpr int kBarNarrow = 1;

template <class Element, int kN>
__global__ void __launch_bounds__(NarrowTraits<kN>::kThreads, 1)
    flashmla_decode_sm90_narrow_kernel(const __grid_constant__ FlashMlaDecodeParams p,
                                       const __grid_constant__ CUtensorMap tm_kv, const __grid_constant__ CUtensorMap tm_q) {
#if defined(ATTN_SM90A_DEVICE)
  using Tr = NarrowTraits<kN>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  uint8_t* sK0 = smem;                           // K buffers 0 and 1, Tr::kKBytes each
  uint8_t* sQ = smem + 2 * Tr::kKBytes;          // Q slots 0 and 1, [9][kN rows][128 B] each
  uint8_t* sP = sQ + 2 * Tr::kQBytes;            // [kN rows][128 B]
  float* sRed = reinterpret_cast<float*>(sP + Tr::kPBytes);  // [4 warps][kN]
  const uint32_t sK_addr0 = smem_u32(sK0), sQ_addr0 = smem_u32(sQ), sP_addr = smem_u32(sP);
  auto sK_addr = [&](int k) { return sK_addr0 + k * Tr::kKBytes; };
  auto sQ_addr = [&](int qs) { return sQ_addr0 + qs * Tr::kQBytes; };
  const uint32_t bar_addr = smem_u32(sRed + Tr::kRedFloats);
  auto full_bar = [&](int k) { return bar_addr + 8 * k; };
  auto empty_bar = [&](int k) { return bar_addr + 8 * (2 + k); };
  auto q_full = [&](int qs) { return bar_addr + 8 * (4 + qs); };
  auto q_empty = [&](int qs) { return bar_addr + 8 * (6 + qs); };

  const int tid = threadIdx.x, lane = tid % 32;
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);  // warp-uniform for the compiler
  pdl_launch_dependents();  // the combine may launch now (flashmla_decode.cuh says why)
  const MlaPartition part = mla_partition(p, blockIdx.y);
  const int rows = p.q_len * p.num_heads;  // packed rows of one request (<= kN)

  if (tid == 0) {
    for (int k = 0; k < 2; ++k) {
      mbar_init(full_bar(k), 1);   // the producer's expect_tx arrival
      mbar_init(empty_bar(k), 4);  // every consumer warp, once its P V completed
    }
    for (int qs = 0; qs < 2; ++qs) {
      mbar_init(q_full(qs), 1);
      mbar_init(q_empty(qs), 4);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp == 4) {
    // ---- producer: the warp walks the pieces' blocks (buffer b % 2 for the partition's b-th
    // block), lane 0 issues the copies. The block-table entries come 32 at a time, a lane each,
    // the next 32 loaded as the current ones start: a refill never waits on a table load after its
    // buffer came free (one round trip per block when lane 0 loaded each entry there), and the
    // first copies wait for the scheduler's row and one table load only.
    int b = 0;
    const uint64_t policy = l2_evict_first_policy();
    for (int req = part.begin_req, piece = 0; req <= part.end_req; ++req, ++piece) {
      const int32_t* table = p.block_table + static_cast<int64_t>(req) * p.block_table_stride;
      const int n_first = req == part.begin_req ? part.begin_token / Tr::kBlockKeys : 0;
      // Entries n0 + lane, within the row (past the piece's end they are loaded and never used).
      auto window = [&](int n0) { return n0 + lane < p.block_table_stride ? table[n0 + lane] : 0; };
      int win = n_first, cur = window(win), nxt = window(win + 32);
      const MlaPiece pc = mla_piece<Tr::kBlockKeys>(p, part, req);
      const int n_begin = pc.n_begin, n_end = pc.n_end;
      const int qs = piece & 1;  // Q slot of the piece
      for (int n = n_begin; n < n_end || n == n_begin; ++n) {
        if (n < n_end) {
          if (n == win + 32) {
            win += 32;
            cur = nxt;
            nxt = window(win + 32);
          }
          const int blk = __shfl_sync(0xffffffffu, cur, n - win);
          const int k = b & 1, u = b >> 1;
          if (u > 0) mbar_wait(empty_bar(k), (u - 1) & 1);
          if (lane == 0) {
            mbar_arrive_expect_tx(full_bar(k), Tr::kKBytes);
            for (int cb = 0; cb < Tr::kColBlocks; ++cb)
              if (p.kv_evict_first) {
                tma_load_3d_hint(sK_addr(k) + cb * Tr::kKColBytes, &tm_kv, cb * 64, 0, blk, full_bar(k), policy);
              } else {
                tma_load_3d(sK_addr(k) + cb * Tr::kKColBytes, &tm_kv, cb * 64, 0, blk, full_bar(k));
              }
          }
          ++b;
        }
        if (n == n_begin) {
          // Q of the piece into slot piece % 2 (after its first block; the slot's last piece,
          // two back, is long done): rows req * rows .. + kN - 1 of [batch * rows, 576]; rows
          // past the request are the next one's (or zeros past the tensor) and never stored.
          if (piece > 1) mbar_wait(q_empty(qs), ((piece >> 1) - 1) & 1);
          if (lane == 0) {
            mbar_arrive_expect_tx(q_full(qs), Tr::kQBytes);
            for (int cb = 0; cb < Tr::kColBlocks; ++cb)
              tma_load_2d(sQ_addr(qs) + cb * Tr::kQColBytes, &tm_q, cb * 64, req * rows, q_full(qs));
          }
        }
      }
    }
    return;
  }

  // ---- consumers: warp ww holds keys 16 ww + g (+ 8) of a block and query rows 8 j + 2 tq (+ 1) ----
  const int ww = warp, g = lane / 4, tq = lane % 4, wtid = tid;
  const float scale_log2 = p.softmax_scale * kLog2e;
  // This thread's query rows (S^T and O^T columns): c = 2 j + e, row 8 j + 2 tq + e.
  int col[Tr::kCols], row_q[Tr::kCols];
#pragma unroll
  for (int c = 0; c < Tr::kCols; ++c) {
    col[c] = 8 * (c / 2) + 2 * tq + (c % 2);
    row_q[c] = col[c] / p.num_heads;  // query index of the row: the causal limit between two tokens
  }
  const Sw128Desc q_desc0 = sw128_desc_words(sQ_addr(0), 16, 1024).uniform();
  const Sw128Desc q_desc1 = sw128_desc_words(sQ_addr(1), 16, 1024).uniform();
  const Sw128Desc p_desc = sw128_desc_words(sP_addr, 16, 1024).uniform();
  int b = 0;  // the partition's blocks consumed so far (the producer's count)

  for (int req = part.begin_req, piece = 0; req <= part.end_req; ++req, ++piece) {
    const MlaPiece pc = mla_piece<Tr::kBlockKeys>(p, part, req);
    const int kend = pc.kend, seq_len = pc.seq_len, split = pc.split, split_base = pc.split_base;
    const bool no_split = pc.no_split;
    const int n_begin = pc.n_begin, n_end = pc.n_end;

    float acc_o[Tr::kVTiles][Tr::kAccS];  // O^T: dims 64 i + 16 ww + g (+ 8) x this thread's rows
#pragma unroll
    for (int i = 0; i < Tr::kVTiles; ++i)
#pragma unroll
      for (int e = 0; e < Tr::kAccS; ++e) acc_o[i][e] = 0.f;
    float row_max[Tr::kCols], row_sum[Tr::kCols];  // log2 units; the sum over this thread's keys
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) {
      row_max[c] = -INFINITY;
      row_sum[c] = 0.f;
    }
    const int qs = piece & 1;
    const Sw128Desc q_desc = qs ? q_desc1 : q_desc0;
    mbar_wait(q_full(qs), (piece >> 1) & 1);

    for (int n = n_begin; n < n_end; ++n, ++b) {
      const int k = b & 1;
      const uint32_t kaddr = sK_addr(k);
      mbar_wait(full_bar(k), (b >> 1) & 1);

      // S^T = K Q^T: k-step ks reads dims 16 ks ..: column block ks / 4, 32-byte offset ks % 4.
      float s[Tr::kAccS];
      {
        const Sw128Desc kd = sw128_desc_words(kaddr, 16, 1024).uniform();
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4 * Tr::kColBlocks; ++ks)
          wgmma_ss_narrow<Element, Tr::kAccS, false>(s, kd.at((ks / 4) * Tr::kKColBytes + (ks % 4) * 32),
                                                     q_desc.at((ks / 4) * Tr::kQColBytes + (ks % 4) * 32), ks > 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
      }
      // Keys some row does not see (past the piece's end, and with two query tokens the first
      // one's causal limit) sit only in a piece's last block; the S^T row of a NaN page-tail key
      // becomes -inf here. Accumulator e holds key 16 ww + g + 8 ((e % 4) / 2) of this thread's
      // column c = 2 (e / 4) + e % 2.
      const int key0 = n * Tr::kBlockKeys + 16 * ww + g;
      if (n * Tr::kBlockKeys + Tr::kBlockKeys > min(kend, seq_len - p.q_len + 1)) {
#pragma unroll
        for (int e = 0; e < Tr::kAccS; ++e) {
          const int key = key0 + 8 * ((e % 4) / 2), c = 2 * (e / 4) + e % 2;
          if (!(key < kend && key <= seq_len - p.q_len + row_q[c])) s[e] = -INFINITY;
        }
      }
      // Column maxima of the block: this thread's two keys, the 8 lanes sharing its columns (lane
      // bits 2-4), the 4 warps.
      float cmax[Tr::kCols];
#pragma unroll
      for (int c = 0; c < Tr::kCols; ++c) {
        const int e0 = 4 * (c / 2) + c % 2;
        float m = fmaxf(s[e0], s[e0 + 2]);
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
        cmax[c] = m;
      }
      if (g == 0) {
#pragma unroll
        for (int c = 0; c < Tr::kCols; ++c) sRed[ww * kN + col[c]] = cmax[c];
      }
      named_bar_sync(kBarNarrow, 128);
      float alpha[Tr::kCols], m_use[Tr::kCols];
#pragma unroll
      for (int c = 0; c < Tr::kCols; ++c) {
        const float raw = fmaxf(fmaxf(sRed[col[c]], sRed[kN + col[c]]), fmaxf(sRed[2 * kN + col[c]], sRed[3 * kN + col[c]]));
        // Lazy maxima as the seesaw kernel's (OnlineSoftmaxRow::update_lazy): softmax_scale > 0, so
        // the scaled max of the raw scores is the max of the scaled ones.
        const float mx = fmaxf(row_max[c], raw * scale_log2);
        const bool grow = mx > row_max[c] + OnlineSoftmaxRow::kLazyRescaleLog2;
        const float m_new = grow ? mx : row_max[c];
        m_use[c] = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: keep P = 0
        alpha[c] = grow ? fast_exp2(row_max[c] - m_use[c]) : 1.f;
        row_max[c] = m_new;
      }
      // P = 2^(S scale - m) into [kN rows][64 keys] (swizzled like Q), the row sums, O^T rescaled.
#pragma unroll
      for (int e = 0; e < Tr::kAccS; ++e) {
        const int c = 2 * (e / 4) + e % 2;
        s[e] = fast_exp2(fmaf(s[e], scale_log2, -m_use[c]));
      }
#pragma unroll
      for (int c = 0; c < Tr::kCols; ++c) {
        const int e0 = 4 * (c / 2) + c % 2;
        row_sum[c] = row_sum[c] * alpha[c] + s[e0] + s[e0 + 2];
      }
#pragma unroll
      for (int e = 0; e < Tr::kAccS; ++e) {
        const int r = col[2 * (e / 4) + e % 2], key = 16 * ww + g + 8 * ((e % 4) / 2);
        *reinterpret_cast<uint16_t*>(sP + r * 128 + (((key / 8) ^ (r & 7)) << 4) + (key % 8) * 2) =
            static_cast<uint16_t>(pack2<Element>(s[e], 0.f) & 0xffffu);
      }
      if (__any_sync(0xffffffffu, [&] {
            bool any = false;
#pragma unroll
            for (int c = 0; c < Tr::kCols; ++c) any |= alpha[c] != 1.f;
            return any;
          }())) {
#pragma unroll
        for (int i = 0; i < Tr::kVTiles; ++i)
#pragma unroll
          for (int e = 0; e < Tr::kAccS; ++e) acc_o[i][e] *= alpha[2 * (e / 4) + e % 2];
      }
      // The piece's last block, if it ends inside it: V rows past kend zeroed (0 x NaN otherwise).
      const int valid = kend - n * Tr::kBlockKeys;
      if (valid < Tr::kBlockKeys) {
        uint8_t* v = smem + k * Tr::kKBytes;
        const int chunks = (Tr::kBlockKeys - valid) * 8;  // 16-byte chunks per column block
        for (int x = wtid; x < Tr::kVTiles * chunks; x += 128) {
          const int cb = x / chunks, rc = x % chunks;
          *reinterpret_cast<uint4*>(v + cb * Tr::kKColBytes + (valid + rc / 8) * 128 + (rc % 8) * 16) = make_uint4(0, 0, 0, 0);
        }
      }
      fence_proxy_async();  // P and the zeroed rows are read by the tensor cores
      named_bar_sync(kBarNarrow, 128);  // every warp's P is stored (and sRed read)

      // O^T += V^T P^T: dims tile i reads column block i of the buffer M-major; k-step kk = keys
      // 16 kk .. (2048 bytes of rows), P's 32-byte column offset.
#pragma unroll
      for (int i = 0; i < Tr::kVTiles; ++i) fence_regs(acc_o[i]);
      wgmma_fence();
#pragma unroll
      for (int i = 0; i < Tr::kVTiles; ++i) {
        const Sw128Desc vd = sw128_desc_words(kaddr + i * Tr::kKColBytes, Tr::kKColBytes, 1024).uniform();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_ss_narrow<Element, Tr::kAccS, true>(acc_o[i], vd.at(kk * 2048), p_desc.at(kk * 32), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < Tr::kVTiles; ++i) fence_regs(acc_o[i]);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar(k));
    }

    // Epilogue: the row sums over the 8 lanes sharing a column and the 4 warps.
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) {
      float l = row_sum[c];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      row_sum[c] = l;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(q_empty(qs));  // this warp's products are done with the piece's Q
    if (g == 0) {
#pragma unroll
      for (int c = 0; c < Tr::kCols; ++c) sRed[ww * kN + col[c]] = row_sum[c];
    }
    named_bar_sync(kBarNarrow, 128);
    float l[Tr::kCols];
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) l[c] = sRed[col[c]] + sRed[kN + col[c]] + sRed[2 * kN + col[c]] + sRed[3 * kN + col[c]];
    named_bar_sync(kBarNarrow, 128);  // sRed is rewritten by the next piece
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) {
      const int row = col[c];
      if (row >= rows) continue;
      // No visible key: O = 0 and LSE = -inf (merge_attn_states weighs such a piece with 0).
      const float inv = l[c] > 0.f ? 1.f / l[c] : 0.f;
      const float lse = has_keys_or_nan(l[c]) ? row_max[c] * 0.6931471805599453f + logf(l[c]) : -INFINITY;
      const int64_t out_row = no_split ? static_cast<int64_t>(req) * rows + row : static_cast<int64_t>(split_base + split) * rows + row;
      float* o = (no_split ? p.o : p.o_accum) + out_row * kFlashMlaHeadDimV + 16 * ww + g;
#pragma unroll
      for (int i = 0; i < Tr::kVTiles; ++i) {
        const int e0 = 4 * (c / 2) + c % 2;
        o[64 * i] = acc_o[i][e0] * inv;
        o[64 * i + 8] = acc_o[i][e0 + 2] * inv;
      }
      if (ww == 0 && g == 0) (no_split ? p.lse : p.lse_accum)[out_row] = lse;
    }
  }
#endif
}

// Launch over (1, num_parts); the tensor maps name the latent cache as [num_blocks][64 slots][576]
// with boxes of 64 columns x 64 slots, and the query as [batch * rows][576] with boxes of 64
// columns x kN rows.
template <class Element, int kN>
void run_flashmla_decode_sm90_narrow(const FlashMlaDecodeParams& p, const CUtensorMap& tm_kv, const CUtensorMap& tm_q,
                                     cudaStream_t stream) {
  using Tr = NarrowTraits<kN>;
  static const cudaError_t attr = cudaFuncSetAttribute(flashmla_decode_sm90_narrow_kernel<Element, kN>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  (void)attr;  // a failure shows up as the launch error
  const dim3 grid(1u, static_cast<unsigned>(p.num_parts));
  flashmla_decode_sm90_narrow_kernel<Element, kN><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, tm_kv, tm_q);
}

}  // namespace attn::mla::sm90

#define ATTN_FLASHMLA_SM90_NARROW_INSTANTIATE(Element)                                                        \
  template void run_flashmla_decode_sm90_narrow<Element, 16>(const FlashMlaDecodeParams&, const CUtensorMap&, \
                                                             const CUtensorMap&, cudaStream_t);               \
  template void run_flashmla_decode_sm90_narrow<Element, 32>(const FlashMlaDecodeParams&, const CUtensorMap&, \
                                                             const CUtensorMap&, cudaStream_t);
