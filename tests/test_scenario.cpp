// Scenario files: presets, parsing, overrides, every error path (each message must name the
// file, line, key and value), the compact --batch spec, random batches, and the shipped files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "metadata/common.hpp"
#include "model/batch.hpp"
#include "model/scenario.hpp"
#include "model/spec.hpp"
#include "model/toml_value_text.hpp"
#include "host_memory_limit.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

const std::string kScenarioDir = std::string(ATTN_SOURCE_DIR) + "/scenarios";

// A valid [batch] to append to files that test something else.
const std::string kOneDecode = "[[batch.requests]]\ncount = 2\ncontext_len = 64\nquery_len = 1\n";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no InputError>";
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "expected \"" << part << "\" in: " << msg;
}

// ---- presets and ALiBi ---------------------------------------------------------------------

TEST(ScenarioPresets, NumbersOfEveryPreset) {
  struct Want {
    const char* name;
    int hq, hkv, dqk, dv, block, window, chunk;
    float softcap;
    bool sinks, mla;
  };
  const Want wants[] = {
      {"llama3-8b", 32, 8, 128, 128, 16, 0, 0, 0.f, false, false},
      {"llama3-70b-tp8", 8, 1, 128, 128, 16, 0, 0, 0.f, false, false},
      {"qwen2-7b", 28, 4, 128, 128, 16, 0, 0, 0.f, false, false},
      {"mistral-7b", 32, 8, 128, 128, 16, 4096, 0, 0.f, false, false},
      {"gemma2-9b", 16, 8, 256, 256, 16, 4096, 0, 50.f, false, false},
      {"gpt-oss-20b", 64, 8, 64, 64, 16, 128, 0, 0.f, true, false},
      {"llama4-scout", 40, 8, 128, 128, 16, 0, 8192, 0.f, false, false},
      {"deepseek-v3", 128, 1, 192, 128, 64, 0, 0, 0.f, false, true},
      {"deepseek-v3-tp8", 16, 1, 192, 128, 64, 0, 0, 0.f, false, true},
  };
  EXPECT_EQ(model_presets().size(), std::size(wants));
  std::set<std::string> names;
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    const ModelPreset* p = find_preset(w.name);
    ASSERT_NE(p, nullptr);
    names.insert(p->name);
    EXPECT_EQ(p->name, w.name);
    EXPECT_NE(p->source.find("config"), std::string::npos) << p->source;
    const AttentionSpec& s = p->spec;
    EXPECT_EQ(s.num_q_heads, w.hq);
    EXPECT_EQ(s.num_kv_heads, w.hkv);
    EXPECT_EQ(s.head_size_qk, w.dqk);
    EXPECT_EQ(s.head_size_v, w.dv);
    EXPECT_EQ(s.block_size, w.block);
    EXPECT_EQ(s.sliding_window, w.window);
    EXPECT_EQ(p->local_attention_chunk, w.chunk);
    EXPECT_EQ(s.logits_soft_cap, w.softcap);
    EXPECT_EQ(s.sinks, w.sinks);
    EXPECT_EQ(s.use_mla, w.mla);
    EXPECT_EQ(s.dtype, DType::bf16);
    EXPECT_EQ(s.kv_cache_dtype, DType::bf16);
    EXPECT_FALSE(s.alibi);
    EXPECT_TRUE(s.causal());
    EXPECT_FLOAT_EQ(s.scale, static_cast<float>(1.0 / std::sqrt(w.dqk)));
    if (w.mla) {
      EXPECT_EQ(s.mla.kv_lora_rank, 512);
      EXPECT_EQ(s.mla.qk_rope_head_dim, 64);
      EXPECT_EQ(s.mla.qk_nope_head_dim, 128);
      EXPECT_EQ(s.mla.v_head_dim, 128);
    }
  }
  EXPECT_EQ(names.size(), std::size(wants));
  EXPECT_EQ(find_preset("llama3"), nullptr);
  EXPECT_EQ(find_preset(""), nullptr);
}

TEST(ScenarioAlibi, PowerOfTwoIsGeometric) {
  for (int n : {1, 2, 4, 8, 16, 32, 64}) {
    const std::vector<float> s = alibi_slopes(n);
    ASSERT_EQ(s.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      // slope_i = (2^(-8/n))^(i+1), as a power of two exactly representable when 8(i+1)/n is an integer.
      EXPECT_FLOAT_EQ(s[i], static_cast<float>(std::pow(std::pow(2.0, -8.0 / n), i + 1))) << n << " " << i;
    }
    EXPECT_FLOAT_EQ(s.back(), 1.0f / 256.0f) << n;  // the last head always gets 2^-8
  }
  const std::vector<float> eight = alibi_slopes(8);
  EXPECT_EQ(eight.front(), 0.5f);
  EXPECT_EQ(eight[2], 0.125f);
}

TEST(ScenarioAlibi, OtherCountsInterleaveTheNextPowerOfTwo) {
  // 12 heads: the 8 slopes of n = 8, then the odd-indexed slopes of n = 16: 2^-0.5, 2^-1.5, ...
  const std::vector<float> s = alibi_slopes(12);
  ASSERT_EQ(s.size(), 12u);
  const std::vector<float> eight = alibi_slopes(8), sixteen = alibi_slopes(16);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s[i], eight[i]);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(s[8 + j], sixteen[2 * j]) << j;
    EXPECT_FLOAT_EQ(s[8 + j], static_cast<float>(std::pow(2.0, -0.5 - j)));
  }
  // 40 heads (Llama-4 sized): 32 slopes, then 8 from the 64 sequence; all distinct, in (0, 1).
  const std::vector<float> f = alibi_slopes(40);
  ASSERT_EQ(f.size(), 40u);
  EXPECT_EQ(std::set<float>(f.begin(), f.end()).size(), 40u);
  for (float x : f) {
    EXPECT_GT(x, 0.f);
    EXPECT_LT(x, 1.f);
  }
  EXPECT_EQ(alibi_slopes(5)[4], static_cast<float>(std::pow(2.0, -1.0)));
  EXPECT_TRUE(alibi_slopes(0).empty());
}

// ---- parsing ---------------------------------------------------------------------------------

// A scenario error carries where it was found as well as its text, so that a sweep can point it
// at its own line without reading the message back.
TEST(ScenarioParse, ErrorsCarryTheirSite) {
  try {
    parse_scenario("[model]\nnum_q_heads = 4\nnum_kv_heads = 3\nhead_size = 64\n" + kOneDecode, "s.toml");
    FAIL() << "no error";
  } catch (const InputError& e) {
    ASSERT_TRUE(e.site().has_value()) << e.what();
    EXPECT_EQ(e.site()->file, "s.toml");
    EXPECT_EQ(e.site()->line, 3);
    EXPECT_EQ(e.site()->key, "model.num_kv_heads");
    EXPECT_EQ(e.site()->value, "3");
    EXPECT_EQ(std::string(e.what()), input_error_message(*e.site()));
  }
}

TEST(ScenarioParse, DefaultsNameAutoDtypeAndScale) {
  const Scenario s =
      parse_scenario("[model]\nnum_q_heads = 4\nnum_kv_heads = 2\nhead_size = 96\ndtype = \"fp16\"\n" + kOneDecode,
                     "/some/dir/my_case.toml");
  EXPECT_EQ(s.file, "/some/dir/my_case.toml");
  EXPECT_EQ(s.name, "my_case");
  EXPECT_EQ(s.description, "");
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.preset, "");
  EXPECT_EQ(s.spec.num_q_heads, 4);
  EXPECT_EQ(s.spec.num_kv_heads, 2);
  EXPECT_EQ(s.spec.head_size_qk, 96);
  EXPECT_EQ(s.spec.head_size_v, 96);
  EXPECT_EQ(s.spec.dtype, DType::f16);
  EXPECT_EQ(s.spec.kv_cache_dtype, DType::f16);  // "auto" = dtype
  EXPECT_FLOAT_EQ(s.spec.scale, static_cast<float>(1.0 / std::sqrt(96.0)));
  EXPECT_EQ(s.spec.kv_layout, KvLayout::NHD);
  EXPECT_EQ(s.batch.source, BatchSource::groups);
  ASSERT_EQ(s.batch.groups.size(), 1u);
  EXPECT_EQ(s.batch.groups[0].count, 2);
  EXPECT_EQ(s.batch.groups[0].context_len, 64);
  EXPECT_EQ(s.batch.groups[0].query_len, 1);
  EXPECT_EQ(s.run.backends, std::vector<std::string>{"auto"});
  EXPECT_EQ(s.run.cascade, CascadeMode::auto_);
  EXPECT_FALSE(s.check.atol.has_value());
  EXPECT_EQ(s.check.sample_pairs, 0);
}

