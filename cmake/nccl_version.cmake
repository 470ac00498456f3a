# The NCCL version check: cuda_device.cc compiles ProcessGroupNCCL against
# the toolkit's nccl.h, while at run time LibTorch loads the NCCL that
# scripts/fetch-libtorch put beside it (the wheel's pinned version, recorded
# in MNEMO_LIBTORCH_DIR/MANIFEST). Headers of another version would compile
# against structures and constants the loaded library does not have, so the
# configure fails on a difference.

# The version "MAJOR.MINOR.PATCH" nccl.h at `header` defines, in `out`.
function(mnemo_nccl_header_version header out)
  file(STRINGS "${header}" _defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  set(_v "")
  foreach(_part MAJOR MINOR PATCH)
    set(_n "")
    foreach(_d ${_defs})
      if(_d MATCHES "^#define NCCL_${_part} +([0-9]+)")
        set(_n "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    if(_n STREQUAL "")
      set(${out} "" PARENT_SCOPE)
      return()
    endif()
    list(APPEND _v "${_n}")
  endforeach()
  string(REPLACE ";" "." _v "${_v}")
  set(${out} "${_v}" PARENT_SCOPE)
endfunction()

# Sets `error` to why nccl.h at `header` does not match the NCCL the
# manifest at `manifest` records ("nvidia-nccl-cu13 2.28.9 ..."), or to ""
# when they match. A manifest without an NCCL line (a LibTorch from
# elsewhere) gives "" and a status message.
function(mnemo_nccl_version_error header manifest error)
  mnemo_nccl_header_version("${header}" _header_v)
  if(_header_v STREQUAL "")
    set(${error} "${header} defines no NCCL_MAJOR/MINOR/PATCH" PARENT_SCOPE)
    return()
  endif()
  set(_wheel_v "")
  if(EXISTS "${manifest}")
    file(STRINGS "${manifest}" _lines REGEX "^nvidia-nccl-cu[0-9]+ ")
    foreach(_l ${_lines})
      if(_l MATCHES "^nvidia-nccl-cu[0-9]+ ([0-9.]+)")
        set(_wheel_v "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endif()
  if(_wheel_v STREQUAL "")
    message(STATUS "NCCL: nccl.h ${_header_v}; ${manifest} names no NCCL "
      "to compare with")
    set(${error} "" PARENT_SCOPE)
  elseif(NOT _wheel_v VERSION_EQUAL _header_v)
    string(CONCAT _e "${header} is NCCL ${_header_v}, but LibTorch loads "
      "NCCL ${_wheel_v} (${manifest}): ProcessGroupNCCL would be compiled "
      "against another NCCL than the one it runs with. Point "
      "-DMNEMO_CUDA_HOME at a toolkit whose nccl.h is ${_wheel_v} (or "
      "install that NCCL's headers there)")
    set(${error} "${_e}" PARENT_SCOPE)
  else()
    set(${error} "" PARENT_SCOPE)
  endif()
endfunction()
