// The NaN probe's choice of keys and their rows (validate/nan_probe.hpp); the probe run by the pipeline
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
std::vector<int64_t> attending(const Batch& b, const TokenKey& key) {
  const std::vector<uint8_t> a = rows_attending(b, key);
  std::vector<int64_t> rows;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i]) rows.push_back(static_cast<int64_t>(i));
  return rows;
}

TEST(NanProbe, ContextKeyOfTheLongestContextNewKeyOfTheLongestQuery) {
  // Request 1 has the longest context: the middle of keys 0-299, kv head 1 (heads 2-3 of 4).
  // Request 2 has the most new tokens: its middle one (position 2), kv head 0 (heads 0-1).
  const Batch b = batch(spec(4, 2), {{100, 1}, {300, 2}, {0, 5}});
  const std::vector<TokenKey> keys = nan_probe_keys(b);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], (TokenKey{1, 149, 1}));
  EXPECT_EQ(keys[1], (TokenKey{2, 2, 0}));
  EXPECT_FALSE(is_new_token_key(b, keys[0]));
  EXPECT_TRUE(is_new_token_key(b, keys[1]));
  // Tokens 1 and 2 (request 1), heads 2 and 3.
  EXPECT_EQ(attending(b, keys[0]), (std::vector<int64_t>{6, 7, 10, 11}));
  // Tokens 5-7 (positions 2-4 of request 2), heads 0 and 1: tokens 3 and 4 precede the key.
  EXPECT_EQ(attending(b, keys[1]), (std::vector<int64_t>{20, 21, 24, 25, 28, 29}));
  // No context token anywhere (a prefill from scratch): the new key alone.
  const Batch fresh = batch(spec(4, 2), {{0, 5}, {0, 3}});
  EXPECT_EQ(nan_probe_keys(fresh), (std::vector<TokenKey>{{0, 2, 0}}));
  EXPECT_EQ(attending(fresh, {0, 2, 0}), (std::vector<int64_t>{8, 9, 12, 13, 16, 17}));
}

TEST(NanProbe, OneKvHeadTakesTheNewKeyFromAnotherRequest) {
  // One kv head: every row of a request attends both keys' head, so the new key goes to the
  // request with the most new tokens other than the context key's (request 2, 300 context).
  const Batch b = batch(spec(2, 1), {{100, 1}, {50, 6}, {300, 8}});
  EXPECT_EQ(nan_probe_keys(b), (std::vector<TokenKey>{{2, 149, 0}, {1, 53, 0}}));
  // A single request: the context key alone.
  EXPECT_EQ(nan_probe_keys(batch(spec(2, 1), {{300, 8}})), (std::vector<TokenKey>{{0, 149, 0}}));
}

TEST(NanProbe, NoRowAttendsBothKeys) {
  AttentionSpec window = spec(4, 2);
  window.sliding_window = 8;
  const std::vector<Batch> batches = {
      batch(spec(4, 2), {{100, 1}, {300, 7}, {0, 5}}), batch(spec(4, 2), {{300, 7}}),
      batch(spec(2, 1), {{40, 3}, {10, 9}, {0, 2}}), batch(spec(4, 2), {{64, 1}, {80, 6}}, 32),
      batch(window, {{30, 12}, {5, 3}}), batch(spec(4, 4), {{16, 2}, {0, 16}}, 0, 8)};
  for (const Batch& b : batches) {
    const std::vector<TokenKey> keys = nan_probe_keys(b);
    ASSERT_EQ(keys.size(), 2u);
    const std::vector<uint8_t> a = rows_attending(b, keys[0]), n = rows_attending(b, keys[1]);
    int64_t new_rows = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_FALSE(a[i] && n[i]) << "row " << i << " attends both keys";
      new_rows += n[i];
    }
    EXPECT_GT(new_rows, 0);
  }
  // A shared prefix with one kv head: every row attends the prefix key, so no new key.
  EXPECT_EQ(nan_probe_keys(batch(spec(2, 1), {{64, 1}, {80, 2}}, 32)).size(), 1u);
}

TEST(NanProbe, SharedPrefixKeyIsEveryRequests) {
  const Batch b = batch(spec(2, 1), {{64, 1}, {80, 2}}, 32);
  const std::vector<TokenKey> keys = nan_probe_keys(b);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].pos, 16);
  EXPECT_EQ(attending(b, keys[0]).size(), 6u);  // 3 tokens x 2 heads
}

TEST(NanProbe, WindowsAndChunksDecideWhoAttends) {
  // Window 4: the first new token (position 100) sees keys 97-100; the key is the middle of its
  // context keys 97-99, which tokens at 100 and 101 see and those at 102 and 103 no longer do.
  AttentionSpec w = spec(1, 1);
  w.sliding_window = 4;
  const Batch bw = batch(w, {{100, 4}});
  const TokenKey kw = nan_probe_keys(bw).at(0);
  EXPECT_EQ(kw.pos, 98);
  EXPECT_EQ(attending(bw, kw), (std::vector<int64_t>{0, 1}));
  // A new key (position 102) is seen by the tokens at 102-105, not by 100 and 101 (causal) nor from
  // 106 on (the window).
  AttentionSpec w2 = spec(1, 1);
  w2.sliding_window = 4;
  EXPECT_EQ(attending(batch(w2, {{100, 8}}), {0, 102, 0}), (std::vector<int64_t>{2, 3, 4, 5}));
  // A local chunk of 64 starting at the first new token (position 128): no new token sees a context
  // key, so the key (position 64) is attended by no row, and the probe checks that none reads it.
  const Batch bc = batch(spec(1, 1), {{128, 10}}, 0, 64);
  const TokenKey kc = nan_probe_keys(bc).at(0);
  EXPECT_EQ(kc.pos, 64);
  EXPECT_TRUE(attending(bc, kc).empty());
  // Non-causal: every token of the request sees every key.
  AttentionSpec enc = spec(2, 2);
  enc.attn_type = AttentionType::encoder_only;
  const Batch be = batch(enc, {{40, 3}, {10, 2}});
  EXPECT_EQ(attending(be, {0, 39, 0}), (std::vector<int64_t>{0, 2, 4}));
  // A new key of a non-causal request: every token of it, the earlier ones too.
  EXPECT_EQ(attending(be, {0, 41, 0}), (std::vector<int64_t>{0, 2, 4}));
}

TEST(NanProbe, ChecksBothWays) {
  const Batch b = batch(spec(2, 2), {{10, 1}, {10, 1}});
  const std::vector<TokenKey> key{{1, 3, 1}};  // row 3: token 1, head 1
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
