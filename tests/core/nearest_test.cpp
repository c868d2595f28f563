// The "did you mean" distance: single edits, a swap of neighbours, and where a slip ends.
#include <gtest/gtest.h>

#include "flashbench/core/nearest.hpp"

namespace flashbench {
namespace {

TEST(EditDistance, CountsInsertDeleteReplaceAndSwap) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("", "seq"), 3);
  EXPECT_EQ(edit_distance("--seq", "--seq"), 0);
  EXPECT_EQ(edit_distance("--seqq", "--seq"), 1);    // one extra letter
  EXPECT_EQ(edit_distance("--sq", "--seq"), 1);      // one missing
  EXPECT_EQ(edit_distance("--sez", "--seq"), 1);     // one replaced
  EXPECT_EQ(edit_distance("--sqe", "--seq"), 1);     // two neighbours swapped
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);  // the textbook pair
  EXPECT_EQ(edit_distance("ca", "abc"), 3);          // optimal string alignment: a swapped pair is not edited again
  EXPECT_EQ(edit_distance("abc", "xyz"), 3);
}

TEST(NearestName, SuggestsASlipAndNothingForAnotherWord) {
  const std::vector<std::string> flags = {"--seq", "--seq-k", "--heads", "--threads", "--variant", "--help"};
  EXPECT_EQ(nearest_name("--seqq", flags), "--seq");
  EXPECT_EQ(nearest_name("--thread", flags), "--threads");
  EXPECT_EQ(nearest_name("--varaint", flags), "--variant");
  EXPECT_EQ(nearest_name("--seq-kk", flags), "--seq-k");
  EXPECT_EQ(nearest_name("--zzzzzz", flags), std::nullopt);
  EXPECT_EQ(nearest_name("--layers", flags), std::nullopt);
  const std::vector<std::string> commands = {"run", "grad", "info", "model", "fit", "compare", "merge"};
  EXPECT_EQ(nearest_name("rnu", commands), "run");
  EXPECT_EQ(nearest_name("modle", commands), "model");
  EXPECT_EQ(nearest_name("benchmark", commands), std::nullopt);
  EXPECT_EQ(nearest_name("x", {}), std::nullopt);
}

}  // namespace
}  // namespace flashbench
