// The sm_90a prefill kernel for head size 96 (see flash_fwd_sm90.cuh: its tiles are padded to 128
// dims in shared memory) and its host side. Built for every architecture list; the kernel body
// exists only in the sm_90a image, and sm90_prefill_compiled<96>() tells the launcher whether that
// image is in this binary.
#include "kernels/flash_attn/flash_fwd_sm90.cuh"
#include "kernels/flash_attn/flash_fwd_sm90.hpp"

namespace attn::fa {
ATTN_FA_SM90_INSTANTIATE_HEAD_SIZE(96)
}  // namespace attn::fa
