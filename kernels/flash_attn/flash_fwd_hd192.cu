// Forward kernels for head size 192 (see flash_fwd_kernel.cuh): the MLA prefill of FLASHMLA
// (qk 192 = nope 128 + rope 64; V up-projected to 128 and zero-padded to 192, as vLLM pads V for
// FA2; the caller slices the output). Kept in quick builds, which serve MLA prefills.
#include "kernels/flash_attn/flash_fwd_kernel.cuh"

namespace attn::fa {
ATTN_FA_INSTANTIATE_HEAD_SIZE(192)
}  // namespace attn::fa
