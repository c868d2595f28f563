# The git revision baked into the binary. It is written at every build, not only at configure time,
# so a rebuilt binary never reports the commit it was first configured at; the header is rewritten
# only when the revision changed, so an unchanged tree rebuilds nothing.
set(FLASHBENCH_GIT_REVISION_HEADER ${CMAKE_CURRENT_BINARY_DIR}/generated/report/flashbench/report/git_revision.hpp)
add_custom_target(flashbench_git_revision
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR} -DOUTPUT=${FLASHBENCH_GIT_REVISION_HEADER}
          -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/WriteGitRevision.cmake
  BYPRODUCTS ${FLASHBENCH_GIT_REVISION_HEADER}
  COMMENT "Checking the git revision")
# Once now as well, so the header exists before any target that includes it is compiled.
execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
                -DOUTPUT=${FLASHBENCH_GIT_REVISION_HEADER} -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/WriteGitRevision.cmake)
