#pragma once
// Division of unsigned 32-bit integers by a divisor fixed on the host (a page size), as a
// multiply-high and a shift instead of the ~20 instructions of a division by a runtime value.
// Plain C++ with a device path: the divisor travels inside POD kernel parameters.
//
// With s = ceil(log2 d) and m = ceil(2^(32 + s) / d) (33 bits: m = 2^32 + mul), the quotient
// floor(n * m / 2^(32 + s)) equals n / d for every n < 2^32: m * d - 2^(32 + s) < d <= 2^s, so
// the error term n * (m * d - 2^(32 + s)) / (d * 2^(32 + s)) stays below 1 / d.
#include <cassert>
#include <cstdint>

#if defined(__CUDACC__)
#define ATTN_FAST_DIV_HD __host__ __device__
#else
#define ATTN_FAST_DIV_HD
#endif

namespace attn {

struct FastDivU32 {
  uint32_t d = 1;      // the divisor, 1 .. 2^31
  uint32_t mul = 0;    // m - 2^32
  uint32_t shift = 0;  // s

  FastDivU32() = default;
  explicit FastDivU32(uint32_t divisor) : d(divisor) {
    assert(divisor >= 1 && divisor <= (uint32_t{1} << 31));  // s <= 31 keeps 2^(32 + s) in 64 bits
    while ((uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << (32 + shift)) + d - 1) / d - (uint64_t{1} << 32));
  }

  ATTN_FAST_DIV_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * mul) >> 32);
#endif
    return static_cast<uint32_t>((static_cast<uint64_t>(hi) + n) >> shift);
  }
  // n / d and n % d.
  ATTN_FAST_DIV_HD void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * d;
  }
};

}  // namespace attn

#undef ATTN_FAST_DIV_HD
