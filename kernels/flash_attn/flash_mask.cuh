#pragma once
// Which keys a query row, and a tile of packed query rows, may see: the one statement of the
// mask semantics (docs/DESIGN.md) that every FLASH_ATTN kernel uses. Causal rows at absolute
// position pos see keys up to pos; a window w also needs key > pos - w; a local chunk C limits
// keys to [floor(pos / C) * C, pos]; kv_begin (cascade suffix pass) drops the shared prefix.
#include <cmath>

#include "kernels/flash_attn/flash_attn_params.hpp"

namespace attn::fa {

// Keys [lo, hi] visible to the query at absolute position pos. kv_lo is the tile's lowest key
// (TileKeys::kv_lo), which already holds kv_begin.
struct RowKeys {
  int lo, hi;
};
__device__ __forceinline__ RowKeys row_visible_keys(const FlashAttnParams& p, int kv_lo, int seq_len, int pos) {
  const int lo = max(kv_lo, p.window > 0 ? pos - p.window + 1 : 0);
  return {p.local_chunk > 0 ? max(lo, (pos / p.local_chunk) * p.local_chunk) : lo,
          p.causal ? min(seq_len - 1, pos) : seq_len - 1};
}

// Mask only (no soft cap, no ALiBi): the raw scores of one row of an m16n8 accumulator tile,
// s[4 j + 2 h + e] for key key0 + 8 j + 2 tq + e (h: row g or g + 8), set to -inf outside
// [vis.lo, vis.hi]. Kept apart from the general score loop, whose unrolled soft-cap and ALiBi
// branches missed the instruction cache on every causal diagonal tile (PERF_NOTES Version 11).
template <int kN8>
__device__ __forceinline__ void mask_row_scores(float* s, int h, RowKeys vis, int key0, int tq) {
  const int lo = vis.lo - key0 - 2 * tq, hi = vis.hi - key0 - 2 * tq;
#pragma unroll
  for (int j = 0; j < kN8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (j * 8 + e < lo || j * 8 + e > hi) s[4 * j + 2 * h + e] = -INFINITY;
}

// The keys of a tile of kBlockM packed rows (row r = token r / G of the sequence), this split's
// share of its key tiles, and the key tiles that every row of the tile sees in full.
struct TileKeys {
  int kv_lo;                   // lowest key any row may see (kv_begin, window, local chunk)
  int n_begin, n_end;          // this split's key tiles [n_begin, n_end)
  int n_plain_lo, n_plain_hi;  // key tiles [n_plain_lo, n_plain_hi) need no mask
};
// by_group(n) and by_splits(n): n / G and n / p.num_splits for n >= 0 (a caller's multiply-highs,
// kernels/common/fast_div.hpp, where the divisions by run-time values took ~100 of the ~140
// instructions that each warp spends here per work item: ncu, 8 x 1k).
template <int kBlockM, int kBlockN, class ByGroup, class BySplits>
__device__ __forceinline__ TileKeys tile_keys(const FlashAttnParams& p, int q_len, int seq_len, int row0,
                                              ByGroup by_group, BySplits by_splits, int split) {
  const int pos_base = seq_len - q_len;  // absolute position of query token 0
  const int pos_first = pos_base + by_group(max(row0, 0));  // row0 < 0: rows_from_end's first tile
  const int pos_last = pos_base + min(q_len - 1, by_group(row0 + kBlockM - 1));

  TileKeys t;
  // Union over the tile's rows, then this split's share of the key tiles.
  t.kv_lo = p.kv_begin;
  int kv_hi = seq_len;
  if (p.causal) kv_hi = min(kv_hi, pos_last + 1);
  if (p.window > 0) t.kv_lo = max(t.kv_lo, pos_first - p.window + 1);
  if (p.local_chunk > 0) t.kv_lo = max(t.kv_lo, (pos_first / p.local_chunk) * p.local_chunk);
  const int n_lo = max(t.kv_lo, 0) / kBlockN;
  const int n_hi = kv_hi > t.kv_lo ? (kv_hi + kBlockN - 1) / kBlockN : n_lo;
  const int per_split = by_splits(n_hi - n_lo + p.num_splits - 1);
  t.n_begin = min(n_hi, n_lo + split * per_split);
  t.n_end = min(n_hi, t.n_begin + per_split);
  // Intersection over the tile's rows: key tiles inside it need no per-element mask.
  int lo_key = max(t.kv_lo, 0);
  if (p.window > 0) lo_key = max(lo_key, pos_last - p.window + 1);
  if (p.local_chunk > 0) lo_key = max(lo_key, (pos_last / p.local_chunk) * p.local_chunk);
  t.n_plain_lo = (lo_key + kBlockN - 1) / kBlockN;
  t.n_plain_hi = p.causal ? min(seq_len, pos_first + 1) / kBlockN : seq_len / kBlockN;
  return t;
}

}  // namespace attn::fa
