-- The tilua program: --help, scripts, `tilua opt`, and a REPL session on stdin.
local H = dofile "spec/helper.lua"

describe("tilua", function()
  it("tells the truth in --help", function()
    local out, _, code = H.tilua_run { "--help" }
    assert.equal(0, code)
    assert.matches("usage: .*tilua %[options%] %[script %[args%]%]", out)
    assert.matches("opt FILE.tir", out)
    out, _, code = H.tilua_run { "opt", "--help" }
    assert.equal(0, code)
    for _, flag in ipairs { "--pass", "--print-ir-after-all", "--split-input-file", "--verify-diagnostics", "--timing" } do
      assert.truthy(out:find(flag, 1, true), flag)
    end
  end)

  it("runs scripts with arguments like lua", function()
    local out, _, code = H.tilua_run({ "-", "a", "b" }, "print(#arg, arg[1], arg[2], require('tilua').version)")
    assert.equal(0, code)
    assert.equal("2\ta\tb\t0.1.0\n", out)
    out, _, code = H.tilua_run { "-e", "print(1+1)" }
    assert.equal("2\n", out)
  end)

  it("reports a missing file and a bad option with a non-zero exit", function()
    local _, err, code = H.tilua_run { "/no/such/script.lua" }
    assert.not_equal(0, code)
    assert.matches("cannot open /no/such/script.lua", err)
    _, err, code = H.tilua_run { "-Z" }
    assert.not_equal(0, code)
    assert.matches("unrecognized option '%-Z'", err)
  end)

  it("reports script errors at the script's line", function()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write("local tl = require 'tilua'\nlocal k = tl.kernel('k', {params = {{'a', tl.i32}}})\n",
            "k:define(function(k, p)\n  local x = p.a + tl.const(1.0, tl.f32)\nend)\n")
    f:close()
    local _, err, code = H.tilua_run { script }
    os.remove(script)
    assert.not_equal(0, code)
    assert.truthy(err:find(script .. ":4: '+': operand types differ: i32 and f32", 1, true), err)
  end)
end)

