#pragma once
// Paged varlen attention forward (FlashAttention-2 structure) on mma.sync m16n8k16 tensor-core
// instructions and cp.async copies, which compile for sm_80 and sm_90a alike.
//
// One CTA of 4 warps owns kBlockM packed query rows of one (sequence, kv head) and walks the
// sequence's keys in tiles of kBlockN through the block table, double-buffered in shared memory.
// Softmax runs online in fp32 in log2 units. Warps split the rows (prefill variant) or the keys
// of each tile (decode variant, whose few rows would leave 3 of 4 warps idle). The epilogue
// writes O and LSE, or a normalized partial state per split for merge_attn_states: straight
// from registers where each warp owns whole rows (16-bit prefill), else after combining the
// per-warp (max, sum, O) states in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/lse_merge.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/mma_fp8.cuh"
#include "kernels/common/mma_softmax.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/pdl_launch.hpp"
#include "kernels/common/ptx.cuh"
#include "kernels/flash_attn/cta_trace.cuh"
#include "kernels/flash_attn/flash_fwd_traits.cuh"
#include "kernels/flash_attn/flash_mask.cuh"

namespace attn::fa {

using namespace attn::kern;

// ---- the kernel ----------------------------------------------------------------------------------
//
// The fp8 path multiplies in fp16 whatever the model dtype and reads the raw cache bytes straight
// into the MMA operands; kernels/common/mma_fp8.cuh has the operand layouts (Q·K^T over head dims
// in the order 4t..4t+3, P·V into even/odd dim column blocks) and kFp8QScale.

// One tile: rows m_block * kBlockM .. of sequence `seq`, kv head `kvh`, split blockIdx.z.
// kE5m2: the format of an fp8 cache (e5m2, else e4m3; unused for a 16-bit cache).
// wait_new_keys: the kernel ahead (the step's cache write) may still run; see wait_for_new_keys.
// fused_write (decode tiling): the step's cache write is this kernel's (FlashAttnParams::fused_cache_write).
template <class Tr, bool kE5m2>
__device__ __forceinline__ void attend_tile(const FlashAttnParams& p, uint8_t* smem, int seq, int m_block, int kvh,
                                            bool wait_new_keys, bool fused_write = false) {
  using Element = typename Tr::Element;
  constexpr int D = Tr::kHeadDim;
  constexpr int kBlockM = Tr::kBlockM;
  constexpr int kBlockN = Tr::kBlockN;
  constexpr int kRS = Tr::kRowStride;
  constexpr int kStages = Tr::kStages;
  constexpr bool kFp8 = Tr::kKvFp8;
  // Operand dtype of the MMAs: fp16 on an fp8 cache (see above), else the model dtype.
  using MmaT = std::conditional_t<kFp8, __half, Element>;
  // A bf16 Q goes to fp16 in shared memory once it landed.
  constexpr bool kQToHalf = kFp8 && !std::is_same_v<Element, __half>;
  // Lazy row maxima (mma_softmax_update) on the decode tilings and over fp8 caches; the 16-bit
  // prefill tilings keep exact ones, where the skipped rescale cost ptxas more spill (hd128: 24 ->
  // 44 bytes) than it saves.
  constexpr bool kLazyMax = Tr::kDecode || kFp8;

  Element* sQ = reinterpret_cast<Element*>(smem);
  // Stage s: K tile at sKV + 2s * kKvTileBytes, V tile right after. Rows of kKvRowBytes.
  uint8_t* sKV = smem + Tr::kQElems * 2;

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int warp_m = warp % Tr::kWarpsM;
  const int warp_n = warp / Tr::kWarpsM;

  const int split = blockIdx.z;
  const int G = p.num_q_heads / p.num_kv_heads;

  const int q_start = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_start;
  const int seq_len = p.seq_lens[seq];
  const int pos_base = seq_len - q_len;  // absolute position of query token 0
  const int row0 = m_block * kBlockM;    // first packed row of the tile
  const TileKeys tk = tile_keys<kBlockM, kBlockN>(
      p, q_len, seq_len, row0, [G](int n) { return n / G; }, [&p](int n) { return n / p.num_splits; }, split);
  const int kv_lo = tk.kv_lo, n_begin = tk.n_begin, n_end = tk.n_end;
  const int n_plain_lo = tk.n_plain_lo, n_plain_hi = tk.n_plain_hi;

  const Element* q = static_cast<const Element*>(p.q);

  // ---- Q tile: packed row r = (token (row0 + r) / G, head kvh * G + (row0 + r) % G) ----
  auto q_row = [&](int r, bool& valid) {
    const int prow = row0 + r;
    const int t = prow / G;
    valid = t < q_len;
    const int64_t tok = q_start + (valid ? t : 0);
    return q + (tok * p.num_q_heads + kvh * G + prow % G) * D;
  };
  if constexpr (!kFp8) {
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    for (int c = tid; c < kBlockM * kChunks; c += Tr::kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      bool valid;
      const Element* src = q_row(r, valid) + col;
      cp_async_16(sQ + r * kRS + col, src, valid);
    }
  } else {
    // Over an fp8 cache Q lands in A-fragment order (fp8_q_slot), one 4-byte pair at a time; each
    // thread fills whole slots, so the conversion below touches only its own copies.
    for (int c = tid; c < kBlockM * D / 8; c += Tr::kThreads) fp8_q_slot_copy<Tr::kKSteps>(sQ, c, q_row);
    if constexpr (kQToHalf) cp_async_commit();  // its own group: converted before the first tile lands
  }

  // ---- K/V tile loader: zero-fills keys at or past seq_len (their slots are never read) ----
  // Thread t copies 16-byte chunks t, t + kThreads, ... of every tile (row-major), so its column
  // offset is fixed. A row's cache slot needs one block-table entry (a shift for power-of-two
  // block sizes). The cache pointers and strides are re-read from the (constant-bank)
  // parameters at every call instead of being held in registers across the main loop.
  constexpr int kElemBytes = kFp8 ? 1 : 2;
  constexpr int kRowChunks = D * kElemBytes / 16;
  constexpr int kChunksPerTile = kBlockN * kRowChunks;
  constexpr int kChunksPerThread = (kChunksPerTile + Tr::kThreads - 1) / Tr::kThreads;
  // Decode, row addresses owned by lanes: the chunks a warp copies in a tile cover at most 32
  // rows, so lane j computes the byte offset of the warp's j-th row once per tile (one
  // block-table entry, read two tiles ahead) and each chunk takes its row's offset by shuffle.
  // Computing it per chunk (an entry load, a division, 64-bit products) was a third of the fp8
  // decode's instructions, in a kernel that issues on less than half of its cycles (ncu).
  // Needs whole rows per lane group: head sizes whose rows are not 2^k chunks (96, 192) keep
  // the per-chunk form, as the prefill does (its registers are all taken).
  constexpr int kRowsPerPass = kRowChunks < 32 ? 32 / kRowChunks : 1;  // rows of a warp per chunk pass
  constexpr bool kLaneRows = Tr::kDecode && (32 % kRowChunks == 0 || kRowChunks % 32 == 0) &&
                             kChunksPerTile % Tr::kThreads == 0 && kChunksPerThread * kRowsPerPass <= 32;
  constexpr bool kFusedWrite = Tr::kDecode && !kFp8 && D >= 128;  // FlashAttnParams::fused_cache_write
  const int lane_row = (lane / kRowsPerPass * Tr::kThreads + warp * 32) / kRowChunks + lane % kRowsPerPass;
  const bool lane_has_row = lane < kChunksPerThread * kRowsPerPass;
  auto block_shift = [&] { return (p.block_size & (p.block_size - 1)) == 0 ? __ffs(p.block_size) - 1 : -1; };
  // Block entry of this lane's row in tile n_tile; -1 past the keys (or the split): the table
  // past a sequence may hold anything and is never read.
  auto lane_entry = [&](int n_tile) {
    const int key = n_tile * kBlockN + lane_row;
    const bool valid = key < seq_len;
    if (!lane_has_row || n_tile >= n_end || !valid) return -1;
    const int sh = block_shift();
    const int32_t* blocks = p.block_table + static_cast<int64_t>(seq) * p.block_table_stride;
    return blocks[sh >= 0 ? key >> sh : key / p.block_size];
  };
  // Byte offset of this lane's row of tile n_tile from the cache base (head kvh, dim 0); -1: none.
  auto lane_offset = [&](int n_tile, int entry) -> int64_t {
    if (entry < 0) return -1;
    const int key = n_tile * kBlockN + lane_row;
    const int sh = block_shift();
    const int slot = sh >= 0 ? key & (p.block_size - 1) : key % p.block_size;
    return (static_cast<int64_t>(entry) * p.kv_block_stride + static_cast<int64_t>(kvh) * p.kv_head_stride +
            static_cast<int64_t>(slot) * p.kv_token_stride) * kElemBytes;
  };
  // Byte offset of key `key`'s row (head kvh, dim 0) from the cache base, through its block-table
  // entry: the per-chunk form of the tiles without lane-owned rows and of the fused write.
  auto page_offset = [&](int key) -> int64_t {
    const int bs = p.block_size, bs_shift = block_shift();
    const int32_t* blocks = p.block_table + static_cast<int64_t>(seq) * p.block_table_stride;
    const int blk_idx = bs_shift >= 0 ? key >> bs_shift : key / bs;
    const int slot = key - blk_idx * bs;
    return (static_cast<int64_t>(blocks[blk_idx]) * p.kv_block_stride + slot * p.kv_token_stride) * kElemBytes +
           static_cast<int64_t>(kvh) * p.kv_head_stride * kElemBytes;
  };
  // The fused cache write (fused_write; a 16-bit cache of the model dtype; head sizes from 128, as at
  // 64 its code cost the decode tiling a CTA per SM): a chunk of a new key's row (key >= pos_base) is
  // copied from the step's K/V input instead of the cache, which does not hold it yet; store_new_rows
  // puts it there once its tile has landed. True where it took the chunk.
  auto fused_chunk = [&](uint8_t* dk, int key, int cb, int64_t off) {
    if (!kFusedWrite || !fused_write || key < pos_base || off < 0) return false;
    const int64_t in = (static_cast<int64_t>(q_start + key - pos_base) * p.new_kv_stride + static_cast<int64_t>(kvh) * D) *
                           kElemBytes + cb;
    cp_async_16(dk, static_cast<const uint8_t*>(p.k_new) + in, true);
    cp_async_16(dk + Tr::kKvTileBytes, static_cast<const uint8_t*>(p.v_new) + in, true);
    return true;
  };
  // The new keys of tile n_tile (in shared memory at sK / sV, landed) into their cache slots: the
  // step's write, once per key and kv head (each new key lies in one split's range). A global store
  // each, no wait; the tile's own products go on.
  auto store_new_rows = [&](int n_tile, const uint8_t* sK, const uint8_t* sV) {
    const int key0 = n_tile * kBlockN;
    const int first = max(pos_base, key0), last = min(seq_len, key0 + kBlockN);
    for (int c = tid; c < (last - first) * kRowChunks; c += Tr::kThreads) {
      const int key = first + c / kRowChunks, chunk = c % kRowChunks;
      const int64_t off = page_offset(key) + chunk * 16;
      const int so = Tr::kv_offset(key - key0, chunk);
      *reinterpret_cast<uint4*>(static_cast<uint8_t*>(const_cast<void*>(p.k_cache)) + off) =
          *reinterpret_cast<const uint4*>(sK + so);
      *reinterpret_cast<uint4*>(static_cast<uint8_t*>(const_cast<void*>(p.v_cache)) + off) =
          *reinterpret_cast<const uint4*>(sV + so);
    }
  };
  // row_off: lane_offset of the tile (kLaneRows only).
  auto load_kv = [&](int n_tile, int stage, int64_t row_off) {
    const int key0 = n_tile * kBlockN;
    uint8_t* dst_k = sKV + (2 * stage) * Tr::kKvTileBytes;
    // The new keys' tile takes the fused path (a branch per tile, uniform in the CTA); every older
    // tile runs the plain copies.
    const bool new_tile = kFusedWrite && fused_write && key0 + kBlockN > pos_base;
    if (new_tile) {
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int c = i * Tr::kThreads + tid;
        if (kChunksPerTile % Tr::kThreads != 0 && c >= kChunksPerTile) break;
        const int r = c / kRowChunks, cb = (c % kRowChunks) * 16;
        uint8_t* dk = dst_k + Tr::kv_offset(r, cb / 16);
        int64_t off = -1;
        if constexpr (kLaneRows) {
          off = __shfl_sync(0xffffffffu, row_off, i * kRowsPerPass + (kRowChunks < 32 ? lane / kRowChunks : 0));
          off = off >= 0 ? off + cb : -1;
        } else {
          const int key = key0 + r;
          if (key < seq_len) off = page_offset(key) + cb;
        }
        if (fused_chunk(dk, key0 + r, cb, off)) continue;
        const int64_t src = off >= 0 ? off : 0;
        cp_async_16(dk, static_cast<const uint8_t*>(p.k_cache) + src, off >= 0);
        cp_async_16(dk + Tr::kKvTileBytes, static_cast<const uint8_t*>(p.v_cache) + src, off >= 0);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kChunksPerThread; ++i) {
      const int c = i * Tr::kThreads + tid;
      if (kChunksPerTile % Tr::kThreads != 0 && c >= kChunksPerTile) break;
      const int r = c / kRowChunks, cb = (c % kRowChunks) * 16;  // row, byte column
      uint8_t* dk = dst_k + Tr::kv_offset(r, cb / 16);
      if constexpr (kLaneRows) {
        const int64_t off =
            __shfl_sync(0xffffffffu, row_off, i * kRowsPerPass + (kRowChunks < 32 ? lane / kRowChunks : 0));
        const int64_t src = (off >= 0 ? off : 0) + cb;
        cp_async_16(dk, static_cast<const uint8_t*>(p.k_cache) + src, off >= 0);
        cp_async_16(dk + Tr::kKvTileBytes, static_cast<const uint8_t*>(p.v_cache) + src, off >= 0);
      } else {
        const int key = key0 + r;
        const bool valid = key < seq_len;
        const int64_t off = page_offset(valid ? key : 0) + cb;
        cp_async_16(dk, static_cast<const uint8_t*>(p.k_cache) + off, valid);
        cp_async_16(dk + Tr::kKvTileBytes, static_cast<const uint8_t*>(p.v_cache) + off, valid);
      }
    }
  };
  // Decode: block entries of the next two tiles to refill, loaded ahead of their use.
  int entry_next = -1, entry_after = -1;

  // ---- per-thread row facts: rows (g, g + 8) of each 16-row fragment ----
  const int g = lane / 4, tq = lane % 4;
  const float k_descale = p.k_descale ? p.k_descale[seq * p.num_kv_heads + kvh] : 1.f;
  const float v_descale = p.v_descale ? p.v_descale[seq * p.num_kv_heads + kvh] : 1.f;
  const bool softcap = p.softcap > 0.f;
  // Scores in log2 units: without a soft cap s2 = qk * scale * k_descale * log2e.
  const float qk_scale =
      p.softmax_scale * k_descale * (softcap ? 1.f / p.softcap : kLog2e) * (kQToHalf ? 1.f / kFp8QScale : 1.f);
  const float cap_log2 = p.softcap * kLog2e;
  const int warp_row0 = row0 + warp_m * Tr::kWarpRows;  // first packed row of this warp

  float acc_o[Tr::kMFrags][Tr::kDFrags][4];
  float row_max[Tr::kMFrags][2];
  float row_sum[Tr::kMFrags][2];  // this thread's partial sum; quad-reduced in the epilogue
#pragma unroll
  for (int mi = 0; mi < Tr::kMFrags; ++mi) {
#pragma unroll
    for (int j = 0; j < Tr::kDFrags; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mi][j][e] = 0.f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }

  // Decode tiling after the step's cache write (wait_new_keys): the first tile holding one of the
  // step's new keys (seq_len - q_len on) waits for the write; the older tiles stream meanwhile.
  // Prefill tilings waited on entry (their registers are all taken).
  int wait_tile = Tr::kDecode && wait_new_keys ? max(seq_len - q_len, 0) / kBlockN : INT_MAX;
  auto wait_for_new_keys = [&](int n_tile) {
    if constexpr (Tr::kDecode) {
      if (n_tile >= wait_tile) {
        pdl_wait_for_producer();
        wait_tile = INT_MAX;
      }
    }
  };

  // Prologue: Q and the first kStages - 1 K/V tiles, one commit group per tile.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (n_begin + s < n_end) wait_for_new_keys(n_begin + s);
    if (n_begin + s < n_end) load_kv(n_begin + s, s, kLaneRows ? lane_offset(n_begin + s, lane_entry(n_begin + s)) : 0);
    cp_async_commit();
  }
  if constexpr (kLaneRows) {
    entry_next = lane_entry(n_begin + kStages - 1);
    entry_after = lane_entry(n_begin + kStages);
  }
  if constexpr (kQToHalf) {
    // Each thread converts the Q chunks it copied (its own cp.async group, complete once at most
    // the kStages - 1 tile groups are pending); the main loop's first barrier publishes them.
    cp_async_wait<kStages - 1>();
    for (int c = tid; c < kBlockM * D / 8; c += Tr::kThreads) fp8_q_to_half(sQ + c * 8);
  }

