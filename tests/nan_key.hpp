#pragma once
// RunOptions::nan_keys in the tests: a NaN read anywhere among a row's keys must reach that row's
// output, however the row's keys were split, merged and masked (validate/nan_probe.hpp says why).
#include <gtest/gtest.h>

#include <string>

#include "backends/backend.hpp"
#include "metadata/common.hpp"
#include "validate/nan_probe.hpp"

namespace attn::testing {

// Runs `backend` on `b` twice, clean and with `key`'s K NaN (a context token's in the cache, a new
// token's in the K input), and checks the planted run with check_nan_probe: the rows that attend the
// key NaN in O and LSE, every other row bitwise the clean run's. Some rows must attend the key and some not. Returns the planted run's plan summary, for the
// caller to check that the key's rows were split or cascaded.
inline std::string expect_nan_key_reaches_its_rows(const Backend& backend, const Batch& b, const TokenKey& key,
                                                   RunOptions opts = {}) {
  const CommonAttentionMetadata m = build_common_metadata(b);
  const Support sup = backend.supports(b.spec, b);
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
  opts.nan_keys = {key};
  std::string plan;
  const AttentionOutput got = run(opts, &plan);
  const NanProbeResult r = check_nan_probe(b, {key}, clean, got, /*bitwise=*/true);
  EXPECT_TRUE(r.pass) << backend.name() << ": " << r.failure << " | plan: " << plan;
  EXPECT_GT(r.attending_rows, 0) << "no row attends the key";
  EXPECT_LT(r.attending_rows, b.num_tokens() * b.spec.num_q_heads)
      << "every row attends the key: nothing shows that the NaN stays in its rows";
  return plan;
}

}  // namespace attn::testing
