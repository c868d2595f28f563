// The portable fp16 conversion (used where the compiler has no _Float16, as in the fuzzing build)
// against the compiler's _Float16, bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "flashbench/core/storage.hpp"

namespace flashbench {
namespace {

#ifdef FLASHBENCH_HAVE_FLOAT16
TEST(Fp16Portable, WideningMatchesFloat16ForEveryHalf) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float expected = static_cast<float>(std::bit_cast<_Float16>(Half(h)));
    const float got = fp16_to_float_portable(Half(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << std::hex << h;
    }
  }
}

// Every float whose low 9 bits are one of a few patterns (the rounding bits that matter: 13 are
// dropped, so ties, just below and just above a tie are all met), across every exponent and sign.
TEST(Fp16Portable, NarrowingMatchesFloat16) {
  int64_t compared = 0;
  for (uint64_t high = 0; high < (uint64_t{1} << 23); ++high) {
    for (uint32_t low : {0x000u, 0x001u, 0x0ffu, 0x100u, 0x101u, 0x1ffu}) {
      const uint32_t bits = uint32_t(high << 9) | low;
      const float x = std::bit_cast<float>(bits);
      const Half expected = std::bit_cast<Half>(static_cast<_Float16>(x));
      const Half got = fp16_from_float_portable(x);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(fp16_to_float_portable(got))) << std::hex << bits;
      } else {
        ASSERT_EQ(got, expected) << std::hex << bits;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, int64_t{6} << 23);
}
#endif

TEST(Fp16Portable, KnownValues) {
  EXPECT_EQ(fp16_from_float_portable(1.0f), 0x3c00);
  EXPECT_EQ(fp16_from_float_portable(-2.0f), 0xc000);
  EXPECT_EQ(fp16_from_float_portable(65504.0f), 0x7bff);
  EXPECT_EQ(fp16_from_float_portable(65519.0f), 0x7bff);  // below the tie: stays finite
  EXPECT_EQ(fp16_from_float_portable(65520.0f), 0x7c00);  // the tie rounds to even: inf
  EXPECT_EQ(fp16_from_float_portable(0x1p-24f), 0x0001);  // the smallest subnormal
  EXPECT_EQ(fp16_from_float_portable(0x1p-25f), 0x0000);  // half of it: a tie, to even (0)
  EXPECT_EQ(fp16_to_float_portable(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float_portable(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::isinf(fp16_to_float_portable(0xfc00)));
}

}  // namespace
}  // namespace flashbench