  for (int n_tile = n_begin; n_tile < n_end; ++n_tile) {
    const int it = n_tile - n_begin;
    const int stage = it % kStages;
    // Wait for tile n_tile, then refill the stage that tile n_tile - 1 used (every warp is done
    // with it after the barrier): one barrier per tile, kStages - 1 tiles in flight under the
    // compute. The decode reads the refill's row addresses from its lanes (entries loaded ahead).
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (n_tile + kStages - 1 < n_end) wait_for_new_keys(n_tile + kStages - 1);
    if (n_tile + kStages - 1 < n_end)
      load_kv(n_tile + kStages - 1, (it + kStages - 1) % kStages,
              kLaneRows ? lane_offset(n_tile + kStages - 1, entry_next) : 0);
    cp_async_commit();
    if constexpr (kLaneRows) {
      entry_next = entry_after;
      entry_after = lane_entry(n_tile + kStages + 1);
    }

    const uint8_t* sK = sKV + (2 * stage) * Tr::kKvTileBytes;
    const uint8_t* sV = sK + Tr::kKvTileBytes;
    if constexpr (kFusedWrite)
      if (fused_write && n_tile * kBlockN + kBlockN > pos_base) store_new_rows(n_tile, sK, sV);
    const bool need_mask = n_tile < n_plain_lo || n_tile >= n_plain_hi;
#pragma unroll 1
    for (int sub = 0; sub < Tr::kSubSteps; ++sub) {
      const int wkey0 = warp_n * Tr::kWarpKeys + sub * Tr::kComputeN;  // this warp's first key in the tile

      // ---- S = Q K^T ----
      float acc_s[Tr::kMFrags][Tr::kNFrags][4];
#pragma unroll
      for (int mi = 0; mi < Tr::kMFrags; ++mi)
#pragma unroll
        for (int j = 0; j < Tr::kNFrags; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_s[mi][j][e] = 0.f;
      if constexpr (!kFp8) {
#pragma unroll
        for (int ks = 0; ks < Tr::kKSteps; ++ks) {
          uint32_t a[Tr::kMFrags][4];
#pragma unroll
          for (int mi = 0; mi < Tr::kMFrags; ++mi) {
            const int r = warp_m * Tr::kWarpRows + mi * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
            ldmatrix_x4(a[mi], sQ + r * kRS + ks * 16 + (lane / 16) * 8);
          }
#pragma unroll
          for (int nj = 0; nj < Tr::kNFrags / 2; ++nj) {
            uint32_t b[4];
            const int key = wkey0 + nj * 16 + (lane % 8) + (lane / 16) * 8;
            ldmatrix_x4(b, sK + Tr::kv_offset(key, 2 * ks + (lane / 8) % 2));
#pragma unroll
            for (int mi = 0; mi < Tr::kMFrags; ++mi) {
              mma_16816<Element>(acc_s[mi][2 * nj], a[mi], b[0], b[1]);
              mma_16816<Element>(acc_s[mi][2 * nj + 1], a[mi], b[2], b[3]);
            }
          }
        }
      } else {
        // One ldmatrix.x4 covers 4 fp8 K matrices of 8 keys x 16 dims: 4 key blocks of one k-step
        // (prefill), or 2 key blocks x 2 k-steps (decode, 16 keys per warp).
        constexpr int kNPer = Tr::kNFrags % 4 == 0 ? 4 : 2;
        constexpr int kKPer = 4 / kNPer;
#pragma unroll
        for (int kp = 0; kp < Tr::kKSteps / kKPer; ++kp) {
          uint32_t a[kKPer][Tr::kMFrags][4];
#pragma unroll
          for (int h = 0; h < kKPer; ++h)
#pragma unroll
            for (int mi = 0; mi < Tr::kMFrags; ++mi) {
              const int mb = (warp_m * Tr::kWarpRows + mi * 16) / 16;
              fp8_q_slot_fragment(a[h][mi], sQ + fp8_q_slot<Tr::kKSteps>(mb, kKPer * kp + h, lane));
            }
#pragma unroll
          for (int nb = 0; nb < Tr::kNFrags / kNPer; ++nb) {
            uint32_t raw[4];  // [key block nb * kNPer + i % kNPer, k-step kKPer * kp + i / kNPer]
            const int key = fp8_k_lane_key<kNPer>(lane, wkey0, nb);
            ldmatrix_x4(raw, sK + Tr::kv_offset(key, kKPer * kp + fp8_k_lane_kstep<kNPer>(lane)));
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint2 bb = fp8_k_fragment<kE5m2>(raw[i]);
#pragma unroll
              for (int mi = 0; mi < Tr::kMFrags; ++mi)
                mma_16816<MmaT>(acc_s[mi][nb * kNPer + i % kNPer], a[i / kNPer][mi], bb.x, bb.y);
            }
          }
        }
      }

      // ---- scores in log2 units, masks, online softmax ----
      const int key_tile0 = n_tile * kBlockN + wkey0;
      const bool alibi = p.alibi_slopes != nullptr;
      // Without soft cap or ALiBi the scores stay raw: the scale is folded into the exp2 argument
      // (one FFMA per score instead of FMUL + FADD; qk_scale > 0 keeps the max of raw scores the
      // max), and a masked tile only sets the keys outside each row's [lo, hi] to -inf
      // (mask_row_scores, flash_mask.cuh).
      const bool fused_scale = !softcap && !alibi && qk_scale > 0.f;
      const float s_scale = fused_scale ? qk_scale : 1.f;  // raw -> log2 units still to apply
#pragma unroll
      for (int mi = 0; mi < Tr::kMFrags; ++mi) {
        if (fused_scale && need_mask) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int prow = warp_row0 + mi * 16 + g + 8 * h;
            mask_row_scores<Tr::kNFrags>(&acc_s[mi][0][0], h, row_visible_keys(p, kv_lo, seq_len, pos_base + prow / G),
                                         key_tile0, tq);
          }
        } else if (!fused_scale) {
          // Row facts are recomputed here rather than kept live across the loop (registers).
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int prow = warp_row0 + mi * 16 + g + 8 * h;
            const int pos = pos_base + prow / G;
            const float slope = alibi ? p.alibi_slopes[kvh * G + prow % G] * kLog2e : 0.f;
            const RowKeys vis = row_visible_keys(p, kv_lo, seq_len, pos);
#pragma unroll
            for (int j = 0; j < Tr::kNFrags; ++j) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                float s = acc_s[mi][j][2 * h + e] * qk_scale;
                if (softcap) s = cap_log2 * tanhf(s);
                const int key = key_tile0 + j * 8 + 2 * tq + e;
                if (alibi) s -= slope * static_cast<float>(abs(pos - key));
                if (need_mask && (key < vis.lo || key > vis.hi)) s = -INFINITY;
                acc_s[mi][j][2 * h + e] = s;
              }
            }
          }
        }
        mma_softmax_update<kLazyMax>(acc_s[mi], acc_o[mi], row_max[mi], row_sum[mi], s_scale);
      }

      // ---- O += P V ----
