// split_first_tile (kernels/flash_attn/split_keys.hpp): where split-KV cuts a work item's key tiles,
// for the kernels' tile_keys and the planner's cost model alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/flash_attn/split_keys.hpp"

namespace attn::fa {
namespace {

// Keys of [lo, hi) in tiles [first, end) of B keys.
int keys_in(int lo, int hi, int first, int end, int B) {
  return std::max(0, std::min(hi, end * B) - std::max(lo, first * B));
}

TEST(SplitKeys, TwoTokenDecodeAt4kSplitsByKeysNotTiles) {
  // 4096 cached + 2 new keys: 65 tiles of 64, the last holding 2 keys. Cut by tiles, the first
  // split read 33 full tiles (2112 keys) and the second 1986; cut by keys, 2048 and 2050.
  EXPECT_EQ(split_first_tile(0, 4098, 2, 0, 64), 0);
  EXPECT_EQ(split_first_tile(0, 4098, 2, 1, 64), 32);
  EXPECT_EQ(split_first_tile(0, 4098, 2, 2, 64), 65);
  // 16k + 1 keys over four splits: 64 / 64 / 64 / 65 tiles (the last holds the one extra key).
  EXPECT_EQ(split_first_tile(0, 16385, 4, 1, 64), 64);
  EXPECT_EQ(split_first_tile(0, 16385, 4, 3, 64), 192);
  EXPECT_EQ(split_first_tile(0, 16385, 4, 4, 64), 257);
}

TEST(SplitKeys, SplitsTileTheRangeOnceWithinATileOfTheMean) {
  for (int B : {64, 128}) {
    for (int lo : {0, 5, 64, 1000}) {
      for (int len : {1, 2, 63, 64, 65, 200, 4098, 16385, 32769}) {
        const int hi = lo + len;
        for (int S = 1; S <= 16; ++S) {
          const int n_lo = lo / B, n_hi = (hi + B - 1) / B;
          EXPECT_EQ(split_first_tile(lo, hi, S, 0, B), n_lo);
          EXPECT_EQ(split_first_tile(lo, hi, S, S, B), n_hi);
          int total = 0;
          for (int s = 0; s < S; ++s) {
            const int first = split_first_tile(lo, hi, S, s, B), end = split_first_tile(lo, hi, S, s + 1, B);
            ASSERT_LE(first, end) << "lo=" << lo << " hi=" << hi << " S=" << S << " s=" << s;
            const int keys = keys_in(lo, hi, first, end, B);
            total += keys;
            // Each split within one tile of an equal share of the keys.
            EXPECT_LE(static_cast<double>(keys), static_cast<double>(len) / S + B)
                << "lo=" << lo << " hi=" << hi << " B=" << B << " S=" << S << " s=" << s;
            EXPECT_GE(static_cast<double>(keys), static_cast<double>(len) / S - B)
                << "lo=" << lo << " hi=" << hi << " B=" << B << " S=" << S << " s=" << s;
          }
          EXPECT_EQ(total, len) << "lo=" << lo << " hi=" << hi << " B=" << B << " S=" << S;
        }
      }
    }
  }
}

TEST(SplitKeys, NoKeysGivesEmptySplits) {
  for (int s = 0; s <= 4; ++s) {
    EXPECT_EQ(split_first_tile(256, 256, 4, s, 64), 4);
    EXPECT_EQ(split_first_tile(300, 200, 4, s, 64), 4);
  }
}

}  // namespace
}  // namespace attn::fa
