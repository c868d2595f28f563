// Sizes as people write them: binary and SI units, bare K/M/G/T as powers of 1024, bad input.
#include <gtest/gtest.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"

namespace flashbench {
namespace {

TEST(ParseBytes, BinaryAndSiUnits) {
  EXPECT_EQ(parse_bytes("16GiB"), int64_t{16} << 30);
  EXPECT_EQ(parse_bytes("800MB"), 800'000'000);
  EXPECT_EQ(parse_bytes("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("512B"), 512);
  EXPECT_EQ(parse_bytes("64 KiB"), 65536);
  EXPECT_EQ(parse_bytes("2kb"), 2000);
  EXPECT_EQ(parse_bytes(" 1TiB "), int64_t{1} << 40);
  EXPECT_EQ(parse_bytes("3TB"), 3'000'000'000'000);
  EXPECT_EQ(parse_bytes("0.5M"), 1 << 19);
  EXPECT_EQ(parse_bytes("0"), 0);
}

TEST(ParseBytes, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "GiB", "-1GiB", "16 GiBs", "1.2.3G", "12 apples", "1e3", "9999999999TiB"})
    EXPECT_THROW(parse_bytes(bad), UsageError) << "'" << bad << "'";
}

// listed: what the help text and the unknown-name errors join the variants and devices with.
TEST(Listed, JoinsWithTheLastSeparator) {
  EXPECT_EQ(listed({}), "");
  EXPECT_EQ(listed({"cpu"}, " or "), "cpu");
  EXPECT_EQ(listed({"cpu", "cuda"}, " or "), "cpu or cuda");
  EXPECT_EQ(listed({"standard", "v1", "v2", "checkpoint"}), "standard, v1, v2, checkpoint");
  EXPECT_EQ(listed({"standard", "v1", "v2", "checkpoint"}, " or "), "standard, v1, v2 or checkpoint");
}

}  // namespace
}  // namespace flashbench
