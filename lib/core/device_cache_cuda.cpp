#include "core/device_cache.hpp"

#include <string>
#include <vector>

#include "core/host_memory.hpp"
#include "kernels/cache/cache_launch.hpp"

namespace attn {

CacheView cache_view(const KvCacheLayout& l) {
  CacheView v;
  v.k_offset = l.k_index(0, 0, 0, 0);
  v.v_offset = l.v_index(0, 0, 0, 0);
  v.k.block = l.k_index(1, 0, 0, 0) - v.k_offset;
  v.k.slot = l.k_index(0, 1, 0, 0) - v.k_offset;
  v.k.head = l.num_kv_heads > 1 ? l.k_index(0, 0, 1, 0) - v.k_offset : 0;
  v.v.block = l.v_index(1, 0, 0, 0) - v.v_offset;
  v.v.slot = l.v_index(0, 1, 0, 0) - v.v_offset;
  v.v.head = l.num_kv_heads > 1 ? l.v_index(0, 0, 1, 0) - v.v_offset : 0;
  // The kernels walk the head dim contiguously.
  if (l.k_index(0, 0, 0, 1) - v.k_offset != 1 || l.v_index(0, 0, 0, 1) - v.v_offset != 1)
    throw RuntimeError(std::string("cache_view: layout ") + to_string(l.format) + " has a non-unit dim stride");
  return v;
}

DeviceCacheFill::DeviceCacheFill(const Batch& b, const KvCacheLayout& layout)
    : layout_(layout), view_(cache_view(layout)) {
  const int n = b.num_reqs();
  std::vector<int64_t> start(static_cast<size_t>(n) + 1, 0);
  std::vector<uint32_t> ids(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    start[r + 1] = start[r] + b.requests[r].context_len;
    // The id of the request's own tokens (past the shared prefix).
    ids[r] = b.value_req(r, b.shared_prefix_len);
  }
  block_table_ = DeviceBuffer(b.block_table.size() * sizeof(int32_t));
  block_table_.upload(b.block_table.data(), block_table_.bytes());
  context_start_ = DeviceBuffer(start.size() * sizeof(int64_t));
  context_start_.upload(start.data(), context_start_.bytes());
  req_ids_ = DeviceBuffer(ids.size() * sizeof(uint32_t));
  req_ids_.upload(ids.data(), req_ids_.bytes());

  const bool mla = b.spec.use_mla;
  FillCacheParams& p = params_;
  p.k_strides = view_.k;
  p.v_strides = view_.v;
  p.block_table = block_table_.as<const int32_t>();
  p.context_start = context_start_.as<const int64_t>();
  p.req_ids = req_ids_.as<const uint32_t>();
  p.num_reqs = n;
  p.max_blocks_per_req = b.max_blocks_per_req;
  p.total_context_tokens = start.back();
  p.block_size = layout.block_size;
  p.shared_prefix_len = b.shared_prefix_len;
  p.num_kv_heads = mla ? 1 : layout.num_kv_heads;
  p.head_size_k = layout.head_size_k;
  p.head_size_v = layout.head_size_v;
  p.seed = b.seed;
  p.regime = b.regime;
  p.k_scale = b.spec.k_scale;
  p.v_scale = mla ? b.spec.k_scale : b.spec.v_scale;  // one latent entry, one scale
  p.model_dtype = b.spec.dtype;
  p.cache_dtype = layout.dtype;
  p.mla = mla;
}

void DeviceCacheFill::launch(void* cache, cudaStream_t stream) const {
  launch_fill_nan(cache, layout_.num_elements(), layout_.dtype, stream);
  FillCacheParams p = params_;
  const std::size_t esize = dtype_size(layout_.dtype);
  p.k_cache = static_cast<char*>(cache) + view_.k_offset * static_cast<int64_t>(esize);
  // FlashMLA's V is a view of the latent entry: nothing of its own to write.
  p.v_cache = layout_.format == CacheFormat::flashmla
                  ? nullptr
                  : static_cast<char*>(cache) + view_.v_offset * static_cast<int64_t>(esize);
  launch_fill_cache(p, stream);
}

double DeviceCacheFill::bytes_written() const {
  const double per_token = layout_.format == CacheFormat::flashmla
                               ? params_.head_size_k
                               : static_cast<double>(params_.num_kv_heads) * (params_.head_size_k + params_.head_size_v);
  return static_cast<double>(layout_.bytes()) +
         static_cast<double>(params_.total_context_tokens) * per_token * static_cast<double>(dtype_size(layout_.dtype));
}

void fill_cache_device(const Batch& b, const KvCacheLayout& layout, void* cache, cudaStream_t stream) {
  DeviceCacheFill fill(b, layout);
  fill.launch(cache, stream);
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));  // the tables die with `fill`
}