TEST(ScenarioParse, EveryKeyOfTheSpec) {
  const std::string text = R"(name = "all_keys"
description = "every key"
seed = 1234
[model]
num_q_heads = 12
num_kv_heads = 3
head_size_qk = 80
head_size_v = 64
dtype = "bf16"
kv_cache_dtype = "fp8_e5m2"
k_scale = 0.5
v_scale = "calc"
block_size = 32
kv_layout = "HND"
scale = 0.25
sliding_window = 100
logits_soft_cap = 30
alibi = true
sinks = true
causal = true
[batch]
shared_prefix_len = 64
local_attention_chunk = 128
block_allocation = "contiguous"
num_blocks = 500
[[batch.requests]]
count = 3
context_len = 64
query_len = 7
[[batch.requests]]
count = 1
context_len = 96
query_len = 1
[run]
backends = ["cpu", "flash_attn"]
warmup = 3
iterations = 9
cold_l2 = false
cuda_graph = true
timed = "attention"
num_layers = 4
cascade = "off"
[check]
atol = 0.5
rtol = 1
max_rel_l2 = 0.02
min_cosine = 0.99
strict = true
sample_pairs = 17
)";
  const Scenario s = parse_scenario(text, "x.toml");
  EXPECT_EQ(s.name, "all_keys");
  EXPECT_EQ(s.description, "every key");
  EXPECT_EQ(s.seed, 1234u);
  const AttentionSpec& m = s.spec;
  EXPECT_EQ(m.num_q_heads, 12);
  EXPECT_EQ(m.num_kv_heads, 3);
  EXPECT_EQ(m.head_size_qk, 80);
  EXPECT_EQ(m.head_size_v, 64);
  EXPECT_EQ(m.dtype, DType::bf16);
  EXPECT_EQ(m.kv_cache_dtype, DType::fp8_e5m2);
  EXPECT_EQ(m.k_scale, 0.5f);
  EXPECT_FALSE(m.k_scale_calc);
  EXPECT_TRUE(m.v_scale_calc);
  EXPECT_EQ(m.block_size, 32);
  EXPECT_EQ(m.kv_layout, KvLayout::HND);
  EXPECT_EQ(m.scale, 0.25f);
  EXPECT_EQ(m.sliding_window, 100);
  EXPECT_EQ(m.logits_soft_cap, 30.0f);
  EXPECT_TRUE(m.alibi);
  EXPECT_TRUE(m.sinks);
  EXPECT_EQ(m.attn_type, AttentionType::decoder);
  EXPECT_FALSE(m.use_mla);
  EXPECT_EQ(s.batch.shared_prefix_len, 64);
  EXPECT_EQ(s.batch.local_attention_chunk, 128);
  EXPECT_EQ(s.batch.block_allocation, BlockAllocation::contiguous);
  EXPECT_EQ(s.batch.num_blocks, 500);
  ASSERT_EQ(s.batch.groups.size(), 2u);
  EXPECT_EQ(s.batch.groups[1].count, 1);
  EXPECT_EQ(s.batch.groups[1].context_len, 96);
  EXPECT_EQ(s.batch.groups[1].query_len, 1);
  EXPECT_EQ(s.run.backends, (std::vector<std::string>{"cpu", "flash_attn"}));
  EXPECT_EQ(s.run.warmup, 3);
  EXPECT_EQ(s.run.iterations, 9);
  EXPECT_FALSE(s.run.cold_l2);
  EXPECT_TRUE(s.run.cuda_graph);
  EXPECT_EQ(s.run.timed, TimedPart::attention);
  EXPECT_EQ(s.run.num_layers, 4);
  EXPECT_EQ(s.run.cascade, CascadeMode::off);
  EXPECT_EQ(s.check.atol, 0.5);
  EXPECT_EQ(s.check.rtol, 1.0);
  EXPECT_EQ(s.check.max_rel_l2, 0.02);
  EXPECT_EQ(s.check.min_cosine, 0.99);
  EXPECT_TRUE(s.check.strict);
  EXPECT_EQ(s.check.sample_pairs, 17);
}

TEST(ScenarioParse, PresetThenExplicitOverrides) {
  const Scenario s = parse_scenario(R"([model]
preset = "gemma2-9b"
num_kv_heads = 4
dtype = "fp16"
sliding_window = 0
block_size = 32
)" + kOneDecode,
                                    "o.toml");
  EXPECT_EQ(s.preset, "gemma2-9b");
  EXPECT_EQ(s.spec.num_q_heads, 16);  // kept from the preset
  EXPECT_EQ(s.spec.num_kv_heads, 4);  // overridden
  EXPECT_EQ(s.spec.head_size_qk, 256);
  EXPECT_EQ(s.spec.logits_soft_cap, 50.0f);
  EXPECT_EQ(s.spec.sliding_window, 0);
  EXPECT_EQ(s.spec.block_size, 32);
  EXPECT_EQ(s.spec.dtype, DType::f16);
  EXPECT_EQ(s.spec.kv_cache_dtype, DType::f16);  // auto follows the overridden dtype
  EXPECT_FLOAT_EQ(s.spec.scale, 1.0f / 16.0f);

  // A head size override re-derives the auto scale; the preset's local chunk carries over.
  const Scenario l = parse_scenario("[model]\npreset = \"llama4-scout\"\nhead_size = 64\n" + kOneDecode, "l.toml");
  EXPECT_EQ(l.spec.head_size_qk, 64);
  EXPECT_EQ(l.spec.head_size_v, 64);
  EXPECT_FLOAT_EQ(l.spec.scale, 0.125f);
  EXPECT_EQ(l.batch.local_attention_chunk, 8192);
  const Scenario l2 = parse_scenario(
      "[model]\npreset = \"llama4-scout\"\n[batch]\nlocal_attention_chunk = 0\n" + kOneDecode, "l2.toml");
  EXPECT_EQ(l2.batch.local_attention_chunk, 0);
}

TEST(ScenarioParse, MlaTableAndScale) {
  const Scenario d = parse_scenario("[model]\npreset = \"deepseek-v3-tp8\"\n" + kOneDecode, "d.toml");
  EXPECT_TRUE(d.spec.use_mla);
  EXPECT_EQ(d.spec.num_kv_heads, 1);
  EXPECT_EQ(d.spec.head_size_qk, 192);
  EXPECT_EQ(d.spec.head_size_v, 128);
  EXPECT_EQ(d.spec.block_size, 64);
  EXPECT_FLOAT_EQ(d.spec.scale, static_cast<float>(1.0 / std::sqrt(192.0)));

  const Scenario m = parse_scenario(R"([model]
num_q_heads = 8
[model.mla]
kv_lora_rank = 256
qk_rope_head_dim = 32
qk_nope_head_dim = 64
v_head_dim = 96
)" + kOneDecode,
                                    "m.toml");
  EXPECT_TRUE(m.spec.use_mla);
  EXPECT_EQ(m.spec.num_kv_heads, 1);
  EXPECT_EQ(m.spec.mla.kv_lora_rank, 256);
  EXPECT_EQ(m.spec.mla.latent_dim(), 288);
  EXPECT_EQ(m.spec.head_size_qk, 96);
  EXPECT_EQ(m.spec.head_size_v, 96);
  EXPECT_FLOAT_EQ(m.spec.scale, static_cast<float>(1.0 / std::sqrt(96.0)));
}

TEST(ScenarioParse, KvScalesAndCausal) {
  const Scenario s = parse_scenario(R"([model]
preset = "llama3-8b"
kv_cache_dtype = "fp8_e4m3"
k_scale = "calc"
v_scale = 2
causal = true
)" + kOneDecode,
                                    "k.toml");
  EXPECT_EQ(s.spec.kv_cache_dtype, DType::fp8_e4m3);
  EXPECT_TRUE(s.spec.kv_fp8());
  EXPECT_TRUE(s.spec.k_scale_calc);
  EXPECT_FALSE(s.spec.v_scale_calc);
  EXPECT_EQ(s.spec.v_scale, 2.0f);
  EXPECT_TRUE(s.spec.causal());
}

TEST(ScenarioParse, QueryScaleNumberCalcOrAbsent) {
  const std::string fp8 = "[model]\npreset = \"llama3-8b\"\nkv_cache_dtype = \"fp8_e4m3\"\n";
  const Scenario off = parse_scenario(fp8 + kOneDecode, "q.toml");
  EXPECT_EQ(off.spec.q_scale, 0.0f);  // absent: queries not quantized
  EXPECT_FALSE(off.spec.q_scale_calc);
  EXPECT_FALSE(off.spec.q_fp8());

  const Scenario num = parse_scenario(fp8 + "q_scale = 0.02\n" + kOneDecode, "q.toml");
  EXPECT_EQ(num.spec.q_scale, 0.02f);
  EXPECT_FALSE(num.spec.q_scale_calc);
  EXPECT_TRUE(num.spec.q_fp8());
  EXPECT_EQ(parse_scenario(fp8 + "q_scale = 2\n" + kOneDecode, "q.toml").spec.q_scale, 2.0f);

  // "calc" is resolved over the batch by make_batch; the k/v scales keep their own settings.
  const Scenario calc = parse_scenario(fp8 + "k_scale = 0.125\nq_scale = \"calc\"\n" + kOneDecode, "q.toml");
  EXPECT_TRUE(calc.spec.q_scale_calc);
  EXPECT_FALSE(calc.spec.k_scale_calc);
  EXPECT_EQ(calc.spec.k_scale, 0.125f);

  // No preset quantizes the query.
  for (const ModelPreset& p : model_presets()) {
    EXPECT_EQ(p.spec.q_scale, 0.0f) << p.name;
    EXPECT_FALSE(p.spec.q_scale_calc) << p.name;
  }
}

TEST(ScenarioParse, RandomAndTraceSources) {
  const Scenario r = parse_scenario(R"([model]
preset = "llama3-8b"
[batch.random]
num_requests = 5
context_len = { dist = "lognormal", mean = 1000, sigma = 0.5, min = 16, max = 4000 }
query_len = 3
)",
                                    "r.toml");
  EXPECT_EQ(r.batch.source, BatchSource::random);
  EXPECT_EQ(r.batch.random.num_requests, 5);
  EXPECT_EQ(r.batch.random.context_len.kind, LengthDist::Kind::lognormal);
  EXPECT_EQ(r.batch.random.context_len.mean, 1000.0);
  EXPECT_EQ(r.batch.random.context_len.sigma, 0.5);
  EXPECT_EQ(r.batch.random.context_len.min, 16);
  EXPECT_EQ(r.batch.random.context_len.max, 4000);
  EXPECT_EQ(r.batch.random.query_len.kind, LengthDist::Kind::fixed);
  EXPECT_EQ(r.batch.random.query_len.value, 3);

  // The trace file resolves against the scenario's folder.
  const Scenario t = parse_scenario(R"([model]
preset = "llama3-8b"
[batch.trace]
file = "traces/azure_llm_2023_conv.csv"
max_num_batched_tokens = 1024
max_num_seqs = 32
step = "all"
step_ms = 20
max_steps = 40
)",
                                    "t.toml", kScenarioDir);
  EXPECT_EQ(t.batch.source, BatchSource::trace);
  EXPECT_TRUE(fs::equivalent(t.batch.trace.file, kScenarioDir + "/traces/azure_llm_2023_conv.csv"));
  EXPECT_EQ(t.batch.trace.max_num_batched_tokens, 1024);
  EXPECT_EQ(t.batch.trace.max_num_seqs, 32);
  EXPECT_TRUE(t.batch.trace.all_steps);
  EXPECT_EQ(t.batch.trace.step_ms, 20.0);
  EXPECT_EQ(t.batch.trace.max_steps, 40);
}

// ---- errors ----------------------------------------------------------------------------------

struct BadCase {
  const char* label;
  std::string text;
  std::vector<std::string> parts;  // each must appear in the message (file:line, key = value, ...)
};

