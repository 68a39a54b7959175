# gradus_library(NAME [MODULE] SOURCES ... PUBLIC_DEPS ... PRIVATE_DEPS ... PRIVATE_HEADERS ...):
# one layer as a shared library (static with GRADUS_SHARED=OFF) with the project's warnings, an
# alias gradus::NAME, the public include directory and its private include root (PRIVATE_HEADERS:
# its own directories under src/ and the lower layers' internal headers it uses). MODULE: a plug-in gradus loads at run time with dlopen (the CUDA
# backend, the NCCL engine); nothing links it and it is not part of the exported package.
function(gradus_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${GRADUS_WERROR}>>:-Werror>)
  if(GRADUS_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
    target_compile_definitions(${target} PRIVATE GRADUS_CPU_NATIVE=1)
    # GCC 12.2 (Debian 12) miscompiles some AVX-512 vector constants: a std::vector<double>
    # {1, 1, 1, 0} is stored as four 1.0s (reproduced on this project's test machines; cf. GCC
    # PR 108599). Stay on AVX2 with GCC < 13.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-mno-avx512f>)
    endif()
  endif()
  if(GRADUS_SANITIZE)
    # -O1 (after the build type's -O3, so it wins): a third of the compile time of -O3 under
    # ASan, which is what lets CI build and run the sanitized unit tests next to the release
    # ones. -fno-sanitize-recover: undefined behaviour fails the test instead of printing a line.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1
      -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer>)
    # PUBLIC: whatever links these (static) libraries, an installed consumer too, needs the
    # sanitizer runtimes.
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
    # GCC 12's -Wstringop-overflow gives false positives on ASan-instrumented code (e.g.
    # vector::resize(size() - 7) "exceeds maximum object size"); the sanitizers check this at
    # run time anyway.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-stringop-overflow>)
    endif()
  endif()
  if(GRADUS_FUZZ)  # coverage for libFuzzer + the sanitizers (fuzz/CMakeLists.txt)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined
      -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# A target's private include root: a directory in the build tree with links to the source
# directories it owns and to the internal headers of lower layers it may use (PRIVATE_HEADERS,
# paths under src/), so `#include "dist/flat.h"` is found from gradus_dist and from nothing else.
function(gradus_private_root target scope)
  set(root ${CMAKE_BINARY_DIR}/private_include/${target})
  file(REMOVE_RECURSE ${root})
  foreach(path ${ARGN})
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/src/${path})
      message(FATAL_ERROR "${target}: private header path src/${path} does not exist")
    endif()
    get_filename_component(parent ${root}/${path} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${path} ${root}/${path} SYMBOLIC)
  endforeach()
  target_include_directories(${target} ${scope} ${root})
endfunction()

function(gradus_library name)
  cmake_parse_arguments(ARG "MODULE" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS;PRIVATE_HEADERS" ${ARGN})
  if(NOT ARG_SOURCES)
    # A layer still being written has no sources yet: an empty interface target keeps the graph.
    add_library(gradus_${name} INTERFACE)
    add_library(gradus::${name} ALIAS gradus_${name})
    set_target_properties(gradus_${name} PROPERTIES EXPORT_NAME ${name})
    target_link_libraries(gradus_${name} INTERFACE ${ARG_PUBLIC_DEPS})
    set_property(GLOBAL APPEND PROPERTY GRADUS_LIBRARIES gradus_${name})
    return()
  endif()
  if(ARG_MODULE)
    add_library(gradus_${name} MODULE ${ARG_SOURCES})
  elseif(GRADUS_SHARED)
    add_library(gradus_${name} SHARED ${ARG_SOURCES})
  else()
    add_library(gradus_${name} STATIC ${ARG_SOURCES})
  endif()
  add_library(gradus::${name} ALIAS gradus_${name})
  set_target_properties(gradus_${name} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(gradus_${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
  gradus_private_root(gradus_${name} PRIVATE ${ARG_PRIVATE_HEADERS})
  target_link_libraries(gradus_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  # Every symbol a shared library uses must come from what it links: a library that reaches into
  # a layer it does not depend on fails to link instead of resolving at load time by luck.
  if(ARG_MODULE OR GRADUS_SHARED)
    target_link_options(gradus_${name} PRIVATE -Wl,--no-undefined)
  endif()
  gradus_set_warnings(gradus_${name})
  if(ARG_MODULE)
    set_property(GLOBAL APPEND PROPERTY GRADUS_MODULES gradus_${name})
  else()
    set_property(GLOBAL APPEND PROPERTY GRADUS_LIBRARIES gradus_${name})
  endif()
endfunction()
