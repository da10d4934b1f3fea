// merge_attn_states: combines partial attention states by their log-sum-exp. One warp per
// (token, head); lanes stride over the head dimension in float4 steps.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/common/ptx.cuh"
#include "kernels/common/merge_launch.hpp"

namespace attn {
namespace {

constexpr int kMaxPartials = 64;

template <class Element>
__global__ void merge_attn_states_kernel(const __grid_constant__ MergeAttnParams p) {
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;

  // Partial i of this row sits at lse_partial[first + i * stride] (o_partial likewise x head_size).
  int64_t first = row, stride = rows;
  int count = p.num_partials;
  if (p.seq_partials) {
    const int64_t seq_rows = static_cast<int64_t>(p.tokens_per_seq) * p.num_heads;
    const int64_t seq = row / seq_rows;
    const int begin = p.seq_partials[seq];
    count = p.seq_partials[seq + 1] - begin;
    if (count <= 1) return;  // written directly by the kernel that produced it
    first = begin * seq_rows + row % seq_rows;
    stride = seq_rows;
  }

  // Weights e^(lse_i - max) / sum (2^ in base 2); a side with lse = -inf weighs 0.
  const bool base2 = p.lse_base2 != 0;
  auto weight = [base2](float x) { return base2 ? exp2f(x) : expf(x); };
  float m = -INFINITY;
  for (int i = 0; i < count; ++i) m = fmaxf(m, p.lse_partial[first + i * stride]);
  const float m_use = m == -INFINITY ? 0.f : m;
  float total = 0.f;
  for (int i = 0; i < count; ++i) total += weight(p.lse_partial[first + i * stride] - m_use);
  const float inv = total > 0.f ? 1.f / total : 0.f;

  Element* o = static_cast<Element*>(p.o) + row * p.head_size;
  for (int d = lane * 4; d < p.head_size; d += 128) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = 0; i < count; ++i) {
      const float w = weight(p.lse_partial[first + i * stride] - m_use) * inv;
      if (w == 0.f) continue;  // an empty side may hold zeros; never read it into the sum
      const float4 v = *reinterpret_cast<const float4*>(p.o_partial + (first + i * stride) * p.head_size + d);
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
    o[d] = kern::from_float<Element>(acc.x);
    o[d + 1] = kern::from_float<Element>(acc.y);
    o[d + 2] = kern::from_float<Element>(acc.z);
    o[d + 3] = kern::from_float<Element>(acc.w);
  }
  if (lane == 0 && p.lse) {
    const int64_t token = row / p.num_heads, head = row % p.num_heads;
    p.lse[token * p.lse_token_stride + head * p.lse_head_stride] =
        total > 0.f ? m_use + (base2 ? log2f(total) : logf(total)) : -INFINITY;
  }
}

}  // namespace

void launch_merge_attn_states(const MergeAttnParams& p, DType out_dtype, cudaStream_t stream) {
  if (p.head_size % 4 != 0)
    throw RuntimeError("launch_merge_attn_states: head_size must be a multiple of 4");
  if (p.seq_partials == nullptr && (p.num_partials < 1 || p.num_partials > kMaxPartials))
    throw RuntimeError("launch_merge_attn_states: partials must be in [1, 64]");
  if (p.seq_partials != nullptr && (p.tokens_per_seq < 1 || p.num_tokens % p.tokens_per_seq != 0))
    throw RuntimeError("launch_merge_attn_states: num_tokens must be a multiple of tokens_per_seq");
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  if (rows == 0) return;
  constexpr int kWarpsPerBlock = 8;
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  if (out_dtype == DType::f16) {
    merge_attn_states_kernel<__half><<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
  } else if (out_dtype == DType::bf16) {
    merge_attn_states_kernel<__nv_bfloat16><<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
  } else if (out_dtype == DType::f32) {
    merge_attn_states_kernel<float><<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
  } else {
    throw RuntimeError("launch_merge_attn_states: output dtype must be fp16, bf16 or fp32");
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw RuntimeError(std::string("merge_attn_states launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
