# Runs the graphcheck CLI and checks its exit code and that its output contains each of
# EXPECT_OUT (a ;-list); with EXPECT_FILE, that the file exists and holds each of EXPECT_FILE_TEXT
# (a ;-list). Used by the e2e.* tests.
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
if(MAKE_TRUNCATED)
  # A valid checkpoint cut in half, and a scenario that loads it.
  execute_process(COMMAND "${GC}" run "${SOURCE_DIR}/data/tiny_dsv4.yaml" --report-dir "${WORKDIR}/gen"
                  OUTPUT_QUIET ERROR_QUIET)
  # Keep the first half of the bytes.
  find_program(PY python3 REQUIRED)
  execute_process(COMMAND "${PY}" -c "import sys;d=open(sys.argv[1],'rb').read();open(sys.argv[2],'wb').write(d[:len(d)//2])"
                  "${WORKDIR}/gen/work/tiny-dsv4/seed-1.safetensors" "${WORKDIR}/truncated.safetensors"
                  RESULT_VARIABLE py_rc)
  if(NOT py_rc EQUAL 0)
    message(FATAL_ERROR "could not write the truncated checkpoint")
  endif()
  file(READ "${SOURCE_DIR}/data/tiny_dsv4.yaml" yaml)
  file(WRITE "${WORKDIR}/truncated_checkpoint.yaml" "${yaml}checkpoint: truncated.safetensors\n")
endif()
execute_process(COMMAND "${GC}" ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "graphcheck ${ARGS}: exit code ${rc}, expected ${EXPECT_RC}")
endif()
foreach(needle IN LISTS EXPECT_OUT)
  string(FIND "${out}${err}" "${needle}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "graphcheck ${ARGS}: output lacks '${needle}'")
  endif()
endforeach()
if(DEFINED EXPECT_FILE)
  if(NOT EXISTS "${EXPECT_FILE}")
    message(FATAL_ERROR "graphcheck ${ARGS}: wrote no ${EXPECT_FILE}")
  endif()
  file(READ "${EXPECT_FILE}" written)
  foreach(needle IN LISTS EXPECT_FILE_TEXT)
    string(FIND "${written}" "${needle}" pos)
    if(pos EQUAL -1)
      message(FATAL_ERROR "${EXPECT_FILE} lacks '${needle}': it holds\n${written}")
    endif()
  endforeach()
endif()
