# CTest driver (cmake -P): install the hopattn build into a scratch prefix, then configure, build and
# run the consumer project against that prefix only.
#   -DHOPATTN_BUILD_DIR=  the configured and built hopattn tree
#   -DCONSUMER_SOURCE_DIR=  this folder
#   -DWORK_DIR=  scratch folder, emptied first
#   -DGENERATOR=  -DCXX_COMPILER=  the parent build's generator and C++ compiler
foreach(var HOPATTN_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer_test.cmake: -D${var}= is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

execute_process(COMMAND ${CMAKE_COMMAND} --install ${HOPATTN_BUILD_DIR} --prefix ${prefix}
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${GENERATOR}
                        -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
                        -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=Release
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${build} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${build}/hopattn_consumer COMMAND_ERROR_IS_FATAL ANY)
