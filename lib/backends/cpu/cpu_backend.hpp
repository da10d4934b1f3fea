#pragma once
// The `cpu` backend (vLLM's CPU_ATTN): portable paged attention on the host, the default where
// no GPU is present and the backend every other one is diffed against after the reference.
//
// Cache formats: MLA specs use the flashmla format; otherwise NHD specs use the flash_attn
// format and HND specs the flashinfer format, so both layouts and all three formats run here.
// Outputs (O and LSE) are written in fp32: accumulation never narrows to the model dtype.
#include <memory>

#include "backends/backend.hpp"

namespace attn {

struct CpuBackendOptions {
  // Context tokens one MLA prefill chunk may gather, shared by the prefills that have context
  // (vLLM's chunked-prefill workspace). Smaller = more chunks.
  int mla_workspace_tokens = 8192;
  // Query rows ((token, q head) pairs of one kv head) per parallel work item.
  int rows_per_item = 64;
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace attn
