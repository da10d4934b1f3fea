#pragma once
// FLASHINFER host side (docs/BACKGROUND.md, "FLASHINFER"): vLLM's metadata builder (decodes
// first, the block table in CSR form) and FlashInfer's plan-time split-KV scheduler for the
// decode and the prefill wrappers. Plain C++, no CUDA: run() consumes these arrays as they are.
#include <cstdint>
#include <vector>

#include "metadata/common.hpp"

namespace attn::flashinfer {

// The paged KV cache of a batch part in FlashInfer's CSR form.
struct PagedKvCsr {
  std::vector<int32_t> qo_indptr;               // [num_reqs + 1] query tokens, rebased to 0
  std::vector<int32_t> paged_kv_indptr;         // [num_reqs + 1] into paged_kv_indices
  std::vector<int32_t> paged_kv_indices;        // [paged_kv_indptr.back()] page ids, request by request
  std::vector<int32_t> paged_kv_last_page_len;  // [num_reqs] seq_len % page_size, or page_size when 0
  int num_reqs() const { return static_cast<int>(qo_indptr.size()) - 1; }
  int num_pages(int r) const { return paged_kv_indptr[static_cast<size_t>(r) + 1] - paged_kv_indptr[static_cast<size_t>(r)]; }
  // Keys of request r: full pages plus the last one's length.
  int kv_len(int r, int page_size) const {
    const int n = num_pages(r);
    return n == 0 ? 0 : (n - 1) * page_size + paged_kv_last_page_len[static_cast<size_t>(r)];
  }
};

// vLLM's FlashInferMetadataBuilder: `m` already reordered decodes-first; the decodes
// [0, num_decodes) and the prefills after them get separate CSR arrays (each qo_indptr from 0).
// skip_prefix_pages > 0 drops that many leading pages of every request (cascade level 1: the
// shared prefix is served by level 0).
struct FlashInferMetadata {
  DecodePrefillSplit split;
  PagedKvCsr decode, prefill;
};
FlashInferMetadata build_flashinfer_metadata(const CommonAttentionMetadata& m, int page_size,
                                             int skip_prefix_pages = 0);
PagedKvCsr paged_kv_csr(const CommonAttentionMetadata& m, int first_req, int end_req, int page_size,
                        int skip_prefix_pages = 0);

// ---- split-KV scheduling (plan) -------------------------------------------------------------

// Decode: one CTA per (work item, kv head); a work item is (request, kv chunk of chunk_pages).
struct DecodePlan {
  bool split_kv = false;
  int chunk_pages = 0;                  // pages per kv chunk (the whole request when not split)
  std::vector<int32_t> request_indices;  // [num_work] request of each work item
  std::vector<int32_t> kv_tile_indices;  // [num_work] chunk index within its request
  std::vector<int32_t> o_indptr;         // [num_reqs + 1] first work item of each request (merge)
  int padded_work = 0;                   // CUDA graphs: work items launched (>= num_work); the rest are masked
  int num_work() const { return static_cast<int>(request_indices.size()); }
};
// max_grid = occupancy x SMs (CTAs resident at once). No split when num_reqs x Hkv fills it;
// else the smallest chunk (>= max(128 / page_size, 1) pages) whose chunk count x Hkv fits
// max_grid, found by binary search. padded_batch > 0 (CUDA graphs): the plan is sized for that
// many requests, always split-capable, and pads the work list.
DecodePlan plan_decode(const PagedKvCsr& csr, int num_kv_heads, int page_size, int max_grid, int padded_batch = 0);

// Prefill: work items (request, q tile of cta_tile_q packed rows, kv chunk of chunk_pages).
struct PrefillPlan {
  int cta_tile_q = 0;   // 16, 64 or 128 packed rows (q tokens x GQA group)
  bool split_kv = false;
  int chunk_pages = 0;
  std::vector<int32_t> request_indices;  // [num_work]
  std::vector<int32_t> qo_tile_indices;  // [num_work]
  std::vector<int32_t> kv_tile_indices;  // [num_work]
  std::vector<int32_t> merge_indptr;     // [num_tokens + 1] query token t merges partial rows [merge_indptr[t], merge_indptr[t + 1])
  std::vector<int32_t> o_indptr;         // [num_reqs + 1] first partial row of each request
  int num_work() const { return static_cast<int>(request_indices.size()); }
};
// FlashInfer's FA2 tile rule: 128 if the mean packed q length > 64 (and head_dim < 256), 64 if
// > 16, else 16.
int prefill_cta_tile_q(double mean_packed_qo_len, int head_dim);
// max_work = (2 x SMs) / Hkv work items at most, the kv chunk found by binary search.
PrefillPlan plan_prefill(const PagedKvCsr& csr, int num_qo_heads, int num_kv_heads, int head_dim, int page_size,
                         int num_sms);

// ---- plan-time hyper-parameters ---------------------------------------------------------------
// FlashInfer fixes the window, the soft cap and the softmax scale in plan() (vLLM's
// infer_global_hyperparameters: one value for every layer); run() on a layer whose values
// differ is an error naming both, never a silently different result.
struct PlanHyperparameters {
  int window_left = -1;       // sliding_window - 1, or -1 (off)
  float logits_soft_cap = 0;  // 0 = off
  float sm_scale = 0;
};
PlanHyperparameters hyperparameters_of(const AttentionSpec& spec);
// Throws InputError when `layer` differs from what was planned.
void check_hyperparameters(const PlanHyperparameters& planned, const PlanHyperparameters& layer);

}  // namespace attn::flashinfer
