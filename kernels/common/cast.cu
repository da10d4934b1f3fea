// fp32 -> fp16/bf16/fp32 elementwise conversion (see cast_launch.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "kernels/common/cast_launch.hpp"
#include "kernels/common/ptx.cuh"

namespace attn {
namespace {

template <class Element>
__global__ void cast_from_f32_kernel(const float* __restrict__ in, Element* __restrict__ out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = kern::from_float<Element>(in[i]);
}

}  // namespace

void launch_cast_from_f32(const float* in, void* out, int64_t n, DType dtype, cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  switch (dtype) {
    case DType::f16: cast_from_f32_kernel<<<blocks, 256, 0, stream>>>(in, static_cast<__half*>(out), n); break;
    case DType::bf16: cast_from_f32_kernel<<<blocks, 256, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), n); break;
    case DType::f32: cast_from_f32_kernel<<<blocks, 256, 0, stream>>>(in, static_cast<float*>(out), n); break;
    default: throw RuntimeError("launch_cast_from_f32: dtype must be fp16, bf16 or fp32, got " + std::string(to_string(dtype)));
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw RuntimeError(std::string("cast_from_f32 launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
