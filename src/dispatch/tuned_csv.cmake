# a4w4_tuned_csv: the tuned-configuration CSV reader/writer on its own (it depends on nothing else
# in a4w4), for the CLI (`a4w4 tune`, `a4w4 config check`) and the fuzzer. The library compiles
# the same file into its objects. Included from tools/ and fuzz/; whichever comes first defines it.
include_guard(GLOBAL)

add_library(a4w4_tuned_csv STATIC ${CMAKE_CURRENT_LIST_DIR}/tuned_csv.cpp)
target_include_directories(a4w4_tuned_csv
  PUBLIC ${CMAKE_CURRENT_LIST_DIR}
  PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(a4w4_tuned_csv PUBLIC fmt::fmt-header-only)
target_compile_features(a4w4_tuned_csv PUBLIC cxx_std_20)
a4w4_set_warnings(a4w4_tuned_csv)
