#pragma once
// NumPy .npy files (format 1.0-3.0): read float32/float64 C-order arrays, write float32.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashbench {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // converted to float32, C order
};

// Throws UsageError naming the file when it is missing, not a .npy file, Fortran-ordered, or of a
// dtype other than little-endian float32/float64.
NpyArray read_npy(const std::string& path, std::string_view flag = ".npy");  // flag: named in errors
// The same from the file's bytes; `path` names it in errors.
NpyArray parse_npy(std::string_view bytes, std::string_view path);

// The bytes of a float32 .npy file holding `data` with `shape`.
std::string encode_npy(const std::vector<int64_t>& shape, const std::vector<float>& data);

}  // namespace flashbench
