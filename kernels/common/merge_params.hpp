#pragma once
// Parameters of merge_attn_states, the LSE merge shared by every backend (cascade prefix +
// suffix, split-KV chunks). Plain C++: includable from host .cpp files; pointers are device memory.
#include <cstdint>

namespace attn {

// Merges num_partials partial attention states per (token, head) by their LSE (cascade prefix +
// suffix, split-KV chunks). A partial with LSE = -inf contributes nothing; if all are -inf the
// row has no visible key: O = 0, LSE = -inf.
//
// Ragged partials (FlashMLA's combine): with seq_partials set, the tokens form sequences of
// tokens_per_seq tokens, sequence s owns partial slots seq_partials[s] .. seq_partials[s + 1] - 1
// and a slot holds that sequence's tokens only:
//   o_partial   [seq_partials[num_seqs], tokens_per_seq, num_heads, head_size]
//   lse_partial [seq_partials[num_seqs], tokens_per_seq, num_heads]
// A sequence with a single slot is skipped: its kernel wrote O and LSE directly (and so is one of
// at most merged_upto slots, which its kernel merged itself). num_partials
// is then unused; the counts are read on the device, so a captured graph follows new schedules.
struct MergeAttnParams {
  const float* o_partial;    // [num_partials, num_tokens, num_heads, head_size] (or ragged, above)
  const float* lse_partial;  // [num_partials, num_tokens, num_heads] (or ragged, above)
  void* o;                   // [num_tokens, num_heads, head_size] model dtype
  float* lse;                // lse[token * lse_token_stride + head * lse_head_stride], or nullptr
  int64_t lse_token_stride;
  int64_t lse_head_stride;
  int num_partials;
  int num_tokens;
  int num_heads;
  int head_size;
  const int32_t* seq_partials = nullptr;  // [num_tokens / tokens_per_seq + 1] prefix sums, or nullptr
  int tokens_per_seq = 1;
  // Ragged: sequences of at most this many slots were merged by the kernel that wrote them (it
  // also wrote their O and LSE), so the merge skips them (1: only single slots, written directly).
  int merged_upto = 1;
  // FlashInfer's convention: every LSE, in and out, is log2 of the sum (lse2 = lse / ln 2).
  int lse_base2 = 0;
};

// The usual merge: partial states [num_partials or ragged, num_tokens, num_heads, head_size] into
// O [num_tokens, num_heads, head_size] and LSE [num_tokens, num_heads] (row-major, may be null).
inline MergeAttnParams merge_params(const float* o_partial, const float* lse_partial, void* o, float* lse,
                                    int num_partials, int num_tokens, int num_heads, int head_size) {
  MergeAttnParams mp{};
  mp.o_partial = o_partial;
  mp.lse_partial = lse_partial;
  mp.o = o;
  mp.lse = lse;
  mp.lse_token_stride = num_heads;
  mp.lse_head_stride = 1;
  mp.num_partials = num_partials;
  mp.num_tokens = num_tokens;
  mp.num_heads = num_heads;
  mp.head_size = head_size;
  return mp;
}

}  // namespace attn
