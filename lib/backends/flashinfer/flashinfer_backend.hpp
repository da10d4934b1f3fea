#pragma once
// FLASHINFER: vLLM's FlashInfer backend re-implemented (docs/BACKGROUND.md, "FLASHINFER"): the
// metadata builder (decodes first, CSR page table), plan-time split-KV scheduling, a CUDA-core
// decode kernel (GQA group <= 4) and a tensor-core prefill kernel that also serves larger
// groups' decodes, merge in base 2, and the 2-level cascade.
#include <memory>

#include "backends/backend.hpp"

namespace attn {

std::unique_ptr<Backend> make_flashinfer_backend();

}  // namespace attn
