// GPU tests of the paged KV-cache kernels and the device timing harness. Every cache check is
// bit-exact against the host path (store_as / fill_cache_host) on random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "core/device_cache.hpp"
#include "core/values.hpp"
#include "gpu/gpu_test_util.hpp"
#include "kernels/cache/cache_launch.hpp"
#include "model/batch.hpp"
#include "model/kv_cache.hpp"
#include "pipeline/pipeline.hpp"
#include "timing/ceilings.hpp"
#include "timing/read_floor.hpp"
#include "timing/timing.hpp"

namespace attn {
namespace {

using attn::testing::download_all;
using attn::testing::first_mismatch;
using attn::testing::upload_vector;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// n distinct slots of a cache with `num_slots` slots, every `skip_every`-th replaced by -1.
std::vector<int64_t> random_slots(int64_t n, int64_t num_slots, uint32_t seed, int skip_every) {
  std::vector<int64_t> all(static_cast<size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (i % skip_every == skip_every - 1) all[i] = -1 - i;  // any negative slot is padding
  return all;
}

// Host tensor [rows, cols] (row stride `stride`) of values 3 * gen (so fp8 scales matter).
std::vector<uint8_t> random_tensor(DType dt, int64_t rows, int64_t cols, int64_t stride, uint32_t tensor) {
  std::vector<uint8_t> v(static_cast<size_t>(rows * stride) * dtype_size(dt), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      store_as(dt, v.data(), static_cast<size_t>(r * stride + c),
               3.0f * gen_value(99, ValueTensor::q, tensor, static_cast<uint32_t>(r), 0, static_cast<uint32_t>(c)));
  return v;
}

// What a cache write stores for input x.
float cache_input(DType cache, float x, float scale) { return is_fp8(cache) ? x / scale : x; }

// The code the host stores for q in an fp8 cache.
uint8_t fp8_code(DType cache, float q) {
  uint8_t c;
  store_as(cache, &c, 0, q);
  return c;
}

// A write of num_tokens rows of f32 K and V (key_stride / value_stride elements apart, l's kv heads
// and head sizes) into d_cache, whose layout is l, at the given scales.
ReshapeAndCacheParams f32_write(const KvCacheLayout& l, const DeviceBuffer& key, const DeviceBuffer& value,
                                int64_t stride, const DeviceBuffer& slots, int64_t num_tokens, DeviceBuffer& d_cache,
                                float k_scale, float v_scale) {
  const CacheView view = cache_view(l);
  ReshapeAndCacheParams p{};
  p.key = key.data();
  p.value = value.data();
  p.key_stride = p.value_stride = stride;
  p.slot_mapping = slots.as<const int64_t>();
  p.k_cache = d_cache.as<uint8_t>() + view.k_offset * dtype_size(l.dtype);
  p.v_cache = d_cache.as<uint8_t>() + view.v_offset * dtype_size(l.dtype);
  p.k_strides = view.k;
  p.v_strides = view.v;
  p.num_tokens = num_tokens;
  p.num_kv_heads = l.num_kv_heads;
  p.head_size_k = l.head_size_k;
  p.head_size_v = l.head_size_v;
  p.block_size = l.block_size;
  p.k_scale = k_scale;
  p.v_scale = v_scale;
  p.input_dtype = DType::f32;
  p.cache_dtype = l.dtype;
  return p;
}

std::string what(DType in, DType cache, const KvCacheLayout& l) {
  return std::string(to_string(in)) + "->" + std::string(to_string(cache)) + " " + to_string(l.format) + " " +
         (l.layout == KvLayout::NHD ? "NHD" : "HND") + " D=" + std::to_string(l.head_size_k);
}

// ---- reshape_and_cache_flash -------------------------------------------------------------------

TEST(CacheKernels, ReshapeAndCacheBitExactAllDtypesLayouts) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t num_tokens = 37;
  const float k_scale = 0.004f, v_scale = 1.7f;  // 3 / 0.004 = 750 > 448: e4m3 saturates
  int cases = 0;
  for (int head_size : {64, 36}) {  // 36: the scalar (non-vector) path
    for (CacheFormat fmt : {CacheFormat::flash_attn, CacheFormat::flashinfer}) {
      for (KvLayout kl : {KvLayout::NHD, KvLayout::HND}) {
        for (DType in : {DType::f32, DType::f16, DType::bf16}) {
          for (DType cache : {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::fp8_e5m2}) {
            KvCacheLayout l;
            l.format = fmt;
            l.layout = kl;
            l.dtype = cache;
            l.num_blocks = 7;
            l.block_size = 16;
            l.num_kv_heads = 3;
            l.head_size_k = l.head_size_v = head_size;
            const int64_t row = l.num_kv_heads * head_size;
            const int64_t stride = row + 8;  // padded rows, like a slice of a fused qkv tensor
            const auto key = random_tensor(in, num_tokens, row, stride, 1 + cases);
            const auto value = random_tensor(in, num_tokens, row, stride, 1000 + cases);
            const auto slots = random_slots(num_tokens, l.num_blocks * l.block_size, 7 + cases, 5);
            auto expected = random_bytes(l.bytes(), 11 + cases);

            DeviceBuffer d_key = upload_vector(key), d_value = upload_vector(value);
            DeviceBuffer d_slots = upload_vector(slots), d_cache = upload_vector(expected);
            const CacheView view = cache_view(l);
            const size_t es = dtype_size(cache);
            ReshapeAndCacheParams p{};
            p.key = d_key.data();
            p.value = d_value.data();
            p.key_stride = p.value_stride = stride;
            p.slot_mapping = d_slots.as<const int64_t>();
            p.k_cache = d_cache.as<char>() + view.k_offset * es;
            p.v_cache = d_cache.as<char>() + view.v_offset * es;
            p.k_strides = view.k;
            p.v_strides = view.v;
            p.num_tokens = num_tokens;
            p.num_kv_heads = l.num_kv_heads;
            p.head_size_k = p.head_size_v = head_size;
            p.block_size = l.block_size;
            p.k_scale = k_scale;
            p.v_scale = v_scale;
            p.input_dtype = in;
            p.cache_dtype = cache;
            launch_reshape_and_cache_flash(p, stream);
            stream.synchronize();

            for (int64_t t = 0; t < num_tokens; ++t) {
              if (slots[t] < 0) continue;
              const int64_t block = slots[t] / l.block_size;
              const int off = static_cast<int>(slots[t] % l.block_size);
              for (int h = 0; h < l.num_kv_heads; ++h)
                for (int d = 0; d < head_size; ++d) {
                  const size_t src = static_cast<size_t>(t * stride + h * head_size + d);
                  store_as(cache, expected.data(), static_cast<size_t>(l.k_index(block, off, h, d)),
                           cache_input(cache, load_as(in, key.data(), src), k_scale));
                  store_as(cache, expected.data(), static_cast<size_t>(l.v_index(block, off, h, d)),
                           cache_input(cache, load_as(in, value.data(), src), v_scale));
                }
            }
            const auto got = download_all(d_cache);
            ASSERT_EQ(first_mismatch(got, expected), -1) << what(in, cache, l);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 120);
}

TEST(CacheKernels, ReshapeAndCacheDeviceScalesAndSaturation) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // One token whose values exceed the e4m3 range after scaling: stored codes saturate to +-448
  // (0x7e / 0xfe), never NaN; the scale comes from a device scalar.
  KvCacheLayout l;
  l.dtype = DType::fp8_e4m3;
  l.num_blocks = 2;
  l.block_size = 16;
  l.num_kv_heads = 1;
  l.head_size_k = l.head_size_v = 8;
  std::vector<float> key = {1000.f, -1000.f, 0.5f, -0.25f, 3.0e38f, 448.f, 0.f, -0.f};
  const std::vector<float> scale = {0.5f};
  const std::vector<int64_t> slots = {19};
  DeviceBuffer d_key = upload_vector(key), d_scale = upload_vector(scale), d_slots = upload_vector(slots);
  DeviceBuffer d_cache(l.bytes());
  d_cache.memset_async(0x11, nullptr);
  ReshapeAndCacheParams p = f32_write(l, d_key, d_key, 8, d_slots, 1, d_cache, 123.0f, 0.5f);
  p.k_scale_ptr = d_scale.as<const float>();  // the device pointer wins over k_scale
  launch_reshape_and_cache_flash(p, nullptr);
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download_all(d_cache);
  const std::vector<uint8_t> want = {0x7e, 0xfe, float_to_e4m3(1.0f), float_to_e4m3(-0.5f), 0x7e, 0x7e, 0x00, 0x80};
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(got[static_cast<size_t>(l.k_index(1, 3, 0, d))], want[d]) << "k dim " << d;
    EXPECT_EQ(got[static_cast<size_t>(l.v_index(1, 3, 0, d))], want[d]) << "v dim " << d;
  }
  EXPECT_EQ(got[static_cast<size_t>(l.k_index(1, 2, 0, 0))], 0x11) << "neighbouring slot untouched";
}

// The device quantizes a pair per conversion instruction (kern::f32x2_to_fp8x2_exact), the host
// value by value in software: the same code for every rounding case. 2^24 fp32 inputs: every
// sign, exponent and top 15 mantissa bits (each format's rounding bit, its tie and sticky bits at
// every target exponent, subnormal targets, float subnormals, zeros, infinities, NaNs with and
// without a sign), the low 8 bits drawn from 0x00, 0x01, 0x80 and 0xff. Scales (the division ahead of
// the rounding): 1, the "calc" scale of unit data (1/448), 0.37, 1/3, significands of all ones and of
// a last one, a tiny and a huge one.
TEST(CacheKernels, ReshapeAndCacheFp8CodesOfEveryRoundingCase) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const int heads = 8, head_size = 128, row = heads * head_size;
  const int64_t n = int64_t{1} << 24, num_tokens = n / row;
  std::vector<float> x(static_cast<size_t>(n));
  const uint32_t low[4] = {0x00, 0x01, 0x80, 0xff};
  for (uint32_t i = 0; i < n; ++i) x[i] = bits_to_f32(i << 8 | low[(i * 2654435761u) >> 30]);
  std::vector<int64_t> slots(static_cast<size_t>(num_tokens));
  std::iota(slots.begin(), slots.end(), 0);
  DeviceBuffer d_x = upload_vector(x), d_slots = upload_vector(slots);
  Stream stream;
  const std::pair<float, float> scales[] = {
      {1.f, 1.f / 448.f}, {0.37f, 1.f / 3.f}, {0x1.fffffep0f, 0x1.000002p-1f}, {3e-20f, 7e19f}};
  for (DType cache : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    for (const auto& [k_scale, v_scale] : scales) {
      KvCacheLayout l;
      l.dtype = cache;
      l.block_size = 16;
      l.num_blocks = num_tokens / l.block_size;
      l.num_kv_heads = heads;
      l.head_size_k = l.head_size_v = head_size;
      DeviceBuffer d_cache(l.bytes());
      d_cache.memset_async(0x11, stream);
      launch_reshape_and_cache_flash(f32_write(l, d_x, d_x, row, d_slots, num_tokens, d_cache, k_scale, v_scale), stream);
      stream.synchronize();
      const auto got = download_all(d_cache);
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < n; ++i) {
        const int t = static_cast<int>(i / row), h = static_cast<int>(i % row / head_size), d = static_cast<int>(i % head_size);
        const uint8_t k = got[static_cast<size_t>(l.k_index(t / l.block_size, t % l.block_size, h, d))];
        const uint8_t v = got[static_cast<size_t>(l.v_index(t / l.block_size, t % l.block_size, h, d))];
        // The device's division returns the canonical (positive) NaN for a NaN input; the host's
        // keeps the input's sign. Both store a NaN code.
        const auto quotient = [&](float s) { return std::isnan(x[i]) ? std::numeric_limits<float>::quiet_NaN() : x[i] / s; };
        if (k != fp8_code(cache, quotient(k_scale)) || v != fp8_code(cache, quotient(v_scale))) {
          if (first < 0) first = i;
          ++bad;
        }
      }
      EXPECT_EQ(bad, 0) << to_string(cache) << " k_scale " << k_scale << " v_scale " << v_scale
                        << ": first at input bits 0x" << std::hex << f32_to_bits(x[first >= 0 ? first : 0]);
    }
  }
}

// The division ahead of the rounding, where it decides a code. Each (scale, x) pair puts x / scale
// within 2^-24 float ulps of the midpoint between two floats that the format stores as different
// codes (found by a search over random scales: they come as scales one ulp off a short value). Only
// the correctly rounded quotient stores the host's code for every one: a write planted to multiply by
// the scale's reciprocal stored another code for 6 of the 16 signed values of each format (48 of the
// test's 128 stores). The rounding test above lands this close to a code's edge only by chance.
TEST(CacheKernels, ReshapeAndCacheFp8DivisionAtCodeEdges) {
  ATTN_REQUIRE_CUDA_DEVICE();
  struct Case {
    uint32_t scale, x;  // float bits
  };
  const Case e4m3[] = {{0x3fcfffffu, 0x3cf6fffeu}, {0x3f8fffffu, 0x3d60ffffu}, {0x3f0fffffu, 0x40cefffeu},
                       {0x400fffffu, 0x3fe0ffffu}, {0x404fffffu, 0x4076fffeu}, {0x404fffffu, 0x42f6fffeu},
                       {0x3fcfffffu, 0x3e76fffeu}, {0x40700001u, 0x41ff0002u}};
  const Case e5m2[] = {{0x40600001u, 0x3efc0002u}, {0x3f9fffffu, 0x3b5bfffeu}, {0x401fffffu, 0x445bfffeu},
                       {0x401fffffu, 0x40dbfffeu}, {0x40600001u, 0x447c0002u}, {0x401fffffu, 0x3bdbfffeu},
                       {0x3f1fffffu, 0x3e5bfffeu}, {0x40600001u, 0x45fc0002u}};
  Stream stream;
  for (DType cache : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const Case* cases = cache == DType::fp8_e4m3 ? e4m3 : e5m2;
    const auto code = [&](float q) { return fp8_code(cache, q); };
    for (int c = 0; c < 8; ++c) {
      // The data's strength: a neighbouring float of the quotient stores another code.
      const float q = bits_to_f32(cases[c].x) / bits_to_f32(cases[c].scale);
      EXPECT_TRUE(code(std::nextafter(q, INFINITY)) != code(q) || code(std::nextafter(q, -INFINITY)) != code(q))
          << to_string(cache) << " case " << c << " decides no code";
    }
    for (int c = 0; c < 8; c += 2) {  // K at case c's scale, V at case c + 1's; x and -x, four times
      KvCacheLayout l;
      l.dtype = cache;
      l.num_blocks = 1;
      l.block_size = 16;
      l.num_kv_heads = 1;
      l.head_size_k = l.head_size_v = 8;
      std::vector<float> key(8), value(8);
      for (int d = 0; d < 8; ++d) {
        key[d] = (d % 2 ? -1.f : 1.f) * bits_to_f32(cases[c].x);
        value[d] = (d % 2 ? -1.f : 1.f) * bits_to_f32(cases[c + 1].x);
      }
      const std::vector<int64_t> slots = {5};
      DeviceBuffer d_key = upload_vector(key), d_value = upload_vector(value), d_slots = upload_vector(slots);
      DeviceBuffer d_cache(l.bytes());
      d_cache.memset_async(0x11, stream);
      const ReshapeAndCacheParams p = f32_write(l, d_key, d_value, 8, d_slots, 1, d_cache, bits_to_f32(cases[c].scale),
                                                bits_to_f32(cases[c + 1].scale));
      launch_reshape_and_cache_flash(p, stream);
      stream.synchronize();
      const auto got = download_all(d_cache);
      for (int d = 0; d < 8; ++d) {
        EXPECT_EQ(got[static_cast<size_t>(l.k_index(0, 5, 0, d))], code(key[d] / p.k_scale))
            << to_string(cache) << " case " << c << " dim " << d;
        EXPECT_EQ(got[static_cast<size_t>(l.v_index(0, 5, 0, d))], code(value[d] / p.v_scale))
            << to_string(cache) << " case " << c + 1 << " dim " << d;
      }
    }
  }
}

TEST(CacheKernels, ReshapeAndCacheRejectsBadInput) {
  ATTN_REQUIRE_CUDA_DEVICE();
  ReshapeAndCacheParams p{};
  p.num_tokens = 1;
  p.num_kv_heads = 1;
  p.head_size_k = p.head_size_v = 8;
  p.block_size = 16;
  p.input_dtype = DType::fp8_e4m3;  // not an input dtype
  EXPECT_THROW(launch_reshape_and_cache_flash(p, nullptr), RuntimeError);
  p.input_dtype = DType::bf16;
  p.block_size = 0;
  EXPECT_THROW(launch_reshape_and_cache_flash(p, nullptr), RuntimeError);
}

// ---- concat_and_cache_mla --------------------------------------------------------------------

TEST(CacheKernels, ConcatAndCacheMlaBitExact) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t num_tokens = 21;
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType cache : {DType::bf16, DType::fp8_e4m3, DType::fp8_e5m2}) {
      KvCacheLayout l;
      l.format = CacheFormat::flashmla;
      l.dtype = cache;
      l.num_blocks = 4;
      l.block_size = 64;
      l.num_kv_heads = 1;
      l.head_size_k = 576;
      l.head_size_v = 512;
      const float scale = 0.01f;
      const auto kv_c = random_tensor(in, num_tokens, 512, 512, 1);
      const auto k_pe = random_tensor(in, num_tokens, 64, 64, 2);
      const auto slots = random_slots(num_tokens, l.num_blocks * l.block_size, 3, 4);
      auto expected = random_bytes(l.bytes(), 5);
      DeviceBuffer d_kv = upload_vector(kv_c), d_pe = upload_vector(k_pe), d_slots = upload_vector(slots);
      DeviceBuffer d_cache = upload_vector(expected);
      ConcatAndCacheMlaParams p{};
      p.kv_c = d_kv.data();
      p.k_pe = d_pe.data();
      p.kv_c_stride = 512;
      p.k_pe_stride = 64;
      p.slot_mapping = d_slots.as<const int64_t>();
      p.cache = d_cache.data();
      p.block_stride = l.block_size * 576;
      p.entry_stride = 576;
      p.num_tokens = num_tokens;
      p.block_size = l.block_size;
      p.scale = scale;
      p.input_dtype = in;
      p.cache_dtype = cache;
      launch_concat_and_cache_mla(p, stream);
      stream.synchronize();
      for (int64_t t = 0; t < num_tokens; ++t) {
        if (slots[t] < 0) continue;
        const int64_t block = slots[t] / l.block_size;
        const int off = static_cast<int>(slots[t] % l.block_size);
        for (int d = 0; d < 576; ++d) {
          const float x = d < 512 ? load_as(in, kv_c.data(), static_cast<size_t>(t * 512 + d))
                                  : load_as(in, k_pe.data(), static_cast<size_t>(t * 64 + d - 512));
          store_as(cache, expected.data(), static_cast<size_t>(l.k_index(block, off, 0, d)), cache_input(cache, x, scale));
        }
      }
      ASSERT_EQ(first_mismatch(download_all(d_cache), expected), -1) << what(in, cache, l);
    }
  }
}

