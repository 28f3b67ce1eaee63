# Hostile inputs: every malformed checkpoint and scenario file of tests/data/hostile/ must make the
# CLI exit 2 within 60 s, with a message that names the file and the problem (no crash, no hang).
# One ctest per row of tests/data/hostile/EXPECTED.tsv, named hostile.<file>:
#   *.safetensors        graphcheck inspect FILE
#   *.yaml, directories  graphcheck run FILE --report-dir DIR
# Rows whose origin is `generated` (too large for git: 100k-deep YAML, a 1 MiB scenario, a 200k-tensor
# header) are written first by the hostile.generate test (make_corpus.py --generated); rows whose
# origin is `special:KIND` (a FIFO, a directory, /dev/zero) are made by the test itself.
#
# include() it from tests/CMakeLists.txt after GC (the graphcheck binary, $<TARGET_FILE:graphcheck>)
# and E2E (a scratch folder) are set; GRAPHCHECK_PYTHON, when set, runs make_corpus.py (else
# python3 from PATH; without either the generated rows are left out).
#
# The same file, run as a script with -DHOSTILE_CASE=<file>, runs one row.

if(DEFINED HOSTILE_CASE)
  # ---- script mode: one row -------------------------------------------------------------------
  file(STRINGS "${HOSTILE_DIR}/EXPECTED.tsv" _rows ENCODING UTF-8)
  set(_found FALSE)
  foreach(_row IN LISTS _rows)
    if(_row MATCHES "^#" OR _row STREQUAL "")
      continue()
    endif()
    string(REPLACE "\t" ";" _fields "${_row}")
    list(GET _fields 0 _name)
    if(_name STREQUAL HOSTILE_CASE)
      list(GET _fields 1 _expect_rc)
      list(GET _fields 2 _expect_out)
      list(GET _fields 3 _origin)
      set(_found TRUE)
      break()
    endif()
  endforeach()
  if(NOT _found)
    message(FATAL_ERROR "${HOSTILE_CASE}: no such row in ${HOSTILE_DIR}/EXPECTED.tsv")
  endif()

  set(_work "${HOSTILE_WORK}/${HOSTILE_CASE}")
  file(REMOVE_RECURSE "${_work}")
  file(MAKE_DIRECTORY "${_work}")
  if(_origin STREQUAL "tree")
    set(_input "${HOSTILE_DIR}/${_name}")
  elseif(_origin STREQUAL "generated")
    set(_input "${HOSTILE_WORK}/generated/${_name}")
    if(NOT EXISTS "${_input}")
      message(FATAL_ERROR "${_input} is missing: the hostile.generate test writes it")
    endif()
  elseif(_origin STREQUAL "special:fifo")
    set(_input "${_work}/${_name}")
    execute_process(COMMAND mkfifo "${_input}" RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "mkfifo ${_input} failed: ${_rc}")
    endif()
  elseif(_origin STREQUAL "special:directory")
    set(_input "${_work}/${_name}")
    file(MAKE_DIRECTORY "${_input}")
  elseif(_origin STREQUAL "special:fifo-in-directory")
    set(_input "${_work}/${_name}")
    file(MAKE_DIRECTORY "${_input}")
    execute_process(COMMAND mkfifo "${_input}/inner.yaml" RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "mkfifo ${_input}/inner.yaml failed: ${_rc}")
    endif()
  elseif(_origin STREQUAL "special:device")
    set(_input "/dev/zero")
  else()
    message(FATAL_ERROR "${_name}: unknown origin '${_origin}' in EXPECTED.tsv")
  endif()

  if(_name MATCHES "\\.safetensors$")
    set(_args inspect "${_input}")
  else()
    set(_args run "${_input}" --report-dir "${_work}/report")
  endif()
  # The ctest TIMEOUT (60 s) is the backstop; this one names the case.
  execute_process(COMMAND "${GC}" ${_args} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                  ERROR_VARIABLE _err TIMEOUT 50)
  message("${_out}${_err}")
  if(NOT _rc STREQUAL _expect_rc)
    message(FATAL_ERROR "graphcheck ${_args}: exit code '${_rc}', expected ${_expect_rc}")
  endif()
  foreach(_needle IN ITEMS "${_expect_out}" "${_input}")
    string(FIND "${_out}${_err}" "${_needle}" _pos)
    if(_pos EQUAL -1)
      message(FATAL_ERROR "graphcheck ${_args}: output lacks '${_needle}'")
    endif()
  endforeach()
  return()
endif()

# ---- configure mode: one test per row ---------------------------------------------------------
if(NOT DEFINED GC OR NOT DEFINED E2E)
  message(FATAL_ERROR "hostile.cmake: set GC (the graphcheck binary) and E2E (a scratch folder) first")
endif()
set(_gc_hostile_dir "${CMAKE_CURRENT_LIST_DIR}/data/hostile")
set(_gc_hostile_work "${E2E}/hostile")
set(_gc_hostile_python "${GRAPHCHECK_PYTHON}")
if(NOT _gc_hostile_python)
  find_program(_gc_hostile_python_found python3)
  if(_gc_hostile_python_found)
    set(_gc_hostile_python "${_gc_hostile_python_found}")
  endif()
endif()
if(_gc_hostile_python)
  add_test(NAME hostile.generate
           COMMAND "${_gc_hostile_python}" "${_gc_hostile_dir}/make_corpus.py" --generated
                   "${_gc_hostile_work}/generated")
  set_tests_properties(hostile.generate PROPERTIES FIXTURES_SETUP hostile_generated TIMEOUT 60)
else()
  message(STATUS "hostile.cmake: no python3, so the generated hostile inputs are not tested")
endif()

file(STRINGS "${_gc_hostile_dir}/EXPECTED.tsv" _gc_hostile_rows ENCODING UTF-8)
foreach(_gc_row IN LISTS _gc_hostile_rows)
  if(_gc_row MATCHES "^#" OR _gc_row STREQUAL "")
    continue()
  endif()
  string(REPLACE "\t" ";" _gc_fields "${_gc_row}")
  list(GET _gc_fields 0 _gc_name)
  list(GET _gc_fields 3 _gc_origin)
  if(_gc_origin STREQUAL "generated" AND NOT _gc_hostile_python)
    continue()
  endif()
  add_test(NAME hostile.${_gc_name}
           COMMAND ${CMAKE_COMMAND} "-DGC=${GC}" "-DHOSTILE_CASE=${_gc_name}"
                   "-DHOSTILE_DIR=${_gc_hostile_dir}" "-DHOSTILE_WORK=${_gc_hostile_work}"
                   -P "${CMAKE_CURRENT_LIST_FILE}")
  set_tests_properties(hostile.${_gc_name} PROPERTIES TIMEOUT 60)
  if(_gc_origin STREQUAL "generated")
    set_tests_properties(hostile.${_gc_name} PROPERTIES FIXTURES_REQUIRED hostile_generated)
  endif()
endforeach()
