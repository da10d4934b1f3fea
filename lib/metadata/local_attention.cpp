// Chunked local attention (llama4): a query at position p sees keys floor(p/C)*C .. p. Rather
// than a new mask, the batch is cut into "virtual" requests that each live inside one C-chunk,
// so an ordinary causal paged kernel computes it.
#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "core/error.hpp"
#include "metadata/common.hpp"

namespace attn {

namespace {

int cdiv(int a, int b) { return (a + b - 1) / b; }

}  // namespace

// Worked example (C = 4, block_size = 2), three requests:
//   query_len = [4, 10, 5], seq_len = [6, 17, 9]  -> context = [2, 7, 4]
//   request 0: positions 2..5  -> chunk [0,4): 2,3      chunk [4,8): 4,5
//   request 1: positions 7..16 -> [4,8): 7  [8,12): 8..11  [12,16): 12..15  [16,20): 16
//   request 2: positions 4..8  -> [4,8): 4..7           [8,12): 8
// Outputs, one entry per virtual request (8 here):
//   q_seqlens   = [2, 2, 1, 4, 4, 1, 4, 1]   query tokens of the piece
//   k_seqlens   = [4, 2, 4, 4, 4, 1, 4, 1]   keys it sees: its chunk up to its last query
//   origin_req  = [0, 0, 1, 1, 1, 1, 2, 2]
//   key start   = [0, 4, 4, 8, 12, 16, 4, 8] (absolute position of the chunk's first key)
//   metadata.query_start_loc     = [0, 2, 4, 5, 9, 13, 14, 18, 19] (the tokens do not move)
//   metadata.seq_lens            = k_seqlens
//   metadata.num_computed_tokens = k_seqlens - q_seqlens (keys before the piece's first query)
//   metadata.block_table         = [num_virtual, C / block_size]: row v = the origin request's
//       row from the block holding key start onwards, the column index clipped to the last
//       column of the original table (so rows near the end repeat that entry, never read past
//       k_seqlens). Request 1 with row [10..19] gives [12, 13], [14, 15], [16, 17], [18, 19].
//   metadata.slot_mapping, num_actual_tokens: unchanged; causal = true.
LocalAttentionBatch make_local_attention_virtual_batches(int chunk, const CommonAttentionMetadata& m,
                                                         int block_size) {
  if (chunk <= 0 || block_size <= 0 || chunk % block_size != 0)
    throw InputError(fmt::format("local attention: chunk {} must be a positive multiple of block_size {}",
                                 chunk, block_size));
  const int n = m.num_reqs;
  if (n > 0 && m.max_blocks_per_req <= 0)
    throw InputError("local attention: the block table has no columns");

  // Virtual requests of each real one: the first piece fills its chunk up to the next multiple
  // of C (or ends with the query), the rest are whole chunks but the last.
  std::vector<int> first_q(n), tail_k(n), pieces(n);
  int num_virtual = 0;
  for (int r = 0; r < n; ++r) {
    const int q = m.query_len(r);
    const int s = m.seq_lens[r];
    if (q < 1)
      throw InputError(fmt::format("local attention: request {} has query_len {}; every request needs "
                                   "at least one new token",
                                   r, q));
    first_q[r] = std::min(chunk - (s - q) % chunk, q);
    // Keys of the last piece: seq_len's offset inside its chunk, a full chunk when it ends on one.
    tail_k[r] = s % chunk == 0 ? chunk : s % chunk;
    pieces[r] = 1 + cdiv(q - first_q[r], chunk);
    num_virtual += pieces[r];
  }

  const int pages = chunk / block_size;
  const int last_col = m.max_blocks_per_req - 1;
  LocalAttentionBatch out;
  out.q_seqlens.resize(num_virtual);
  out.k_seqlens.resize(num_virtual);
  out.origin_req.resize(num_virtual);
  CommonAttentionMetadata& vm = out.metadata;
  vm.num_reqs = num_virtual;
  vm.num_actual_tokens = m.num_actual_tokens;
  vm.slot_mapping = m.slot_mapping;
  vm.causal = true;
  vm.max_blocks_per_req = pages;
  vm.query_start_loc.resize(num_virtual + 1);
  vm.query_start_loc[0] = m.query_start_loc.empty() ? 0 : m.query_start_loc[0];
  vm.seq_lens.resize(num_virtual);
  vm.num_computed_tokens.resize(num_virtual);
  vm.block_table.resize(static_cast<std::size_t>(num_virtual) * pages);

  int v = 0;
  for (int r = 0; r < n; ++r) {
    const int q = m.query_len(r);
    const int s = m.seq_lens[r];
    const int32_t* row = m.block_table.data() + static_cast<std::size_t>(r) * m.max_blocks_per_req;
    for (int j = 0; j < pieces[r]; ++j, ++v) {
      const int from_end = pieces[r] - 1 - j;  // pieces after this one
      const int ql = j == 0 ? first_q[r] : std::min(q - first_q[r] - chunk * (j - 1), chunk);
      const int kl = from_end == 0 ? tail_k[r] : chunk;
      // Absolute position of the first key of this piece's chunk.
      const int k_start = s - (from_end * chunk + tail_k[r]);
      out.q_seqlens[v] = ql;
      out.k_seqlens[v] = kl;
      out.origin_req[v] = r;
      vm.query_start_loc[v + 1] = vm.query_start_loc[v] + ql;
      vm.seq_lens[v] = kl;
      vm.num_computed_tokens[v] = kl - ql;
      vm.max_query_len = std::max(vm.max_query_len, ql);
      vm.max_seq_len = std::max(vm.max_seq_len, kl);
      const int block_start = k_start / block_size;  // k_start >= 0 since q >= 1
      int32_t* dst = vm.block_table.data() + static_cast<std::size_t>(v) * pages;
      for (int p = 0; p < pages; ++p) dst[p] = row[std::min(block_start + p, last_col)];
    }
  }
  return out;
}

}  // namespace attn
