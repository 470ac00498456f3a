# Memory-store benchmarks (plain main()s writing bench/results/*.json).
add_executable(bench_memstore_inproc ${CMAKE_CURRENT_LIST_DIR}/memstore_inproc.cc)
target_link_libraries(bench_memstore_inproc PRIVATE mnemo_memstore mnemo_util)
