// FLASHMLA decode kernels for bf16: the mma.sync kernel (flashmla_decode.cuh) and the two sm_90a
// ones (flashmla_decode_sm90.cuh: the seesaw kernel; flashmla_decode_sm90_narrow.cuh: up to 32 rows).
#include "kernels/flashmla/flashmla_decode.cuh"
#include "kernels/flashmla/flashmla_decode_sm90.cuh"
#include "kernels/flashmla/flashmla_decode_sm90_narrow.cuh"

namespace attn::mla {
ATTN_FLASHMLA_INSTANTIATE(__nv_bfloat16)
}  // namespace attn::mla

namespace attn::mla::sm90 {
ATTN_FLASHMLA_SM90_INSTANTIATE(__nv_bfloat16)
ATTN_FLASHMLA_SM90_NARROW_INSTANTIATE(__nv_bfloat16)
}  // namespace attn::mla::sm90
