// Forward kernels for head size 64 (see flash_fwd_kernel.cuh).
#include "kernels/flash_attn/flash_fwd_kernel.cuh"

namespace attn::fa {
ATTN_FA_INSTANTIATE_HEAD_SIZE(64)
ATTN_FA_INSTANTIATE_SPEC(64)
}  // namespace attn::fa
