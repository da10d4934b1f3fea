#pragma once
// FLASHINFER: vLLM's FlashInfer backend re-implemented (docs/BACKGROUND.md, "FLASHINFER"): the
// metadata builder (decodes first, CSR page table), plan-time split-KV scheduling, a CUDA-core
// decode kernel (GQA group <= 4) and a tensor-core prefill kernel that also serves larger
// groups' decodes, merge in base 2, and the 2-level cascade.
#include <memory>

#include "backends/backend.hpp"

namespace attn {

struct FlashInferOptions {
  // On sm_90a, a prefill pass of a 16-bit cache with no decode-sized request runs the warp-
  // specialised wgmma kernel (FlashInfer's Hopper prefill is FlashAttention-3-derived; here it is
  // the sm_90a kernel of kernels/flash_attn, fed the CSR page table), one tile per 128 packed
  // rows and no kv split, in place of the mma.sync prefill and its plan. false keeps mma.sync
  // (tests, A/B; ATTN_FI_SM90=0 does the same for the registry's backend).
  bool sm90_prefill = true;
};

std::unique_ptr<Backend> make_flashinfer_backend(const FlashInferOptions& options = {});

}  // namespace attn