TEST(ScenarioErrors, EveryErrorNamesFileLineKeyAndValue) {
  const std::string llama = "[model]\npreset = \"llama3-8b\"\n";
  const std::vector<BadCase> cases = {
      {"unknown top-level key",
       "seeed = 1\n" + llama + kOneDecode,
       {"bad.toml:1:", "seeed = 1", "unknown key", "did you mean \"seed\"?"}},
      {"unknown table",
       "[modle]\npreset = \"llama3-8b\"\n" + kOneDecode,
       {"bad.toml:1:", "modle", "did you mean \"model\"?"}},
      {"unknown model key",
       llama + "num_q_heds = 32\n" + kOneDecode,
       {"bad.toml:3:", "model.num_q_heds = 32", "did you mean \"num_q_heads\"?"}},
      {"unknown key, no near match",
       llama + "flavour = \"x\"\n" + kOneDecode,
       {"bad.toml:3:", "model.flavour = \"x\"", "unknown key", "expected one of"}},
      {"unknown group key",
       llama + "[[batch.requests]]\ncount = 1\ncontxt_len = 5\n",
       {"bad.toml:5:", "batch.requests[0].contxt_len = 5", "did you mean \"context_len\"?"}},
      {"unknown mla key",
       llama + "[model.mla]\nkv_lora_rnk = 5\n" + kOneDecode,
       {"bad.toml:4:", "model.mla.kv_lora_rnk = 5", "did you mean \"kv_lora_rank\"?"}},
      {"unknown dist key",
       llama + "[batch.random]\nnum_requests = 2\ncontext_len = { dist = \"uniform\", min = 0, maxx = 5 }\n",
       {"bad.toml:5:", "batch.random.context_len.maxx = 5", "did you mean \"max\"?"}},
      {"unknown run key",
       llama + kOneDecode + "[run]\niteration = 5\n",
       {"bad.toml:8:", "run.iteration = 5", "did you mean \"iterations\"?"}},
      {"unknown check key",
       llama + kOneDecode + "[check]\nsample_pair = 5\n",
       {"bad.toml:8:", "check.sample_pair = 5", "did you mean \"sample_pairs\"?"}},
      {"wrong type: string for int",
       "[model]\nnum_q_heads = \"32\"\n" + kOneDecode,
       {"bad.toml:2:", "model.num_q_heads = \"32\"", "expected an integer"}},
      {"wrong type: int for bool",
       llama + "alibi = 1\n" + kOneDecode,
       {"bad.toml:3:", "model.alibi = 1", "expected true or false"}},
      {"wrong type: float seed", "seed = 1.5\n" + llama + kOneDecode, {"bad.toml:1:", "seed = 1.5", "integer"}},
      {"wrong type: backends string",
       llama + kOneDecode + "[run]\nbackends = \"cpu\"\n",
       {"bad.toml:8:", "run.backends = \"cpu\"", "array"}},
      {"wrong type: model not a table", "model = 3\n" + kOneDecode, {"bad.toml:1:", "model = 3", "expected a table"}},
      {"kv heads do not divide",
       "[model]\nnum_q_heads = 32\nnum_kv_heads = 5\n" + kOneDecode,
       {"bad.toml:3:", "model.num_kv_heads = 5", "must divide num_q_heads (32)"}},
      {"preset kv heads do not divide",
       "[model]\npreset = \"qwen2-7b\"\nnum_q_heads = 30\n" + kOneDecode,
       {"bad.toml:3:", "model.num_q_heads = 30", "must divide"}},
      {"zero heads", "[model]\nnum_q_heads = 0\n" + kOneDecode, {"bad.toml:2:", "model.num_q_heads = 0", "positive"}},
      {"negative head size",
       llama + "head_size = -64\n" + kOneDecode,
       {"bad.toml:3:", "model.head_size = -64", "positive"}},
      {"zero v head size",
       llama + "head_size_v = 0\n" + kOneDecode,
       {"bad.toml:3:", "model.head_size_v = 0", "positive"}},
      {"zero block size", llama + "block_size = 0\n" + kOneDecode, {"bad.toml:3:", "model.block_size = 0", "positive"}},
      {"negative context",
       llama + "[[batch.requests]]\ncount = 1\ncontext_len = -3\nquery_len = 1\n",
       {"bad.toml:5:", "batch.requests[0].context_len = -3", ">= 0"}},
      {"zero query",
       llama + kOneDecode + "[[batch.requests]]\ncount = 1\ncontext_len = 0\nquery_len = 0\n",
       {"bad.toml:10:", "batch.requests[1].query_len = 0", ">= 1"}},
      {"count < 1", llama + "[[batch.requests]]\ncount = 0\n", {"bad.toml:4:", "batch.requests[0].count = 0", ">= 1"}},
      {"prefix longer than a context",
       llama + "[batch]\nshared_prefix_len = 64\n" + kOneDecode +
           "[[batch.requests]]\ncount = 1\ncontext_len = 32\nquery_len = 1\n",
       {"bad.toml:4:", "batch.shared_prefix_len = 64", "context_len (32) of batch.requests[1]"}},
      {"prefix longer than the random minimum",
       llama + "[batch]\nshared_prefix_len = 64\n[batch.random]\nnum_requests = 4\n"
               "context_len = { dist = \"uniform\", min = 32, max = 900 }\n",
       {"bad.toml:4:", "batch.shared_prefix_len = 64", "shortest context", "(32)"}},
      {"prefix not whole blocks",
       llama + "[batch]\nshared_prefix_len = 24\n" + kOneDecode,
       {"bad.toml:4:", "batch.shared_prefix_len = 24", "multiple of block_size (16)"}},
      {"local chunk not whole blocks",
       llama + "[batch]\nlocal_attention_chunk = 100\n" + kOneDecode,
       {"bad.toml:4:", "batch.local_attention_chunk = 100", "multiple of block_size (16)"}},
      {"unknown dtype",
       llama + "dtype = \"bf17\"\n" + kOneDecode,
       {"bad.toml:3:", "model.dtype = \"bf17\"", "unknown model dtype", "did you mean \"bf16\"?"}},
      {"fp8 model dtype",
       llama + "dtype = \"fp8_e4m3\"\n" + kOneDecode,
       {"bad.toml:3:", "model.dtype = \"fp8_e4m3\"", "unknown model dtype"}},
      {"unknown cache dtype",
       llama + "kv_cache_dtype = \"int4\"\n" + kOneDecode,
       {"bad.toml:3:", "model.kv_cache_dtype = \"int4\"", "unknown kv cache dtype"}},
      {"unknown layout",
       llama + "kv_layout = \"NDH\"\n" + kOneDecode,
       {"bad.toml:3:", "model.kv_layout = \"NDH\"", "layout"}},
      {"unknown dist",
       llama + "[batch.random]\nnum_requests = 2\ncontext_len = { dist = \"normal\", value = 3 }\n",
       {"bad.toml:5:", "batch.random.context_len.dist = \"normal\"", "unknown length distribution"}},
      {"unknown preset",
       "[model]\npreset = \"llama3-8\"\n" + kOneDecode,
       {"bad.toml:2:", "model.preset = \"llama3-8\"", "unknown model preset", "did you mean \"llama3-8b\"?"}},
      {"fp8 k_scale zero",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nk_scale = 0.0\n" + kOneDecode,
       {"bad.toml:4:", "model.k_scale = 0.0", "> 0"}},
      {"fp8 v_scale negative",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nv_scale = -1\n" + kOneDecode,
       {"bad.toml:4:", "model.v_scale = -1", "> 0"}},
      {"k_scale bad word",
       llama + "k_scale = \"calcc\"\n" + kOneDecode,
       {"bad.toml:3:", "model.k_scale = \"calcc\"", "\"calc\""}},
      {"q_scale over an fp8_e5m2 cache",
       llama + "kv_cache_dtype = \"fp8_e5m2\"\nq_scale = 0.5\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scale = 0.5", "needs kv_cache_dtype = \"fp8_e4m3\"", "(the cache is fp8_e5m2)",
        "vLLM quantizes the query only over an fp8_e4m3 cache"}},
      {"q_scale over a model-dtype cache",
       llama + "q_scale = \"calc\"\n" + kOneDecode,
       {"bad.toml:3:", "model.q_scale = \"calc\"", "(the cache is bf16)", "only over an fp8_e4m3 cache"}},
      {"q_scale with MLA",
       "[model]\npreset = \"deepseek-v3-tp8\"\nkv_cache_dtype = \"fp8_e4m3\"\nq_scale = 1\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scale = 1", "[model.mla]", "MHA/GQA"}},
      {"q_scale zero",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nq_scale = 0\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scale = 0", "> 0", "the query is quantized to q / scale"}},
      {"q_scale negative",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nq_scale = -0.5\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scale = -0.5", "> 0"}},
      {"q_scale nan",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nq_scale = nan\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scale = nan", "finite"}},
      {"q_scale wrong type",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nq_scale = true\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scale = true", "expected a number"}},
      {"q_scale bad word",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nq_scale = \"auto\"\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scale = \"auto\"", "expected a number or \"calc\"", "the batch's queries"}},
      {"q_scale near miss",
       llama + "kv_cache_dtype = \"fp8_e4m3\"\nq_scal = 0.5\n" + kOneDecode,
       {"bad.toml:4:", "model.q_scal = 0.5", "unknown key", "did you mean \"q_scale\"?"}},
      {"negative window",
       llama + "sliding_window = -1\n" + kOneDecode,
       {"bad.toml:3:", "model.sliding_window = -1", ">= 0"}},
      {"negative softcap",
       llama + "logits_soft_cap = -0.5\n" + kOneDecode,
       {"bad.toml:3:", "model.logits_soft_cap = -0.5", ">= 0"}},
      {"scale zero", llama + "scale = 0\n" + kOneDecode, {"bad.toml:3:", "model.scale = 0", "> 0"}},
      {"scale word",
       llama + "scale = \"automatic\"\n" + kOneDecode,
       {"bad.toml:3:", "model.scale = \"automatic\"", "\"auto\""}},
      {"iterations < 1", llama + kOneDecode + "[run]\niterations = 0\n", {"bad.toml:8:", "run.iterations = 0", ">= 1"}},
      {"unknown cascade mode",
       llama + kOneDecode + "[run]\ncascade = \"maybe\"\n",
       {"bad.toml:8:", "run.cascade = \"maybe\"", "unknown cascade mode"}},
      {"unknown timed part",
       llama + kOneDecode + "[run]\ntimed = \"kernel\"\n",
       {"bad.toml:8:", "run.timed = \"kernel\"", "unknown timed part", "step", "attention"}},
      {"min_cosine out of range",
       llama + kOneDecode + "[check]\nmin_cosine = 1.5\n",
       {"bad.toml:8:", "check.min_cosine = 1.5", "[-1, 1]"}},
      {"negative atol", llama + kOneDecode + "[check]\natol = -1e-3\n", {"bad.toml:8:", "check.atol = -0.001", ">= 0"}},
      {"k_l2 below the floor", llama + kOneDecode + "[check]\nk_l2 = 0.5\n", {"bad.toml:8:", "check.k_l2 = 0.5", ">= 1"}},
      {"logit_std not positive", llama + kOneDecode + "[data]\nlogit_std = 0\n", {"bad.toml:8:", "data.logit_std = 0", "(0, 1000]"}},
      {"unknown data key", llama + kOneDecode + "[data]\nlogits_std = 2\n", {"bad.toml:8:", "logits_std"}},
      {"unknown distribution", llama + kOneDecode + "[data]\ndistribution = \"cauchy\"\n", {"bad.toml:8:", "data.distribution", "cauchy"}},
      {"outlier scale below 1", llama + kOneDecode + "[data]\nk_outlier_scale = 0.5\n", {"bad.toml:8:", "data.k_outlier_scale = 0.5", "[1, 10000]"}},
      {"missing trace file",
       llama + "[batch.trace]\nfile = \"no_such_trace.csv\"\n",
       {"bad.toml:4:", "batch.trace.file = \"no_such_trace.csv\"", "not found", "no_such_trace.csv"}},
      {"trace step word",
       llama + "[batch.trace]\nfile = \"traces/azure_llm_2023_conv.csv\"\nstep = \"some\"\n",
       {"bad.toml:5:", "batch.trace.step = \"some\"", "\"all\""}},
      {"two request sources",
       llama + kOneDecode + "[batch.random]\nnum_requests = 2\ncontext_len = 5\n",
       {"bad.toml:7:", "batch.random", "exactly one"}},
      {"no request source", llama + "[batch]\nshared_prefix_len = 0\n", {"bad.toml:3:", "batch", "no requests"}},
      {"uniform max < min",
       llama + "[batch.random]\nnum_requests = 2\ncontext_len = { dist = \"uniform\", min = 9, max = 3 }\n",
       {"bad.toml:5:", "batch.random.context_len.max = 3", "min (9)"}},
      {"fixed dist without value",
       llama + "[batch.random]\nnum_requests = 2\ncontext_len = { dist = \"fixed\" }\n",
       {"bad.toml:5:", "batch.random.context_len.dist = \"fixed\"", "\"value\""}},
      {"zero random requests",
       llama + "[batch.random]\nnum_requests = 0\ncontext_len = 5\n",
       {"bad.toml:4:", "batch.random.num_requests = 0", ">= 1"}},
      {"MLA with kv heads",
       "[model]\npreset = \"deepseek-v3\"\nnum_kv_heads = 8\n" + kOneDecode,
       {"bad.toml:3:", "model.num_kv_heads = 8", "one latent kv head"}},
      {"head_size and head_size_qk",
       llama + "head_size = 64\nhead_size_qk = 64\n" + kOneDecode,
       {"bad.toml:4:", "model.head_size_qk = 64", "not both"}},
      {"TOML syntax error", llama + "num_q_heads = = 3\n" + kOneDecode, {"bad.toml:3:", "TOML syntax error"}},
      // A group gives all three keys: none silently defaults.
      {"group without count",
       llama + "[[batch.requests]]\ncontext_len = 16\nquery_len = 1\n",
       {"bad.toml:3:", "batch.requests[0]: missing key \"count\"", "count, context_len and query_len"}},
      {"group without context_len",
       llama + kOneDecode + "[[batch.requests]]\ncount = 1\nquery_len = 1\n",
       {"bad.toml:7:", "batch.requests[1]: missing key \"context_len\""}},
      {"group without query_len",
       llama + "[[batch.requests]]\ncount = 1\ncontext_len = 5\n",
       {"bad.toml:3:", "batch.requests[0]: missing key \"query_len\""}},
      // More outlier channels than K head dims; none on MLA's latent cache.
      {"outlier channels beyond the head",
       llama + kOneDecode + "[data]\nk_outlier_channels = 129\n",
       {"bad.toml:8:", "data.k_outlier_channels = 129", "head_size_qk = 128"}},
      {"outlier channels with MLA",
       "[model]\npreset = \"deepseek-v3\"\n" + kOneDecode + "[data]\nk_outlier_channels = 4\n",
       {"bad.toml:8:", "data.k_outlier_channels = 4", "[model.mla]"}},
      // Non-causal attention takes neither a window nor a local chunk (both limit the keys before a query).
      {"non-causal with a window",
       llama + "causal = false\nsliding_window = 8\n" + kOneDecode,
       {"bad.toml:3:", "model.causal = false", "no sliding window", "sliding_window = 8, line 4"}},
      {"non-causal with the preset's window",
       "[model]\npreset = \"mistral-7b\"\ncausal = false\n" + kOneDecode,
       {"bad.toml:3:", "model.causal = false", "sliding_window = 4096, from the preset"}},
      {"non-causal with a local chunk",
       llama + "causal = false\n[batch]\nlocal_attention_chunk = 16\n" + kOneDecode,
       {"bad.toml:3:", "model.causal = false", "local_attention_chunk = 16, line 5"}},
      // max_steps only means something with step = "all".
      {"max_steps with a numeric step",
       llama + "[batch.trace]\nfile = \"traces/azure_llm_2023_conv.csv\"\nstep = 3\nmax_steps = 2\n",
       {"bad.toml:6:", "batch.trace.max_steps = 2", "only applies with step = \"all\"", "step = 3"}},
      {"max_steps without step",
       llama + "[batch.trace]\nfile = \"traces/azure_llm_2023_conv.csv\"\nmax_steps = 2\n",
       {"bad.toml:5:", "batch.trace.max_steps = 2", "only applies with step = \"all\""}},
      // Sizes the batch's int32 arrays cannot hold: input errors at parse time, before any allocation.
      {"count overflows the block ids",
       llama + "[[batch.requests]]\ncount = 2000000000\ncontext_len = 16\nquery_len = 1\n",
       {"bad.toml:4:", "batch.requests[0].count = 2000000000", "4000000001 cache blocks", "int32 block ids"}},
      {"count overflows query_start_loc",
       llama + "[[batch.requests]]\ncount = 2147483647\ncontext_len = 0\nquery_len = 256\n",
       {"bad.toml:4:", "batch.requests[0].count = 2147483647", "549755813632 new tokens", "query_start_loc"}},
      {"long contexts overflow the block ids",
       llama + "[[batch.requests]]\ncount = 65536\ncontext_len = 1000000\nquery_len = 1\n",
       {"bad.toml:4:", "batch.requests[0].count = 65536", "4096065537 cache blocks"}},
      {"long queries overflow query_start_loc",
       llama + "[[batch.requests]]\ncount = 2\ncontext_len = 16\nquery_len = 2147483000\n",
       {"bad.toml:4:", "batch.requests[0].count = 2", "4294966000 new tokens", "query_start_loc"}},
      {"groups overflow query_start_loc together",
       llama + "[[batch.requests]]\ncount = 1\ncontext_len = 0\nquery_len = 2000000000\n"
               "[[batch.requests]]\ncount = 1\ncontext_len = 0\nquery_len = 2000000000\n",
       {"bad.toml:8:", "batch.requests[1].count = 1", "over batch.requests[0..1]"}},
      {"num_blocks too small for the groups",
       llama + "[batch]\nnum_blocks = 2\n" + kOneDecode,
       {"bad.toml:4:", "batch.num_blocks = 2", "too small", "needs 11 blocks"}},
      {"num_blocks beyond int32",
       llama + "[batch]\nnum_blocks = 3000000000\n" + kOneDecode,
       {"bad.toml:4:", "batch.num_blocks = 3000000000", "int32"}},
      {"random context + query overflow",
       llama + "[batch.random]\nnum_requests = 1\ncontext_len = 2147483647\n",
       {"bad.toml:5:", "batch.random.context_len = 2147483647", "32-bit sequence length"}},
      {"random uniform context + query overflow",
       llama + "[batch.random]\nnum_requests = 1\ncontext_len = { dist = \"uniform\", min = 2147483000, max = 2147483647 }\n"
               "query_len = 1000\n",
       {"bad.toml:5:", "batch.random.context_len", "up to 2147483647", "(up to 1000)"}},
      {"random query overflow",
       llama + "[batch.random]\nnum_requests = 2\ncontext_len = 16\nquery_len = 2147483647\n",
       {"bad.toml:6:", "batch.random.query_len = 2147483647", "32-bit sequence length"}},
      {"random requests overflow the block ids",
       llama + "[batch.random]\nnum_requests = 2000000000\ncontext_len = 16\n",
       {"bad.toml:4:", "batch.random.num_requests = 2000000000", "cache blocks", "int32 block ids"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string msg = error_of([&] { parse_scenario(c.text, "bad.toml", kScenarioDir); });
    for (const std::string& part : c.parts) expect_has(msg, part);
  }
}

// The TOML text that error messages quote and sweep cases are written in: floats in their
// shortest round-trip form (toml++ alone writes 0.9 as 0.90000000000000002), still TOML floats,
// also inside arrays and inline tables; the text parses back to the same values.
TEST(ScenarioText, FloatsAreTheShortestTextThatReadsBack) {
  const std::vector<std::pair<const char*, const char*>> cases = {  // (as written in a file, as quoted)
      {"0.9", "0.9"},
      {"1.0", "1.0"},
      {"-0.0", "-0.0"},
      {"1e300", "1e+300"},
      {"inf", "inf"},
      {"[0.1, [2.5, 'x'], { s = 0.3, 'q k' = 1 }]", "[ 0.1, [ 2.5, 'x' ], { 'q k' = 1, s = 0.3 } ]"},
      {"{ dist = 'lognormal', sigma = 0.29 }", "{ dist = 'lognormal', sigma = 0.29 }"},
      {"3", "3"},
      {"[]", "[]"},
  };
  for (const auto& [written, quoted] : cases) {
    const toml::table t = toml::parse(std::string("v = ") + written);
    EXPECT_EQ(toml_value_text(*t.get("v")), quoted) << written;
    EXPECT_TRUE(toml::parse(std::string("v = ") + quoted) == t) << written;
  }
}

TEST(ScenarioErrors, MissingBatchAndMissingFile) {
  std::string msg = error_of([] { parse_scenario("[model]\npreset = \"llama3-8b\"\n", "nb.toml"); });
  expect_has(msg, "nb.toml");
  expect_has(msg, "batch");
  expect_has(msg, "missing [batch]");

  const std::string path = "/nonexistent_dir_for_attn/missing_case.toml";
  msg = error_of([&] { load_scenario(path); });
  expect_has(msg, path);
  expect_has(msg, "no such file");
}

TEST(ScenarioErrors, LoadScenarioReportsTheFilePathAndResolvesTraces) {
  const fs::path dir = fs::temp_directory_path() / ("attn_scenario_" + std::to_string(::getpid()));
  fs::create_directories(dir / "traces");
  std::ofstream(dir / "traces" / "t.csv") << "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,2\n";
  const fs::path good = dir / "good_one.toml";
  std::ofstream(good) << "[model]\npreset = \"llama3-8b\"\n[batch.trace]\nfile = \"traces/t.csv\"\n";
  const Scenario s = load_scenario(good.string());
  EXPECT_EQ(s.name, "good_one");
  EXPECT_EQ(s.file, good.string());
  EXPECT_TRUE(fs::equivalent(s.batch.trace.file, dir / "traces" / "t.csv"));

  const fs::path bad = dir / "bad_one.toml";
  std::ofstream(bad) << "[model]\npreset = \"llama3-8b\"\nblock_size = 0\n" << kOneDecode;
  const std::string msg = error_of([&] { load_scenario(bad.string()); });
  expect_has(msg, bad.string() + ":3:");
  expect_has(msg, "model.block_size = 0");
  fs::remove_all(dir);
}

Scenario random_scenario(uint64_t seed, const std::string& context, const std::string& query, int n = 200);
std::vector<RequestShape> random_shapes(const Scenario& s);

// ---- batch sizes against host memory -----------------------------------------------------------


std::string runtime_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "<no RuntimeError>";
}

TEST(ScenarioLimits, BatchesLargerThanHostMemoryFailBeforeTheyAreBuilt) {
  const HostMemoryLimit limit(64);
  const std::string llama = "[model]\npreset = \"llama3-8b\"\n";
  const Scenario g =
      parse_scenario(llama + "[[batch.requests]]\ncount = 20000000\ncontext_len = 16\nquery_len = 1\n", "big.toml");
  std::string msg = runtime_error_of([&] { expand_shapes(g); });
  expect_has(msg, "big.toml:4: batch.requests[0].count = 20000000:");
  expect_has(msg, "block table 20000000 x 2 int32");
  expect_has(msg, "of host memory");
  expect_has(msg, "available");

  const Scenario r = parse_scenario(llama + "[batch.random]\nnum_requests = 20000000\ncontext_len = 16\n", "rnd.toml");
  msg = runtime_error_of([&] { expand_shapes(r); });
  expect_has(msg, "rnd.toml:4: batch.random.num_requests = 20000000:");
  expect_has(msg, "of host memory");

  const Scenario c = scenario_from_cli("llama3-8b", "20000000x1@16");
  msg = runtime_error_of([&] { expand_shapes(c); });
  expect_has(msg, "<cli>: --batch = 20000000x1@16:");
  expect_has(msg, "of host memory");
  // What fits still expands (the per-token data of 100 decodes, ~28 MB, counts: 1000 would not fit).
  EXPECT_EQ(expand_shapes(scenario_from_cli("llama3-8b", "100x1@16"))[0].requests.size(), 100u);
}

TEST(ScenarioLimits, RandomDrawsAreCheckedExactlyBeforeTheyAreStored) {
  // The least these can draw fits (8 tokens); what they do draw overflows int32 query_start_loc.
  const Scenario s = random_scenario(1, "0", "{ dist = \"uniform\", min = 1, max = 2000000000 }", 8);
  const std::string msg = error_of([&] { expand_shapes(s); });
  expect_has(msg, "rand.toml:5: batch.random.num_requests = 8:");
  expect_has(msg, "query_start_loc");
  // Block ids: 4 requests of up to 2e9 tokens in blocks of one token each.
  const Scenario b = parse_scenario(
      "[model]\npreset = \"llama3-8b\"\nblock_size = 1\n[batch.random]\nnum_requests = 4\n"
      "context_len = { dist = \"uniform\", min = 0, max = 2000000000 }\n",
      "blk.toml");
  expect_has(error_of([&] { expand_shapes(b); }), "blk.toml:5: batch.random.num_requests = 4:");
  // An unbounded lognormal above its cap keeps its min (no inverted clamp).
  for (const RequestShape& r :
       random_shapes(random_scenario(2, "{ dist = \"lognormal\", mean = 10, min = 600000000 }", "1", 3)))
    EXPECT_EQ(r.context_len, 600000000);
}

// ---- compact spec and CLI scenarios ----------------------------------------------------------

TEST(ScenarioCompactSpec, ParsesGroupsInOrder) {
  const std::vector<RequestGroup> g = parse_batch_spec("48x1@2048,2x512@1024, 3x7");
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].count, 48);
  EXPECT_EQ(g[0].query_len, 1);
  EXPECT_EQ(g[0].context_len, 2048);
  EXPECT_EQ(g[1].count, 2);
  EXPECT_EQ(g[1].query_len, 512);
  EXPECT_EQ(g[1].context_len, 1024);
  EXPECT_EQ(g[2].count, 3);
  EXPECT_EQ(g[2].query_len, 7);
  EXPECT_EQ(g[2].context_len, 0);  // "@ctx" is optional
}

