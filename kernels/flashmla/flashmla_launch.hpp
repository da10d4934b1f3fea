#pragma once
// Plain C++ entry points of the FLASHMLA kernels (defined in flashmla_launch.cu; the kernel
// instantiations of the three decode kernels live in flashmla_decode_<dtype>.cu; the prefill gather
// in flashmla_gather.cu).
#include <cuda_runtime_api.h>

#include "core/dtype.hpp"
#include "kernels/flashmla/flashmla_params.hpp"

namespace attn {

constexpr int kFlashMlaHeadDimK = 576;  // kv_lora_rank 512 + rope 64
constexpr int kFlashMlaHeadDimV = 512;  // kv_lora_rank
constexpr int kFlashMlaBlockM = 64;     // packed query rows per CTA
constexpr int kFlashMlaBlockN = 64;     // keys per tile = the cache block size

// True when the sm_90a kernel can run p on this device (Hopper, sm_90a in the build).
bool flashmla_sm90_available(const FlashMlaDecodeParams& p, DType dtype);
// The kernel that launch_flashmla_decode(p, dtype, kernel, ...) runs: "mma.sync", "wgmma" (the
// seesaw kernel) or "wgmma.narrow".
const char* flashmla_decode_kernel_name(const FlashMlaDecodeParams& p, DType dtype,
                                        FlashMlaKernel kernel = FlashMlaKernel::automatic);
// Packed query rows per request (q_len x heads) up to which the narrow kernel serves a decode.
constexpr int kFlashMlaNarrowMaxRows = 32;

// Split requests of at most this many pieces are merged by the seesaw kernel itself where
// p.merge_counters is set (a merge by one CTA reads every piece: more go to the combine kernel,
// which spreads them over the SMs).
constexpr int kFlashMlaMergeMaxPieces = 4;

// Split-KV MLA decode over p.num_parts partitions. dtype: fp16 or bf16 (q, cache and o).
// Returns whether the kernel that ran merged the split requests of at most
// kFlashMlaMergeMaxPieces pieces itself (p.merge_counters set and the seesaw kernel chosen); the
// combine must merge the others, or all of them when it returns false.
// Throws RuntimeError on an unsupported dtype, a wgmma request it cannot serve, or a failed
// launch. Allocates nothing, never syncs.
bool launch_flashmla_decode(const FlashMlaDecodeParams& p, DType dtype, FlashMlaKernel kernel, cudaStream_t stream);

// The gather of one MLA prefill pass (MlaGatherParams). dtype: fp16 or bf16. Never syncs.
void launch_mla_gather(const MlaGatherParams& p, DType dtype, cudaStream_t stream);

}  // namespace attn
