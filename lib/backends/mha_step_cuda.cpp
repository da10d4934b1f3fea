#include "backends/mha_step.hpp"

#include <algorithm>
#include <limits>

#include "core/device_upload.hpp"
#include "kernels/cache/cache_launch.hpp"

namespace attn {

MhaStepBuffers::MhaStepBuffers(const Batch& b, const CommonAttentionMetadata& m, CacheFormat format,
                               const RunOptions& opts, cudaStream_t stream, const std::vector<int64_t>& token_of)
    : layout(make_cache_layout(b, format)), view(cache_view(layout)) {
  const AttentionSpec& s = b.spec;
  const int64_t T = b.num_tokens();
  const int D = s.head_size_qk;
  caches = LayerCaches(b, layout, opts.num_layers, stream, opts.nan_all_but_last_layer, opts.nan_keys);
  q = upload_token_values(
      b, s.num_q_heads, D, s.dtype, [&](int r, int pos, int h, int d) { return b.q(r, pos, h, d); }, token_of);
  k_new = upload_token_values(b, s.num_kv_heads, D, s.dtype, [&](int r, int pos, int h, int d) {
    return nan_in_input(opts.nan_keys, r, pos, h) ? std::numeric_limits<float>::quiet_NaN() : b.k_input(r, pos, h, d);
  });
  v_new = upload_token_values(b, s.num_kv_heads, D, s.dtype,
                              [&](int r, int pos, int h, int d) { return b.v_input(r, pos, h, d); });
  const int64_t rows = std::max<int64_t>(T, 1);
  nan_kv = DeviceBuffer(rows * s.num_kv_heads * D * dtype_size(s.dtype));
  launch_fill_nan(nan_kv.data(), rows * s.num_kv_heads * D, s.dtype, stream);
  slot_mapping = upload_vector(m.slot_mapping);
  o = DeviceBuffer(rows * s.num_q_heads * s.head_size_v * dtype_size(s.dtype));
  lse = DeviceBuffer(rows * s.num_q_heads * sizeof(float));
}

void MhaStepBuffers::poison_outputs(const AttentionSpec& s, int64_t num_tokens, cudaStream_t stream) {
  launch_fill_nan(o.data(), num_tokens * s.num_q_heads * s.head_size_v, s.dtype, stream);
  launch_fill_nan(lse.data(), num_tokens * s.num_q_heads, DType::f32, stream);
}

}  // namespace attn
