# Finds libtorch. Order: what the user points to (Torch_DIR / CMAKE_PREFIX_PATH), then the
# virtual environment that ci/setup.sh creates (GRAPHCHECK_VENV, default ~/.cache/graphcheck/venv),
# then any python3 on PATH that has torch. The PyPI wheel ships TorchConfig.cmake under
# torch.utils.cmake_prefix_path.
macro(graphcheck_find_torch)
  set(_gc_venv "$ENV{GRAPHCHECK_VENV}")
  if(NOT _gc_venv)
    set(_gc_venv "$ENV{HOME}/.cache/graphcheck/venv")
  endif()
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    set(_gc_pythons "${_gc_venv}/bin/python")
    # pip install ./python (scikit-build-core): the torch of the interpreter that builds.
    if(SKBUILD AND Python_EXECUTABLE)
      list(PREPEND _gc_pythons "${Python_EXECUTABLE}")
    endif()
    find_program(_gc_system_python python3)
    if(_gc_system_python)
      list(APPEND _gc_pythons "${_gc_system_python}")
    endif()
    foreach(_gc_py IN LISTS _gc_pythons)
      if(EXISTS "${_gc_py}" AND NOT Torch_FOUND)
        execute_process(
          COMMAND "${_gc_py}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
          OUTPUT_VARIABLE _gc_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
          RESULT_VARIABLE _gc_rc ERROR_QUIET)
        if(_gc_rc EQUAL 0 AND _gc_prefix)
          list(APPEND CMAKE_PREFIX_PATH "${_gc_prefix}")
          find_package(Torch QUIET)
          if(Torch_FOUND)
            set(GRAPHCHECK_PYTHON "${_gc_py}" CACHE FILEPATH "Python with torch (tests use it)")
          endif()
        endif()
      endif()
    endforeach()
  endif()
  if(NOT Torch_FOUND)
    message(FATAL_ERROR
      "graphcheck needs libtorch 2.4 or newer and found none. Run `bash ci/setup.sh` (installs "
      "torch into ~/.cache/graphcheck/venv), or point CMake at an existing libtorch with "
      "-DTorch_DIR=/path/to/libtorch/share/cmake/Torch.")
  endif()
  if(Torch_VERSION VERSION_LESS 2.4)
    message(FATAL_ERROR "graphcheck needs libtorch 2.4 or newer; ${Torch_DIR} is ${Torch_VERSION}")
  endif()
  if(NOT GRAPHCHECK_PYTHON AND EXISTS "${_gc_venv}/bin/python")
    set(GRAPHCHECK_PYTHON "${_gc_venv}/bin/python" CACHE FILEPATH "Python for interop tests")
  endif()
endmacro()
