# cmake --install puts headers, the libraries, the run-time modules and a package config in the
# prefix, so that another project can find_package(gradus) and link gradus::gradus. With shared
# libraries (the default) a consumer needs none of gradus's own dependencies at build time: they
# are private to the libraries, and the CUDA ones to the modules, which only gradus loads.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(gradus_libs GLOBAL PROPERTY GRADUS_LIBRARIES)
set(gradus_exported ${gradus_libs} gradus)
if(NOT GRADUS_SHARED)
  list(APPEND gradus_exported gradus_openblas)  # a static gradus_backend_cpu passes it on
endif()
install(TARGETS ${gradus_exported} EXPORT gradusTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
get_property(gradus_modules GLOBAL PROPERTY GRADUS_MODULES)
if(gradus_modules)
  install(TARGETS ${gradus_modules} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# The x86-64-v3 copy of the CPU backend (src/CMakeLists.txt): where the dynamic loader looks.
get_property(gradus_cpu_variants GLOBAL PROPERTY GRADUS_CPU_VARIANTS)
if(gradus_cpu_variants)
  install(TARGETS ${gradus_cpu_variants}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/glibc-hwcaps/x86-64-v3)
endif()
install(DIRECTORY include/gradus DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT gradusTargets NAMESPACE gradus:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gradus)
configure_package_config_file(cmake/gradusConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/gradusConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gradus)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gradusConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gradusConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/gradusConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gradus)
if(TARGET gradus_cli)
  install(TARGETS gradus_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
