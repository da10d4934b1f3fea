// FastDivU32 (kernels/common/fast_div.hpp): the page-size division of the FLASHINFER kernels'
// address tables. The host path runs the same multiply-high and shift as the device path.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/fast_div.hpp"

namespace attn {
namespace {

void expect_exact(uint32_t d, const std::vector<uint32_t>& ns) {
  const FastDivU32 f(d);
  for (uint32_t n : ns) {
    uint32_t q = 0, r = 0;
    f.divmod(n, q, r);
    ASSERT_EQ(q, n / d) << "n=" << n << " d=" << d;
    ASSERT_EQ(r, n % d) << "n=" << n << " d=" << d;
  }
}

// Numerators where a wrong multiplier shows first: around multiples of d and at the top of
// the range, plus random ones.
std::vector<uint32_t> numerators_for(uint32_t d, std::mt19937& rng) {
  std::vector<uint32_t> ns;
  for (uint32_t n = 0; n < 2048; ++n) ns.push_back(n);
  const uint64_t top = (uint64_t{1} << 32) / d;  // the largest multiple of d below 2^32
  for (uint64_t k : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, uint64_t{1000}, uint64_t{65537}, top}) {
    const uint64_t m = k * d;
    for (int64_t delta = -2; delta <= 2; ++delta) {
      const int64_t n = static_cast<int64_t>(m) + delta;
      if (n >= 0 && n <= 0xFFFFFFFFll) ns.push_back(static_cast<uint32_t>(n));
    }
  }
  for (uint32_t n = 0xFFFFFFFFu - 64; n != 0; ++n) ns.push_back(n);  // up to 2^32 - 1
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000; ++i) ns.push_back(any(rng));
  return ns;
}

TEST(FastDivU32, ExactForSmallDivisors) {
  std::mt19937 rng(7);
  for (uint32_t d = 1; d <= 300; ++d) expect_exact(d, numerators_for(d, rng));
}

TEST(FastDivU32, ExactForPageSizesAndLargeDivisors) {
  std::mt19937 rng(11);
  for (uint32_t d : {512u, 1000u, 1024u, 4096u, 65535u, 65536u, 1000003u, 0x40000001u, 0x7FFFFFFFu, 0x80000000u})
    expect_exact(d, numerators_for(d, rng));
}

TEST(FastDivU32, PowersOfTwoAreShifts) {
  for (uint32_t s = 0; s <= 31; ++s) {
    const FastDivU32 f(uint32_t{1} << s);
    EXPECT_EQ(f.mul, 0u) << s;
    EXPECT_EQ(f.shift, s);
  }
}

}  // namespace
}  // namespace attn
