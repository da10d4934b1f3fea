// FLASHINFER host side: the CSR metadata builder and the split-KV scheduler on hand-worked cases.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "backends/flashinfer/fi_plan.hpp"
#include "core/error.hpp"

namespace attn::flashinfer {
namespace {

// Metadata of requests (query_len, seq_len), decodes first, block table rows 100 r + page.
CommonAttentionMetadata meta_of(const std::vector<std::pair<int, int>>& reqs, int page_size) {
  CommonAttentionMetadata m;
  m.num_reqs = static_cast<int>(reqs.size());
  m.query_start_loc.push_back(0);
  for (auto [q, s] : reqs) {
    m.query_start_loc.push_back(m.query_start_loc.back() + q);
    m.seq_lens.push_back(s);
    m.num_computed_tokens.push_back(s - q);
    m.max_query_len = std::max(m.max_query_len, q);
    m.max_seq_len = std::max(m.max_seq_len, s);
  }
  m.num_actual_tokens = m.query_start_loc.back();
  m.max_blocks_per_req = (m.max_seq_len + page_size - 1) / page_size;
  for (int r = 0; r < m.num_reqs; ++r)
    for (int p = 0; p < m.max_blocks_per_req; ++p) m.block_table.push_back(100 * r + p + 1);
  return m;
}

PagedKvCsr uniform_csr(int num_reqs, int q_len, int seq_len, int page_size) {
  return paged_kv_csr(meta_of(std::vector<std::pair<int, int>>(static_cast<size_t>(num_reqs), {q_len, seq_len}), page_size),
                      0, num_reqs, page_size);
}

TEST(FlashInferMetadata, CsrOfDecodesAndPrefills) {
  // Two decodes (17 and 32 keys) then a prefill of 5 tokens on 35 keys; pages of 16.
  const CommonAttentionMetadata m = meta_of({{1, 17}, {1, 32}, {5, 40}}, 16);
  const FlashInferMetadata md = build_flashinfer_metadata(m, 16);
  EXPECT_EQ(md.split.num_decodes, 2);
  EXPECT_EQ(md.split.num_prefills, 1);
  EXPECT_EQ(md.decode.qo_indptr, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(md.decode.paged_kv_indptr, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(md.decode.paged_kv_indices, (std::vector<int32_t>{1, 2, 101, 102}));
  EXPECT_EQ(md.decode.paged_kv_last_page_len, (std::vector<int32_t>{1, 16}));  // 32 % 16 == 0 -> a full page
  EXPECT_EQ(md.prefill.qo_indptr, (std::vector<int32_t>{0, 5}));             // rebased to 0
  EXPECT_EQ(md.prefill.paged_kv_indptr, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(md.prefill.paged_kv_indices, (std::vector<int32_t>{201, 202, 203}));
  EXPECT_EQ(md.prefill.paged_kv_last_page_len, (std::vector<int32_t>{8}));
  EXPECT_EQ(md.prefill.kv_len(0, 16), 40);
  EXPECT_EQ(md.decode.kv_len(1, 16), 32);
}

TEST(FlashInferMetadata, CascadeLevelOneSkipsThePrefixPages) {
  const CommonAttentionMetadata m = meta_of({{1, 40}, {1, 33}}, 16);
  const PagedKvCsr c = paged_kv_csr(m, 0, 2, 16, 2);  // a 32-token shared prefix
  EXPECT_EQ(c.paged_kv_indptr, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(c.paged_kv_indices, (std::vector<int32_t>{3, 103}));
  EXPECT_EQ(c.paged_kv_last_page_len, (std::vector<int32_t>{8, 1}));
  EXPECT_THROW(paged_kv_csr(m, 0, 2, 16, 3), InputError);  // longer than request 1
}

TEST(FlashInferPlan, DecodeFillsTheGpuWithoutSplitting) {
  // 64 x 4k, 8 kv heads: 512 CTAs >= 2 x 132 resident, one work item per request.
  const DecodePlan p = plan_decode(uniform_csr(64, 1, 4096, 16), 8, 16, 2 * 132);
  EXPECT_FALSE(p.split_kv);
  EXPECT_EQ(p.num_work(), 64);
  EXPECT_EQ(p.chunk_pages, 256);
  EXPECT_EQ(p.o_indptr.back(), 64);
}

TEST(FlashInferPlan, DecodeSplitsFewLongRequests) {
  // 16 x 32k (2048 pages), 8 kv heads, 264 resident CTAs: at most 33 work items, so chunks of
  // 1024 pages (2 per request); 1023 pages would need 3.
  const DecodePlan p = plan_decode(uniform_csr(16, 1, 32768, 16), 8, 16, 264);
  EXPECT_TRUE(p.split_kv);
  EXPECT_EQ(p.chunk_pages, 1024);
  EXPECT_EQ(p.num_work(), 32);
  EXPECT_EQ(p.o_indptr[1], 2);
  EXPECT_EQ(p.kv_tile_indices[1], 1);
  EXPECT_EQ(p.request_indices[31], 15);
  EXPECT_EQ(p.padded_work, 32);
  // The chunk never drops below 128 tokens (8 pages of 16).
  const DecodePlan tiny = plan_decode(uniform_csr(1, 1, 200, 16), 8, 16, 264);
  EXPECT_EQ(tiny.chunk_pages, 8);
  EXPECT_EQ(tiny.num_work(), 2);  // 13 pages
}

TEST(FlashInferPlan, DecodeForCudaGraphsPadsTheWorkList) {
  const DecodePlan p = plan_decode(uniform_csr(16, 1, 32768, 16), 8, 16, 264, 32);
  EXPECT_TRUE(p.split_kv);
  EXPECT_EQ(p.num_work(), 32);
  EXPECT_EQ(p.padded_work, 33);  // max_grid / Hkv: entries past num_work are masked, never read
  EXPECT_THROW(plan_decode(uniform_csr(16, 1, 4096, 16), 8, 16, 264, 8), InputError);
}

TEST(FlashInferPlan, PrefillQueryTileRule) {
  EXPECT_EQ(prefill_cta_tile_q(65, 128), 128);
  EXPECT_EQ(prefill_cta_tile_q(65, 256), 64);  // head 256 never takes 128-row tiles
  EXPECT_EQ(prefill_cta_tile_q(64, 128), 64);
  EXPECT_EQ(prefill_cta_tile_q(17, 128), 64);
  EXPECT_EQ(prefill_cta_tile_q(16, 128), 16);
}

TEST(FlashInferPlan, PrefillLongPromptsNeedNoSplit) {
  // 2 x 4096 new tokens, GQA 4: 128 q tiles each already exceed 2 x 132 / 8 = 33 work items.
  const PrefillPlan p = plan_prefill(uniform_csr(2, 4096, 4096, 16), 32, 8, 128, 16, 132);
  EXPECT_EQ(p.cta_tile_q, 128);
  EXPECT_FALSE(p.split_kv);
  EXPECT_EQ(p.num_work(), 256);
  EXPECT_EQ(p.merge_indptr.back(), 8192);  // one partial per token: nothing to merge
}

TEST(FlashInferPlan, PrefillShortChunkOnLongContextSplitsKv) {
  // 64 tokens after 8192 cached, GQA 4: 256 packed rows -> 2 tiles of 128; 516 pages; 33 work
  // items allow 16 chunks per tile: chunk = 33 pages (32 would make 17).
  const PrefillPlan p = plan_prefill(uniform_csr(1, 64, 8256, 16), 32, 8, 128, 16, 132);
  EXPECT_EQ(p.cta_tile_q, 128);
  EXPECT_TRUE(p.split_kv);
  EXPECT_EQ(p.chunk_pages, 33);
  EXPECT_EQ(p.num_work(), 32);
  EXPECT_EQ(p.merge_indptr.size(), 65u);
  EXPECT_EQ(p.merge_indptr[1], 16);
  EXPECT_EQ(p.o_indptr, (std::vector<int32_t>{0, 64 * 16}));
  EXPECT_THROW(plan_prefill(uniform_csr(1, 4, 64, 16), 30, 8, 128, 16, 132), InputError);
}

}  // namespace
}  // namespace attn::flashinfer

namespace attn::flashinfer {
namespace {

TEST(FlashInferPlan, HyperparametersFixedAtPlanTime) {
  AttentionSpec s;
  s.sliding_window = 4096;
  s.logits_soft_cap = 50.f;
  s.scale = 0.0625f;
  const PlanHyperparameters planned = hyperparameters_of(s);
  EXPECT_EQ(planned.window_left, 4095);  // vLLM: window_left = sliding_window - 1
  EXPECT_NO_THROW(check_hyperparameters(planned, hyperparameters_of(s)));
  AttentionSpec other = s;
  other.sliding_window = 0;
  try {
    check_hyperparameters(planned, hyperparameters_of(other));
    FAIL() << "a different window was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("4095"), std::string::npos) << what;  // both values named
    EXPECT_NE(what.find("-1"), std::string::npos) << what;
  }
  other = s;
  other.logits_soft_cap = 30.f;
  EXPECT_THROW(check_hyperparameters(planned, hyperparameters_of(other)), InputError);
  other = s;
  other.scale = 0.08f;
  EXPECT_THROW(check_hyperparameters(planned, hyperparameters_of(other)), InputError);
}

}  // namespace
}  // namespace attn::flashinfer
