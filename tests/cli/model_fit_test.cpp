// `flashbench model` and `flashbench fit` driven as a person would: presets print the documents'
// numbers with their flags, JSON carries the contract's keys, fit answers fast, bad sizes exit 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashbench {
namespace {

struct CommandResult {
  int exit_code;
  std::string out;  // stdout only: JSON must parse without stderr mixed in
};

CommandResult flashbench(const std::string& arguments) {
  const std::string command = std::string(FLASHBENCH_BINARY) + " " + arguments + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  CommandResult result{-1, ""};
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// The cells of the table line that starts with `label`, split where two or more spaces separate them.
std::vector<std::string> cells_of_line(const std::string& text, const std::string& label) {
  const size_t start = text.find("\n" + label);
  if (start == std::string::npos) return {};
  const std::string line = text.substr(start + 1, text.find('\n', start + 1) - start - 1);
  std::vector<std::string> cells;
  std::regex separator("\\s{2,}");
  for (std::sregex_token_iterator it(line.begin(), line.end(), separator, -1), end; it != end; ++it)
    cells.push_back(*it);
  return cells;
}

TEST(ModelCommand, Seed002TablePrintsPublishedFormulaAndFlags) {
  const CommandResult r = flashbench("model --preset seed-002 --threads 4");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  using Cells = std::vector<std::string>;
  // quantity, as published, formula, head-aware, flashbench, flag
  const Cells v1_extra = cells_of_line(r.out, "V1 extra per layer (S)");
  ASSERT_EQ(v1_extra.size(), 6u) << r.out;
  EXPECT_EQ(Cells(v1_extra.begin() + 1, v1_extra.begin() + 4), (Cells{"128.00 MB", "32.00 MB", "1.00 GiB"}));
  EXPECT_EQ(v1_extra[5].rfind("MISMATCH", 0), 0u);
  const Cells v1_total = cells_of_line(r.out, "V1 total, 32 layers");
  ASSERT_GE(v1_total.size(), 3u);
  EXPECT_EQ(Cells(v1_total.begin() + 1, v1_total.begin() + 3), (Cells{"4.22 GB", "1.19 GB"}));
  const Cells saving = cells_of_line(r.out, "V2 saving vs standard");
  ASSERT_GE(saving.size(), 3u);
  EXPECT_EQ(Cells(saving.begin() + 1, saving.begin() + 3), (Cells{"97.6%", "81.2%"}));
  const Cells o = cells_of_line(r.out, "O per layer (V2)");
  ASSERT_EQ(o.size(), 5u) << "no flag on a matching row";
  EXPECT_EQ(Cells(o.begin() + 1, o.end()), (Cells{"1.00 MB", "1.00 MB", "32.0 MiB", "32.0 MiB"}));
  size_t flags = 0;
  for (size_t at = r.out.find("MISMATCH ["); at != std::string::npos; at = r.out.find("MISMATCH [", at + 1)) ++flags;
  EXPECT_EQ(flags, 5u);
}

TEST(ModelCommand, JsonRowsPerVariant) {
  const CommandResult r = flashbench("model --seq 1000 --heads 4 --head-dim 64 --layers 3 --dtype bf16 --threads 2 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto document = nlohmann::json::parse(r.out);
  ASSERT_EQ(document["rows"].size(), 4u);
  for (const auto& row : document["rows"]) {
    EXPECT_EQ(row["problem"]["dtype"], "bf16");
    const auto& model = row["memory"]["model"];
    int64_t sum = 0;
    for (const char* tag : {"input", "activation", "kept", "workspace", "grad"}) sum += model["by_tag"][tag].get<int64_t>();
    EXPECT_EQ(sum, model["peak_bytes"].get<int64_t>()) << row["variant"];
  }
  EXPECT_EQ(document["rows"][0]["memory"]["model"]["kept_bytes"], 3 * (4 * 1000 * 1000 * 2));  // 3 bf16 P's
}

// --cp 1 is the single-device model: the same document, byte for byte.
TEST(ModelCommand, OneDeviceOfARingIsTheSingleDeviceModel) {
  const std::string args = "model --seq 1000 --heads 4 --head-dim 64 --layers 3 --dtype bf16 --threads 2 --format json";
  const CommandResult alone = flashbench(args);
  const CommandResult ring = flashbench(args + " --cp 1");
  ASSERT_EQ(alone.exit_code, 0);
  EXPECT_EQ(ring.out, alone.out);
  const nlohmann::json document = nlohmann::json::parse(alone.out);  // alive through the loop
  for (const auto& row : document["rows"]) {
    EXPECT_EQ(row["cp"], 1);
    EXPECT_EQ(row["sent_bytes"]["stack"], 0);
  }
}

// One device of four: N/4 rows, and the bytes it sends are K and V blocks and their fp32 dK and dV
// sums.
TEST(ModelCommand, RingRowsCarryTheSplitAndTheBytesSent) {
  const CommandResult r = flashbench("model --backend cuda --cp 4 --causal --seq 4096 --heads 2 --head-dim 64 "
                                     "--layers 3 --dtype bf16 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const int64_t block = 1 * 2 * 1024 * 64;  // elements of one device's [B,H,N/4,d] block
  const nlohmann::json document = nlohmann::json::parse(r.out);  // alive through the loop
  for (const auto& row : document["rows"]) {
    SCOPED_TRACE(row["variant"].get<std::string>());
    EXPECT_EQ(row["cp"], 4);
    EXPECT_EQ(row["local_seq"], 1024);
    const int64_t forward = 3 * 2 * block * 2;  // a bf16 K and V block at each of P − 1 = 3 steps
    EXPECT_EQ(row["sent_bytes"]["forward_per_layer"], forward);
    // The blocks again, and the fp32 dK and dV sums P = 4 times each; checkpoint re-runs its forward.
    const int64_t backward = forward + 4 * 2 * block * 4 + (row["variant"] == "checkpoint" ? forward : 0);
    EXPECT_EQ(row["sent_bytes"]["backward_per_layer"], backward);
    EXPECT_EQ(row["sent_bytes"]["stack"], 3 * (forward + backward));
    EXPECT_EQ(row["per_layer"]["output_bytes"], block * 2);
  }
  const CommandResult table = flashbench("model --cp 4 --seq 4096 --heads 2");
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("split over 4 devices (ring, 1024 rows each), per device"), std::string::npos) << table.out;
  EXPECT_FALSE(cells_of_line(table.out, "  sent in backward").empty()) << table.out;
}

// fit searches N by bisection over the closed-form model: it answers at once. The bound only
// guards against a search that never ends; it is not a speed target (this machine may be loaded).
TEST(FitCommand, AnswersWithoutSearchingForLong) {
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r = flashbench("fit --budget 16GiB --layers 32 --heads 32 --head-dim 128 --format json");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_LT(seconds, 20.0);
  const auto document = nlohmann::json::parse(r.out);
  ASSERT_EQ(document["rows"].size(), 4u);
  for (const auto& row : document["rows"]) {
    EXPECT_EQ(row["budget_bytes"].get<int64_t>(), int64_t{16} << 30);
    EXPECT_LE(row["model_peak_bytes"].get<int64_t>(), int64_t{16} << 30);
    EXPECT_GT(row["max_seq"].get<int64_t>(), 0);
  }
}

TEST(FitCommand, RingSearchesMultiplesOfTheZigZagChunks) {
  const CommandResult r = flashbench("fit --backend cuda --cp 4 --causal --budget 8GiB --heads 8 --head-dim 128 "
                                     "--dtype bf16 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const CommandResult one = flashbench("fit --backend cuda --causal --budget 8GiB --heads 8 --head-dim 128 --dtype bf16 "
                                       "--format json");
  const auto rows = nlohmann::json::parse(r.out)["rows"];
  const auto single = nlohmann::json::parse(one.out)["rows"];
  ASSERT_EQ(rows.size(), single.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(rows[i]["variant"].get<std::string>());
    EXPECT_EQ(rows[i]["cp"], 4);
    EXPECT_EQ(rows[i]["max_seq"].get<int64_t>() % 8, 0);
    EXPECT_GT(rows[i]["max_seq"].get<int64_t>(), single[i]["max_seq"].get<int64_t>());
    EXPECT_GT(rows[i]["sent_bytes"]["forward_per_layer"].get<int64_t>(), 0);
  }
}

TEST(FitCommand, BadBudgetIsAUsageError) {
  EXPECT_EQ(flashbench("fit --budget 16XB").exit_code, 2);
  EXPECT_EQ(flashbench("fit --budget -1GiB").exit_code, 2);
  EXPECT_EQ(flashbench("model --preset seed-999").exit_code, 2);
}

}  // namespace
}  // namespace flashbench
