# LibTorch 2.11.0 (CUDA 13.0 build) from PyPI's torch wheel, unpacked by
# scripts/fetch-libtorch into MNEMO_LIBTORCH_DIR. Include after Protobuf and
# gRPC are found: when Torch's config finds no protobuf::libprotobuf target
# it defines an empty placeholder of that name, and mnemo_proto would link
# nothing.
#
# Defines mnemo_torch, the interface target every torch-using target links
# (LibTorch's include directories, definitions and libraries: libtorch,
# libtorch_cpu, libtorch_cuda kept with --no-as-needed, libc10, libc10_cuda),
# and MNEMO_OPENMP_LIBRARY (the wheel's libgomp.so.1: one OpenMP runtime in
# the process, the one LibTorch's own kernels use).

if(NOT TARGET protobuf::libprotobuf OR NOT TARGET gRPC::grpc++)
  message(FATAL_ERROR "cmake/libtorch.cmake: find Protobuf and gRPC first")
endif()

if(DEFINED ENV{MNEMO_DEPS_DIR})
  set(_mnemo_deps "$ENV{MNEMO_DEPS_DIR}")
else()
  set(_mnemo_deps "${CMAKE_SOURCE_DIR}/.deps")
endif()
set(MNEMO_LIBTORCH_DIR "${_mnemo_deps}/libtorch-2.11.0-cu130" CACHE PATH
  "LibTorch and its NVIDIA libraries (scripts/fetch-libtorch)")
if(NOT EXISTS "${MNEMO_LIBTORCH_DIR}/.complete")
  message(FATAL_ERROR "No LibTorch in ${MNEMO_LIBTORCH_DIR}: run "
    "scripts/bootstrap (or scripts/fetch-libtorch) first")
endif()
# The CUDA 13.0 toolkit (nvcc and headers: Torch's CMake config needs them):
# the installed one scripts/fetch-libtorch found, or the one it assembled
# from NVIDIA's wheels.
file(STRINGS "${MNEMO_LIBTORCH_DIR}/CUDA_HOME" _cuda_home LIMIT_COUNT 1)
set(MNEMO_CUDA_HOME "${_cuda_home}" CACHE PATH
  "CUDA 13.0 toolkit: nvcc and headers (Torch's CMake config needs them)")
if(NOT EXISTS "${MNEMO_CUDA_HOME}/bin/nvcc")
  message(FATAL_ERROR "No nvcc in ${MNEMO_CUDA_HOME}/bin: LibTorch's CUDA "
    "build needs the CUDA 13.0 toolkit to compile against "
    "(scripts/fetch-libtorch --force takes it from PyPI where none is "
    "installed; -DMNEMO_CUDA_HOME=DIR names another place)")
endif()

# CUDA architectures: the A100's sm_80 and the H200's sm_90. Torch's config
# reads TORCH_CUDA_ARCH_LIST, enables the CUDA language (which defines
# CMAKE_CUDA_ARCHITECTURES: hence its warning "pytorch is not compatible
# with CMAKE_CUDA_ARCHITECTURES", on every configure) and sets it OFF; it is
# set again for mnemo's own CUDA code after.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
endif()
set(CMAKE_CUDA_COMPILER "${MNEMO_CUDA_HOME}/bin/nvcc")
set(CUDA_TOOLKIT_ROOT_DIR "${MNEMO_CUDA_HOME}")
set(CUDAToolkit_ROOT "${MNEMO_CUDA_HOME}")

set(_torch_lib "${MNEMO_LIBTORCH_DIR}/torch/lib")
# Kineto (the profiler) is inside libtorch_cpu; Torch's config looks for a
# static libkineto beside it and warns when there is none.
set(kineto_LIBRARY "${_torch_lib}/libtorch_cpu.so" CACHE FILEPATH
  "Kineto: part of libtorch_cpu in the wheel")
