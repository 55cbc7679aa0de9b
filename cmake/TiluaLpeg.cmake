# TiluaLpeg.cmake -- where the Lua module lpeg (LPeg) is: the IR parser
# requires it at run time, from the package.cpath of the Lua that runs tilua
# (Debian's lua-lpeg: <prefix>/lib/<arch>/lua/5.4/lpeg.so; a rock tree:
# <tree>/lib/lua/5.4/lpeg.so). Included by CMakeLists.txt, where it warns when
# there is none, and by the installed tiluaConfig.cmake, where find_package(tilua)
# fails without it. TILUA_LPEG_MODULE names the file to use instead.
set(TILUA_LPEG_SUFFIXES lib/lua/5.4 lib64/lua/5.4)
if(CMAKE_LIBRARY_ARCHITECTURE)
  list(APPEND TILUA_LPEG_SUFFIXES lib/${CMAKE_LIBRARY_ARCHITECTURE}/lua/5.4)
endif()
find_file(TILUA_LPEG_MODULE NAMES lpeg.so
  PATHS ${PACKAGE_PREFIX_DIR} ${CMAKE_PREFIX_PATH} ${CMAKE_INSTALL_PREFIX} ${CMAKE_SYSTEM_PREFIX_PATH}
  PATH_SUFFIXES ${TILUA_LPEG_SUFFIXES}
  DOC "The Lua module lpeg (LPeg), which tilua's IR parser requires at run time")