describe("tilua opt", function()
  it("runs passes and prints the result", function()
    local out, err, code = H.tilua_run { "opt", "spec/fixtures/valid/scf.tir", "--pass", "canonicalize,cse" }
    assert.equal(0, code, err)
    assert.matches("tile.kernel", out)
    assert.falsy(out:find("scf.for", 1, true)) -- pure loops are dead
  end)
  it("reads stdin and prints the IR after every pass", function()
    local out, err, code = H.tilua_run({ "opt", "-", "-p", "cleanup", "--print-ir-after-all", "--timing" },
      H.slurp "spec/fixtures/valid/arith.tir")
    assert.equal(0, code)
    assert.matches("IR Dump After canonicalize", err)
    assert.matches("IR Dump After cse", err)
    assert.matches("// pass timing", err)
  end)
  it("fails with diagnostics, the source line and a caret", function()
    local _, err, code = H.tilua_run({ "opt", "-" }, "module {\n  %0 = arith.addi %1, %1 : i32\n}\n")
    assert.equal(1, code)
    assert.matches("<stdin>:2:19: error: use of undefined value %%1\n  %%0 = arith.addi %%1, %%1 : i32\n                  %^", err)
  end)
  it("reports verifier errors at line:col", function()
    local _, err, code = H.tilua_run({ "opt", "-" },
      "module {\n  %0 = arith.constant {value = 1} : i32\n}\n")
    assert.equal(1, code)
    assert.matches("<stdin>:2:3: error: 'arith.constant' op value of type i64 does not match result type i32", err)
  end)
  it("rejects unknown passes and missing files", function()
    local _, err, code = H.tilua_run { "opt", "spec/fixtures/valid/scf.tir", "--pass", "nope" }
    assert.equal(1, code)
    assert.matches("unknown pass or pipeline 'nope'", err)
    _, err, code = H.tilua_run { "opt", "/no/such.tir" }
    assert.equal(1, code)
    assert.matches("cannot open /no/such.tir", err)
  end)
  it("reads stdin when no file is named, and says 'did you mean' for a pass or an option", function()
    local out, err, code = H.tilua_run({ "opt", "-p", "canonicalize" }, H.slurp "spec/fixtures/valid/arith.tir")
    assert.equal(0, code, err)
    assert.matches("module {", out)
    _, err, code = H.tilua_run { "opt", "spec/fixtures/valid/scf.tir", "--pass", "canonicalise,cse" }
    assert.equal(1, code)
    assert.matches("unknown pass or pipeline 'canonicalise'; did you mean 'canonicalize'%?", err)
    _, err, code = H.tilua_run { "opt", "spec/fixtures/valid/scf.tir", "--print-ir-afterall" }
    assert.equal(1, code)
    assert.matches("unknown option '%-%-print%-ir%-afterall'; did you mean '%-%-print%-ir%-after%-all'%?", err)
    _, err, code = H.tilua_run { "opt", "spec/fixtures/valid/scf.tir", "--zzzzzzzz" }
    assert.equal(1, code)
    assert.matches("unknown option '%-%-zzzzzzzz'\n", err) -- nothing near: no guess
    _, err, code = H.tilua_run { "sched", "--workerz", "4" }
    assert.equal(1, code)
    assert.matches("unknown option '%-%-workerz'; did you mean '%-%-workers'%?", err)
  end)
  it("prints the IR before passes, after those that changed it, and after the one that failed", function()
    local ir = H.slurp "spec/fixtures/valid/arith.tir"
    local _, err, code = H.tilua_run({ "opt", "-p", "canonicalize,cse,canonicalize", "--print-ir-before", "cse" }, ir)
    assert.equal(0, code, err)
    local dumps = {}
    for what in err:gmatch "// %-%-%-%-%-// IR Dump (.-) //%-%-%-%-%- //" do dumps[#dumps + 1] = what end
    assert.same({ "Before cse" }, dumps)
    _, err = H.tilua_run({ "opt", "-p", "canonicalize,cse", "--print-ir-before-all" }, ir)
    dumps = {}
    for what in err:gmatch "IR Dump (%a+ [%w%-]+)" do dumps[#dumps + 1] = what end
    assert.same({ "Before canonicalize", "Before cse" }, dumps)
    -- after-change: the second canonicalize finds nothing left to do
    _, err = H.tilua_run({ "opt", "-p", "canonicalize,canonicalize", "--print-ir-after-change" }, ir)
    dumps = {}
    for what in err:gmatch "IR Dump (%a+ [%w%-]+)" do dumps[#dumps + 1] = what end
    assert.same({ "After canonicalize" }, dumps)
    _, err = H.tilua_run({ "opt", "-p", "canonicalize,canonicalize", "--print-ir-after-all" }, ir)
    dumps = {}
    for what in err:gmatch "IR Dump (%a+ [%w%-]+)" do dumps[#dumps + 1] = what end
    assert.same({ "After canonicalize", "After canonicalize" }, dumps)
    -- a pass that fails: its IR as it left it, marked, and nothing after it
    local bad = [[
module {
  tile.kernel {arg_names = ["A", "B", "C"], kernel_spec = {block = [128, 1, 1], num_ctas = 1}, sym_name = "loose_dot"} {
  ^bb0(%A: !tileas.tensor<f16, 2>, %B: !tileas.tensor<f16, 2>, %C: !tileas.tensor<f32, 2>):
    %c0 = arith.constant {value = 0 : i32} : i32
    %z = arith.constant {value = 0.0 : f32} : f32
    %acc = tileas.splat %z : tile<64x64xf32, rmem>
    %a = tileas.tiled_load %A, %c0, %c0 : tile<64x64xf16, rmem>
    %b = tileas.tiled_load %B, %c0, %c0 : tile<64x64xf16, rmem>
    %d = tileas.dot %a, %b, %acc : tile<64x64xf32, rmem>
    tileas.tiled_store %C, %c0, %c0, %d
  }
}
]]
    local out
    out, err, code = H.tilua_run({ "opt", "-p", "tileas-assign-layouts,tileas-materialize-agents,cse",
                                   "--print-ir-after-failure", "--print-ir-after-all" }, bad)
    assert.equal(1, code)
    assert.equal("", out)
    dumps = {}
    for what in err:gmatch "IR Dump (%a+ [%w%-]+)" do dumps[#dumps + 1] = what end
    assert.same({ "After tileas-assign-layouts", "After tileas-materialize-agents" }, dumps)
    assert.matches("IR Dump After tileas%-materialize%-agents Failed //%-%-%-%-%- //\nmodule {.-kind = \"mma\"", err)
    assert.matches("<stdin>:9:%d+: error: 'tileas.dot' op tileas%-materialize%-agents: this dot is not in a pipelined loop", err)
  end)
  it("checks expected diagnostics and catches a wrong expectation", function()
    local text = "module {\n  // expected-error@+1 {{this is not the message}}\n  %0 = arith.constant {value = 1} : i32\n}\n"
    local _, err, code = H.tilua_run({ "opt", "-", "--verify-diagnostics" }, text)
    assert.equal(1, code)
    assert.matches("was not produced", err)
    assert.matches("unexpected error", err)
  end)
end)

describe("the REPL", function()
  it("shows a module before and after canonicalize", function()
    local session = table.concat({
      ":load spec/fixtures/valid/scf.tir",
      ":ir",
      ":run canonicalize",
      ":stages",
      ":ir",
      "=1 + 2",
      "for i = 1, 2 do",
      "  print('line', i)",
      "end",
      ":help",
      ":quit",
    }, "\n")
    local out, err, code = H.tilua_run({ "-i" }, session)
    assert.equal(0, code, err)
    local before = out:find("scf.for", 1, true)
    assert.truthy(before, out)
    assert.matches("// canonicalize: [%d.]+ ms", out)
    assert.matches("%- +scf.for", out) -- the diff shows the loop removed
    assert.matches("1  canonicalize", out)
    assert.matches("\n3\n", out)
    assert.matches("line\t1\nline\t2", out)
    assert.matches(":stages N|NAME", out)
  end)

  it("keeps locals, numbers the lines it reads, survives a failed define and opens after a script's stop", function()
    local session = table.concat({
      "local x = 5",
      "local function f() return x + 1 end",
      "=f()",
      "local k = tl.kernel('r', { params = { { 'n', tl.i32 } }, block = 32 })",
      "k:define(function(k, p) local y = p.n + nil end)",
      "k:define(function(k, p) tl.barrier() end)",
      "error('boom')",
      "=#k.body:ops() > 0",
    }, "\n") .. "\n"
    local out, err, code = H.tilua_run({ "-i" }, session)
    assert.equal(0, code, err)
    assert.matches("\n6\n", out)
    assert.matches("stdin:5: ", out) -- the failed define, at its line
    assert.matches("stdin:7: boom", out)
    assert.matches("\ntrue\n", out)
    -- a script that stops (here: tl.stop) hands over to the REPL with -i
    local f = os.tmpname()
    local h = assert(io.open(f, "w"))
    h:write("local tl = require 'tilua'\nmade = 41\ntl.stop(77, 'no GPU here')\n")
    h:close()
    out, err, code = H.tilua_run({ "-i", f }, "=made + 1\n")
    os.remove(f)
    assert.equal(0, code, err)
    assert.matches("no GPU here", out)
    assert.matches("\n42\n", out)
  end)
end)

describe("tilua --trace=FILE", function()
  it("writes every stage of every compile as one self-contained HTML page", function()
    local f = os.tmpname()
    local out, err, code = H.tilua_run { "--trace=" .. f, "examples/hello.lua" }
    assert.equal(0, code, err)
    assert.truthy(out:find("stage 2: cse", 1, true))
    local html = H.slurp(f)
    assert.matches("^<!DOCTYPE html>", html)
    assert.matches("<h2 id=\"compile%-1\">compile 1: poly</h2>", html)
    for _, st in ipairs { "input", "canonicalize", "cse" } do assert.truthy(html:find(">" .. st .. "<", 1, true), st) end
    assert.truthy(html:find('class="del"', 1, true) and html:find('class="add"', 1, true))
    assert.is_nil(html:find("<script", 1, true), "no script")
    assert.is_nil(html:find("https?://"), "nothing fetched")
    -- every element opened is closed, in order (void elements aside)
    local stack, void = {}, { meta = true, br = true }
    for slash, tag in html:gmatch "<(/?)([%a][%w]*)[^>]*>" do
      tag = tag:lower()
      if not void[tag] and tag ~= "!doctype" then
        if slash == "" then stack[#stack + 1] = tag
        else
          assert.equal(stack[#stack], tag)
          stack[#stack] = nil
        end
      end
    end
    assert.equal(0, #stack)
    -- in a real browser, where one is installed
    local browser
    for _, b in ipairs { "chromium", "chromium-browser", "google-chrome", "firefox" } do
      local p = io.popen("command -v " .. b .. " 2>/dev/null")
      local path = p:read "l"
      p:close()
      if path and path ~= "" then browser = path break end
    end
    if browser and not browser:find "firefox" then
      local dom = H.run { browser, "--headless", "--no-sandbox", "--dump-dom", "file://" .. f }
      assert.truthy(dom:find("compile 1: poly", 1, true), dom)
    end
    os.remove(f)
    if not browser then pending("no headless browser installed: the page was checked for structure only") end
  end)

  -- every <a href="#x"> of the page has its id="x"
  local function links_resolve(html)
    local ids = {}
    for id in html:gmatch ' id="([^"]+)"' do ids[id] = true end
    local n = 0
    for target in html:gmatch ' href="#([^"]+)"' do
      assert.truthy(ids[target], "a link to #" .. target .. " with no such anchor")
      n = n + 1
    end
    return n
  end

  it("shows a failed compile: the error (its script line linked), the stage where it stopped marked; never an empty file", function()
    local script, page = os.tmpname() .. ".lua", os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write [[
local tl = require "tilua"
local k = tl.tile_kernel("loose", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.f32, 2) } })
k:define(function(k, p)
  local acc = tl.dot(tl.load(p.A, { 0, 0 }, { 128, 64 }), tl.load(p.B, { 0, 0 }, { 256, 64 }), tl.zeros({ 128, 256 }, tl.f32))
  tl.store(p.C, { 0, 0 }, acc)
end)
k:compile()
]]
    f:close()
    local _, err, code = H.tilua_run { "--trace=" .. page, script }
    assert.equal(1, code)
    assert.matches("this dot is not in a pipelined loop", err)
    local html = assert(H.slurp(page))
    assert.truthy(html:find('<li class="failed"><a href="#compile-1">compile 1: loose</a> (failed)</li>', 1, true), html)
    assert.truthy(html:find('The compile failed at <a href="#c1-s3">stage 3, tileas-materialize-agents</a>', 1, true))
    -- the error's script line and every op's line link into the copy of the script
    assert.truthy(html:find('<a href="#L1-4">' .. script .. ':4</a>', 1, true))
    assert.truthy(html:find('<span id="L1-4">   4  ', 1, true))
    assert.truthy(html:find('<a class="l" href="#L1-5">', 1, true), "the store's line")
    assert.truthy(html:find('<tr class="failed"><td>3</td>', 1, true))
    assert.truthy(html:find('<details id="c1-s3" class="failed" open><summary>3 tileas-materialize-agents: the compile failed here', 1, true))
    assert.truthy(links_resolve(html) > 10)
    -- a script that compiles nothing still leaves a page
    _, err, code = H.tilua_run({ "--trace=" .. page, "-" }, "print(1)\n")
    assert.equal(0, code, err)
    html = assert(H.slurp(page))
    assert.truthy(html:find("The script has compiled nothing (yet).", 1, true))
    os.remove(script)
    os.remove(page)
  end)

  it("shows a cache hit as one, linking the compile it repeats, with stage navigation", function()
    local script, page = os.tmpname() .. ".lua", os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write [[
local tl = require "tilua"
local k = tl.kernel("twice", { params = { { "a", tl.ptr(tl.f32) } }, block = 32 })
k:define(function(k, p) p.a:store(tl.const(1.0, tl.f32) + tl.const(2.0, tl.f32)) end)
k:compile()
k:compile()
]]
    f:close()
    local _, err, code = H.tilua_run { "--trace=" .. page, script }
    assert.equal(0, code, err)
    local html = assert(H.slurp(page))
    assert.truthy(html:find("2 compiles, 1 of them answered by the compile cache", 1, true))
    assert.truthy(html:find('(cache hit of compile 1)', 1, true))
    assert.truthy(html:find('as <a href="#compile-1">compile 1</a>, whose result it gave again; nothing was compiled', 1, true))
    assert.is_nil(html:find('id="c2-s0"', 1, true), "the cache hit's stages are not shown again")
    -- every stage links the one before and after it
    assert.truthy(html:find('<details id="c1-s1"', 1, true))
    assert.truthy(html:find('<a href="#c1-s0">&larr; 0</a> <a href="#c1-s2">2 &rarr;</a>', 1, true))
    links_resolve(html)
    os.remove(script)
    os.remove(page)
  end)
end)

describe("the IR diff", function()
  local diff = require "tilua.diff"
  it("keeps value names across renumbering and shows what went before what came", function()
    local a = table.concat({
      "  %3 = arith.constant {value = 1 : i32} : i32",
      "  %4 = arith.constant {value = 1 : i32} : i32",
      "  %5 = arith.addi %3, %4 : i32",
      "  %6 = arith.mulf %0, %0 : f32",
      "  %7 = arith.mulf %0, %0 : f32",
      "  %8 = arith.addf %6, %7 : f32",
      "  tile.store %8, %2",
      "  %9 = arith.cmpi %1, %5 {predicate = \"sgt\"} : i1",
    }, "\n") .. "\n"
    local b = table.concat({
      "  %3 = arith.constant {value = 2 : i32} : i32",
      "  %4 = arith.mulf %0, %0 : f32",
      "  %5 = arith.addf %4, %4 : f32",
      "  tile.store %5, %2",
      "  %6 = arith.cmpi %1, %3 {predicate = \"sgt\"} : i1",
    }, "\n") .. "\n"
    local d, changed = diff.diff_ir(a, b)
    assert.is_true(changed)
    -- the renumbered lines are context, not changes; the real changes are there
    assert.matches("\n    tile%.store %%5, %%2\n", d)
    assert.matches("\n    %%6 = arith%.cmpi %%1, %%3", d)
    assert.equal(1, select(2, d:gsub("\n%-   %%%d+' = arith%.mulf", "")))
    assert.matches("\n%-   %%5 = arith%.addf [^\n]*\n%+   %%5 = arith%.addf %%4, %%4", d)
    assert.matches("%-   %%3 = arith%.addi %%3', %%4' : i32\n", d)
    assert.matches("\n%+   %%3 = arith%.constant {value = 2 : i32}", d)
    -- '-' lines of a hunk come before its '+' lines
    assert.is_nil(d:find("\n%+[^\n]*\n%-"))
    local plain = diff.diff(a, b)
    assert.is_true(select(2, plain:gsub("\n[-+]", "")) > select(2, d:gsub("\n[-+]", "")))
  end)
end)

describe("the Lua module", function()
  it("loads in a stock lua5.4 through package.cpath", function()
    local lua = os.getenv "LUA_EXECUTABLE"
    if not lua or lua == "" or H.sanitize then
      pending("stock lua5.4 not available (or sanitizer build: the stock interpreter is not instrumented)")
      return
    end
    local out, err, code = H.run({ lua, "-e",
      "package.cpath='" .. H.build .. "/lua/?.so;'..package.cpath; local tl=require'tilua'; " ..
      "local k=tl.kernel('k',{params={{'a',tl.i32}}}); k:define(function(k,p) local _=p.a+1 end); print(tl.module():print())" })
    assert.equal(0, code, err)
    assert.matches("arith.addi", out)
  end)
end)
