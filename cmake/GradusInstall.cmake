# cmake --install puts headers, the static libraries and a package config in the prefix, so that
# another project can find_package(gradus) and link gradus::gradus.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(gradus_libs GLOBAL PROPERTY GRADUS_LIBRARIES)
install(TARGETS ${gradus_libs} gradus gradus_openblas EXPORT gradusTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
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
