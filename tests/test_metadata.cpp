// CommonAttentionMetadata and its helpers: hand-worked cases for every function, then
// property tests over random batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "metadata/common.hpp"
#include "model/scenario.hpp"

namespace attn {
namespace {

using I32 = std::vector<int32_t>;
using I64 = std::vector<int64_t>;

// Metadata over the given query lengths only (context 0, no paging): enough for the split.
CommonAttentionMetadata metadata_from_query_lens(const I32& qlens) {
  CommonAttentionMetadata m;
  m.num_reqs = static_cast<int>(qlens.size());
  m.query_start_loc.assign(1, 0);
  for (int32_t q : qlens) {
    m.query_start_loc.push_back(m.query_start_loc.back() + q);
    m.seq_lens.push_back(q);
    m.num_computed_tokens.push_back(0);
    m.max_query_len = std::max(m.max_query_len, static_cast<int>(q));
    m.max_seq_len = m.max_query_len;
  }
  m.num_actual_tokens = m.query_start_loc.back();
  return m;
}

// A hand-made paged Batch: every request gets distinct physical blocks drawn at random
// (block 0 stays the null block), the first `shared_prefix_len / block_size` blocks shared,
// and the slot mapping follows vLLM's block_table[pos / bs] * bs + pos % bs.
Batch paged_batch(const std::vector<RequestShape>& reqs, int block_size, int shared_prefix_len,
                  std::mt19937& rng) {
  Batch b;
  b.label = "hand";
  b.requests = reqs;
  b.block_size = block_size;
  b.shared_prefix_len = shared_prefix_len;
  const int n = static_cast<int>(reqs.size());
  const int shared = shared_prefix_len / block_size;
  int max_blocks = 0;
  int64_t total = shared;
  for (const RequestShape& r : reqs) {
    const int nb = (r.seq_len() + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, nb);
    total += nb - shared;
  }
  b.max_blocks_per_req = max_blocks;
  b.num_blocks = total + 1;
  std::vector<int32_t> pool(total);
  std::iota(pool.begin(), pool.end(), 1);
  std::shuffle(pool.begin(), pool.end(), rng);
  b.block_table.assign(static_cast<size_t>(n) * max_blocks, 0);
  size_t next = shared;
  b.query_start_loc.assign(1, 0);
  for (int r = 0; r < n; ++r) {
    const int nb = (reqs[r].seq_len() + block_size - 1) / block_size;
    for (int j = 0; j < nb; ++j) b.block_table[r * max_blocks + j] = j < shared ? pool[j] : pool[next++];
    for (int i = 0; i < reqs[r].query_len; ++i) {
      const int pos = reqs[r].context_len + i;
      b.slot_mapping.push_back(int64_t{b.block_table[r * max_blocks + pos / block_size]} * block_size +
                               pos % block_size);
    }
    b.query_start_loc.push_back(b.query_start_loc.back() + reqs[r].query_len);
  }
  return b;
}

std::vector<RequestShape> random_requests(std::mt19937& rng, int n, int max_context, int max_query,
                                          double decode_share) {
  std::uniform_int_distribution<int> ctx(0, max_context), q(2, max_query);
  std::bernoulli_distribution is_decode(decode_share);
  std::vector<RequestShape> reqs(n);
  for (RequestShape& r : reqs) {
    r.context_len = ctx(rng);
    r.query_len = is_decode(rng) ? 1 : q(rng);
  }
  return reqs;
}

I32 query_lens_of(const CommonAttentionMetadata& m) {
  I32 q(m.num_reqs);
  for (int r = 0; r < m.num_reqs; ++r) q[r] = m.query_len(r);
  return q;
}

void expect_split(const DecodePrefillSplit& s, int nd, int np, int64_t ndt, int64_t npt) {
  EXPECT_EQ(s.num_decodes, nd);
  EXPECT_EQ(s.num_prefills, np);
  EXPECT_EQ(s.num_decode_tokens, ndt);
  EXPECT_EQ(s.num_prefill_tokens, npt);
}

// ---- build_common_metadata --------------------------------------------------------------------

TEST(MetadataCommon, BuildCopiesTheBatch) {
  std::mt19937 rng(7);
  Batch b = paged_batch({{5, 3}, {0, 4}, {17, 1}}, 4, 0, rng);
  CommonAttentionMetadata m = build_common_metadata(b);
  EXPECT_EQ(m.num_reqs, 3);
  EXPECT_EQ(m.query_start_loc, (I32{0, 3, 7, 8}));
  EXPECT_EQ(m.seq_lens, (I32{8, 4, 18}));
  EXPECT_EQ(m.num_computed_tokens, (I32{5, 0, 17}));
  EXPECT_EQ(m.num_actual_tokens, 8);
  EXPECT_EQ(m.max_query_len, 4);
  EXPECT_EQ(m.max_seq_len, 18);
  EXPECT_EQ(m.max_blocks_per_req, 5);  // ceil(18 / 4)
  EXPECT_EQ(m.block_table, b.block_table);
  EXPECT_EQ(m.slot_mapping, b.slot_mapping);
  EXPECT_TRUE(m.causal);
  EXPECT_EQ(m.query_len(1), 4);

  b.spec.attn_type = AttentionType::encoder_only;
  EXPECT_FALSE(build_common_metadata(b).causal);

  // Without query_start_loc it is derived from the shapes.
  b.query_start_loc.clear();
  EXPECT_EQ(build_common_metadata(b).query_start_loc, (I32{0, 3, 7, 8}));
}

TEST(MetadataCommon, BuildRejectsInconsistentBatches) {
  std::mt19937 rng(8);
  const Batch good = paged_batch({{5, 3}, {0, 4}}, 4, 0, rng);
  Batch b = good;
  b.query_start_loc = {0, 2, 7};  // request 0 has 3 tokens
  EXPECT_THROW(build_common_metadata(b), InputError);
  b = good;
  b.query_start_loc.pop_back();
  EXPECT_THROW(build_common_metadata(b), InputError);
  b = good;
  b.block_table.pop_back();
  EXPECT_THROW(build_common_metadata(b), InputError);
  b = good;
  b.slot_mapping.pop_back();
  EXPECT_THROW(build_common_metadata(b), InputError);
}

// ---- permute_requests -------------------------------------------------------------------------

TEST(MetadataPermute, MovesTokensSlotsAndRows) {
  CommonAttentionMetadata m;
  m.num_reqs = 3;
  m.query_start_loc = {0, 2, 5, 6};
  m.seq_lens = {9, 3, 40};
  m.num_computed_tokens = {7, 0, 39};
  m.num_actual_tokens = 6;
  m.max_query_len = 3;
  m.max_seq_len = 40;
  m.max_blocks_per_req = 2;
  m.block_table = {1, 2, 3, 4, 5, 6};
  m.slot_mapping = {10, 11, 20, 21, 22, 30};
  const std::vector<int> order{2, 0, 1};
  CommonAttentionMetadata p = permute_requests(m, order);
  EXPECT_EQ(p.query_start_loc, (I32{0, 1, 3, 6}));
  EXPECT_EQ(p.seq_lens, (I32{40, 9, 3}));
  EXPECT_EQ(p.num_computed_tokens, (I32{39, 7, 0}));
  EXPECT_EQ(p.block_table, (I32{5, 6, 1, 2, 3, 4}));
  EXPECT_EQ(p.slot_mapping, (I64{30, 10, 11, 20, 21, 22}));
  EXPECT_EQ(p.num_actual_tokens, 6);
  EXPECT_EQ(p.max_query_len, 3);
  EXPECT_EQ(p.max_seq_len, 40);

  // Padding slots past the last token stay where they are.
  m.slot_mapping.push_back(-1);
  EXPECT_EQ(permute_requests(m, order).slot_mapping, (I64{30, 10, 11, 20, 21, 22, -1}));
}

TEST(MetadataPermute, RejectsNonPermutations) {
  CommonAttentionMetadata m = metadata_from_query_lens({1, 2, 3});
  m.max_blocks_per_req = 1;
  m.block_table = {1, 2, 3};
  m.slot_mapping = I64(6, 0);
  EXPECT_THROW(permute_requests(m, std::vector<int>{0, 1}), InputError);
  EXPECT_THROW(permute_requests(m, std::vector<int>{0, 1, 1}), InputError);
  EXPECT_THROW(permute_requests(m, std::vector<int>{0, 1, 3}), InputError);
  EXPECT_THROW(permute_requests(m, std::vector<int>{-1, 1, 2}), InputError);
}

// ---- reorder ----------------------------------------------------------------------------------

TEST(MetadataReorder, FewestSwaps) {
  // decodes at 0, 2, 4, 5 (4 of them, so slots 0..3 must hold decodes); prefills at 1, 3.
  // i=1: last decode (5) >= 4 -> swap slots 1 and 5 -> [0, 5, 2, 3, 4, 1]
  // i=2: next decode (4) >= 4 -> swap slots 3 and 4 -> [0, 5, 2, 4, 3, 1]
  // Two swaps, one per prefill in front; decodes 0 and 2 never move.
  const I32 q{1, 5, 1, 7, 1, 1};
  EXPECT_EQ(reorder_batch_to_split_decodes_and_prefills(q), (std::vector<int>{0, 5, 2, 4, 3, 1}));

  // A single prefill in front swaps with the last decode: [5, 1, 1] -> old [2, 1, 0].
  EXPECT_EQ(reorder_batch_to_split_decodes_and_prefills(I32{5, 1, 1}), (std::vector<int>{2, 1, 0}));
}

TEST(MetadataReorder, IdentityWhenNothingMoves) {
  EXPECT_EQ(reorder_batch_to_split_decodes_and_prefills(I32{1, 1, 3, 9}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(reorder_batch_to_split_decodes_and_prefills(I32{1, 1, 1}), (std::vector<int>{0, 1, 2}));  // decodes only
  EXPECT_EQ(reorder_batch_to_split_decodes_and_prefills(I32{4, 9, 2}), (std::vector<int>{0, 1, 2}));  // prefills only
  EXPECT_TRUE(reorder_batch_to_split_decodes_and_prefills(I32{}).empty());
}

TEST(MetadataReorder, ThresholdAboveOne) {
  // threshold 4: decodes (<= 4) at 1, 2, 4 -> 3 front slots; prefills at 0, 3.
  // i=1: decode 4 >= 3 -> swap slots 0 and 4 -> [4, 1, 2, 3, 0]
  // i=2: decode 2 < 3 -> stop (the prefill at 3 is already outside the front).
  const I32 q{8, 3, 4, 5, 1};
  const std::vector<int> order = reorder_batch_to_split_decodes_and_prefills(q, 4);
  EXPECT_EQ(order, (std::vector<int>{4, 1, 2, 3, 0}));
  // With threshold 1 only the 1-token request is a decode: one swap, slot 0 <-> 4.
  EXPECT_EQ(reorder_batch_to_split_decodes_and_prefills(q, 1), (std::vector<int>{4, 1, 2, 3, 0}));
  // Threshold 8 makes everything a decode.
  EXPECT_EQ(reorder_batch_to_split_decodes_and_prefills(q, 8), (std::vector<int>{0, 1, 2, 3, 4}));
}

// ---- split ------------------------------------------------------------------------------------

TEST(MetadataSplit, HandWorked) {
  // After the FewestSwaps reorder: [1, 1, 1, 1, 7, 5] -> 4 decodes (4 tokens), 2 prefills (12).
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({1, 1, 1, 1, 7, 5})), 4, 2, 4, 12);
  // Decodes only: the max_query_len fast path.
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({1, 1, 1})), 3, 0, 3, 0);
  // Prefills only.
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({4, 9, 2})), 0, 3, 0, 15);
  // threshold 4, reordered [1, 3, 4, 5, 8]: decodes 1+3+4 = 8 tokens, prefills 5+8 = 13.
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({1, 3, 4, 5, 8}), 4), 3, 2, 8, 13);
  // threshold 4, all within it: all decodes (7 tokens).
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({2, 4, 1}), 4), 3, 0, 7, 0);
  // Not reordered: everything from the first prefill on is a prefill.
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({1, 5, 1})), 1, 2, 1, 6);
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({5, 1, 1})), 0, 3, 0, 7);
  // Empty batch.
  expect_split(split_decodes_and_prefills(metadata_from_query_lens({})), 0, 0, 0, 0);
}

