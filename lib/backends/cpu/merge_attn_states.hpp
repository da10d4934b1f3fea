#pragma once
// Combines two partial attentions of the same queries over disjoint key sets (cascade's prefix
// and suffix passes, MLA's context chunks and new tokens) into the attention over their union.
// Per (token, head), with natural-log LSEs:
//   m = max(lse_p, lse_s), w_p = e^(lse_p - m) / (e^(lse_p - m) + e^(lse_s - m)), w_s likewise
//   o = w_p * o_p + w_s * o_s,  lse = m + log(e^(lse_p - m) + e^(lse_s - m))
// A side that saw no key has lse = -inf and weight 0; when both are empty, o = 0, lse = -inf.
#include <cstdint>

namespace attn::cpu {

struct MergeAttnStatesParams {
  float* out;               // [num_tokens, num_heads, head_size]
  float* out_lse;           // [num_tokens, num_heads] or null
  const float* prefix_o;    // [num_tokens, num_heads, head_size]
  const float* prefix_lse;  // [num_tokens, num_heads]
  const float* suffix_o;    // [num_tokens, num_heads, head_size]
  const float* suffix_lse;  // [num_tokens, num_heads]
  int64_t num_tokens = 0;
  int num_heads = 0;
  int head_size = 0;
  int threads = 0;          // 0 = default_threads(); 1 = on the calling thread
};

// `out` may alias either input (each element is read before it is written), and `out_lse`
// either input LSE.
void merge_attn_states(const MergeAttnStatesParams& p);

}  // namespace attn::cpu
