# The CUDA side of tp_worker: the device communicators (NCCL, single rank) and the CUDA model.
# Included from worker/CMakeLists.txt after tp_worker is defined, only when the top-level
# CMakeLists.txt turned CUDA on (TPSERVE_CUDA). Host code only (runtime API, NCCL and cuBLASLt calls; the kernels live
# in kernels/cuda), built by the C++ compiler.
# The libraries and the define are PRIVATE so that CPU-only consumers of tp_worker keep their
# compile flags (and their objects); a static library still passes the libraries on to the link.
# Code that includes these headers links tp_nccl, tp_kernels_cuda and tp_cuda_sampling itself.
target_sources(tp_worker PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/comm/nccl_communicator.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/comm/nccl_library.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/comm/single_rank_device_communicator.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_forward_pass.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_forward_pass_memory.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_lora_pool.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_logits_processor.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/device_weights.cc
)
target_link_libraries(tp_worker PRIVATE tp_nccl tp_kernels_cuda tp_cuda_gemm tp_cuda_sampling)
target_compile_definitions(tp_worker PRIVATE TPSERVE_WITH_CUDA=1)
