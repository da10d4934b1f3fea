// Batch generation: value conventions, determinism, the block allocator and count_work.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <random>
#include <set>

#include "core/error.hpp"
#include "core/values.hpp"
#include "model/batch.hpp"
#include "host_memory_limit.hpp"

namespace attn {
namespace {

AttentionSpec small_spec() {
  AttentionSpec s;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_size_qk = s.head_size_v = 16;
  s.block_size = 16;
  s.dtype = s.kv_cache_dtype = DType::bf16;
  return s;
}

AttentionSpec mla_spec() {
  AttentionSpec s;
  s.use_mla = true;
  s.num_q_heads = 16;
  s.num_kv_heads = 1;
  s.head_size_qk = 192;
  s.head_size_v = 128;
  s.block_size = 64;
  return s;
}

// A mixed batch: decodes, prefill chunks and a fresh prefill, lengths not block-aligned.
BatchShape mixed_shape(BlockAllocation alloc = BlockAllocation::shuffled, int shared_prefix = 0) {
  BatchShape sh;
  sh.label = "mixed";
  sh.block_allocation = alloc;
  sh.shared_prefix_len = shared_prefix;
  sh.requests = {{100, 1}, {37, 1}, {64, 29}, {250, 1}, {129, 70}, {40, 3}};
  return sh;
}

BatchShape random_shape(std::mt19937& rng, int n, int max_ctx, int max_q) {
  BatchShape sh;
  sh.label = "random";
  std::uniform_int_distribution<int> ctx(0, max_ctx), q(1, max_q), decode(0, 1);
  for (int i = 0; i < n; ++i) sh.requests.push_back({ctx(rng), decode(rng) ? 1 : q(rng)});
  return sh;
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Batch, ValuesFollowTheGeneratorConventions) {
  AttentionSpec s = small_spec();
  s.sinks = true;
  const Batch b = make_batch(s, mixed_shape(), 77);
  for (int d = 0; d < 16; ++d) {
    EXPECT_EQ(b.q(2, 70, 3, d), round_to(DType::bf16, 4.0f * gen_value(77, ValueTensor::q, 2, 70, 3, d)));
    EXPECT_EQ(b.k_input(4, 5, 1, d), round_to(DType::bf16, gen_value(77, ValueTensor::k, 4, 5, 1, d)));
    EXPECT_EQ(b.v_input(4, 5, 1, d), round_to(DType::bf16, gen_value(77, ValueTensor::v, 4, 5, 1, d)));
    EXPECT_EQ(b.k(4, 5, 1, d), b.k_input(4, 5, 1, d));  // no quantization for a bf16 cache
  }
  ASSERT_EQ(b.sinks.size(), 4u);
  // Sinks sit near the largest scores: centred on 3 x the score std (4/3), spread by one std.
  EXPECT_FLOAT_EQ(b.q_amplitude, 4.0f);
  EXPECT_FLOAT_EQ(b.sink_centre, 4.0f);
  for (int h = 0; h < 4; ++h)
    EXPECT_EQ(b.sinks[h], b.sink_centre + b.sink_spread * gen_value(77, ValueTensor::sink, 0, 0, h, 0));
  EXPECT_TRUE(b.alibi.empty());
  EXPECT_FLOAT_EQ(b.spec.scale, 0.25f);  // 1/sqrt(16) resolved
  // Inputs are not flat: queries span about [-4, 4).
  float qmax = 0;
  for (int d = 0; d < 16; ++d) qmax = std::max(qmax, std::fabs(b.q(0, 100, 0, d)));
  EXPECT_GT(qmax, 1.0f);
}

TEST(Batch, QueryStartLocFlattensTokensInBatchOrder) {
  const Batch b = make_batch(small_spec(), mixed_shape(), 1);
  ASSERT_EQ(b.query_start_loc.size(), 7u);
  EXPECT_EQ(b.query_start_loc, (std::vector<int32_t>{0, 1, 2, 31, 32, 102, 105}));
  EXPECT_EQ(b.num_tokens(), 105);
  EXPECT_EQ(b.slot_mapping.size(), 105u);
}

TEST(Batch, SameSeedIsBitIdenticalOtherSeedDiffers) {
  AttentionSpec s = small_spec();
  s.kv_cache_dtype = DType::fp8_e4m3;
  s.k_scale_calc = s.v_scale_calc = true;
  s.sinks = true;
  const Batch a = make_batch(s, mixed_shape(), 1234), a2 = make_batch(s, mixed_shape(), 1234);
  const Batch c = make_batch(s, mixed_shape(), 1235);
  EXPECT_TRUE(same_bytes(a.block_table, a2.block_table));
  EXPECT_TRUE(same_bytes(a.slot_mapping, a2.slot_mapping));
  EXPECT_TRUE(same_bytes(a.sinks, a2.sinks));
  EXPECT_EQ(bits(a.spec.k_scale), bits(a2.spec.k_scale));
  int value_diffs = 0;
  for (int r = 0; r < a.num_reqs(); ++r)
    for (int pos = 0; pos < a.requests[r].seq_len(); pos += 7)
      for (int d = 0; d < 16; ++d) {
        EXPECT_EQ(bits(a.k(r, pos, 1, d)), bits(a2.k(r, pos, 1, d)));
        EXPECT_EQ(bits(a.v(r, pos, 0, d)), bits(a2.v(r, pos, 0, d)));
        value_diffs += a.k_input(r, pos, 1, d) != c.k_input(r, pos, 1, d);
      }
  EXPECT_GT(value_diffs, 100);
  EXPECT_FALSE(same_bytes(a.block_table, c.block_table));
  EXPECT_FALSE(same_bytes(a.slot_mapping, c.slot_mapping));
  EXPECT_FALSE(same_bytes(a.sinks, c.sinks));
}

// Checks every invariant of the paging of b; returns the set of used physical blocks.
void check_paging(const Batch& b) {
  const int bs = b.block_size, S = b.shared_blocks();
  std::set<int32_t> own;
  for (int r = 0; r < b.num_reqs(); ++r) {
    const int32_t* row = b.block_table.data() + static_cast<size_t>(r) * b.max_blocks_per_req;
    const int needed = (b.requests[r].seq_len() + bs - 1) / bs;
    for (int j = 0; j < b.max_blocks_per_req; ++j) {
      if (j >= needed) {
        EXPECT_EQ(row[j], 0) << "padding of row " << r;
        continue;
      }
      EXPECT_GT(row[j], 0) << "null block used by request " << r;
      EXPECT_LT(row[j], b.num_blocks);
      if (j < S) {
        EXPECT_EQ(row[j], b.block_table[j]) << "shared prefix block differs in row " << r;
      } else {
        EXPECT_TRUE(own.insert(row[j]).second) << "block " << row[j] << " used twice";
      }
    }
  }
  for (int j = 0; j < S; ++j) EXPECT_EQ(own.count(b.block_table[j]), 0u) << "prefix block reused";
  std::set<int64_t> slots;
  for (int r = 0; r < b.num_reqs(); ++r) {
    const int32_t* row = b.block_table.data() + static_cast<size_t>(r) * b.max_blocks_per_req;
    for (int pos = b.requests[r].context_len; pos < b.requests[r].seq_len(); ++pos) {
      const int64_t slot = b.slot_mapping[b.query_start_loc[r] + pos - b.requests[r].context_len];
      EXPECT_EQ(slot, static_cast<int64_t>(row[pos / bs]) * bs + pos % bs);
      EXPECT_GE(slot, bs);  // never in the null block
      EXPECT_LT(slot, b.num_blocks * bs);
      EXPECT_TRUE(slots.insert(slot).second) << "two new tokens share slot " << slot;
    }
  }
}

TEST(Batch, BlockTableInvariantsShuffledAndContiguous) {
  for (auto alloc : {BlockAllocation::shuffled, BlockAllocation::contiguous}) {
    for (int prefix : {0, 32}) {
      SCOPED_TRACE(testing::Message() << "contiguous=" << (alloc == BlockAllocation::contiguous) << " prefix=" << prefix);
      const Batch b = make_batch(small_spec(), mixed_shape(alloc, prefix), 5);
      check_paging(b);
      EXPECT_EQ(b.max_blocks_per_req, (250 + 1 + 15) / 16);
      // Just enough: every block but the null block is in use.
      int64_t used = b.shared_blocks();
      for (const auto& r : b.requests) used += (r.seq_len() + 15) / 16 - b.shared_blocks();
      EXPECT_EQ(b.num_blocks, used + 1);
    }
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    BatchShape sh = random_shape(rng, 1 + trial, 300, 40);
    sh.num_blocks = 2000;  // larger cache: the shuffle spreads over all of it
    const Batch b = make_batch(small_spec(), sh, trial);
    EXPECT_EQ(b.num_blocks, 2000);
    check_paging(b);
  }
}

TEST(Batch, ContiguousAllocationIsSequentialShuffledIsNot) {
  const Batch c = make_batch(small_spec(), mixed_shape(BlockAllocation::contiguous, 32), 9);
  int32_t expect = 1;
  for (int j = 0; j < c.shared_blocks(); ++j) EXPECT_EQ(c.block_table[j], expect++);
  for (int r = 0; r < c.num_reqs(); ++r) {
    const int needed = (c.requests[r].seq_len() + 15) / 16;
    for (int j = c.shared_blocks(); j < needed; ++j) EXPECT_EQ(c.block_table[r * c.max_blocks_per_req + j], expect++);
  }
  const Batch s = make_batch(small_spec(), mixed_shape(BlockAllocation::shuffled, 32), 9);
  int adjacent = 0, pairs = 0;
  for (int r = 0; r < s.num_reqs(); ++r) {
    const int needed = (s.requests[r].seq_len() + 15) / 16;
    for (int j = 1; j < needed; ++j, ++pairs)
      adjacent += s.block_table[r * s.max_blocks_per_req + j] == s.block_table[r * s.max_blocks_per_req + j - 1] + 1;
  }
  EXPECT_LT(adjacent, pairs / 4);
}

TEST(Batch, SharedPrefixHasOneCopyOfBlocksAndValues) {
  const Batch b = make_batch(small_spec(), mixed_shape(BlockAllocation::shuffled, 32), 21);
  ASSERT_EQ(b.shared_blocks(), 2);
  for (int r = 1; r < b.num_reqs(); ++r) {
    for (int pos = 0; pos < 32; ++pos)
      for (int d = 0; d < 16; ++d) {
        EXPECT_EQ(b.k(r, pos, 1, d), b.k(0, pos, 1, d));
        EXPECT_EQ(b.v(r, pos, 0, d), b.v(0, pos, 0, d));
      }
    EXPECT_EQ(b.value_req(r, 31), kSharedPrefixRequest);
    EXPECT_EQ(b.value_req(r, 32), static_cast<uint32_t>(r));
  }
  int differ = 0;
  for (int d = 0; d < 16; ++d) differ += b.k(1, 32, 0, d) != b.k(2, 32, 0, d);
  EXPECT_GT(differ, 8);
}

TEST(Batch, ImpossibleShapesAreInputErrors) {
  BatchShape sh = mixed_shape();
  const Batch ok = make_batch(small_spec(), sh, 1);
  sh.num_blocks = ok.num_blocks;  // exactly enough is fine
  EXPECT_NO_THROW(make_batch(small_spec(), sh, 1));
  sh.num_blocks = ok.num_blocks - 1;
  try {
    make_batch(small_spec(), sh, 1);
    FAIL() << "no error for a cache too small";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_blocks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(ok.num_blocks)), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_batch(small_spec(), mixed_shape(BlockAllocation::shuffled, 48), 1), InputError);  // > 37
  EXPECT_THROW(make_batch(small_spec(), mixed_shape(BlockAllocation::shuffled, 24), 1), InputError);  // not whole blocks
  BatchShape zero_q = mixed_shape();
  zero_q.requests[2].query_len = 0;
  EXPECT_THROW(make_batch(small_spec(), zero_q, 1), InputError);
}


// Errors about a shape from a scenario file name the file, the key's line and the full key.
TEST(Batch, SizeErrorsNameTheScenarioKey) {
  BatchShape sh = mixed_shape();
  sh.origin.file = "f.toml";
  sh.origin.lines["batch.num_blocks"] = 5;
  sh.num_blocks = 3;
  try {
    make_batch(small_spec(), sh, 1);
    FAIL() << "no error for a cache too small";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("f.toml:5: batch.num_blocks = 3: too small"), std::string::npos) << e.what();
  }
  // More cache blocks than int32 block ids number: an input error before anything is allocated.
  AttentionSpec one = small_spec();
  one.block_size = 1;
  BatchShape big;
  big.label = "big";
  big.origin.file = "big.toml";
  big.origin.size_key = "batch.trace.step";
  big.origin.size_value = "7";
  big.origin.lines["batch.trace.step"] = 9;
  big.requests = {{2147483000, 1}, {2147483000, 1}};
  try {
    make_batch(one, big, 1);
    FAIL() << "no error for block ids past int32";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("big.toml:9: batch.trace.step = 7:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4294966003 cache blocks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("int32 block ids"), std::string::npos) << msg;
  }
}

TEST(Batch, ArraysLargerThanHostMemoryAreRuntimeErrorsWithTheirSize) {
  const HostMemoryLimit limit(8);
  BatchShape sh;
  sh.label = "many";
  sh.origin.file = "m.toml";
  sh.origin.size_key = "batch.random.num_requests";
  sh.origin.size_value = "100000";
  sh.origin.lines["batch.random.num_requests"] = 4;
  sh.requests.assign(100000, RequestShape{2048, 1});
  try {
    make_batch(small_spec(), sh, 1);
    FAIL() << "no error for a batch larger than host memory";
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("m.toml:4: batch.random.num_requests = 100000:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("block table 100000 x 129 int32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("of host memory; 8.4 MB available"), std::string::npos) << msg;
  }
  sh.requests.resize(100);  // small batches do not look at host memory at all
  EXPECT_EQ(make_batch(small_spec(), sh, 1).num_reqs(), 100);
}

TEST(Batch, Fp8ScaleCalcUsesTheNewTokensMax) {
  for (DType cache : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttentionSpec s = small_spec();
    s.dtype = DType::f32;  // bf16 inputs would round the largest |x| of both to 1.0
    s.kv_cache_dtype = cache;
    s.k_scale_calc = s.v_scale_calc = true;
    const Batch b = make_batch(s, mixed_shape(), 8);
    float kmax = 0, vmax = 0;
    for (int r = 0; r < b.num_reqs(); ++r)
      for (int pos = b.requests[r].context_len; pos < b.requests[r].seq_len(); ++pos)
        for (int h = 0; h < 2; ++h)
          for (int d = 0; d < 16; ++d) {
            kmax = std::max(kmax, std::fabs(b.k_input(r, pos, h, d)));
            vmax = std::max(vmax, std::fabs(b.v_input(r, pos, h, d)));
          }
    const float range = cache == DType::fp8_e4m3 ? 448.0f : 57344.0f;
    EXPECT_EQ(b.spec.k_scale, kmax / range);
    EXPECT_EQ(b.spec.v_scale, vmax / range);
    EXPECT_NE(b.spec.k_scale, b.spec.v_scale);
    EXPECT_FALSE(b.spec.k_scale_calc);
    // k() is the documented quantize/dequantize round trip.
    for (int d = 0; d < 16; ++d) {
      const float x = b.k_input(3, 12, 1, d);
      const float want = cache == DType::fp8_e4m3
                             ? static_cast<float>(e4m3_to_float(float_to_e4m3(x / b.spec.k_scale)) * b.spec.k_scale)
                             : static_cast<float>(e5m2_to_float(float_to_e5m2(x / b.spec.k_scale)) * b.spec.k_scale);
      EXPECT_EQ(bits(b.k(3, 12, 1, d)), bits(want));
    }
  }
}

TEST(Batch, MlaValuesAndScaleCalcUseTheLatent) {
  AttentionSpec s = mla_spec();
  s.kv_cache_dtype = DType::fp8_e4m3;
  s.k_scale_calc = true;
  BatchShape sh;
  sh.requests = {{100, 1}, {10, 20}};
  const Batch b = make_batch(s, sh, 4);
  float amax = 0;
  for (int r = 0; r < 2; ++r)
    for (int pos = b.requests[r].context_len; pos < b.requests[r].seq_len(); ++pos)
      for (int d = 0; d < 576; ++d) amax = std::max(amax, std::fabs(b.latent_input(r, pos, d)));
  EXPECT_EQ(b.spec.k_scale, amax / 448.0f);
  EXPECT_EQ(b.latent_input(1, 3, 500), round_to(DType::bf16, gen_value(4, ValueTensor::latent, 1, 3, 0, 500)));
  const float x = b.latent_input(1, 3, 500);
  EXPECT_EQ(b.latent(1, 3, 500),
            static_cast<float>(e4m3_to_float(float_to_e4m3(x / b.spec.k_scale)) * b.spec.k_scale));
  EXPECT_EQ(b.w_uk(3, 7, 9),
            round_to(DType::bf16, gen_value(4, ValueTensor::w_uk, 0, 7, 3, 9) / std::sqrt(512.0f)));
  EXPECT_EQ(b.w_uv(3, 7, 9),
            round_to(DType::bf16, gen_value(4, ValueTensor::w_uv, 0, 7, 3, 9) / std::sqrt(512.0f)));
  EXPECT_NE(b.w_uk(3, 7, 9), b.w_uv(3, 7, 9));
}

// ---- vLLM's query quantization (q_scale) ---------------------------------------------------------

AttentionSpec fp8_query_spec() {
  AttentionSpec s = small_spec();
  s.kv_cache_dtype = DType::fp8_e4m3;
  return s;
}

// x through e4m3 with `scale` and back, then to bf16: what q() must hold (the cache's round trip).
float e4m3_round_trip_bf16(float x, float scale) {
  return round_to(DType::bf16, static_cast<float>(e4m3_to_float(float_to_e4m3(x / scale)) * scale));
}

TEST(Batch, QueryQuantizationIsOffByDefault) {
  AttentionSpec s = fp8_query_spec();
  s.k_scale_calc = s.v_scale_calc = true;
  const Batch b = make_batch(s, mixed_shape(), 21);
  EXPECT_FALSE(b.spec.q_fp8());
  EXPECT_EQ(b.spec.q_scale, 0.0f);
  for (int d = 0; d < 16; ++d) {
    EXPECT_EQ(bits(b.q(4, 150, 2, d)), bits(b.q_input(4, 150, 2, d)));
    EXPECT_EQ(b.q(2, 70, 3, d), round_to(DType::bf16, 4.0f * gen_value(21, ValueTensor::q, 2, 70, 3, d)));
  }
}

TEST(Batch, QuantizedQueriesSitOnTheE4m3GridTimesTheScale) {
  AttentionSpec s = fp8_query_spec();
  s.q_scale = 0x1p-6f;  // a power of two: the dequantized codes are bf16 values, q / q_scale exactly a code
  const Batch b = make_batch(s, mixed_shape(), 22);
  ASSERT_TRUE(b.spec.q_fp8());
  int64_t elements = 0, moved = 0;
  for (int r = 0; r < b.num_reqs(); ++r)
    for (int pos = b.requests[r].context_len; pos < b.requests[r].seq_len(); ++pos)
      for (int h = 0; h < 4; ++h)
        for (int d = 0; d < 16; ++d) {
          const float x = b.q_input(r, pos, h, d), q = b.q(r, pos, h, d);
          ASSERT_EQ(bits(q), bits(e4m3_round_trip_bf16(x, s.q_scale))) << r << " " << pos << " " << h << " " << d;
          const float code = q / s.q_scale;
          ASSERT_EQ(static_cast<float>(e4m3_to_float(float_to_e4m3(code))), code);
          ++elements;
          moved += q != x;
        }
  EXPECT_GT(moved, elements / 2);  // 3 mantissa bits against bf16's 7: most queries move

  // Any scale: the round trip, then the model dtype.
  s.q_scale = 0.0123f;
  const Batch c = make_batch(s, mixed_shape(), 22);
  for (int d = 0; d < 16; ++d)
    EXPECT_EQ(bits(c.q(4, 150, 2, d)), bits(e4m3_round_trip_bf16(c.q_input(4, 150, 2, d), 0.0123f)));
}

TEST(Batch, QuantizedQueriesSaturateLikeTheCache) {
  AttentionSpec s = fp8_query_spec();
  s.q_scale = 0x1p-8f;  // queries up to 4 would be codes up to 1024: clipped to +-448
  const Batch b = make_batch(s, mixed_shape(), 23);
  const float top = 448.0f * s.q_scale;
  int clipped = 0;
  for (int pos = 129; pos < 199; ++pos)
    for (int d = 0; d < 16; ++d) {
      const float q = b.q(4, pos, 1, d);
      EXPECT_LE(std::fabs(q), top);
      if (std::fabs(b.q_input(4, pos, 1, d)) > top) {
        EXPECT_EQ(std::fabs(q), top);
        EXPECT_EQ(q > 0, b.q_input(4, pos, 1, d) > 0);
        ++clipped;
      }
    }
  EXPECT_GT(clipped, 100);
}

TEST(Batch, QueryScaleCalcUsesTheLargestQueryBeforeQuantization) {
  AttentionSpec s = fp8_query_spec();
  s.dtype = DType::f32;  // bf16 queries would round the largest |q| to a short value
  s.q_scale_calc = true;
  const Batch b = make_batch(s, mixed_shape(), 24);
  float qmax = 0;
  for (int r = 0; r < b.num_reqs(); ++r)
    for (int pos = b.requests[r].context_len; pos < b.requests[r].seq_len(); ++pos)
      for (int h = 0; h < 4; ++h)
        for (int d = 0; d < 16; ++d) qmax = std::max(qmax, std::fabs(b.q_input(r, pos, h, d)));
  EXPECT_GT(qmax, 3.9f);
  EXPECT_EQ(b.spec.q_scale, qmax / 448.0f);
  EXPECT_FALSE(b.spec.q_scale_calc);
  EXPECT_TRUE(b.spec.q_fp8());
  const float x = b.q_input(4, 150, 2, 5);
  EXPECT_EQ(b.q(4, 150, 2, 5),
            static_cast<float>(e4m3_to_float(float_to_e4m3(x / b.spec.q_scale)) * b.spec.q_scale));
  // The k/v scales are left alone (1 unless given).
  EXPECT_EQ(b.spec.k_scale, 1.0f);
  EXPECT_EQ(b.spec.v_scale, 1.0f);

  // All-zero queries: scale 1, as for the cache.
  BatchShape zero = mixed_shape();
  zero.data.logit_std = 0.0;
  EXPECT_EQ(make_batch(s, zero, 24).spec.q_scale, 1.0f);
}

// ---- count_work -------------------------------------------------------------------------------

struct Brute {
  int64_t pairs = 0, kv_read = 0;
};
Brute brute_force(const Batch& b) {
  Brute out;
  for (const auto& r : b.requests) {
    std::set<int64_t> seen;
    for (int64_t p = r.context_len; p < r.seq_len(); ++p)
      for (int64_t key = 0; key < r.seq_len(); ++key) {
        bool vis = true;
        if (b.spec.causal()) {
          vis = key <= p;
          if (b.spec.sliding_window > 0) vis = vis && key > p - b.spec.sliding_window;
          if (b.local_attention_chunk > 0) vis = vis && key >= p / b.local_attention_chunk * b.local_attention_chunk;
        }
        if (vis) {
          ++out.pairs;
          seen.insert(key);
        }
      }
    out.kv_read += static_cast<int64_t>(seen.size());
  }
  return out;
}

TEST(Batch, CountWorkMatchesBruteForce) {
  std::mt19937 rng(11);
  struct Mode {
    const char* name;
    int window, chunk;
    bool causal;
  };
  const Mode modes[] = {{"causal", 0, 0, true},  {"window", 37, 0, true}, {"local", 0, 32, true},
                        {"window+local", 20, 48, true}, {"non-causal", 0, 0, false}};
  for (const Mode& m : modes) {
    for (int trial = 0; trial < 15; ++trial) {
      SCOPED_TRACE(testing::Message() << m.name << " trial " << trial);
      AttentionSpec s = small_spec();
      s.sliding_window = m.window;
      s.attn_type = m.causal ? AttentionType::decoder : AttentionType::encoder_only;
      BatchShape sh = random_shape(rng, 1 + trial % 6, 200, 90);
      sh.local_attention_chunk = m.chunk;
      const Batch b = make_batch(s, sh, trial);
      const WorkCounts w = count_work(b);
      const Brute want = brute_force(b);
      EXPECT_EQ(w.attended_pairs, want.pairs);
      EXPECT_EQ(w.kv_tokens_read, want.kv_read);
      EXPECT_DOUBLE_EQ(w.flops, 2.0 * (16 + 16) * 4 * static_cast<double>(want.pairs));
      const double t = static_cast<double>(b.num_tokens());
      EXPECT_DOUBLE_EQ(w.bytes, 2.0 * (t * 4 * 16 + t * 4 * 16 + (t + want.kv_read) * 2 * (16 + 16)));
    }
  }
}

TEST(Batch, CountWorkMlaUsesAbsorbedDecodeAndMhaPrefill) {
  AttentionSpec s = mla_spec();
  BatchShape sh;
  sh.requests = {{300, 1}, {64, 10}};
  const Batch b = make_batch(s, sh, 2);
  const WorkCounts w = count_work(b);
  const int64_t decode_pairs = 301, prefill_pairs = 10 * 65 + 45;  // keys 0..p for p = 64..73
  EXPECT_EQ(w.attended_pairs, decode_pairs + prefill_pairs);
  EXPECT_EQ(w.kv_tokens_read, 301 + 74);
  EXPECT_DOUBLE_EQ(w.flops, 2.0 * 16 * (decode_pairs * (576 + 512) + prefill_pairs * (192 + 128)));
  EXPECT_DOUBLE_EQ(w.bytes, 2.0 * (11 * 16 * 192 + 11 * 16 * 128 + (11 + 375) * 576));
}

// Two-token decodes (speculative decoding, MTP) run the absorbed decode on FLASHMLA when two is
// the batch's shortest query, and count as such; beside one-token decodes they are prefills.
TEST(Batch, CountWorkMlaTwoTokenDecodesAreAbsorbedWhereTheyAreTheDecodes) {
  AttentionSpec s = mla_spec();
  BatchShape sh;
  sh.requests = {{300, 2}, {100, 2}, {64, 10}};
  Batch b = make_batch(s, sh, 2);
  EXPECT_EQ(mla_decode_query_len(b), 2);
  const int64_t decode_pairs = 301 + 302 + 101 + 102, prefill_pairs = 10 * 65 + 45;
  EXPECT_DOUBLE_EQ(count_work(b).flops, 2.0 * 16 * (decode_pairs * (576 + 512) + prefill_pairs * (192 + 128)));

  sh.requests = {{300, 2}, {100, 1}};
  b = make_batch(s, sh, 2);
  EXPECT_EQ(mla_decode_query_len(b), 1);
  EXPECT_DOUBLE_EQ(count_work(b).flops, 2.0 * 16 * (101 * (576 + 512) + (301 + 302) * (192 + 128)));

  sh.requests = {{300, 3}};
  b = make_batch(s, sh, 2);
  EXPECT_EQ(mla_decode_query_len(b), 0);
}

TEST(Batch, LargeBatchDescribesFast) {
  BatchShape sh;
  sh.label = "big";
  for (int i = 0; i < 256; ++i) sh.requests.push_back({32768, 1});
  sh.requests.push_back({0, 32768});  // and one long prefill
  AttentionSpec s = small_spec();
  s.sliding_window = 4096;
  const auto t0 = std::chrono::steady_clock::now();
  const Batch b = make_batch(s, sh, 1);
  const WorkCounts w = count_work(b);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.0);
  EXPECT_EQ(w.attended_pairs, 256LL * 4096 + (4096LL * 4097 / 2 + (32768LL - 4096) * 4096));
  EXPECT_EQ(b.max_blocks_per_req, 2049);
}

}  // namespace
}  // namespace attn

