-- tilua.host.filecheck: the CHECK directives of pass fixtures (`tilua opt --check`).
local H = dofile "spec/helper.lua"
local fc = require "tilua.host.filecheck"
local core = require("tilua").core

local OUT = [[
module {
  %1 = arith.constant {value = 7 : i32} : i32
  %2 = arith.addi %0, %1 : i32
  tile.store %2, %0
}
]]

local function run(checks)
  return fc.check(OUT, fc.directives(checks, 1), "f.tir")
end

describe("filecheck", function()
  it("passes directives that hold", function()
    assert.same({}, run [[
// CHECK: module {
// CHECK-NEXT: %1 = arith.constant
// CHECK-SAME: {value = 7 : i32}
// CHECK-NOT: arith.muli
// CHECK: tile.store
// CHECK-NOT: arith.]])
  end)

  it("binds variables and matches patterns", function()
    assert.same({}, run [==[
// CHECK: [[C:%%%d+]] = arith.constant {value = {{%d+}} : i32}
// CHECK-NEXT: [[S:%%%d+]] = arith.addi %0, [[C]] : i32
// CHECK-NEXT: tile.store   [[S]], %0]==])
  end)

  it("reports each kind of failure at the directive's line", function()
    local p = run "// CHECK: arith.muli"
    assert.equal(1, #p)
    assert.matches("^f%.tir:1: CHECK: 'arith.muli' not found", p[1])
    p = run "// CHECK: module\n// CHECK-NEXT: tile.store"
    assert.matches("^f%.tir:2: CHECK%-NEXT: 'tile.store' not found on output line 2", p[1])
    p = run "// CHECK: arith.constant\n// CHECK-SAME: arith.addi"
    assert.matches("^f%.tir:2: CHECK%-SAME:", p[1])
    p = run "// CHECK: module\n// CHECK-NOT: arith.addi\n// CHECK: tile.store"
    assert.matches("^f%.tir:2: CHECK%-NOT: 'arith.addi' found at output line 3", p[1])
    p = run "// CHECK: tile.store\n// CHECK-NOT: }"
    assert.matches("^f%.tir:2: CHECK%-NOT: '}' found at output line 5", p[1])
    p = run "// CHECK: [[C:%%%d+]] = arith.constant\n// CHECK: tile.store [[C]]"
    assert.matches("^f%.tir:2: CHECK: 'tile.store %[%[C%]%]' not found", p[1])
  end)

  it("refuses malformed directives", function()
    local ok, e = pcall(fc.directives, "// CHECK-NXT: x", 3)
    assert.is_false(ok)
    assert.same({ line = 3, message = "unknown directive CHECK-NXT" }, e)
    ok, e = pcall(run, "// CHECK: [[X]]")
    assert.is_false(ok)
    assert.matches("used before it is defined", e.message)
  end)

  it("reads the options of RUN lines", function()
    assert.same({ "-p", "canonicalize,cse", "--split-input-file" },
      fc.run_options "// RUN: -p canonicalize,cse\nmodule {\n// RUN: --split-input-file\n")
  end)

  it("runs through tilua opt --check, failing at the directive's line", function()
    local f = os.tmpname()
    local h = assert(io.open(f, "w"))
    h:write [[
// RUN: -p canonicalize
module {
  tile.kernel {arg_names = ["p"], kernel_spec = {block = [32, 1, 1]}, sym_name = "k"} {
  ^bb0(%0: ptr<i32, global>):
    %1 = arith.constant {value = 2 : i32} : i32
    %2 = arith.muli %1, %1 : i32
    tile.store %2, %0
  }
}
// CHECK: arith.constant {value = 4 : i32}
// CHECK-NEXT: tile.store
]]
    h:close()
    local out, err, code = H.tilua_run { "opt", "--check", f }
    assert.equal(0, code, err)
    assert.equal("", out)
    h = assert(io.open(f, "a"))
    h:write "// CHECK-NOT: }\n"
    h:close()
    out, err, code = H.tilua_run { "opt", "--check", f }
    assert.equal(1, code, out)
    assert.matches(":12: CHECK%-NOT: '}' found at output line 6", err)
    os.remove(f)
  end)
end)

describe("pass fixtures", function()
  it("exist for every registered pass (spec/fixtures/passes/<pass>.tir, run by ctest)", function()
    local missing = {}
    for _, p in ipairs(core.passes()) do
      local path = ("spec/fixtures/passes/%s.tir"):format(p.name:gsub("%-", "_"))
      local f = io.open(path)
      if f then
        local text = f:read "a"
        f:close()
        assert.truthy(text:find("// RUN:", 1, true), path .. " has no RUN line")
        assert.truthy(text:find("// CHECK", 1, true), path .. " has no CHECK lines")
      else
        missing[#missing + 1] = path
      end
    end
    assert.same({}, missing)
  end)
end)
