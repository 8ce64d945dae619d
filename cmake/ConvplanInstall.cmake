# Installs the library, headers, CLI, CMake package (relocatable: every path relative to the
# prefix) and pkg-config file, and sets up CPack (cpack -G DEB).
include(CMakePackageConfigHelpers)
set(convplan_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/convplan)

install(TARGETS convplan EXPORT convplanTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET convplan_tool)
  install(TARGETS convplan_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY include/convplan DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/convplan/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/convplan)
install(FILES cmake/FindCUDNN.cmake DESTINATION ${convplan_cmake_dir})
install(EXPORT convplanTargets NAMESPACE convplan:: DESTINATION ${convplan_cmake_dir})
configure_package_config_file(cmake/convplanConfig.cmake.in
  ${PROJECT_BINARY_DIR}/convplanConfig.cmake
  INSTALL_DESTINATION ${convplan_cmake_dir})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/convplanConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/convplanConfig.cmake
              ${PROJECT_BINARY_DIR}/convplanConfigVersion.cmake
        DESTINATION ${convplan_cmake_dir})

# pkg-config: paths relative to ${pcfiledir}, so the file moves with the prefix.
file(RELATIVE_PATH convplan_pc_to_prefix
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
if(BUILD_SHARED_LIBS)
  set(convplan_pc_private "sqlite3")
  set(convplan_pc_libs_private "-lcudnn -lcudart")
  set(convplan_pc_libs "-lconvplan")
else()
  set(convplan_pc_private "sqlite3")
  set(convplan_pc_libs_private "-lcudnn -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm")
  set(convplan_pc_libs "-lconvplan")
endif()
configure_file(cmake/convplan.pc.in ${PROJECT_BINARY_DIR}/convplan.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/convplan.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# cpack -G DEB (from the build folder): library, headers, CLI and CMake package in one .deb.
set(CPACK_PACKAGE_NAME convplan)
set(CPACK_PACKAGE_VENDOR "convplan")
set(CPACK_PACKAGE_CONTACT "convplan maintainers <convplan@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Convolutions on NVIDIA GPUs through cuDNN's backend API, tuned once and cached")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# cuDNN and the CUDA toolkit usually come from NVIDIA's repository or a wheel, under names that
# vary; they are not declared. SQLite is: the shared library links it, and the static library's
# users link it (convplanConfig.cmake finds it), so they need its development package.
if(BUILD_SHARED_LIBS)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libsqlite3-0, libstdc++6")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libsqlite3-dev, libstdc++6")
endif()
include(CPack)
