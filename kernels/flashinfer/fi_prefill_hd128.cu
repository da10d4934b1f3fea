// FLASHINFER prefill (and tensor-core decode) kernels for head size 128 (see fi_prefill.cuh).
#include "kernels/flashinfer/fi_prefill.cuh"

namespace attn::fi {
ATTN_FI_PREFILL_INSTANTIATE_HEAD_SIZE(128, ATTN_FI_PREFILL_INSTANTIATE_TILES)
}  // namespace attn::fi
