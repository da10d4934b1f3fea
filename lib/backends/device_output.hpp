#pragma once
// A CUDA backend's outputs on the device, back to the host's AttentionOutput: shared by FLASH_ATTN,
// FLASHINFER and FLASHMLA, whose kernels all leave O in the model dtype and the LSE in fp32. CUDA
// builds only.
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "core/device.hpp"
#include "core/dtype.hpp"
#include "core/parallel.hpp"

namespace attn {

// o: [rows, heads, head_size_v] of `dtype`; lse: [rows, heads] fp32, in the log base that
// lse_to_natural takes to the natural log (1 for e, ln 2 for FlashInfer's base 2). Row i of both is
// batch token token_of[i] (empty: the batch's own order). The caller synchronized the stream that
// wrote them.
inline AttentionOutput download_output(const DeviceBuffer& o, const DeviceBuffer& lse, DType dtype, int64_t num_tokens,
                                       int heads, int head_size_v, const std::vector<int64_t>& token_of = {},
                                       float lse_to_natural = 1.f) {
  AttentionOutput out;
  out.num_tokens = num_tokens;
  out.num_heads = heads;
  out.head_size_v = head_size_v;
  const std::size_t row = static_cast<std::size_t>(heads) * head_size_v;
  const std::size_t n = static_cast<std::size_t>(num_tokens) * row;
  std::vector<uint8_t> raw(n * dtype_size(dtype));
  if (n) o.download(raw.data(), raw.size());
  std::vector<float> lse_rows(static_cast<std::size_t>(num_tokens) * heads);
  if (!lse_rows.empty()) lse.download(lse_rows.data(), lse_rows.size() * sizeof(float));
  out.o.resize(n);
  out.lse.resize(lse_rows.size());
  parallel_for(num_tokens, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const std::size_t src = static_cast<std::size_t>(i);
      const std::size_t dst = token_of.empty() ? src : static_cast<std::size_t>(token_of[src]);
      for (std::size_t e = 0; e < row; ++e) out.o[dst * row + e] = load_as(dtype, raw.data(), src * row + e);
      for (int h = 0; h < heads; ++h) out.lse[dst * heads + h] = lse_rows[src * heads + h] * lse_to_natural;
    }
  });
  return out;
}

}  // namespace attn
