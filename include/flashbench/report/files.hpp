#pragma once
// Writing an output file whole or not at all, and checking before any work that it can be written.
#include <string>

namespace flashbench {

// Writes `contents` to a temporary file next to `path`, then renames it over `path`, so a reader
// never sees half a file. Throws RuntimeFailure and leaves nothing behind on error.
void write_file_atomically(const std::string& path, const std::string& contents);
// Fails before any work where write_file_atomically(path) would fail at the end of it: a directory
// (UsageError), a folder that is missing or refuses a new file (RuntimeFailure). A pipe or a device
// passes (it is opened when written).
void check_writable(const std::string& path);

}  // namespace flashbench