TEST(ScenarioCompactSpec, ErrorsNameTheBadItem) {
  struct Bad {
    const char* spec;
    const char* item;
    const char* what;
  };
  const Bad bads[] = {
      {"4xq@16", "4xq@16", "query length"},
      {"48x1@2048,2y512", "2y512", "missing 'x'"},
      {"0x1@5", "0x1@5", "count must be >= 1"},
      {"2x0@5", "2x0@5", "query length must be >= 1"},
      {"2x1@-5", "2x1@-5", "context length"},
      {"2x1@5@6", "2x1@5@6", "context length"},
      {"99999999999x1", "99999999999x1", "too large"},
      {"1x1,,1x1", "1x1,,1x1", "empty item"},
      {"", "", "empty batch spec"},
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.spec);
    const std::string msg = error_of([&] { parse_batch_spec(b.spec); });
    expect_has(msg, *b.item ? std::string("--batch = ") + b.item : std::string("--batch: "));
    expect_has(msg, b.what);
    expect_has(msg, "COUNTxQUERY_LEN");
  }
}

TEST(ScenarioCompactSpec, ScenarioFromCli) {
  const Scenario s = scenario_from_cli("llama4-scout", "4x1@100,1x32", 99);
  EXPECT_EQ(s.file, "<cli>");
  EXPECT_EQ(s.seed, 99u);
  EXPECT_EQ(s.preset, "llama4-scout");
  EXPECT_EQ(s.spec.num_q_heads, 40);
  EXPECT_EQ(s.batch.local_attention_chunk, 8192);
  EXPECT_GT(s.spec.scale, 0.0f);
  const std::vector<BatchShape> shapes = expand_shapes(s);
  ASSERT_EQ(shapes.size(), 1u);
  ASSERT_EQ(shapes[0].requests.size(), 5u);
  EXPECT_EQ(shapes[0].requests[3].context_len, 100);
  EXPECT_EQ(shapes[0].requests[4].query_len, 32);
  EXPECT_EQ(shapes[0].local_attention_chunk, 8192);

  const std::string msg = error_of([] { scenario_from_cli("llama-3-8b", "1x1"); });
  expect_has(msg, "--model = llama-3-8b");
  expect_has(msg, "llama3-8b");
}

