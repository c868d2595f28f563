// One include and nothing else, compiled with a layer's usage requirements (tests/layers/CMakeLists.txt):
// a header of the layer itself or one below compiles; one of a layer above, or beside, finds no file.
#include FLASHBENCH_LAYER_HEADER
