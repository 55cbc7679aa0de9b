#!/bin/sh
# install_test.sh -- ctest install.embed: install the build into a temporary
# prefix, then build examples/embed/embed.c against that copy only (once with
# find_package(tilua) and tilua::tilua, once with pkg-config), run both with
# LD_LIBRARY_PATH at the prefix's lib only, and load the installed Lua module
# in a stock lua5.4 through LUA_CPATH. The installed package declares LPeg,
# which the IR parser needs at run time: find_package(tilua) gives
# tilua_LUA_MODULES and the lpeg.so it found, and fails without one;
# `pkg-config --variable=lua_modules tilua` names it.
#
#   install_test.sh BUILD_DIR SOURCE_DIR CC LIBDIR LMODDIR SANITIZE [LUA]
#
# LIBDIR and LMODDIR are the install's CMAKE_INSTALL_LIBDIR and
# TILUA_INSTALL_LMODDIR; SANITIZE=1 builds the hosts with the sanitizer flags
# of the tilua build (and preloads the ASan runtime into the stock lua5.4).
# TILUA_KEEP_INSTALL_TEST=1 keeps the temporary directory.
set -eu
build=$1 src=$2 cc=$3 libdir=$4 lmoddir=$5 sanitize=$6 lua=${7:-}
cmake=${CMAKE_COMMAND:-cmake}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tilua-install.XXXXXX")
if [ "${TILUA_KEEP_INSTALL_TEST:-0}" = 1 ]; then echo "install_test: keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
prefix=$tmp/prefix
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
unset TILUA_SOURCE_DIR || true   # the installed copy must run on its embedded Lua

sanflags=""
[ "$sanitize" = 1 ] && sanflags="-fsanitize=address,undefined -fno-omit-frame-pointer"

# 1. the install itself
"$cmake" --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
case $lmoddir in /*) lmod=$lmoddir ;; *) lmod=$prefix/$lmoddir ;; esac
for f in "$libdir/libtilua.so" include/tilua.h bin/tilua "$libdir/pkgconfig/tilua.pc" \
         "$libdir/cmake/tilua/tiluaConfig.cmake" "$libdir/cmake/tilua/tiluaConfigVersion.cmake" \
         "$libdir/cmake/tilua/TiluaLpeg.cmake" share/doc/tilua/LICENSE; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
[ -e "$lmod/tilua.so" ] || fail "not installed: $lmod/tilua.so"
echo "install_test: installed into $prefix"

mkdir "$tmp/host"
cp "$src/examples/embed/embed.c" "$tmp/host/"   # away from src/: only the installed tilua.h is found
fixture=$src/spec/fixtures/valid/scf.tir

run_embed() { # $1: the program
  LD_LIBRARY_PATH=$prefix/$libdir "$1" "$fixture" > "$tmp/out.txt" 2> "$tmp/err.txt" || {
    cat "$tmp/out.txt" "$tmp/err.txt"; fail "$1 exited non-zero"; }
  grep -q "^// built by a Lua script" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "$1: no script output"; }
  grep -q "canonicalize,cse" "$tmp/out.txt" || fail "$1: no pipeline output"
  if command -v ldd > /dev/null; then
    LD_LIBRARY_PATH=$prefix/$libdir ldd "$1" > "$tmp/ldd.txt" || true
    grep -q "libtilua.so.* => $prefix/$libdir/" "$tmp/ldd.txt" || { cat "$tmp/ldd.txt"; fail "$1 does not load the installed libtilua"; }
  fi
  echo "install_test: $(basename "$1") ran on $(basename "$fixture") against the installed libtilua"
}

# 2. a CMake host: find_package(tilua) from the prefix only
cat > "$tmp/host/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(embed_host C)
find_package(tilua 0.1 REQUIRED)
message(STATUS "tilua needs the Lua modules: ${tilua_LUA_MODULES}; lpeg: ${TILUA_LPEG_MODULE}")
add_executable(embed embed.c)
target_link_libraries(embed PRIVATE tilua::tilua)
CMAKE
"$cmake" -S "$tmp/host" -B "$tmp/host/build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
  -DCMAKE_C_FLAGS="$sanflags" -DCMAKE_EXE_LINKER_FLAGS="$sanflags" > "$tmp/host.log" 2>&1 \
  || { cat "$tmp/host.log"; fail "configuring the find_package host"; }
found=$(sed -n 's/^tilua_DIR:PATH=//p' "$tmp/host/build/CMakeCache.txt")
[ "$found" = "$prefix/$libdir/cmake/tilua" ] || fail "find_package found tilua in '$found', not the prefix"
grep -q "tilua needs the Lua modules: lpeg; lpeg: /.*/lpeg.so" "$tmp/host.log" || { cat "$tmp/host.log"; fail "find_package(tilua) did not declare LPeg"; }
lpeg=$(sed -n 's/^TILUA_LPEG_MODULE:FILEPATH=//p' "$tmp/host/build/CMakeCache.txt")
[ -e "$lpeg" ] || fail "find_package(tilua) named no lpeg.so ('$lpeg')"
echo "install_test: the CMake package declares LPeg (found $lpeg)"
# without LPeg, find_package(tilua) fails and says why
if "$cmake" -S "$tmp/host" -B "$tmp/host/nolpeg" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
     -DTILUA_LPEG_MODULE="$tmp/no/lpeg.so" > "$tmp/nolpeg.log" 2>&1; then
  fail "find_package(tilua) succeeded without LPeg"
