#pragma once
// Tile shapes of the FLASH_ATTN forward kernel and the declaration of its host launcher. The
// dispatcher includes only this header, so it never instantiates kernels itself: those live in
// the flash_fwd_hd<N>.cu files.
#include <cuda_runtime_api.h>

#include "kernels/flash_attn/flash_attn_params.hpp"

namespace attn::fa {

constexpr float kLn2 = 0.6931471805599453f;

template <int kHeadDim_, class Element_, bool kKvFp8_, bool kDecode_>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kKvFp8 = kKvFp8_;
  static constexpr bool kDecode = kDecode_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  // Keys per shared-memory stage. Decode spreads 64 keys over the 4 warps (16 each). Prefill
  // takes 64 keys per stage for head sizes <= 128 (one barrier and one rescale of O per 64
  // keys); hd256 keeps 32 so that two CTAs (Q + 2 stages of K/V) still fit on one SM.
  // An fp8 decode stage holds 128 keys (32 per warp): its rows are half as large, and with 64
  // keys it paid two barriers per 18 KB of K and V (ncu: DRAM at 72 % of peak).
  static constexpr int kBlockN = kDecode ? (kHeadDim <= 128 ? (kKvFp8 ? 128 : 64) : 32) : (kHeadDim <= 128 ? 64 : 32);
  // Decode: the 4 warps split each key tile in slices of 16 or 32 keys.
  static constexpr int kWarpsN = kDecode ? (kBlockN / 16 < kWarps ? kBlockN / 16 : kWarps) : 1;
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
  // Pipeline depth. Decode runs three stages: a decode CTA computes little per tile, so the
  // third stage keeps two tiles in flight while it waits, and its larger footprint (109 KB for
  // hd128) puts 2 CTAs on an SM: a 64 x 8 grid then fills 1.94 waves of 264 slots instead of
  // 1.29 of 396 (measured 441 -> 399 us on 64 x 4k). fp8 decode stages (128 keys, 18 KB per K or V
  // at hd128) take three too, 2 CTAs per SM; two stages ran within 1 % of it.
  // hd64/96/256 keep two 16-bit stages (not measured with three; hd256 would drop to 1 CTA/SM).
  static constexpr int kStages = (kDecode && (kKvFp8 || kHeadDim == 128)) ? 3 : 2;
  // K/V stage rows: 16-bit elements, or raw fp8 bytes widened in registers right before the MMA.
  static constexpr int kKvRowBytes = kKvFp8 ? kHeadDim + 16 : kRowStride * 2;
  static constexpr int kKvTileBytes = kBlockN * kKvRowBytes;  // one K or V tile
  static constexpr int kMainBytes = kQElems * 2 + 2 * kStages * kKvTileBytes;
  // Epilogue: per warp-column O in fp32 (rows padded by 8 floats) plus max and sum per row.
  static constexpr int kORowStride = kHeadDim + 8;
  static constexpr int kEpiBytes = kWarpsN * kBlockM * (kORowStride + 2) * 4;
  static constexpr int kSmemBytes = kMainBytes > kEpiBytes ? kMainBytes : kEpiBytes;
};

// Launches flash_fwd_kernel<FwdTraits<...>> over grid (num_tiles, num_kv_heads, num_splits), or
// (num_tiles * num_kv_heads, 1, num_splits) kv-head-fastest for the decode tiling.
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode>
void run_flash_fwd(const FlashAttnParams& p, cudaStream_t stream);

// CTAs of that kernel resident per SM on the current device; 0 when it cannot be told.
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode>
int flash_fwd_ctas_per_sm();

}  // namespace attn::fa
