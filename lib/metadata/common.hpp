#pragma once
// vLLM v1's CommonAttentionMetadata and the helpers every metadata builder uses
// (docs/BACKGROUND.md, "Paged KV cache and batch metadata").
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/batch.hpp"

namespace attn {

struct CommonAttentionMetadata {
  std::vector<int32_t> query_start_loc;      // [num_reqs + 1]
  std::vector<int32_t> seq_lens;             // [num_reqs] context + new tokens
  std::vector<int32_t> num_computed_tokens;  // [num_reqs] context tokens
  int num_reqs = 0;
  int64_t num_actual_tokens = 0;
  int max_query_len = 0;
  int max_seq_len = 0;
  std::vector<int32_t> block_table;  // [num_reqs, max_blocks_per_req]
  int max_blocks_per_req = 0;
  std::vector<int64_t> slot_mapping;  // [num_actual_tokens]
  bool causal = true;

  int query_len(int r) const { return query_start_loc[r + 1] - query_start_loc[r]; }
};

CommonAttentionMetadata build_common_metadata(const Batch& b);

// ---- decode/prefill split -------------------------------------------------------------------
struct DecodePrefillSplit {
  int num_decodes = 0;
  int num_prefills = 0;
  int64_t num_decode_tokens = 0;
  int64_t num_prefill_tokens = 0;
};

// vLLM's reorder: requests with query_len <= threshold are decodes and move to the front with
// the fewest swaps. Returns the new order as old request indices (identity if nothing moved).
std::vector<int> reorder_batch_to_split_decodes_and_prefills(std::span<const int32_t> query_lens,
                                                             int decode_threshold = 1);
// Applies a request permutation (new index -> old index) to the metadata (tokens move with
// their request; slot mapping and block table rows follow).
CommonAttentionMetadata permute_requests(const CommonAttentionMetadata& m, std::span<const int> order);
// Assumes decodes first (after the reorder). Like vLLM, a batch whose first request is not a
// decode is all prefills, and one with max_query_len <= threshold is all decodes.
DecodePrefillSplit split_decodes_and_prefills(const CommonAttentionMetadata& m, int decode_threshold = 1);

// ---- chunked local attention (llama4) --------------------------------------------------------
// Cuts every request into virtual requests that never cross a multiple of `chunk`; each sees
// keys only from the start of its own chunk. chunk % block_size == 0.
struct LocalAttentionBatch {
  CommonAttentionMetadata metadata;   // over virtual requests (same tokens, same slot mapping)
  std::vector<int32_t> q_seqlens;     // [num_virtual] query tokens of each virtual request
  std::vector<int32_t> k_seqlens;     // [num_virtual] keys it sees
  std::vector<int32_t> origin_req;    // [num_virtual] the real request it came from
};
LocalAttentionBatch make_local_attention_virtual_batches(int chunk, const CommonAttentionMetadata& m,
                                                         int block_size);

// ---- cascade ----------------------------------------------------------------------------------
// Shared prefix usable by cascade: whole shared blocks, capped at min(num_computed_tokens),
// rounded down to whole blocks.
int common_prefix_len(const Batch& b, const CommonAttentionMetadata& m);

struct CascadeDecision {
  bool use = false;
  std::string reason;  // why (for `describe` and the results row)
};
// vLLM's use_cascade_attention rule (BACKGROUND.md).
CascadeDecision use_cascade_attention(int common_prefix_len, std::span<const int32_t> query_lens,
                                      int num_q_heads, int num_kv_heads, bool use_alibi,
                                      bool use_sliding_window, bool use_local_attention, int num_sms);

// A backend's cascade choice for batch b: off by option, impossible (no shared prefix,
// non-causal, ALiBi, sliding window, local attention), forced on by option, or vLLM's rule.
struct CascadeChoice {
  bool use = false;
  int prefix_len = 0;  // shared tokens served by the prefix pass (whole blocks), when used
  std::string reason;
};
CascadeChoice choose_cascade(const Batch& b, const CommonAttentionMetadata& m, CascadeMode mode, int num_sms);

}  // namespace attn
