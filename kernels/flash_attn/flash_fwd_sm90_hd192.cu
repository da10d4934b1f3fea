// The sm_90a prefill kernel for head size 192, and for qk 192 / v 128 (the MLA prefill's; see
// flash_fwd_sm90.cuh), and its host side. Built for every architecture list; the kernel body exists only in the sm_90a
// image, and sm90_prefill_compiled<192>() tells the launcher whether that image is in this binary.
#include "kernels/flash_attn/flash_fwd_sm90.cuh"
#include "kernels/flash_attn/flash_fwd_sm90.hpp"

namespace attn::fa {
ATTN_FA_SM90_INSTANTIATE_HEAD_SIZE(192)
// qk 192 / v 128 (the MLA prefill).
template void run_flash_fwd_sm90<192, 128>(const FlashAttnParams&, bool, bool, bool, bool, cudaStream_t);
}  // namespace attn::fa
