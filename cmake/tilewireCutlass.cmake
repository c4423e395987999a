# Locate the CUTLASS / CuTe headers of the pinned PyPI wheel nvidia-cutlass==4.2.0.0 (headers only;
# scripts/setup.sh installs it under build-deps/ and records TILEWIRE_CUTLASS_INCLUDE).
# Search order: -DTILEWIRE_CUTLASS_INCLUDE, $TILEWIRE_CUTLASS_INCLUDE, then the cutlass_library
# module that python3 imports (site-packages/cutlass_library/source/include).
# Defines the imported INTERFACE target tilewire::cutlass and TILEWIRE_CUTLASS_VERSION (4.2.0).
if(TARGET tilewire::cutlass)
  return()
endif()

set(_tw_cutlass_pip "python3 -m pip install --no-deps --target build-deps/cutlass-4.2.0.0 nvidia-cutlass==4.2.0.0")
set(_tw_cutlass_candidates)
if(DEFINED TILEWIRE_CUTLASS_INCLUDE AND NOT "${TILEWIRE_CUTLASS_INCLUDE}" STREQUAL "")
  list(APPEND _tw_cutlass_candidates "${TILEWIRE_CUTLASS_INCLUDE}")
endif()
if(DEFINED ENV{TILEWIRE_CUTLASS_INCLUDE} AND NOT "$ENV{TILEWIRE_CUTLASS_INCLUDE}" STREQUAL "")
  list(APPEND _tw_cutlass_candidates "$ENV{TILEWIRE_CUTLASS_INCLUDE}")
endif()
if(NOT _tw_cutlass_candidates)
  find_program(_tw_python3 python3)
  if(_tw_python3)
    execute_process(
      COMMAND "${_tw_python3}" -c
        "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
      OUTPUT_VARIABLE _tw_cutlass_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _tw_cutlass_rc)
    if(_tw_cutlass_rc EQUAL 0 AND NOT "${_tw_cutlass_py}" STREQUAL "")
      list(APPEND _tw_cutlass_candidates "${_tw_cutlass_py}")
    endif()
  endif()
endif()

set(_tw_cutlass_inc "")
foreach(_c ${_tw_cutlass_candidates})
  if(EXISTS "${_c}/cutlass/version.h" AND EXISTS "${_c}/cute/tensor.hpp")
    set(_tw_cutlass_inc "${_c}")
    break()
  endif()
endforeach()
if(NOT _tw_cutlass_inc)
  message(FATAL_ERROR "tilewire: CUTLASS headers not found (looked in: ${_tw_cutlass_candidates}). "
                      "Run scripts/setup.sh, or: ${_tw_cutlass_pip} and set TILEWIRE_CUTLASS_INCLUDE to "
                      "build-deps/cutlass-4.2.0.0/cutlass_library/source/include.")
endif()

file(STRINGS "${_tw_cutlass_inc}/cutlass/version.h" _tw_cutlass_defs REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) ")
foreach(_d ${_tw_cutlass_defs})
  if(_d MATCHES "^#define CUTLASS_(MAJOR|MINOR|PATCH) +([0-9]+)")
    set(_tw_cutlass_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
  endif()
endforeach()
set(TILEWIRE_CUTLASS_VERSION "${_tw_cutlass_MAJOR}.${_tw_cutlass_MINOR}.${_tw_cutlass_PATCH}")
if(NOT TILEWIRE_CUTLASS_VERSION MATCHES "^4\\.2\\.")
  message(FATAL_ERROR "tilewire: CUTLASS at ${_tw_cutlass_inc} is ${TILEWIRE_CUTLASS_VERSION}; tilewire pins 4.2 "
                      "(${_tw_cutlass_pip}).")
endif()
set(TILEWIRE_CUTLASS_INCLUDE_DIR "${_tw_cutlass_inc}" CACHE PATH "CUTLASS/CuTe include dir" FORCE)
message(STATUS "tilewire: CUTLASS ${TILEWIRE_CUTLASS_VERSION} headers ${TILEWIRE_CUTLASS_INCLUDE_DIR}")

add_library(tilewire::cutlass INTERFACE IMPORTED)
# SYSTEM: CUTLASS's own warnings are not tilewire's. 2908 ("implicit capture of this is deprecated"
# in CUTLASS's sm100 collectives, C++20) fills every log otherwise.
set_target_properties(tilewire::cutlass PROPERTIES
  INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${TILEWIRE_CUTLASS_INCLUDE_DIR}"
  INTERFACE_INCLUDE_DIRECTORIES "${TILEWIRE_CUTLASS_INCLUDE_DIR}"
  INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:-diag-suppress=2908>")
