#pragma once
// BackendInstance::run_attention() in the tests: what `run --timed attention` times must be the
// step's attention, with nothing of the step left out but its cache writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "metadata/common.hpp"

namespace attn::testing {

// On one instance of `backend` over `b` (num_layers layers): run_attention() after a run() writes
// run()'s output again, bit for bit, O and LSE; and it writes no cache: after poison() (O, LSE and
// every new token's cache slot NaN) it leaves those slots NaN, so every row whose keys include a
// new token's cached K (each row of `b`, where its_own_key_is_cached: causal rows attend their own
// key, and MLA decodes read theirs from the cache) comes out NaN.
inline void expect_attention_alone_is_the_steps(const Backend& backend, const Batch& b, RunOptions opts = {},
                                                bool its_own_key_is_cached = true) {
  const Support sup = backend.supports(b.spec, b);
  ASSERT_TRUE(sup.ok) << sup.reason;
  auto inst = backend.create(b, build_common_metadata(b), opts);
  inst->plan();
  inst->poison();
  inst->run();
  inst->synchronize();
  const AttentionOutput step = inst->fetch();
  for (int i = 0; i < 2; ++i) {  // twice: nothing of the first call's state feeds the second
    inst->poison_outputs();
    inst->run_attention();
    inst->synchronize();
    const AttentionOutput again = inst->fetch();
    ASSERT_EQ(again.o.size(), step.o.size());
    EXPECT_EQ(std::memcmp(again.o.data(), step.o.data(), step.o.size() * sizeof(float)), 0)
        << backend.name() << ": the attention alone differs from the step's (call " << i << ")";
    ASSERT_EQ(again.lse.size(), step.lse.size());
    EXPECT_EQ(std::memcmp(again.lse.data(), step.lse.data(), step.lse.size() * sizeof(float)), 0)
        << backend.name() << ": its LSE differs from the step's (call " << i << ")";
  }
  if (!its_own_key_is_cached) return;
  inst->poison();
  inst->run_attention();
  inst->synchronize();
  const AttentionOutput unwritten = inst->fetch();
  size_t finite = 0;
  for (float x : unwritten.o) finite += std::isfinite(x) ? 1 : 0;
  EXPECT_EQ(finite, 0u) << backend.name() << ": run_attention() wrote the new tokens' cache slots (" << finite
                        << " finite outputs over NaN slots)";
}

}  // namespace attn::testing