namespace attn {
namespace {

// [data]: the value regime follows the features, and explicit keys win.
TEST(BatchData, RegimeFollowsFeaturesAndKeys) {
  AttentionSpec s = small_spec();
  s.logits_soft_cap = 50.0f;
  s.sinks = true;
  BatchShape shape = mixed_shape();
  Batch b = make_batch(s, shape, 5);
  EXPECT_FLOAT_EQ(b.q_amplitude, 3.0f * 2.0f);   // soft cap 50: score std 50 / 25
  EXPECT_FLOAT_EQ(b.sink_centre, 3.0f * 2.0f);
  EXPECT_FLOAT_EQ(b.sink_spread, 2.0f);
  shape.data.logit_std = 10.0;
  shape.data.sink_logit = -1.0;
  b = make_batch(s, shape, 5);
  EXPECT_FLOAT_EQ(b.q_amplitude, 30.0f);
  EXPECT_FLOAT_EQ(b.sink_centre, -1.0f);
  for (int h = 0; h < s.num_q_heads; ++h) EXPECT_NEAR(b.sinks[h], -1.0f, 10.0f);
  EXPECT_EQ(b.q(0, b.requests[0].context_len, 0, 0),
            round_to(DType::bf16, 30.0f * gen_value(5, ValueTensor::q, 0, b.requests[0].context_len, 0, 0)));
}

TEST(BatchData, NormalValuesAndKOutlierChannels) {
  AttentionSpec s = small_spec();
  BatchShape shape = mixed_shape();
  shape.data.normal = true;
  shape.data.k_outlier_channels = 2;
  shape.data.k_outlier_scale = 16.0;
  const Batch b = make_batch(s, shape, 9);
  const int D = s.head_size_qk, every = D / 2;
  ASSERT_EQ(b.regime.k_outlier_count, 2u);
  for (int d = 0; d < D; ++d) EXPECT_EQ(is_k_outlier(b.regime, static_cast<uint32_t>(d)), d % every == 0) << d;
  // Bell-shaped: same variance as the uniform (1/3), lighter tails than any uniform draw of the
  // same spread would give, and outlier dims 16x larger in K only.
  double var = 0, big = 0, rest = 0;
  int n = 0, n_big = 0, n_rest = 0;
  for (int pos = 0; pos < 60; ++pos)
    for (int d = 0; d < D; ++d) {
      const double v = b.v_input(0, pos, 0, d), k = b.k_input(0, pos, 0, d);
      var += v * v;
      ++n;
      if (d % every == 0) big += k * k, ++n_big; else rest += k * k, ++n_rest;
      EXPECT_EQ(k, round_to(DType::bf16, regime_value(b.regime, 9, ValueTensor::k, 0, pos, 0, d)));
    }
  EXPECT_NEAR(var / n, 1.0 / 3.0, 0.05);
  EXPECT_NEAR(std::sqrt((big / n_big) / (rest / n_rest)), 16.0, 4.0);
}

// k_outlier_channels = N makes exactly N of the head's dims outliers, spread evenly, for any N up
// to the head size (a stride of head_size / N made 100 of 128 into all 128, and 3 into 4).
TEST(BatchData, KOutlierChannelsAreExactlyTheCountAsked) {
  for (const uint32_t dims : {64u, 96u, 128u, 192u, 256u})
    for (uint32_t n = 1; n <= dims; ++n) {
      ValueRegime r;
      r.k_outlier_count = n;
      r.k_outlier_dims = dims;
      uint32_t hits = 0, last = 0, widest = 0;
      for (uint32_t d = 0; d < dims; ++d)
        if (is_k_outlier(r, d)) {
          if (hits > 0) widest = std::max(widest, d - last);
          last = d, ++hits;
        }
      ASSERT_EQ(hits, n) << dims << " dims";
      EXPECT_TRUE(is_k_outlier(r, 0));
      if (n > 1) EXPECT_LE(widest, (dims + n - 1) / n) << n << " of " << dims;  // evenly: no gap above the mean
    }
}

}  // namespace
}  // namespace attn
