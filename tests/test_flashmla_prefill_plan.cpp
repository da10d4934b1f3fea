// The chunk schedule of FLASHMLA's MLA prefill (plan_mla_prefill) on hand-worked cases, and on
// random batches: every context key is gathered exactly once, in order, into dense rows that the
// identity block table maps back.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/flashmla/mla_prefill_plan.hpp"
#include "core/error.hpp"

namespace attn {
namespace {

using V = std::vector<int32_t>;

TEST(MlaPrefillPlan, DeepseekScenarioShapeIsOneChunk) {
  // mla_prefill_deepseek's prefills: 64 new after 192 cached, 48 after 64; 32k workspace over
  // 2 contexts -> 16384 per chunk: one chunk pass, then the causal pass.
  const MlaPrefillPlan p = plan_mla_prefill({64, 48}, {192, 64}, 32768, 64);
  EXPECT_EQ(p.chunk, 16384);
  EXPECT_EQ(p.num_chunks, 1);
  ASSERT_EQ(p.passes.size(), 2u);
  EXPECT_FALSE(p.passes[0].causal);
  EXPECT_EQ(p.passes[0].key_begin, (V{0, 0}));
  EXPECT_EQ(p.passes[0].key_count, (V{192, 64}));
  EXPECT_EQ(p.passes[0].dense_begin, (V{0, 192, 256}));
  EXPECT_TRUE(p.passes[1].causal);
  EXPECT_EQ(p.passes[1].key_begin, (V{192, 64}));
  EXPECT_EQ(p.passes[1].key_count, (V{64, 48}));
  EXPECT_EQ(p.passes[1].dense_begin, (V{0, 64, 112}));
  EXPECT_EQ(p.max_dense_rows, 256);
  EXPECT_EQ(p.max_dense_blocks, 12);
  // Request 1's chunk starts at dense row 192 = block 12 of 16 rows.
  EXPECT_EQ(p.passes[0].block_table[12 + 0], 12);
  EXPECT_EQ(p.passes[0].block_table[12 + 3], 15);
  EXPECT_EQ(p.passes[0].block_table[12 + 4], 0);  // padding
  EXPECT_EQ(p.query_start, (V{0, 64, 112}));
  EXPECT_EQ(p.tiles, (V{0, 0, 1, 0}));
}

TEST(MlaPrefillPlan, SmallWorkspaceGivesManyChunksAndEmptyOnes) {
  // 3 prefills with context share 128 tokens: 42 each, rounded to a 64-token minimum.
  const MlaPrefillPlan p = plan_mla_prefill({70, 33, 17, 3}, {200, 64, 0, 130}, 128, 64);
  EXPECT_EQ(p.chunk, 64);
  EXPECT_EQ(p.num_chunks, 4);  // ceil(200 / 64)
  ASSERT_EQ(p.passes.size(), 5u);
  EXPECT_EQ(p.passes[1].key_begin, (V{64, 64, 0, 64}));
  EXPECT_EQ(p.passes[1].key_count, (V{64, 0, 0, 64}));   // the 64-token context is done: empty
  EXPECT_EQ(p.passes[3].key_begin, (V{192, 64, 0, 130}));
  EXPECT_EQ(p.passes[3].key_count, (V{8, 0, 0, 0}));
  EXPECT_EQ(p.passes[3].dense_begin, (V{0, 16, 16, 16, 16}));
  EXPECT_EQ(p.passes[4].key_count, (V{70, 33, 17, 3}));  // the new tokens, causal
  EXPECT_EQ(p.tiles, (V{0, 0, 0, 1, 1, 0, 2, 0, 3, 0}));  // 70 rows = 2 tiles of 64
  // The keys each tile attends, per pass (the balanced rounds' costs): a chunk's whole range for
  // every tile of its prefill; the causal pass's keys up to the tile's last row (64, then 70).
  using K = std::vector<int64_t>;
  EXPECT_EQ(mla_pass_tile_keys(p, 1), (K{64, 64, 0, 0, 64}));
  EXPECT_EQ(mla_pass_tile_keys(p, 3), (K{8, 8, 0, 0, 0}));
  EXPECT_EQ(mla_pass_tile_keys(p, 4), (K{64, 70, 33, 17, 3}));
  EXPECT_THROW(mla_pass_tile_keys(p, 5), InputError);
}

TEST(MlaPrefillPlan, NoContextIsOneCausalPass) {
  const MlaPrefillPlan p = plan_mla_prefill({100, 7}, {0, 0}, 32768, 64);
  EXPECT_EQ(p.num_chunks, 0);
  ASSERT_EQ(p.passes.size(), 1u);
  EXPECT_TRUE(p.passes[0].causal);
  EXPECT_EQ(p.passes[0].dense_begin, (V{0, 112, 128}));
}

TEST(MlaPrefillPlan, RandomBatchesGatherEveryContextKeyOnce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    V q(n), ctx(n);
    for (int i = 0; i < n; ++i) {
      q[i] = std::uniform_int_distribution<int>(1, 300)(rng);
      ctx[i] = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, 5000)(rng);
    }
    const int workspace = std::uniform_int_distribution<int>(1, 20000)(rng);
    const MlaPrefillPlan p = plan_mla_prefill(q, ctx, workspace, 64);
    SCOPED_TRACE(testing::Message() << "trial " << trial << " workspace " << workspace);
    ASSERT_EQ(static_cast<int>(p.passes.size()), p.num_chunks + 1);
    for (int i = 0; i < n; ++i) {
      int at = 0;
      for (int c = 0; c < p.num_chunks; ++c) {
        const auto& pass = p.passes[static_cast<size_t>(c)];
        EXPECT_EQ(pass.key_begin[i], at);
        EXPECT_LE(pass.key_count[i], p.chunk);
        EXPECT_GE(pass.dense_begin[i + 1] - pass.dense_begin[i], pass.key_count[i]);
        EXPECT_EQ(pass.dense_begin[i] % MlaPrefillPlan::kDenseBlock, 0);
        for (int j = 0; j * MlaPrefillPlan::kDenseBlock < pass.key_count[i]; ++j)
          EXPECT_EQ(pass.block_table[static_cast<size_t>(i) * p.max_dense_blocks + j] * MlaPrefillPlan::kDenseBlock,
                    pass.dense_begin[i] + j * MlaPrefillPlan::kDenseBlock);
        at += pass.key_count[i];
      }
      EXPECT_EQ(at, ctx[i]);
      EXPECT_EQ(p.passes.back().key_begin[i], ctx[i]);
      EXPECT_EQ(p.passes.back().key_count[i], q[i]);
    }
    for (const auto& pass : p.passes) EXPECT_LE(pass.dense_rows(), p.max_dense_rows);
    if (HasFailure()) return;
  }
}

TEST(MlaPrefillPlan, BadArgumentsAreRefused) {
  EXPECT_THROW(plan_mla_prefill({1, 2}, {0}, 100, 64), InputError);
  EXPECT_THROW(plan_mla_prefill({1}, {0}, 100, 0), InputError);
}

}  // namespace
}  // namespace attn