fi
grep -q "tilua requires the Lua module lpeg" "$tmp/nolpeg.log" || { cat "$tmp/nolpeg.log"; fail "no word of LPeg when it is missing"; }
"$cmake" --build "$tmp/host/build" > "$tmp/host.log" 2>&1 || { cat "$tmp/host.log"; fail "building the find_package host"; }
run_embed "$tmp/host/build/embed"

# 3. a host built with pkg-config
if command -v pkg-config > /dev/null; then
  flags=$(PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --cflags --libs tilua) || fail "pkg-config tilua"
  mods=$(PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --variable=lua_modules tilua)
  [ "$mods" = lpeg ] || fail "tilua.pc does not declare LPeg (lua_modules: '$mods')"
  case $flags in *"$src"*|*"$build"*) fail "pkg-config points into the source or build tree: $flags" ;; esac
  # shellcheck disable=SC2086
  "$cc" -std=c11 $sanflags "$tmp/host/embed.c" -o "$tmp/host/embed_pc" $flags || fail "cc with pkg-config flags: $flags"
  run_embed "$tmp/host/embed_pc"
else
  echo "install_test: SKIP the pkg-config host: pkg-config is not installed (tools/bootstrap installs it)"
fi

# 4. the installed Lua module in a stock lua5.4
if [ -z "$lua" ] || ! [ -x "$lua" ]; then
  echo "install_test: SKIP require \"tilua\" in a stock lua5.4: no lua5.4 found"
  exit 0
fi
preload=""
if [ "$sanitize" = 1 ]; then
  # The stock interpreter is not instrumented: the ASan runtime must come first.
  preload=$("$cc" -print-file-name=libasan.so)
  if ! [ -e "$preload" ]; then
    echo "install_test: SKIP require \"tilua\" in a stock lua5.4: no ASan runtime to preload for $cc"
    exit 0
  fi
fi
script='local tl = require "tilua"
local want, got = os.getenv "TILUA_EXPECT_MODULE", package.searchpath("tilua", package.cpath)
assert(got == want, "tilua found at " .. tostring(got))
local k = tl.kernel("k", { params = { { "a", tl.i32 } } })
k:define(function(k, p) local _ = p.a + 1 end)
assert(tl.module():print():find("arith.addi", 1, true))
print(tl.version)'
out=$(LUA_CPATH="$lmod/?.so;;" TILUA_EXPECT_MODULE="$lmod/tilua.so" LD_PRELOAD=$preload ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
      "$lua" -e "$script") || fail "require \"tilua\" in $lua"
echo "install_test: a stock $(basename "$lua") loaded $lmod/tilua.so (tilua $out)"
