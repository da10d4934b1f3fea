#pragma once
// Tile shapes of the FLASH_ATTN forward kernel and the declaration of its host launcher. The
// dispatcher includes only this header, so it never instantiates kernels itself: those live in
// the flash_fwd_hd<N>.cu files.
#include <cuda_runtime_api.h>

#include "kernels/flash_attn/flash_attn_params.hpp"

namespace attn::fa {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int kHeadDim_, class Element_, bool kKvFp8_, bool kDecode_>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kKvFp8 = kKvFp8_;
  static constexpr bool kDecode = kDecode_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  // Keys per step: the decode tiling spreads 64 keys over 4 warps (16 each); the prefill tiling
  // keeps its S fragment small next to the 32-row O accumulator of hd96/128 (no spills).
  static constexpr int kBlockN = kDecode ? (kHeadDim <= 128 ? 64 : 32) : (kHeadDim <= 64 ? 64 : 32);
  // Decode: warps split each key tile in slices of 16 keys (one k-step of the P·V product).
  static constexpr int kWarpsN = kDecode ? kBlockN / 16 : 1;
  static constexpr int kWarpsM = kWarps / kWarpsN;
  // Prefill: two 16-row fragments per warp for head sizes <= 128 so one K/V fragment load feeds
  // two MMAs; hd256 keeps one (its O accumulator already takes 128 registers).
  static constexpr int kMFrags = (kDecode || kHeadDim > 128) ? 1 : 2;
  static constexpr int kWarpRows = 16 * kMFrags;
  static constexpr int kBlockM = kWarpRows * kWarpsM;
  static constexpr int kWarpKeys = kBlockN / kWarpsN;
  static constexpr int kNFrags = kWarpKeys / 8;   // 8-key column blocks of S per warp
  static constexpr int kDFrags = kHeadDim / 8;    // 8-wide column blocks of O
  static constexpr int kKSteps = kHeadDim / 16;   // k-steps of Q·K^T
  static_assert(kWarpKeys % 16 == 0 && kHeadDim % 16 == 0, "tile shape");

  // Shared memory rows are padded by 16 bytes: the 8 rows one ldmatrix reads then start in 8
  // different bank groups for every head size (a XOR swizzle would not fit hd96's 12 chunks).
  static constexpr int kRowStride = kHeadDim + 8;  // elements
  static constexpr int kQElems = kBlockM * kRowStride;
  static constexpr int kKvElems = kBlockN * kRowStride;  // one K or V tile
  static constexpr int kStages = 2;
  static constexpr int kRawBytes = kBlockN * kHeadDim;   // one fp8 K or V tile, unpadded
  // Layout: Q | K/V stages (16-bit) | raw fp8 stages. fp8 caches land in the raw stages and are
  // converted into a single 16-bit K/V pair (stage 0 of the 16-bit area).
  static constexpr int kKvStagesUsed = kKvFp8 ? 1 : kStages;
  static constexpr int kMainBytes = (kQElems + 2 * kKvElems * kKvStagesUsed) * 2 + (kKvFp8 ? 2 * kStages * kRawBytes : 0);
  // Epilogue: per warp-column O in fp32 (rows padded by 8 floats) plus max and sum per row.
  static constexpr int kORowStride = kHeadDim + 8;
  static constexpr int kEpiBytes = kWarpsN * kBlockM * (kORowStride + 2) * 4;
  static constexpr int kSmemBytes = kMainBytes > kEpiBytes ? kMainBytes : kEpiBytes;
};

// Launches flash_fwd_kernel<FwdTraits<...>> over grid (num_tiles, num_kv_heads, num_splits).
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode>
void run_flash_fwd(const FlashAttnParams& p, cudaStream_t stream);

}  // namespace attn::fa
