#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype_convert.hpp"

namespace attn {

// Storage dtypes. Model dtypes are f32/f16/bf16; KV caches may also be fp8.
enum class DType : uint8_t { f32, f16, bf16, fp8_e4m3, fp8_e5m2 };

std::string_view to_string(DType t);           // "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"
std::optional<DType> parse_dtype(std::string_view s);  // accepts the names above (+ "float32" etc.)
std::size_t dtype_size(DType t);
bool is_fp8(DType t);

// Value after a round trip through the dtype (what a tensor of that dtype holds).
float round_to(DType t, float x);
// Store/load element i of a buffer of dtype t. fp8 stores saturate (see dtype_convert.hpp).
void store_as(DType t, void* base, std::size_t i, float x);
float load_as(DType t, const void* base, std::size_t i);
// The NaN bit pattern used to poison buffers (fp8 e4m3: 0x7f, e5m2: 0x7e, fp16: 0x7e00, ...).
void store_nan(DType t, void* base, std::size_t i);

}  // namespace attn
