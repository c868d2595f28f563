// to_pickle writes the bytes Python's pickle reads (protocol 2): checked here byte for byte on the
// integer encodings that change at the edges (BININT up to 2^31 - 1, LONG1 beyond, negative LONG1 in
// two's complement), and as a whole by tests/cli/trace_test.py, which loads every snapshot with pickle.
#include <algorithm>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "flashbench/report/pickle.hpp"

namespace flashbench {
namespace {

using nlohmann::ordered_json;

std::string pickled(std::string_view body) { return std::string("\x80\x02", 2) + std::string(body) + "."; }

TEST(Pickle, Integers) {
  EXPECT_EQ(to_pickle(ordered_json(1)), pickled(std::string("J\x01\x00\x00\x00", 5)));
  EXPECT_EQ(to_pickle(ordered_json(-1)), pickled("J\xff\xff\xff\xff"));
  EXPECT_EQ(to_pickle(ordered_json(int64_t{2147483647})), pickled("J\xff\xff\xff\x7f"));
  // 2^31 needs a fifth byte to keep its sign: 00 00 00 80 00.
  EXPECT_EQ(to_pickle(ordered_json(int64_t{2147483648})), pickled(std::string("\x8a\x05\x00\x00\x00\x80\x00", 7)));
  EXPECT_EQ(to_pickle(ordered_json(int64_t{-2147483649})), pickled("\x8a\x05\xff\xff\xff\x7f\xff"));
  EXPECT_EQ(to_pickle(ordered_json(int64_t{1} << 40)), pickled(std::string("\x8a\x06\x00\x00\x00\x00\x00\x01", 8)));
  EXPECT_EQ(to_pickle(ordered_json(-(int64_t{1} << 40))), pickled(std::string("\x8a\x06\x00\x00\x00\x00\x00\xff", 8)));
}

TEST(Pickle, ScalarsAndContainers) {
  EXPECT_EQ(to_pickle(ordered_json(nullptr)), pickled("N"));
  EXPECT_EQ(to_pickle(ordered_json(true)), pickled("\x88"));
  EXPECT_EQ(to_pickle(ordered_json(false)), pickled("\x89"));
  EXPECT_EQ(to_pickle(ordered_json(1.5)), pickled(std::string("G\x3f\xf8\x00\x00\x00\x00\x00\x00", 9)));  // big-endian
  EXPECT_EQ(to_pickle(ordered_json("ab")), pickled(std::string("X\x02\x00\x00\x00" "ab", 7)));
  EXPECT_EQ(to_pickle(ordered_json::array()), pickled("]"));
  EXPECT_EQ(to_pickle(ordered_json::object()), pickled("}"));
  EXPECT_EQ(to_pickle(ordered_json::array({true, nullptr})), pickled("](\x88" "Ne"));
  EXPECT_EQ(to_pickle(ordered_json{{"k", false}}), pickled(std::string("}(X\x01\x00\x00\x00k\x89u", 10)));
}

TEST(Pickle, LongListsAreBatched) {
  ordered_json many = ordered_json::array();
  for (int i = 0; i < 2500; ++i) many.push_back(nullptr);
  const std::string bytes = to_pickle(many);
  // ] then three MARK ... APPENDS batches (1000, 1000, 500) of N, then STOP.
  EXPECT_EQ(bytes.size(), 2 + 1 + 3 * 2 + 2500 + 1);
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), 'e'), 3);
}

}  // namespace
}  // namespace flashbench
