# cmake -DFPGATHER=<binary> -DOUT_DIR=<dir> -P GenerateCompletions.cmake: writes the bash (fpgather) and
# zsh (_fpgather) completion scripts that the binary generates from its command-line definition.
foreach(shell_file "bash;fpgather" "zsh;_fpgather")
  list(GET shell_file 0 shell)
  list(GET shell_file 1 file)
  execute_process(COMMAND ${FPGATHER} completion ${shell} OUTPUT_FILE ${OUT_DIR}/${file}
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${FPGATHER} completion ${shell} failed: ${status}")
  endif()
endforeach()
