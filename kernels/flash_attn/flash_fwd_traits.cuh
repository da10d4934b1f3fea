#pragma once
// Tile shapes of the FLASH_ATTN forward kernel and the declaration of its host launcher. The
// dispatcher includes only this header, so it never instantiates kernels itself: those live in
// the flash_fwd_hd<N>.cu files.
#include <cuda_runtime_api.h>

#include "kernels/flash_attn/flash_attn_params.hpp"

namespace attn::fa {

constexpr float kLn2 = 0.6931471805599453f;

// kSpec: the decode tiling for speculative decodes (G x q_len packed rows past the 16 of the plain
// decode tile, up to 32): two warps per 16 rows, each on half of every key stage (kWarpsN = 2, as
// head size 256's decode tile), so a verify step reads each K/V tile once, as a decode does.
// 16-bit caches at head sizes 64 and 128 (157 and 228 registers, no spill; an fp8 decode's 4 CTAs
// per SM leave 128). Head size 96, whose decode rows are not whole lane groups of chunks and keep
// two stages, ran 0.88 x the sm_90a decode launch with them (docs/PERF_NOTES.md Version 62).
template <int kHeadDim_, class Element_, bool kKvFp8_, bool kDecode_, bool kSpec_ = false>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kKvFp8 = kKvFp8_;
  static constexpr bool kDecode = kDecode_;
  static constexpr bool kSpec = kSpec_;
  static_assert(!kSpec || (kDecode && !kKvFp8 && (kHeadDim == 64 || kHeadDim == 128)),
                "spec tiles: the 16-bit decode tiling at head size 64 or 128");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  // Keys per shared-memory stage, decode and prefill alike: 64 for head sizes <= 128 (decode: 16
  // per warp; prefill: one barrier and one rescale of O per 64 keys), 32 above so that two CTAs
  // (Q + 2 stages of K/V) still fit on one SM.
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;
  // Decode: the warps split each key tile in slices of 16 keys (4 slices; 2 at head sizes above
  // 128, whose other 2 warps take the next 16 rows; spec tiles the same at every head size).
  static constexpr int kWarpsN = kSpec ? 2 : kDecode ? (kBlockN / 16 < kWarps ? kBlockN / 16 : kWarps) : 1;
  static constexpr int kWarpsM = kWarps / kWarpsN;
  // Prefill: two 16-row fragments per warp for head sizes <= 128 so one K/V fragment load feeds
  // two MMAs; hd256 keeps one (its O accumulator already takes 128 registers).
  static constexpr int kMFrags = (kDecode || kHeadDim > 128) ? 1 : 2;
  static constexpr int kWarpRows = 16 * kMFrags;
  static constexpr int kBlockM = kWarpRows * kWarpsM;
  static constexpr int kWarpKeys = kBlockN / kWarpsN;
  // Keys of one S fragment (QK^T, softmax, PV) per warp. hd128 with a 16-bit cache takes the
  // whole 64-key stage (255 registers, ~32 bytes spilled, 9 % faster than two 32-key steps);
  // hd96 (40 bytes of spills) and fp8 prefill (operands widened in registers) walk it in two.
  static constexpr int kComputeN = (kDecode || kHeadDim <= 64 || (kHeadDim == 128 && !kKvFp8)) ? kWarpKeys : 32;
  static constexpr int kSubSteps = kWarpKeys / kComputeN;
  static constexpr int kNFrags = kComputeN / 8;   // 8-key column blocks of S per warp
  static constexpr int kDFrags = kHeadDim / 8;    // 8-wide column blocks of O
  static constexpr int kKSteps = kHeadDim / 16;   // k-steps of Q·K^T
  static_assert(kComputeN % 16 == 0 && kWarpKeys % kComputeN == 0 && kHeadDim % 32 == 0, "tile shape");