// ---- shapes ----------------------------------------------------------------------------------

TEST(ScenarioShapes, GroupsExpandInOrderWithBatchSettings) {
  const Scenario s = parse_scenario(R"([model]
preset = "llama3-8b"
[batch]
shared_prefix_len = 32
block_allocation = "contiguous"
num_blocks = 99
[[batch.requests]]
count = 2
context_len = 40
query_len = 1
[[batch.requests]]
count = 1
context_len = 32
query_len = 9
)",
                                    "g.toml");
  const std::vector<BatchShape> shapes = expand_shapes(s);
  ASSERT_EQ(shapes.size(), 1u);
  const BatchShape& b = shapes[0];
  EXPECT_EQ(b.label, "g");
  EXPECT_EQ(b.step, -1);
  EXPECT_EQ(b.shared_prefix_len, 32);
  EXPECT_EQ(b.block_allocation, BlockAllocation::contiguous);
  EXPECT_EQ(b.num_blocks, 99);
  ASSERT_EQ(b.requests.size(), 3u);
  EXPECT_EQ(b.requests[0].context_len, 40);
  EXPECT_EQ(b.requests[1].query_len, 1);
  EXPECT_EQ(b.requests[2].context_len, 32);
  EXPECT_EQ(b.requests[2].query_len, 9);
  EXPECT_EQ(b.requests[2].seq_len(), 41);
}

Scenario random_scenario(uint64_t seed, const std::string& context, const std::string& query, int n) {
  return parse_scenario("seed = " + std::to_string(seed) +
                            "\n[model]\npreset = \"llama3-8b\"\n[batch.random]\nnum_requests = " + std::to_string(n) +
                            "\ncontext_len = " + context + "\nquery_len = " + query + "\n",
                        "rand.toml");
}

std::vector<RequestShape> random_shapes(const Scenario& s) {
  const std::vector<BatchShape> b = expand_shapes(s);
  EXPECT_EQ(b.size(), 1u);
  return b.empty() ? std::vector<RequestShape>{} : b[0].requests;
}

bool same(const std::vector<RequestShape>& a, const std::vector<RequestShape>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].context_len != b[i].context_len || a[i].query_len != b[i].query_len) return false;
  return true;
}

