// A bare streaming read of a device buffer (stream_read_launch.hpp says who uses it and why).
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "kernels/common/stream_read_launch.hpp"

namespace attn {
namespace {

// Every thread keeps kUnroll independent 16-byte loads in flight (a grid-stride loop of single
// loads waits on each one); the loads go through L2 only (ld.global.cg), so the lines land in L2
// and not in L1.
constexpr int kUnroll = 4;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) stream_read_kernel(const uint4* __restrict__ buf, std::size_t n,
                                                               uint32_t* sink) {
  uint32_t acc = 0;
  const std::size_t threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t i = tid;
  for (; i + (kUnroll - 1) * threads < n; i += kUnroll * threads) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(buf + i + u * threads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += threads) {
    const uint4 v = __ldcg(buf + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u && threadIdx.x == 0x3ff) *sink = acc;  // never true for 256-thread blocks
}

}  // namespace

void launch_stream_read(const void* buf, std::size_t bytes, uint32_t* sink, int ctas, cudaStream_t stream) {
  if (bytes % 16 != 0) throw RuntimeError("launch_stream_read: bytes must be a multiple of 16");
  if (ctas < 1) throw RuntimeError("launch_stream_read: ctas must be >= 1");
  stream_read_kernel<<<ctas, kThreads, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw RuntimeError(std::string("stream read launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
