// The validator must catch the bugs attention kernels really ship with. A compact copy of the
// cpu backend's path (cache write through slot_mapping, attention read only through block
// tables) lives here with a switch that plants one fault at a time; every faulted run must
// FAIL validate_output and the clean copy must PASS.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "model/batch.hpp"
#include "model/kv_cache.hpp"
#include "reference/reference.hpp"
#include "validate/validate.hpp"

namespace attn {
namespace {

enum class Fault {
  none,
  causal_off_by_one,   // a query also sees the next token
  wrong_block_entry,   // logical block 1 of request 0 reads the physical block of logical 2
  ignored_soft_cap,    // soft cap configured but never applied
  ignored_fp8_scale,   // fp8 cache read back as if the scales were 1.0
  unwritten_row,       // the last token's output row is never stored
  page_tail_nan,       // whole blocks are read and masked by multiplication: 0 * NaN
};

const char* to_string(Fault f) {
  switch (f) {
    case Fault::none: return "none";
    case Fault::causal_off_by_one: return "causal_off_by_one";
    case Fault::wrong_block_entry: return "wrong_block_entry";
    case Fault::ignored_soft_cap: return "ignored_soft_cap";
    case Fault::ignored_fp8_scale: return "ignored_fp8_scale";
    case Fault::unwritten_row: return "unwritten_row";
    case Fault::page_tail_nan: return "page_tail_nan";
  }
  return "?";
}

// Cpu attention path, one (token, q head) at a time, two-pass softmax in fp32.
AttentionOutput cpu_attention_copy(const Batch& b, Fault fault) {
  const AttentionSpec& s = b.spec;
  const int hq = s.num_q_heads, hkv = s.num_kv_heads, dqk = s.head_size_qk, dv = s.head_size_v, bs = b.block_size;
  const KvCacheLayout l = make_cache_layout(b, s.kv_layout == KvLayout::NHD ? CacheFormat::flash_attn : CacheFormat::flashinfer);
  std::vector<uint8_t> cache(l.bytes());  // context filled, NaN everywhere else
  fill_cache_host(b, l, cache.data());
  const bool fp8 = is_fp8(l.dtype);

  // reshape_and_cache: the new tokens' K/V through slot_mapping.
  for (int r = 0; r < b.num_reqs(); ++r) {
    for (int i = 0; i < b.requests[r].query_len; ++i) {
      const int pos = b.requests[r].context_len + i;
      const int64_t slot = b.slot_mapping[b.query_start_loc[r] + i];
      for (int h = 0; h < hkv; ++h) {
        for (int d = 0; d < dqk; ++d) {
          const float x = b.k_input(r, pos, h, d);
          store_as(l.dtype, cache.data(), static_cast<size_t>(l.k_index(slot / bs, slot % bs, h, d)), fp8 ? x / s.k_scale : x);
        }
        for (int d = 0; d < dv; ++d) {
          const float x = b.v_input(r, pos, h, d);
          store_as(l.dtype, cache.data(), static_cast<size_t>(l.v_index(slot / bs, slot % bs, h, d)), fp8 ? x / s.v_scale : x);
        }
      }
    }
  }
  const float k_scale = fp8 && fault != Fault::ignored_fp8_scale ? s.k_scale : 1.0f;
  const float v_scale = fp8 && fault != Fault::ignored_fp8_scale ? s.v_scale : 1.0f;
  const float soft_cap = fault == Fault::ignored_soft_cap ? 0.0f : s.logits_soft_cap;

  AttentionOutput out;
  out.num_tokens = b.num_tokens();
  out.num_heads = hq;
  out.head_size_v = dv;
  out.o.assign(static_cast<size_t>(out.num_tokens * hq * dv), std::numeric_limits<float>::quiet_NaN());  // poisoned
  out.lse.assign(static_cast<size_t>(out.num_tokens * hq), std::numeric_limits<float>::quiet_NaN());

  for (int r = 0; r < b.num_reqs(); ++r) {
    const int seq = b.requests[r].seq_len();
    const int32_t* table = b.block_table.data() + static_cast<size_t>(r) * b.max_blocks_per_req;
    for (int i = 0; i < b.requests[r].query_len; ++i) {
      const int64_t token = b.query_start_loc[r] + i;
      if (fault == Fault::unwritten_row && token == b.num_tokens() - 1) continue;
      const int p = b.requests[r].context_len + i;
      const int hi = std::min(fault == Fault::causal_off_by_one ? p + 2 : p + 1, seq);  // visible: [0, hi)
      // Keys visited: the visible ones, or (faulted) every slot of the blocks they touch.
      const int visit_end = fault == Fault::page_tail_nan ? (hi + bs - 1) / bs * bs : hi;
      for (int h = 0; h < hq; ++h) {
        const int kvh = h / (hq / hkv);
        std::vector<float> q(dqk), k(dqk), logits(visit_end);
        std::vector<std::vector<float>> v(visit_end, std::vector<float>(dv));
        for (int d = 0; d < dqk; ++d) q[d] = b.q(r, p, h, d);
        float m = -std::numeric_limits<float>::infinity();
        for (int key = 0; key < visit_end; ++key) {
          int logical = key / bs;
          if (fault == Fault::wrong_block_entry && r == 0 && logical == 1) logical = 2;
          const int64_t block = table[logical];
          float dot = 0;
          for (int d = 0; d < dqk; ++d) {
            k[d] = load_as(l.dtype, cache.data(), static_cast<size_t>(l.k_index(block, key % bs, kvh, d)));
            if (fp8) k[d] *= k_scale;
            dot += q[d] * k[d];
          }
          for (int d = 0; d < dv; ++d) {
            v[key][d] = load_as(l.dtype, cache.data(), static_cast<size_t>(l.v_index(block, key % bs, kvh, d)));
            if (fp8) v[key][d] *= v_scale;
          }
          float x = s.scale * dot;
          if (soft_cap > 0) x = soft_cap * std::tanh(x / soft_cap);
          logits[key] = x;
          if (key < hi) m = std::max(m, x);
        }
        float denom = 0;
        std::vector<float> acc(dv, 0.0f);
        for (int key = 0; key < visit_end; ++key) {
          const float w = key < hi ? std::exp(logits[key] - m) : 0.0f;
          denom += w;
          for (int d = 0; d < dv; ++d) acc[d] += w * v[key][d];
        }
        const int64_t row = token * hq + h;
        for (int d = 0; d < dv; ++d) out.o[row * dv + d] = acc[d] / denom;
        out.lse[row] = m + std::log(denom);
      }
    }
  }
  return out;
}

// Short contexts, ragged, fp8 with non-unit scales and a soft cap, so every fault bites hard.
// Request 0 has full logical blocks 1 and 2 (the wrong-entry fault stays finite); no seq_len
// is a multiple of the block size (every last block has a NaN tail).
Batch fault_batch() {
  AttentionSpec s;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_size_qk = s.head_size_v = 32;
  s.dtype = DType::bf16;
  s.kv_cache_dtype = DType::fp8_e4m3;
  s.k_scale = 0.5f;
  s.v_scale = 2.0f;
  s.logits_soft_cap = 2.0f;
  s.block_size = 16;
  BatchShape shape;
  shape.label = "planted_faults";
  shape.requests = {{70, 3}, {0, 12}, {21, 5}, {40, 1}};
  return make_batch(s, shape, 5);
}

class PlantedFault : public ::testing::TestWithParam<Fault> {};

TEST_P(PlantedFault, ValidatorCatchesIt) {
  const Batch b = fault_batch();
  const ReferenceResult ref = compute_reference(b);
  // The copy computes and stores in fp32, like the cpu backend: held to the fp32 budget.
  const Budget budget = default_budget(DType::f32);
  const Fault fault = GetParam();
  const ValidationResult v = validate_output(b, cpu_attention_copy(b, fault), ref, budget);
  if (fault == Fault::none) {
    EXPECT_TRUE(v.pass) << v.failure;
    EXPECT_LT(v.err_over_floor, budget.k_l2 / 4) << "the clean copy should sit far inside the budget";
    return;
  }
  EXPECT_FALSE(v.pass) << to_string(fault) << " went unnoticed";
  switch (fault) {
    case Fault::unwritten_row:
      EXPECT_EQ(v.unwritten, int64_t{b.spec.num_q_heads} * b.spec.head_size_v);
      break;
    case Fault::page_tail_nan:
      EXPECT_GT(v.nan_mismatches, 0);
      break;
    default:  // a value fault: far over the budget, not a borderline miss
      EXPECT_GT(v.err_over_floor, 4 * budget.k_l2) << to_string(fault);
      EXPECT_GT(v.elements_over_budget, 0) << to_string(fault);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, PlantedFault,
                         ::testing::Values(Fault::none, Fault::causal_off_by_one, Fault::wrong_block_entry,
                                           Fault::ignored_soft_cap, Fault::ignored_fp8_scale, Fault::unwritten_row,
                                           Fault::page_tail_nan),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace attn
