#pragma once
// fp8 (e4m3, e5m2) -> fp16/bf16 widening in registers, exact, for every kernel that reads an fp8
// KV cache; fp32 -> e4m3 narrowing for the operands of fp8 tensor-core products; and the cache
// writes' fp32 -> e4m3/e5m2 quantization, bit for bit core/dtype_convert.hpp's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype_convert.hpp"
#include "kernels/common/ptx.cuh"

namespace attn::kern {
// Every e4m3/e5m2 value is representable in fp16 and bf16, so the cache is widened without
// rounding and the descales are applied in fp32 to the scores (K) and the output (V). The
// widening happens in registers on the MMA operands; the cache bytes never go back to shared
// memory.

//
// The format (kE5m2: e5m2, else e4m3) is a template parameter of every kernel that widens: with
// a runtime flag the compiler if-converts the two short conversion sequences and every chunk
// executes both (ncu of the fp8 decode: 8.65 M warp instructions of each form).

// Two fp8 codes (bytes 0 and 1 of w) -> fp16 pair, bit tricks (any architecture).
template <bool kE5m2>
__device__ __forceinline__ uint32_t fp8x2_to_f16x2_bits(uint32_t w) {
  if constexpr (kE5m2) return __byte_perm(w, 0, 0x1404);  // e5m2 is the high byte of the same fp16
  // e4m3 bits shifted into fp16 position give value * 2^-8 for normals and subnormals alike.
  const uint32_t x = __byte_perm(w, 0, 0x4140);
  const uint32_t bits = ((x & 0x00800080u) << 8) | ((x & 0x007f007fu) << 7);
  const __half2 scaled = __hmul2(*reinterpret_cast<const __half2*>(&bits), __floats2half2_rn(256.f, 256.f));
  return *reinterpret_cast<const uint32_t*>(&scaled);
}

// Four fp8 codes -> two packed 16-bit pairs of the model dtype: .x from bytes 0-1, .y from 2-3.
template <class Element, bool kE5m2>
__device__ __forceinline__ uint2 fp8x4_to_16(uint32_t w) {
  uint32_t h[2];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  // One conversion instruction per pair (sm_89+).
  if constexpr (kE5m2) {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\n"
        "cvt.rn.f16x2.e5m2x2 %0, lo;\ncvt.rn.f16x2.e5m2x2 %1, hi;\n}\n"
        : "=r"(h[0]), "=r"(h[1]) : "r"(w));
  } else {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\n"
        "cvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
        : "=r"(h[0]), "=r"(h[1]) : "r"(w));
  }
#else
  h[0] = fp8x2_to_f16x2_bits<kE5m2>(w);
  h[1] = fp8x2_to_f16x2_bits<kE5m2>(w >> 16);
#endif
  if constexpr (std::is_same_v<Element, __half>) {
    return make_uint2(h[0], h[1]);
  } else {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&h[0]));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&h[1]));
    return make_uint2(pack2<__nv_bfloat16>(a.x, a.y), pack2<__nv_bfloat16>(b.x, b.y));
  }
}

// Four fp32 values -> four e4m3 codes, round to nearest, saturating at +-448 (the operands of an fp8
// tensor-core product: a quantized query, the probabilities P). x0 lands in the lowest byte.
__device__ __forceinline__ uint32_t f32x4_to_e4m3x4(float x0, float x1, float x2, float x3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  // cvt ... d, a, b puts a in the upper byte of d.
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\ncvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
#else
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(x2, x3), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
#endif
}

// Two values -> two cache codes (lo in byte 0, hi in byte 1), exactly as float_to_e4m3 /
// float_to_e5m2 of core/dtype_convert.hpp store them on the host: round to nearest even, saturating
// at the largest finite value (infinities too), NaN -> the sign and the format's NaN code. On sm_89+
// one conversion instruction per pair: the branch-only host function costs ~25 instructions a value,
// which made the fp8 cache write compute-bound (docs/PERF_NOTES.md Version 83). The instruction drops
// a NaN's sign and, for e5m2, its code differs: a pair holding a NaN takes the host function.
// tests/gpu/test_cache_kernels.cpp checks every rounding case against the host.
template <bool kE5m2>
__device__ __forceinline__ uint32_t f32x2_to_fp8x2_exact(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (!isnan(lo) && !isnan(hi)) {
    uint16_t r;
    // cvt ... d, a, b puts a in the upper byte of d.
    if constexpr (kE5m2)
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    else
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
  }
#endif
  if constexpr (kE5m2) return float_to_e5m2(lo) | static_cast<uint32_t>(float_to_e5m2(hi)) << 8;
  else return float_to_e4m3(lo) | static_cast<uint32_t>(float_to_e4m3(hi)) << 8;
}

}  // namespace attn::kern
