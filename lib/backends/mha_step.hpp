#pragma once
// The device side of one paged MHA step that FLASH_ATTN and FLASHINFER share: one KV cache per
// layer, the step's Q, K and V, the NaN K/V that poisoning writes into the new slots, the slot
// mapping, O and LSE. Each backend keeps its own tables and workspaces beside it. CUDA builds only
// (mha_step_cuda.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "core/device.hpp"
#include "core/device_cache.hpp"
#include "metadata/common.hpp"
#include "model/batch.hpp"
#include "model/kv_cache.hpp"

namespace attn {

struct MhaStepBuffers {
  KvCacheLayout layout;
  CacheView view;
  LayerCaches caches;         // [num_layers] one cache of `layout` each, cache dtype
  DeviceBuffer q;             // [num_tokens, Hq, D] model dtype, rows in token_of order
  DeviceBuffer k_new, v_new;  // [num_tokens, Hkv, D] model dtype, batch order
  DeviceBuffer nan_kv;        // [num_tokens, Hkv, D] NaN: poisoning writes it into the new slots
  DeviceBuffer slot_mapping;  // [num_tokens] int64, batch order
  DeviceBuffer o;             // [num_tokens, Hq, D] model dtype, rows in token_of order
  DeviceBuffer lse;           // [num_tokens, Hq] fp32 in the kernels' log base, rows in token_of order

  MhaStepBuffers() = default;
  // Caches of `format` filled for b (RunOptions::num_layers, nan_all_but_last_layer; nan_keys: a
  // context key NaN in every cache, a new one NaN in k_new), the step's inputs uploaded on
  // `stream`. token_of[i]: the batch token of Q's and O's row i (empty: batch order).
  MhaStepBuffers(const Batch& b, const CommonAttentionMetadata& m, CacheFormat format, const RunOptions& opts,
                 cudaStream_t stream, const std::vector<int64_t>& token_of = {});
  // NaN over O and LSE, so that a row no kernel writes shows (the new slots are the backend's to
  // poison, through its own cache write).
  void poison_outputs(const AttentionSpec& s, int64_t num_tokens, cudaStream_t stream);
};

}  // namespace attn
