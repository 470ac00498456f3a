# Data-layer benchmarks: plain executables that print and write JSON to
# bench/results/{loader,sampler}.json.
foreach(b loader sampler)
  add_executable(bench_${b} ${CMAKE_CURRENT_LIST_DIR}/data_${b}.cc)
  target_link_libraries(bench_${b} PRIVATE mnemo_data)
  target_compile_definitions(bench_${b} PRIVATE
    MNEMO_REPO_ROOT="${CMAKE_SOURCE_DIR}")
endforeach()
# DepBloom's sub-chains on real data (no training): bench/results/
# plan_subchains.json.
add_executable(bench_subchains ${CMAKE_CURRENT_LIST_DIR}/plan_subchains.cc)
target_link_libraries(bench_subchains PRIVATE mnemo_plan mnemo_util)
target_compile_definitions(bench_subchains PRIVATE
  MNEMO_REPO_ROOT="${CMAKE_SOURCE_DIR}")
# Bounded working sets of node states, Belady over the plan against LRU
# (no training): bench/results/working_set.json.
add_executable(bench_working_set ${CMAKE_CURRENT_LIST_DIR}/working_set.cc)
target_link_libraries(bench_working_set PRIVATE mnemo_plan mnemo_util)
target_compile_definitions(bench_working_set PRIVATE
  MNEMO_REPO_ROOT="${CMAKE_SOURCE_DIR}")
# The online working-set cache's time per read on a synthetic stream.
add_executable(bench_working_set_cache
  ${CMAKE_CURRENT_LIST_DIR}/working_set_cache.cc)
target_link_libraries(bench_working_set_cache PRIVATE mnemo_plan mnemo_util)
