// dtype_convert.hpp and dtype.cpp against an independent model of each format, written here
// from the formats' definitions: every code decodes to sign * 2^(exp - bias) * (1.mantissa)
// (subnormals 0.mantissa), and float -> narrow is "the nearest representable value, ties to the
// even code" found by searching the table of all codes, plus each format's overflow rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.hpp"
#include "core/dtype_convert.hpp"
#include "core/values.hpp"

namespace attn {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A sign + E exponent bits + M mantissa bits format.
struct Format {
  const char* name;
  int E, M;
  bool ieee;      // all-ones exponent = inf (mantissa 0) / NaN; else only all-ones code is NaN (e4m3fn)
  bool saturate;  // float -> code clamps overflow to the largest finite value (the fp8 stores)
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);

  int bias() const { return (1 << (E - 1)) - 1; }
  uint32_t sign_bit() const { return 1u << (E + M); }
  uint32_t num_codes() const { return 1u << (E + M + 1); }
  uint32_t exp_field(uint32_t c) const { return (c >> M) & ((1u << E) - 1); }
  uint32_t man_field(uint32_t c) const { return c & ((1u << M) - 1); }

  // The value of a code from its fields (double holds every one exactly).
  double value(uint32_t c) const {
    const double sign = (c & sign_bit()) ? -1.0 : 1.0;
    const uint32_t e = exp_field(c), m = man_field(c);
    const uint32_t all = (1u << E) - 1;
    if (ieee && e == all) return m == 0 ? sign * INFINITY : NAN;
    if (!ieee && e == all && m == (1u << M) - 1) return NAN;
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias() - M);
    return sign * std::ldexp(static_cast<double>((1u << M) | m), static_cast<int>(e) - bias() - M);
  }
  // Largest finite positive code (codes 0..max_code are increasing in value).
  uint32_t max_code() const {
    uint32_t c = sign_bit() - 1;
    while (!std::isfinite(value(c))) --c;
    return c;
  }
};

uint32_t enc_fp16(float x) { return float_to_fp16_bits(x); }
float dec_fp16(uint32_t c) { return fp16_bits_to_float(static_cast<uint16_t>(c)); }
uint32_t enc_bf16(float x) { return float_to_bf16_bits(x); }
float dec_bf16(uint32_t c) { return bf16_bits_to_float(static_cast<uint16_t>(c)); }
uint32_t enc_e4m3(float x) { return float_to_e4m3(x); }
float dec_e4m3(uint32_t c) { return e4m3_to_float(static_cast<uint8_t>(c)); }
uint32_t enc_e5m2(float x) { return float_to_e5m2(x); }
float dec_e5m2(uint32_t c) { return e5m2_to_float(static_cast<uint8_t>(c)); }

const Format kFp16{"fp16", 5, 10, true, false, enc_fp16, dec_fp16};
const Format kBf16{"bf16", 8, 7, true, false, enc_bf16, dec_bf16};
const Format kE4m3{"fp8_e4m3", 4, 3, false, true, enc_e4m3, dec_e4m3};
const Format kE5m2{"fp8_e5m2", 5, 2, true, true, enc_e5m2, dec_e5m2};
const Format kFormats[] = {kFp16, kBf16, kE4m3, kE5m2};

// Reference float -> code: nearest of all finite codes, ties to the even code; beyond the
// largest finite value, saturating formats clamp and IEEE ones go to infinity once past the
// midpoint to the next power of two (where rounding would leave the finite range).
// Returns the expected code, or num_codes() for "some NaN".
class Rounder {
 public:
  explicit Rounder(const Format& f) : f_(f) {
    const uint32_t mc = f.max_code();
    for (uint32_t c = 0; c <= mc; ++c) values_.push_back(f.value(c));
  }
  uint32_t operator()(float x) const {
    if (std::isnan(x)) return f_.num_codes();
    const uint32_t sign = std::signbit(x) ? f_.sign_bit() : 0u;
    const double a = std::fabs(static_cast<double>(x));
    const double maxv = values_.back();
    const uint32_t mc = static_cast<uint32_t>(values_.size() - 1);
    if (a >= maxv) {
      if (f_.saturate) return sign | mc;
      // Next value past the largest would be maxv + ulp: the tie rounds to that even code = inf.
      const double ulp = values_[mc] - values_[mc - 1];
      return a >= maxv + ulp / 2 ? (sign | (mc + 1)) : (sign | mc);
    }
    const auto it = std::upper_bound(values_.begin(), values_.end(), a);
    const uint32_t hi = static_cast<uint32_t>(it - values_.begin());
    const uint32_t lo = hi - 1;
    if (values_[lo] == a) return sign | lo;
    const double dlo = a - values_[lo], dhi = values_[hi] - a;
    if (dlo < dhi) return sign | lo;
    if (dhi < dlo) return sign | hi;
    return sign | ((lo % 2 == 0) ? lo : hi);
  }

