#include "backends/flashinfer/fi_plan.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn::flashinfer {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void require_positive(const char* what, int v) {
  if (v <= 0) throw InputError(std::string("flashinfer plan: ") + what + " must be positive (got " + std::to_string(v) + ")");
}

// The smallest chunk (in pages, >= min_chunk) for which sum_i tiles_i * ceil(max(pages_i, 1) / chunk)
// stays within max_work: FlashInfer's binary search over the chunk size.
int64_t min_chunk_that_fits(const std::vector<int64_t>& tiles, const std::vector<int64_t>& pages, int64_t min_chunk,
                            int64_t max_work) {
  int64_t low = min_chunk, high = min_chunk;
  for (int64_t p : pages) high = std::max(high, p);
  auto work = [&](int64_t chunk) {
    int64_t w = 0;
    for (size_t i = 0; i < pages.size(); ++i) w += tiles[i] * ceil_div(std::max<int64_t>(pages[i], 1), chunk);
    return w;
  };
  while (low < high) {
    const int64_t mid = (low + high) / 2;
    if (work(mid) > max_work) low = mid + 1; else high = mid;
  }
  return low;
}

}  // namespace

PagedKvCsr paged_kv_csr(const CommonAttentionMetadata& m, int first_req, int end_req, int page_size,
                        int skip_prefix_pages) {
  require_positive("page_size", page_size);
  PagedKvCsr c;
  const size_t n = static_cast<size_t>(end_req - first_req);
  c.qo_indptr.reserve(n + 1);
  c.paged_kv_indptr.reserve(n + 1);
  c.paged_kv_last_page_len.reserve(n);
  int64_t total_pages = 0;
  for (int r = first_req; r < end_req; ++r)
    total_pages += std::max<int64_t>(ceil_div(m.seq_lens[static_cast<size_t>(r)] - int64_t{skip_prefix_pages} * page_size, page_size), 0);
  c.paged_kv_indices.reserve(static_cast<size_t>(total_pages));
  c.qo_indptr.push_back(0);
  c.paged_kv_indptr.push_back(0);
  const int32_t q0 = m.query_start_loc[static_cast<size_t>(first_req)];
  for (int r = first_req; r < end_req; ++r) {
    c.qo_indptr.push_back(m.query_start_loc[static_cast<size_t>(r) + 1] - q0);
    const int seq = m.seq_lens[static_cast<size_t>(r)] - skip_prefix_pages * page_size;
    if (seq < 0)
      throw InputError("flashinfer plan: request " + std::to_string(r) + " is shorter than the skipped prefix");
    const int pages = static_cast<int>(ceil_div(seq, page_size));
    const int32_t* row = m.block_table.data() + static_cast<size_t>(r) * m.max_blocks_per_req + skip_prefix_pages;
    c.paged_kv_indices.insert(c.paged_kv_indices.end(), row, row + pages);
    c.paged_kv_indptr.push_back(c.paged_kv_indptr.back() + pages);
    const int last = seq % page_size;
    c.paged_kv_last_page_len.push_back(last == 0 && seq > 0 ? page_size : last);
  }
  return c;
}

FlashInferMetadata build_flashinfer_metadata(const CommonAttentionMetadata& m, int page_size, int skip_prefix_pages) {
  FlashInferMetadata md;
  md.split = split_decodes_and_prefills(m);
  md.decode = paged_kv_csr(m, 0, md.split.num_decodes, page_size, skip_prefix_pages);
  md.prefill = paged_kv_csr(m, md.split.num_decodes, m.num_reqs, page_size, skip_prefix_pages);
  return md;
}

DecodePlan plan_decode(const PagedKvCsr& csr, int num_kv_heads, int page_size, int max_grid, int padded_batch) {
  require_positive("num_kv_heads", num_kv_heads);
  require_positive("max_grid", max_grid);
  DecodePlan p;
  const int n = csr.num_reqs();
  const bool graph = padded_batch > 0;
  if (graph && padded_batch < n)
    throw InputError("flashinfer plan: the batch (" + std::to_string(n) + " requests) exceeds the captured size " +
                     std::to_string(padded_batch));
  std::vector<int64_t> pages(static_cast<size_t>(n)), ones(static_cast<size_t>(n), 1);
  int64_t max_pages = 1;
  for (int r = 0; r < n; ++r) max_pages = std::max<int64_t>(max_pages, pages[static_cast<size_t>(r)] = csr.num_pages(r));
  // Enough requests to fill the GPU: one work item each, no merge (unless a graph must stay
  // valid for smaller batches, which always plans for splitting).
  int64_t chunk = max_pages;
  if (graph || static_cast<int64_t>(n) * num_kv_heads < max_grid) {
    const int64_t min_chunk = std::max(128 / page_size, 1);
    chunk = min_chunk_that_fits(ones, pages, min_chunk, max_grid / num_kv_heads);
  }
  p.chunk_pages = static_cast<int>(chunk);
  p.o_indptr.push_back(0);
  for (int r = 0; r < n; ++r) {
    const int64_t chunks = ceil_div(std::max<int64_t>(pages[static_cast<size_t>(r)], 1), chunk);
    for (int64_t c = 0; c < chunks; ++c) {
      p.request_indices.push_back(r);
      p.kv_tile_indices.push_back(static_cast<int32_t>(c));
    }
    p.o_indptr.push_back(p.o_indptr.back() + static_cast<int32_t>(chunks));
  }
  p.split_kv = graph || p.num_work() > n;
  p.padded_work = graph ? std::max(p.num_work(), max_grid / num_kv_heads) : p.num_work();
  return p;
}

