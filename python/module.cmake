# The Python package's extension module, fpgather._fpgather, over the public API (fpgather::fpgather).
# Included by python/CMakeLists.txt (the wheel, through scikit-build-core) and by the top-level build,
# which puts the module and the package's Python files in <build>/python so that the tests import the
# package straight from the build tree.
#
# fpg_find_nanobind(PYTHON): nanobind's CMake package through the interpreter PYTHON, and Python's
# development headers; sets FPGATHER_NANOBIND_FOUND.
# A macro: Python's and nanobind's variables (include directories, flags) must be those of the
# directory that adds the module.
macro(fpg_find_nanobind python)
  set(FPGATHER_NANOBIND_FOUND OFF)
  if(NOT TARGET Python::Module)
    set(Python_EXECUTABLE ${python})
    find_package(Python 3.8 COMPONENTS Interpreter Development.Module QUIET)
  endif()
  if(TARGET Python::Module AND NOT nanobind_DIR)
    execute_process(COMMAND ${python} -m nanobind --cmake_dir OUTPUT_VARIABLE _fpg_nanobind_dir
                    OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _fpg_nanobind_rc ERROR_QUIET)
    if(_fpg_nanobind_rc EQUAL 0)
      set(nanobind_DIR ${_fpg_nanobind_dir} CACHE PATH "nanobind's CMake package" FORCE)
    endif()
  endif()
  if(TARGET Python::Module AND nanobind_DIR)
    find_package(nanobind CONFIG QUIET)
    if(nanobind_FOUND)
      set(FPGATHER_NANOBIND_FOUND ON)
    endif()
  endif()
endmacro()

set(FPGATHER_PYTHON_SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR})

# fpg_add_python_module(OUTPUT_DIR): the target _fpgather, its library written to OUTPUT_DIR.
# NB_STATIC: nanobind's runtime linked in, so the module is one file. The library's error types
# cross the module boundary by value only (fpgather::Error is caught inside the module).
function(fpg_add_python_module output_dir)
  nanobind_add_module(_fpgather NB_STATIC ${FPGATHER_PYTHON_SOURCE_DIR}/src/fpgather_ext.cpp)
  target_link_libraries(_fpgather PRIVATE fpgather::fpgather)
  target_compile_options(_fpgather PRIVATE -Wall -Wextra)
  set_target_properties(_fpgather PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${output_dir})
endfunction()
