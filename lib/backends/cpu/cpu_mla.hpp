#pragma once
// Multi-head Latent Attention on the host over a flashmla-format cache
// (num_blocks, block_size, 576 = kv_c 512 ‖ k_pe 64).
//
// Decodes (query_len 1) absorb W_UK into the query, q' = [q_nope · W_UK[h]^T (512) ‖ q_pe (64)],
// run a 576-wide MQA over the latent cache (values = the first 512) and apply W_UV to the
// latent output. Prefills run plain MHA (qk 192, v 128): the new tokens attend causally to
// themselves, and the cached context is processed in chunks (gather latents through the block
// table, up-project, non-causal pass returning LSE) merged with merge_attn_states, as vLLM's
// chunked-context MLA prefill does.
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_attention.hpp"
#include "model/spec.hpp"

namespace attn::cpu {

struct MlaParams {
  const void* q = nullptr;      // [num_tokens, num_heads, qk_nope + qk_rope] in dtype
  DType dtype = DType::bf16;
  const float* w_uk = nullptr;  // [num_heads, kv_lora_rank, qk_nope_head_dim]
  const float* w_uv = nullptr;  // [num_heads, kv_lora_rank, v_head_dim]
  const void* cache = nullptr;  // flashmla format, laid out by *layout
  const KvCacheLayout* layout = nullptr;
  float kv_scale = 1.0f;        // fp8 caches: latent = stored * kv_scale

  const int32_t* query_start_loc = nullptr;  // [num_reqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_reqs]
  const int32_t* block_table = nullptr;      // [num_reqs, max_blocks_per_req]
  int num_reqs = 0;
  int max_blocks_per_req = 0;

  int num_heads = 0;
  MlaDims dims;
  float scale = 1.0f;
  float soft_cap = 0.0f;
  const float* sinks = nullptr;  // [num_heads] or null

  float* o = nullptr;    // [num_tokens, num_heads, v_head_dim]
  float* lse = nullptr;  // [num_tokens, num_heads]
  int threads = 0;
};

// The host schedule of one batch and the scratch the run writes into.
struct MlaPlan {
  // Decodes, compacted: decode i is request decode_reqs[i] and owns compacted token i.
  std::vector<int32_t> decode_reqs;         // [num_decodes]
  std::vector<int32_t> decode_query_start;  // [num_decodes + 1]
  std::vector<int32_t> decode_seq_lens;     // [num_decodes]
  std::vector<int32_t> decode_block_table;  // [num_decodes, max_blocks_per_req]
  std::vector<PagedWorkItem> decode_work;

  // Prefills: prefill i is request prefill_reqs[i]; its tokens are the compacted prefill rows
  // prefill_rows[i] .. prefill_rows[i + 1].
  std::vector<int32_t> prefill_reqs;  // [num_prefills]
  std::vector<int32_t> prefill_rows;  // [num_prefills + 1]
  int context_chunk = 0;              // context tokens per chunk (a multiple of block_size)
  int num_context_chunks = 0;         // over the whole batch; a short context has empty chunks

  std::vector<float> q_absorbed;  // [num_decode_tokens, num_heads, 576]
  std::vector<float> o_latent;    // [num_decode_tokens, num_heads, 512]
  std::vector<float> lse_decode;  // [num_decode_tokens, num_heads]
  std::vector<float> o_ctx;       // [num_prefill_tokens, num_heads, v_head_dim] merged context
  std::vector<float> lse_ctx;     // [num_prefill_tokens, num_heads]
  std::vector<float> o_chunk;     // [num_prefill_tokens, num_heads, v_head_dim] one chunk
  std::vector<float> lse_chunk;   // [num_prefill_tokens, num_heads]
};

// Requests with query_len 1 are decodes, longer ones prefills. The context chunk follows vLLM: the workspace
// (in tokens) is shared by the prefills that have context, rounded down to whole blocks.
MlaPlan plan_mla(const int32_t* query_start_loc /*[num_reqs + 1]*/, const int32_t* seq_lens /*[num_reqs]*/,
                 const int32_t* block_table /*[num_reqs, max_blocks_per_req]*/, int num_reqs, int max_blocks_per_req,
                 int num_heads, const MlaDims& dims, int block_size, int workspace_tokens);

void mla_attention(const MlaParams& p, MlaPlan& plan);

}  // namespace attn::cpu