// ---- device fill vs fill_cache_host ----------------------------------------------------------

Batch fill_batch(bool mla, DType dtype, DType cache, uint64_t seed) {
  AttentionSpec s;
  s.dtype = dtype;
  s.kv_cache_dtype = cache;
  s.block_size = 16;
  if (mla) {
    s.use_mla = true;
    s.num_q_heads = 4;
    s.num_kv_heads = 1;
    s.head_size_qk = 192;
    s.head_size_v = 128;
  } else {
    s.num_q_heads = 6;
    s.num_kv_heads = 3;
    s.head_size_qk = s.head_size_v = 64;
  }
  s.k_scale = 0.002f;  // 1 / 0.002 = 500: saturates e4m3
  s.v_scale = 0.3f;
  BatchShape shape;
  shape.requests = {{70, 3}, {48, 1}, {101, 1}, {32, 5}, {33, 1}};
  shape.shared_prefix_len = 32;
  shape.block_allocation = BlockAllocation::shuffled;
  shape.num_blocks = 64;  // spare blocks stay NaN
  // Every other case in the [data] regime of bell-shaped values with K outlier channels.
  shape.data.normal = seed % 2 == 1;
  shape.data.k_outlier_channels = seed % 2 == 1 ? 4 : 0;
  shape.data.k_outlier_scale = 20.0;
  return make_batch(s, shape, seed);
}

