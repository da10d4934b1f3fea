#include "backends/flashmla/mla_prefill_plan.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace attn {
namespace {

int round_up(int x, int m) { return (x + m - 1) / m * m; }

}  // namespace

MlaPrefillPlan plan_mla_prefill(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& context_lens,
                                int workspace_tokens, int block_m) {
  if (q_lens.size() != context_lens.size() || block_m <= 0 || workspace_tokens <= 0)
    throw InputError("plan_mla_prefill: " + std::to_string(q_lens.size()) + " query lengths for " +
                     std::to_string(context_lens.size()) + " contexts, block_m " + std::to_string(block_m) +
                     ", workspace " + std::to_string(workspace_tokens));
  MlaPrefillPlan plan;
  const int n = static_cast<int>(q_lens.size());
  plan.num_prefills = n;
  plan.block_m = block_m;
  plan.query_start.assign(1, 0);
  int num_with_context = 0, max_context = 0;
  for (int i = 0; i < n; ++i) {
    plan.query_start.push_back(plan.query_start.back() + q_lens[i]);
    num_with_context += context_lens[i] > 0;
    max_context = std::max(max_context, context_lens[i]);
  }
  plan.num_tokens = plan.query_start.back();
  if (num_with_context > 0) {
    plan.chunk = std::max(64, workspace_tokens / num_with_context / 64 * 64);
    plan.num_chunks = (max_context + plan.chunk - 1) / plan.chunk;
  }
  auto add_pass = [&](bool causal, auto&& range) {
    MlaPrefillPlan::Pass p;
    p.causal = causal;
    p.dense_begin.assign(1, 0);
    for (int i = 0; i < n; ++i) {
      const auto [begin, count] = range(i);
      p.key_begin.push_back(begin);
      p.key_count.push_back(count);
      p.dense_begin.push_back(p.dense_begin.back() + round_up(count, MlaPrefillPlan::kDenseBlock));
      plan.max_dense_blocks = std::max(plan.max_dense_blocks, (count + MlaPrefillPlan::kDenseBlock - 1) / MlaPrefillPlan::kDenseBlock);
    }
    plan.max_dense_rows = std::max(plan.max_dense_rows, p.dense_rows());
    plan.passes.push_back(std::move(p));
  };
  for (int c = 0; c < plan.num_chunks; ++c) {
    add_pass(false, [&](int i) {
      const int begin = std::min(context_lens[i], c * plan.chunk);
      return std::pair<int, int>{begin, std::min(context_lens[i], (c + 1) * plan.chunk) - begin};
    });
  }
  add_pass(true, [&](int i) { return std::pair<int, int>{context_lens[i], q_lens[i]}; });
  plan.max_dense_blocks = std::max(plan.max_dense_blocks, 1);
  for (auto& p : plan.passes) {
    p.block_table.assign(static_cast<std::size_t>(n) * plan.max_dense_blocks, 0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j * MlaPrefillPlan::kDenseBlock < p.key_count[i]; ++j)
        p.block_table[static_cast<std::size_t>(i) * plan.max_dense_blocks + j] = p.dense_begin[i] / MlaPrefillPlan::kDenseBlock + j;
  }
  for (int i = 0; i < n; ++i)
    for (int m = 0; m * block_m < q_lens[i]; ++m) {
      plan.tiles.push_back(i);
      plan.tiles.push_back(m);
    }
  return plan;
}

std::vector<int64_t> mla_pass_tile_keys(const MlaPrefillPlan& plan, int pass) {
  if (pass < 0 || pass >= static_cast<int>(plan.passes.size()))
    throw InputError("mla_pass_tile_keys: pass " + std::to_string(pass) + " of " + std::to_string(plan.passes.size()));
  const MlaPrefillPlan::Pass& p = plan.passes[static_cast<std::size_t>(pass)];
  std::vector<int64_t> keys;
  keys.reserve(plan.tiles.size() / 2);
  for (std::size_t t = 0; t + 1 < plan.tiles.size(); t += 2) {
    const int i = plan.tiles[t], m = plan.tiles[t + 1];
    const int count = p.key_count[static_cast<std::size_t>(i)];
    keys.push_back(p.causal ? std::min<int64_t>(count, int64_t{m + 1} * plan.block_m) : count);
  }
  return keys;
}

}  // namespace attn
