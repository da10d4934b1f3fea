#pragma once
// FLASHMLA split-KV decode for Hopper (sm_90a): warpgroup MMAs over 64 packed query rows, the
// latent cache streamed by the bulk tensor copy engine (TMA). Same data layout, scheduler
// partitions and outputs as the mma.sync kernel (flashmla_decode.cuh, flashmla_params.hpp); the
// launcher picks this one for requests of 32 packed rows or more (a tile is always 64 rows; rows
// past the request are computed and never stored) where the device and the build have sm_90a
// (FlashMlaKernel in flashmla_params.hpp).
//
// A CTA is two consumer warpgroups and a producer warpgroup (384 threads) on one m_block of one
// scheduler partition; setmaxnreg leaves the producer 40 registers and gives the consumers 232.
// - One thread of the producer moves, per request piece, the 64 x 576 Q tile (9 boxes of 64
//   columns, one barrier) and then every key tile of the piece: 32 keys x 576 (half a 64-token
//   cache block, 9 boxes of 32 x 64) into a ring of four 36 KB stages, each with a "full" barrier
//   (transaction bytes) and an "empty" barrier (8 consumer warps). Q 72 KB + the ring 144 KB +
//   P 8 KB fill the 227 KB of shared memory; that is why tiles are 32 keys, not 64: four stages
//   keep the next pair of tiles in flight while the current pair is computed.
// - The consumers work on pairs of key tiles in lock-step. Warpgroup w computes S = Q K^T for
//   tile 2i + w of the pair (36 x m64n32k16, Q and K from shared memory), so both products of a
//   pair run on the tensor cores at once. They exchange their row maxima through shared memory
//   (named barrier 1) and both take the same running max m over the two tiles, so each scales its
//   own P and its share of the row sums the same way. Each writes its P (16-bit) into its half of
//   a shared 64 x 64 tile (named barrier 2). Warpgroup w owns O columns 256 w .. 256 w + 255
//   (128 fp32 accumulators per thread) and adds P V of both tiles: its own P from registers
//   (m64n256k16 RS), the other warpgroup's from shared memory (SS), V being the first 512 columns
//   of the same key rows (N-major). Then every warp frees both stages.
// - Key rows past the piece's end (the NaN page tail) are loaded as they are: S masks them to
//   -inf, and each warpgroup zeroes its half of those V rows before P V, so 0 x NaN never happens.
//
// Shared-memory layout of an R x 576 tile (Q: R = 64, K: R = 32): 9 column blocks of 64 elements,
// each [R rows][128 B], 16-byte chunk c of row r at chunk c ^ (r % 8) (the TMA 128-byte swizzle),
// every block on a 1024-byte boundary.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/mbarrier.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/sm90_image.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/flashmla/flashmla_launch.hpp"
#include "kernels/flashmla/flashmla_params.hpp"

namespace attn::mla::sm90 {

using namespace attn::kern;

constexpr int kBlockM = 64;                      // packed query rows per CTA (one m_block)
constexpr int kTileN = 32;                       // keys per ring stage
constexpr int kStages = 4;
constexpr int kColBlocks = kFlashMlaHeadDimK / 64;  // 9 column blocks of 64
constexpr int kThreads = 384;                    // two consumer warpgroups + the producer warpgroup
// Registers per thread after setmaxnreg: 128 x 40 + 256 x 232 = 64512, all the CTA launched with.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
// setmaxnreg moves registers only within what the CTA was launched with (168 per thread for 384
// threads); asking for more makes setmaxnreg.inc wait forever.
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168, "setmaxnreg beyond the CTA's registers");
constexpr int kQBlockBytes = kBlockM * 128;      // 8 KB
constexpr int kKBlockBytes = kTileN * 128;       // 4 KB
constexpr int kQBytes = kColBlocks * kQBlockBytes;      // 72 KB
constexpr int kStageBytes = kColBlocks * kKBlockBytes;  // 36 KB
constexpr int kPBytes = kBlockM * 128;           // P of the pair: tile 2i in keys 0..31, 2i + 1 in 32..63
constexpr int kStatBytes = 2 * 2 * kBlockM * 4;  // row maxima and row sums of both warpgroups
constexpr int kBarrierBytes = (2 * kStages + 2) * 8;
constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kPBytes + kStatBytes + kBarrierBytes + 1024;
static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
static_assert(kTileN * 2 == kFlashMlaBlockN, "a tile is half a cache block");
// Named barriers (0 is __syncthreads): row maxima exchanged, P written, each warpgroup's zeroed
// V tail, the row sums exchanged.
constexpr int kBarMax = 1, kBarP = 2, kBarTail = 3, kBarSum = 5;

