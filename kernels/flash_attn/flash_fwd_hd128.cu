// Forward kernels for head size 128 (see flash_fwd_kernel.cuh).
#include "kernels/flash_attn/flash_fwd_kernel.cuh"

namespace attn::fa {
ATTN_FA_INSTANTIATE_HEAD_SIZE(128)
ATTN_FA_INSTANTIATE_SPEC(128)
}  // namespace attn::fa
