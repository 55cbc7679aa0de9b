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
    out = H.tilua_run { "-e", "print(1+1)" }
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
    local _, err, code = H.tilua_run({ "opt", "-", "-p", "cleanup", "--print-ir-after-all", "--timing" },
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

describe("the REPL in a pseudo-terminal", function()
  it("clears the line on Ctrl-C while typing and interrupts a running line, and the session goes on", function()
    local ok = os.execute "command -v script >/dev/null 2>&1"
    if not ok then pending("no `script` (util-linux) to make a pseudo-terminal") return end
    if H.sanitize then pending("timed keystrokes: the normal build only") return end
    local steps = {
      "printf 'x = 4\\n'", "sleep 1.5", "printf 'abc'", "sleep 0.4", "printf '\\003'", "sleep 0.4",
      "printf '=x+1\\n'", "sleep 0.4", "printf 'for i = 1, 1e12 do end\\n'", "sleep 1", "printf '\\003'",
      "sleep 0.6", "printf '=x+2\\n'", "sleep 0.6", "printf ':quit\\n'",
    }
    local cmd = ("(%s) | timeout 30 script -qfec %s /dev/null"):format(table.concat(steps, "; "),
      H.quote("TILUA_HISTORY= " .. H.tilua .. " -i")) -- no history file written by a test
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("a"):gsub("\r", ""):gsub("\27%[%?2004[hl]", "")
    p:close()
    assert.matches("> abc%^C", out)       -- the typed line was dropped ...
    assert.matches("\n5\n", out)          -- ... and the session went on
    assert.matches("stdin:%d+: interrupted!", out)
    assert.matches("\n6\n", out)
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
end)

describe("the IR diff", function()
  local diff = require "tilua.host.diff"
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
