#pragma once
// FLASHMLA split-KV decode for Hopper (sm_90a): warpgroup MMAs over 64 packed query rows, the
// latent cache streamed by the bulk tensor copy engine (TMA). Same data layout, scheduler
// partitions and outputs as the mma.sync kernel (flashmla_decode.cuh, flashmla_params.hpp); the
// launcher picks this one where the device and the build have sm_90a (FlashMlaKernel in
// flashmla_params.hpp). A tile is always 64 rows: a 16-row request's other rows are computed and
// never stored.
//
// A CTA is two consumer warpgroups and a producer warpgroup (384 threads) on one m_block of one
// scheduler partition; setmaxnreg leaves the producer 24 registers and gives the consumers 240.
// The 64 x 512 fp32 O does not fit one warpgroup's registers, so warpgroup 0 owns its columns
// 0..255 (O_L) and warpgroup 1 its columns 256..511 (O_R). Keys come in rounds of two 64-key
// cache blocks, K0 and K1, each in its own 72 KB buffer (9 column blocks of 64 x 64):
//
//   warpgroup 0                                  warpgroup 1
//   S0 = Q K0^T                                  S1 = Q K1^T
//   m0 = max(m, rowmax S0), P0 = 2^(S0 - m0)
//   P0 stored                           -->      O_R = O_R 2^(m - m0) + P0 V0R, and under it
//   O_L = O_L 2^(m - m0) + P0 V0L                m1 = max(m0, rowmax S1), P1 = 2^(S1 - m1)
//                                       <--      P1 stored
//   O_L = O_L 2^(m0 - m1) + P1 V1L               O_R = O_R 2^(m0 - m1) + P1 V1R
//
// (the maxima lazily: m0 stays m unless S0 exceeds it by more than 2^8, and so does m1; the factors
// are then exactly 1 and O is not rescaled), so each warpgroup's softmax runs while the other
// one's products keep the tensor cores busy, and each multiplies S over all 64 keys of a block
// (m64n64k16: half the shared-memory reads per product of 32-key tiles). V is the first 512
// columns of the same key rows (N-major B). P0, which warpgroup 1 multiplies, goes into K0's
// rope column block (no product reads it once S0 is done); P1 into a buffer of its own. Each P
// is stored in its own max's scale, so warpgroup 1 multiplies P0 as soon as it is stored, before
// its own softmax: K0 is free for the next round by mid-round, and the next round's S0 does not
// wait for its copies (128 heads, 64 x 4k: 147 -> 130 us against multiplying P0 last, after P1).
// - One producer thread moves, per request piece, the 64 x 576 Q tile (9 boxes, one barrier),
//   then each block as two groups with their own full (transaction bytes) and empty barriers:
//   a = columns 0..255 and b = columns 256..575. Each group is last read by one warpgroup's
//   product (K0: a by P0 V0L, b by P0 V0R; K1: b by P1 V1R, a by P1 V1L) and refilled as soon as
//   that product is done; the producer loads the groups in the order they come free (K0 a,
//   K0 b, K1 b, K1 a), and each warpgroup's S takes its block's groups in that order too.
// - Key rows past the piece's end (the NaN page tail) are loaded as they are: S masks them to
//   -inf, and each warpgroup zeroes its half of those V rows before its product, so 0 x NaN never
//   happens.
//
// Shared-memory layout of an R x 576 tile (Q, K0, K1: R = 64): 9 column blocks of 64 elements,
// each [64 rows][128 B], 16-byte chunk c of row r at chunk c ^ (r % 8) (the TMA 128-byte swizzle),
// every block on a 1024-byte boundary. A stored P (64 x 64, 16-bit) has the same layout.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/lse_merge.cuh"
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

