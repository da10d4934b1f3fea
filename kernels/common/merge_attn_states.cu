// merge_attn_states: combines partial attention states by their log-sum-exp. One thread per
// (token, head, 4 columns). With up to four partials (split-KV, cascade, FlashMLA's split
// requests) a thread loads their LSEs and float4s at once, so a merge costs one round trip to
// L2 after the producer; with more it reads the LSEs (shared with the row's other threads through
// L1) and then the partials, two round trips, whatever the head size. (One warp per row striding
// over the columns waited for one round trip per 128 columns: the partial loads of the next
// stride could not pass the stores of the last.)
//
// Launched with programmatic stream serialization: it may start while the kernel that wrote the
// partials finishes (FLASHMLA's decode lets it), reads only the host-uploaded partial counts
// until pdl_wait_for_producer, and returns the launch latency to the tail of that kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/common/lse_merge.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/merge_launch.hpp"
#include "kernels/common/pdl_launch.hpp"

namespace attn {
namespace {

constexpr int kMaxPartials = 64;
constexpr int kThreads = 256;
constexpr int kInFlight = 4;  // partials a thread loads at once (more take the loop)

// Four consecutive outputs: one 16-byte (fp32) or 8-byte (16-bit) store.
template <class Element>
__device__ __forceinline__ void store4(Element* dst, float4 v) {
  if constexpr (std::is_same_v<Element, float>) {
    *reinterpret_cast<float4*>(dst) = v;
  } else {
    uint2 w;
    w.x = kern::pack2<Element>(v.x, v.y);
    w.y = kern::pack2<Element>(v.z, v.w);
    *reinterpret_cast<uint2*>(dst) = w;
  }
}

template <class Element>
__global__ void __launch_bounds__(kThreads) merge_attn_states_kernel(const __grid_constant__ MergeAttnParams p) {
  const int groups = p.head_size / 4;  // float4 column groups per row
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t row = idx / groups;
  const int d = static_cast<int>(idx % groups) * 4;

  // Partial i of this row sits at lse_partial[first + i * stride] (o_partial likewise x head_size).
  int64_t first = row, stride = rows;
  int count = p.num_partials;
  if (p.seq_partials && row < rows) {
    const int64_t seq_rows = static_cast<int64_t>(p.tokens_per_seq) * p.num_heads;
    const int64_t seq = row / seq_rows;
    const int begin = p.seq_partials[seq];
    count = p.seq_partials[seq + 1] - begin;
    first = begin * seq_rows + row % seq_rows;
    stride = seq_rows;
  }
  // A sequence in one piece was written directly by the kernel that produced it, and one of at
  // most p.merged_upto pieces merged by it (FLASHMLA's seesaw decode).
  const bool merges = row < rows && !(p.seq_partials && count <= max(p.merged_upto, 1));
  // The partials come from the kernel ahead: every thread that merges waits for it, and one
  // thread of the grid waits in any case, so that this grid never completes before that kernel
  // (work after this grid in the stream may read that kernel's outputs too).
  if (merges || idx == 0) kern::pdl_wait_for_producer();
  if (!merges) return;

  // The weights and the sum in lse_merge.cuh's order (the FLASHMLA decode's own merge takes the
  // same steps); a side with lse = -inf weighs 0 and is never read into the sum.
  const bool base2 = p.lse_base2 != 0;
  const float* lse_p = p.lse_partial + first;
  const float* o_p = p.o_partial + first * p.head_size + d;
  const int64_t o_stride = stride * p.head_size;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add = [&acc](float w, const float4& v) {
    kern::lse_merge_add(acc.x, w, v.x);
    kern::lse_merge_add(acc.y, w, v.y);
    kern::lse_merge_add(acc.z, w, v.z);
    kern::lse_merge_add(acc.w, w, v.w);
  };
  kern::LseMerge mg;
  if (count <= kInFlight) {
    // Up to kInFlight partials (FlashMLA's split requests, split-KV and cascade merges): their
    // LSEs and float4s loaded at once, one round trip behind the producer instead of two (the
    // float4 of an empty side is loaded too and never added).
    float lse_v[kInFlight];
    float4 o_v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      if (i < count) {
        lse_v[i] = lse_p[i * stride];
        o_v[i] = *reinterpret_cast<const float4*>(o_p + i * o_stride);
      }
    }
    mg = kern::lse_merge<kInFlight>([&](int i) { return lse_v[i]; }, count, base2);
#pragma unroll
    for (int i = 0; i < kInFlight; ++i)
      if (i < count) add(mg.weight(lse_v[i], base2), o_v[i]);
  } else {
    mg = kern::lse_merge<0>([&](int i) { return lse_p[i * stride]; }, count, base2);
#pragma unroll 4
    for (int i = 0; i < count; ++i) {
      const float w = mg.weight(lse_p[i * stride], base2);
      if (w != 0.f) add(w, *reinterpret_cast<const float4*>(o_p + i * o_stride));  // no load for an empty side
    }
  }
  store4(static_cast<Element*>(p.o) + row * p.head_size + d, acc);
  if (d == 0 && p.lse) {
    const int64_t token = row / p.num_heads, head = row % p.num_heads;
    p.lse[token * p.lse_token_stride + head * p.lse_head_stride] = mg.lse;
  }
}

template <class Element>
void launch(const MergeAttnParams& p, unsigned blocks, cudaStream_t stream) {
  const cudaError_t err =
      kern::launch_after_producer(merge_attn_states_kernel<Element>, dim3(blocks), dim3(kThreads), 0, stream, p);
  if (err != cudaSuccess)
    throw RuntimeError(std::string("merge_attn_states launch failed: ") + cudaGetErrorString(err));
}

}  // namespace

void launch_merge_attn_states(const MergeAttnParams& p, DType out_dtype, cudaStream_t stream) {
  if (p.head_size % 4 != 0)
    throw RuntimeError("launch_merge_attn_states: head_size must be a multiple of 4");
  if (p.seq_partials == nullptr && (p.num_partials < 1 || p.num_partials > kMaxPartials))
    throw RuntimeError("launch_merge_attn_states: partials must be in [1, 64]");
  if (p.seq_partials != nullptr && (p.tokens_per_seq < 1 || p.num_tokens % p.tokens_per_seq != 0))
    throw RuntimeError("launch_merge_attn_states: num_tokens must be a multiple of tokens_per_seq");
  const int64_t threads = static_cast<int64_t>(p.num_tokens) * p.num_heads * (p.head_size / 4);
  if (threads == 0) return;
  const auto blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  if (out_dtype == DType::f16) {
    launch<__half>(p, blocks, stream);
  } else if (out_dtype == DType::bf16) {
    launch<__nv_bfloat16>(p, blocks, stream);
  } else if (out_dtype == DType::f32) {
    launch<float>(p, blocks, stream);
  } else {
    throw RuntimeError("launch_merge_attn_states: output dtype must be fp16, bf16 or fp32");
  }
}

}  // namespace attn
