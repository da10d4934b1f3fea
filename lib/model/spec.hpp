#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace attn {

enum class KvLayout : uint8_t { NHD, HND };
enum class AttentionType : uint8_t { decoder, encoder_only };  // encoder_only = non-causal

// MLA dimensions (DeepSeek-V2/V3). Present only when AttentionSpec::use_mla.
struct MlaDims {
  int kv_lora_rank = 512;
  int qk_rope_head_dim = 64;
  int qk_nope_head_dim = 128;
  int v_head_dim = 128;
  int latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // 576: one cache entry
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }  // 192
};

// One attention layer, as the backends see it. Every key of [model] in SCENARIOS.md maps here.
struct AttentionSpec {
  int num_q_heads = 32;
  int num_kv_heads = 8;  // MLA: 1 (the latent cache is one "kv head")
  int head_size_qk = 128;  // MLA: qk_nope + qk_rope (192)
  int head_size_v = 128;   // MLA: v_head_dim (128)
  DType dtype = DType::bf16;
  DType kv_cache_dtype = DType::bf16;  // "auto" resolves to dtype
  float k_scale = 1.0f;  // fp8 caches only: stored = value / k_scale
  float v_scale = 1.0f;
  bool k_scale_calc = false;  // "calc": scale = max|x| / range over the batch's new tokens
  bool v_scale_calc = false;
  float q_scale = 0.0f;  // > 0: queries quantized to fp8 e4m3 with this per-tensor scale (vLLM's query quant); 0 = off
  bool q_scale_calc = false;  // "calc": q_scale = max|q| / e4m3 range over the batch's queries
  int block_size = 16;
  KvLayout kv_layout = KvLayout::NHD;
  float scale = 0.0f;          // softmax scale; resolved (never 0) after parsing
  int sliding_window = 0;      // 0 = off; else key > pos - window
  float logits_soft_cap = 0;   // 0 = off; else cap * tanh(s / cap)
  bool alibi = false;          // standard slopes for num_q_heads
  bool sinks = false;          // one sink logit per q head, drawn from the seed
  AttentionType attn_type = AttentionType::decoder;
  bool use_mla = false;
  MlaDims mla;

  bool causal() const { return attn_type == AttentionType::decoder; }
  int gqa_ratio() const { return num_q_heads / num_kv_heads; }
  bool kv_fp8() const { return is_fp8(kv_cache_dtype); }
  bool q_fp8() const { return q_scale > 0.f; }
};

// ALiBi slopes for n heads (the standard closest-power-of-two construction).
std::vector<float> alibi_slopes(int num_heads);

// "llama3-8b" -> 32/8/128 ... (SCENARIOS.md). Returns false when the name is unknown.
struct ModelPreset {
  std::string name;
  std::string source;  // where the numbers come from (model config)
  AttentionSpec spec;
  int local_attention_chunk = 0;  // llama4-scout
};
const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_preset(const std::string& name);

}  // namespace attn