constexpr int kBlockM = 64;                         // packed query rows per CTA (one m_block)
constexpr int kBlockN = kFlashMlaBlockN;            // keys per K buffer: one 64-token cache block
constexpr int kColBlocks = kFlashMlaHeadDimK / 64;  // 9 column blocks of 64
constexpr int kColsA = 4;                           // group a: column blocks 0..3 (V's first 256 columns)
constexpr int kThreads = 384;                       // two consumer warpgroups + the producer warpgroup
// Registers per thread after setmaxnreg: 128 x 24 + 256 x 240 = 64512, all the CTA launched with.
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
// setmaxnreg moves registers only within what the CTA was launched with (168 per thread for 384
// threads); asking for more makes setmaxnreg.inc wait forever.
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168, "setmaxnreg beyond the CTA's registers");
constexpr int kColBytes = 64 * 128;                 // one column block of a 64-row tile: 8 KB
constexpr int kTileBytes = kColBlocks * kColBytes;  // Q, K0, K1: 72 KB each
constexpr int kStatFloats = 6 * kBlockM;            // m0, scale0, m1, scale1, row sums of both warpgroups
constexpr int kBarriers = 12;  // K full/empty (8), Q full/empty, the two hand-offs of a round
// + P1, and 16 bytes after the barriers (sMergeReq: the merges of split requests, below).
constexpr int kSmemBytes = 3 * kTileBytes + kColBytes + kStatFloats * 4 + kBarriers * 8 + 16 + 1024;
static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
static_assert(kBlockN == 64 && kBlockM == 64, "a K buffer is one cache block of 64 rows");
// Named barriers (0 is __syncthreads): each warpgroup's zeroed V tail (128 threads) and the
// epilogue's row sums (256). The hand-offs between the warpgroups within a round are mbarriers:
// every thread of the sender arrives (a release of its own writes), the receiver waits.
constexpr int kBarTail = 5, kBarSum = 7;