#pragma unroll
      for (int kk = 0; kk < Tr::kComputeN / 16; ++kk) {
        uint32_t a[Tr::kMFrags][4];
#pragma unroll
        for (int mi = 0; mi < Tr::kMFrags; ++mi) p_fragment<MmaT>(a[mi], acc_s[mi], kk);
        const int key = wkey0 + kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        if constexpr (!kFp8) {
#pragma unroll
          for (int dj = 0; dj < Tr::kDFrags / 2; ++dj) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, sV + Tr::kv_offset(key, 2 * dj + lane / 16));
#pragma unroll
            for (int mi = 0; mi < Tr::kMFrags; ++mi) {
              mma_16816<Element>(acc_o[mi][2 * dj], a[mi], b[0], b[1]);
              mma_16816<Element>(acc_o[mi][2 * dj + 1], a[mi], b[2], b[3]);
            }
          }
        } else {
          // One ldmatrix.x4.trans: 16 keys x 32 fp8 dims = the B fragments of 4 O column blocks.
#pragma unroll
          for (int dq = 0; dq < D / 32; ++dq) {
            uint32_t raw[4];  // [dim group 2dq + i / 2][keys 0-7 | 8-15]
            ldmatrix_x4_trans(raw, sV + Tr::kv_offset(key, 2 * dq + lane / 16));
#pragma unroll
            for (int gi = 0; gi < 2; ++gi) {
              const uint4 b = fp8_v_fragments<kE5m2>(raw[2 * gi], raw[2 * gi + 1]);
#pragma unroll
              for (int mi = 0; mi < Tr::kMFrags; ++mi) {
                mma_16816<MmaT>(acc_o[mi][4 * dq + 2 * gi], a[mi], b.x, b.y);
                mma_16816<MmaT>(acc_o[mi][4 * dq + 2 * gi + 1], a[mi], b.z, b.w);
              }
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  ATTN_FA_CTA_TRACE_AT(kCtaMainEnd);

  // ---- prefill epilogue: a warp owns whole rows (one warp column), so each quad normalizes its
  // rows and stores O and LSE straight from registers; no shared memory, no further barrier ----
  if constexpr (Tr::kWarpsN == 1 && !kFp8) {
    const bool use_sink = p.sinks != nullptr && split == 0;
    const int64_t slot = p.partial_offset + split;
#pragma unroll
    for (int mi = 0; mi < Tr::kMFrags; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float s = row_sum[mi][h];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        const int prow = warp_row0 + mi * 16 + g + 8 * h;
        const int t = prow / G;
        if (t >= q_len) continue;
        const int head = kvh * G + prow % G;
        const RowEnd end = end_row(row_max[mi][h], s, use_sink, use_sink ? p.sinks[head] * kLog2e : 0.f);
        const float wgt = end.weight * v_descale;
        const float lse = end.lse2 * kLn2;
        const int64_t tok = q_start + t;
        const int64_t row_index = tok * p.num_q_heads + head;
        if (p.o_partial != nullptr) {
          // o_partial: [slots, num_tokens, num_q_heads, D] fp32; lse_partial: [slots, num_tokens, num_q_heads]
          const int64_t prow_index = slot * p.num_tokens * p.num_q_heads + row_index;
          float* dst = p.o_partial + prow_index * D + 2 * tq;
#pragma unroll
          for (int d = 0; d < Tr::kDFrags; ++d)
            *reinterpret_cast<float2*>(dst + d * 8) = make_float2(acc_o[mi][d][2 * h] * wgt, acc_o[mi][d][2 * h + 1] * wgt);
          if (tq == 0) p.lse_partial[prow_index] = lse;
        } else {
          // o: [num_tokens, num_q_heads, D] of the model dtype
          Element* dst = static_cast<Element*>(p.o) + row_index * D + 2 * tq;
#pragma unroll
          for (int d = 0; d < Tr::kDFrags; ++d)
            *reinterpret_cast<uint32_t*>(dst + d * 8) =
                pack2<Element>(acc_o[mi][d][2 * h] * wgt, acc_o[mi][d][2 * h + 1] * wgt);
          if (tq == 0 && p.lse) p.lse[tok * p.lse_token_stride + head * p.lse_head_stride] = lse;
        }
      }
    }
    return;
  }
  __syncthreads();

  // ---- epilogue: per-warp states -> shared memory -> combined, normalized output ----
  float* sO = reinterpret_cast<float*>(smem);  // [kWarpsN][kBlockM][kORowStride]
  float* sMax = sO + Tr::kWarpsN * kBlockM * Tr::kORowStride;  // [kWarpsN][kBlockM]
  float* sSum = sMax + Tr::kWarpsN * kBlockM;                    // [kWarpsN][kBlockM]
#pragma unroll
  for (int mi = 0; mi < Tr::kMFrags; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float s = row_sum[mi][h];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      const int r = warp_m * Tr::kWarpRows + mi * 16 + g + 8 * h;
      if (tq == 0) {
        sMax[warp_n * kBlockM + r] = row_max[mi][h];
        sSum[warp_n * kBlockM + r] = s;
      }
      float* dst = sO + (warp_n * kBlockM + r) * Tr::kORowStride;
      if constexpr (!kFp8) {
#pragma unroll
        for (int d = 0; d < Tr::kDFrags; ++d)
          *reinterpret_cast<float2*>(dst + d * 8 + 2 * tq) = make_float2(acc_o[mi][d][2 * h], acc_o[mi][d][2 * h + 1]);
      } else {
        // Column blocks (2b, 2b + 1) hold the even and odd dims 16b + 4t + {0..3}.
#pragma unroll
        for (int b = 0; b < Tr::kDFrags / 2; ++b)
          *reinterpret_cast<float4*>(dst + b * 16 + 4 * tq) = fp8_o_dims(acc_o[mi][2 * b], acc_o[mi][2 * b + 1], h);
      }
    }
  }
  __syncthreads();

  // Per row: combine the warp columns (and the sink), then one coefficient per column.
  // Rows are handled by the threads r < kBlockM, the result left in sMax/sSum of column 0:
  // sMax[r] = LSE (natural log), sSum[c * kBlockM + r] = weight of column c.
  const bool use_sink = p.sinks != nullptr && split == 0;
  for (int r = tid; r < kBlockM; r += Tr::kThreads) {
    float m = -INFINITY;
#pragma unroll
    for (int c = 0; c < Tr::kWarpsN; ++c) m = fmaxf(m, sMax[c * kBlockM + r]);
    const int prow = row0 + r;
    const float sink2 = use_sink ? p.sinks[kvh * G + prow % G] * kLog2e : -INFINITY;
    m = fmaxf(m, sink2);
    const float m_use = m == -INFINITY ? 0.f : m;
    float total = use_sink ? exp2f(sink2 - m_use) : 0.f;
    float w[Tr::kWarpsN];
#pragma unroll
    for (int c = 0; c < Tr::kWarpsN; ++c) {
      w[c] = exp2f(sMax[c * kBlockM + r] - m_use);
      total += sSum[c * kBlockM + r] * w[c];
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
#pragma unroll
    for (int c = 0; c < Tr::kWarpsN; ++c) sSum[c * kBlockM + r] = w[c] * inv;
    sMax[r] = has_keys_or_nan(total) ? (m_use + log2f(total)) * kLn2 : -INFINITY;
  }
  __syncthreads();

  const bool partial = p.o_partial != nullptr;
  const int64_t slot = p.partial_offset + split;
  constexpr int kVec = 8;
  // Row r's output columns col .. col + 7: the warp columns weighed as the row combine said.
  auto combined = [&](int r, int col, float (&out)[kVec]) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = 0.f;
#pragma unroll
    for (int cc = 0; cc < Tr::kWarpsN; ++cc) {
      const float wgt = sSum[cc * kBlockM + r] * v_descale;
      const float* src = sO + (cc * kBlockM + r) * Tr::kORowStride + col;
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] += wgt * src[i];
    }
  };
  // Two splits in a cluster (decode tiling, sm_90; FwdTraits::kSlotOffset): split 1 hands its rows
  // and LSEs to split 0's slot and is done; split 0 merges them with its own as merge_attn_states
  // would (a split with LSE -inf weighs 0 and is never read) and writes O.
  bool in_cluster = false;
  const float* sSlot = nullptr;  // split 0: split 1's [kBlockM][D] rows, then [kBlockM] LSEs
  if constexpr (Tr::kMaxClusterSplits > 1) {
    in_cluster = p.split_cluster != 0;
    if (in_cluster) {
      cluster_wait();  // split 0's slot barrier is initialised (the arrival at the kernel's start)
      if (split != 0) {
        const uint32_t dst = cluster_map_shared(smem_u32(smem + Tr::kSlotOffset), 0);
        const uint32_t bar = cluster_map_shared(smem_u32(smem + Tr::kSlotBarOffset), 0);
        // Every row, padding included: split 0 expects the slot's kMergeSplitBytes.
        for (int c = tid; c < kBlockM * (D / kVec); c += Tr::kThreads) {
          const int r = c / (D / kVec), col = (c % (D / kVec)) * kVec;
          float out[kVec];
          combined(r, col, out);
          st_async_f32x4(dst + (r * D + col) * 4, out[0], out[1], out[2], out[3], bar);
          st_async_f32x4(dst + (r * D + col + 4) * 4, out[4], out[5], out[6], out[7], bar);
          if (col == 0) st_async_f32(dst + (kBlockM * D + r) * 4, sMax[r], bar);
        }
        return;
      }
      const uint32_t bar = smem_u32(smem + Tr::kSlotBarOffset);
      if (tid == 0) mbar_arrive_expect_tx(bar, Tr::kMergeSplitBytes);
      mbar_wait(bar, 0);
      sSlot = reinterpret_cast<const float*>(smem + Tr::kSlotOffset);
    }
  }
  for (int c = tid; c < kBlockM * (D / kVec); c += Tr::kThreads) {
    const int r = c / (D / kVec), col = (c % (D / kVec)) * kVec;
    const int prow = row0 + r;
    const int t = prow / G;
    if (t >= q_len) continue;
    const int64_t tok = q_start + t;
    const int head = kvh * G + prow % G;
    float out[kVec];
    combined(r, col, out);
    float lse = sMax[r];
    if (in_cluster) {
      // merge_attn_states' weights (lse_merge.cuh); the sum as products added (its fused
      // lse_merge_add took 131 registers at head size 64: 3 CTAs per SM instead of 4).
      float w0, w1;
      const LseMerge mg = lse_merge2(lse, sSlot[kBlockM * D + r], false, w0, w1);
      const float* o1 = sSlot + r * D + col;
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] = (w0 != 0.f ? w0 * out[i] : 0.f) + (w1 != 0.f ? w1 * o1[i] : 0.f);
      lse = mg.lse;
    }
    const int64_t row_index = tok * p.num_q_heads + head;
    if (partial) {
      float* dst = p.o_partial + (slot * p.num_tokens * p.num_q_heads + row_index) * D + col;
      reinterpret_cast<float4*>(dst)[0] = make_float4(out[0], out[1], out[2], out[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(out[4], out[5], out[6], out[7]);
      if (col == 0) p.lse_partial[slot * p.num_tokens * p.num_q_heads + row_index] = lse;
    } else {
      uint4 packed;
      packed.x = pack2<Element>(out[0], out[1]);
      packed.y = pack2<Element>(out[2], out[3]);
      packed.z = pack2<Element>(out[4], out[5]);
      packed.w = pack2<Element>(out[6], out[7]);
      *reinterpret_cast<uint4*>(static_cast<Element*>(p.o) + row_index * D + col) = packed;
      if (col == 0 && p.lse) p.lse[tok * p.lse_token_stride + head * p.lse_head_stride] = lse;
    }
  }
}

