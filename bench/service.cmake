# gRPC memory-store throughput against a real `mnemo memstore` process, with
# the machine's raw loopback TCP throughput as the reference.
add_executable(bench_memstore_grpc service_grpc.cc)
target_link_libraries(bench_memstore_grpc PRIVATE mnemo_memstore_client
  mnemo_util)
target_compile_definitions(bench_memstore_grpc PRIVATE
  MNEMO_BIN_DEFAULT="$<TARGET_FILE:mnemo>"
  MNEMO_RESULTS_DIR="${CMAKE_SOURCE_DIR}/bench/results")
add_dependencies(bench_memstore_grpc mnemo)
