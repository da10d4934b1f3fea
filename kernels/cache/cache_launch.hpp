#pragma once
// Launchers of the paged KV-cache kernels (plain C++ interface; defined in cache_kernels.cu).
// All are stream-ordered and never synchronize; launch errors throw RuntimeError.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cache/cache_params.hpp"

namespace attn {

void launch_reshape_and_cache_flash(const ReshapeAndCacheParams& p, cudaStream_t stream);
void launch_concat_and_cache_mla(const ConcatAndCacheMlaParams& p, cudaStream_t stream);
void launch_copy_blocks(const CopyBlocksParams& p, cudaStream_t stream);

// swap_blocks: one cudaMemcpyAsync per (src, dst) pair between two caches of the same layout,
// device <-> pinned host (or device <-> device).
//   block_mapping: [num_pairs, 2] host array of (src block, dst block)
void swap_blocks(const void* src, void* dst, int64_t block_bytes, int64_t block_stride_bytes,
                 const int64_t* block_mapping, int64_t num_pairs, cudaMemcpyKind kind, cudaStream_t stream);

// Every element of `data` ([num_elements], dtype) set to that dtype's NaN pattern
// (the same bits as store_nan()).
void launch_fill_nan(void* data, int64_t num_elements, DType dtype, cudaStream_t stream);
// Writes the context tokens (the NaN pass is launch_fill_nan, run first by the caller).
void launch_fill_cache(const FillCacheParams& p, cudaStream_t stream);

}  // namespace attn