// The prefill kernel also serves the decode sequences of a mixed batch: a sequence whose packed
// rows fit one decode tile (the planner gives it a single tile) runs the decode tiling, so one
// launch covers chunked prefills and decodes without 128-row tiles for a single token.
template <class Tr, class TrSmall, bool kE5m2>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtasPerSm) flash_fwd_kernel(const __grid_constant__ FlashAttnParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  // Decode grids run kv-head-fastest (blockIdx.x = tile * num_kv_heads + kv head): the CTAs of
  // one sequence start together and read the interleaved head slices of its cache blocks at
  // about the same time (3 % on 64 x 4k). Prefill keeps (tile, kv head) so that a wave of CTAs
  // shares the K/V of few heads in L2.
  // Launched after the kernel ahead (run_flash_fwd): wait for it before reading anything, unless
  // it is the step's cache write and this is the decode tiling (attend_tile waits before the first
  // tile of new keys).
  ATTN_FA_CTA_TRACE_AT(kCtaStart);
  const bool deferred = Tr::kDecode && p.after_cache_write;
  if constexpr (Tr::kMaxClusterSplits > 1) {
    // Split 0's slot barrier (FwdTraits::kSlotOffset), made visible to split 1 through the cluster
    // barrier whose wait comes in the epilogue: at the start, both CTAs arrive long before.
    if (p.split_cluster != 0) {
      if (blockIdx.z == 0 && threadIdx.x == 0) {
        mbar_init(smem_u32(smem + Tr::kSlotBarOffset), 1);
        fence_barrier_init();
      }
      cluster_arrive_relaxed();
    }
  }
  if (!deferred) pdl_wait_for_producer();
  const int tile = Tr::kDecode ? blockIdx.x / p.num_kv_heads : blockIdx.x;
  const int kvh = Tr::kDecode ? blockIdx.x % p.num_kv_heads : blockIdx.y;
  const int seq = p.tiles[2 * tile];
  const int m_block = p.tiles[2 * tile + 1];
  if constexpr (!Tr::kDecode) {
    const int rows = (p.query_start_loc[seq + 1] - p.query_start_loc[seq]) * (p.num_q_heads / p.num_kv_heads);
    if (rows <= TrSmall::kBlockM) {
      attend_tile<TrSmall, kE5m2>(p, smem, seq, m_block, kvh, false);
      ATTN_FA_CTA_TRACE_AT(kCtaEnd);
      return;
    }
  }
  attend_tile<Tr, kE5m2>(p, smem, seq, m_block, kvh, deferred, Tr::kDecode && p.fused_cache_write != 0);
  if (deferred) pdl_wait_for_producer();  // no CTA finishes before the kernel ahead (a split without new keys)
  ATTN_FA_CTA_TRACE_AT(kCtaEnd);
}

