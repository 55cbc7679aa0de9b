-- .luacheckrc: luacheck's settings for the Lua half (lua/, stdlib/, tools/,
-- examples/, spec/), run by ctest (lint.luacheck) and tools/test.
std = "lua54"
-- Debian's lua5.4 (what tools/bootstrap installs, and CMake links) keeps
-- math.frexp (LUA_COMPAT_MATHLIB); the 16-bit float codecs use it.
read_globals = { math = { fields = { "frexp" } } }
-- Diagnostic messages stay on one line, so that grep finds the code that says one.
max_line_length = false
-- Handlers and callbacks take the arguments their caller passes (fn(R, W, rec, ins, ctx)).
unused_args = false
-- Nested closures reuse the names of the scope around them (op, s, err ...).
ignore = { "431", "432" }
files["spec/"] = { std = "+busted" }
-- (spec/fixtures/ holds inputs, some of them wrong on purpose)
exclude_files = { "build*/**", "spec/fixtures/**" }
