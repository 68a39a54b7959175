# Runs the gradus CLI and checks its exit code and output (ctest's PASS_REGULAR_EXPRESSION alone
# would ignore the exit code). Invoked as
#   cmake -DEXE=path -DARGS="a@@b@@c" -DRC=n [-DOUTPUT_REGEX=re] [-DSTDOUT_REGEX=re]
#         [-DMETRICS=file -DMETRICS_REGEX=re] -P run_check.cmake
# ARGS are separated by "@@" (a ';' would be split by add_test). Regexes are CMake regexes,
# where '.' matches newlines too; OUTPUT_REGEX applies to stdout + stderr.
if(ARGS STREQUAL "")
  set(argv "")
else()
  string(REPLACE "@@" ";" argv "${ARGS}")
endif()
if(METRICS)
  file(REMOVE "${METRICS}")
endif()
execute_process(COMMAND "${EXE}" ${argv} RESULT_VARIABLE rc OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
message("exit code: ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT rc STREQUAL "${RC}")
  message(FATAL_ERROR "expected exit code ${RC}, got ${rc}")
endif()
if(DEFINED OUTPUT_REGEX AND NOT "${out}${err}" MATCHES "${OUTPUT_REGEX}")
  message(FATAL_ERROR "the output does not match '${OUTPUT_REGEX}'")
endif()
if(DEFINED STDOUT_REGEX AND NOT "${out}" MATCHES "${STDOUT_REGEX}")
  message(FATAL_ERROR "stdout does not match '${STDOUT_REGEX}'")
endif()
if(METRICS)
  file(READ "${METRICS}" metrics)
  message("--- ${METRICS}\n${metrics}---")
  if(NOT metrics MATCHES "${METRICS_REGEX}")
    message(FATAL_ERROR "the metrics file does not match '${METRICS_REGEX}'")
  endif()
endif()
