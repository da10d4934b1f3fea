#pragma once
// Parameters of merge_attn_states, the LSE merge shared by every backend (cascade prefix +
// suffix, split-KV chunks). Plain C++: includable from host .cpp files; pointers are device memory.
#include <cstdint>

namespace attn {

// Merges num_partials partial attention states per (token, head) by their LSE (cascade prefix +
// suffix, split-KV chunks). A partial with LSE = -inf contributes nothing; if all are -inf the
// row has no visible key: O = 0, LSE = -inf.
struct MergeAttnParams {
  const float* o_partial;    // [num_partials, num_tokens, num_heads, head_size]
  const float* lse_partial;  // [num_partials, num_tokens, num_heads]
  void* o;                   // [num_tokens, num_heads, head_size] model dtype
  float* lse;                // lse[token * lse_token_stride + head * lse_head_stride], or nullptr
  int64_t lse_token_stride;
  int64_t lse_head_stride;
  int num_partials;
  int num_tokens;
  int num_heads;
  int head_size;
};

}  // namespace attn
