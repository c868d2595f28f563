#include "flashbench/core/npy.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/input_file.hpp"

namespace flashbench {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLength = 6;
// NumPy's own reader refuses headers past 10000 bytes (np.load's max_header_size); a header is a
// short dict, and the regular expressions below walk it recursively, so a longer one is refused.
constexpr size_t kMaxHeaderBytes = 10000;
}  // namespace

NpyArray read_npy(const std::string& path, std::string_view flag) {
  return parse_npy(read_input_file(path, flag, kMaxNpyFileBytes), path);
}

NpyArray parse_npy(std::string_view bytes, std::string_view path) {
  // The reason may quote the header: its control characters become '?', so the error stays one line.
  const auto malformed = [&](std::string_view why) {
    std::string printable(why);
    for (char& c : printable)
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    return UsageError(fmt::format("'{}' is not a valid .npy file: {}", path, printable));
  };
  if (bytes.size() < 10 || bytes.compare(0, kMagicLength, kMagic, kMagicLength) != 0)
    throw malformed("missing the \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_length = 0, header_start = 0;
  if (major == 1) {
    header_length = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw malformed("truncated header");
    uint32_t length = 0;
    std::memcpy(&length, bytes.data() + 8, 4);
    header_length = length;
    header_start = 12;
  } else {
    throw malformed(fmt::format("unsupported format version {}", major));
  }
  if (header_length > kMaxHeaderBytes)
    throw malformed(fmt::format("a header of {} bytes (NumPy writes and reads at most {})", header_length, kMaxHeaderBytes));
  if (header_start + header_length > bytes.size()) throw malformed("truncated header");
  const std::string header(bytes.substr(header_start, header_length));

  std::smatch match;
  if (!std::regex_search(header, match, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw malformed("no 'descr' in the header");
  const std::string descr = match[1];
  int element_size = 0;
  if (descr == "<f4" || descr == "=f4" || descr == "|f4") element_size = 4;
  else if (descr == "<f8" || descr == "=f8" || descr == "|f8") element_size = 8;
  else throw malformed(fmt::format("dtype '{}' is not little-endian float32 or float64", descr));
  if (!std::regex_search(header, match, std::regex(R"('fortran_order'\s*:\s*(True|False))")))
    throw malformed("no 'fortran_order' in the header");
  if (match[1] == "True") throw malformed("Fortran-ordered arrays are not supported (use np.ascontiguousarray)");
  if (!std::regex_search(header, match, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw malformed("no 'shape' in the header");

  NpyArray array;
  std::stringstream dims(match[1].str());
  std::string item;
  const size_t data_start = header_start + header_length;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    int64_t extent = 0;
    try {
      extent = std::stoll(item);
    } catch (const std::exception&) {
      throw malformed(fmt::format("bad shape entry '{}'", item));
    }
    if (extent < 0) throw malformed("negative extent in the shape");
    array.shape.push_back(extent);
  }
  // A shape asking for more elements than the data holds is refused before its product can
  // overflow; an empty axis makes it 0 whatever the others say.
  const int64_t available = int64_t((bytes.size() - data_start) / size_t(element_size));
  const bool empty = std::find(array.shape.begin(), array.shape.end(), 0) != array.shape.end();
  int64_t count = empty ? 0 : 1;
  for (int64_t extent : array.shape) {
    if (empty) break;
    if (count > available / extent)
      throw malformed(fmt::format("the shape ({}) needs more than the {} bytes of data it has", match[1].str(),
                                  bytes.size() - data_start));
    count *= extent;
  }
  if (bytes.size() - data_start != static_cast<size_t>(count) * element_size)
    throw malformed(fmt::format("expected {} bytes of data, found {}", count * element_size,
                                bytes.size() - data_start));
  array.data.resize(count);
  const char* data = bytes.data() + data_start;
  for (int64_t i = 0; i < count; ++i) {
    if (element_size == 4) {
      std::memcpy(&array.data[i], data + i * 4, 4);
    } else {
      double value;
      std::memcpy(&value, data + i * 8, 8);
      array.data[i] = static_cast<float>(value);
    }
  }
  return array;
}

std::string encode_npy(const std::vector<int64_t>& shape, const std::vector<float>& data) {
  // "(3,)" for one axis, "(2, 3)" for more: Python's spelling of a tuple.
  std::string dims = fmt::format("{}", fmt::join(shape, ", "));
  if (shape.size() == 1) dims += ",";
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  // Pad with spaces so that the data starts on a 64-byte boundary; the header ends with '\n'.
  const size_t unpadded = kMagicLength + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, kMagicLength);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return out;
}

}  // namespace flashbench
