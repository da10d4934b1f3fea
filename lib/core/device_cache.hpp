#pragma once
// Device-side paged KV caches of a Batch: the layout as kernel strides, and the device fill
// (the twin of fill_cache_host: bit-identical bytes, without a host copy of the cache).
// CUDA builds only.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/device.hpp"
#include "kernels/cache/cache_params.hpp"
#include "model/kv_cache.hpp"

namespace attn {

// Where K and V live inside one cache tensor of `layout`, in elements of the cache dtype.
struct CacheView {
  int64_t k_offset = 0;  // element offset of K (block 0, slot 0, head 0, dim 0)
  int64_t v_offset = 0;  // of V (MLA: equal to k_offset, V is a view of the latent entry)
  CacheStrides k, v;
};
// Derived from KvCacheLayout::k_index/v_index, so it follows the layout's own definition.
CacheView cache_view(const KvCacheLayout& layout);

// reshape_and_cache_flash of the batch's new tokens into `cache` (a tensor of the view's layout):
// key/value [num_tokens, Hkv, D] model dtype, slot_mapping [num_tokens] int64 (device).
ReshapeAndCacheParams cache_write_params(const Batch& b, const CacheView& view, void* cache,
                                         const int64_t* slot_mapping, const void* key, const void* value);

// The fill of one batch's cache, bound once (its tables uploaded), launchable many times
// (e.g. one cache per layer, or inside a benchmark loop).
class DeviceCacheFill {
 public:
  DeviceCacheFill(const Batch& b, const KvCacheLayout& layout);
  // NaN over the whole cache, then every context token. `cache` holds layout.bytes() bytes.
  void launch(void* cache, cudaStream_t stream) const;
  const KvCacheLayout& layout() const { return layout_; }
  int64_t context_tokens() const { return params_.total_context_tokens; }
  // Bytes the fill writes: the NaN pass over the cache plus the context tokens' K/V.
  double bytes_written() const;

 private:
  KvCacheLayout layout_;
  DeviceBuffer block_table_;     // [num_reqs, max_blocks_per_req] int32
  DeviceBuffer context_start_;   // [num_reqs + 1] int64
  DeviceBuffer req_ids_;         // [num_reqs] uint32
  FillCacheParams params_{};     // cache pointers left null until launch()
  CacheView view_;
};

// Fills `cache` (layout.bytes() bytes) and waits for it on `stream`.
void fill_cache_device(const Batch& b, const KvCacheLayout& layout, void* cache, cudaStream_t stream);
// A new device cache of `layout`, filled for `b` (stream synchronized before returning).
DeviceBuffer make_device_cache(const Batch& b, const KvCacheLayout& layout, cudaStream_t stream);

// One cache per layer ([run] num_layers): a serving step plans once and runs every layer over its
// own cache, so a layer's pages are not in L2 from the layer before. Every cache holds the same
// bytes (the batch's), so any layer's output is the batch's output; poisoning each layer's new
// slots catches a layer that reads a cache its write did not reach. The caches' total is checked
// against the device's free memory first, so too many layers fail with the key's name rather than
// a bare cudaMalloc error.
class LayerCaches {
 public:
  LayerCaches() = default;
  // nan_all_but_last: every cache but the last NaN throughout (RunOptions::nan_all_but_last_layer);
  // nan_keys: those of context tokens NaN in every cache (RunOptions::nan_keys; a new token's key is
  // the backend's input to plant).
  LayerCaches(const Batch& b, const KvCacheLayout& layout, int num_layers, cudaStream_t stream,
              bool nan_all_but_last = false, const std::vector<TokenKey>& nan_keys = {});
  int size() const { return static_cast<int>(caches_.size()); }
  void* data(int layer) const { return caches_[static_cast<size_t>(layer)].data(); }
  template <class T>
  T* as(int layer) const { return caches_[static_cast<size_t>(layer)].as<T>(); }

 private:
  std::vector<DeviceBuffer> caches_;
};

}  // namespace attn
