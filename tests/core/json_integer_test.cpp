// Integers read from other programs' JSON: a number that is not an integer in range is a named
// UsageError, never an out-of-range conversion (the results fuzzer found `"batch": 1e25`).
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/json_integer.hpp"
#include "flashbench/report/results_file.hpp"

namespace flashbench {
namespace {

using nlohmann::json;

TEST(JsonInteger, AcceptsIntegersAndIntegralFloatsInRange) {
  EXPECT_EQ(json_integer_if(json(42)), 42);
  EXPECT_EQ(json_integer_if(json(-7)), -7);
  EXPECT_EQ(json_integer_if(json(4.0)), 4);
  EXPECT_EQ(json_integer_if(json(std::numeric_limits<int64_t>::max())), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(json_integer_if(json(std::numeric_limits<int64_t>::min())), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(json_integer_if<int>(json(-2147483648.0)), std::numeric_limits<int>::min());
}

TEST(JsonInteger, RefusesWhatDoesNotFit) {
  EXPECT_EQ(json_integer_if(json(1e25)), std::nullopt);
  EXPECT_EQ(json_integer_if(json(-1e25)), std::nullopt);
  EXPECT_EQ(json_integer_if(json(9223372036854775808.0)), std::nullopt);  // 2^63
  EXPECT_EQ(json_integer_if(json(uint64_t{9223372036854775808u})), std::nullopt);
  EXPECT_EQ(json_integer_if(json(4.5)), std::nullopt);
  EXPECT_EQ(json_integer_if(json(std::numeric_limits<double>::infinity())), std::nullopt);
  EXPECT_EQ(json_integer_if(json("4")), std::nullopt);
  EXPECT_EQ(json_integer_if(json(nullptr)), std::nullopt);
  EXPECT_EQ(json_integer_if<int>(json(int64_t{1} << 40)), std::nullopt);
  EXPECT_EQ(json_integer_if<int>(json(2147483648.0)), std::nullopt);
  EXPECT_THROW(json_integer(json(1e25), "x"), UsageError);
}

std::string one_row(const std::string& problem_and_more) {
  return R"({"rows": [{"backend": "cpu", "variant": "standard", "status": "ok", )" + problem_and_more + "}]}";
}

TEST(JsonInteger, ResultsReaderNamesTheField) {
  const std::string good = R"("problem": {"batch": 1, "heads": 2, "seq": 16, "head_dim": 8})";
  EXPECT_EQ(parse_results(one_row(good), false, "r.json").rows.at(0).problem.heads, 2);
  try {
    parse_results(one_row(R"("problem": {"batch": 1e25, "heads": 2, "seq": 16, "head_dim": 8})"), false, "r.json");
    FAIL() << "1e25 was read as a batch";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("problem.batch"), std::string::npos) << error.what();
  }
  EXPECT_THROW(parse_results(one_row(good + R"(, "threads": 1099511627776)"), false, "r.json"), UsageError);
  EXPECT_THROW(parse_results(one_row(good + R"(, "memory": {"measured": {"peak_bytes": -1e300}})"), false, "r.json"),
               UsageError);
  EXPECT_THROW(parse_results(one_row(R"("problem": {"batch": 1, "heads": 2, "seq": 16, "head_dim": 8, "layers": 2.5})"),
                             false, "r.json"),
               UsageError);
}

}  // namespace
}  // namespace flashbench