template <class Element>
__global__ void __launch_bounds__(kThreads, 1)
    flashmla_decode_sm90_kernel(const __grid_constant__ FlashMlaDecodeParams p, const __grid_constant__ CUtensorMap tm_kv,
                                const __grid_constant__ CUtensorMap tm_q) {
#if defined(ATTN_SM90A_DEVICE)
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  uint8_t* sP1 = smem + 3 * kTileBytes;  // [64 rows][64 keys] 16-bit, swizzled like a column block
  float* sStat = reinterpret_cast<float*>(sP1 + kColBytes);
  float* sM0 = sStat;                    // [64] running max after warpgroup 0's block (log2 units)
  float* sScale0 = sStat + kBlockM;      // [64] 2^(m - m0)
  float* sM1 = sStat + 2 * kBlockM;      // [64] running max after warpgroup 1's block
  float* sScale1 = sStat + 3 * kBlockM;  // [64] 2^(m0 - m1)
  float* sSum = sStat + 4 * kBlockM;     // [2][64] row sums at the end of a piece
  const uint32_t sQ_addr = smem_u32(smem);
  auto sK_addr = [&](int k) { return sQ_addr + (1 + k) * kTileBytes; };  // K0, K1
  const uint32_t bar_addr = smem_u32(sStat + kStatFloats);
  // full/empty barriers of K buffer k, group g (a: columns 0..255, b: the rest).
  auto full_bar = [&](int k, int g) { return bar_addr + 8 * (2 * k + g); };
  auto empty_bar = [&](int k, int g) { return bar_addr + 8 * (4 + 2 * k + g); };
  const uint32_t q_full = bar_addr + 8 * 8, q_empty = bar_addr + 8 * 9;
  // Hand-offs of a round: m0, 2^(m - m0) and the stored P0 (warpgroup 0 -> 1); m1, 2^(m0 - m1)
  // and the stored P1 (1 -> 0).
  const uint32_t h_scale0 = bar_addr + 8 * 10, h_scale1 = bar_addr + 8 * 11;
  // The (at most two) requests whose last piece this CTA counted, merged after its piece loop: only
  // a partition's first and last pieces can belong to a split request. In shared memory: two more
  // registers live through the consumers' loop made ptxas spill there.
  volatile int* sMergeReq = reinterpret_cast<int*>(sStat + kStatFloats) + 2 * kBarriers;

  const int tid = threadIdx.x, lane = tid % 32;
  // Warp and warpgroup indices through a shuffle, so that the compiler sees them warp-uniform and
  // the warpgroup MMAs under conditions on them stay asynchronous.
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
  pdl_launch_dependents();  // the combine may launch now (flashmla_decode.cuh says why)
  const int m_block = blockIdx.x;
  const MlaPartition part = mla_partition(p, blockIdx.y);
  const int rows = p.q_len * p.num_heads;  // packed rows of one request
  const int row0 = m_block * kBlockM;

  if (tid == 0) {
    for (int k = 0; k < 2; ++k) {
      for (int g = 0; g < 2; ++g) mbar_init(full_bar(k, g), 1);  // the producer's expect_tx arrival
      // Every group is last read by one warpgroup: K0's group a and K1's group a by warpgroup 0
      // (P0 V0L, P1 V1L), K0's group b and K1's group b by warpgroup 1 (P0 V0R, P1 V1R).
      mbar_init(empty_bar(k, 0), 4);
      mbar_init(empty_bar(k, 1), 4);
    }
    sMergeReq[0] = sMergeReq[1] = -1;
    mbar_init(q_full, 1);
    mbar_init(q_empty, 8);
    for (int i = 0; i < 2; ++i) mbar_init(h_scale0 + 8 * i, 128);
    fence_barrier_init();
  }
  __syncthreads();

  if (warp >= 8) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 256) {
      int uses0 = 0, uses1 = 0;  // blocks loaded into K0 / K1 so far: load u waits for the u-th release
      const uint64_t policy = l2_evict_first_policy();
      // Group g of block `block` into buffer k, its u-th load.
      auto load_group = [&](int k, int g, int block, int u) {
        if (u > 0) mbar_wait(empty_bar(k, g), (u - 1) & 1);
        const int cb0 = g == 0 ? 0 : kColsA, cb1 = g == 0 ? kColsA : kColBlocks;
        mbar_arrive_expect_tx(full_bar(k, g), (cb1 - cb0) * kColBytes);
        for (int cb = cb0; cb < cb1; ++cb)
          if (p.kv_evict_first) {
            tma_load_3d_hint(sK_addr(k) + cb * kColBytes, &tm_kv, cb * 64, 0, block, full_bar(k, g), policy);
          } else {
            tma_load_3d(sK_addr(k) + cb * kColBytes, &tm_kv, cb * 64, 0, block, full_bar(k, g));
          }
      };
      for (int req = part.begin_req, piece = 0; req <= part.end_req; ++req, ++piece) {
        const MlaPiece pc = mla_piece<kBlockN>(p, part, req);
        const int32_t* table = p.block_table + static_cast<int64_t>(req) * p.block_table_stride;
        const int n_begin = pc.n_begin, n_end = pc.n_end;
        // Per round, the groups in the order their previous contents are released: K0's a and
        // b (mid-round, after P0 V0L and P0 V0R), K1's b and a (the round's last products). The
        // piece's first block goes ahead of its Q, which waits for the previous piece's end.
        for (int n0 = n_begin; n0 < n_end || n0 == n_begin; n0 += 2) {
          const bool has0 = n0 < n_end, has1 = n0 + 1 < n_end;
          if (has0) load_group(0, 0, table[n0], uses0);
          if (has0) load_group(0, 1, table[n0], uses0);
          if (n0 == n_begin) {
            // Q: packed rows row0 .. row0 + 63 of the request are rows req * rows + row0 .. of
            // the [batch * rows, 576] query; rows past the request belong to the next one (or
            // are zero-filled past the tensor) and are never stored.
            if (piece > 0) mbar_wait(q_empty, (piece - 1) & 1);
            mbar_arrive_expect_tx(q_full, kTileBytes);
            for (int cb = 0; cb < kColBlocks; ++cb)
              tma_load_2d(sQ_addr + cb * kColBytes, &tm_q, cb * 64, req * rows + row0, q_full);
          }
          if (has1) load_group(1, 1, table[n0 + 1], uses1);
          if (has1) load_group(1, 0, table[n0 + 1], uses1);
          uses0 += has0;
          uses1 += has1;
        }
      }
    }
    return;
  }

  // ---- consumers: warpgroup w, warp ww of it; this thread's rows r = 16 ww + g + 8 h ----
  setmaxnreg_inc<kConsumerRegs>();
  const int w = warp / 4, ww = warp % 4;
  const int g = lane / 4, tq = lane % 4;
  const int wtid = tid % 128;
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint64_t q_desc = sw128_desc(sQ_addr, 16, 1024);
  int row_q[2];  // query index (0 or 1) of this thread's rows: the causal limit between two tokens
  for (int h = 0; h < 2; ++h) row_q[h] = (row0 + 16 * ww + g + 8 * h) / p.num_heads;
  int uses0 = 0, uses1 = 0;  // blocks consumed from K0 / K1 so far (the producer's counts)

  for (int req = part.begin_req, piece = 0; req <= part.end_req; ++req, ++piece) {
    const MlaPiece pc = mla_piece<kBlockN>(p, part, req);
    const int kend = pc.kend, seq_len = pc.seq_len, split = pc.split, split_base = pc.split_base;
    const bool no_split = pc.no_split;
    const int n_begin = pc.n_begin, n_end = pc.n_end;

    float acc_o[128];  // O rows (g, g + 8) of this warp, columns 256 w + 8 j + 2 tq + (0, 1)
#pragma unroll
    for (int i = 0; i < 128; ++i) acc_o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};  // log2 units, the same in both warpgroups after a round
    float row_sum[2] = {0.f, 0.f};              // this thread's share of its own blocks' sums
    mbar_wait(q_full, piece & 1);

    for (int n0 = n_begin; n0 < n_end; n0 += 2) {
      const bool has1 = n0 + 1 < n_end;
      const int nk = w == 0 ? n0 : n0 + 1;  // my block (warpgroup 1 has none on an odd last round)
      const bool has_mine = w == 0 || has1;
      const uint32_t k_mine = sK_addr(w);
      const int use_mine = w == 0 ? uses0 : uses1;

      // S = Q K^T of my block, each group's k-steps as soon as it lands, in the order the
      // producer loads them (warpgroup 0: a then b, warpgroup 1: b then a). k-step ks reads head
      // dims 16 ks ..: column block ks / 4, 32-byte offset ks % 4.
      float s[32];
      if (has_mine) {
        // One code path for both orders: three runs of k-steps over column blocks [c1, c1 + 4),
        // 8, [c3, c3 + 4); warpgroup 0 takes a = 0..3 first (c1 = 0, c3 = 4), warpgroup 1 starts
        // with b (c1 = 4, c3 = 0). Bases plus immediates keep the descriptors out of registers.
        const int c1 = 4 * w, c3 = 4 - 4 * w;
        auto qk_run = [&](int cb0, int steps, int acc) {
          uint64_t qd = q_desc + ((cb0 * kColBytes) >> 4), kd = sw128_desc(k_mine + cb0 * kColBytes, 16, 1024);
          asm volatile("" : "+l"(qd), "+l"(kd));
#pragma unroll
          for (int ks = 0; ks < 16; ++ks) {
            if (ks >= steps) break;
            const uint32_t off = (ks / 4) * kColBytes + (ks % 4) * 32;
            wgmma_ss<Element>(s, qd + (off >> 4), kd + (off >> 4), acc | (ks > 0));
          }
        };
        mbar_wait(full_bar(w, w), use_mine & 1);
        wgmma_fence();
        qk_run(c1, 16, 0);
        if (w == 0) mbar_wait(full_bar(0, 1), use_mine & 1);
        qk_run(8, 4, 1);
        if (w == 1) mbar_wait(full_bar(1, 0), use_mine & 1);
        qk_run(c3, 16, 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        // Mask the keys some row does not see: past the piece's end and, with two query tokens,
        // the first token's causal limit; only a piece's last block holds such keys. The scores
        // stay raw: the scale to log2 units goes into the exponent (one FFMA per score).
        const int key0 = nk * kBlockN;
        if (key0 + kBlockN > min(kend, seq_len - p.q_len + 1)) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = key0 + 8 * j + 2 * tq + (e % 2);
              const bool visible = key < kend && key <= seq_len - p.q_len + row_q[e / 2];
              if (!visible) s[4 * j + e] = -INFINITY;
            }
          }
        }
      }
      float alpha[2];  // 2^(m_in - m_new) per row of my block's softmax
      // My block's softmax against m_in (warpgroup 0: the running max m; warpgroup 1: m0): the
      // new row maxima, lazily (OnlineSoftmaxRow::update_lazy: a max moves only when the scores
      // exceed it by more than 2^8, so P <= 256 and the factor is exactly 1 on most blocks and
      // rescale_o skips O; -inf + 8 is -inf, so the first block with a visible key sets it), P in
      // s, the row sums; the new maxima and factors published for the other warpgroup.
      auto softmax = [&](const float (&m_in)[2]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * ww + g + 8 * h;
          float mx = m_in[h];
          if (has_mine) {
            float raw = -INFINITY;  // softmax_scale > 0: the max of the raw scores, scaled, is the max
#pragma unroll
            for (int j = 0; j < 8; ++j) raw = fmaxf(raw, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
            mx = fmaxf(mx, raw * scale_log2);
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const bool grow = mx > m_in[h] + OnlineSoftmaxRow::kLazyRescaleLog2;
          mx = grow ? mx : m_in[h];
          const float m_use = mx == -INFINITY ? 0.f : mx;  // no visible key yet: keep P = 0
          alpha[h] = grow ? fast_exp2(m_in[h] - m_use) : 1.f;
          float sum = 0.f;
          if (has_mine) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], scale_log2, -m_use));
              s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -m_use));
              sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
            }
          }
          if (tq == 0) {
            (w == 0 ? sM0 : sM1)[r] = mx;
            (w == 0 ? sScale0 : sScale1)[r] = alpha[h];
          }
          row_sum[h] = row_sum[h] * alpha[h] + sum;
          row_max[h] = mx;
        }
      };
      // My P as the A fragments of the block's four k-steps.
      uint32_t pa[4][4];
      auto pack_p = [&] {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          pa[kk][0] = pack2<Element>(s[8 * kk + 0], s[8 * kk + 1]);
          pa[kk][1] = pack2<Element>(s[8 * kk + 2], s[8 * kk + 3]);
          pa[kk][2] = pack2<Element>(s[8 * kk + 4], s[8 * kk + 5]);
          pa[kk][3] = pack2<Element>(s[8 * kk + 6], s[8 * kk + 7]);
        }
      };
      // Group g of buffer k (warpgroup g's V columns among them) has landed.
      auto landed = [&](int k, int grp) { mbar_wait(full_bar(k, grp), (k == 0 ? uses0 : uses1) & 1); };
      // The piece's last block, if it ends inside it: zero my V columns of the rows past kend in
      // buffer k.
      auto zero_tail = [&](int k, int n) {
        const int valid = kend - n * kBlockN;
        if (n != n_end - 1 || valid >= kBlockN) return;
        landed(k, w);
        uint8_t* v = smem + kTileBytes * (1 + k) + 4 * w * kColBytes;
        const int chunks = (kBlockN - valid) * 8;  // 16-byte chunks per column block
        for (int c = wtid; c < 4 * chunks; c += 128) {
          const int cb = c / chunks, rc = c % chunks;
          *reinterpret_cast<uint4*>(v + cb * kColBytes + (valid + rc / 8) * 128 + (rc % 8) * 16) = make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
        named_bar_sync(kBarTail + w, 128);
      };
      // P0 goes into the rope column block of K0, P1 into its own buffer.
      auto p_addr = [&](int k) { return k == 0 ? sK_addr(0) + 8 * kColBytes : smem_u32(sP1); };
      // Stores my P (packed by pack_p) for the other warpgroup's product.
      auto store_p = [&](int k) {
        uint8_t* sp = k == 0 ? smem + kTileBytes + 8 * kColBytes : sP1;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int r = 16 * ww + g + 8 * (q % 2), chunk = 2 * kk + q / 2;
            *reinterpret_cast<uint32_t*>(sp + r * 128 + ((chunk ^ (r & 7)) << 4) + tq * 4) = pa[kk][q];
          }
        }
        fence_proxy_async();  // read by the other warpgroup's tensor cores
      };
      auto rescale_o = [&](float f0, float f1) {
        // Only where a row max moved (exact: the factor is 1 otherwise).
        if (__any_sync(0xffffffffu, f0 != 1.f || f1 != 1.f)) {
#pragma unroll
          for (int d = 0; d < 32; ++d) {
            acc_o[4 * d] *= f0;
            acc_o[4 * d + 1] *= f0;
            acc_o[4 * d + 2] *= f1;
            acc_o[4 * d + 3] *= f1;
          }
        }
      };
      // Takes the other warpgroup's published max (into m) and factor: my O and row sums move to
      // that max's scale.
      auto adopt = [&](const float* m_other, const float* f_other, float (&m)[2]) {
        float f[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * ww + g + 8 * h;
          m[h] = m_other[r];
          f[h] = f_other[r];
          row_sum[h] *= f[h];
        }
        rescale_o(f[0], f[1]);
      };
      // O[:, 256 w ..] += P V over one block: k-step kk = keys 16 kk .. (2048 bytes of V rows),
      // the 256 columns spanning column blocks 4 w .. 4 w + 3.
      auto pv_own = [&](int k) {
        const Sw128Desc vd = sw128_desc_words(sK_addr(k) + 4 * w * kColBytes, kColBytes, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_rs<Element>(acc_o, pa[kk], vd.at(kk * 2048), 1);
      };
      auto pv_stored = [&](int k) {
        const Sw128Desc vd = sw128_desc_words(sK_addr(k) + 4 * w * kColBytes, kColBytes, 1024);
        const Sw128Desc pd = sw128_desc_words(p_addr(k), 16, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_ss_nmajor_b<Element>(acc_o, pd.at(kk * 32), vd.at(kk * 2048), 1);
      };
      auto release = [&](int k, int grp) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar(k, grp));
      };


      // Round parities: every round completes each hand-off once.
      if (w == 0) {
        // m0 and P0 (stored, in m0's scale) for warpgroup 1, then O_L = O_L 2^(m - m0) + P0 V0L;
        // group a of K0 goes back to the producer.
        const float m_in[2] = {row_max[0], row_max[1]};
        softmax(m_in);
        pack_p();
        store_p(0);
        mbar_arrive(h_scale0);
        rescale_o(alpha[0], alpha[1]);
        zero_tail(0, n0);
        fence_regs(acc_o);
        wgmma_fence();
        pv_own(0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(acc_o);
        release(0, 0);
        // O_L = O_L 2^(m0 - m1) + P1 V1L (P1 stored by warpgroup 1 in m1's scale).
        mbar_wait(h_scale1, uses0 & 1);
        adopt(sM1, sScale1, row_max);
        if (has1) {
          landed(1, 0);
          zero_tail(1, n0 + 1);
          fence_regs(acc_o);
          wgmma_fence();
          pv_stored(1);
          wgmma_commit();
          wgmma_wait<0>();
          fence_regs(acc_o);
          release(1, 0);
        }
      } else {
        // O_R = O_R 2^(m - m0) + P0 V0R as soon as warpgroup 0 has stored P0; my softmax runs
        // under that product, so group b of K0 goes back to the producer mid-round. Then
        // O_R = O_R 2^(m0 - m1) + P1 V1R.
        mbar_wait(h_scale0, uses0 & 1);
        float m_in[2];
        adopt(sM0, sScale0, m_in);
        landed(0, 1);
        zero_tail(0, n0);
        fence_regs(acc_o);
        wgmma_fence();
        pv_stored(0);
        wgmma_commit();
        softmax(m_in);
        if (has1) {
          pack_p();
          store_p(1);
        }
        mbar_arrive(h_scale1);
        wgmma_wait<0>();
        fence_regs(acc_o);
        release(0, 1);
        rescale_o(alpha[0], alpha[1]);
        if (has1) {
          zero_tail(1, n0 + 1);
          fence_regs(acc_o);
          wgmma_fence();
          pv_own(1);
          wgmma_commit();
          wgmma_wait<0>();
          fence_regs(acc_o);
          release(1, 1);
        }
      }
      ++uses0;
      if (has1) ++uses1;
    }

    // Epilogue: both warpgroups ended on the same max, so their row sums add up.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
      if (tq == 0) sSum[w * kBlockM + 16 * ww + g + 8 * h] = row_sum[h];
    }
    named_bar_sync(kBarSum, 256);
    float l[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = sSum[16 * ww + g + 8 * h] + sSum[kBlockM + 16 * ww + g + 8 * h];
    named_bar_sync(kBarSum, 256);  // sSum is rewritten by the next piece
    __syncwarp();
    if (lane == 0) mbar_arrive(q_empty);  // this warp's MMAs are done with Q
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * ww + g + 8 * h;
      if (row >= rows) continue;
      // No visible key: O = 0 and LSE = -inf (merge_attn_states weighs such a piece with 0).
      const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
      const float lse = has_keys_or_nan(l[h]) ? row_max[h] * 0.6931471805599453f + logf(l[h]) : -INFINITY;
      const int64_t token = static_cast<int64_t>(req) * p.q_len + row / p.num_heads;
      const int head = row % p.num_heads;
      const int64_t out_row = no_split ? token * p.num_heads + head : static_cast<int64_t>(split_base + split) * rows + row;
      float* o = (no_split ? p.o : p.o_accum) + out_row * kFlashMlaHeadDimV + 256 * w;
#pragma unroll
      for (int d = 0; d < 32; ++d)
        *reinterpret_cast<float2*>(o + 8 * d + 2 * tq) = make_float2(acc_o[4 * d + 2 * h] * inv, acc_o[4 * d + 2 * h + 1] * inv);
      if (w == 0 && tq == 0) (no_split ? p.lse : p.lse_accum)[out_row] = lse;
    }
    // A piece of a request in 2 .. kFlashMlaMergeMaxPieces: counted once the CTA's partial is
    // stored (each thread fences its own stores, the barrier gathers them); the CTA that counts the
    // last piece resets the count for the next launch and merges the request after its loop.
    if (!no_split && p.merge_counters != nullptr && p.num_splits[req + 1] - split_base <= kFlashMlaMergeMaxPieces) {
      __threadfence();
      named_bar_sync(kBarSum, 256);
      if (w == 0 && wtid == 0) {
        int* count = p.merge_counters + static_cast<int64_t>(req) * gridDim.x + m_block;
        const bool last = atomicAdd(count, 1) == p.num_splits[req + 1] - split_base - 1;
        if (last) *count = 0;
        __threadfence();  // the other pieces' partials, seen through the count, before this CTA reads them
        if (last) sMergeReq[sMergeReq[0] < 0 ? 0 : 1] = req;
      }
      named_bar_sync(kBarSum, 256);
    }
  }

  // The merges. Once both warpgroups are past their last products, the buffers of Q, K0 and K1
  // (216 KB) are free: each consumer thread copies its float4s of every piece into them with
  // cp.async (no register holds a copy in flight: with 64 floats of loads in registers the merge
  // waited for four round trips per request, and more made ptxas spill), in phases of kRows rows
  // (thread t takes row t / (256 / kRows) of the phase and its float4 columns t % (256 / kRows) +
  // (256 / kRows) f, so that a row's threads read whole 128-byte lines), then sums them in piece
  // order as merge_attn_states does. A thread reads back only what it copied: no barrier between.
  if (sMergeReq[0] >= 0) named_bar_sync(kBarSum, 256);
  const int t = 128 * w + wtid;  // this consumer thread of 256
  for (int i = 0; i < 2; ++i) {
    const int req = sMergeReq[i];
    if (req < 0) break;
    const int base = p.num_splits[req], pieces = p.num_splits[req + 1] - base;
    auto merge = [&](auto kMaxPieces, auto kRowsPerPhase) {
      constexpr int kP = decltype(kMaxPieces)::value, kRows = decltype(kRowsPerPhase)::value;
      constexpr int kTpr = 256 / kRows;                   // threads per row
      constexpr int kF = kFlashMlaHeadDimV / 4 / kTpr;    // float4s per thread and piece
      static_assert(kP * kF * 256 * 16 <= 3 * kTileBytes, "the copies fit the Q and K buffers");
      // [piece][f][thread]: a warp's 16-byte accesses are consecutive (no bank conflict).
      float4* stage = reinterpret_cast<float4*>(smem) + t;
#pragma unroll 1
      for (int r0 = 0; r0 < kBlockM; r0 += kRows) {
        const int row = row0 + r0 + t / kTpr;
        if (row >= rows) break;
        const int64_t out_row = static_cast<int64_t>(req) * rows + row;  // (token, head) of the [batch * q_len, heads] rows
#pragma unroll
        for (int s = 0; s < kP; ++s) {
          if (s < pieces) {
            const float* src = p.o_accum + (static_cast<int64_t>(base + s) * rows + row) * kFlashMlaHeadDimV + 4 * (t % kTpr);
#pragma unroll
            for (int f = 0; f < kF; ++f) cp_async_16(stage + (s * kF + f) * 256, src + 4 * kTpr * f, true);
          }
        }
        cp_async_commit();
        float lse_v[kP];
#pragma unroll
        for (int s = 0; s < kP; ++s)
          if (s < pieces) lse_v[s] = __ldcg(p.lse_accum + static_cast<int64_t>(base + s) * rows + row);
        const LseMerge mg = lse_merge<kP>([&](int s) { return lse_v[s]; }, pieces, false);
        float wgt[kP];
#pragma unroll
        for (int s = 0; s < kP; ++s) wgt[s] = s < pieces ? mg.weight(lse_v[s], false) : 0.f;
        cp_async_wait<0>();
        float* o = p.o + out_row * kFlashMlaHeadDimV + 4 * (t % kTpr);
#pragma unroll 4
        for (int f = 0; f < kF; ++f) {
          float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
          for (int s = 0; s < kP; ++s) {
            if (s < pieces) {
              const float4 v = stage[(s * kF + f) * 256];
              lse_merge_add(acc.x, wgt[s], v.x);
              lse_merge_add(acc.y, wgt[s], v.y);
              lse_merge_add(acc.z, wgt[s], v.z);
              lse_merge_add(acc.w, wgt[s], v.w);
            }
          }
          *reinterpret_cast<float4*>(o + 4 * kTpr * f) = acc;
        }
        if (t % kTpr == 0) p.lse[out_row] = mg.lse;
      }
    };
    // Phases of 32 rows for up to three pieces (192 KB of copies), 16 rows for four.
    if (pieces <= 3) {
      merge(std::integral_constant<int, 3>{}, std::integral_constant<int, 32>{});
    } else {
      merge(std::integral_constant<int, kFlashMlaMergeMaxPieces>{}, std::integral_constant<int, 16>{});
    }
  }
