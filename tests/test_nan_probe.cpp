// The NaN probe's choice of key and its rows (validate/nan_probe.hpp); the probe run by the pipeline
// is test_pipeline's PipelineCheck.NanProbeFailsANanHiddenOrLeaked, and on each GPU backend's merge
// paths their NanKeyReachesEveryRowThatAttendsIt.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "model/batch.hpp"
#include "validate/nan_probe.hpp"

namespace attn {
namespace {

AttentionSpec spec(int hq, int hkv) {
  AttentionSpec s;
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_size_qk = s.head_size_v = 32;
  s.dtype = s.kv_cache_dtype = DType::bf16;
  return s;
}

Batch batch(const AttentionSpec& s, std::vector<RequestShape> reqs, int shared_prefix = 0, int local_chunk = 0) {
  BatchShape shape;
  shape.label = "test";
  shape.requests = std::move(reqs);
  shape.shared_prefix_len = shared_prefix;
  shape.local_attention_chunk = local_chunk;
  return make_batch(s, shape, 1);
}

// Rows (token, head) that attend the key, as token * heads + head.
std::vector<int64_t> attending(const Batch& b, const CachedKey& key) {
  const std::vector<uint8_t> a = rows_attending(b, key);
  std::vector<int64_t> rows;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i]) rows.push_back(static_cast<int64_t>(i));
  return rows;
}

TEST(NanProbe, KeyOfTheLongestContextInTheLastKvHead) {
  // Request 1 has the longest context: the middle of keys 0-299, kv head 1 (heads 2-3 of 4).
  const Batch b = batch(spec(4, 2), {{100, 1}, {300, 2}, {0, 5}});
  const auto key = nan_probe_key(b);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->req, 1);
  EXPECT_EQ(key->pos, 149);
  EXPECT_EQ(key->kv_head, 1);
  // Tokens 1 and 2 (request 1), heads 2 and 3.
  EXPECT_EQ(attending(b, *key), (std::vector<int64_t>{6, 7, 10, 11}));
  // No context token anywhere: nothing to plant (the new tokens' slots are the run's to write).
  EXPECT_FALSE(nan_probe_key(batch(spec(4, 2), {{0, 5}, {0, 3}})).has_value());
}

TEST(NanProbe, SharedPrefixKeyIsEveryRequests) {
  const Batch b = batch(spec(2, 1), {{64, 1}, {80, 2}}, 32);
  const auto key = nan_probe_key(b);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->pos, 16);
  EXPECT_EQ(attending(b, *key).size(), 6u);  // 3 tokens x 2 heads
}

TEST(NanProbe, WindowsAndChunksDecideWhoAttends) {
  // Window 4: the first new token (position 100) sees keys 97-100; the key is the middle of its
  // context keys 97-99, which tokens at 100 and 101 see and those at 102 and 103 no longer do.
  AttentionSpec w = spec(1, 1);
  w.sliding_window = 4;
  const Batch bw = batch(w, {{100, 4}});
  const auto kw = nan_probe_key(bw);
  ASSERT_TRUE(kw.has_value());
  EXPECT_EQ(kw->pos, 98);
  EXPECT_EQ(attending(bw, *kw), (std::vector<int64_t>{0, 1}));
  // A local chunk of 64 starting at the first new token (position 128): no new token sees a context
  // key, so the key (position 64) is attended by no row, and the probe checks that none reads it.
  const Batch bc = batch(spec(1, 1), {{128, 10}}, 0, 64);
  const auto kc = nan_probe_key(bc);
  ASSERT_TRUE(kc.has_value());
  EXPECT_EQ(kc->pos, 64);
  EXPECT_TRUE(attending(bc, *kc).empty());
  // Non-causal: every token of the request sees every key.
  AttentionSpec enc = spec(2, 2);
  enc.attn_type = AttentionType::encoder_only;
  const Batch be = batch(enc, {{40, 3}, {10, 2}});
  EXPECT_EQ(attending(be, {0, 39, 0}), (std::vector<int64_t>{0, 2, 4}));
}

TEST(NanProbe, ChecksBothWays) {
  const Batch b = batch(spec(2, 2), {{10, 1}, {10, 1}});
  const CachedKey key{1, 3, 1};  // row 3: token 1, head 1
  AttentionOutput clean;
  clean.num_tokens = 2;
  clean.num_heads = 2;
  clean.head_size_v = 2;
  clean.o = {1, 2, 3, 4, 5, 6, 7, 8};
  clean.lse = {0.5f, 0.5f, 0.5f, 0.5f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  AttentionOutput planted = clean;
  planted.o[6] = planted.o[7] = nan;
  planted.lse[3] = nan;
  EXPECT_TRUE(check_nan_probe(b, key, clean, planted, true).pass);
  AttentionOutput lse_kept = planted;
  lse_kept.lse[3] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(check_nan_probe(b, key, clean, lse_kept, true).failure,
            "a NaN planted in the cached K of (request 1, position 3, kv head 1): token 1 (request 1) head 1 "
            "attends it but its LSE is -inf, not NaN");
  AttentionOutput moved = planted;
  moved.o[0] += 1e-3f;
  EXPECT_FALSE(check_nan_probe(b, key, clean, moved, true).pass);
  EXPECT_TRUE(check_nan_probe(b, key, clean, moved, false).pass);  // a backend that is not bitwise repeatable
}

}  // namespace
}  // namespace attn
