// The bounded reader every file argument goes through, and the JSON depth limit.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/input_file.hpp"
#include "flashbench/core/sweep.hpp"

namespace flashbench {
namespace {

namespace fs = std::filesystem;

// A fresh folder of this test's own, removed at the end.
class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() / ("flashbench-input-file-" + std::to_string(::getpid()) + "-" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path path = folder_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  fs::path folder_;
};

std::string usage_message(const auto& call) {
  try {
    call();
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no UsageError)";
}

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

TEST_F(InputFileTest, ReadsARegularFileWhole) {
  const std::string bytes("a\0b\nc", 5);
  EXPECT_EQ(read_input_file(write("f", bytes), "--config", 1024), bytes);
  EXPECT_EQ(read_input_file(write("empty", ""), "--config", 1024), "");
}

TEST_F(InputFileTest, RefusesAFileOverTheCapNamingTheFlag) {
  const std::string path = write("big", std::string(2000, 'x'));
  EXPECT_EQ(read_input_file(path, "--config", 2000).size(), 2000u);  // the cap itself is allowed
  const std::string message = usage_message([&] { read_input_file(path, "--config", 1999); });
  EXPECT_EQ(message.rfind("--config: '" + path + "' is larger than", 0), 0u) << message;
}

TEST_F(InputFileTest, RefusesDirectoriesAndDevices) {
  EXPECT_EQ(usage_message([&] { read_input_file(folder_.string(), "--config", 1024); }),
            "--config: '" + folder_.string() + "' is a directory; give a file or a pipe");
  // A device reads without end: refused before a byte is read. /dev/null is one on every Linux.
  EXPECT_EQ(usage_message([] { read_input_file("/dev/null", "--peak-file", 1024); }),
            "--peak-file: '/dev/null' is a character device; give a file or a pipe");
  const std::string missing = (folder_ / "missing").string();
  EXPECT_EQ(usage_message([&] { read_input_file(missing, "--config", 1024); }),
            "--config: cannot read '" + missing + "': No such file or directory");
}

TEST_F(InputFileTest, ReadsAPipeAndCapsWhatItSends) {
  const std::string fifo = (folder_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The writer sends more than the cap, until the reader closes its end (EPIPE, with SIGPIPE
  // ignored for the while), so that the test ends either way.
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    const std::string block(4096, 'y');
    for (int i = 0; i < 64 && fd >= 0; ++i)
      if (::write(fd, block.data(), block.size()) < 0) break;
    if (fd >= 0) ::close(fd);
  });
  const std::string message = usage_message([&] { read_input_file(fifo, "--config", 10000); });
  writer.join();
  std::signal(SIGPIPE, previous);
  EXPECT_NE(message.find("is larger than"), std::string::npos) << message;

  std::thread small_writer([&] { std::ofstream(fifo, std::ios::binary) << R"({"seq": [64]})"; });
  EXPECT_EQ(read_input_file(fifo, "--config", 10000), R"({"seq": [64]})");
  small_writer.join();
}

TEST(JsonDepth, ParsesUpToTheLimitAndRefusesOneMore) {
  EXPECT_TRUE(parse_json_bounded<nlohmann::json>(nested(kMaxJsonDepth), "x.json").is_array());
  EXPECT_EQ(usage_message([] { parse_json_bounded<nlohmann::json>(nested(kMaxJsonDepth + 1), "x.json"); }),
            "x.json: JSON nested deeper than 64 levels");
  // Objects count as arrays do.
  std::string objects;
  for (int i = 0; i <= kMaxJsonDepth; ++i) objects += R"({"a":)";
  objects += "1" + std::string(size_t(kMaxJsonDepth + 1), '}');
  EXPECT_EQ(usage_message([&] { parse_json_bounded<nlohmann::ordered_json>(objects, "x.json"); }),
            "x.json: JSON nested deeper than 64 levels");
}

TEST(JsonDepth, ADeepDocumentIsOneErrorNotAStackOverflow) {
  // 200,000 levels: built whole, its copy, dump or destruction would recurse that deep.
  const std::string deep = R"({"seq": )" + nested(200000) + "}";
  EXPECT_EQ(usage_message([&] { parse_sweep_json(deep, "deep.json"); }), "deep.json: JSON nested deeper than 64 levels");
  // Refused also where syntax errors are returned rather than thrown (a results file's lines).
  EXPECT_EQ(usage_message([&] { parse_json_bounded<nlohmann::ordered_json>(deep, "rows.jsonl", false); }),
            "rows.jsonl: JSON nested deeper than 64 levels");
  // A syntax error stays nlohmann's own.
  EXPECT_TRUE(parse_json_bounded<nlohmann::json>("[1,", "x.json", false).is_discarded());
  EXPECT_THROW(parse_json_bounded<nlohmann::json>("[1,", "x.json"), nlohmann::json::parse_error);
}

}  // namespace
}  // namespace flashbench