#endif
}

// Launch over (m_blocks, num_parts); the tensor maps name the latent cache as
// [num_blocks][64 slots][576] with boxes of 64 columns x 64 slots, and the query as
// [batch * rows][576] with boxes of 64 columns x 64 rows (kernels/common/tma_map.hpp).
template <class Element>
void run_flashmla_decode_sm90(const FlashMlaDecodeParams& p, const CUtensorMap& tm_kv, const CUtensorMap& tm_q,
                              cudaStream_t stream) {
  static const cudaError_t attr = cudaFuncSetAttribute(flashmla_decode_sm90_kernel<Element>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  (void)attr;  // a failure shows up as the launch error
  const int rows = p.q_len * p.num_heads;
  const dim3 grid(static_cast<unsigned>((rows + kBlockM - 1) / kBlockM), static_cast<unsigned>(p.num_parts));
  flashmla_decode_sm90_kernel<Element><<<grid, kThreads, kSmemBytes, stream>>>(p, tm_kv, tm_q);
}

// True when this binary holds sm_90a code for the kernel and the current device runs it.
template <class Element>
bool flashmla_sm90_compiled() {
  static const bool ok = runs_sm90a_image(reinterpret_cast<const void*>(flashmla_decode_sm90_kernel<Element>));
  return ok;
}

}  // namespace attn::mla::sm90

#define ATTN_FLASHMLA_SM90_INSTANTIATE(Element)                                                            \
  template void run_flashmla_decode_sm90<Element>(const FlashMlaDecodeParams&, const CUtensorMap&, const CUtensorMap&, \
                                                  cudaStream_t);                                          \
  template bool flashmla_sm90_compiled<Element>();
