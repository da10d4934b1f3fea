#include "model/spec.hpp"

#include <cmath>

namespace attn {

// ALiBi (Press et al.): for n a power of two, slope_i = 2^(-8 i / n), i = 1..n. Otherwise the
// slopes of the closest smaller power of two p, followed by every other slope of 2p.
std::vector<float> alibi_slopes(int num_heads) {
  std::vector<float> slopes;
  if (num_heads <= 0) return slopes;
  int p = 1;
  while (p * 2 <= num_heads) p *= 2;
  const double base = std::pow(2.0, -8.0 / p);
  for (int i = 1; i <= p; ++i) slopes.push_back(static_cast<float>(std::pow(base, i)));
  if (p < num_heads) {
    const double extra_base = std::pow(2.0, -4.0 / p);  // = 2^(-8 / (2p))
    for (int i = 1; static_cast<int>(slopes.size()) < num_heads; i += 2)
      slopes.push_back(static_cast<float>(std::pow(extra_base, i)));
  }
  return slopes;
}

namespace {

AttentionSpec mha(int hq, int hkv, int d) {
  AttentionSpec s;
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_size_qk = s.head_size_v = d;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  return s;
}

AttentionSpec mla(int hq) {
  AttentionSpec s;
  s.use_mla = true;
  s.num_q_heads = hq;
  s.num_kv_heads = 1;
  s.head_size_qk = s.mla.qk_head_dim();
  s.head_size_v = s.mla.v_head_dim;
  s.block_size = 64;  // FlashMLA's paged cache uses 64-token blocks
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_size_qk)));
  return s;
}

std::vector<ModelPreset> build_presets() {
  std::vector<ModelPreset> p;
  p.push_back({"llama3-8b", "meta-llama/Meta-Llama-3-8B config.json: 32 heads, 8 kv heads, hidden 4096", mha(32, 8, 128), 0});
  p.push_back({"llama3-70b-tp8", "meta-llama/Meta-Llama-3-70B config.json (64/8 heads) per tensor-parallel rank of 8",
               mha(8, 1, 128), 0});
  p.push_back({"qwen2-7b", "Qwen/Qwen2-7B config.json: 28 heads, 4 kv heads (GQA ratio 7)", mha(28, 4, 128), 0});
  {
    AttentionSpec s = mha(32, 8, 128);
    s.sliding_window = 4096;
    p.push_back({"mistral-7b", "mistralai/Mistral-7B-v0.1 config.json: sliding_window 4096", s, 0});
  }
  {
    AttentionSpec s = mha(16, 8, 256);
    s.logits_soft_cap = 50.0f;
    s.sliding_window = 4096;
    p.push_back({"gemma2-9b",
                 "google/gemma-2-9b config.json: attn_logit_softcapping 50, sliding_window 4096 (local layers), "
                 "query_pre_attn_scalar 256",
                 s, 0});
  }
  {
    AttentionSpec s = mha(64, 8, 64);
    s.sinks = true;
    s.sliding_window = 128;
    p.push_back({"gpt-oss-20b", "openai/gpt-oss-20b config.json: 64/8 heads, head_dim 64, sinks, sliding_window 128",
                 s, 0});
  }
  p.push_back({"llama4-scout",
               "meta-llama/Llama-4-Scout-17B-16E config.json: 40/8 heads, attention_chunk_size 8192", mha(40, 8, 128),
               8192});
  p.push_back({"deepseek-v3", "deepseek-ai/DeepSeek-V3 config.json: MLA, 128 heads, kv_lora_rank 512, rope 64",
               mla(128), 0});
  p.push_back({"deepseek-v3-tp8", "deepseek-ai/DeepSeek-V3 config.json: MLA, 128 heads / tensor-parallel 8 = 16",
               mla(16), 0});
  return p;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = build_presets();
  return presets;
}

const ModelPreset* find_preset(const std::string& name) {
  for (const ModelPreset& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace attn