 private:
  const Format& f_;
  std::vector<double> values_;  // [max_code + 1] positive codes' values, increasing
};

bool same_value(double want, float got) {
  if (std::isnan(want)) return std::isnan(got);
  return static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
}

// ---- decoding ----------------------------------------------------------------------------------

TEST(DType, EveryCodeDecodesToItsFieldValue) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    int failures = 0;
    for (uint32_t c = 0; c < f.num_codes(); ++c) {
      const double want = f.value(c);
      const float got = f.decode(c);
      if (!same_value(want, got) && ++failures <= 5)
        ADD_FAILURE() << "code 0x" << std::hex << c << std::dec << ": got " << got << " want " << want;
    }
    EXPECT_EQ(failures, 0);
  }
}

TEST(DType, SpecialCodes) {
  // e4m3fn: no infinity, NaN only at S.1111.111, max 448 = 0x7e; e5m2: IEEE-like, max 57344.
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x78), 256.0f);  // exponent 15 is a normal binade in the fn variant
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(e5m2_to_float(0x7b), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x7c), INFINITY);
  EXPECT_EQ(e5m2_to_float(0xfc), -INFINITY);
  for (uint8_t c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) EXPECT_TRUE(std::isnan(e5m2_to_float(c))) << int(c);
  EXPECT_EQ(e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp16_bits_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_bits_to_float(0x7c00), INFINITY);
  EXPECT_EQ(fp16_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::signbit(fp16_bits_to_float(0x8000)));
  EXPECT_EQ(bf16_bits_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(0x7f80), INFINITY);
  EXPECT_EQ(kE4m3Max, e4m3_to_float(static_cast<uint8_t>(kE4m3.max_code())));
  EXPECT_EQ(kE5m2Max, e5m2_to_float(static_cast<uint8_t>(kE5m2.max_code())));
}

// ---- encoding ----------------------------------------------------------------------------------

TEST(DType, EveryFiniteCodeRoundTrips) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    int failures = 0;
    for (uint32_t c = 0; c < f.num_codes(); ++c) {
      const double v = f.value(c);
      if (!std::isfinite(v)) continue;
      const uint32_t back = f.encode(f.decode(c));
      if (back != c && ++failures <= 5) ADD_FAILURE() << "code 0x" << std::hex << c << " came back as 0x" << back;
    }
    EXPECT_EQ(failures, 0);
  }
}

TEST(DType, MidpointsRoundToTheEvenCode) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    int failures = 0;
    const uint32_t mc = f.max_code();
    for (uint32_t c = 0; c < mc; ++c) {
      // Consecutive positive codes c, c + 1 (across binade and subnormal/normal boundaries).
      const double lo = f.value(c), hi = f.value(c + 1);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: one more bit than the format
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      const uint32_t even = (c % 2 == 0) ? c : c + 1;
      const uint32_t got_mid = f.encode(mid), got_neg = f.encode(-mid);
      const uint32_t got_below = f.encode(std::nextafter(mid, 0.0f));
      const uint32_t got_above = f.encode(std::nextafter(mid, INFINITY));
      if ((got_mid != even || got_neg != (f.sign_bit() | even) || got_below != c || got_above != c + 1) &&
          ++failures <= 5) {
        ADD_FAILURE() << "between 0x" << std::hex << c << " and 0x" << c + 1 << ": mid -> 0x" << got_mid
                      << ", -mid -> 0x" << got_neg << ", below -> 0x" << got_below << ", above -> 0x" << got_above;
      }
    }
    EXPECT_EQ(failures, 0);
  }
}

// Every format against the reference rounder over a stride through all 2^32 float bit patterns
// (normals, subnormals, huge values, infinities, NaNs of either sign) plus random [-1, 1) data.
TEST(DType, FloatToCodeMatchesNearestEvenEverywhere) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    const Rounder ref(f);
    int failures = 0;
    auto check = [&](float x) {
      const uint32_t want = ref(x);
      const uint32_t got = f.encode(x);
      const bool ok = want == f.num_codes()
                          ? (std::isnan(f.decode(got)) && ((got & f.sign_bit()) != 0) == std::signbit(x))
                          : got == want;
      if (!ok && ++failures <= 5)
        ADD_FAILURE() << "x = " << x << " (0x" << std::hex << to_bits(x) << "): got 0x" << got << " want 0x" << want;
    };
    for (uint64_t b = 0; b <= 0xffffffffull; b += 4093) check(from_bits(static_cast<uint32_t>(b)));
    for (uint32_t b : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                       0x00000001u, 0x7f7fffffu, 0xff7fffffu})
      check(from_bits(b));
    for (uint32_t i = 0; i < 100000; ++i) check(gen_value(7, ValueTensor::k, 0, i, 0, 0) * 3.0f);
    EXPECT_EQ(failures, 0);
  }
}