TEST(MetadataSplit, RejectsMalformedMetadata) {
  CommonAttentionMetadata m = metadata_from_query_lens({1, 5});
  m.query_start_loc.pop_back();
  EXPECT_THROW(split_decodes_and_prefills(m), InputError);
}

// ---- reorder + permute + split on random batches ----------------------------------------------

TEST(MetadataProperty, ReorderPermuteSplitOnRandomBatches) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    const int threshold = std::uniform_int_distribution<int>(1, 4)(rng);
    const int bs = trial % 2 ? 16 : 4;
    const Batch b = paged_batch(random_requests(rng, n, 70, 9, 0.6), bs, 0, rng);
    const CommonAttentionMetadata m = build_common_metadata(b);
    const I32 q = query_lens_of(m);

    const std::vector<int> order = reorder_batch_to_split_decodes_and_prefills(q, threshold);
    const int num_decodes = static_cast<int>(std::count_if(q.begin(), q.end(), [&](int32_t x) { return x <= threshold; }));
    // Fewest swaps: exactly the prefills found in the front region move, each with one decode.
    const int misplaced = static_cast<int>(
        std::count_if(q.begin(), q.begin() + num_decodes, [&](int32_t x) { return x > threshold; }));
    int moved = 0;
    for (int r = 0; r < n; ++r) moved += order[r] != r;
    ASSERT_EQ(moved, 2 * misplaced) << "trial " << trial;

    const CommonAttentionMetadata p = permute_requests(m, order);
    // Decodes first.
    for (int r = 0; r < n; ++r) ASSERT_EQ(p.query_len(r) <= threshold, r < num_decodes) << "trial " << trial;
    // Every token keeps its slot, and the slot still follows the (moved) block-table row.
    for (int r = 0; r < n; ++r) {
      const int old = order[r];
      ASSERT_EQ(p.query_len(r), m.query_len(old));
      ASSERT_EQ(p.seq_lens[r], m.seq_lens[old]);
      for (int i = 0; i < p.query_len(r); ++i) {
        const int64_t slot = p.slot_mapping[p.query_start_loc[r] + i];
        ASSERT_EQ(slot, m.slot_mapping[m.query_start_loc[old] + i]);
        const int pos = p.num_computed_tokens[r] + i;
        ASSERT_EQ(slot, int64_t{p.block_table[r * p.max_blocks_per_req + pos / bs]} * bs + pos % bs);
      }
    }
    // Split counts add up.
    const DecodePrefillSplit s = split_decodes_and_prefills(p, threshold);
    int64_t decode_tokens = 0;
    for (int32_t x : q) decode_tokens += x <= threshold ? x : 0;
    ASSERT_EQ(s.num_decodes, num_decodes);
    ASSERT_EQ(s.num_decodes + s.num_prefills, n);
    ASSERT_EQ(s.num_decode_tokens, decode_tokens);
    ASSERT_EQ(s.num_decode_tokens + s.num_prefill_tokens, m.num_actual_tokens);
  }
}

