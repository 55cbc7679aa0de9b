-- What a distribution takes: the licence, the version in one place, the
-- rockspec, the program linking no GPL code by default, and every environment
-- variable the tree reads in docs/environment.md's tables. (The install
-- itself: spec/install_test.sh, ctest install.embed.)
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local function read(path) return assert(H.slurp(H.root .. "/" .. path), path) end

-- Every file of the tree under dir whose name matches pattern (git's list).
local function tree_files(pattern)
  local p = io.popen(("git -C %s ls-files 2>/dev/null"):format(H.quote(H.root)))
  local list = {}
  for f in p:lines() do
    if f:match(pattern) then list[#list + 1] = f end
  end
  p:close()
  return list
end

describe("packaging", function()
  it("has an MIT licence, which the rockspec names", function()
    local lic = read "LICENSE"
    assert.matches("^MIT License\n", lic)
    assert.truthy(lic:find("Permission is hereby granted, free of charge", 1, true))
    assert.matches('license = "MIT"', read "tilua-0.1.0-1.rockspec")
  end)

  it("writes the version once (tilua.h) and says it everywhere the same", function()
    local h = read "src/tilua.h"
    local v = table.concat({ h:match "#define TILUA_VERSION_MAJOR (%d+)", h:match "#define TILUA_VERSION_MINOR (%d+)",
                             h:match "#define TILUA_VERSION_PATCH (%d+)" }, ".")
    assert.matches("^%d+%.%d+%.%d+$", v)
    assert.equal(v, tl.version)
    local out, err, code = H.tilua_run { "--version" }
    assert.equal(0, code, err)
    assert.equal("tilua " .. v .. " (", out:sub(1, #v + 8))
    -- the rockspec: its file name and its version, with the rock revision
    local files = tree_files "%.rockspec$"
    assert.equal(1, #files, table.concat(files, " "))
    assert.equal(("tilua-%s-1.rockspec"):format(v), files[1])
    local rock = read(files[1])
    assert.truthy(rock:find(('version = "%s-1"'):format(v), 1, true))
    assert.truthy(rock:find(('tag = "v%s"'):format(v), 1, true))
    -- CMake's project version is read from tilua.h
    local cache = H.slurp(H.build .. "/CMakeCache.txt") or ""
    local pv = cache:match "CMAKE_PROJECT_VERSION:STATIC=([%d.]+)"
    if pv then assert.equal(v, pv) end
  end)

  it("has a rockspec a distribution can take: real source, LPeg declared, no test build", function()
    local rock = read "tilua-0.1.0-1.rockspec"
    local env = {}
    assert(load(rock, "rockspec", "t", env))()
    assert.matches("^git%+https://github%.com/tilua/tilua%.git$", env.source.url)
    assert.is_nil(rock:find("example.invalid", 1, true))
    assert.is_nil(rock:find("placeholder", 1, true))
    local deps = table.concat(env.dependencies, ";")
    assert.matches("lua >= 5%.4", deps)
    assert.matches("lpeg >= 1%.0", deps)
    assert.equal("OFF", env.build.variables.TILUA_BUILD_TESTS)
    assert.equal("ON", env.build.variables.TILUA_INSTALL_ROCK)
    assert.equal("MIT", env.description.license)
  end)

  it("configures a rock's build without the tests (TILUA_BUILD_TESTS=OFF)", function()
    if not os.execute "command -v cmake >/dev/null 2>&1" then pending("no cmake") return end
    local dir = os.tmpname()
    os.remove(dir)
    local function targets(extra)
      local ok = os.execute(("cmake -S %s -B %s %s >/dev/null 2>&1"):format(H.quote(H.root), H.quote(dir), extra))
      assert.is_true(ok == true, "configure failed: " .. extra)
      local p = io.popen(("cmake --build %s --target help 2>/dev/null"):format(H.quote(dir)))
      local t = p:read "a"
      p:close()
      return t
    end
    local rock = targets "-DTILUA_BUILD_TESTS=OFF -DTILUA_INSTALL_ROCK=ON"
    assert.truthy(rock:find("tilua_exe", 1, true), rock)
    assert.truthy(rock:find("tilua_module", 1, true))
    for _, t in ipairs { "test_ir", "fakecuda", "pty_drive", "capi_fuzz", "embed_example" } do
      assert.is_nil(rock:find(t, 1, true), t .. " is built for a rock")
    end
    os.execute("rm -rf " .. H.quote(dir))
  end)

  it("links no GPL code by default: the REPL's line editor is libedit unless readline is asked for", function()
    local cache = H.slurp(H.build .. "/CMakeCache.txt") or ""
    local editing = cache:match "TILUA_LINE_EDITING:STRING=(%w+)"
    assert.truthy(editing, "no TILUA_LINE_EDITING in the build's cache")
    if editing == "readline" then pending("this build asked for GNU readline") return end
    local p = io.popen("ldd " .. H.quote(H.tilua) .. " 2>/dev/null")
    local libs = p:read "a"
    p:close()
    if libs == "" then pending("no ldd") return end
    assert.is_nil(libs:find("libreadline", 1, true), libs)
    -- nor the library a host links
    p = io.popen("ldd " .. H.quote(H.build .. "/libtilua.so") .. " 2>/dev/null")
    libs = p:read "a"
    p:close()
    assert.is_nil(libs:find("libreadline", 1, true), libs)
    assert.is_nil(libs:find("libedit", 1, true), libs)
  end)
end)

describe("docs/environment.md", function()
  local doc = read "docs/environment.md"
  local rows = {}
  for line in doc:gmatch "[^\n]+" do
    local first = line:match "^| ([^|]+) |"
    if first then
      for name in first:gmatch "`([%u%d_]+)`" do rows[name] = true end
    end
  end

  it("has a row for every variable the tree reads", function()
    local read_names = {}
    local function note(name, where)
      if not read_names[name] then read_names[name] = where end
    end
    for _, f in ipairs(tree_files "%.[ch]$") do
      for name in read(f):gmatch 'getenv%s*%(%s*"([%u%d_]+)"' do note(name, f) end
    end
    for _, f in ipairs(tree_files "%.lua$") do
      local text = read(f)
      for name in text:gmatch 'os%.getenv%s*%(?%s*"([%u%d_]+)"' do note(name, f) end
    end
    -- shell scripts: variables read with a default (${X:-...}) or named TILUA_*
    for _, f in ipairs { "tools/gpu", "tools/test", "tools/bootstrap", "spec/install_test.sh" } do
      local text = read(f)
      for name in text:gmatch "%${(%u[%u%d_]*):?%-" do note(name, f) end
      for name in text:gmatch "%$%{?(TILUA_[%u%d_]+)" do note(name, f) end
    end
    for _, f in ipairs(tree_files "^tools/fuzz/.*%.sh$") do
      for name in read(f):gmatch "%${(%u[%u%d_]*):?%-" do note(name, f) end
    end
    local missing = {}
    for name, where in pairs(read_names) do
      if not rows[name] then missing[#missing + 1] = ("%s (read in %s)"):format(name, where) end
    end
    table.sort(missing)
    assert.same({}, missing)
    assert.truthy(rows.TILUA_DUMP and rows.TILUA_EMULATE and rows.LUA_INIT)
  end)

  it("has its library and program variables in tilua --help too", function()
    local section = doc:match "\n## The library and the `tilua` program\n(.-)\n## "
    assert.truthy(section)
    local help, err, code = H.tilua_run { "--help" }
    assert.equal(0, code, err)
    local missing, n = {}, 0
    for line in section:gmatch "[^\n]+" do
      for name in (line:match "^| ([^|]+) |" or ""):gmatch "`([%u%d_]+)`" do
        if name:match "^TILUA_" or name:match "^LUA_INIT" then
          n = n + 1
          if not help:find(name, 1, true) then missing[#missing + 1] = name end
        end
      end
    end
    assert.is_true(n >= 15, "the table's rows were not found")
    assert.same({}, missing)
  end)

  it("is reached from the README, as the tutorial and --emulate are", function()
    local readme = read "README.md"
    assert.truthy(readme:find("(docs/environment.md)", 1, true))
    assert.truthy(readme:find("(docs/tutorial.md)", 1, true))
    assert.truthy(readme:find("--emulate", 1, true))
  end)
end)