TEST(DType, Fp8SaturatesAndKeepsNaN) {
  // e4m3: 448 is the largest; the midpoint to the (NaN) code above ties to 448, anything larger clamps.
  for (float x : {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e6f, 3e38f, INFINITY}) {
    EXPECT_EQ(float_to_e4m3(x), 0x7e) << x;
    EXPECT_EQ(float_to_e4m3(-x), 0xfe) << x;
  }
  EXPECT_EQ(float_to_e4m3(432.0f), 0x7e);  // midpoint of 416 and 448: 448's mantissa 110 is even
  EXPECT_EQ(float_to_e4m3(431.0f), 0x7d);
  for (float x : {57344.0f, 61439.0f, 61440.0f, 1e9f, INFINITY}) {
    EXPECT_EQ(float_to_e5m2(x), 0x7b) << x;
    EXPECT_EQ(float_to_e5m2(-x), 0xfb) << x;
  }
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(float_to_e4m3(qnan), 0x7f);
  EXPECT_EQ(float_to_e4m3(-qnan), 0xff);
  EXPECT_TRUE(std::isnan(e5m2_to_float(float_to_e5m2(qnan))));
  EXPECT_TRUE(std::isnan(e5m2_to_float(float_to_e5m2(from_bits(0x7f800001u)))));  // signalling NaN too
  EXPECT_EQ(round_to(DType::fp8_e4m3, 1000.0f), 448.0f);
  EXPECT_EQ(round_to(DType::fp8_e5m2, -1e30f), -57344.0f);
}

TEST(DType, Fp16AndBf16OverflowToInfinity) {
  EXPECT_EQ(float_to_fp16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16_bits(65519.996f), 0x7bff);  // just below the midpoint to 2^16
  EXPECT_EQ(float_to_fp16_bits(65520.0f), 0x7c00);    // the tie goes to the even code: infinity
  EXPECT_EQ(float_to_fp16_bits(1e6f), 0x7c00);
  EXPECT_EQ(float_to_fp16_bits(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_fp16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_fp16_bits(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(from_bits(0x7f800001u)))));

  EXPECT_EQ(float_to_bf16_bits(from_bits(0x7f7f7fffu)), 0x7f7f);  // below the midpoint: largest finite
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x7f7f8000u)), 0x7f80);  // tie, 0x7f7f is odd: up to infinity
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-INFINITY), 0xff80);
  // NaN must stay NaN even when its payload lives only in the low 16 bits (truncation would give inf).
  for (uint32_t b : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu}) {
    const uint16_t h = float_to_bf16_bits(from_bits(b));
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(h))) << std::hex << b;
    EXPECT_EQ(h >> 15, b >> 31);
  }
}

TEST(DType, Bf16TiesToEven) {
  // 1 + 2^-8 lies halfway between bf16 1.0 (0x3f80, even) and 1 + 2^-7 (0x3f81, odd).
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 0x3f81 (odd) and 0x3f82 (even).
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f808001u)), 0x3f81);  // just above the tie
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f807fffu)), 0x3f80);  // just below
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(-1.0f - std::ldexp(1.0f, -8)), 0xbf80);
  // Carry into the exponent: 0x3fffffff rounds up to 2.0.
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3fffffffu)), 0x4000);
}