// ---- local attention --------------------------------------------------------------------------

TEST(MetadataLocalAttention, SourceExample) {
  // q = [4, 10, 5], seq = [6, 17, 9], C = 4, block_size = 2; block-table rows 0..9, 10..19,
  // 20..29. The worked pieces are in local_attention.cpp's comment.
  CommonAttentionMetadata m;
  m.num_reqs = 3;
  m.query_start_loc = {0, 4, 14, 19};
  m.seq_lens = {6, 17, 9};
  m.num_computed_tokens = {2, 7, 4};
  m.num_actual_tokens = 19;
  m.max_query_len = 10;
  m.max_seq_len = 17;
  m.max_blocks_per_req = 10;
  for (int i = 0; i < 30; ++i) m.block_table.push_back(i);
  for (int i = 0; i < 19; ++i) m.slot_mapping.push_back(1000 + i);

  const LocalAttentionBatch v = make_local_attention_virtual_batches(4, m, 2);
  EXPECT_EQ(v.q_seqlens, (I32{2, 2, 1, 4, 4, 1, 4, 1}));
  EXPECT_EQ(v.k_seqlens, (I32{4, 2, 4, 4, 4, 1, 4, 1}));
  EXPECT_EQ(v.origin_req, (I32{0, 0, 1, 1, 1, 1, 2, 2}));
  const CommonAttentionMetadata& vm = v.metadata;
  EXPECT_EQ(vm.num_reqs, 8);
  EXPECT_EQ(vm.query_start_loc, (I32{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(vm.seq_lens, v.k_seqlens);
  EXPECT_EQ(vm.num_computed_tokens, (I32{2, 0, 3, 0, 0, 0, 0, 0}));
  EXPECT_EQ(vm.max_query_len, 4);
  EXPECT_EQ(vm.max_seq_len, 4);
  EXPECT_EQ(vm.num_actual_tokens, 19);
  EXPECT_EQ(vm.slot_mapping, m.slot_mapping);
  EXPECT_TRUE(vm.causal);
  // Key starts [0, 4, 4, 8, 12, 16, 4, 8] -> first blocks [0, 2, 2, 4, 6, 8, 2, 4] of each row.
  EXPECT_EQ(vm.max_blocks_per_req, 2);
  EXPECT_EQ(vm.block_table, (I32{0, 1, 2, 3, 12, 13, 14, 15, 16, 17, 18, 19, 22, 23, 24, 25}));
}

TEST(MetadataLocalAttention, PrefillSpanningSeveralChunks) {
  // C = 8, block_size = 4 (2 pages per virtual row), max_blocks_per_req = ceil(33 / 4) = 9.
  // Request 0: decode at position 20 (seq 21): one piece, chunk [16, 24): q 1, k 21 - 16 = 5,
  //   first block 16 / 4 = 4 -> row columns 4, 5.
  // Request 1: context 3, 30 new tokens at positions 3..32 (seq 33):
  //   q_first = min(8 - 3 % 8, 30) = 5, pieces = 1 + ceil(25 / 8) = 5, last piece keys 33 % 8 = 1:
  //   positions 3..7   keys [0, 8)   q 5  k 8  block 0 -> columns 0, 1
  //             8..15       [8, 16)    8    8        2 -> 2, 3
  //             16..23      [16, 24)   8    8        4 -> 4, 5
  //             24..31      [24, 32)   8    8        6 -> 6, 7
  //             32          [32, 33)   1    1        8 -> 8, 9 clipped to 8 -> 8, 8
  CommonAttentionMetadata m;
  m.num_reqs = 2;
  m.query_start_loc = {0, 1, 31};
  m.seq_lens = {21, 33};
  m.num_computed_tokens = {20, 3};
  m.num_actual_tokens = 31;
  m.max_query_len = 30;
  m.max_seq_len = 33;
  m.max_blocks_per_req = 9;
  m.block_table = {7, 3, 12, 9, 15, 4, 0, 0, 0,  //
                   21, 5, 18, 2, 11, 30, 8, 27, 6};
  for (int i = 0; i < 31; ++i) m.slot_mapping.push_back(7 * i + 3);

  const LocalAttentionBatch v = make_local_attention_virtual_batches(8, m, 4);
  EXPECT_EQ(v.q_seqlens, (I32{1, 5, 8, 8, 8, 1}));
  EXPECT_EQ(v.k_seqlens, (I32{5, 8, 8, 8, 8, 1}));
  EXPECT_EQ(v.origin_req, (I32{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(v.metadata.query_start_loc, (I32{0, 1, 6, 14, 22, 30, 31}));
  EXPECT_EQ(v.metadata.num_computed_tokens, (I32{4, 3, 0, 0, 0, 0}));
  EXPECT_EQ(v.metadata.max_query_len, 8);
  EXPECT_EQ(v.metadata.max_seq_len, 8);
  EXPECT_EQ(v.metadata.block_table, (I32{15, 4, 21, 5, 18, 2, 11, 30, 8, 27, 6, 6}));
}

TEST(MetadataLocalAttention, RejectsBadArguments) {
  CommonAttentionMetadata m = metadata_from_query_lens({3, 2});
  m.max_blocks_per_req = 1;
  m.block_table = {1, 2};
  m.slot_mapping = I64(5, 0);
  EXPECT_THROW(make_local_attention_virtual_batches(6, m, 4), InputError);  // 6 % 4 != 0
  EXPECT_THROW(make_local_attention_virtual_batches(0, m, 4), InputError);
  EXPECT_NO_THROW(make_local_attention_virtual_batches(8, m, 4));
  CommonAttentionMetadata empty_query = metadata_from_query_lens({3, 0});
  empty_query.max_blocks_per_req = 1;
  empty_query.block_table = {1, 2};
  EXPECT_THROW(make_local_attention_virtual_batches(8, empty_query, 4), InputError);
}

TEST(MetadataProperty, LocalAttentionPiecesStayInsideTheirChunk) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 100; ++trial) {
    const int bs = trial % 2 ? 16 : 4;
    const int chunk = bs * std::uniform_int_distribution<int>(1, 4)(rng);
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    const Batch b = paged_batch(random_requests(rng, n, 90, 70, 0.3), bs, 0, rng);
    const CommonAttentionMetadata m = build_common_metadata(b);
    const LocalAttentionBatch v = make_local_attention_virtual_batches(chunk, m, bs);
    const CommonAttentionMetadata& vm = v.metadata;
    ASSERT_EQ(vm.query_start_loc.back(), m.query_start_loc.back());
    ASSERT_EQ(vm.slot_mapping, m.slot_mapping);

    std::vector<int> done(n, 0);  // query tokens of each real request already covered
    for (int i = 0; i < vm.num_reqs; ++i) {
      const int r = v.origin_req[i];
      const int q = v.q_seqlens[i], k = v.k_seqlens[i];
      ASSERT_EQ(vm.query_start_loc[i], m.query_start_loc[r] + done[r]) << "pieces must follow token order";
      ASSERT_GE(q, 1);
      ASSERT_LE(q, k);
      ASSERT_LE(k, chunk);
      // The piece's queries sit at the end of its keys (causal), so its first key is at
      // p - (k - q + j) for its j-th query at absolute position p: that must be p's chunk start.
      const int first_pos = m.num_computed_tokens[r] + done[r];
      const int key_start = first_pos - (k - q);
      for (int j = 0; j < q; ++j) ASSERT_EQ((first_pos + j) / chunk * chunk, key_start) << "trial " << trial;
      // Virtual row = the origin row from key_start's block, clipped at the last column.
      for (int c = 0; c < vm.max_blocks_per_req; ++c) {
        const int col = std::min(key_start / bs + c, m.max_blocks_per_req - 1);
        ASSERT_EQ(vm.block_table[i * vm.max_blocks_per_req + c], m.block_table[r * m.max_blocks_per_req + col]);
      }
      done[r] += q;
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(done[r], m.query_len(r));
  }
}

// ---- cascade ----------------------------------------------------------------------------------

TEST(MetadataCascade, CommonPrefixLen) {
  std::mt19937 rng(3);
  // Prefix 300 tokens, block 16 -> 18 whole shared blocks = 288 tokens.
  std::vector<RequestShape> reqs{{1000, 1}, {700, 1}, {400, 1}};
  Batch b = paged_batch(reqs, 16, 300, rng);
  EXPECT_EQ(common_prefix_len(b, build_common_metadata(b)), 288);
  // Cap by min(num_computed_tokens) = 290 -> 290, rounded down to blocks -> 288.
  b = paged_batch({{1000, 1}, {290, 8}, {400, 1}}, 16, 288, rng);
  EXPECT_EQ(common_prefix_len(b, build_common_metadata(b)), 288);
  // min(num_computed_tokens) = 257 < 288 -> 257 -> 256 (16 blocks).
  b = paged_batch({{1000, 1}, {257, 30}, {400, 1}}, 16, 288, rng);
  EXPECT_EQ(common_prefix_len(b, build_common_metadata(b)), 256);
  // A request still inside the prefix (computed 15 < one block) leaves nothing.
  b = paged_batch({{1000, 1}, {15, 300}}, 16, 0, rng);
  b.shared_prefix_len = 288;
  EXPECT_EQ(common_prefix_len(b, build_common_metadata(b)), 0);
  // Less than one whole shared block, or none.
  b = paged_batch(reqs, 16, 15, rng);
  EXPECT_EQ(common_prefix_len(b, build_common_metadata(b)), 0);
  b = paged_batch(reqs, 16, 0, rng);
  EXPECT_EQ(common_prefix_len(b, build_common_metadata(b)), 0);
}

TEST(MetadataCascade, EveryBranchOfTheRule) {
  const I32 decodes8(8, 1);
  const I32 decodes256(256, 1);
  auto decide = [](int prefix, const I32& q, int hq, int hkv, bool alibi, bool window, bool local, int sms) {
    return use_cascade_attention(prefix, q, hq, hkv, alibi, window, local, sms);
  };
  CascadeDecision d = decide(128, decodes256, 32, 8, false, false, false, 132);
  EXPECT_FALSE(d.use);
  EXPECT_EQ(d.reason, "prefix 128 < 256 tokens");
  // The prefix test comes first, even with ALiBi on.
  EXPECT_EQ(decide(255, decodes256, 32, 8, true, false, false, 132).reason, "prefix 255 < 256 tokens");

  d = decide(256, decodes256, 32, 8, true, false, false, 132);
  EXPECT_FALSE(d.use);
  EXPECT_EQ(d.reason, "ALiBi in use");
  d = decide(256, decodes256, 32, 8, false, true, false, 132);
  EXPECT_FALSE(d.use);
  EXPECT_EQ(d.reason, "sliding window in use");
  d = decide(256, decodes256, 32, 8, false, false, true, 132);
  EXPECT_FALSE(d.use);
  EXPECT_EQ(d.reason, "local attention in use");
  d = decide(4096, I32(7, 1), 32, 8, false, false, false, 132);
  EXPECT_FALSE(d.use);
  EXPECT_EQ(d.reason, "7 requests < 8");

  // FlashDecoding needs GQA > 1 and all query lengths 1; without it cascade is taken.
  d = decide(256, decodes8, 32, 32, false, false, false, 132);
  EXPECT_TRUE(d.use);
  EXPECT_EQ(d.reason, "FlashDecoding not used: cascade (no GQA)");
  I32 mixed = decodes8;
  mixed[5] = 2;
  d = decide(256, mixed, 32, 8, false, false, false, 132);
  EXPECT_TRUE(d.use);
  EXPECT_EQ(d.reason, "FlashDecoding not used: cascade (query_len > 1)");

  // Cost model, Hq 32, Hkv 8 (GQA 4), 256 decodes, prefix 1024, 132 SMs: P = ceil(1024/128) = 8.
  //   cascade: ceil(32 * ceil(256/128) / 132) * 8 = ceil(64/132) * 8 = 8
  //   FlashDecoding: ceil(256 * 8 * ceil(4/128) * 8 / 132) = ceil(16384/132) = 125
  d = decide(1024, decodes256, 32, 8, false, false, false, 132);
  EXPECT_TRUE(d.use);
  EXPECT_EQ(d.reason, "cascade cost 8 < FlashDecoding cost 125");
  // 8 decodes, prefix 256 (P = 2), 132 SMs:
  //   cascade: ceil(32 * 1 / 132) * 2 = 2;  FlashDecoding: ceil(8 * 8 * 1 * 2 / 132) = ceil(128/132) = 1
  d = decide(256, decodes8, 32, 8, false, false, false, 132);
  EXPECT_FALSE(d.use);
  EXPECT_EQ(d.reason, "cascade cost 2 >= FlashDecoding cost 1");
  // A tie goes to FlashDecoding: 64 SMs -> cascade ceil(32/64) * 2 = 2, FD ceil(128/64) = 2.
  d = decide(256, decodes8, 32, 8, false, false, false, 64);
  EXPECT_FALSE(d.use);
  EXPECT_EQ(d.reason, "cascade cost 2 >= FlashDecoding cost 2");
}

TEST(MetadataCascade, RejectsBadHardwareOrHeads) {
  const I32 q(8, 1);
  EXPECT_THROW(use_cascade_attention(512, q, 32, 8, false, false, false, 0), InputError);
  EXPECT_THROW(use_cascade_attention(512, q, 32, 7, false, false, false, 132), InputError);
  EXPECT_THROW(use_cascade_attention(512, q, 32, 0, false, false, false, 132), InputError);
}

// ---- on a generated batch ---------------------------------------------------------------------

TEST(MetadataIntegration, GeneratedBatchWithSharedPrefix) {
  // 11 decodes around 2 prefill chunks, a 288-token (18-block) shared prefix.
  Scenario s = scenario_from_cli("llama3-8b", "5x1@700,1x40@320,6x1@1500,1x64@900", 11);
  s.batch.shared_prefix_len = 288;
  const Batch b = make_batch(s.spec, expand_shapes(s).front(), s.seed);
  const CommonAttentionMetadata m = build_common_metadata(b);
  ASSERT_EQ(m.num_reqs, 13);
  EXPECT_EQ(m.num_actual_tokens, 5 + 40 + 6 + 64);
  EXPECT_EQ(m.max_seq_len, 1501);
  for (int r = 0; r < m.num_reqs; ++r) {
    for (int i = 0; i < m.query_len(r); ++i) {
      const int pos = m.num_computed_tokens[r] + i;
      ASSERT_EQ(m.slot_mapping[m.query_start_loc[r] + i],
                int64_t{m.block_table[r * m.max_blocks_per_req + pos / b.block_size]} * b.block_size +
                    pos % b.block_size);
    }
  }
  const I32 q = query_lens_of(m);
  const CommonAttentionMetadata p = permute_requests(m, reorder_batch_to_split_decodes_and_prefills(q));
  expect_split(split_decodes_and_prefills(p), 11, 2, 11, 104);
  // min(num_computed_tokens) = 320 caps nothing. 13 requests >= 8, and a prefill turns
  // FlashDecoding off, so cascade is taken.
  const int prefix = common_prefix_len(b, p);
  EXPECT_EQ(prefix, 288);
  const CascadeDecision d = use_cascade_attention(prefix, query_lens_of(p), 32, 8, false, false, false, 132);
  EXPECT_TRUE(d.use) << d.reason;
}

}  // namespace
}  // namespace attn
