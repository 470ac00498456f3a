# gRPC memory-store throughput against a real `mnemo memstore` process, with
# the machine's raw loopback TCP throughput as the reference.
add_executable(bench_memstore_grpc service_grpc.cc)
target_link_libraries(bench_memstore_grpc PRIVATE mnemo_memstore_client
  mnemo_util)
target_compile_definitions(bench_memstore_grpc PRIVATE
  MNEMO_BIN_DEFAULT="$<TARGET_FILE:mnemo>"
  MNEMO_RESULTS_DIR="${CMAKE_SOURCE_DIR}/bench/results")
add_dependencies(bench_memstore_grpc mnemo)

# `mnemo serve` under a closed-loop load (bench/serve.sh runs it).
add_executable(bench_serve_load serve_load.cc)
target_link_libraries(bench_serve_load PRIVATE mnemo_memstore_client
  mnemo_inference_requests mnemo_runtime_base mnemo_data mnemo_util)
add_dependencies(bench_serve_load mnemo)
