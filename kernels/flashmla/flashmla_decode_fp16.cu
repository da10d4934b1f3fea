// FLASHMLA decode kernel for fp16 (see flashmla_decode.cuh).
#include "kernels/flashmla/flashmla_decode.cuh"

namespace attn::mla {
ATTN_FLASHMLA_INSTANTIATE(__half)
}  // namespace attn::mla
