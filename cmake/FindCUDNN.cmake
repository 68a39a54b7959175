# FindCUDNN: locates cuDNN (9.x) next to the CUDA toolkit or in the system prefix.
#
# Sets CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_VERSION and an imported target
# CUDNN::cudnn. Hints: CUDNN_ROOT (cache or environment), CUDAToolkit_LIBRARY_ROOT.
include(FindPackageHandleStandardArgs)

set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH} ${CUDAToolkit_LIBRARY_ROOT}
  ${CUDAToolkit_TARGET_DIR} /usr/local/cuda /usr)
# The nvidia-cudnn wheel that ships with PyTorch (site-packages/nvidia/cudnn/{include,lib}).
find_program(_cudnn_python NAMES python3 python)
if(_cudnn_python)
  execute_process(
    COMMAND ${_cudnn_python} -c
      "import glob, site, os; print(';'.join(d for b in site.getsitepackages() for d in glob.glob(os.path.join(b, 'nvidia', 'cudnn'))))"
    OUTPUT_VARIABLE _cudnn_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(APPEND _cudnn_hints ${_cudnn_wheel})
endif()
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${_cudnn_hints}
  PATH_SUFFIXES include include/x86_64-linux-gnu include/aarch64-linux-gnu)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
  HINTS ${_cudnn_hints}
  PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu lib/aarch64-linux-gnu)

set(CUDNN_VERSION "")
if(CUDNN_INCLUDE_DIR)
  set(_cudnn_version_header ${CUDNN_INCLUDE_DIR}/cudnn_version.h)
  if(NOT EXISTS ${_cudnn_version_header})
    set(_cudnn_version_header ${CUDNN_INCLUDE_DIR}/cudnn.h)
  endif()
  file(STRINGS ${_cudnn_version_header} _cudnn_defines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  foreach(part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${part} +([0-9]+)" _m "${_cudnn_defines}")
    set(_cudnn_${part} ${CMAKE_MATCH_1})
  endforeach()
  if(_cudnn_MAJOR)
    set(CUDNN_VERSION "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
  endif()
endif()

find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION)

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION ${CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY _cudnn_python)
