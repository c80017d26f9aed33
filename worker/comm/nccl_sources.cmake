# NcclCommunicator, the CUDA collectives, in tp_worker. Included from worker/CMakeLists.txt after
# tp_worker is defined, only when the top-level CMakeLists.txt turned CUDA on (TPSERVE_CUDA).
# The .cc is host code (CUDA runtime API and NCCL calls, no kernels), built by the C++ compiler.
# NCCL, cudart and the define are PRIVATE so that CPU-only consumers of tp_worker keep their
# compile flags (and their objects); a static library still passes the libraries on to the link.
# Code that includes nccl_communicator.h links tp_nccl itself.
target_sources(tp_worker PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/comm/nccl_communicator.cc)
target_link_libraries(tp_worker PRIVATE tp_nccl)  # NCCL, CUDA::cudart
target_compile_definitions(tp_worker PRIVATE TPSERVE_WITH_CUDA=1)
