#pragma once
// Elementwise fp32 -> model dtype conversion (defined in cast.cu): the last step of a product
// computed in fp32 (FLASHMLA's W_UV up-projection of the fp32 latent output).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace attn {

// out[i] = round_to(dtype, in[i]) for i < n; dtype fp16, bf16 or fp32. Never syncs.
void launch_cast_from_f32(const float* in /*[n]*/, void* out /*[n] dtype*/, int64_t n, DType dtype, cudaStream_t stream);

}  // namespace attn
