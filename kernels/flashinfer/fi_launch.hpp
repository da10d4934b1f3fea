#pragma once
// Plain C++ entry points of the FLASHINFER kernels. fi_unsupported_reason is the one statement
// of what the kernels run: the backend's supports() and the launchers both use it.
#include <cuda_runtime_api.h>

#include <string>

#include "core/dtype.hpp"
#include "kernels/flashinfer/fi_params.hpp"

namespace attn {

// What selects an instantiation.
struct FiKernelConfig {
  int head_dim = 128;
  DType dtype = DType::bf16;     // q and o
  DType kv_dtype = DType::bf16;  // the cache: dtype, fp8_e4m3 or fp8_e5m2
  int group = 1;                 // num_qo_heads / num_kv_heads
};

// "" when this build runs `c`, else why not.
std::string fi_unsupported_reason(const FiKernelConfig& c);

// vLLM's rule: the decode wrapper runs on tensor cores (the prefill kernel) when the group is
// larger than 4; the CUDA-core decode kernel is instantiated for groups 1-4.
bool fi_decode_uses_tensor_cores(int group);

// CTAs of the CUDA-core decode kernel resident per SM (the decode plan's max_grid / SMs).
int fi_decode_blocks_per_sm(const FiKernelConfig& c);

// CUDA-core decode over grid_work work items (>= *p.num_work: padded for graphs).
void launch_fi_decode(const FiAttentionParams& p, const FiKernelConfig& c, int grid_work, cudaStream_t stream);
// Prefill (and tensor-core decode) with q tiles of p.cta_tile_q packed rows.
void launch_fi_prefill(const FiAttentionParams& p, const FiKernelConfig& c, int grid_work, cudaStream_t stream);

}  // namespace attn
