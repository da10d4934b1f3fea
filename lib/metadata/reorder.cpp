// Decode/prefill ordering: backends with separate decode and prefill kernels want the decodes
// at the front, so one contiguous token range goes to each kernel.
#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "metadata/common.hpp"

namespace attn {

std::vector<int> reorder_batch_to_split_decodes_and_prefills(std::span<const int32_t> query_lens,
                                                             int decode_threshold) {
  const int n = static_cast<int>(query_lens.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);

  // Ascending positions of each kind.
  std::vector<int> decodes, prefills;
  decodes.reserve(n);
  prefills.reserve(n);
  for (int i = 0; i < n; ++i) (query_lens[i] <= decode_threshold ? decodes : prefills).push_back(i);
  const int num_decodes = static_cast<int>(decodes.size());
  const int num_prefills = static_cast<int>(prefills.size());

  // The first num_decodes slots must end up holding decodes. Take decodes from the back (the
  // last one first) and swap each with the frontmost remaining prefill; stop at the first decode
  // already inside the front region: every prefill still in front has then been moved. Each
  // swap fixes one misplaced request of each kind, so no order needs fewer swaps, and requests
  // that are already in place (a serving engine's long-running decodes) never move.
  for (int i = 1; i <= std::min(num_decodes, num_prefills); ++i) {
    const int decode_idx = decodes[num_decodes - i];
    if (decode_idx < num_decodes) break;
    std::swap(order[prefills[i - 1]], order[decode_idx]);
  }
  return order;
}

DecodePrefillSplit split_decodes_and_prefills(const CommonAttentionMetadata& m, int decode_threshold) {
  DecodePrefillSplit s;
  const int n = m.num_reqs;
  if (static_cast<int>(m.query_start_loc.size()) != n + 1)
    throw InputError(fmt::format("split_decodes_and_prefills: query_start_loc has {} entries for {} requests",
                                 m.query_start_loc.size(), n));
  const int64_t num_tokens = m.num_actual_tokens;

  // Fast path: nothing longer than the threshold, everything is a decode.
  if (m.max_query_len <= decode_threshold) {
    s.num_decodes = n;
    s.num_decode_tokens = num_tokens;
    return s;
  }
  // Boundary = the first request longer than the threshold. Requests before it are decodes;
  // every request from it on counts as a prefill, even a short one that was not reordered
  // (a prefill kernel handles any query length, the reverse is not true). So a batch whose
  // first request is a prefill is all prefills.
  int first_prefill = n;
  for (int r = 0; r < n; ++r) {
    if (m.query_len(r) > decode_threshold) {
      first_prefill = r;
      break;
    }
  }
  s.num_decodes = first_prefill;
  s.num_prefills = n - first_prefill;
  s.num_decode_tokens = m.query_start_loc[first_prefill];
  s.num_prefill_tokens = num_tokens - s.num_decode_tokens;
  return s;
}

}  // namespace attn
