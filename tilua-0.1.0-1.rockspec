-- tilua-0.1.0-1.rockspec -- the Lua module `tilua` (and the `tilua` program) for
-- a stock Lua 5.4, built with CMake from the repository root:
--
--   luarocks --lua-version 5.4 make                      (system tree)
--   luarocks --lua-version 5.4 --tree /tmp/rocks make    (a tree of your own)
--
-- The Lua half of the library is compiled into the module, so the rock holds
-- one file in lib/lua/5.4 (tilua.so) and bin/tilua; the C library, header,
-- pkg-config and CMake files come with `cmake --install` (README: Installing).
-- The tests are not built (TILUA_BUILD_TESTS=OFF). The version is src/tilua.h's
-- (TILUA_VERSION_*); spec/packaging_spec.lua checks that they agree.
rockspec_format = "3.0"
package = "tilua"
version = "0.1.0-1"
source = {
  -- `luarocks make` builds the checkout it runs in; `luarocks build` and
  -- `luarocks pack` fetch this tag of the project's repository.
  url = "git+https://github.com/tilua/tilua.git",
  tag = "v0.1.0",
}
description = {
  summary = "A GPU-kernel compiler with a Lua 5.4 surface",
  detailed = [[
An SSA IR with CUTLASS-style orchestration, tile and NVVM dialects in a C11
core; Lua 5.4 scripts build kernels through `require "tilua"`, the core
verifies and lowers them to PTX for sm_90a and launches them through the CUDA
Driver API (loaded at run time; only launching needs a GPU).]],
  homepage = "https://github.com/tilua/tilua",
  license = "MIT",
  labels = { "gpu", "cuda", "compiler", "ptx" },
}
dependencies = {
  "lua >= 5.4, < 5.5",
  "lpeg >= 1.0", -- the textual IR parser (lua/tilua/parser.lua), at run time
}
build = {
  type = "cmake",
  variables = {
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    CMAKE_BUILD_TYPE = "Release",
    LUA_INCLUDE_DIR = "$(LUA_INCDIR)",    -- the headers of the Lua the rock is for
    TILUA_INSTALL_ROCK = "ON",            -- only the module and the program
    TILUA_INSTALL_LMODDIR = "$(LIBDIR)",  -- tilua.so where luarocks deploys C modules from
    TILUA_BUILD_TESTS = "OFF",            -- the rock has no use for the test programs
  },
}
