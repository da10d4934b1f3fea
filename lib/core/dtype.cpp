#include "core/dtype.hpp"

#include <cmath>
#include <limits>

namespace attn {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::fp8_e5m2: return "fp8_e5m2";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32" || s == "float") return DType::f32;
  if (s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp8_e4m3" || s == "fp8" || s == "e4m3") return DType::fp8_e4m3;
  if (s == "fp8_e5m2" || s == "e5m2") return DType::fp8_e5m2;
  return std::nullopt;
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2: return 1;
  }
  return 0;
}

bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

float round_to(DType t, float x) {
  switch (t) {
    case DType::f32: return x;
    case DType::f16: return fp16_bits_to_float(float_to_fp16_bits(x));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(x));
    case DType::fp8_e4m3: return e4m3_to_float(float_to_e4m3(x));
    case DType::fp8_e5m2: return e5m2_to_float(float_to_e5m2(x));
  }
  return x;
}

void store_as(DType t, void* base, std::size_t i, float x) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = x; return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_fp16_bits(x); return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(x); return;
    case DType::fp8_e4m3: static_cast<uint8_t*>(base)[i] = float_to_e4m3(x); return;
    case DType::fp8_e5m2: static_cast<uint8_t*>(base)[i] = float_to_e5m2(x); return;
  }
}

float load_as(DType t, const void* base, std::size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return fp16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::fp8_e4m3: return e4m3_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::fp8_e5m2: return e5m2_to_float(static_cast<const uint8_t*>(base)[i]);
  }
  return 0.0f;
}

void store_nan(DType t, void* base, std::size_t i) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = std::numeric_limits<float>::quiet_NaN(); return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = 0x7e00; return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = 0x7fc0; return;
    case DType::fp8_e4m3: static_cast<uint8_t*>(base)[i] = 0x7f; return;
    case DType::fp8_e5m2: static_cast<uint8_t*>(base)[i] = 0x7e; return;
  }
}

}  // namespace attn
