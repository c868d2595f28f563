#include "flashbench/core/input_file.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"

namespace flashbench {

namespace {

// What a path names, for the message that refuses it.
std::string_view kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes the descriptor on every way out.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void too_large(std::string_view what, const std::string& path, int64_t max_bytes) {
  throw UsageError(fmt::format("{}: '{}' is larger than the {} a file of this kind may hold", what, path,
                               format_bytes(max_bytes)));
}

}  // namespace

std::string read_input_file(const std::string& path, std::string_view what, int64_t max_bytes) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0)
    throw UsageError(fmt::format("{}: cannot read '{}': {}", what, path, std::strerror(errno)));
  if (!S_ISREG(status.st_mode) && !S_ISFIFO(status.st_mode))
    throw UsageError(fmt::format("{}: '{}' is {}; give a file or a pipe", what, path, kind_of(status.st_mode)));
  if (S_ISREG(status.st_mode) && status.st_size > max_bytes) too_large(what, path, max_bytes);

  const Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw UsageError(fmt::format("{}: cannot read '{}': {}", what, path, std::strerror(errno)));
  // The path may have been replaced between stat and open: judge what was opened.
  if (::fstat(file.fd, &status) != 0 || (!S_ISREG(status.st_mode) && !S_ISFIFO(status.st_mode)))
    throw UsageError(fmt::format("{}: '{}' is {}; give a file or a pipe", what, path, kind_of(status.st_mode)));

  std::string bytes;
  if (S_ISREG(status.st_mode)) bytes.reserve(size_t(status.st_size));
  char chunk[1 << 16];
  while (true) {
    const ssize_t got = ::read(file.fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw UsageError(fmt::format("{}: cannot read '{}': {}", what, path, std::strerror(errno)));
    if (got == 0) return bytes;
    // A file that grows while it is read, or a pipe, meets the same cap.
    if (int64_t(bytes.size()) + got > max_bytes) too_large(what, path, max_bytes);
    bytes.append(chunk, size_t(got));
  }
}

namespace {

// Thrown from inside the parser's callback, so that nlohmann's own parse_error handling (which a
// caller may catch to say "not valid JSON") does not swallow it.
struct TooDeep {};

}  // namespace

template <class Json>
Json parse_json_bounded(std::string_view text, std::string_view source, bool allow_exceptions) {
  const typename Json::parser_callback_t refuse_deep = [](int depth, typename Json::parse_event_t event, Json&) {
    // The callback sees an object or array start at the depth of its parent: depth + 1 is its own.
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth + 1 > kMaxJsonDepth)
      throw TooDeep{};
    return true;
  };
  try {
    return Json::parse(text, refuse_deep, allow_exceptions);
  } catch (const TooDeep&) {
    throw UsageError(fmt::format("{}: JSON nested deeper than {} levels", source, kMaxJsonDepth));
  }
}

template nlohmann::json parse_json_bounded<nlohmann::json>(std::string_view, std::string_view, bool);
template nlohmann::ordered_json parse_json_bounded<nlohmann::ordered_json>(std::string_view, std::string_view, bool);

}  // namespace flashbench
