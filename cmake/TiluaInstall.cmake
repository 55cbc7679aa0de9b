# TiluaInstall.cmake -- `cmake --install build --prefix P` (included by CMakeLists.txt):
#
#   P/lib/libtilua.so*             the shared library for C hosts (target tilua)
#   P/include/tilua.h              its public header
#   P/bin/tilua                    the program (target tilua_exe)
#   P/lib/lua/5.4/tilua.so         the module for a stock lua5.4 (`require "tilua"`)
#   P/lib/pkgconfig/tilua.pc       pkg-config: `pkg-config --cflags --libs tilua`
#   P/lib/cmake/tilua/             find_package(tilua) -> the target tilua::tilua (it
#                                  requires the Lua module lpeg: TiluaLpeg.cmake)
#   P/share/doc/tilua/LICENSE      the licence (MIT)
#
# The Lua half of the library (lua/tilua/*.lua and stdlib/*.lua) is compiled
# into the binaries (tools/embed.cmake), so no .lua file is installed.
# TILUA_INSTALL_LMODDIR moves the Lua module; TILUA_INSTALL_ROCK (set by the
# rockspec) installs only the module and the program, which is what a rock holds.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TILUA_INSTALL_LMODDIR "${CMAKE_INSTALL_LIBDIR}/lua/5.4" CACHE PATH
  "Where the Lua module tilua.so is installed (relative to the prefix, or absolute)")
option(TILUA_INSTALL_ROCK "Install only the Lua module and the tilua program (luarocks)" OFF)
set(TILUA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/tilua")

# The shared library carries the public header's directory: src/ in the build
# tree, include/ once installed. Its core (tilua_core, static) and Lua are linked
# PRIVATE into it, so the exported target needs neither.
target_include_directories(tilua PUBLIC
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/src>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(tilua PROPERTIES EXPORT_NAME tilua)
add_library(tilua::tilua ALIAS tilua)

install(TARGETS tilua_module LIBRARY DESTINATION ${TILUA_INSTALL_LMODDIR})
install(TARGETS tilua_exe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})

if(NOT TILUA_INSTALL_ROCK)
  install(TARGETS tilua EXPORT tiluaTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES ${CMAKE_SOURCE_DIR}/src/tilua.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

  # CMake package: tiluaConfig.cmake, tiluaConfigVersion.cmake, tiluaTargets.cmake.
  install(EXPORT tiluaTargets NAMESPACE tilua:: DESTINATION ${TILUA_INSTALL_CMAKEDIR})
  configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/tiluaConfig.cmake.in
    ${CMAKE_BINARY_DIR}/cmake/tiluaConfig.cmake
    INSTALL_DESTINATION ${TILUA_INSTALL_CMAKEDIR})
  write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/tiluaConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_BINARY_DIR}/cmake/tiluaConfig.cmake ${CMAKE_BINARY_DIR}/cmake/tiluaConfigVersion.cmake
    ${CMAKE_SOURCE_DIR}/cmake/TiluaLpeg.cmake DESTINATION ${TILUA_INSTALL_CMAKEDIR})

  # pkg-config: relocatable (the prefix is found from the .pc file's own place),
  # so `cmake --install --prefix P` needs no reconfiguration.
  set(TILUA_PC_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(TILUA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
    set(TILUA_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
  else()
    file(RELATIVE_PATH TILUA_PC_UP "/p/${TILUA_PC_DIR}" "/p")
    string(REGEX REPLACE "/$" "" TILUA_PC_UP "${TILUA_PC_UP}")
    set(TILUA_PC_PREFIX "\${pcfiledir}/${TILUA_PC_UP}")
    set(TILUA_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  endif()
  if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(TILUA_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
  else()
    set(TILUA_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()
  # What libtilua.so itself links (only a static link would need it).
  get_filename_component(TILUA_PC_LUA_NAME "${LUA_LIBRARY}" NAME)
  string(REGEX REPLACE "^lib" "" TILUA_PC_LUA_NAME "${TILUA_PC_LUA_NAME}")
  string(REGEX REPLACE "\\.(so|a|dylib)(\\..*)?$" "" TILUA_PC_LUA_NAME "${TILUA_PC_LUA_NAME}")
  set(TILUA_PC_LIBS_PRIVATE "-l${TILUA_PC_LUA_NAME} -lm")
  if(CMAKE_DL_LIBS)
    string(APPEND TILUA_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
  endif()
  configure_file(${CMAKE_SOURCE_DIR}/cmake/tilua.pc.in ${CMAKE_BINARY_DIR}/cmake/tilua.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/cmake/tilua.pc DESTINATION ${TILUA_PC_DIR})
endif()
