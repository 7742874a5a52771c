# Writes OUT, a header with the commit this build was made from (FANSTORE_COMMIT: `git describe
# --always --dirty`, or "unknown" outside a git checkout), only when it changed: `fanstore
# --version` then names the commit of the binaries, which benchmarks record instead of HEAD's.
# Run at every build by the target fanstore_build_commit (cli/CMakeLists.txt):
#   cmake -DSRC=<source dir> -DOUT=<header> -P build_commit.cmake
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
# A tag may hold quotes or parentheses: only these characters reach the C string.
string(REGEX REPLACE "[^A-Za-z0-9._+-]" "_" commit "${commit}")
set(text "#pragma once\n#define FANSTORE_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${text}")
