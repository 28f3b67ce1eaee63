# graphcheck_add_models(TARGET SOURCES...): builds the models in SOURCES as a plugin, a shared
# library the stock CLI loads with `graphcheck run --plugin $<TARGET_FILE:TARGET>` (or
# GRAPHCHECK_PLUGIN_PATH). Every source is compiled into the library itself, never through a
# static archive, which would drop the objects nothing references and their
# GRAPHCHECK_REGISTER_* lines with them.
function(graphcheck_add_models target)
  if(NOT ARGN)
    message(FATAL_ERROR "graphcheck_add_models(${target}): give the sources that register the models")
  endif()
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE graphcheck::harness)
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
endfunction()
