# GEMM library selection. MC_BLAS picks the library that backs the CPU GEMM kernel
# (src/backend/cpu/kernels/gemm_blas.c). See docs/gemm.md for the measurements behind the default.
#   openblas : Debian libopenblas (pthread build, DYNAMIC_ARCH; AVX-512 kernels forced on
#              AVX-512 CPUs it does not recognise, see gemm_blas.c)
#   blis     : Debian libblis (OpenMP build, shares the OpenMP thread pool)
#   onednn   : Debian libdnnl (dnnl_sgemm, OpenMP runtime, JIT kernels)
set(MC_BLAS "onednn" CACHE STRING "GEMM library: openblas | blis | onednn")
set_property(CACHE MC_BLAS PROPERTY STRINGS openblas blis onednn)
if(MC_BLAS STREQUAL "openblas")
  pkg_check_modules(MC_BLAS_PC REQUIRED openblas)
  set(MC_BLAS_LIBRARIES ${MC_BLAS_PC_LINK_LIBRARIES})
  set(MC_BLAS_INCLUDE_DIRS ${MC_BLAS_PC_INCLUDE_DIRS})
  set(MC_BLAS_DEFINITIONS MC_BLAS_OPENBLAS=1)
elseif(MC_BLAS STREQUAL "blis")
  # Prefer the OpenMP build so BLIS shares the OpenMP thread pool with our kernels.
  find_library(MC_BLIS_LIB NAMES blis-openmp blis
               PATHS /usr/lib/x86_64-linux-gnu/blis-openmp NO_DEFAULT_PATH)
  find_library(MC_BLIS_LIB NAMES blis-openmp blis REQUIRED)
  find_path(MC_BLIS_INC blis.h PATHS /usr/include/x86_64-linux-gnu/blis-openmp
            PATH_SUFFIXES blis REQUIRED)
  set(MC_BLAS_LIBRARIES ${MC_BLIS_LIB})
  set(MC_BLAS_INCLUDE_DIRS ${MC_BLIS_INC})
  set(MC_BLAS_DEFINITIONS MC_BLAS_BLIS=1)
elseif(MC_BLAS STREQUAL "onednn")
  find_library(MC_DNNL_LIB NAMES dnnl REQUIRED)
  find_path(MC_DNNL_INC oneapi/dnnl/dnnl.h REQUIRED)
  set(MC_BLAS_LIBRARIES ${MC_DNNL_LIB})
  set(MC_BLAS_INCLUDE_DIRS ${MC_DNNL_INC})
  set(MC_BLAS_DEFINITIONS MC_BLAS_ONEDNN=1)
else()
  message(FATAL_ERROR "MC_BLAS=${MC_BLAS}: expected openblas, blis or onednn")
endif()
message(STATUS "megatron.c GEMM library: ${MC_BLAS} (${MC_BLAS_LIBRARIES})")
