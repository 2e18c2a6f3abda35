# cmake -D PROGRAM=... -D OUTPUT=... -D TIMEOUT=... -D WORKING_DIRECTORY=...
#   -P gtest_suites_list.cmake
# Writes OUTPUT: an add_test per GoogleTest suite of PROGRAM
# (attn_gtest_suites in gtest_suites.cmake), whose COST is its number of
# tests, so CTest starts the large suites first.
execute_process(COMMAND "${PROGRAM}" --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status
                TIMEOUT 120)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --gtest_list_tests failed (${status}):\n${errors}")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.")
    set(suite ${CMAKE_MATCH_1})
    list(APPEND suites ${suite})
    set(count_${suite} 0)
  elseif(line MATCHES "^  [^ ]" AND DEFINED suite)
    math(EXPR count_${suite} "${count_${suite}} + 1")
  endif()
endforeach()
set(text "")
foreach(suite IN LISTS suites)
  string(APPEND text
         "add_test([=[${suite}]=] \"${PROGRAM}\" \"--gtest_filter=${suite}.*\" --gtest_brief=1)\n"
         "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT ${TIMEOUT} COST ${count_${suite}}"
         " WORKING_DIRECTORY \"${WORKING_DIRECTORY}\")\n")
endforeach()
file(WRITE "${OUTPUT}" "${text}")
