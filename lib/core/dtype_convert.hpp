#pragma once
// Exact host/device conversions between float and the storage dtypes attn-bench uses:
// fp16 (IEEE binary16), bf16, fp8 e4m3 ("fn": no infinity, NaN = 0x7f/0xff, max 448) and
// fp8 e5m2 (IEEE-like, max 57344). float -> narrow rounds to nearest even. fp16/bf16 overflow
// to infinity like a plain cast; the fp8 conversions saturate to the largest finite value
// (the "satfinite" behaviour of the KV-cache quantization kernels). NaN stays NaN.
//
// Everything here is ATTN_HD and branch-only (no tables), so a device fill kernel and the host
// reference produce bit-identical values.
#include <cstdint>
#include <cstring>

#include "core/hd.hpp"

namespace attn {

ATTN_HD uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

ATTN_HD float bits_to_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// 2^k for k in [-126, 127], exactly.
ATTN_HD float exp2i(int k) { return bits_to_f32(static_cast<uint32_t>(k + 127) << 23); }

ATTN_HD float round_half_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return __builtin_rintf(x);  // default rounding mode is to nearest even
#endif
}

// A small float format with E exponent bits and M mantissa bits (1 sign bit).
// kHasInf: the all-ones exponent encodes inf/NaN (IEEE style); otherwise only the all-ones
// code (exponent and mantissa) is NaN (the "fn" e4m3 variant).
template <int E, int M, bool kHasInf>
struct MiniFloat {
  static constexpr int kBias = (1 << (E - 1)) - 1;
  static constexpr int kEmin = 1 - kBias;
  static constexpr uint32_t kExpMask = (1u << E) - 1;
  static constexpr uint32_t kInfCode = kExpMask << M;                          // if kHasInf
  static constexpr uint32_t kNanCode = kHasInf ? (kInfCode | (1u << (M - 1))) : ((1u << (E + M)) - 1);
  static constexpr uint32_t kMaxFinite = kHasInf ? (kInfCode - 1) : (kNanCode - 1);
  static constexpr uint32_t kSignBit = 1u << (E + M);

  // Magnitude code (no sign) of |a| rounded to nearest even, without overflow handling.
  ATTN_HD static uint32_t encode_magnitude(float a) {
    const uint32_t ab = f32_to_bits(a);
    const int e = static_cast<int>((ab >> 23) & 0xff) - 127;  // float subnormals: e = -127
    if (e < kEmin) {  // subnormal in the target (rounding up to the smallest normal is exact)
      return static_cast<uint32_t>(round_half_even(a * exp2i(M - kEmin)));
    }
    const uint32_t q = static_cast<uint32_t>(round_half_even(a * exp2i(M - e)));  // [2^M, 2^(M+1)]
    return (static_cast<uint32_t>(e + kBias) << M) + (q - (1u << M));
  }

  ATTN_HD static uint32_t from_float(float x, bool saturate) {
    const uint32_t xb = f32_to_bits(x);
    const uint32_t sign = (xb >> 31) ? kSignBit : 0u;
    const uint32_t absb = xb & 0x7fffffffu;
    if (absb > 0x7f800000u) return sign | kNanCode;  // NaN
    uint32_t code;
    if (absb == 0x7f800000u) {
      code = kMaxFinite + 1;  // infinity: treated as overflow below
    } else {
      const float a = bits_to_f32(absb);
      // Beyond 2^(emax+1) the code would not fit; clamp before encoding.
      const int emax = kHasInf ? static_cast<int>(kExpMask) - 1 - kBias : static_cast<int>(kExpMask) - kBias;
      code = (a >= exp2i(emax + 1)) ? kMaxFinite + 1 : encode_magnitude(a);
    }
    if (code > kMaxFinite) {
      if (saturate) return sign | kMaxFinite;
      return sign | (kHasInf ? kInfCode : kNanCode);
    }
    return sign | code;
  }

  ATTN_HD static float to_float(uint32_t c) {
    const bool neg = (c & kSignBit) != 0;
    const uint32_t exp = (c >> M) & kExpMask;
    const uint32_t man = c & ((1u << M) - 1);
    float v;
    if (kHasInf && exp == kExpMask) {
      v = man ? bits_to_f32(0x7fc00000u) : bits_to_f32(0x7f800000u);
    } else if (!kHasInf && exp == kExpMask && man == (1u << M) - 1) {
      v = bits_to_f32(0x7fc00000u);
    } else if (exp == 0) {
      v = static_cast<float>(man) * exp2i(kEmin - M);
    } else {
      v = static_cast<float>((1u << M) + man) * exp2i(static_cast<int>(exp) - kBias - M);
    }
    return neg ? -v : v;
  }
};

using Fp16Format = MiniFloat<5, 10, true>;
using E4m3Format = MiniFloat<4, 3, false>;
using E5m2Format = MiniFloat<5, 2, true>;

ATTN_HD uint16_t float_to_fp16_bits(float x) { return static_cast<uint16_t>(Fp16Format::from_float(x, false)); }
ATTN_HD float fp16_bits_to_float(uint16_t h) { return Fp16Format::to_float(h); }

ATTN_HD uint16_t float_to_bf16_bits(float x) {
  const uint32_t u = f32_to_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}
ATTN_HD float bf16_bits_to_float(uint16_t b) { return bits_to_f32(static_cast<uint32_t>(b) << 16); }

ATTN_HD uint8_t float_to_e4m3(float x) { return static_cast<uint8_t>(E4m3Format::from_float(x, true)); }
ATTN_HD float e4m3_to_float(uint8_t c) { return E4m3Format::to_float(c); }
ATTN_HD uint8_t float_to_e5m2(float x) { return static_cast<uint8_t>(E5m2Format::from_float(x, true)); }
ATTN_HD float e5m2_to_float(uint8_t c) { return E5m2Format::to_float(c); }

// The largest finite value of each fp8 format (the "range" of calc_kv_scales).
constexpr float kE4m3Max = 448.0f;
constexpr float kE5m2Max = 57344.0f;

}  // namespace attn