TEST(CacheKernels, DeviceFillMatchesHostFillEveryFormat) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Stream stream;
  int cases = 0;
  for (bool mla : {false, true}) {
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      for (DType cache : {dtype, DType::fp8_e4m3, DType::fp8_e5m2}) {
        const Batch b = fill_batch(mla, dtype, cache, 1234 + cases);
        std::vector<std::pair<CacheFormat, KvLayout>> formats;
        if (mla) {
          formats = {{CacheFormat::flashmla, KvLayout::NHD}, {CacheFormat::flash_attn, KvLayout::NHD}};
        } else {
          for (CacheFormat f : {CacheFormat::flash_attn, CacheFormat::flashinfer})
            for (KvLayout kl : {KvLayout::NHD, KvLayout::HND}) formats.emplace_back(f, kl);
        }
        for (auto [fmt, kl] : formats) {
          Batch bb = b;
          bb.spec.kv_layout = kl;
          const KvCacheLayout l = make_cache_layout(bb, fmt);
          std::vector<uint8_t> host(l.bytes());
          fill_cache_host(bb, l, host.data());
          DeviceBuffer dev = make_device_cache(bb, l, stream);
          ASSERT_EQ(dev.bytes(), host.size());
          const auto got = download_all(dev);
          const long bad = first_mismatch(got, host);
          ASSERT_EQ(bad, -1) << what(dtype, cache, l) << (mla ? " mla" : "") << " byte " << bad;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 9 * 4 + 9 * 2);
}

TEST(CacheKernels, DeviceFillLeavesNewTokenSlotsNaN) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const Batch b = fill_batch(false, DType::bf16, DType::bf16, 5);
  const KvCacheLayout l = make_cache_layout(b, CacheFormat::flash_attn);
  DeviceBuffer dev = make_device_cache(b, l, stream);
  const auto got = download_all<uint16_t>(dev);
  for (int64_t t = 0; t < b.num_tokens(); ++t) {
    const int64_t slot = b.slot_mapping[t];
    EXPECT_EQ(got[l.k_index(slot / l.block_size, slot % l.block_size, 1, 7)], 0x7fc0);
  }
  // A context token is a number.
  const int64_t block = b.block_table[0];
  EXPECT_TRUE(std::isfinite(bf16_bits_to_float(got[l.k_index(block, 0, 0, 0)])));
}

