# cmake -DSOURCE_DIR=... -DOUTPUT=... -P WriteGitRevision.cmake
# Writes OUTPUT with the tree's `git describe --always --dirty` ("unknown" outside a git checkout),
# touching the file only when its content changes.
set(revision "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --abbrev=12
    WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(described)
    set(revision ${described})
  endif()
endif()
set(content "#pragma once\n// Generated at build time by cmake/WriteGitRevision.cmake.\nnamespace flashbench::build {\ninline constexpr const char* kGitRevision = \"${revision}\";\n}  // namespace flashbench::build\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} existing)
endif()
if(NOT "${existing}" STREQUAL "${content}")
  file(WRITE ${OUTPUT} "${content}")
endif()
