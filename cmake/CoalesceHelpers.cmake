# Small helpers in the spirit of absl_cc_library / absl_cc_test.
#
# coalesce_cc_library(NAME foo SRCS a.cc b.cu DEPS x PUBLIC_DEPS y)
#   defines coalesce_foo with alias coalesce::foo.
# coalesce_cc_test(NAME foo_test SRCS foo_test.cc DEPS x LABELS unit)
#   defines a GoogleTest executable registered with CTest under LABELS.
include(CMakeParseArguments)

function(coalesce_cc_library)
  cmake_parse_arguments(L "" "NAME" "SRCS;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(coalesce_${L_NAME} STATIC ${L_SRCS})
  add_library(coalesce::${L_NAME} ALIAS coalesce_${L_NAME})
  target_include_directories(coalesce_${L_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(coalesce_${L_NAME} PUBLIC ${L_PUBLIC_DEPS} PRIVATE ${L_DEPS})
endfunction()

function(coalesce_cc_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gmock GTest::gtest_main)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()