// ---- copy_blocks / swap_blocks ---------------------------------------------------------------

TEST(CacheKernels, CopyBlocksEveryCache) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (int64_t block_bytes : {4096, 18}) {  // 18: the byte-wise path
    const int64_t num_blocks = 10, stride = block_bytes;
    const int num_caches = 4;  // K and V of two layers
    std::vector<std::vector<uint8_t>> host;
    std::vector<DeviceBuffer> dev;
    std::vector<uint64_t> ptrs;
    for (int c = 0; c < num_caches; ++c) {
      host.push_back(random_bytes(static_cast<size_t>(num_blocks * stride), 20 + c));
      dev.push_back(upload_vector(host.back()));
      ptrs.push_back(reinterpret_cast<uint64_t>(dev.back().data()));
    }
    const std::vector<int64_t> mapping = {1, 5, 2, 7, 9, 0, 3, 4};  // disjoint sources and targets
    DeviceBuffer d_ptrs = upload_vector(ptrs), d_map = upload_vector(mapping);
    CopyBlocksParams p{};
    p.cache_ptrs = d_ptrs.as<const uint64_t>();
    p.num_caches = num_caches;
    p.block_mapping = d_map.as<const int64_t>();
    p.num_pairs = static_cast<int64_t>(mapping.size() / 2);
    p.block_bytes = block_bytes;
    p.block_stride_bytes = stride;
    launch_copy_blocks(p, stream);
    stream.synchronize();
    for (int c = 0; c < num_caches; ++c) {
      auto want = host[c];
      for (size_t i = 0; i < mapping.size(); i += 2)
        std::copy_n(host[c].begin() + mapping[i] * stride, block_bytes, want.begin() + mapping[i + 1] * stride);
      ASSERT_EQ(first_mismatch(download_all(dev[c]), want), -1) << "cache " << c << " block_bytes " << block_bytes;
    }
  }
}