  // Shared memory rows are padded by 16 bytes: the 8 rows one ldmatrix reads then start in 8
  // different bank groups for every head size (a XOR swizzle would not fit hd96's 12 chunks).
  static constexpr int kRowStride = kHeadDim + 8;  // elements of a 16-bit Q/K/V row
  static constexpr int kQElems = kBlockM * kRowStride;
  // Pipeline depth. The 16-bit hd128 decode runs three stages: a decode CTA computes little per
  // tile, so the third stage keeps two tiles in flight while it waits, and its larger footprint
  // (109 KB) puts 2 CTAs on an SM: a 64 x 8 grid then fills 1.94 waves of 264 slots instead of
  // 1.29 of 396 (measured 441 -> 399 us on 64 x 4k). The fp8 decode (hd <= 128) runs two stages of
  // 64 keys (16 KB of K and V at hd128) in 4 CTAs per SM (kMinCtasPerSm: 128 registers, no
  // spill), with swizzled rows: 64 x 4k e4m3 209.6 -> 193.0 us against three 128-key stages in 2
  // CTAs with padded rows (the swizzle alone 1.04 x, the 4 CTAs alone 1.008 x; docs/PERF_NOTES.md
  // Version 27). hd64/96/256 keep two 16-bit stages (not measured with three; hd256 would drop
  // to 1 CTA/SM).
  static constexpr int kStages = (kDecode && !kKvFp8 && kHeadDim == 128) ? 3 : 2;
  // CTAs per SM the registers must allow (__launch_bounds__ minimum blocks).
  static constexpr int kMinCtasPerSm = (kDecode && kKvFp8 && kHeadDim <= 128) ? 4 : 1;
  // K/V stage rows: 16-bit elements, or raw fp8 bytes widened in registers right before the MMA.
  // Decode rows of 4 chunks or a multiple of 8 (all but fp8 head sizes 96 and 192 and 16-bit 96) are
  // unpadded and XOR-swizzled by chunk (kv_offset): with the 16-byte pad, each 16-byte copy of a
  // warp took 14 shared-memory wavefronts instead of 4 and 1.5 x the ideal L2 sectors (ncu, 64 x 4k
  // e4m3); the swizzle made the fp8 decode 1.04 x and the 16-bit one 1.065-1.086 x faster
  // (Version 27). The prefill tiling keeps the pad: its registers are all taken (the hd128 fp8
  // prefill kernel, which also holds the decode tiles for a mixed batch, uses 255 and spills 20
  // bytes since they changed).
  static constexpr int kKvChunks = kHeadDim * (kKvFp8 ? 1 : 2) / 16;  // 16-byte chunks per K/V row
  static constexpr bool kKvSwizzle = kDecode && (kKvChunks == 4 || kKvChunks % 8 == 0);
  static constexpr int kKvRowBytes = kKvSwizzle ? kKvChunks * 16 : kKvFp8 ? kHeadDim + 16 : kRowStride * 2;
  static constexpr int kKvTileBytes = kBlockN * kKvRowBytes;  // one K or V tile
  static constexpr int kMainBytes = kQElems * 2 + 2 * kStages * kKvTileBytes;
  // Byte offset of 16-byte chunk `chunk` of row `row` in a K or V tile. Swizzled: the 8 rows one
  // ldmatrix reads (and a warp's copy of whole rows) cover every 16-byte bank group once.
  __device__ static constexpr int kv_offset(int row, int chunk) {
    if constexpr (!kKvSwizzle) {
      return row * kKvRowBytes + chunk * 16;
    } else if constexpr (kKvChunks >= 8) {
      return (row * kKvChunks + (chunk ^ (row & 7))) * 16;
    } else {
      return (row * kKvChunks + (chunk ^ ((row >> 1) & 3))) * 16;
    }
  }
  // Epilogue: per warp-column O in fp32 (rows padded by 8 floats) plus max and sum per row.
  static constexpr int kORowStride = kHeadDim + 8;
  static constexpr int kEpiBytes = kWarpsN * kBlockM * (kORowStride + 2) * 4;
  static constexpr int kSmemBytes = kMainBytes > kEpiBytes ? kMainBytes : kEpiBytes;
  // Decode tiling in clusters of two splits (FlashAttnParams::split_cluster): split 1 stores its
  // normalized rows and their LSEs ([kBlockM][kHeadDim] + [kBlockM] fp32) into a slot of split 0's
  // shared memory past the kernel's own bytes (kSlotOffset), as soon as its epilogue has them; they
  // complete split 0's slot barrier (kSlotBarOffset) as they land. A separate slot, not the stages:
  // split 1 need not wait for split 0's main loop to end, nor split 0 for a second cluster barrier
  // (the 2-token decode's CTAs spent 2-3 us past their main loops in those two barriers, Version 50).
  // 16-bit caches at head sizes up to 128, whose decode tilings keep their CTAs per SM with the
  // slot (hd128: 2 x 109 KB); the fp8 decode tiling's 4 CTAs per SM leave no room, and head sizes
  // 192 and 256, which never clustered (no room before the slot), keep their partials unmeasured.
  static constexpr int kMergeSplitBytes = kBlockM * (kHeadDim + 1) * 4;
  // Spec tiles keep partials and the merge kernel: with the slot, hd128's would take 2 x 121 KB.
  static constexpr int kMaxClusterSplits = kDecode && !kKvFp8 && kHeadDim <= 128 && !kSpec ? 2 : 0;
  static constexpr int kSlotOffset = (kSmemBytes + 15) / 16 * 16;
  static constexpr int kSlotBarOffset = kSlotOffset + kMergeSplitBytes;
  static constexpr int kClusterSmemBytes = kSlotBarOffset + 16;
  static_assert(kMergeSplitBytes % 16 == 0, "16-byte stores into each split's slot");
};

// Launches flash_fwd_kernel<FwdTraits<...>> over grid (num_tiles, num_kv_heads, num_splits), or
// (num_tiles * num_kv_heads, 1, num_splits) kv-head-fastest for the decode tiling.
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode, bool kSpec = false>
void run_flash_fwd(const FlashAttnParams& p, cudaStream_t stream);

// CTAs of that kernel resident per SM on the current device; 0 when it cannot be told.
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode, bool kSpec = false>
int flash_fwd_ctas_per_sm();

}  // namespace attn::fa
