// FLASHMLA decode kernel for bf16 (see flashmla_decode.cuh).
#include "kernels/flashmla/flashmla_decode.cuh"

namespace attn::mla {
ATTN_FLASHMLA_INSTANTIATE(__nv_bfloat16)
}  // namespace attn::mla