TEST(CacheKernels, SwapBlocksRoundTripThroughPinnedHost) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t block_bytes = 16 * 8 * 128 * 2, num_blocks = 10;
  const auto original = random_bytes(static_cast<size_t>(block_bytes * num_blocks), 77);
  DeviceBuffer gpu = upload_vector(original);
  PinnedBuffer cpu(static_cast<size_t>(block_bytes * 6));
  std::fill_n(cpu.as<uint8_t>(), cpu.bytes(), uint8_t{0});
  const std::vector<int64_t> out = {3, 0, 7, 1, 1, 5};  // device block -> host block
  swap_blocks(gpu.data(), cpu.data(), block_bytes, block_bytes, out.data(), 3, cudaMemcpyDeviceToHost, stream);
  DeviceBuffer back(gpu.bytes());
  back.memset_async(0, stream);
  const std::vector<int64_t> in = {0, 2, 1, 4, 5, 9};  // host block -> device block
  swap_blocks(cpu.data(), back.data(), block_bytes, block_bytes, in.data(), 3, cudaMemcpyHostToDevice, stream);
  stream.synchronize();
  const auto got = download_all(back);
  const std::pair<int, int> moved[] = {{3, 2}, {7, 4}, {1, 9}};  // original block -> final block
  for (auto [from, to] : moved)
    EXPECT_TRUE(std::equal(original.begin() + from * block_bytes, original.begin() + (from + 1) * block_bytes,
                           got.begin() + to * block_bytes))
        << from << " -> " << to;
  EXPECT_EQ(got[0], 0) << "untouched block stays zero";
}

