#pragma once
// Two kinds of failure the command line distinguishes by exit code:
// a usage error (bad flag or value: exit 2) and a runtime failure (exit 1).
#include <stdexcept>
#include <string>

namespace flashbench {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RuntimeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An allocation the tracking allocator could not satisfy; a benchmark row turns it into `oom`.
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace flashbench
