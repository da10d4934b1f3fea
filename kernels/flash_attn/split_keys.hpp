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
  const int n_hi = (hi + B - 1) / B;
  if (s >= S) return n_hi;
  // S x the boundary key, then to the nearest multiple of S x B.
  const int64_t x = static_cast<int64_t>(S) * lo + static_cast<int64_t>(s) * (hi - lo);
  const int n = static_cast<int>((x + static_cast<int64_t>(S) * B / 2) / (static_cast<int64_t>(S) * B));
  return n < n_lo ? n_lo : n > n_hi ? n_hi : n;
}

}  // namespace attn::fa
