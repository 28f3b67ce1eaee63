# The CUDA half of finding libtorch (a CUDA build of the PyTorch wheel), and what the CUDA code of
# graphcheck needs from it. Two macros around graphcheck_find_torch():
#
#   graphcheck_torch_cuda_hints()   before it: the hints torch's CUDA discovery needs on a machine
#                                   without a GPU (see below)
#   graphcheck_torch_cuda_setup()   after it: GRAPHCHECK_HAS_CUDA, the CUDA architectures again,
#                                   CUPTI, and graphcheck_torch_cuda (an INTERFACE target with the
#                                   headers ATen/cuda/CUDAContext.h needs)
#
# Facts about a CUDA wheel on a machine without a GPU (issue 14): torch's cmake/public/cuda.cmake
# looks for the toolkit through CUDA_TOOLKIT_ROOT_DIR (a /usr/local/bin/nvcc wrapper script
# cannot lead it there) and for libnvrtc through CUDA_nvrtc_LIBRARY (the wheel carries it in
# nvidia/cu13/lib); without a GPU it compiles for 11 architectures and sets
# CMAKE_CUDA_ARCHITECTURES OFF unless TORCH_CUDA_ARCH_LIST is set first; ATen/cuda/CUDAContext.h
# includes cuBLAS, cuSPARSE and cuSOLVER headers, which a minimal toolkit lacks and the wheel's
# nvidia/cu13/include has; and CMake links CUDA code with cudart_static by default, a second
# CUDA runtime in a process beside libtorch's (CMAKE_CUDA_RUNTIME_LIBRARY Shared).

set(GRAPHCHECK_CUDA_ARCHITECTURES 90 CACHE STRING
    "CUDA architectures graphcheck's CUDA code is built for (90: H100/H200)")

macro(graphcheck_torch_cuda_hints)
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(_gc_arch_list "")
    foreach(_gc_arch IN LISTS GRAPHCHECK_CUDA_ARCHITECTURES)
      string(REGEX REPLACE "^([0-9]+)([0-9])[a-z]?$" "\\1.\\2" _gc_arch_dotted "${_gc_arch}")
      list(APPEND _gc_arch_list "${_gc_arch_dotted}")
    endforeach()
    set(TORCH_CUDA_ARCH_LIST "${_gc_arch_list}")
  endif()
  if(NOT DEFINED CUDA_TOOLKIT_ROOT_DIR)
    if(DEFINED ENV{CUDA_HOME} AND EXISTS "$ENV{CUDA_HOME}/bin/nvcc")
      set(CUDA_TOOLKIT_ROOT_DIR "$ENV{CUDA_HOME}")
    elseif(EXISTS /usr/local/cuda/bin/nvcc)
      set(CUDA_TOOLKIT_ROOT_DIR /usr/local/cuda)
    endif()
  endif()
endmacro()

macro(graphcheck_torch_cuda_setup)
  set(GRAPHCHECK_HAS_CUDA 0)
  set(GRAPHCHECK_HAS_CUPTI 0)
  set(_gc_torch_cuda FALSE)
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(_gc_torch_cuda TRUE)
  endif()
  if(NOT GRAPHCHECK_CUDA STREQUAL "OFF" AND _gc_torch_cuda)
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      enable_language(CUDA)
      find_package(CUDAToolkit REQUIRED)
      set(GRAPHCHECK_HAS_CUDA 1)
    elseif(GRAPHCHECK_CUDA STREQUAL "ON")
      message(FATAL_ERROR "GRAPHCHECK_CUDA=ON: libtorch has CUDA but no CUDA compiler (nvcc) was "
                          "found: put nvcc on PATH or set CUDA_TOOLKIT_ROOT_DIR")
    endif()
  elseif(GRAPHCHECK_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GRAPHCHECK_CUDA=ON but the libtorch found (${Torch_DIR}) has no CUDA: "
                        "point Torch_DIR at a CUDA build of libtorch (bash ci/cuda-build.sh "
                        "installs one), or use GRAPHCHECK_CUDA=AUTO")
  endif()
  if(GRAPHCHECK_HAS_CUDA)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    # torch set CMAKE_CUDA_ARCHITECTURES OFF and put its gencode flags in CMAKE_CUDA_FLAGS.
    set(CMAKE_CUDA_ARCHITECTURES ${GRAPHCHECK_CUDA_ARCHITECTURES})
    string(REGEX REPLACE "-gencode[ =]arch=[^ ]+" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
    # The cuBLAS / cuSPARSE / cuSOLVER headers: the toolkit's, else the wheel's (beside nvrtc).
    add_library(graphcheck_torch_cuda INTERFACE)
    set(_gc_blas_dirs "${CUDAToolkit_INCLUDE_DIRS}")
    foreach(_gc_lib IN ITEMS "${CUDA_nvrtc_LIBRARY}" "${CUDA_NVRTC_LIB}")
      if(_gc_lib)
        get_filename_component(_gc_dir "${_gc_lib}" DIRECTORY)
        list(APPEND _gc_blas_dirs "${_gc_dir}/../include")
      endif()
    endforeach()
    find_path(GRAPHCHECK_CUBLAS_INCLUDE_DIR cublas_v2.h HINTS ${_gc_blas_dirs} NO_DEFAULT_PATH)
    if(NOT GRAPHCHECK_CUBLAS_INCLUDE_DIR)
      message(FATAL_ERROR "graphcheck's CUDA code includes ATen/cuda/CUDAContext.h, which needs "
                          "cublas_v2.h; found neither in the toolkit (${CUDAToolkit_INCLUDE_DIRS}) "
                          "nor beside libnvrtc (${CUDA_nvrtc_LIBRARY}): set "
                          "GRAPHCHECK_CUBLAS_INCLUDE_DIR to the wheel's nvidia/cu13/include")
    endif()
    # AFTER the toolkit's own include directory, so that its cuda_runtime.h wins.
    target_include_directories(graphcheck_torch_cuda SYSTEM INTERFACE
                               ${CUDAToolkit_INCLUDE_DIRS} ${GRAPHCHECK_CUBLAS_INCLUDE_DIR})
    target_link_libraries(graphcheck_torch_cuda INTERFACE CUDA::cudart)
    if(NOT GRAPHCHECK_CUPTI STREQUAL "OFF")
      if(TARGET CUDA::cupti)
        set(GRAPHCHECK_HAS_CUPTI 1)
      elseif(GRAPHCHECK_CUPTI STREQUAL "ON")
        message(FATAL_ERROR "GRAPHCHECK_CUPTI=ON but CUPTI was not found in the CUDA toolkit "
                            "(${CUDAToolkit_LIBRARY_DIR}): install the toolkit's CUPTI, or use "
                            "GRAPHCHECK_CUPTI=AUTO")
      endif()
    endif()
  endif()
endmacro()
