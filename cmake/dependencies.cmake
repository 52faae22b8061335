# Every dependency comes from the OS package manager (scripts/install_deps.sh); nothing is
# vendored or downloaded at build time. Optional ones are AUTO: used when found.
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(PkgConfig REQUIRED)

# Resolve an AUTO/ON/OFF option against whether the dependency was found.
function(rf_resolve_option option found out)
  if(${option} STREQUAL "OFF")
    set(${out} OFF PARENT_SCOPE)
  elseif(${found})
    set(${out} ON PARENT_SCOPE)
  elseif(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option} was requested but its dependency was not found")
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

pkg_check_modules(URING IMPORTED_TARGET liburing)
rf_resolve_option(RINGFOLD_WITH_URING URING_FOUND RINGFOLD_HAVE_URING)

# ibverbs is dlopen'ed at run time (transport/rdma/verbs_api.cc): only its headers are needed to
# build, and the library runs on machines without rdma-core.
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
if(IBVERBS_INCLUDE_DIR)
  set(IBVERBS_FOUND TRUE)
else()
  set(IBVERBS_FOUND FALSE)
endif()
rf_resolve_option(RINGFOLD_WITH_IBVERBS IBVERBS_FOUND RINGFOLD_HAVE_IBVERBS)

# libfabric (Debian's libfabric-dev): headers at build time; the library is dlopened by the ofi
# fabric when it is first used (transport/rdma/ofi_api.h). The six functions it calls by name are
# taken at the symbol versions a link would bind (the library's default versions, read here with
# nm), since libfabric versions them by the layout of struct fi_info in these headers.
pkg_check_modules(LIBFABRIC IMPORTED_TARGET libfabric)
rf_resolve_option(RINGFOLD_WITH_LIBFABRIC LIBFABRIC_FOUND RINGFOLD_HAVE_LIBFABRIC)
set(RINGFOLD_OFI_SYMBOL_VERSIONS "")
if(RINGFOLD_HAVE_LIBFABRIC)
  find_library(_rf_libfabric_so NAMES fabric HINTS ${LIBFABRIC_LIBRARY_DIRS})
  find_program(_rf_nm NAMES nm)
  if(_rf_libfabric_so AND _rf_nm)
    execute_process(COMMAND ${_rf_nm} -D --defined-only ${_rf_libfabric_so} OUTPUT_VARIABLE _rf_fabric_syms
                    ERROR_QUIET RESULT_VARIABLE _rf_nm_rc)
    foreach(_rf_fn getinfo dupinfo freeinfo fabric strerror tostr)
      if(_rf_nm_rc EQUAL 0 AND _rf_fabric_syms MATCHES " fi_${_rf_fn}@@([A-Za-z0-9_.]+)")
        list(APPEND RINGFOLD_OFI_SYMBOL_VERSIONS "RF_OFI_VER_${_rf_fn}=\"${CMAKE_MATCH_1}\"")
      endif()
    endforeach()
  endif()
  message(STATUS "ringfold: libfabric dlopened at run time; symbol versions: ${RINGFOLD_OFI_SYMBOL_VERSIONS}")
endif()

# CUDA: nvcc from PATH or /usr/local/cuda. Architectures: 80 and 90 as SASS plus 90 as PTX (so
# newer GPUs JIT it); RINGFOLD_CUDA_ARCHITECTURES (or CMAKE_CUDA_ARCHITECTURES) overrides.
# cudart is linked statically (kernels/CMakeLists.txt): libringfold.so never needs libcuda.
include(CheckLanguage)
set(CUDA_FOUND FALSE)
if(NOT RINGFOLD_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CUDA_FOUND TRUE)
  endif()
endif()
rf_resolve_option(RINGFOLD_WITH_CUDA CUDA_FOUND RINGFOLD_HAVE_CUDA)
if(RINGFOLD_HAVE_CUDA)
  set(RINGFOLD_CUDA_ARCHITECTURES "80-real;90-real;90-virtual" CACHE STRING
      "CUDA architectures of the kernels (CMake CUDA_ARCHITECTURES syntax)")
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${RINGFOLD_CUDA_ARCHITECTURES})
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  enable_language(CUDA)
  # CMake 3.25 has no C++20 flag for nvcc (nvcc 13 supports -std=c++20): teach it, so the
  # project's CXX_STANDARD 20 carries over to the CUDA sources.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  # pkg-config targets (liburing) carry /usr/include; passed to nvcc as -isystem it breaks
  # libstdc++'s #include_next <math.h>. It is the host compiler's own directory anyway.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  find_package(CUDAToolkit REQUIRED)
  if(CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  endif()
endif()

# The NCCL drop-ins (bindings/nccl, bindings/nccl_net) are built against NVIDIA's own nccl.h
# (the CUDA toolkit's, or RINGFOLD_NCCL_INCLUDE_DIR), so that every enum and struct they export
# is checked against it. nccl.h includes cuda_runtime.h, so the toolkit's headers must be there
# too; the CUDA runtime itself is optional (without it the library serves host memory only).
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${RINGFOLD_NCCL_INCLUDE_DIR} /usr/local/cuda/include)
find_path(CUDA_RUNTIME_INCLUDE_DIR cuda_runtime.h HINTS ${NCCL_INCLUDE_DIR} /usr/local/cuda/include)
if(NCCL_INCLUDE_DIR AND CUDA_RUNTIME_INCLUDE_DIR)
  set(NCCL_H_FOUND TRUE)
else()
  set(NCCL_H_FOUND FALSE)
endif()
rf_resolve_option(RINGFOLD_WITH_NCCL_API NCCL_H_FOUND RINGFOLD_HAVE_NCCL_API)

find_package(cxxopts CONFIG QUIET)
if(RINGFOLD_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
