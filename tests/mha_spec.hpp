#pragma once
// The MHA spec the backend tests build their batches on, CPU and GPU alike.
#include "model/spec.hpp"

namespace attn::testing {

// hq query heads over hkv kv heads of size d, the cache in the model dtype; the softmax scale is
// left to make_batch (1 / sqrt(d)).
inline AttentionSpec mha_spec(int hq, int hkv, int d, DType dtype = DType::bf16, int block_size = 16,
                              KvLayout layout = KvLayout::NHD) {
  AttentionSpec s;
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_size_qk = s.head_size_v = d;
  s.dtype = s.kv_cache_dtype = dtype;
  s.block_size = block_size;
  s.kv_layout = layout;
  return s;
}

}  // namespace attn::testing