// Host side of one instantiation: raises the shared-memory limit once, then launches the kernel
// of the cache's fp8 format (e4m3 for a 16-bit cache, which never widens), with programmatic
// stream serialization (p.after_cache_write says what the kernel may read before waiting). Launch
// errors are left for the caller's cudaGetLastError check.
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode, bool kSpec>
void run_flash_fwd(const FlashAttnParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<kHeadDim, Element, kKvFp8, kDecode, kSpec>;
  using TrSmall = FwdTraits<kHeadDim, Element, kKvFp8, true>;
  constexpr int kSmem = Tr::kSmemBytes > TrSmall::kSmemBytes ? Tr::kSmemBytes : TrSmall::kSmemBytes;
  // A clustered decode launch also holds split 1's slot and its barrier (FwdTraits::kSlotOffset).
  constexpr int kSmemMax = Tr::kMaxClusterSplits > 1 ? Tr::kClusterSmemBytes : kSmem;
  const int smem = p.split_cluster != 0 ? kSmemMax : kSmem;
  const bool e5m2 = kKvFp8 && p.kv_fp8_e5m2 != 0;
  const auto kernel = e5m2 ? flash_fwd_kernel<Tr, TrSmall, kKvFp8> : flash_fwd_kernel<Tr, TrSmall, false>;
  static const cudaError_t configured[2] = {
      cudaFuncSetAttribute(flash_fwd_kernel<Tr, TrSmall, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMax),
      cudaFuncSetAttribute(flash_fwd_kernel<Tr, TrSmall, kKvFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMax)};
  (void)configured;
  const dim3 grid(kDecode ? p.num_tiles * p.num_kv_heads : p.num_tiles, kDecode ? 1 : p.num_kv_heads, p.num_splits);
  // A tile's splits as one cluster (the launcher checked flash_attn_cluster_merge).
  const dim3 cluster(1, 1, p.split_cluster ? p.num_splits : 1);
  cta_trace_before_launch(stream);
  (void)launch_after_producer_in_clusters(kernel, grid, dim3(Tr::kThreads), cluster, smem, stream, p);
  cta_trace_after_launch(stream, grid);
}

