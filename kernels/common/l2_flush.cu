// The read-only L2 flush of the device timing (l2_flush_launch.hpp says why it reads).
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "kernels/common/l2_flush_launch.hpp"

namespace attn {
namespace {

__global__ void l2_read_flush_kernel(const uint4* __restrict__ buf, std::size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint4 v = __ldcg(buf + i);  // L2 only: the lines land in L2, not in L1
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u && threadIdx.x == 0x3ff) *sink = acc;  // never true for 256-thread blocks
}

}  // namespace

void launch_l2_read_flush(const void* buf, std::size_t bytes, uint32_t* sink, int ctas, cudaStream_t stream) {
  if (bytes % 16 != 0) throw RuntimeError("launch_l2_read_flush: bytes must be a multiple of 16");
  if (ctas < 1) throw RuntimeError("launch_l2_read_flush: ctas must be >= 1");
  l2_read_flush_kernel<<<ctas, 256, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw RuntimeError(std::string("l2 flush launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
