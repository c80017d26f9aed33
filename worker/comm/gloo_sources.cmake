# GlooCommunicator, the CPU collectives, in tp_worker. Included from worker/CMakeLists.txt after
# tp_worker is defined. Debian's libgloo-dev exports the imported target `gloo` from
# /usr/share/cmake/Gloo/GlooConfig.cmake.
find_package(Gloo CONFIG REQUIRED)
target_sources(tp_worker PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/comm/gloo_communicator.cc)
target_link_libraries(tp_worker PUBLIC gloo)
