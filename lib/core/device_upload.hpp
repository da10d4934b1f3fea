#pragma once
// Host -> device copies of a batch's inputs, shared by the CUDA backends. CUDA builds only.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/device.hpp"
#include "core/parallel.hpp"
#include "model/batch.hpp"

namespace attn {

// A device copy of v (at least one element allocated, so an empty table is still a valid pointer).
template <class T>
DeviceBuffer upload_vector(const std::vector<T>& v) {
  DeviceBuffer buf(std::max<std::size_t>(v.size(), 1) * sizeof(T));
  if (!v.empty()) buf.upload(v.data(), v.size() * sizeof(T));
  return buf;
}

// Every new token's value of one input tensor in `dtype`, [num_tokens, heads, head_size], the
// tokens in the order token_of lists (token_of[i] = the batch token stored at row i; empty =
// batch order). value(request, position, head, dim) gives the value.
template <class Fn>
DeviceBuffer upload_token_values(const Batch& b, int heads, int head_size, DType dtype, Fn value,
                                 const std::vector<int64_t>& token_of = {}) {
  const int64_t T = b.num_tokens();
  std::vector<int64_t> row_of(static_cast<std::size_t>(T));
  for (int64_t i = 0; i < T; ++i) row_of[static_cast<std::size_t>(token_of.empty() ? i : token_of[static_cast<std::size_t>(i)])] = i;
  std::vector<uint8_t> host(static_cast<std::size_t>(T * heads * head_size) * dtype_size(dtype));
  parallel_for(b.num_reqs(), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const RequestShape& rq = b.requests[r];
      for (int i = 0; i < rq.query_len; ++i) {
        const int64_t row = row_of[static_cast<std::size_t>(b.query_start_loc[r] + i)];
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < head_size; ++d)
            store_as(dtype, host.data(), static_cast<std::size_t>((row * heads + h) * head_size + d),
                     value(static_cast<int>(r), rq.context_len + i, h, d));
      }
    }
  });
  return upload_vector(host);
}

}  // namespace attn