// CTAs of one instantiation resident per SM of the current device (registers and shared memory
// decide), 0 when the runtime cannot tell (no device). For an fp8 cache: the fewer of the two
// formats' kernels (they differ only in the widening instructions).
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode, bool kSpec>
int flash_fwd_ctas_per_sm() {
  using Tr = FwdTraits<kHeadDim, Element, kKvFp8, kDecode, kSpec>;
  using TrSmall = FwdTraits<kHeadDim, Element, kKvFp8, true>;
  // With split 1's slot where the tiling clusters: the launches the split rule plans may cluster
  // (it keeps every 16-bit decode tiling's CTAs per SM at head sizes 64, 96 and 128).
  constexpr int kSmem = Tr::kMaxClusterSplits > 1 ? Tr::kClusterSmemBytes
                        : Tr::kSmemBytes > TrSmall::kSmemBytes ? Tr::kSmemBytes : TrSmall::kSmemBytes;
  int fewest = 1 << 30;
  for (const auto kernel : {flash_fwd_kernel<Tr, TrSmall, false>, flash_fwd_kernel<Tr, TrSmall, kKvFp8>}) {
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, Tr::kThreads, kSmem) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    fewest = std::min(fewest, n);
  }
  return fewest;
}

// The instantiations of one head size (flash_fwd_hd<N>.cu): both model dtypes, the model-dtype
// and the fp8 cache, prefill and decode tiling.
#define ATTN_FA_INSTANTIATE_ONE(D, E, F8, DEC)                            \
  template void run_flash_fwd<D, E, F8, DEC>(const FlashAttnParams&, cudaStream_t); \
  template int flash_fwd_ctas_per_sm<D, E, F8, DEC>();
