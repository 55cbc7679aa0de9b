# placeholder

# {=== cuda: the CUDA Driver API runtime (src/cuda). Without a GPU it runs the
# no-GPU checks, then exits 77 (skipped); TILUA_PTXAS lets it assemble its PTX.
add_executable(test_cuda spec/c/test_cuda.c)
target_link_libraries(test_cuda PRIVATE tilua_core)
add_test(NAME c.cuda COMMAND test_cuda)
set_tests_properties(c.cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
if(PTXAS_EXECUTABLE)
  set_property(TEST c.cuda APPEND PROPERTY ENVIRONMENT "TILUA_PTXAS=${PTXAS_EXECUTABLE}")
endif()
# }===
