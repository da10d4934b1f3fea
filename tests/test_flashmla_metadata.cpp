// FlashMLA's tile scheduler (get_mla_metadata) on hand-worked cases and on random ragged batches,
// checked through the pieces it implies: every request's keys covered once, in order, by pieces
// numbered 0 .. splits - 1.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/flashmla/mla_metadata.hpp"
#include "core/error.hpp"

namespace attn::flashmla {
namespace {

struct Piece {
  int part, begin, end, split;
};

// The per-request pieces of a schedule, in partition order; also checks each partition's cost.
std::vector<std::vector<Piece>> pieces_of(const MlaMetadata& m, const std::vector<int32_t>& seq_lens) {
  std::vector<std::vector<Piece>> out(seq_lens.size());
  for (int p = 0; p < m.num_parts; ++p) {
    const MlaPartition t = m.partition(p);
    int cost = 0;
    for (int r = t.begin_req; r <= t.end_req; ++r) {
      const int begin = r == t.begin_req ? t.begin_token : 0;
      const int end = r == t.end_req ? t.end_token : seq_lens[static_cast<size_t>(r)];
      const int split = r == t.begin_req ? t.begin_split : 0;
      out[static_cast<size_t>(r)].push_back({p, begin, end, split});
      cost += (end - begin + kBlockSizeN - 1) / kBlockSizeN + kFixedOverheadBlocks;
    }
    EXPECT_LE(cost, m.payload) << "partition " << p;
  }
  return out;
}

void expect_exact_cover(const MlaMetadata& m, const std::vector<int32_t>& seq_lens) {
  ASSERT_EQ(m.num_splits.size(), seq_lens.size() + 1);
  EXPECT_EQ(m.num_splits[0], 0);
  const auto pieces = pieces_of(m, seq_lens);
  for (size_t r = 0; r < seq_lens.size(); ++r) {
    SCOPED_TRACE(testing::Message() << "request " << r << " of " << seq_lens[r] << " keys");
    ASSERT_FALSE(pieces[r].empty());
    ASSERT_EQ(static_cast<int>(pieces[r].size()), m.splits_of(static_cast<int>(r)));
    int at = 0;
    for (size_t i = 0; i < pieces[r].size(); ++i) {
      EXPECT_EQ(pieces[r][i].split, static_cast<int>(i));
      EXPECT_EQ(pieces[r][i].begin, at);
      EXPECT_EQ(pieces[r][i].begin % kBlockSizeN, 0);
      EXPECT_GE(pieces[r][i].end, pieces[r][i].begin);
      at = pieces[r][i].end;
    }
    EXPECT_EQ(at, seq_lens[r]);
  }
}

int idle_parts(const MlaMetadata& m) {
  int idle = 0;
  for (int p = 0; p < m.num_parts; ++p) idle += m.partition(p).begin_req > m.partition(p).end_req;
  return idle;
}

TEST(FlashMlaMetadata, EightRequestsOf4kOn132Sms) {
  // 16 heads, q_len 1: one 64-row tile, so 132 partitions; 8 x (64 + 5) = 552 blocks ->
  // payload ceil(552 / 132) + 5 = 10, 5 key blocks per piece: 13 pieces per request.
  const std::vector<int32_t> lens(8, 4096);
  const MlaMetadata m = get_mla_metadata(lens, 16, 1, 132);
  EXPECT_EQ(m.num_parts, 132);
  EXPECT_EQ(m.payload, 10);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(m.splits_of(r), 13) << r;
  EXPECT_EQ(m.num_splits.back(), 104);
  EXPECT_EQ(idle_parts(m), 28);
  // Partition 0: request 0 from token 0 to 320 (5 blocks), split 0; partition 1 continues it.
  EXPECT_EQ(m.partition(0).begin_req, 0);
  EXPECT_EQ(m.partition(0).end_req, 0);
  EXPECT_EQ(m.partition(0).end_token, 320);
  EXPECT_EQ(m.partition(1).begin_token, 320);
  EXPECT_EQ(m.partition(1).begin_split, 1);
  // Partition 12 closes request 0 (4 blocks + 5 <= 10) and starts nothing else in it.
  EXPECT_EQ(m.partition(12).end_token, 4096);
  expect_exact_cover(m, lens);
}

TEST(FlashMlaMetadata, PartitionsFromHeadsTimesQueryLength) {
  EXPECT_EQ(mla_num_parts(132, 16 * 1), 132);
  EXPECT_EQ(mla_num_parts(132, 128 * 1), 66);   // two 64-row tiles
  EXPECT_EQ(mla_num_parts(132, 128 * 2), 33);   // q_len x heads = 256 > 64
  EXPECT_EQ(mla_num_parts(132, 16 * 2), 132);
  EXPECT_EQ(mla_num_parts(4, 128 * 2), 1);      // never fewer than one
  EXPECT_THROW(mla_num_parts(0, 16), InputError);
}

TEST(FlashMlaMetadata, RaggedAndZeroLengthRequests) {
  const std::vector<int32_t> lens = {0, 100, 7000, 0, 64, 1, 33000, 0};
  for (int sms : {132, 16, 1}) {
    SCOPED_TRACE(sms);
    const MlaMetadata m = get_mla_metadata(lens, 128 * 2, 1, sms);
    expect_exact_cover(m, lens);
    // A request with no keys is one (empty) piece: the kernel writes o = 0 for it.
    EXPECT_EQ(m.splits_of(0), 1);
    EXPECT_EQ(m.splits_of(3), 1);
  }
  const MlaMetadata empty = get_mla_metadata({}, 16, 1, 132);
  EXPECT_EQ(empty.num_splits, std::vector<int32_t>{0});
  EXPECT_EQ(idle_parts(empty), empty.num_parts);
}

TEST(FlashMlaMetadata, RandomBatchesAreCoveredExactly) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> lens(std::uniform_int_distribution<int>(1, 160)(rng));
    for (auto& l : lens) l = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, 40000)(rng);
    const int heads = std::uniform_int_distribution<int>(0, 1)(rng) ? 16 : 128;
    const int q_len = std::uniform_int_distribution<int>(1, 2)(rng);
    const int sms = std::uniform_int_distribution<int>(1, 132)(rng);
    SCOPED_TRACE(testing::Message() << "trial " << trial << " batch " << lens.size() << " sms " << sms);
    expect_exact_cover(get_mla_metadata(lens, heads * q_len, 1, sms), lens);
    if (HasFailure()) return;
  }
}

TEST(FlashMlaMetadata, NegativeLengthIsRefused) {
  EXPECT_THROW(get_mla_metadata({10, -1}, 16, 1, 132), InputError);
}

}  // namespace
}  // namespace attn::flashmla