TEST(ScenarioShapes, RandomIsDeterministicPerSeed) {
  const std::string ctx = "{ dist = \"uniform\", min = 10, max = 5000 }";
  const std::string q = "{ dist = \"uniform\", min = 1, max = 64 }";
  const auto a = random_shapes(random_scenario(5, ctx, q));
  const auto b = random_shapes(random_scenario(5, ctx, q));
  const auto c = random_shapes(random_scenario(6, ctx, q));
  ASSERT_EQ(a.size(), 200u);
  EXPECT_TRUE(same(a, b));
  EXPECT_FALSE(same(a, c));
  int differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += a[i].context_len != c[i].context_len;
  EXPECT_GT(differing, 150);  // a new seed redraws (almost) every request
  // Bounds are inclusive and reached over enough draws; draws are not all the same.
  int qmin = 1 << 30, qmax = 0;
  std::set<int> distinct;
  for (const RequestShape& r : a) {
    EXPECT_GE(r.context_len, 10);
    EXPECT_LE(r.context_len, 5000);
    qmin = std::min(qmin, r.query_len);
    qmax = std::max(qmax, r.query_len);
    distinct.insert(r.context_len);
  }
  EXPECT_EQ(qmin, 1);
  EXPECT_EQ(qmax, 64);
  EXPECT_GT(distinct.size(), 150u);
}

TEST(ScenarioShapes, RandomDistributionsHaveTheirShape) {
  // Uniform: mean near the midpoint.
  const auto u = random_shapes(random_scenario(1, "{ dist = \"uniform\", min = 0, max = 1000 }", "1", 4000));
  double sum = 0;
  for (const RequestShape& r : u) sum += r.context_len;
  EXPECT_NEAR(sum / u.size(), 500.0, 20.0);
  for (const RequestShape& r : u) EXPECT_EQ(r.query_len, 1);

  // Lognormal: `mean` is the mean of the length; the median is mean * exp(-sigma^2 / 2).
  const auto l = random_shapes(random_scenario(2, "{ dist = \"lognormal\", mean = 2000, sigma = 0.6 }", "1", 4000));
  std::vector<int> v;
  sum = 0;
  for (const RequestShape& r : l) sum += r.context_len, v.push_back(r.context_len);
  EXPECT_NEAR(sum / l.size(), 2000.0, 100.0);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  EXPECT_NEAR(v[v.size() / 2], 2000.0 * std::exp(-0.18), 80.0);

  // Lognormal clamps to [min, max].
  const auto c = random_shapes(
      random_scenario(3, "{ dist = \"lognormal\", mean = 500, sigma = 2.0, min = 100, max = 900 }", "1", 1000));
  int at_min = 0, at_max = 0;
  for (const RequestShape& r : c) {
    EXPECT_GE(r.context_len, 100);
    EXPECT_LE(r.context_len, 900);
    at_min += r.context_len == 100;
    at_max += r.context_len == 900;
  }
  EXPECT_GT(at_min, 0);
  EXPECT_GT(at_max, 0);

  // Fixed.
  for (const RequestShape& r : random_shapes(random_scenario(4, "{ dist = \"fixed\", value = 77 }", "5", 10))) {
    EXPECT_EQ(r.context_len, 77);
    EXPECT_EQ(r.query_len, 5);
  }
}

// ---- the shipped scenarios -------------------------------------------------------------------

// 2 (dqk + dv) per visible (query token, key) pair and q head: the work the CI budget counts.
double attention_flops(const AttentionSpec& s, const BatchShape& b) {
  double pairs = 0;
  for (const RequestShape& r : b.requests) {
    for (int i = 0; i < r.query_len; ++i) {
      const int64_t p = r.context_len + i;
      if (!s.causal()) {
        pairs += r.seq_len();
        continue;
      }
      int64_t lo = 0;
      if (s.sliding_window > 0) lo = std::max<int64_t>(lo, p - s.sliding_window + 1);
      if (b.local_attention_chunk > 0)
        lo = std::max<int64_t>(lo, p / b.local_attention_chunk * b.local_attention_chunk);
      pairs += static_cast<double>(p - lo + 1);
    }
  }
  return 2.0 * (s.head_size_qk + s.head_size_v) * s.num_q_heads * pairs;
}

TEST(ScenarioShipped, EveryFileParsesAndStaysCiSized) {
  const std::set<std::string> expected = {
      "quickstart", "decode_heavy",           "mixed_chunked_prefill", "long_context_decode", "cascade_shared_prefix",
      "gqa7_qwen2", "sliding_window_mistral", "softcap_window_gemma2", "sinks_gptoss",        "local_attention_llama4",
      "fp8_kv",     "mla_decode_deepseek",    "mla_prefill_deepseek",  "trace_azure_conv",
      "flashinfer_hnd_decode", "gqa8_tensor_core_decode", "cascade_32k_prefix", "prefill_ragged_pages",
      "fp8_query_prefill", "decode_peaked_scores", "fp8_decode", "prefill_block48", "prefill_hd96_phi3",
      "mixed_uneven_rounds", "prefill_short_rounds", "prefill_hd256_gemma2", "prefill_hd256_gemma3",
      "prefill_peaked_scores", "prefill_mha_split_ragged", "spec_decode_eagle", "spec_decode_gqa4",
      "sinks_fp16_underflow", "layers_mixed_step", "mla_layers_decode"};
  std::set<std::string> found;
  for (const fs::directory_entry& e : fs::directory_iterator(kScenarioDir)) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario(e.path().string()));
    found.insert(e.path().stem().string());
    EXPECT_FALSE(s.description.empty());
    std::ifstream in(e.path());
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first.rfind("# ", 0), 0u) << "a comment header says what the scenario exercises";
    const std::vector<BatchShape> shapes = expand_shapes(s);
    ASSERT_FALSE(shapes.empty());
    for (const BatchShape& b : shapes) {
      EXPECT_FALSE(b.requests.empty());
      // The cpu backend runs every layer; the reference, one.
      const double gflop = attention_flops(s.spec, b) * s.run.num_layers / 1e9;
      EXPECT_LT(gflop, 2.0) << "CPU + float64 reference budget in CI";
    }
  }
  for (const std::string& name : expected) EXPECT_TRUE(found.count(name)) << name;
}

