#pragma once
// Paged attention on the host with FlashAttention varlen semantics: every request's queries
// attend to its keys 0 .. seq_len-1, read only through its block-table row and the paged
// cache (a cache slot at or past seq_len is never read: page tails hold NaN).
//
// Query token i of request r sits at position seq_len - query_len + i. A cascade suffix pass
// or a local-attention virtual request passes shifted seq_lens and block-table rows; positions
// then live in that shifted frame, which leaves causal masks, windows and ALiBi distances
// unchanged.
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "model/kv_cache.hpp"

namespace attn::cpu {

// One unit of parallel work: a tile of a request's query tokens against one kv head. Its rows
// are (token, q head of the kv head's group), token-major.
struct PagedWorkItem {
  int32_t req = 0;          // row of seq_lens / block_table
  int32_t kv_head = 0;
  int32_t token_begin = 0;  // [token_begin, token_end): rows of q / o
  int32_t token_end = 0;
};

struct PagedAttentionParams {
  const void* q = nullptr;            // [num_tokens, num_q_heads, head_size_qk] in q_dtype
  DType q_dtype = DType::f32;
  const void* cache = nullptr;        // paged K/V, laid out by *layout (any of the three formats)
  const KvCacheLayout* layout = nullptr;
  float k_scale = 1.0f;               // fp8 dequantization: k = stored * k_scale
  float v_scale = 1.0f;

  const int32_t* query_start_loc = nullptr;  // [num_reqs + 1] token offsets into q / o
  const int32_t* seq_lens = nullptr;         // [num_reqs] keys of each request
  const int32_t* block_table = nullptr;      // [num_reqs, max_blocks_per_req] physical block ids
  int num_reqs = 0;
  int max_blocks_per_req = 0;

  int num_q_heads = 0;
  int num_kv_heads = 0;  // q head h reads kv head h / (num_q_heads / num_kv_heads)
  int head_size_qk = 0;
  int head_size_v = 0;
  float scale = 1.0f;    // softmax scale on q . k
  bool causal = true;
  int window = 0;        // > 0 and causal: key > pos - window
  float soft_cap = 0.0f; // > 0: logit = cap * tanh(logit / cap)
  const float* alibi_slopes = nullptr;  // [num_q_heads] or null: logit -= slope * |pos - key|
  const float* sinks = nullptr;         // [num_q_heads] or null: extra logit in the denominator

  float* o = nullptr;    // [num_tokens, num_q_heads, head_size_v]
  float* lse = nullptr;  // [num_tokens, num_q_heads] natural log; -inf (or the sink) with no key

  const PagedWorkItem* work = nullptr;  // [num_work] from plan_paged_attention
  int64_t num_work = 0;
  int threads = 0;                      // 0 = default_threads()
};

// Splits every request into (query tile, kv head) items of about `rows_per_item` rows.
std::vector<PagedWorkItem> plan_paged_attention(const int32_t* query_start_loc /*[num_reqs + 1]*/, int num_reqs,
                                                int num_q_heads, int num_kv_heads, int rows_per_item = 64);

// Writes o and lse of every token covered by the work items.
void paged_attention(const PagedAttentionParams& p);

}  // namespace attn::cpu
