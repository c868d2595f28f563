# The git revision baked into the binary ("unknown" outside a git checkout).
find_package(Git QUIET)
set(FLASHBENCH_GIT_REVISION "unknown")
if(GIT_FOUND AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --abbrev=12
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
    OUTPUT_VARIABLE FLASHBENCH_GIT_REVISION OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT FLASHBENCH_GIT_REVISION)
    set(FLASHBENCH_GIT_REVISION "unknown")
  endif()
endif()
