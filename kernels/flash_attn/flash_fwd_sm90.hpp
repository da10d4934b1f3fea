#pragma once
// Host entry points of the sm_90a prefill kernel (flash_fwd_sm90.cuh), one instantiation file per
// head size (flash_fwd_sm90_hd{64,128,192,256}.cu). Plain C++.
#include <cuda_runtime_api.h>

#include "kernels/flash_attn/flash_attn_params.hpp"

namespace attn::fa {

// Whether this binary holds an sm_90a image of the kernel for head size kHeadDim (64, 128, 192, 256)
// and the current device runs it (compute capability 9.0). Cached after the first call.
template <int kHeadDim>
bool sm90_prefill_compiled();

// Forward pass over p.num_tiles tiles of 128 packed rows (a 16-bit cache of the model dtype),
// grid (num_tiles, num_kv_heads, num_splits). fp16 selects __half, else bf16.
template <int kHeadDim>
void run_flash_fwd_sm90(const FlashAttnParams& p, bool fp16, cudaStream_t stream);

}  // namespace attn::fa
