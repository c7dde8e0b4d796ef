# a4w4_npy: the .npy reader/writer, a small static library shared by the CLI, its tests and the
# fuzzer. Included from tools/ and fuzz/; whichever comes first defines it.
include_guard(GLOBAL)

add_library(a4w4_npy STATIC ${CMAKE_CURRENT_LIST_DIR}/npy.cpp)
target_include_directories(a4w4_npy PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_compile_features(a4w4_npy PUBLIC cxx_std_20)
a4w4_set_warnings(a4w4_npy)
