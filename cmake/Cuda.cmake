# CUDA backend: FLASHBENCH_CUDA=AUTO|ON|OFF. AUTO builds it when nvcc is found.
set(FLASHBENCH_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set(FLASHBENCH_CUDA_BOOL false)
if(FLASHBENCH_NATIVE)
  set(FLASHBENCH_NATIVE_BOOL true)
else()
  set(FLASHBENCH_NATIVE_BOOL false)
endif()