template <class Element>
__global__ void __launch_bounds__(kThreads, 1)
    flashmla_decode_sm90_kernel(const __grid_constant__ FlashMlaDecodeParams p, const __grid_constant__ CUtensorMap tm_kv,
                                const __grid_constant__ CUtensorMap tm_q) {
#if defined(ATTN_SM90A_DEVICE)
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  uint8_t* sP = smem + kQBytes + kStages * kStageBytes;
  float* sMax = reinterpret_cast<float*>(sP + kPBytes);  // [2 warpgroups][64 rows]
  float* sSum = sMax + 2 * kBlockM;                      // [2 warpgroups][64 rows]
  const uint32_t sQ_addr = smem_u32(smem);
  const uint32_t sK_addr = sQ_addr + kQBytes;
  const uint32_t sP_addr = smem_u32(sP);
  const uint32_t bar_addr = smem_u32(sSum + 2 * kBlockM);
  auto full_bar = [&](int stage) { return bar_addr + 8 * stage; };
  auto empty_bar = [&](int stage) { return bar_addr + 8 * (kStages + stage); };
  const uint32_t q_full = bar_addr + 8 * 2 * kStages, q_empty = q_full + 8;

  const int tid = threadIdx.x, lane = tid % 32;
  // Warp and warpgroup indices through a shuffle, so that the compiler sees them warp-uniform and
  // the warpgroup MMAs under conditions on them stay asynchronous.
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
  const int m_block = blockIdx.x;
  const int32_t* md = p.tile_scheduler_metadata + blockIdx.y * 8;
  const int begin_req = md[0], begin_token = md[1], end_req = md[2], end_token = md[3], begin_split = md[4];
  const int rows = p.q_len * p.num_heads;  // packed rows of one request
  const int row0 = m_block * kBlockM;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar(s), 1);   // the producer's expect_tx arrival; the copies complete it
      mbar_init(empty_bar(s), 8);  // every consumer warp, once its MMAs no longer read the stage
    }
    mbar_init(q_full, 1);
    mbar_init(q_empty, 8);
    fence_barrier_init();
  }
  __syncthreads();

  // The (request, key range) pieces of this partition, walked identically by both roles.
  auto piece_keys = [&](int req, int& kbegin, int& kend) {
    kbegin = req == begin_req ? begin_token : 0;
    kend = req == end_req ? end_token : p.seq_lens[req];
  };

  if (warp >= 8) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 256) {
      int tile = 0;  // key tiles loaded so far: tile t uses stage t % kStages for the (t / kStages)-th time
      for (int req = begin_req, piece = 0; req <= end_req; ++req, ++piece) {
        int kbegin, kend;
        piece_keys(req, kbegin, kend);
        const int32_t* table = p.block_table + static_cast<int64_t>(req) * p.block_table_stride;
        // Q: packed rows row0 .. row0 + 63 of the request are rows req * rows + row0 .. of the
        // [batch * rows, 576] query; rows past the request belong to the next one (or are
        // zero-filled past the tensor) and are never stored.
        if (piece > 0) mbar_wait(q_empty, (piece - 1) & 1);
        mbar_arrive_expect_tx(q_full, kQBytes);
        for (int cb = 0; cb < kColBlocks; ++cb)
          tma_load_2d(sQ_addr + cb * kQBlockBytes, &tm_q, cb * 64, req * rows + row0, q_full);
        for (int n = kbegin / kTileN; n * kTileN < kend; ++n, ++tile) {
          const int stage = tile % kStages;
          if (tile >= kStages) mbar_wait(empty_bar(stage), ((tile / kStages) - 1) & 1);
          mbar_arrive_expect_tx(full_bar(stage), kStageBytes);
          const int block = table[n / 2];
          for (int cb = 0; cb < kColBlocks; ++cb)
            tma_load_3d(sK_addr + stage * kStageBytes + cb * kKBlockBytes, &tm_kv, cb * 64, (n % 2) * kTileN, block,
                        full_bar(stage));
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
  const uint64_t p_desc = sw128_desc(sP_addr, 16, 1024);
  int row_q[2];  // query index (0 or 1) of this thread's rows: the causal limit between two tokens
  for (int h = 0; h < 2; ++h) row_q[h] = (row0 + 16 * ww + g + 8 * h) / p.num_heads;

  int tile = 0;
  for (int req = begin_req, piece = 0; req <= end_req; ++req, ++piece) {
    int kbegin, kend;
    piece_keys(req, kbegin, kend);
    const int seq_len = p.seq_lens[req];
    const int split = req == begin_req ? begin_split : 0;
    const int split_base = p.num_splits[req];
    const bool no_split = p.num_splits[req + 1] - split_base == 1;
    const int n_begin = kbegin / kTileN;
    const int num_tiles = kend > kbegin ? (kend + kTileN - 1) / kTileN - n_begin : 0;

    float acc_o[128];  // O rows (g, g + 8) of this warp, columns 256 w + 8 j + 2 tq + (0, 1)
#pragma unroll
    for (int i = 0; i < 128; ++i) acc_o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};  // log2 units, shared by both warpgroups
    float row_sum[2] = {0.f, 0.f};              // this thread's share of its own tiles' sums
    mbar_wait(q_full, piece & 1);

    // Every warp frees the stages of tiles t and t + 1 (those that exist) once its P V of them is done.
    auto free_pair = [&](int t) {
      __syncwarp();
      if (lane == 0) {
        mbar_arrive(empty_bar((tile + t) % kStages));
        if (t + 1 < num_tiles) mbar_arrive(empty_bar((tile + t + 1) % kStages));
      }
    };

    for (int i = 0; i < num_tiles; i += 2) {
      const int mine = i + w, theirs = i + 1 - w;  // tile indices within the piece
      const bool has_mine = mine < num_tiles, has_theirs = theirs < num_tiles;
      const int st_mine = (tile + mine) % kStages, st_theirs = (tile + theirs) % kStages;

      // S = Q K^T of my tile, issued behind the previous pair's P V (still in flight), so the
      // tensor cores go from one to the other without a gap. k-step ks reads head dims 16 ks ..:
      // column block ks / 4, 32-byte offset ks % 4 inside the swizzled rows.
      float s[16];
      if (has_mine) {
        mbar_wait(full_bar(st_mine), ((tile + mine) / kStages) & 1);
        const uint32_t k_addr = sK_addr + st_mine * kStageBytes;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kFlashMlaHeadDimK / 16; ++ks) {
          const uint32_t qoff = (ks / 4) * kQBlockBytes + (ks % 4) * 32;
          const uint32_t koff = (ks / 4) * kKBlockBytes + (ks % 4) * 32;
          wgmma_ss<Element>(s, q_desc + (qoff >> 4), sw128_desc(k_addr + koff, 16, 1024), ks > 0);
        }
        wgmma_commit();
      }
      wgmma_wait<0>();
      fence_regs(s);
      fence_regs(acc_o);
      if (i > 0) free_pair(i - 2);
      // Mask (the piece's key range, the causal limit of each row), scale, row maxima.
      float mx[2] = {-INFINITY, -INFINITY};
      if (has_mine) {
        const int key0 = (n_begin + mine) * kTileN;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + 8 * j + 2 * tq + (e % 2);
            const int h = e / 2;
            const bool visible = key < kend && key <= seq_len - p.q_len + row_q[h];
            s[4 * j + e] = visible ? s[4 * j + e] * scale_log2 : -INFINITY;
            mx[h] = fmaxf(mx[h], s[4 * j + e]);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        if (tq == 0) sMax[w * kBlockM + 16 * ww + g + 8 * h] = mx[h];
      }
      named_bar_sync(kBarMax, 256);
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * ww + g + 8 * h;
        const float m_new = fmaxf(row_max[h], fmaxf(sMax[r], sMax[kBlockM + r]));
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: keep P = 0
        alpha[h] = fast_exp2(row_max[h] - m_use);
        row_max[h] = m_new;
        float sum = 0.f;
        if (has_mine) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            s[4 * j + 2 * h] = fast_exp2(s[4 * j + 2 * h] - m_use);
            s[4 * j + 2 * h + 1] = fast_exp2(s[4 * j + 2 * h + 1] - m_use);
            sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
          }
        }
        row_sum[h] = row_sum[h] * alpha[h] + sum;
      }
      // My P as the A fragments of two k-steps, and into my half of the shared P tile (keys
      // 32 w .. of the pair: 16-byte chunks 4 w .., swizzled like Q).
      uint32_t pa[2][4];
      if (has_mine) {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          pa[kk][0] = pack2<Element>(s[8 * kk + 0], s[8 * kk + 1]);
          pa[kk][1] = pack2<Element>(s[8 * kk + 2], s[8 * kk + 3]);
          pa[kk][2] = pack2<Element>(s[8 * kk + 4], s[8 * kk + 5]);
          pa[kk][3] = pack2<Element>(s[8 * kk + 6], s[8 * kk + 7]);
#pragma unroll
          for (int f = 0; f < 4; ++f) {
            const int r = 16 * ww + g + 8 * (f % 2);
            const int chunk = 4 * w + 2 * kk + f / 2;
            *reinterpret_cast<uint32_t*>(sP + r * 128 + ((chunk ^ (r & 7)) << 4) + tq * 4) = pa[kk][f];
          }
        }
        fence_proxy_async();  // P is read by the other warpgroup's tensor cores
      }
      // Rescale O only where a row max moved (exact: alpha is 1 otherwise); after the first
      // tiles of a piece most pairs skip the 128 multiplies.
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int d = 0; d < 32; ++d) {
        acc_o[4 * d] *= alpha[0];
        acc_o[4 * d + 1] *= alpha[0];
        acc_o[4 * d + 2] *= alpha[1];
        acc_o[4 * d + 3] *= alpha[1];
      }
      }
      named_bar_sync(kBarP, 256);  // both P halves written; both Q K^T done with the pair's K rows

      // The piece's last tile, if it ends inside it: zero my V columns of the rows past kend.
      const int last = num_tiles - 1;
      if ((last == mine || last == theirs) && kend % kTileN != 0) {
        const int valid = kend - (n_begin + last) * kTileN;
        uint8_t* v = smem + kQBytes + ((tile + last) % kStages) * kStageBytes + 4 * w * kKBlockBytes;
        const int chunks = (kTileN - valid) * 8;  // 16-byte chunks per column block
        for (int c = wtid; c < 4 * chunks; c += 128) {
          const int cb = c / chunks, rc = c % chunks;
          *reinterpret_cast<uint4*>(v + cb * kKBlockBytes + (valid + rc / 8) * 128 + (rc % 8) * 16) = make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
        named_bar_sync(kBarTail + w, 128);
      }

      // O[:, 256 w ..] += P V over both tiles: 16 keys per k-step (2048 bytes of V rows), the
      // 256 columns spanning column blocks 4 w .. 4 w + 3 (kKBlockBytes apart).
      fence_regs(acc_o);
      wgmma_fence();
      if (has_mine) {
        const uint32_t v_addr = sK_addr + st_mine * kStageBytes + 4 * w * kKBlockBytes;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
          wgmma_rs<Element>(acc_o, pa[kk], sw128_desc(v_addr + kk * 2048, kKBlockBytes, 1024), 1);
      }
      if (has_theirs) {
        const uint32_t v_addr = sK_addr + st_theirs * kStageBytes + 4 * w * kKBlockBytes;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const uint32_t poff = (1 - w) * 64 + kk * 32;
          wgmma_ss_nmajor_b<Element>(acc_o, p_desc + (poff >> 4), sw128_desc(v_addr + kk * 2048, kKBlockBytes, 1024), 1);
        }
      }
      wgmma_commit();  // waited for with the next pair's Q K^T
    }
    wgmma_wait<0>();
    fence_regs(acc_o);
    if (num_tiles > 0) free_pair((num_tiles - 1) / 2 * 2);
    tile += num_tiles;

    // Epilogue: both warpgroups used the same maxima, so their row sums add up.
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
      const float lse = l[h] > 0.f ? row_max[h] * 0.6931471805599453f + logf(l[h]) : -INFINITY;
      const int64_t token = static_cast<int64_t>(req) * p.q_len + row / p.num_heads;
      const int head = row % p.num_heads;
      const int64_t out_row = no_split ? token * p.num_heads + head : static_cast<int64_t>(split_base + split) * rows + row;
      float* o = (no_split ? p.o : p.o_accum) + out_row * kFlashMlaHeadDimV + 256 * w;
#pragma unroll
      for (int d = 0; d < 32; ++d)
        *reinterpret_cast<float2*>(o + 8 * d + 2 * tq) = make_float2(acc_o[4 * d + 2 * h] * inv, acc_o[4 * d + 2 * h + 1] * inv);
      if (w == 0 && tq == 0) (no_split ? p.lse : p.lse_accum)[out_row] = lse;
    }
  }
#endif
}

// Launch over (m_blocks, num_parts); the tensor maps name the latent cache as
// [num_blocks][64 slots][576] with boxes of 64 columns x 32 slots, and the query as
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
