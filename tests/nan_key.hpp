#pragma once
// RunOptions::nan_key: a NaN read anywhere among a row's keys must reach that row's output. The
// pieces of a split row and the levels of a cascade are merged by their LSEs; a piece that read a
// NaN must carry a NaN LSE, since one with LSE -inf (a piece without keys) weighs nothing and the
// row would come out finite and wrong, which only a sampled comparison could see.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "backends/backend.hpp"
#include "metadata/common.hpp"

namespace attn::testing {

// Runs `backend` on `b` twice, clean and with `key`'s cached K NaN in the cache. The rows that attend
// the key (its request's tokens, every request's for a key of the shared prefix; the query heads of
// its kv head, every head for MLA) must be NaN in every element of O and in the LSE; every other row
// must be bitwise the clean run's. Every row must see every context key (no window, no local chunk).
// Returns the planted run's plan summary, for the caller to check that the key's rows were split or
// cascaded.
inline std::string expect_nan_key_reaches_its_rows(const Backend& backend, const Batch& b, const CachedKey& key,
                                                   RunOptions opts = {}) {
  const AttentionSpec& s = b.spec;
  EXPECT_TRUE(s.sliding_window == 0 && b.local_attention_chunk == 0) << "every row must see every context key";
  const CommonAttentionMetadata m = build_common_metadata(b);
  const Support sup = backend.supports(s, b);
  EXPECT_TRUE(sup.ok) << sup.reason;
  if (!sup.ok) return {};
  auto run = [&](const RunOptions& o, std::string* plan) {
    auto inst = backend.create(b, m, o);
    inst->plan();
    inst->poison();
    inst->run();
    inst->synchronize();
    if (plan) *plan = inst->plan_summary();
    return inst->fetch();
  };
  const AttentionOutput clean = run(opts, nullptr);
  opts.nan_key = key;
  std::string plan;
  const AttentionOutput got = run(opts, &plan);
  EXPECT_EQ(got.o.size(), clean.o.size());
  EXPECT_EQ(got.lse.size(), clean.lse.size());
  if (got.o.size() != clean.o.size() || got.lse.size() != clean.lse.size()) return plan;

  const int heads = got.num_heads, dv = got.head_size_v, group = s.use_mla ? heads : s.num_q_heads / s.num_kv_heads;
  int64_t nan_rows = 0, kept_rows = 0, bad = 0;
  for (int64_t t = 0; t < got.num_tokens; ++t) {
    const int req = static_cast<int>(std::upper_bound(b.query_start_loc.begin(), b.query_start_loc.end(), t) -
                                      b.query_start_loc.begin()) - 1;
    for (int h = 0; h < heads; ++h) {
      const bool attends = (req == key.req || key.pos < b.shared_prefix_len) && (s.use_mla || h / group == key.kv_head);
      const int64_t row = t * heads + h;
      const float* o = got.o.data() + row * dv;
      const float* want = clean.o.data() + row * dv;
      std::string why;
      if (attends) {
        ++nan_rows;
        const int64_t finite = std::count_if(o, o + dv, [](float x) { return !std::isnan(x); });
        if (finite) why = std::to_string(finite) + " of its " + std::to_string(dv) + " O elements not NaN (first " +
                          std::to_string(*std::find_if(o, o + dv, [](float x) { return !std::isnan(x); })) + ")";
        else if (!got.lse.empty() && !std::isnan(got.lse[row]))
          why = "LSE " + std::to_string(got.lse[row]) + ", not NaN";
      } else {
        ++kept_rows;
        if (std::memcmp(o, want, sizeof(float) * dv) != 0) why = "O differs from the clean run's";
        else if (!got.lse.empty() && std::memcmp(&got.lse[row], &clean.lse[row], sizeof(float)) != 0)
          why = "LSE differs from the clean run's";
      }
      if (!why.empty() && ++bad <= 5)
        ADD_FAILURE() << backend.name() << ": token " << t << " (request " << req << ") head " << h << ", which "
                      << (attends ? "attends" : "does not attend") << " the NaN key (request " << key.req
                      << ", position " << key.pos << ", kv head " << key.kv_head << "): " << why << " | plan: " << plan;
    }
  }
  EXPECT_EQ(bad, 0) << backend.name() << ": " << bad << " rows wrong in all";
  EXPECT_GT(nan_rows, 0) << "no row attends the key";
  EXPECT_GT(kept_rows, 0) << "every row attends the key: nothing shows that the NaN stays in its rows";
  return plan;
}

}  // namespace attn::testing
