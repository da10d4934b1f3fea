#include "model/spec.hpp"

#include <cmath>

namespace attn {

// ALiBi (Press et al., "Train Short, Test Long"): for n a power of two the slopes form the
// geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8). Other n take the sequence of the largest
// power of two p below n, then fill the remaining n - p heads with the odd terms of the
// sequence for 2p (its terms interleave the first one's). Computed in double and rounded once,
// so every consumer (reference, kernels) sees the same float slopes.
std::vector<float> alibi_slopes(int num_heads) {
  std::vector<float> slopes;
  if (num_heads <= 0) return slopes;
  slopes.reserve(static_cast<size_t>(num_heads));
  int p = 1;
  while (p * 2 <= num_heads) p *= 2;
  for (int i = 1; i <= p; ++i) {
    slopes.push_back(static_cast<float>(std::exp2(-8.0 * i / p)));
  }
  const int extra = num_heads - p;  // < p
  for (int j = 0; j < extra; ++j) {
    const int power = 2 * j + 1;  // odd powers of the 2p sequence's base
    slopes.push_back(static_cast<float>(std::exp2(-8.0 * power / (2 * p))));
  }
  return slopes;
}

namespace {

AttentionSpec mha(int num_q_heads, int num_kv_heads, int head_size) {
  AttentionSpec s;
  s.num_q_heads = num_q_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_size_qk = head_size;
  s.head_size_v = head_size;
  s.dtype = DType::bf16;
  s.kv_cache_dtype = DType::bf16;
  s.block_size = 16;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size)));
  return s;
}

// DeepSeek-V3 MLA: one latent "kv head" of kv_lora_rank + rope = 576, FlashMLA's 64-token pages.
AttentionSpec mla(int num_q_heads) {
  AttentionSpec s;
  s.use_mla = true;
  s.mla = MlaDims{};  // 512 / 64 / 128 / 128
  s.num_q_heads = num_q_heads;
  s.num_kv_heads = 1;
  s.head_size_qk = s.mla.qk_head_dim();
  s.head_size_v = s.mla.v_head_dim;
  s.dtype = DType::bf16;
  s.kv_cache_dtype = DType::bf16;
  s.block_size = 64;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_size_qk)));
  return s;
}

std::vector<ModelPreset> build_presets() {
  std::vector<ModelPreset> p;
  p.push_back({"llama3-8b", "meta-llama/Meta-Llama-3-8B config.json", mha(32, 8, 128), 0});
  p.push_back({"llama3-70b-tp8",
               "meta-llama/Meta-Llama-3-70B config.json (64 q / 8 kv heads) per rank of tensor parallel 8",
               mha(8, 1, 128), 0});
  p.push_back({"qwen2-7b", "Qwen/Qwen2-7B config.json (GQA ratio 7)", mha(28, 4, 128), 0});
  {
    AttentionSpec s = mha(32, 8, 128);
    s.sliding_window = 4096;
    p.push_back({"mistral-7b", "mistralai/Mistral-7B-v0.1 config.json (sliding_window 4096)", s, 0});
  }
  {
    // query_pre_attn_scalar = 256 = head_dim, so the scale is the usual 1/sqrt(256).
    AttentionSpec s = mha(16, 8, 256);
    s.logits_soft_cap = 50.0f;
    s.sliding_window = 4096;
    p.push_back({"gemma2-9b",
                 "google/gemma-2-9b config.json (attn_logit_softcapping 50, sliding_window 4096 on "
                 "its local layers)",
                 s, 0});
  }
  {
    AttentionSpec s = mha(64, 8, 64);
    s.sinks = true;
    s.sliding_window = 128;
    p.push_back({"gpt-oss-20b",
                 "openai/gpt-oss-20b config.json (attention sinks, sliding_window 128 on its "
                 "sliding layers)",
                 s, 0});
  }
  p.push_back({"llama4-scout",
               "meta-llama/Llama-4-Scout-17B-16E config.json text_config (attention_chunk_size "
               "8192 on its local layers)",
               mha(40, 8, 128), 8192});
  p.push_back({"deepseek-v3", "deepseek-ai/DeepSeek-V3 config.json (MLA, 128 heads)", mla(128), 0});
  p.push_back({"deepseek-v3-tp8", "deepseek-ai/DeepSeek-V3 config.json (MLA, 128 heads) per rank of tensor parallel 8",
               mla(16), 0});
  return p;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = build_presets();
  return presets;
}

const ModelPreset* find_preset(const std::string& name) {
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace attn
