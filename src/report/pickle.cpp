#include "flashbench/report/pickle.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <stdexcept>

namespace flashbench {

namespace {

namespace op {
constexpr char kProto = '\x80', kStop = '.', kMark = '(', kEmptyDict = '}', kEmptyList = ']', kSetItems = 'u',
               kAppends = 'e', kBinInt = 'J', kLong1 = '\x8a', kBinFloat = 'G', kBinUnicode = 'X',
               kNewTrue = '\x88', kNewFalse = '\x89', kNone = 'N';
}  // namespace op

// Python pickles never take a list of more than this many items between a MARK and its APPENDS
// (or SETITEMS); keeping the batches small keeps a reader's stack small too.
constexpr size_t kBatch = 1000;

class PickleWriter {
 public:
  void value(const nlohmann::ordered_json& v) {
    using Type = nlohmann::ordered_json::value_t;
    switch (v.type()) {
      case Type::null: out_ += op::kNone; return;
      case Type::boolean: out_ += v.get<bool>() ? op::kNewTrue : op::kNewFalse; return;
      case Type::number_integer: integer(v.get<int64_t>()); return;
      case Type::number_unsigned: unsigned_integer(v.get<uint64_t>()); return;
      case Type::number_float: floating(v.get<double>()); return;
      case Type::string: string(v.get_ref<const std::string&>()); return;
      case Type::array: list(v); return;
      case Type::object: dict(v); return;
      case Type::binary:
      case Type::discarded: break;
    }
    throw std::invalid_argument("to_pickle: a JSON value with no pickle counterpart");
  }
  std::string finish() && {
    out_ += op::kStop;
    return std::move(out_);
  }
  PickleWriter() {
    out_ += op::kProto;
    out_ += '\x02';
  }

 private:
  void little_endian(uint64_t bits, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  void integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += op::kBinInt;
      little_endian(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
      return;
    }
    // LONG1: the fewest little-endian two's-complement bytes that keep the sign.
    int bytes = 8;
    while (bytes > 1) {
      const int64_t shifted = v >> (8 * (bytes - 1) - 1);  // the top byte and the sign bit below it
      if (shifted != 0 && shifted != -1) break;
      --bytes;
    }
    out_ += op::kLong1;
    out_ += static_cast<char>(bytes);
    little_endian(static_cast<uint64_t>(v), bytes);
  }
  void unsigned_integer(uint64_t v) {
    if (v <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(v));
    out_ += op::kLong1;
    out_ += '\x09';  // 8 bytes and a zero byte for the sign
    little_endian(v, 8);
    out_ += '\0';
  }
  void floating(double v) {
    out_ += op::kBinFloat;
    const uint64_t bits = std::bit_cast<uint64_t>(v);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);  // big-endian
  }
  void string(const std::string& s) {
    out_ += op::kBinUnicode;
    little_endian(s.size(), 4);
    out_ += s;
  }
  void list(const nlohmann::ordered_json& v) {
    out_ += op::kEmptyList;
    for (size_t first = 0; first < v.size(); first += kBatch) {
      out_ += op::kMark;
      for (size_t i = first; i < std::min(v.size(), first + kBatch); ++i) value(v[i]);
      out_ += op::kAppends;
    }
  }
  void dict(const nlohmann::ordered_json& v) {
    out_ += op::kEmptyDict;
    size_t in_batch = 0;
    for (auto item = v.begin(); item != v.end(); ++item) {
      if (in_batch == 0) out_ += op::kMark;
      string(item.key());
      value(item.value());
      if (++in_batch == kBatch) {
        out_ += op::kSetItems;
        in_batch = 0;
      }
    }
    if (in_batch > 0) out_ += op::kSetItems;
  }

  std::string out_;
};

}  // namespace

std::string to_pickle(const nlohmann::ordered_json& value) {
  PickleWriter writer;
  writer.value(value);
  return std::move(writer).finish();
}

}  // namespace flashbench