TEST(DType, Subnormals) {
  // fp16: smallest subnormal 2^-24; 2^-25 is the tie between 0 and it (0 is even).
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_fp16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_fp16_bits(3 * std::ldexp(1.0f, -25)), 0x0002);        // tie between 1 and 2
  EXPECT_EQ(float_to_fp16_bits(-std::ldexp(1.0f, -25)), 0x8000);           // rounds to -0
  EXPECT_EQ(float_to_fp16_bits(1023 * std::ldexp(1.0f, -24)), 0x03ff);     // largest subnormal
  EXPECT_EQ(float_to_fp16_bits(1023.5f * std::ldexp(1.0f, -24)), 0x0400);  // tie up to the smallest normal
  EXPECT_EQ(float_to_fp16_bits(from_bits(0x00000001u)), 0x0000);           // float subnormals flush to +0
  EXPECT_EQ(float_to_fp16_bits(from_bits(0x80000001u)), 0x8000);
  // e4m3: subnormals are m * 2^-9; e5m2: m * 2^-16.
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);
  EXPECT_EQ(float_to_e4m3(7 * std::ldexp(1.0f, -9)), 0x07);
  EXPECT_EQ(float_to_e4m3(7.5f * std::ldexp(1.0f, -9)), 0x08);  // tie up to 2^-6 (0x08, even)
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(float_to_e5m2(-3 * std::ldexp(1.0f, -17)), 0x82);
  // bf16 keeps float's exponent range: subnormal bf16 codes exist and round like normals.
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x00010000u)), 0x0001);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x00008000u)), 0x0000);
}

// ---- dtype.cpp ---------------------------------------------------------------------------------

TEST(DType, NamesSizesAndKinds) {
  const DType all[] = {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::fp8_e5m2};
  const size_t sizes[] = {4, 2, 2, 1, 1};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(parse_dtype(to_string(all[i])), all[i]) << to_string(all[i]);
    EXPECT_EQ(dtype_size(all[i]), sizes[i]);
    EXPECT_EQ(is_fp8(all[i]), i >= 3);
  }
  EXPECT_EQ(to_string(DType::f32), "fp32");
  EXPECT_EQ(to_string(DType::fp8_e5m2), "fp8_e5m2");
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp8"), DType::fp8_e4m3);
  EXPECT_FALSE(parse_dtype("bf17").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
  EXPECT_FALSE(parse_dtype("FP16").has_value());
}

TEST(DType, RoundToStoreAndLoadAgreeWithTheCodecs) {
  struct Case {
    DType t;
    const Format* f;
  };
  const Case cases[] = {
      {DType::f16, &kFp16}, {DType::bf16, &kBf16}, {DType::fp8_e4m3, &kE4m3}, {DType::fp8_e5m2, &kE5m2}};
  constexpr size_t n = 257;
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.t));
    std::vector<uint8_t> buf(n * dtype_size(c.t) + 8, 0xa5);  // guard bytes after the elements
    std::vector<float> xs(n);
    for (size_t i = 0; i < n; ++i) xs[i] = gen_value(3, ValueTensor::v, 1, static_cast<uint32_t>(i), 0, 0) * 600.0f;
    for (size_t i = 0; i < n; ++i) store_as(c.t, buf.data(), i, xs[i]);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t code = c.f->encode(xs[i]);
      uint32_t stored = 0;
      std::memcpy(&stored, buf.data() + i * dtype_size(c.t), dtype_size(c.t));
      EXPECT_EQ(stored, code) << i;
      EXPECT_EQ(load_as(c.t, buf.data(), i), c.f->decode(code)) << i;
      EXPECT_EQ(round_to(c.t, xs[i]), c.f->decode(code)) << i;
    }
    for (size_t i = n * dtype_size(c.t); i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xa5) << "wrote past the end";
    // Poison values read back as NaN and use the documented patterns.
    store_nan(c.t, buf.data(), 5);
    EXPECT_TRUE(std::isnan(load_as(c.t, buf.data(), 5)));
    EXPECT_EQ(load_as(c.t, buf.data(), 4), round_to(c.t, xs[4]));  // neighbours untouched
    EXPECT_EQ(load_as(c.t, buf.data(), 6), round_to(c.t, xs[6]));
  }
  std::vector<float> f(3, 1.0f);
  store_as(DType::f32, f.data(), 1, 0.1f);
  EXPECT_EQ(f[1], 0.1f);
  EXPECT_EQ(load_as(DType::f32, f.data(), 1), 0.1f);
  EXPECT_EQ(round_to(DType::f32, 0.1f), 0.1f);
  store_nan(DType::f32, f.data(), 2);
  EXPECT_TRUE(std::isnan(f[2]));

  uint8_t b8 = 0;
  store_nan(DType::fp8_e4m3, &b8, 0);
  EXPECT_EQ(b8, 0x7f);
  store_nan(DType::fp8_e5m2, &b8, 0);
  EXPECT_EQ(b8, 0x7e);
  uint16_t b16 = 0;
  store_nan(DType::f16, &b16, 0);
  EXPECT_EQ(b16, 0x7e00);
  store_nan(DType::bf16, &b16, 0);
  EXPECT_EQ(b16, 0x7fc0);
}

}  // namespace
}  // namespace attn
