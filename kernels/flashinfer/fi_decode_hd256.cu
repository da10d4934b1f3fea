// FLASHINFER decode kernels for head size 256 (see fi_decode.cuh).
#include "kernels/flashinfer/fi_decode.cuh"

namespace attn::fi {
ATTN_FI_DECODE_INSTANTIATE_HEAD_SIZE(256)
}  // namespace attn::fi