# Torch's config looks for Caffe2's package and its libraries in CMake's
# default paths first: where Debian's libtorch-dev is installed too, it
# would take those. Each is named here.
set(Caffe2_DIR "${MNEMO_LIBTORCH_DIR}/torch/share/cmake/Caffe2" CACHE PATH
  "LibTorch's Caffe2 package (scripts/fetch-libtorch)" FORCE)
set(Torch_DIR "${MNEMO_LIBTORCH_DIR}/torch/share/cmake/Torch" CACHE PATH
  "LibTorch's CMake package (scripts/fetch-libtorch)" FORCE)
foreach(_lib TORCH:torch c10:c10 C10_CUDA:c10_cuda)
  string(REPLACE ":" ";" _lib "${_lib}")
  list(GET _lib 0 _var)
  list(GET _lib 1 _name)
  set(${_var}_LIBRARY "${_torch_lib}/lib${_name}.so" CACHE FILEPATH
    "LibTorch's lib${_name}" FORCE)
endforeach()
find_package(Torch REQUIRED
  PATHS "${MNEMO_LIBTORCH_DIR}/torch/share/cmake/Torch" NO_DEFAULT_PATH)
if(NOT TORCH_LIBRARY MATCHES "^${MNEMO_LIBTORCH_DIR}/")
  message(FATAL_ERROR "Torch's CMake package found ${TORCH_LIBRARY}, not the "
    "LibTorch in ${MNEMO_LIBTORCH_DIR}")
endif()
set(CMAKE_CUDA_ARCHITECTURES 80 90)

file(STRINGS "${MNEMO_LIBTORCH_DIR}/torch/include/torch/headeronly/version.h"
  _torch_version REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE "[^0-9;]" "" _torch_version "${_torch_version}")
string(REPLACE ";" "." _torch_version "${_torch_version}")
if(NOT _torch_version STREQUAL "2.11.0")
  message(FATAL_ERROR "LibTorch in ${MNEMO_LIBTORCH_DIR} is ${_torch_version}, "
    "not 2.11.0 (scripts/fetch-libtorch --force)")
endif()

# libtorch_cuda registers the CUDA backend from static initializers: no
# symbol of it is referenced, and --as-needed would drop it.
set(MNEMO_TORCH_LIBRARIES
  "${_torch_lib}/libtorch.so" "${_torch_lib}/libtorch_cpu.so"
  "-Wl,--push-state,--no-as-needed" "${_torch_lib}/libtorch_cuda.so"
  "-Wl,--pop-state"
  "${_torch_lib}/libc10_cuda.so" "${_torch_lib}/libc10.so")
set(MNEMO_OPENMP_LIBRARY "${_torch_lib}/libgomp.so.1")
# Torch's compile definitions and include directories, without its link
# list (which names libnvrtc and libcudart from the toolkit: mnemo calls
# neither, and they come through libtorch_cuda's own RPATH).
add_library(mnemo_torch INTERFACE)
target_include_directories(mnemo_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS}
  "${MNEMO_LIBTORCH_DIR}/gloo/include")
target_compile_definitions(mnemo_torch INTERFACE
  $<TARGET_PROPERTY:torch_cpu,INTERFACE_COMPILE_DEFINITIONS>
  $<TARGET_PROPERTY:torch_cuda,INTERFACE_COMPILE_DEFINITIONS>)
separate_arguments(_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(mnemo_torch INTERFACE ${_torch_cxx_flags})
target_link_libraries(mnemo_torch INTERFACE ${MNEMO_TORCH_LIBRARIES})
# libtorch.so exports copies of libstdc++ functions (std::filesystem,
# std::chrono's time zones: the wheel's toolchain links them statically,
# pytorch/pytorch#133437). The dynamic linker binds each symbol to the first
# library in load order that defines it; with libtorch first, mnemo's own
# std::filesystem::remove_all ran libtorch's copy and crashed. libstdc++ is
# made the first library every torch-linking binary needs (a link option
# comes before the objects and libraries), so its definitions win; test
# libtorch_link_test checks where such symbols resolve.
target_link_options(mnemo_torch INTERFACE
  "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
message(STATUS "LibTorch 2.11.0: ${MNEMO_LIBTORCH_DIR}")
