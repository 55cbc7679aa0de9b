-- Structured fuzzing of every op's verifier and of the lowerings: random
-- modules whose ops all fit their signatures, with attributes drawn from what
-- the valid fixtures use (sometimes mutated), nested regions and terminators.
-- Every module must verify or be rejected with located diagnostics; the
-- verified ones go through the `ptx` pipeline and the emitter, which answer
-- with PTX or diagnostics. Never a crash (the sanitizer build runs this too).
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local parser = require "tilua.parser"
local core = tl.core

local SECONDS, seed = H.fuzz_budget()

-- Attribute dictionaries seen per op name in the valid fixtures, parsed into
-- ctx (attributes belong to one context; the bindings refuse another's).
local fixture_texts = {}
for _, f in ipairs(H.valid_fixtures()) do fixture_texts[f.path] = f.text end
local function collect_attrs(ctx)
  local seen = {}
  for f, text in pairs(fixture_texts) do
    local m = assert(parser.parse(text, { file = f, ctx = ctx }))
    m:walk(function(op)
      local list = seen[op:name()] or {}
      list[#list + 1] = op:attrs(true)
      seen[op:name()] = list
    end)
  end
  return seen
end

-- Split a signature into operand and result constraint lists: {c=, many=, opt=}.
local function sig_lists(sig)
  local lhs, rhs = sig:match "^(.-)%->(.*)$"
  local function toks(s)
    local out = {}
    for t in (s or ""):gmatch "%S+" do
      local many, opt = t:sub(-3) == "...", t:sub(-1) == "?"
      out[#out + 1] = { c = many and t:sub(1, -4) or opt and t:sub(1, -2) or t, many = many, opt = opt }
    end
    return out
  end
  return toks(lhs), toks(rhs)
end

describe("structured fuzzing", function()
  it(("every op's verifier and the lowerings (seed %d)"):format(seed), function()
    math.randomseed(seed)
    local rng = math.random
    local ops = {}
    for _, info in ipairs(core.ops()) do
      if info.name ~= "module" and info.name ~= "tile.kernel" then ops[#ops + 1] = info end
    end
    local idents = { "streamk", "data_parallel", "static_persistent", "sm100", "mbarrier", "bulk", "gmma",
                     "producer", "consumer", "x", "y" }
    local deadline = os.clock() + SECONDS
    local modules, verified, lowered = 0, 0, 0
    local samples = {} -- emitted PTX, a few of which ptxas must accept
    local ctx, seen_attrs, uses
    while os.clock() < deadline do
      if not ctx or uses == 32 then -- a fresh context every 32 modules
        if ctx then ctx:close() end
        ctx, uses = core.context(), 0
        seen_attrs = collect_attrs(ctx)
      end
      uses = uses + 1
      local i32 = core.type_int(32, ctx)
      local f32 = core.type_float("f32", ctx)
      local types = { core.type_int(1, ctx), core.type_int(8, ctx), core.type_int(16, ctx), i32,
                      core.type_int(64, ctx), core.type_index(ctx), core.type_float("f16", ctx),
                      core.type_float("bf16", ctx), f32, core.type_float("f64", ctx),
                      core.type_ptr(f32, "global"), core.type_ptr(i32, "global"),
                      core.type_ptr(core.type_int(64, ctx), "shared"), core.type_ptr(f32, "shared"),
                      core.type_memref(f32, { 8 }, "rmem"), core.type_memref(i32, { 4, 4 }, "rmem"),
                      core.type_memref(f32, { 4, 8 }, "shared"), core.type_vector(f32, { 4 }),
                      -- tile programs: register and shared tiles, with and without a layout
                      core.type_tile(f32, { 4, 8 }), core.type_tile(core.type_float("bf16", ctx), { 4, 8 }),
                      core.type_tile(core.type_int(1, ctx), { 4, 8 }), core.type_tile(f32, { 8 }),
                      core.type_tile(f32, { 4, 8 }, "rmem", { kind = "mma", warps = { 1, 1 } }),
                      core.type_tile(f32, { 4, 8 }, "shared", { kind = "shared", swizzle = 128 }) }
      for _, d in ipairs(core.dialect_types()) do
        local params = {}
        for tok in (d.params or ""):gmatch "%S+" do
          local base = tok:gsub("[%.%?]+$", "")
          if base == "int" then params[#params + 1] = rng(0, 4)
          elseif base == "ident" then params[#params + 1] = idents[rng(#idents)]
          elseif base == "type" then params[#params + 1] = types[rng(#types)] end
        end
        local t = core.type_dialect(d.name, params, ctx, true)
        if t then types[#types + 1] = t end
      end
      local m = ctx:module()
      local ok, err = pcall(function()
        local k = core.op_create(ctx, "tile.kernel", {}, {}, {
          sym_name = "fuzz", kernel_spec = { block = { 32 * rng(1, 8), 1, 1 } }, arg_names = { "a", "x", "n" },
        }, 1, m:region(1):entry())
        local body = k:region(1):add_block { i32, f32, core.type_index(ctx) }
        local pool = body:args()
        -- values of the other types come from unrealized casts
        for _ = 1, 6 do
          local t = types[rng(#types)]
          local c = core.op_create(ctx, "builtin.unrealized_conversion_cast", { pool[1] }, { t }, nil, 0, body)
          pool[#pool + 1] = c:result(1)
        end
        local function pick(c)
          local cands = {}
          for _, v in ipairs(pool) do
            if core.type_matches(v:type(), c) then cands[#cands + 1] = v end
          end
          return #cands > 0 and cands[rng(#cands)] or nil
        end
        local function build(block, depth)
          for _ = 1, rng(1, 10) do
            local info = ops[rng(#ops)]
            if not info.terminator then
              local opl, resl = sig_lists(info.signature)
              local operands, results, fits = {}, {}, true
              for _, t in ipairs(opl) do
                local n = t.many and rng(0, 2) or (t.opt and rng(0, 1)) or 1
                for _ = 1, n do
                  local v = pick(t.c)
                  if not v then fits = false break end
                  operands[#operands + 1] = v
                end
              end
              for _, t in ipairs(resl) do
                local n = t.many and rng(0, 2) or (t.opt and rng(0, 1)) or 1
                for _ = 1, n do
                  local cands = {}
                  for _, ty in ipairs(types) do if core.type_matches(ty, t.c) then cands[#cands + 1] = ty end end
                  if #cands == 0 then fits = false break end
                  results[#results + 1] = cands[rng(#cands)]
                end
              end
              if fits then
                local choices = seen_attrs[info.name]
                local attrs = choices and choices[rng(#choices)] or {}
                if rng(4) == 1 then -- mutate one attribute
                  local copy = {}
                  for kk, vv in pairs(attrs) do copy[kk] = vv end
                  local keys = {}
                  -- (not the text of nvvm.inline_ptx: the escape hatch is PTX nobody checks)
                  for kk in pairs(copy) do
                    if not (info.name == "nvvm.inline_ptx" and kk == "ptx") then keys[#keys + 1] = kk end
                  end
                  if #keys > 0 then
                    local key = keys[rng(#keys)]
                    copy[key] = ({ -1, 0, 1, 7, 33, 1 << 40, "bogus", true, {}, { 1, 2 } })[rng(10)]
                  end
                  attrs = copy
                end
                local op = core.op_create(ctx, info.name, operands, results, attrs, info.regions, block)
                for _, r in ipairs(op:results()) do pool[#pool + 1] = r end
                for r = 1, info.regions do
                  if depth < 2 and rng(3) > 1 then
                    local inner = op:region(r):add_block(rng(2) == 1 and { core.type_index(ctx) } or {})
                    build(inner, depth + 1)
                    core.op_create(ctx, "scf.yield", {}, {}, nil, 0, inner)
                  end
                end
              end
            end
          end
        end
        build(body, 0)
      end)
      assert.is_true(ok, err)
      modules = modules + 1
      local vok, vmsg = m:verify()
      if vok then
        verified = verified + 1
        local lok, lmsg = core.run_pipeline(m, "ptx")
        if lok then
          lowered = lowered + 1
          local text, emsg = core.emit_ptx(m)
          assert.is_true(text ~= nil or type(emsg) == "string")
          if text and #samples < 20 and rng(50) == 1 then samples[#samples + 1] = text end
        else
          assert.is_string(lmsg)
        end
      else
        assert.is_string(vmsg)
      end
    end
    if ctx then ctx:close() end
    assert.is_true(modules > 10)
    print(("\nstructured fuzz: %d modules, %d verified, %d lowered, seed %d"):format(modules, verified, lowered, seed))
    if H.ptxas() then
      for _, text in ipairs(samples) do
        local ok, log = tl.ptxas(text)
        assert.is_true(ok, "ptxas rejected emitted PTX:\n" .. tostring(log) .. "\n" .. text)
      end
    end
  end)
end)
