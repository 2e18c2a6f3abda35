# attn_gtest_suites(<target> TIMEOUT <seconds>): one CTest entry per
# GoogleTest suite of <target> (a parameterised suite's instantiation is
# one suite), listed from the built program as gtest_discover_tests lists
# its tests. One process per test paid LibTorch's start (0.6-0.9 s) for
# each of about 1,200 tests, a fifth of the suite's CPU time on 2 cores;
# one per suite pays it 140 times. A suite's failures still name each test
# (GoogleTest's brief output keeps only those).
function(attn_gtest_suites target)
  cmake_parse_arguments(ARG "" "TIMEOUT" "" ${ARGN})
  set(listed ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D PROGRAM=$<TARGET_FILE:${target}> -D OUTPUT=${listed}
            -D TIMEOUT=${ARG_TIMEOUT} -D WORKING_DIRECTORY=${CMAKE_CURRENT_BINARY_DIR}
            -P ${PROJECT_SOURCE_DIR}/cmake/gtest_suites_list.cmake
    BYPRODUCTS ${listed}
    VERBATIM)
  # CTest reads this at run time: the suites once the program is built.
  set(include ${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake)
  file(WRITE ${include}
       "if(EXISTS \"${listed}\")\n  include(\"${listed}\")\nelse()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include})
endfunction()