int prefill_cta_tile_q(double mean_packed_qo_len, int head_dim) {
  if (mean_packed_qo_len > 64 && head_dim < 256) return 128;
  if (mean_packed_qo_len > 16) return 64;
  return 16;
}

PrefillPlan plan_prefill(const PagedKvCsr& csr, int num_qo_heads, int num_kv_heads, int head_dim, int page_size,
                         int num_sms) {
  require_positive("num_kv_heads", num_kv_heads);
  require_positive("num_sms", num_sms);
  if (num_qo_heads % num_kv_heads != 0)
    throw InputError("flashinfer plan: num_qo_heads " + std::to_string(num_qo_heads) +
                     " is not a multiple of num_kv_heads " + std::to_string(num_kv_heads));
  PrefillPlan p;
  const int n = csr.num_reqs();
  const int group = num_qo_heads / num_kv_heads;
  std::vector<int64_t> packed(static_cast<size_t>(n)), pages(static_cast<size_t>(n)), q_tiles(static_cast<size_t>(n));
  int64_t total_packed = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t q = csr.qo_indptr[static_cast<size_t>(r) + 1] - csr.qo_indptr[static_cast<size_t>(r)];
    packed[static_cast<size_t>(r)] = q * group;
    pages[static_cast<size_t>(r)] = csr.num_pages(r);
    total_packed += q * group;
  }
  p.cta_tile_q = prefill_cta_tile_q(n > 0 ? static_cast<double>(total_packed) / n : 0.0, head_dim);
  for (int r = 0; r < n; ++r) q_tiles[static_cast<size_t>(r)] = ceil_div(packed[static_cast<size_t>(r)], p.cta_tile_q);
  // Two CTAs per SM over all kv heads bound the work items.
  const int64_t max_work = std::max<int64_t>(2 * static_cast<int64_t>(num_sms) / num_kv_heads, 1);
  const int64_t chunk = min_chunk_that_fits(q_tiles, pages, std::max(128 / page_size, 1), max_work);
  p.chunk_pages = static_cast<int>(chunk);
  p.o_indptr.push_back(0);
  p.merge_indptr.push_back(0);
  for (int r = 0; r < n; ++r) {
    const int64_t kv_chunks = ceil_div(std::max<int64_t>(pages[static_cast<size_t>(r)], 1), chunk);
    p.split_kv = p.split_kv || kv_chunks > 1;
    for (int64_t qt = 0; qt < q_tiles[static_cast<size_t>(r)]; ++qt)
      for (int64_t kc = 0; kc < kv_chunks; ++kc) {
        p.request_indices.push_back(r);
        p.qo_tile_indices.push_back(static_cast<int32_t>(qt));
        p.kv_tile_indices.push_back(static_cast<int32_t>(kc));
      }
    const int32_t q_len = csr.qo_indptr[static_cast<size_t>(r) + 1] - csr.qo_indptr[static_cast<size_t>(r)];
    for (int32_t t = 0; t < q_len; ++t) p.merge_indptr.push_back(p.merge_indptr.back() + static_cast<int32_t>(kv_chunks));
    p.o_indptr.push_back(p.o_indptr.back() + q_len * static_cast<int32_t>(kv_chunks));
  }
  return p;
}

PlanHyperparameters hyperparameters_of(const AttentionSpec& spec) {
  return {spec.sliding_window > 0 ? spec.sliding_window - 1 : -1, spec.logits_soft_cap, spec.scale};
}

void check_hyperparameters(const PlanHyperparameters& planned, const PlanHyperparameters& layer) {
  if (planned.window_left != layer.window_left)
    throw InputError(fmt::format("flashinfer: the plan was made for window_left {} but the layer has window_left {}",
                                 planned.window_left, layer.window_left));
  if (planned.logits_soft_cap != layer.logits_soft_cap)
    throw InputError(fmt::format("flashinfer: the plan was made for logits_soft_cap {} but the layer has {}",
                                 planned.logits_soft_cap, layer.logits_soft_cap));
  if (planned.sm_scale != layer.sm_scale)
    throw InputError(fmt::format("flashinfer: the plan was made for sm_scale {} but the layer has {}", planned.sm_scale,
                                 layer.sm_scale));
}

}  // namespace attn::flashinfer