TEST(ScenarioShipped, FilesExerciseWhatTheySay) {
  auto load = [](const char* name) { return load_scenario(kScenarioDir + "/" + name + ".toml"); };
  auto shape = [](const Scenario& s) { return expand_shapes(s).at(0); };

  // Cascade: >= 256 shared tokens, >= 8 requests, all decodes, and the rule says yes on an H100.
  const Scenario c = load("cascade_shared_prefix");
  const BatchShape cb = shape(c);
  EXPECT_GE(c.batch.shared_prefix_len, 256);
  EXPECT_GE(cb.requests.size(), 8u);
  std::vector<int32_t> qlens;
  for (const RequestShape& r : cb.requests) qlens.push_back(r.query_len);
  EXPECT_TRUE(std::all_of(qlens.begin(), qlens.end(), [](int32_t q) { return q == 1; }));
  for (int sms : {108, 132}) {
    const CascadeDecision d = use_cascade_attention(c.batch.shared_prefix_len, qlens, c.spec.num_q_heads,
                                                    c.spec.num_kv_heads, false, false, false, sms);
    EXPECT_TRUE(d.use) << sms << ": " << d.reason;
  }

  // Sliding window: some prefill chunk is longer than the window.
  const Scenario w = load("sliding_window_mistral");
  const BatchShape wb = shape(w);
  EXPECT_GT(w.spec.sliding_window, 0);
  EXPECT_TRUE(std::any_of(wb.requests.begin(), wb.requests.end(),
                          [&](const RequestShape& r) { return r.query_len > w.spec.sliding_window; }));

  // Local attention: a prefill spans at least three local chunks.
  const Scenario l = load("local_attention_llama4");
  const BatchShape lb = shape(l);
  const int chunk = lb.local_attention_chunk;
  ASSERT_GT(chunk, 0);
  EXPECT_TRUE(std::any_of(lb.requests.begin(), lb.requests.end(), [&](const RequestShape& r) {
    return (r.seq_len() - 1) / chunk - r.context_len / chunk >= 2;
  }));

  // fp8: e4m3 with a non-unit fixed scale and a "calc" one.
  const Scenario f = load("fp8_kv");
  EXPECT_EQ(f.spec.kv_cache_dtype, DType::fp8_e4m3);
  EXPECT_TRUE(f.spec.k_scale_calc != f.spec.v_scale_calc);
  EXPECT_NE(f.spec.k_scale_calc ? f.spec.v_scale : f.spec.k_scale, 1.0f);

  // fp8 query: e4m3 cache, quantized queries ("calc"), prefill chunks only (FLASH_ATTN's prefill
  // tiling), a fresh prefill and sequences ending inside a page.
  const Scenario fq = load("fp8_query_prefill");
  EXPECT_EQ(fq.spec.kv_cache_dtype, DType::fp8_e4m3);
  EXPECT_TRUE(fq.spec.q_scale_calc);
  EXPECT_FALSE(fq.spec.use_mla);
  EXPECT_NE(fq.spec.k_scale, 1.0f);
  const BatchShape fqb = shape(fq);
  EXPECT_TRUE(std::all_of(fqb.requests.begin(), fqb.requests.end(),
                          [](const RequestShape& r) { return r.query_len > 1; }));
  EXPECT_TRUE(std::any_of(fqb.requests.begin(), fqb.requests.end(),
                          [](const RequestShape& r) { return r.context_len == 0; }));
  EXPECT_TRUE(std::any_of(fqb.requests.begin(), fqb.requests.end(),
                          [&](const RequestShape& r) { return r.seq_len() % fq.spec.block_size != 0; }));

  // fp8 decode: e4m3 cache, decodes of one and two tokens only (FLASH_ATTN's fp8 decode launch), a
  // request with no context and sequences ending inside a page.
  const Scenario fd = load("fp8_decode");
  EXPECT_EQ(fd.spec.kv_cache_dtype, DType::fp8_e4m3);
  const BatchShape fdb = shape(fd);
  EXPECT_TRUE(std::all_of(fdb.requests.begin(), fdb.requests.end(),
                          [](const RequestShape& r) { return r.query_len == 1 || r.query_len == 2; }));
  EXPECT_TRUE(std::any_of(fdb.requests.begin(), fdb.requests.end(), [](const RequestShape& r) { return r.query_len == 2; }));
  EXPECT_TRUE(std::any_of(fdb.requests.begin(), fdb.requests.end(),
                          [](const RequestShape& r) { return r.context_len == 0; }));
  EXPECT_TRUE(std::any_of(fdb.requests.begin(), fdb.requests.end(),
                          [&](const RequestShape& r) { return r.seq_len() % fd.spec.block_size != 0; }));

  // Speculative decodes: every request 3 to 8 tokens, G x q_len past the mma.sync decode tile's 16
  // rows and within one sm_90a tile (FLASH_ATTN's decode launch of one-tile sequences), a request
  // with no context, sequences ending inside a page, and few enough (request, kv head) pairs that
  // a 132-SM GPU splits their keys.
  const Scenario sd = load("spec_decode_eagle");
  const BatchShape sdb = shape(sd);
  const int sg = sd.spec.num_q_heads / sd.spec.num_kv_heads;
  EXPECT_TRUE(std::all_of(sdb.requests.begin(), sdb.requests.end(), [&](const RequestShape& r) {
    return r.query_len >= 3 && r.query_len <= 8 && r.query_len * sg > 16 && r.query_len * sg <= 128;
  }));
  EXPECT_TRUE(std::any_of(sdb.requests.begin(), sdb.requests.end(), [](const RequestShape& r) { return r.context_len == 0; }));
  EXPECT_TRUE(std::any_of(sdb.requests.begin(), sdb.requests.end(),
                          [&](const RequestShape& r) { return r.seq_len() % sd.spec.block_size != 0; }));
  EXPECT_LT(static_cast<int>(sdb.requests.size()) * sd.spec.num_kv_heads, 132);

  // Speculative decodes within FLASH_ATTN's 32-row spec tile (17 to 32 packed rows at head size
  // 128), with the same page tails, an empty context and few enough pairs to split.
  const Scenario s4 = load("spec_decode_gqa4");
  const BatchShape s4b = shape(s4);
  const int g4 = s4.spec.num_q_heads / s4.spec.num_kv_heads;
  EXPECT_EQ(s4.spec.head_size_qk, 128);
  EXPECT_TRUE(std::all_of(s4b.requests.begin(), s4b.requests.end(), [&](const RequestShape& r) {
    return r.query_len * g4 > 16 && r.query_len * g4 <= 32;
  }));
  EXPECT_TRUE(std::any_of(s4b.requests.begin(), s4b.requests.end(), [&](const RequestShape& r) { return r.query_len * g4 == 32; }));
  EXPECT_TRUE(std::any_of(s4b.requests.begin(), s4b.requests.end(), [](const RequestShape& r) { return r.context_len == 0; }));
  EXPECT_TRUE(std::any_of(s4b.requests.begin(), s4b.requests.end(),
                          [&](const RequestShape& r) { return r.seq_len() % s4.spec.block_size != 0; }));
  EXPECT_LT(static_cast<int>(s4b.requests.size()) * s4.spec.num_kv_heads, 132);

  // Head size 256 without a soft cap or ALiBi (the sm_90a kernel's plain-scores instantiation, which
  // prefill_hd256_gemma2's soft cap never reaches): prefills only, one with cached context, and
  // sequences ending inside a page.
  const Scenario g3 = load("prefill_hd256_gemma3");
  EXPECT_EQ(g3.spec.head_size_qk, 256);
  EXPECT_EQ(g3.spec.head_size_v, 256);
  EXPECT_EQ(g3.spec.logits_soft_cap, 0.f);
  EXPECT_FALSE(g3.spec.alibi);
  const BatchShape g3b = shape(g3);
  EXPECT_TRUE(std::all_of(g3b.requests.begin(), g3b.requests.end(), [](const RequestShape& r) { return r.query_len > 16; }));
  EXPECT_TRUE(std::any_of(g3b.requests.begin(), g3b.requests.end(), [](const RequestShape& r) { return r.context_len > 0; }));
  EXPECT_TRUE(std::any_of(g3b.requests.begin(), g3b.requests.end(),
                          [&](const RequestShape& r) { return r.seq_len() % g3.spec.block_size != 0; }));

  // MLA decode: TP8 rank, block 64, decodes only; MLA prefill: chunks over cached context.
  const Scenario md = load("mla_decode_deepseek");
  EXPECT_TRUE(md.spec.use_mla);
  EXPECT_EQ(md.spec.num_q_heads, 16);
  EXPECT_EQ(md.spec.block_size, 64);
  for (const RequestShape& r : shape(md).requests) EXPECT_EQ(r.query_len, 1);
  const BatchShape mp = shape(load("mla_prefill_deepseek"));
  EXPECT_TRUE(std::any_of(mp.requests.begin(), mp.requests.end(),
                          [](const RequestShape& r) { return r.query_len > 1 && r.context_len > 0; }));

  // Peaked scores: decodes only, contexts of hundreds of keys, and a score spread (std 12, ~17 in
  // log2 units) at which a row's running max keeps rising by more than 2^8 along its keys (the
  // lazy rescale of FLASHINFER's CUDA-core decode re-bases only past that).
  const Scenario ps = load("decode_peaked_scores");
  ASSERT_TRUE(ps.data.logit_std.has_value());
  EXPECT_GE(*ps.data.logit_std * 1.4426950408889634, 8.0 * 2);
  for (const RequestShape& r : shape(ps).requests) {
    EXPECT_EQ(r.query_len, 1);
    EXPECT_GE(r.context_len, 512);
  }

  // Peaked prefill scores: prefills only, several key tiles of 128 per row, and a spread (std 60,
  // ~87 in log2 units) at which the sm_90a prefill's running maxima jump past 2^8 and past 2^120:
  // two standard deviations of the scores in log2 units reach at least 120.
  const Scenario pp = load("prefill_peaked_scores");
  ASSERT_TRUE(pp.data.logit_std.has_value());
  const double std_log2 = *pp.data.logit_std * 1.4426950408889634;  // log2(e)
  EXPECT_GE(2.0 * std_log2, 120.0);
  for (const RequestShape& r : shape(pp).requests) {
    EXPECT_EQ(r.context_len, 0);
    EXPECT_GE(r.query_len, 256);
  }

  // Trace: one step of the shipped trace, on the TP8 rank, with a modest budget.
  const Scenario t = load("trace_azure_conv");
  EXPECT_EQ(t.batch.source, BatchSource::trace);
  EXPECT_EQ(t.preset, "llama3-70b-tp8");
  EXPECT_LE(t.batch.trace.max_num_batched_tokens, 2048);
  const BatchShape tb = shape(t);
  int64_t tokens = 0;
  for (const RequestShape& r : tb.requests) tokens += r.query_len;
  EXPECT_LE(tokens, t.batch.trace.max_num_batched_tokens);
  EXPECT_EQ(tb.step, t.batch.trace.step);
}


// ---- --set overrides -------------------------------------------------------------------------

std::vector<ScenarioOverride> sets(std::initializer_list<const char*> texts) {
  std::vector<ScenarioOverride> out;
  for (const char* t : texts) out.push_back(parse_override(t));
  return out;
}

// The site of the InputError that f throws (a test failure when it throws none).
std::optional<InputSite> site_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    EXPECT_TRUE(e.site().has_value()) << e.what();
    EXPECT_EQ(std::string(e.what()), e.site() ? input_error_message(*e.site()) : std::string());
    return e.site();
  }
  ADD_FAILURE() << "no InputError";
  return std::nullopt;
}

TEST(ScenarioOverrides, KeysAreDottedWithIndicesInBrackets) {
  const ScenarioOverride a = parse_override("batch.requests.1.count=8");
  EXPECT_EQ(a.key, "batch.requests[1].count");
  EXPECT_EQ(a.value, "8");
  EXPECT_EQ(parse_override(" model.block_size = 32 ").text(), "model.block_size=32");
  EXPECT_EQ(parse_override("batch.requests[0].query_len=1").key, "batch.requests[0].query_len");
  EXPECT_EQ(parse_override("name=\"a=b\"").value, "\"a=b\"");  // the first '=' splits
  for (const char* bad : {"no_equals", "=1", "a..b=1", "a.=1", ".a=1", "0.a=1", "a[x]=1", "a[1=1", "a]b=1",
                          "model.kv cache=1", "model.block_size=", "a.b[2]c=1"}) {
    const auto site = site_of([&] { (void)parse_override(bad); });
    ASSERT_TRUE(site.has_value()) << bad;
    EXPECT_EQ(site->file, "--set") << bad;
    EXPECT_EQ(site->key, bad);
    EXPECT_FALSE(site->what.empty()) << bad;
  }
}

// Each override lands on the key it names, as if the file had said it: a value of any TOML type, a
// bare word as a string, a table the file lacks, an element of [[batch.requests]]; a later override
// of the same key wins, and the name says what was changed.
TEST(ScenarioOverrides, ChangeTheScenarioAsTheFileWould) {
  const std::string text = "name = \"base\"\n[model]\npreset = \"llama3-8b\"\n" + kOneDecode +
                           "[[batch.requests]]\ncount = 1\ncontext_len = 16\nquery_len = 32\n";
  const Scenario plain = parse_scenario(text, "s.toml");
  EXPECT_EQ(plain.name, "base");
  EXPECT_TRUE(plain.overrides.empty());
  const Scenario s = parse_scenario(
      text, "s.toml", ".",
      sets({"model.kv_cache_dtype=fp8_e4m3", "model.block_size=32", "check.k_l2=1.25", "batch.requests.1.query_len=48",
            "run.backends=[\"cpu\"]", "run.iterations=3", "run.iterations=4", "data.logit_std=2"}));
  EXPECT_EQ(s.spec.kv_cache_dtype, DType::fp8_e4m3);
  EXPECT_EQ(s.spec.block_size, 32);
  EXPECT_EQ(s.spec.num_q_heads, 32);  // the preset's, untouched
  ASSERT_TRUE(s.check.k_l2.has_value());
  EXPECT_DOUBLE_EQ(*s.check.k_l2, 1.25);
  ASSERT_EQ(s.batch.groups.size(), 2u);
  EXPECT_EQ(s.batch.groups[0].query_len, 1);
  EXPECT_EQ(s.batch.groups[1].query_len, 48);
  EXPECT_EQ(s.run.backends, std::vector<std::string>{"cpu"});
  EXPECT_EQ(s.run.iterations, 4);
  ASSERT_TRUE(s.data.logit_std.has_value());
  EXPECT_DOUBLE_EQ(*s.data.logit_std, 2.0);
  EXPECT_EQ(s.overrides.size(), 8u);
  EXPECT_EQ(s.name,
            "base[model.kv_cache_dtype=fp8_e4m3,model.block_size=32,check.k_l2=1.25,batch.requests[1].query_len=48,"
            "run.backends=[\"cpu\"],run.iterations=3,run.iterations=4,data.logit_std=2]");
  // The quoted string, and a whole inline table.
  EXPECT_EQ(parse_scenario(text, "s.toml", ".", sets({"description=\"two words\""})).description, "two words");
  const Scenario r = parse_scenario("[model]\npreset = \"llama3-8b\"\n[batch.random]\nnum_requests = 3\n"
                                    "context_len = { dist = \"fixed\", value = 10 }\nquery_len = { dist = \"fixed\", value = 1 }\n",
                                    "r.toml", ".", sets({"batch.random.context_len={ dist = \"uniform\", min = 5, max = 9 }"}));
  EXPECT_EQ(r.batch.random.context_len.kind, LengthDist::Kind::uniform);
  EXPECT_EQ(r.batch.random.context_len.max, 9);
}

