#pragma once
// A scheduler partition as the sm_90a decode kernels walk it (flashmla_decode_sm90.cuh,
// flashmla_decode_sm90_narrow.cuh): get_mla_metadata's row of tile_scheduler_metadata, and each of
// its requests as one piece, a key range that starts on a cache block (the scheduler cuts at
// blocks) and ends at the partition's end_token or the request's seq_len. The producer and the
// consumers of a CTA walk the same pieces.
#include "kernels/flashmla/flashmla_params.hpp"

namespace attn::mla {

struct MlaPartition {
  int begin_req, begin_token, end_req, end_token, begin_split;
};

// Row `part` of p.tile_scheduler_metadata: {begin_req, begin_token, end_req, end_token, begin_split}.
__device__ __forceinline__ MlaPartition mla_partition(const FlashMlaDecodeParams& p, int part) {
  const int32_t* md = p.tile_scheduler_metadata + part * 8;
  return {md[0], md[1], md[2], md[3], md[4]};
}

struct MlaPiece {
  int kbegin, kend;    // the request's keys in this partition
  int n_begin, n_end;  // their cache blocks of kBlockN keys; n_end == n_begin when there is no key
  int seq_len;         // the request's keys in all
  int split;           // the piece's index among the request's pieces
  int split_base;      // p.num_splits[req]: the request's first partial slot
  bool no_split;       // the request is this one piece: O and LSE are written directly
};

// Request req's piece of the partition (begin_req <= req <= end_req).
template <int kBlockN>
__device__ __forceinline__ MlaPiece mla_piece(const FlashMlaDecodeParams& p, const MlaPartition& part, int req) {
  MlaPiece s;
  s.seq_len = p.seq_lens[req];
  s.kbegin = req == part.begin_req ? part.begin_token : 0;
  s.kend = req == part.end_req ? part.end_token : s.seq_len;
  s.n_begin = s.kbegin / kBlockN;
  s.n_end = s.kend > s.kbegin ? (s.kend + kBlockN - 1) / kBlockN : s.n_begin;
  s.split = req == part.begin_req ? part.begin_split : 0;
  s.split_base = p.num_splits[req];
  s.no_split = p.num_splits[req + 1] - s.split_base == 1;
  return s;
}

}  // namespace attn::mla
