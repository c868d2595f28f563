#pragma once
// A JSON value written as a Python pickle (protocol 2), for viewers that read pickles, such as
// PyTorch's memory_viz. Objects become dicts, arrays lists, integers int, floats float, strings str,
// booleans bool and null None. Only opcodes that Python's pickle and memory_viz's reader both know
// are used (PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, BININT, LONG1, BINFLOAT,
// BINUNICODE, NEWTRUE, NEWFALSE, NONE, STOP); no memo, so a value shared twice is written twice.
#include <string>

#include <nlohmann/json.hpp>

namespace flashbench {

std::string to_pickle(const nlohmann::ordered_json& value);

}  // namespace flashbench
