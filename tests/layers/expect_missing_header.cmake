# cmake -DBUILD_DIR=<build> -DCHECKS="<target>=<header>;..." -P expect_missing_header.cmake
# Builds each target, which must fail because the compiler finds no <header> (GCC: "<header>: No such
# file or directory", clang: "'<header>' file not found"); a target that compiles, or fails for any
# other reason, fails the test.
set(failures "")
foreach(check ${CHECKS})
  string(REPLACE "=" ";" check ${check})
  list(GET check 0 target)
  list(GET check 1 header)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${target}
                  RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(REPLACE "." "\\." header_regex "${header}")
  if(status EQUAL 0)
    string(APPEND failures "  ${target}: compiled, but ${header} is above or beside its layer\n")
  elseif(NOT output MATCHES "${header_regex}'? file not found|${header_regex}: No such file or directory")
    string(APPEND failures "  ${target}: failed for another reason than the missing ${header}:\n${output}\n")
  else()
    message(STATUS "${target}: ${header} not found, as it must be")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "upward (or sideways) includes that did not fail as they must:\n${failures}")
endif()
