#pragma once
// Parameters of the FLASHINFER kernels (docs/BACKGROUND.md, "FLASHINFER"). Plain C++: no CUDA
// types, includable from host .cpp files. Every pointer is device memory.
//
// The KV cache is addressed in FlashInfer's CSR form: request r owns the pages
// indices[indptr[r] .. indptr[r + 1]), all full except the last, which holds last_page_len[r]
// keys. A work item (request, [q tile,] kv chunk) comes from the plan; blockIdx.x walks the work
// list and blockIdx.y the kv heads. LSEs are FlashInfer's: log2 of the softmax denominator
// (lse2 = lse / ln 2); the backend converts to the natural log only when it reports them.
#include <cstdint>

#include "kernels/common/fast_div.hpp"

namespace attn {

// One paged KV cache, NHD or HND, through its strides (elements of the cache dtype).
struct FiPagedKv {
  const void* k;  // page p, kv head h, slot s, dim d at p * page_stride + h * head_stride + s * slot_stride + d
  const void* v;  // same strides (FlashInfer layout: (num_pages, 2, ...), V one tensor-half after K)
  const int32_t* indptr;         // [num_reqs + 1] into indices
  const int32_t* indices;        // [indptr[num_reqs]] page ids
  const int32_t* last_page_len;  // [num_reqs] keys in the last page (1 .. page_size)
  int page_size;
  FastDivU32 page_size_div;  // page_size, for key / page_size without a division instruction
  int64_t page_stride;  // NHD: page_size * Hkv * D; HND: Hkv * page_size * D
  int64_t head_stride;  // NHD: D; HND: page_size * D
  int64_t slot_stride;  // NHD: Hkv * D; HND: D
};

// What every FlashInfer attention launch shares: inputs, output and semantics.
struct FiAttentionParams {
  const void* q;            // [num_tokens, num_qo_heads, head_dim] model dtype
  const int32_t* qo_indptr;  // [num_reqs + 1] query tokens of each request (from 0)
  FiPagedKv kv;

  // ---- the work list of the plan ----
  const int32_t* request_indices;  // [padded_work] request of each work item
  const int32_t* qo_tile_indices;  // [padded_work] q tile within its request (prefill), or nullptr
  const int32_t* kv_tile_indices;  // [padded_work] kv chunk within its request
  const int32_t* o_indptr;         // [num_reqs + 1] first partial row (decode: work item) of each request
  const int32_t* kv_chunk_pages;   // [1] pages per kv chunk (device memory: a replayed graph follows the plan)
  const int32_t* num_work;         // [1] real work items; blocks past it exit (CUDA-graph padding)

  // ---- outputs ----
  // A request served by one kv chunk writes O and LSE directly; a split request writes one
  // normalized fp32 partial row per chunk, merged afterwards by merge_attn_states (base 2):
  //   decode:  partial row = o_indptr[r] + chunk
  //   prefill: partial row = o_indptr[r] + (token - qo_indptr[r]) * num_chunks(r) + chunk
  void* o;          // [num_tokens, num_qo_heads, head_dim] model dtype, or fp32 when o_is_f32
  float* lse;       // [num_tokens, num_qo_heads] base 2, or nullptr
  float* tmp_o;     // [num_partial_rows, num_qo_heads, head_dim] fp32
  float* tmp_lse;   // [num_partial_rows, num_qo_heads] base 2
  int o_is_f32;     // cascade levels write fp32 O for the merge of the two levels

  // ---- shapes ----
  int num_qo_heads;
  int num_kv_heads;
  int cta_tile_q;  // prefill: packed rows (q tokens x group) per work item

  // ---- semantics, fixed at plan time ----
  float sm_scale;
  float logits_soft_cap;  // 0 = off, else cap * tanh(s / cap)
  int window_left;        // -1 = off, else keys >= pos - window_left
  int causal;             // query token i of a request sits at kv_len - q_len + i and sees keys <= it
  float k_scale;          // fp8 caches: value = stored * scale (host floats, FlashInfer's convention)
  float v_scale;
  int kv_fp8_e5m2;        // fp8 caches: 1 = e5m2, 0 = e4m3
};

}  // namespace attn
