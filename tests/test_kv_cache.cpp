// Paged KV cache layouts (index maps of the three formats) and the host fill.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/kv_cache.hpp"

namespace attn {
namespace {

AttentionSpec mha_spec(DType cache = DType::bf16, KvLayout layout = KvLayout::NHD) {
  AttentionSpec s;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_size_qk = s.head_size_v = 8;
  s.block_size = 16;
  s.dtype = DType::bf16;
  s.kv_cache_dtype = cache;
  s.kv_layout = layout;
  if (is_fp8(cache)) s.k_scale_calc = s.v_scale_calc = true;
  return s;
}

AttentionSpec mla_spec(DType cache = DType::bf16) {
  AttentionSpec s;
  s.use_mla = true;
  s.num_q_heads = 16;
  s.num_kv_heads = 1;
  s.head_size_qk = 192;
  s.head_size_v = 128;
  s.block_size = 16;
  s.kv_cache_dtype = cache;
  if (is_fp8(cache)) s.k_scale_calc = true;
  return s;
}

BatchShape shape(int shared_prefix = 0) {
  BatchShape sh;
  sh.label = "cache";
  sh.shared_prefix_len = shared_prefix;
  sh.requests = {{40, 1}, {17, 5}, {33, 1}, {16, 20}};
  return sh;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(KvCache, FormatNames) {
  EXPECT_STREQ(to_string(CacheFormat::flash_attn), "flash_attn");
  EXPECT_STREQ(to_string(CacheFormat::flashinfer), "flashinfer");
  EXPECT_STREQ(to_string(CacheFormat::flashmla), "flashmla");
}

TEST(KvCache, TwoTensorIndexMapsAreBijective) {
  for (CacheFormat f : {CacheFormat::flash_attn, CacheFormat::flashinfer})
    for (KvLayout lay : {KvLayout::NHD, KvLayout::HND}) {
      SCOPED_TRACE(testing::Message() << to_string(f) << (lay == KvLayout::NHD ? " NHD" : " HND"));
      KvCacheLayout l;
      l.format = f;
      l.layout = lay;
      l.num_blocks = 5;
      l.block_size = 4;
      l.num_kv_heads = 3;
      l.head_size_k = l.head_size_v = 6;
      ASSERT_EQ(l.num_elements(), 2 * 5 * 4 * 3 * 6);
      std::vector<int> hits(static_cast<size_t>(l.num_elements()), 0);
      for (int64_t blk = 0; blk < 5; ++blk)
        for (int s = 0; s < 4; ++s)
          for (int h = 0; h < 3; ++h)
            for (int d = 0; d < 6; ++d)
              for (int64_t i : {l.k_index(blk, s, h, d), l.v_index(blk, s, h, d)}) {
                ASSERT_GE(i, 0);
                ASSERT_LT(i, l.num_elements());
                ++hits[static_cast<size_t>(i)];
              }
      for (int h : hits) ASSERT_EQ(h, 1);
    }
}

TEST(KvCache, LayoutsDifferAsDocumented) {
  KvCacheLayout l;
  l.num_blocks = 10;
  l.block_size = 16;
  l.num_kv_heads = 8;
  l.head_size_k = l.head_size_v = 128;
  const int64_t page = 16 * 8 * 128;
  // flash_attn (2, nb, bs, H, D): all K pages, then all V pages.
  l.format = CacheFormat::flash_attn;
  EXPECT_EQ(l.k_index(1, 0, 0, 0), page);
  EXPECT_EQ(l.v_index(0, 0, 0, 0), 10 * page);
  EXPECT_EQ(l.k_index(0, 1, 0, 0), 8 * 128);  // NHD: slot stride H*D
  EXPECT_EQ(l.k_index(0, 0, 1, 0), 128);
  // flashinfer (nb, 2, bs, H, D): K and V of one block are adjacent.
  l.format = CacheFormat::flashinfer;
  EXPECT_EQ(l.v_index(0, 0, 0, 0), page);
  EXPECT_EQ(l.k_index(1, 0, 0, 0), 2 * page);
  // HND: head stride bs*D, slot stride D.
  l.layout = KvLayout::HND;
  EXPECT_EQ(l.k_index(0, 0, 1, 0), 16 * 128);
  EXPECT_EQ(l.k_index(0, 1, 0, 0), 128);
  EXPECT_EQ(l.v_index(2, 3, 4, 5), (2 * 2 + 1) * page + (4 * 16 + 3) * 128 + 5);
  l.format = CacheFormat::flash_attn;
  EXPECT_EQ(l.v_index(2, 3, 4, 5), (10 + 2) * page + (4 * 16 + 3) * 128 + 5);
}

TEST(KvCache, FlashMlaOneLatentEntryPerSlot) {
  const Batch b = make_batch(mla_spec(), shape(), 1);
  const KvCacheLayout l = make_cache_layout(b, CacheFormat::flashmla);
  EXPECT_EQ(l.head_size_k, 576);
  EXPECT_EQ(l.head_size_v, 512);
  EXPECT_EQ(l.num_kv_heads, 1);
  EXPECT_EQ(l.num_elements(), b.num_blocks * 16 * 576);
  std::vector<int> hits(static_cast<size_t>(l.num_elements()), 0);
  for (int64_t blk = 0; blk < l.num_blocks; ++blk)
    for (int s = 0; s < 16; ++s)
      for (int d = 0; d < 576; ++d) {
        ++hits[static_cast<size_t>(l.k_index(blk, s, 0, d))];
        if (d < 512) EXPECT_EQ(l.v_index(blk, s, 0, d), l.k_index(blk, s, 0, d));
      }
  for (int h : hits) ASSERT_EQ(h, 1);
  EXPECT_THROW(make_cache_layout(make_batch(mha_spec(), shape(), 1), CacheFormat::flashmla), InputError);
}

TEST(KvCache, MakeLayoutFollowsTheBatch) {
  const Batch b = make_batch(mha_spec(DType::fp8_e5m2, KvLayout::HND), shape(), 3);
  const KvCacheLayout l = make_cache_layout(b, CacheFormat::flashinfer);
  EXPECT_EQ(l.dtype, DType::fp8_e5m2);
  EXPECT_EQ(l.layout, KvLayout::HND);
  EXPECT_EQ(l.num_blocks, b.num_blocks);
  EXPECT_EQ(l.num_kv_heads, 2);
  EXPECT_EQ(l.head_size_k, 8);
  EXPECT_EQ(l.bytes(), static_cast<size_t>(2 * b.num_blocks * 16 * 2 * 8));
}

// Fills a cache and checks: every context token reads back as Batch::k()/v() bit for bit,
// and every other element (page tails, new-token slots, null block) is NaN.
void check_fill(const Batch& b, CacheFormat f) {
  const KvCacheLayout l = make_cache_layout(b, f);
  std::vector<uint8_t> cache(l.bytes());
  fill_cache_host(b, l, cache.data());
  const bool fp8 = is_fp8(l.dtype);
  std::vector<uint8_t> written(static_cast<size_t>(l.num_elements()), 0);
  for (int r = 0; r < b.num_reqs(); ++r) {
    const int32_t* row = b.block_table.data() + static_cast<size_t>(r) * b.max_blocks_per_req;
    for (int pos = 0; pos < b.requests[r].context_len; ++pos) {
      const int64_t blk = row[pos / b.block_size];
      const int slot = pos % b.block_size;
      if (b.spec.use_mla) {
        for (int d = 0; d < 576; ++d) {
          const size_t i = static_cast<size_t>(l.k_index(blk, slot, 0, d));
          const float got = load_as(l.dtype, cache.data(), i) * (fp8 ? b.spec.k_scale : 1.0f);
          ASSERT_EQ(bits(got), bits(b.latent(r, pos, d))) << "r=" << r << " pos=" << pos << " d=" << d;
          written[i] = 1;
        }
        continue;
      }
      for (int h = 0; h < l.num_kv_heads; ++h)
        for (int d = 0; d < l.head_size_k; ++d) {
          const size_t ki = static_cast<size_t>(l.k_index(blk, slot, h, d));
          const size_t vi = static_cast<size_t>(l.v_index(blk, slot, h, d));
          const float k = load_as(l.dtype, cache.data(), ki) * (fp8 ? b.spec.k_scale : 1.0f);
          const float v = load_as(l.dtype, cache.data(), vi) * (fp8 ? b.spec.v_scale : 1.0f);
          ASSERT_EQ(bits(k), bits(b.k(r, pos, h, d))) << "r=" << r << " pos=" << pos;
          ASSERT_EQ(bits(v), bits(b.v(r, pos, h, d))) << "r=" << r << " pos=" << pos;
          written[ki] = written[vi] = 1;
        }
    }
  }
  int64_t finite = 0, nan_new_slots = 0;
  for (int64_t i = 0; i < l.num_elements(); ++i) {
    const bool is_nan = std::isnan(load_as(l.dtype, cache.data(), static_cast<size_t>(i)));
    if (written[i]) {
      ++finite;
    } else {
      ASSERT_TRUE(is_nan) << "element " << i << " should be NaN";
    }
  }
  EXPECT_GT(finite, 0);
  // The slots the new tokens will be written to are NaN.
  for (int64_t slot : b.slot_mapping) {
    const int64_t blk = slot / b.block_size;
    const int s = static_cast<int>(slot % b.block_size);
    nan_new_slots += std::isnan(load_as(l.dtype, cache.data(), static_cast<size_t>(l.k_index(blk, s, 0, 0))));
  }
  EXPECT_EQ(nan_new_slots, b.num_tokens());
}

TEST(KvCache, FillMhaRoundTripsExactly) {
  for (DType cache : {DType::bf16, DType::fp8_e4m3, DType::fp8_e5m2})
    for (KvLayout lay : {KvLayout::NHD, KvLayout::HND})
      for (CacheFormat f : {CacheFormat::flash_attn, CacheFormat::flashinfer}) {
        SCOPED_TRACE(testing::Message() << to_string(cache) << " " << to_string(f));
        const Batch b = make_batch(mha_spec(cache, lay), shape(16), 42);
        if (is_fp8(cache)) EXPECT_NE(b.spec.k_scale, 1.0f);
        check_fill(b, f);
      }
}

TEST(KvCache, FillFp8StoresTheScaledCode) {
  const Batch b = make_batch(mha_spec(DType::fp8_e4m3), shape(), 6);
  const KvCacheLayout l = make_cache_layout(b, CacheFormat::flash_attn);
  std::vector<uint8_t> cache(l.bytes());
  fill_cache_host(b, l, cache.data());
  const int64_t blk = b.block_table[0];
  for (int d = 0; d < 8; ++d)
    EXPECT_EQ(cache[static_cast<size_t>(l.k_index(blk, 3, 1, d))], float_to_e4m3(b.k_input(0, 3, 1, d) / b.spec.k_scale));
}

TEST(KvCache, FillMlaLatent) {
  for (DType cache : {DType::bf16, DType::fp8_e4m3}) {
    SCOPED_TRACE(to_string(cache));
    check_fill(make_batch(mla_spec(cache), shape(16), 8), CacheFormat::flashmla);
  }
}

}  // namespace
}  // namespace attn