// ---- buffers and device facts ----------------------------------------------------------------

TEST(DeviceBuffers, MoveOnlyAndRangeChecked) {
  ATTN_REQUIRE_CUDA_DEVICE();
  DeviceBuffer a(256);
  void* p = a.data();
  DeviceBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.bytes(), 0u);
  std::vector<uint8_t> host(300, 1);
  EXPECT_THROW(b.upload(host.data(), 300), RuntimeError);
  EXPECT_THROW(b.download(host.data(), 200, 100), RuntimeError);
  b.upload(host.data(), 256);
  EXPECT_THROW(DeviceBuffer(std::size_t{1} << 62), RuntimeError);  // more than any device holds
}

TEST(DeviceBuffers, DeviceQuery) {
  ATTN_REQUIRE_CUDA_DEVICE();
  std::string why;
  const auto info = query_device(&why);
  ASSERT_TRUE(info.has_value()) << why;
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->num_sms, 0);
  EXPECT_GT(info->l2_bytes, 0u);
  EXPECT_GT(info->total_memory_bytes, info->free_memory_bytes / 2);
  std::printf("device: %s cc %s, %d SMs, L2 %zu MiB, %zu GiB, SM clock %d MHz\n", info->name.c_str(),
              info->cc().c_str(), info->num_sms, info->l2_bytes >> 20, info->total_memory_bytes >> 30,
              info->sm_clock_khz / 1000);
}

TEST(DeviceCeilingsTest, MeasuredCeilingsAreSane) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const DeviceCeilings c = measure_device_ceilings();
  std::printf("ceilings: %s: copy %.0f GB/s (%.1f us per GiB), bf16 GEMM %.0f TFLOP/s (%.0f us)\n", c.name.c_str(),
              c.copy_gbps, c.copy_us, c.bf16_tflops, c.gemm_us);
  EXPECT_GT(c.copy_gbps, 100.0);
  EXPECT_LT(c.copy_gbps, 20000.0);
  EXPECT_GT(c.bf16_tflops, 10.0);
  EXPECT_LT(c.bf16_tflops, 5000.0);
}

