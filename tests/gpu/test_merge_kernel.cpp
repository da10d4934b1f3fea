// merge_attn_states' treatment of its partials' LSEs (kernels/common/lse_merge.cuh): -inf is a
// piece without keys and weighs nothing, a NaN is a piece that read a NaN and must reach the
// output. A merge that weighed a NaN piece as keyless would turn a poisoned read (an unwritten
// cache slot, a page tail) into a finite, wrong row that only a sampled check could see.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/device.hpp"
#include "gpu/gpu_test_util.hpp"
#include "kernels/common/merge_launch.hpp"

namespace attn {
namespace {

constexpr int kHeadSize = 64;

struct Merged {
  std::vector<float> o;  // [head_size]
  float lse = 0;
};

// One token, one head, two partials of O filled with 1 and 2.
Merged merge_two(float lse0, float lse1) {
  std::vector<float> o_partial(2 * kHeadSize);
  for (int d = 0; d < kHeadSize; ++d) o_partial[d] = 1.f, o_partial[kHeadSize + d] = 2.f;
  const std::vector<float> lse_partial = {lse0, lse1};
  DeviceBuffer o_p = testing::upload_vector(o_partial), lse_p = testing::upload_vector(lse_partial);
  DeviceBuffer o(kHeadSize * sizeof(float)), lse(sizeof(float));
  const MergeAttnParams mp =
      merge_params(o_p.as<float>(), lse_p.as<float>(), o.data(), lse.as<float>(), 2, 1, 1, kHeadSize);
  launch_merge_attn_states(mp, DType::f32, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Merged m;
  m.o = testing::download_all<float>(o);
  m.lse = testing::download_all<float>(lse)[0];
  return m;
}

TEST(MergeKernel, KeylessPiecesWeighNothingAndNanPiecesReachTheOutput) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Equal LSEs: the mean, LSE + ln 2.
  Merged m = merge_two(0.5f, 0.5f);
  EXPECT_NEAR(m.o[0], 1.5f, 1e-6f);
  EXPECT_NEAR(m.lse, 0.5f + std::log(2.f), 1e-6f);
  // A piece without keys weighs nothing; both without keys: O = 0, LSE = -inf.
  m = merge_two(0.5f, -inf);
  EXPECT_EQ(m.o[0], 1.f);
  EXPECT_NEAR(m.lse, 0.5f, 1e-6f);
  m = merge_two(-inf, -inf);
  EXPECT_EQ(m.o[0], 0.f);
  EXPECT_EQ(m.lse, -inf);
  // A piece that read a NaN: O and LSE are NaN, whichever side it is on, also beside a piece
  // without keys (fmaxf(-inf, NaN) is -inf: the merge must not take the pair for keyless).
  for (const float other : {0.5f, -inf}) {
    for (const bool first : {true, false}) {
      m = first ? merge_two(nan, other) : merge_two(other, nan);
      const char* side = first ? "first" : "second";
      EXPECT_TRUE(std::isnan(m.o[0])) << "NaN piece " << side << " beside " << other << ": O " << m.o[0];
      EXPECT_TRUE(std::isnan(m.lse)) << "NaN piece " << side << " beside " << other << ": LSE " << m.lse;
    }
  }
}

}  // namespace
}  // namespace attn
