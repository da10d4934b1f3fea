#pragma once
// FLASHMLA: vLLM's FlashMLA backend for MLA layers (DeepSeek-V2/V3). Decode runs the absorbed
// 576-wide MQA over the latent cache, split by get_mla_metadata's tile scheduler and combined
// by LSE; W_UK and W_UV are applied around it as batched GEMMs. Prefills take vLLM's MLA
// common path (flashmla_prefill.hpp).
#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "kernels/flashmla/flashmla_params.hpp"

namespace attn {

struct FlashMlaOptions {
  // run() = the decode kernel + its combine only (no cache write, no W_UK/W_UV GEMMs), as
  // FlashMLA's flash_mla_with_kvcache; fetch() then refuses. For timing the kernel alone
  // (attn-bench-micro); the registry's backend runs the whole path.
  bool kernel_only = false;
  // Context tokens gathered and up-projected per chunk pass of the prefill, shared by the
  // prefills that have context (vLLM's chunked-context workspace).
  int workspace_tokens = 32768;
  // The decode kernel: automatic (wgmma on Hopper), or one of the two for
  // tests and A/B runs (FlashMlaKernel, kernels/flashmla/flashmla_params.hpp).
  FlashMlaKernel decode_kernel = FlashMlaKernel::automatic;
  // The seesaw decode kernel merges split requests of up to kFlashMlaMergeMaxPieces pieces itself
  // (the last piece's CTA), instead of the combine kernel after it; false (or the environment
  // variable ATTN_FLASHMLA_FUSED_MERGE=0) leaves every merge to the combine, for tests and A/B runs.
  bool fused_merge = true;
};

std::unique_ptr<Backend> make_flashmla_backend(const FlashMlaOptions& options = {});

// The selector of the backend (also used by create()): "" when FLASHMLA runs `spec` and
// `batch`, else the reason. The refusals of the seed use its messages.
std::string flashmla_unsupported_reason(const AttentionSpec& spec, const Batch& batch);

}  // namespace attn