#define ATTN_FA_INSTANTIATE_HEAD_SIZE(D)                 \
  ATTN_FA_INSTANTIATE_ONE(D, __half, false, false)        \
  ATTN_FA_INSTANTIATE_ONE(D, __half, false, true)         \
  ATTN_FA_INSTANTIATE_ONE(D, __half, true, false)         \
  ATTN_FA_INSTANTIATE_ONE(D, __half, true, true)          \
  ATTN_FA_INSTANTIATE_ONE(D, __nv_bfloat16, false, false) \
  ATTN_FA_INSTANTIATE_ONE(D, __nv_bfloat16, false, true)  \
  ATTN_FA_INSTANTIATE_ONE(D, __nv_bfloat16, true, false)  \
  ATTN_FA_INSTANTIATE_ONE(D, __nv_bfloat16, true, true)
// The spec tiles (FwdTraits::kSpec) of head sizes 64 and 128: 16-bit caches only.
#define ATTN_FA_INSTANTIATE_SPEC_ONE(D, E)                                          \
  template void run_flash_fwd<D, E, false, true, true>(const FlashAttnParams&, cudaStream_t); \
  template int flash_fwd_ctas_per_sm<D, E, false, true, true>();
#define ATTN_FA_INSTANTIATE_SPEC(D)          \
  ATTN_FA_INSTANTIATE_SPEC_ONE(D, __half)     \
  ATTN_FA_INSTANTIATE_SPEC_ONE(D, __nv_bfloat16)

}  // namespace attn::fa
