# Locate NCCL and insist on the device API of 2.28.9 or newer.
# Search order: -DTILEWIRE_NCCL_ROOT, $TILEWIRE_NCCL_ROOT, -DNCCL_ROOT, $NCCL_ROOT, the CUDA toolkit.
# Defines the imported target tilewire::nccl and TILEWIRE_NCCL_VERSION (e.g. 2.28.9).
if(TARGET tilewire::nccl)
  return()
endif()

set(_tw_nccl_hints)
foreach(_v TILEWIRE_NCCL_ROOT NCCL_ROOT)
  if(DEFINED ${_v} AND NOT "${${_v}}" STREQUAL "")
    list(APPEND _tw_nccl_hints "${${_v}}")
  endif()
  if(DEFINED ENV{${_v}} AND NOT "$ENV{${_v}}" STREQUAL "")
    list(APPEND _tw_nccl_hints "$ENV{${_v}}")
  endif()
endforeach()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _tw_nccl_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()

find_path(TILEWIRE_NCCL_INCLUDE_DIR nccl.h
  HINTS ${_tw_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(TILEWIRE_NCCL_INCLUDE_DIR nccl.h)
find_library(TILEWIRE_NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${_tw_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
find_library(TILEWIRE_NCCL_LIBRARY NAMES nccl libnccl.so.2)

if(NOT TILEWIRE_NCCL_INCLUDE_DIR OR NOT TILEWIRE_NCCL_LIBRARY)
  message(FATAL_ERROR "tilewire: NCCL not found. Install NCCL >= 2.28.9 (pip install nvidia-nccl-cu13==2.28.9) "
                      "and point TILEWIRE_NCCL_ROOT (or NCCL_ROOT) at the folder holding include/nccl.h and lib/libnccl.so.2.")
endif()

file(STRINGS "${TILEWIRE_NCCL_INCLUDE_DIR}/nccl.h" _tw_nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
foreach(_d ${_tw_nccl_defs})
  if(_d MATCHES "^#define NCCL_(MAJOR|MINOR|PATCH) +([0-9]+)")
    set(_tw_nccl_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
  endif()
endforeach()
set(TILEWIRE_NCCL_VERSION "${_tw_nccl_MAJOR}.${_tw_nccl_MINOR}.${_tw_nccl_PATCH}")
if(TILEWIRE_NCCL_VERSION VERSION_LESS 2.28.9 OR NOT EXISTS "${TILEWIRE_NCCL_INCLUDE_DIR}/nccl_device.h")
  message(FATAL_ERROR "tilewire: NCCL headers at ${TILEWIRE_NCCL_INCLUDE_DIR} are ${TILEWIRE_NCCL_VERSION}; "
                      "tilewire needs the NCCL device API of 2.28.9 or newer. "
                      "pip install nvidia-nccl-cu13==2.28.9 and set TILEWIRE_NCCL_ROOT to site-packages/nvidia/nccl.")
endif()
message(STATUS "tilewire: NCCL ${TILEWIRE_NCCL_VERSION} headers ${TILEWIRE_NCCL_INCLUDE_DIR}, library ${TILEWIRE_NCCL_LIBRARY}")

add_library(tilewire::nccl INTERFACE IMPORTED)
set_target_properties(tilewire::nccl PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${TILEWIRE_NCCL_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${TILEWIRE_NCCL_LIBRARY}")
