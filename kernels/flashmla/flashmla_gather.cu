// The gather of one MLA prefill pass (see MlaGatherParams): one warp per dense row copies the
// 576-wide latent entry (72 x 16 bytes) out of its cache page and k_pe into every head's key.
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "kernels/flashmla/flashmla_launch.hpp"

namespace attn {
namespace {

constexpr int kLatent = kFlashMlaHeadDimK;  // 576
constexpr int kRope = 64, kNope = 128, kQk = kNope + kRope;

// Elements are moved as 16-byte chunks (8 x 16-bit), so the kernel is dtype-free.
__global__ void mla_gather_kernel(const __grid_constant__ MlaGatherParams p) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.num_dense_rows) return;
  int lo = 0, hi = p.num_reqs - 1;  // the request whose dense rows hold `row`
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.dense_begin[mid] <= row) lo = mid; else hi = mid - 1;
  }
  const int j = row - p.dense_begin[lo];
  const bool valid = j < p.key_count[lo];
  const uint4* src = nullptr;
  if (valid) {
    const int key = p.key_begin[lo] + j;
    const int32_t block = p.block_table[static_cast<int64_t>(lo) * p.block_table_stride + key / p.block_size];
    src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.kv_cache) + block * p.kv_block_stride +
                                         static_cast<int64_t>(key % p.block_size) * kLatent);
  }
  uint4* lat = reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.latent) + static_cast<int64_t>(row) * kLatent);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int c = lane; c < kLatent / 8; c += 32) lat[c] = valid ? src[c] : zero;
  // k_pe = chunks 64..71 of the entry, into dims 128..191 (chunks 16..23) of every head.
  uint4* k = reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.k) + static_cast<int64_t>(row) * p.num_heads * kQk);
  for (int i = lane; i < p.num_heads * (kRope / 8); i += 32) {
    const int h = i / (kRope / 8), c = i % (kRope / 8);
    k[h * (kQk / 8) + kNope / 8 + c] = valid ? src[512 / 8 + c] : zero;
  }
}

}  // namespace

void launch_mla_gather(const MlaGatherParams& p, DType dtype, cudaStream_t stream) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    throw RuntimeError("launch_mla_gather: dtype must be fp16 or bf16, got " + std::string(to_string(dtype)));
  if (p.num_dense_rows <= 0 || p.num_reqs <= 0) return;
  constexpr int kWarps = 8;
  mla_gather_kernel<<<(p.num_dense_rows + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw RuntimeError(std::string("mla_gather_kernel launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