DeviceBuffer make_device_cache(const Batch& b, const KvCacheLayout& layout, cudaStream_t stream) {
  DeviceBuffer cache(layout.bytes());
  fill_cache_device(b, layout, cache.data(), stream);
  return cache;
}

ReshapeAndCacheParams cache_write_params(const Batch& b, const CacheView& view, void* cache,
                                         const int64_t* slot_mapping, const void* key, const void* value) {
  const AttentionSpec& s = b.spec;
  const std::size_t es = dtype_size(s.kv_cache_dtype);
  ReshapeAndCacheParams rc{};
  rc.key = key;
  rc.value = value;
  rc.key_stride = static_cast<int64_t>(s.num_kv_heads) * s.head_size_qk;
  rc.value_stride = static_cast<int64_t>(s.num_kv_heads) * s.head_size_v;
  rc.slot_mapping = slot_mapping;
  rc.k_cache = static_cast<uint8_t*>(cache) + view.k_offset * es;
  rc.v_cache = static_cast<uint8_t*>(cache) + view.v_offset * es;
  rc.k_strides = view.k;
  rc.v_strides = view.v;
  rc.num_tokens = b.num_tokens();
  rc.num_kv_heads = s.num_kv_heads;
  rc.head_size_k = s.head_size_qk;
  rc.head_size_v = s.head_size_v;
  rc.block_size = s.block_size;
  rc.k_scale = s.k_scale;
  rc.v_scale = s.v_scale;
  rc.input_dtype = s.dtype;
  rc.cache_dtype = s.kv_cache_dtype;
  return rc;
}

LayerCaches::LayerCaches(const Batch& b, const KvCacheLayout& layout, int num_layers, cudaStream_t stream,
                         bool nan_all_but_last, const std::vector<TokenKey>& nan_keys) {
  const int n = num_layers < 1 ? 1 : num_layers;
  const double total = static_cast<double>(layout.bytes()) * n;
  std::size_t free_bytes = 0, total_bytes = 0;
  if (n > 1 && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && total > static_cast<double>(free_bytes))
    throw RuntimeError("[run] num_layers = " + std::to_string(n) + ": " + std::to_string(n) + " KV caches of " +
                       format_bytes(static_cast<double>(layout.bytes())) + " need " + format_bytes(total) +
                       "; the device has " + format_bytes(static_cast<double>(free_bytes)) + " free of " +
                       format_bytes(static_cast<double>(total_bytes)) + " (fewer layers, or a smaller batch)");
  caches_.reserve(static_cast<size_t>(n));
  caches_.push_back(make_device_cache(b, layout, stream));
  // The other layers copy the first: the same bytes, without the fill's tables again.
  for (int l = 1; l < n; ++l) {
    caches_.emplace_back(layout.bytes());
    ATTN_CUDA_CHECK(cudaMemcpyAsync(caches_.back().data(), caches_.front().data(), layout.bytes(),
                                    cudaMemcpyDeviceToDevice, stream));
  }
  // All-ones bytes are a NaN in every cache dtype (fp16, bf16, e4m3, e5m2).
  if (nan_all_but_last)
    for (int l = 0; l + 1 < n; ++l)
      ATTN_CUDA_CHECK(cudaMemsetAsync(caches_[static_cast<size_t>(l)].data(), 0xff, layout.bytes(), stream));
  for (const TokenKey& nan_key : nan_keys) {
    if (is_new_token_key(b, nan_key)) continue;  // the backend's input
    const ElementRange key = cached_key_elements(b, layout, nan_key);
    const std::size_t es = dtype_size(layout.dtype);
    for (DeviceBuffer& cache : caches_)
      ATTN_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(cache.data()) + key.first * static_cast<int64_t>(es), 0xff,
                                      static_cast<std::size_t>(key.count) * es, stream));
  }
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace attn
