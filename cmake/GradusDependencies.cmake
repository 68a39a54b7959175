# Third-party libraries, all from the distribution (Debian package names in README.md).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(Threads REQUIRED)  # gradus::monitor's sampling thread

# OpenBLAS, the OpenMP build, so its threads and gradus's share one OpenMP pool.
# GRADUS_DEPS_ROOT: a directory the Debian packages were unpacked into (`dpkg -x`), searched first;
# scripts/gpu_check.sh builds this way on machines where nothing can be installed.
set(GRADUS_DEPS_ROOT "" CACHE PATH "Root of unpacked Debian packages to search first (optional)")
find_path(GRADUS_OPENBLAS_INCLUDE_DIR cblas.h
  HINTS ${GRADUS_DEPS_ROOT}/usr/include/x86_64-linux-gnu/openblas-openmp
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
        /usr/include/openblas /usr/include
  NO_DEFAULT_PATH)
find_library(GRADUS_OPENBLAS_LIBRARY NAMES openblas
  HINTS ${GRADUS_DEPS_ROOT}/usr/lib/x86_64-linux-gnu/openblas-openmp
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
if(NOT GRADUS_OPENBLAS_INCLUDE_DIR OR NOT GRADUS_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: install Debian's libopenblas-openmp-dev")
endif()
if(NOT TARGET gradus_openblas)
  add_library(gradus_openblas INTERFACE)
  target_include_directories(gradus_openblas SYSTEM INTERFACE ${GRADUS_OPENBLAS_INCLUDE_DIR})
  target_link_libraries(gradus_openblas INTERFACE ${GRADUS_OPENBLAS_LIBRARY})
endif()
message(STATUS "gradus: OpenBLAS ${GRADUS_OPENBLAS_LIBRARY}")

# oneDNN (Debian's libdnnl-dev): bf16 GEMMs on the CPU's bf16 instructions
# (src/backend/cpu/onednn_gemm.cpp). Optional: without it bf16 GEMMs convert to float32 and use
# OpenBLAS, as they do on CPUs without those instructions.
# Debian's oneDNN is built with an OpenCL GPU runtime, and its CMake package requires OpenCL's
# headers (ocl-icd-opencl-dev, only recommended by libdnnl-dev) or fails the configure outright:
# without them gradus builds without oneDNN and says why.
find_package(OpenCL QUIET)
if(OpenCL_FOUND)
  find_package(dnnl CONFIG QUIET HINTS ${GRADUS_DEPS_ROOT}/usr/lib/x86_64-linux-gnu/cmake/dnnl)
endif()
if(dnnl_FOUND)
  message(STATUS "gradus: oneDNN ${dnnl_VERSION}")
else()
  message(STATUS "gradus: oneDNN not found (Debian's libdnnl-dev and ocl-icd-opencl-dev, which "
                 "its CMake package needs): bf16 GEMMs convert to float32")
endif()

# MPI (OpenMPI from Debian's libopenmpi-dev): processes, launch and CPU collectives of gradus::dist.
# Only the C API is used.
find_package(MPI REQUIRED COMPONENTS C)
