#pragma once
// Host entry points of the sm_90a prefill kernel (flash_fwd_sm90.cuh), one instantiation file per
// head size (flash_fwd_sm90_hd{64,96,128,192,256}.cu). Plain C++.
#include <cuda_runtime_api.h>

#include "kernels/flash_attn/flash_attn_params.hpp"

namespace attn::fa {

// Whether this binary holds an sm_90a image of the kernel for head size kHeadDim (64, 96, 128, 192, 256)
// and the current device runs it (compute capability 9.0). Cached after the first call.
template <int kHeadDim>
bool sm90_prefill_compiled();

// Forward pass over p.num_tiles tiles of sm90_block_m(kHeadDim, decodes) packed rows, persistent
// CTAs. fp16 selects a __half model dtype, else bf16; fp8: the cache is fp8 (e4m3/e5m2 by
// p.kv_fp8_e5m2), else the model dtype; fp8_mma (head size 128, an e4m3 cache, p.q_scale > 0): Q
// K^T and P V on fp8 tensor cores; decodes: some sequence is decode-sized
// (FlashAttnTiling::small_seqs), so its tile's second consumer has no rows and skips its products
// (16-bit caches, head sizes but 192). kHeadDimV: V's and O's head size, kHeadDim or 128 under 192
// (qk 192 / v 128: prefills over a 16-bit cache; V's rows keep K's strides, dims past 128 unread).
template <int kHeadDim, int kHeadDimV = kHeadDim>
void run_flash_fwd_sm90(const FlashAttnParams& p, bool fp16, bool fp8, bool fp8_mma, bool decodes, cudaStream_t stream);

}  // namespace attn::fa