// The read floor: measured, cached per byte count, and growing with the bytes (4 x 256 MiB
// against 64 MiB: far beyond any run-to-run spread). Against the copy ceiling it is only printed.
TEST(DeviceCeilingsTest, ReadFloorOfABareStreamingRead) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const double small = 64.0 * (1 << 20), large = 256.0 * (1 << 20);
  const ReadFloor a = measure_read_floor(small);
  const ReadFloor b = measure_read_floor(large);
  ASSERT_GT(a.us, 0.0) << a.why;
  ASSERT_GT(b.us, 0.0) << b.why;
  EXPECT_GT(b.us, 2.0 * a.us);
  EXPECT_EQ(measure_read_floor(large).us, b.us) << "a second call reuses the first measurement";
  EXPECT_LT(measure_read_floor(8.0).us, 0.0) << "fewer than 16 bytes: nothing to time";
  const ReadFloor huge = measure_read_floor(1e15);  // a cascade row's logical bytes can exceed the device
  EXPECT_LT(huge.us, 0.0);
  EXPECT_NE(huge.why.find("free device memory"), std::string::npos) << huge.why;
  std::printf("read floor: 64 MiB %.1f us (%.0f GB/s), 256 MiB %.1f us (%.0f GB/s)\n", a.us, small / a.us / 1e3, b.us,
              large / b.us / 1e3);
}

// A timed GPU row of the pipeline carries its read floor; --no-read-floor and warm-L2 rows do not.
TEST(DeviceCeilingsTest, PipelineRowsCarryTheirReadFloor) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const Scenario sc = scenario_from_cli("llama3-8b", "16x1@2048", 5);
  const auto registry = make_registry();
  PipelineOptions o;
  o.backends = {"flash_attn"};
  o.iterations = 5;
  o.warmup = 1;
  o.check_sample = 4;
  o.batch_invariance = false;
  const PipelineResult cold = run_scenario(sc, registry, o);
  ASSERT_EQ(cold.rows.size(), 1u);
  const ResultRow& r = cold.rows[0];
  ASSERT_EQ(r.status, "pass") << r.reason;
  EXPECT_GT(r.read_floor_us, 0.0);
  EXPECT_NEAR(r.pct_read_floor, 100.0 * r.read_floor_us / r.median_time_us, 1e-9);
  EXPECT_EQ(r.read_floor_us, measure_read_floor(r.bytes).us) << "the floor of the row's own bytes";
  std::printf("16 x 2k decode: %.1f us, read floor %.1f us (%.1f %%)\n", r.median_time_us, r.read_floor_us,
              r.pct_read_floor);
  o.read_floor = false;
  EXPECT_LT(run_scenario(sc, registry, o).rows.at(0).read_floor_us, 0.0);
  o.read_floor = true;
  o.cold_l2 = false;
  EXPECT_LT(run_scenario(sc, registry, o).rows.at(0).pct_read_floor, 0.0);
}

// ---- timing harness --------------------------------------------------------------------------

// A device instance whose run() is one reshape_and_cache_flash over 4096 tokens x 8 x 128.
class CacheWriteInstance : public BackendInstance {
 public:
  CacheWriteInstance() {
    l_.num_blocks = 4096 / 16 + 1;
    l_.num_kv_heads = 8;
    l_.head_size_k = l_.head_size_v = 128;
    const int64_t row = 8 * 128;
    input_ = DeviceBuffer(static_cast<size_t>(kTokens * row * 2));
    input_.memset_async(0x3c, stream_);  // bf16 1.0-ish, not zeros
    std::vector<int64_t> slots(kTokens);
    std::iota(slots.begin(), slots.end(), 16);
    slots_ = upload_vector(slots);
    cache_ = DeviceBuffer(l_.bytes());
    const CacheView v = cache_view(l_);
    p_.key = p_.value = input_.data();
    p_.key_stride = p_.value_stride = row;
    p_.slot_mapping = slots_.as<const int64_t>();
    p_.k_cache = cache_.as<uint16_t>() + v.k_offset;
    p_.v_cache = cache_.as<uint16_t>() + v.v_offset;
    p_.k_strides = v.k;
    p_.v_strides = v.v;
    p_.num_tokens = kTokens;
    p_.num_kv_heads = 8;
    p_.head_size_k = p_.head_size_v = 128;
    p_.block_size = 16;
  }
  void plan() override { ++plans; }
  void run() override {
    ++runs;
    launch_reshape_and_cache_flash(p_, stream_);
  }
  void run_attention() override {  // a step that is all cache write: its input rewritten as it is
    ++attention_runs;
    input_.memset_async(0x3c, stream_);
  }
  void poison() override { cache_.memset_async(0xff, stream_); }
  void poison_outputs() override {}
  void synchronize() override { stream_.synchronize(); }
  AttentionOutput fetch() override { return {}; }
  bool on_device() const override { return true; }
  void* stream() const override { return stream_.get(); }
  uint16_t cache_word(int64_t block, int slot) const {
    uint16_t w = 0;
    cache_.download(&w, 2, static_cast<size_t>(l_.k_index(block, slot, 0, 0)) * 2);
    return w;
  }

