# Builds one layer probe target and checks the outcome (run by CTest: tests/layers/layers.cmake).
#   cmake -DBUILD_DIR=<build> -DTARGET=<probe> -DEXPECT=fail|link [-DSYMBOL=<name>] -P expect_link.cmake
# fail: the build must fail, and on an undefined reference to SYMBOL (GNU ld or lld wording),
# not on anything else (a compile error would prove nothing about the layers).
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "link")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TARGET}: expected to link, but the build failed (${rc}):\n${out}")
  endif()
  message(STATUS "${TARGET}: linked, as expected")
elseif(EXPECT STREQUAL "fail")
  if(rc EQUAL 0)
    message(FATAL_ERROR "${TARGET}: the upward call to ${SYMBOL} linked; the layer check "
                        "does not enforce the layers (cmake/layers.cmake)")
  endif()
  if(NOT out MATCHES "undefined (reference to|symbol:) [`']?${SYMBOL}")
    message(FATAL_ERROR "${TARGET}: the build failed (${rc}), but not on an undefined reference "
                        "to ${SYMBOL}:\n${out}")
  endif()
  string(REGEX MATCH "[^\n]*undefined (reference to|symbol:) [`']?${SYMBOL}[^\n]*" line "${out}")
  message(STATUS "${TARGET}: failed to link, as expected: ${line}")
else()
  message(FATAL_ERROR "expect_link.cmake: EXPECT must be fail or link, got '${EXPECT}'")
endif()
