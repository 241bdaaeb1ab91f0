# The layers of libfpgather (lib/ARCHITECTURE.md) and their check: a source or header of one layer
# that includes a header of a layer above it is an error naming both. The formats stand above lib/:
# they implement the seams lib/ declares (formats/registry.cpp hands them over), so no file of lib/
# includes formats/, and they reach down only as far as ckpt (FPG_LAYER_REACH): never into app or api.
# Includes are written from the include roots lib/ and the repository root ("core/error.h",
# "formats/fpckpt/reader.h", "kernels/device.h") and lib/include (<fpgather/checkpoint.h>, the public
# API), so the first path component says the layer.
# The public headers (lib/include/fpgather) include only the standard library and each other: they are
# all that is installed.
#
# Included by CMakeLists.txt, it checks when CMake configures; run as a script
# (cmake -DFPG_SOURCE_DIR=DIR -P cmake/LayerCheck.cmake) it checks again, which the build does
# whenever a source changes (target fpgather_layer_check), so an edit cannot slip an upward include in.

# Rank of each include prefix, and the folders each layer holds (checked recursively).
set(FPG_LAYER_RANK_core 0)
set(FPG_LAYER_RANK_fp8 1)
set(FPG_LAYER_RANK_optim 1)
set(FPG_LAYER_RANK_model 1)
set(FPG_LAYER_RANK_layout 1)
set(FPG_LAYER_RANK_comm 1)
set(FPG_LAYER_RANK_kernels 1)
set(FPG_LAYER_RANK_pipeline 2)
set(FPG_LAYER_RANK_ckpt 2)
set(FPG_LAYER_RANK_app 3)
set(FPG_LAYER_RANK_api 4)
set(FPG_LAYER_RANK_fpgather 4)
set(FPG_LAYER_RANK_formats 5)
set(FPG_LAYER_RANK_cmd 6)
set(FPG_LAYER_NAMES "core" "numerics (fp8, optim, model, layout, comm, kernels)" "pipeline and ckpt" "app" "api"
    "formats" "cmd")
set(FPG_LAYER_DIRS_0 lib/core)
set(FPG_LAYER_DIRS_1 lib/fp8 lib/optim lib/model lib/layout lib/comm kernels)
set(FPG_LAYER_DIRS_2 lib/pipeline lib/ckpt)
set(FPG_LAYER_DIRS_3 lib/app)
set(FPG_LAYER_DIRS_4 lib/api)
set(FPG_LAYER_DIRS_5 formats)
set(FPG_LAYER_DIRS_6 cmd)
# The highest rank a layer may include where that is below its own: the formats implement the model
# (ckpt, core and the numerics it names), not the use cases.
set(FPG_LAYER_REACH_5 2)

# Every file under the layer's folders includes nothing ranked above it (above its reach, where it has
# one); returns the files read.
function(fpg_check_layer RANK OUT_FILES)
  list(GET FPG_LAYER_NAMES ${RANK} layer_name)
  set(reach ${RANK})
  if(DEFINED FPG_LAYER_REACH_${RANK})
    set(reach ${FPG_LAYER_REACH_${RANK}})
  endif()
  set(all "")
  foreach(dir ${FPG_LAYER_DIRS_${RANK}})
    file(GLOB_RECURSE files
         ${FPG_SOURCE_DIR}/${dir}/*.h ${FPG_SOURCE_DIR}/${dir}/*.cuh
         ${FPG_SOURCE_DIR}/${dir}/*.cpp ${FPG_SOURCE_DIR}/${dir}/*.cu)
    list(APPEND all ${files})
    foreach(file ${files})
      file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+[\"<][a-z0-9_]+/")
      foreach(line ${includes})
        string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+[\"<]([a-z0-9_]+)/.*" "\\1" prefix "${line}")
        set(rank "${FPG_LAYER_RANK_${prefix}}")
        if(NOT rank STREQUAL "" AND rank GREATER reach AND NOT rank EQUAL RANK)
          list(GET FPG_LAYER_NAMES ${rank} above)
          file(RELATIVE_PATH rel ${FPG_SOURCE_DIR} ${file})
          string(STRIP "${line}" line)
          if(rank GREATER RANK)
            message(FATAL_ERROR "layering: ${rel} (layer ${layer_name}) has `${line}`, a header of a layer "
                                "above it (${above}); layers point down only, and lib/ reaches the formats "
                                "through the seams it declares (lib/ARCHITECTURE.md)")
          endif()
          message(FATAL_ERROR "layering: ${rel} (layer ${layer_name}) has `${line}`, a header of ${above}; "
                              "the formats implement the seams of ckpt and core and include nothing of the "
                              "use cases (lib/ARCHITECTURE.md)")
        endif()
      endforeach()
    endforeach()
  endforeach()
  set(${OUT_FILES} ${all} PARENT_SCOPE)
endfunction()

# Every public header includes only <fpgather/NAME.h> and standard headers (<name>, no dot, no folder);
# returns the files read.
function(fpg_check_public_headers OUT_FILES)
  file(GLOB files ${FPG_SOURCE_DIR}/lib/include/fpgather/*)
  foreach(file ${files})
    file(RELATIVE_PATH rel ${FPG_SOURCE_DIR} ${file})
    if(NOT file MATCHES "\\.h$")
      message(FATAL_ERROR "public API: ${rel} is not a header; lib/include/fpgather holds the installed headers only")
    endif()
    file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line ${includes})
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]+<(fpgather/[a-z0-9_]+\\.h|[a-z_]+)>[ \t]*(//.*)?$")
        string(STRIP "${line}" line)
        message(FATAL_ERROR "public API: ${rel} has `${line}`; public headers include only the standard "
                            "library and <fpgather/...> (lib/ARCHITECTURE.md)")
      endif()
    endforeach()
  endforeach()
  set(${OUT_FILES} ${files} PARENT_SCOPE)
endfunction()

# The subcommands (cmd/, not the benchmarks of cmd/bench, which time the formats themselves) reach
# the formats only through app and the seams of lib/ (lib/ARCHITECTURE.md, "The format seam"): none
# includes a header of formats/.
function(fpg_check_commands)
  file(GLOB files ${FPG_SOURCE_DIR}/cmd/*.h ${FPG_SOURCE_DIR}/cmd/*.cpp)
  foreach(file ${files})
    file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"formats/")
    if(includes)
      list(GET includes 0 line)
      file(RELATIVE_PATH rel ${FPG_SOURCE_DIR} ${file})
      string(STRIP "${line}" line)
      message(FATAL_ERROR "layering: ${rel} (a subcommand) has `${line}`; commands reach the formats through "
                          "app and the format seam only (lib/ARCHITECTURE.md)")
    endif()
  endforeach()
endfunction()

function(fpg_check_layers OUT_FILES)
  fpg_check_commands()
  set(all "")
  foreach(rank RANGE 6)
    fpg_check_layer(${rank} files)
    list(APPEND all ${files})
  endforeach()
  fpg_check_public_headers(files)
  list(APPEND all ${files})
  set(${OUT_FILES} ${all} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  fpg_check_layers(files)
  if(FPG_STAMP)
    file(TOUCH ${FPG_STAMP})
  endif()
endif()
