# The layers' include roots. Every public header lives in include/flashbench/<layer>/ (one folder per
# layer: core, model, harness, report, cpu, cuda), but the source tree's include/ would show them
# all to whoever has it on its path. Each layer's target instead gets a root of its own in the build
# tree, <build>/layers/<layer>/, holding one link: flashbench/<layer> -> include/flashbench/<layer>.
# A target sees the roots of the layers it links (usage requirements travel down the link line,
# never up), so `#include "flashbench/report/..."` in a core source finds no file: an upward
# include fails to compile (tests/layers/ holds the proof, ctest's layers.upward_includes_fail).
#
# flashbench_layer_root(<layer> <var>): makes the root of <layer> and sets <var> to it.
function(flashbench_layer_root layer var)
  set(root ${PROJECT_BINARY_DIR}/layers/${layer})
  set(link ${root}/flashbench/${layer})
  set(target ${PROJECT_SOURCE_DIR}/include/flashbench/${layer})
  if(NOT IS_DIRECTORY ${target})
    message(FATAL_ERROR "flashbench: no headers for layer '${layer}' (${target})")
  endif()
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} current)
  endif()
  if(NOT "${current}" STREQUAL "${target}")
    file(MAKE_DIRECTORY ${root}/flashbench)
    file(REMOVE ${link})
    file(CREATE_LINK ${target} ${link} SYMBOLIC)
  endif()
  set(${var} ${root} PARENT_SCOPE)
endfunction()

# flashbench_layer(<layer> [SOURCES <files>...] [BELOW <targets>...] [PRIVATE <targets>...]):
# the static library flashbench_<layer> from <files>, exposing its own root and linking only the
# layers BELOW it (PUBLIC: what its headers use) and PRIVATE libraries.
function(flashbench_layer layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;BELOW;PRIVATE")
  flashbench_layer_root(${layer} root)
  add_library(flashbench_${layer} STATIC ${arg_SOURCES})
  target_include_directories(flashbench_${layer} PUBLIC ${root})
  target_link_libraries(flashbench_${layer} PUBLIC flashbench_options ${arg_BELOW} PRIVATE ${arg_PRIVATE})
endfunction()
