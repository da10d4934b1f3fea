// CommonAttentionMetadata from a Batch, and request permutations of it.
#include "metadata/common.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

CommonAttentionMetadata build_common_metadata(const Batch& b) {
  const int num_reqs = b.num_reqs();
  CommonAttentionMetadata m;
  m.num_reqs = num_reqs;
  m.causal = b.spec.causal();

  // query_start_loc: the batch's own when it has one (make_batch always does), else derived
  // from the request shapes. Either way it must agree with them: every backend trusts it.
  if (b.query_start_loc.empty()) {
    m.query_start_loc.resize(num_reqs + 1);
    m.query_start_loc[0] = 0;
    for (int r = 0; r < num_reqs; ++r)
      m.query_start_loc[r + 1] = m.query_start_loc[r] + b.requests[r].query_len;
  } else {
    if (b.query_start_loc.size() != static_cast<std::size_t>(num_reqs) + 1)
      throw InputError(fmt::format("batch '{}': query_start_loc has {} entries, expected num_reqs + 1 = {}",
                                   b.label, b.query_start_loc.size(), num_reqs + 1));
    for (int r = 0; r < num_reqs; ++r) {
      if (b.query_start_loc[r + 1] - b.query_start_loc[r] != b.requests[r].query_len)
        throw InputError(fmt::format(
            "batch '{}': request {} has query_len {} but query_start_loc spans {} tokens", b.label, r,
            b.requests[r].query_len, b.query_start_loc[r + 1] - b.query_start_loc[r]));
    }
    m.query_start_loc = b.query_start_loc;
  }
  m.num_actual_tokens = m.query_start_loc.back();

  m.seq_lens.resize(num_reqs);
  m.num_computed_tokens.resize(num_reqs);
  for (int r = 0; r < num_reqs; ++r) {
    const RequestShape& rq = b.requests[r];
    m.seq_lens[r] = rq.seq_len();
    m.num_computed_tokens[r] = rq.context_len;
    m.max_query_len = std::max(m.max_query_len, static_cast<int>(rq.query_len));
    m.max_seq_len = std::max(m.max_seq_len, static_cast<int>(rq.seq_len()));
  }

  if (b.block_table.size() != static_cast<std::size_t>(num_reqs) * b.max_blocks_per_req)
    throw InputError(fmt::format("batch '{}': block_table has {} entries, expected {} x {}", b.label,
                                 b.block_table.size(), num_reqs, b.max_blocks_per_req));
  if (static_cast<int64_t>(b.slot_mapping.size()) < m.num_actual_tokens)
    throw InputError(fmt::format("batch '{}': slot_mapping has {} entries for {} tokens", b.label,
                                 b.slot_mapping.size(), m.num_actual_tokens));
  m.block_table = b.block_table;
  m.max_blocks_per_req = b.max_blocks_per_req;
  m.slot_mapping = b.slot_mapping;
  return m;
}

CommonAttentionMetadata permute_requests(const CommonAttentionMetadata& m, std::span<const int> order) {
  const int n = m.num_reqs;
  if (order.size() != static_cast<std::size_t>(n))
    throw InputError(fmt::format("permute_requests: order has {} entries for {} requests", order.size(), n));
  std::vector<char> seen(n, 0);
  for (int r = 0; r < n; ++r) {
    const int old = order[r];
    if (old < 0 || old >= n || seen[old])
      throw InputError(fmt::format("permute_requests: order[{}] = {} is out of range or repeated; the order "
                                   "must be a permutation of 0..{}",
                                   r, old, n - 1));
    seen[old] = 1;
  }

  CommonAttentionMetadata out;
  out.num_reqs = n;
  out.num_actual_tokens = m.num_actual_tokens;
  out.max_query_len = m.max_query_len;
  out.max_seq_len = m.max_seq_len;
  out.max_blocks_per_req = m.max_blocks_per_req;
  out.causal = m.causal;
  out.query_start_loc.resize(n + 1);
  out.seq_lens.resize(n);
  out.num_computed_tokens.resize(n);
  // The two large arrays are filled front to back, so they are appended to rather than
  // zero-filled first (the block table can be megabytes at long contexts).
  out.block_table.reserve(m.block_table.size());
  out.slot_mapping.reserve(m.slot_mapping.size());

  const std::ptrdiff_t width = m.max_blocks_per_req;
  out.query_start_loc[0] = 0;
  for (int r = 0; r < n; ++r) {
    const int old = order[r];
    const int32_t begin = m.query_start_loc[old];
    const int32_t end = m.query_start_loc[old + 1];
    out.query_start_loc[r + 1] = out.query_start_loc[r] + (end - begin);
    out.seq_lens[r] = m.seq_lens[old];
    out.num_computed_tokens[r] = m.num_computed_tokens[old];
    // The old request's slot segment [begin, end) lands at [query_start_loc[r], ...).
    out.slot_mapping.insert(out.slot_mapping.end(), m.slot_mapping.begin() + begin, m.slot_mapping.begin() + end);
    const auto row = m.block_table.begin() + old * width;
    out.block_table.insert(out.block_table.end(), row, row + width);
  }
  // Entries past the last request's tokens (padding, if any) keep their place.
  out.slot_mapping.insert(out.slot_mapping.end(), m.slot_mapping.begin() + out.query_start_loc[n],
                          m.slot_mapping.end());
  return out;
}

}  // namespace attn
