# Model-kernel benchmarks: plain executables that print a table and write
# JSON to bench/results/.
# The memory updaters' fused cells against LibTorch's: cell_ops.json.
add_executable(bench_cell_ops ${CMAKE_CURRENT_LIST_DIR}/cell_ops.cc)
target_link_libraries(bench_cell_ops PRIVATE mnemo_model mnemo_platform_base)
target_compile_definitions(bench_cell_ops PRIVATE
  MNEMO_REPO_ROOT="${CMAKE_SOURCE_DIR}")
