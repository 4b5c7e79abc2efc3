# Writes OUTPUT, a header defining HOPATTN_BENCH_GIT_COMMIT as the short commit of SOURCE_DIR, with
# "-dirty" when tracked files differ from it, or "unknown" outside a git checkout. The file is only
# rewritten when its content changes, so an unchanged commit recompiles nothing.
cmake_minimum_required(VERSION 3.24)
execute_process(COMMAND git -C ${SOURCE_DIR} rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE failed ERROR_QUIET)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C ${SOURCE_DIR} diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty)
    string(APPEND commit "-dirty")
  endif()
endif()
set(content "#pragma once\n#define HOPATTN_BENCH_GIT_COMMIT \"${commit}\"\n")
set(previous "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} previous)
endif()
if(NOT previous STREQUAL content)
  file(WRITE ${OUTPUT} "${content}")
endif()
