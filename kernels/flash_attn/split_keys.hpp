#pragma once
// Where split-KV cuts a work item's key tiles: the one statement that the kernels (tile_keys in
// flash_mask.cuh) and the planner's cost model (balance_fixed_rounds) share. Plain C++ with a
// device path.
#include <cstdint>

#if defined(__CUDACC__)
#define ATTN_SPLIT_HD __host__ __device__
#else
#define ATTN_SPLIT_HD
#endif

namespace attn::fa {

// First key tile of split s of S over the keys [lo, hi) in tiles of B keys (0 <= lo): the tile
// boundary nearest to key lo + s (hi - lo) / S, so that the splits read about equal numbers of
// keys, a partial first or last tile counting by its keys. s = 0 gives the tile holding lo, s = S
// the tile past hi; a split may be empty where the tiles are fewer than the splits. (Cut into
// ceil(tiles / S) tiles each instead, a 2-token decode at 4k, 4098 keys in 65 tiles of 64, read
// 2112 keys in its first split and 1986 in its second: the kernel waited for the larger.)
ATTN_SPLIT_HD inline int split_first_tile(int lo, int hi, int S, int s, int B) {
  const int n_lo = lo / B;
  if (s <= 0 || hi <= lo) return n_lo;
  if (s >= S) return (hi + B - 1) / B;
  // The boundary key lo + s * span / S = key + f with key its floor and 0 <= f < 1, in 32-bit
  // unsigned arithmetic (a 64-bit division took the 16-bit head size 64 decode kernel from 128 to
  // 131 registers, one CTA per SM fewer); the nearest tile boundary to key + f is that of key.
  const uint32_t span = static_cast<uint32_t>(hi - lo), q = span / static_cast<uint32_t>(S), r = span % static_cast<uint32_t>(S);
  const uint32_t key = static_cast<uint32_t>(lo) + static_cast<uint32_t>(s) * q + static_cast<uint32_t>(s) * r / static_cast<uint32_t>(S);
  return static_cast<int>((key + static_cast<uint32_t>(B / 2)) / static_cast<uint32_t>(B));
}

}  // namespace attn::fa