  static constexpr int64_t kTokens = 4096;
  int plans = 0, runs = 0, attention_runs = 0;

 private:
  Stream stream_;
  KvCacheLayout l_;
  DeviceBuffer input_, slots_, cache_;
  ReshapeAndCacheParams p_{};
};

TEST(DeviceTiming, EventsColdAndWarmGiveSaneSamples) {
  ATTN_REQUIRE_CUDA_DEVICE();
  CacheWriteInstance inst;
  for (bool cold : {true, false}) {
    TimingOptions o;
    o.warmup = 3;
    o.iterations = 20;
    o.cold_l2 = cold;
    const Timing t = time_instance(inst, o);
    EXPECT_EQ(t.method, "cuda_events");
    EXPECT_EQ(t.cold_l2, cold);
    EXPECT_EQ(t.samples, 20);
    EXPECT_GT(t.min_us, 0.0);
    EXPECT_LE(t.min_us, t.median_us);
    EXPECT_LE(t.median_us, t.max_us);
    EXPECT_LT(t.median_us, 10000.0);  // 16 MiB moved: far below 10 ms on any GPU
    EXPECT_GE(t.plan_us, 0.0);
    std::printf("reshape_and_cache 4096x8x128 bf16 (%s L2): median %.2f us, min %.2f, max %.2f\n",
                cold ? "cold" : "warm", t.median_us, t.min_us, t.max_us);
  }
  EXPECT_EQ(inst.runs, 2 * (3 + 20));
  EXPECT_GT(inst.plans, 0);
}

// --timed attention: one run() first, then run_attention() for every warm-up call and sample (and
// as a CUDA graph, one eager call and the capture, then replays).
TEST(DeviceTiming, AttentionAloneAfterOneStep) {
  ATTN_REQUIRE_CUDA_DEVICE();
  for (bool graph : {false, true}) {
    CacheWriteInstance inst;
    TimingOptions o;
    o.warmup = 3;
    o.iterations = 10;
    o.cuda_graph = graph;
    o.part = TimedPart::attention;
    const Timing t = time_instance(inst, o);
    EXPECT_EQ(t.samples, 10);
    EXPECT_EQ(inst.runs, 1) << "graph " << graph;
    EXPECT_EQ(inst.attention_runs, graph ? 2 : 3 + 10) << "graph " << graph;
    EXPECT_EQ(inst.cache_word(1, 0), 0x3c3c);  // the step's write, once
  }
}

// Counts executions of its stream work with a host node: graph replays run it, capture does not.
class CountingInstance : public CacheWriteInstance {
 public:
  void run() override {
    CacheWriteInstance::run();
    ATTN_CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream()), &bump, &executed));
  }
  static void bump(void* counter) { ++*static_cast<int*>(counter); }
  int executed = 0;
};

TEST(DeviceTiming, GraphReplaysDoTheWork) {
  ATTN_REQUIRE_CUDA_DEVICE();
  CountingInstance inst;
  inst.poison();
  inst.synchronize();
  TimingOptions o;
  o.warmup = 2;
  o.iterations = 10;
  o.cold_l2 = true;
  o.cuda_graph = true;
  const Timing t = time_instance(inst, o);
  inst.synchronize();
  EXPECT_EQ(t.method, "cuda_graph");
  EXPECT_EQ(t.samples, 10);
  EXPECT_GT(t.median_us, 0.0);
  EXPECT_EQ(inst.runs, 2);           // one eager run, one capture: replays do not call run()
  EXPECT_EQ(inst.executed, 1 + 2 + 10);  // the eager run, then every warm-up and timed replay
  EXPECT_EQ(inst.cache_word(1, 0), 0x3c3c);
  std::printf("graph replay (with a host node): median %.2f us\n", t.median_us);
}

class NullStreamInstance : public CacheWriteInstance {
 public:
  void* stream() const override { return nullptr; }
};

TEST(DeviceTiming, GraphOnLegacyStreamIsRejected) {
  ATTN_REQUIRE_CUDA_DEVICE();
  NullStreamInstance inst;
  TimingOptions o;
  o.cuda_graph = true;
  EXPECT_THROW(time_instance(inst, o), RuntimeError);
}

}  // namespace
}  // namespace attn