// An error about an overridden key names --set, not a line of the file; one about another key keeps
// its line and says which overrides the file was read with.
TEST(ScenarioOverrides, ErrorsNameTheOverride) {
  const std::string text = "[model]\npreset = \"llama3-8b\"\n" + kOneDecode;
  auto parse = [&](std::initializer_list<const char*> o) { return [&, o] { (void)parse_scenario(text, "s.toml", ".", sets(o)); }; };
  struct Case {
    const char* set;
    const char* key;
    const char* what;
  };
  for (const Case& c : {Case{"model.kv_cache_dtype=fp8_e4m5", "model.kv_cache_dtype", "unknown kv cache dtype"},
                        Case{"model.kv_cache_dtyp=fp8_e4m3", "model.kv_cache_dtyp", "unknown key"},
                        Case{"run.iterations=0", "run.iterations", "must be >= 1"},
                        Case{"run.iterations=many", "run.iterations", "expected an integer"},
                        Case{"batch.requests[3].count=1", "batch.requests[3].count", "has 1 element"},
                        Case{"model.preset.x=1", "model.preset.x", "is not a table"},
                        Case{"batch.requests[0].count.x=1", "batch.requests[0].count.x", "is not a table"},
                        Case{"run.backends[0]=\"cpu\"", "run.backends[0]", "is not in the scenario"},
                        Case{"model.scale=1.5x", "model.scale", "not a TOML value"},
                        Case{"checks.k_l2=2", "checks", "unknown key"}}) {
    const auto site = site_of(parse({c.set}));
    ASSERT_TRUE(site.has_value()) << c.set;
    EXPECT_EQ(site->file, "--set (s.toml)") << c.set;
    EXPECT_EQ(site->line, 0) << c.set;
    EXPECT_EQ(site->key, c.key) << c.set;
    EXPECT_NE(site->what.find(c.what), std::string::npos) << c.set << ": " << site->what;
  }
  // An element replaced by index: the error about the array that holds it is the override's.
  auto element = site_of(parse({"batch.requests[0]=3"}));
  ASSERT_TRUE(element.has_value());
  EXPECT_EQ(element->file, "--set (s.toml)");
  EXPECT_EQ(element->key, "batch.requests");
  // num_kv_heads = 3 does not divide the preset's 32 query heads: the error is the override's.
  auto site = site_of(parse({"model.num_kv_heads=3"}));
  ASSERT_TRUE(site.has_value());
  EXPECT_EQ(site->file, "--set (s.toml)");
  // An error at a line of the file, caused by an override elsewhere, keeps its line and names the override.
  site = site_of([&] {
    (void)parse_scenario("[model]\npreset = \"llama3-8b\"\n[batch]\nlocal_attention_chunk = 64\n" + kOneDecode, "c.toml",
                         ".", sets({"model.block_size=48"}));
  });
  ASSERT_TRUE(site.has_value());
  EXPECT_EQ(site->file, "c.toml");
  EXPECT_EQ(site->line, 4);
  EXPECT_NE(site->hint.find("read with --set model.block_size=48"), std::string::npos) << site->hint;
}

// `--model P --batch SPEC --set ...` is the file that the quick batch stands for, overridden: without
// a change that matters, the same scenario as the quick batch's own (the preset's local chunk, the
// seed past 2^63 included).
TEST(ScenarioOverrides, QuickBatchesTakeThemToo) {
  const uint64_t seed = 18446744073709551615ull;
  const Scenario a = scenario_from_cli("llama4-scout", "2x16@8000,3x1@100", seed);
  const Scenario b = scenario_from_cli("llama4-scout", "2x16@8000,3x1@100", seed, sets({"run.iterations=7"}));
  EXPECT_EQ(b.name, "llama4-scout:2x16@8000,3x1@100[run.iterations=7]");
  EXPECT_EQ(b.file, "<cli>");
  EXPECT_EQ(b.seed, seed);
  EXPECT_EQ(b.preset, a.preset);
  EXPECT_EQ(b.run.iterations, 7);
  EXPECT_EQ(a.run.iterations, 50);
  EXPECT_EQ(b.spec.num_q_heads, a.spec.num_q_heads);
  EXPECT_EQ(b.spec.num_kv_heads, a.spec.num_kv_heads);
  EXPECT_EQ(b.spec.head_size_qk, a.spec.head_size_qk);
  EXPECT_EQ(b.spec.dtype, a.spec.dtype);
  EXPECT_EQ(b.spec.kv_cache_dtype, a.spec.kv_cache_dtype);
  EXPECT_FLOAT_EQ(b.spec.scale, a.spec.scale);
  EXPECT_EQ(b.spec.block_size, a.spec.block_size);
  EXPECT_EQ(b.batch.local_attention_chunk, 8192);
  EXPECT_EQ(b.batch.local_attention_chunk, a.batch.local_attention_chunk);
  ASSERT_EQ(b.batch.groups.size(), a.batch.groups.size());
  for (size_t i = 0; i < a.batch.groups.size(); ++i) {
    EXPECT_EQ(b.batch.groups[i].count, a.batch.groups[i].count);
    EXPECT_EQ(b.batch.groups[i].context_len, a.batch.groups[i].context_len);
    EXPECT_EQ(b.batch.groups[i].query_len, a.batch.groups[i].query_len);
  }
  EXPECT_EQ(b.batch.origin.size_key, "--batch");
  EXPECT_EQ(scenario_from_cli("llama3-8b", "1x1@8", 0, sets({"seed=5"})).seed, 5u);
  // A name given by --set names it, as it would a file.
  EXPECT_EQ(scenario_from_cli("llama3-8b", "1x1@8", 0, sets({"name=mine"})).name, "mine[name=mine]");
  const Scenario f = scenario_from_cli("llama3-8b", "1x1@8", 0, sets({"model.kv_cache_dtype=fp8_e5m2"}));
  EXPECT_EQ(f.spec.kv_cache_dtype, DType::fp8_e5m2);
  const auto site = site_of([] { (void)scenario_from_cli("llama3-8b", "1x1@8", 0, sets({"model.block_size=0"})); });
  ASSERT_TRUE(site.has_value());
  EXPECT_EQ(site->file, "--set (<cli>)");
  EXPECT_EQ(site->key, "model.block_size");
}

// The same, judged by what a quick batch is for: an override that changes nothing of the batch (run
// keys) leaves every input a backend reads bit for bit as the quick batch's own, on presets whose
// features live outside the shape (gpt-oss's sinks and window, Gemma-2's soft cap, Llama-4's local
// chunk, DeepSeek's MLA latent cache and up-projections).
TEST(ScenarioOverrides, QuickBatchesKeepEveryInputUnderARunOverride) {
  const auto bits = [](float x) { return std::bit_cast<uint32_t>(x); };
  for (const char* preset : {"gpt-oss-20b", "gemma2-9b", "llama4-scout", "deepseek-v3-tp8"}) {
    SCOPED_TRACE(preset);
    const Scenario a = scenario_from_cli(preset, "2x1@300,1x40@90", 11);
    const Scenario o = scenario_from_cli(preset, "2x1@300,1x40@90", 11, sets({"run.iterations=3", "run.warmup=0"}));
    const std::vector<BatchShape> sa = expand_shapes(a), so = expand_shapes(o);
    ASSERT_EQ(sa.size(), 1u);
    ASSERT_EQ(so.size(), 1u);
    const Batch x = make_batch(a.spec, sa[0], a.seed), y = make_batch(o.spec, so[0], o.seed);
    EXPECT_EQ(x.spec.sliding_window, y.spec.sliding_window);
    EXPECT_EQ(bits(x.spec.logits_soft_cap), bits(y.spec.logits_soft_cap));
    EXPECT_EQ(bits(x.spec.scale), bits(y.spec.scale));
    EXPECT_EQ(x.spec.use_mla, y.spec.use_mla);
    EXPECT_EQ(x.local_attention_chunk, y.local_attention_chunk);
    EXPECT_EQ(x.block_table, y.block_table);
    EXPECT_EQ(x.slot_mapping, y.slot_mapping);
    EXPECT_EQ(x.query_start_loc, y.query_start_loc);
    EXPECT_EQ(x.sinks, y.sinks);
    EXPECT_EQ(x.alibi, y.alibi);
    for (int r = 0; r < x.num_reqs(); ++r) {
      const int pos = x.requests[r].seq_len() - 1;  // a new token: it has a query
      for (int d = 0; d < 16; ++d) {
        EXPECT_EQ(bits(x.q(r, pos, 1, d)), bits(y.q(r, pos, 1, d)));
        if (x.spec.use_mla) {
          EXPECT_EQ(bits(x.latent(r, pos / 2, d)), bits(y.latent(r, pos / 2, d)));
          EXPECT_EQ(bits(x.w_uk(1, d, d)), bits(y.w_uk(1, d, d)));
        } else {
          EXPECT_EQ(bits(x.k(r, pos / 2, 0, d)), bits(y.k(r, pos / 2, 0, d)));
          EXPECT_EQ(bits(x.v(r, pos, 0, d)), bits(y.v(r, pos, 0, d)));
        }
      }
    }
    EXPECT_EQ(o.run.iterations, 3);
  }
}

}  // namespace
}  // namespace attn
