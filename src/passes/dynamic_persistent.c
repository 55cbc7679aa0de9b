/*
** dynamic_persistent.c -- the `tileas-dynamic-persistent` pass: a tile
** program becomes a dynamic persistent kernel. A CTA no longer computes the one program it was
*launched for; it
** keeps claiming program ids from the tile scheduler until the grid is done:
**
**   %p0 = tileas.get_program_id {dim = "x"}       (the CTA's first program)
**   scf.while (%p = %p0) {
**     %v = tileas.is_valid_program_id %p
**     scf.condition %v, %p
**   } do {
**   ^(%q):
**     <the kernel's body, its program ids read from %q>
**     %next = tileas.cancel_next_program_id
**     scf.yield %next
**   }
**
** Program ids are linear in the loop: a body that reads only dim x reads %q
** (every get_program_id maps to the loop value); one that reads y gets
** x = q mod nx, y = q / nx; one that reads z also z = (q / nx / ny) mod nz,
** with nx, ny, nz from tileas.num_programs (nz is 1 past the last program,
** but its num_programs op says that the program tells programs along z
** apart: the lowering's scheduler counts them, the launch accepts them). The body moves into the
*loop (cloning it would be the
** same: nothing in it depends on the iteration). A kernel that already has an
** scf.while whose condition region asks is_valid_program_id is left as it is,
** with the warning "Kernel is already dynamic persistent". Only tile programs
** (kernels holding tileas ops) are rewritten. A tile.griddepcontrol_wait /
** launch_dependents that leads the body stays before the loop.
*/
#include "../dialects/dialects.h"
#include "rewrite.h"

static bool is_program_id(const IrOp *op) { return op->kind == OP_TILEAS_GET_PROGRAM_ID; }
static bool is_valid_id(const IrOp *op) { return op->kind == OP_TILEAS_IS_VALID_PROGRAM_ID; }
static bool is_while(const IrOp *op) { return op->kind == OP_SCF_WHILE; }

static bool is_griddep(const IrOp *op) {
  return op->kind == OP_TILE_GRIDDEP_WAIT || op->kind == OP_TILE_GRIDDEP_LAUNCH;
}

static bool is_tileas(const IrOp *op) { return ir_op_in_dialect(op->kind, "tileas"); }

/* The idempotence guard: an scf.while whose before-region asks is_valid_program_id. */
static bool already_persistent(IrOp *k) {
  IrOpVec loops = {0};
  bool found = false;
  rw_collect(k, is_while, &loops);
  for (uint32_t i = 0; i < loops.n && !found; i++)
    for (IrOp *o = loops.v[i]->regions[0].first ? loops.v[i]->regions[0].first->first : NULL;
         o && !found; o = o->next)
      found = rw_find(o, is_valid_id) != NULL;
  ir_opvec_free(&loops);
  return found;
}

static IrValue *num_programs(Rewriter *r, int dim) {
  IrOp *op = rw_op(r, OP_TILEAS_NUM_PROGRAMS, 0, NULL, r->i32);
  rw_set_str(r, op, "dim", DIM_names[dim]);
  return &op->results[0];
}

/* The program id along each dim from the linear loop value q (the builder is
** at the start of the loop body); dims past the highest one read stay NULL. */
static void decompose(Rewriter *r, IrValue *q, int top, IrValue *pid[3]) {
  if (top == 0) {
    pid[0] = q;
    return;
  }
  IrValue *nx = num_programs(r, 0), *rest = rw_bin(r, OP_ARITH_DIVUI, q, nx);
  pid[0] = rw_bin(r, OP_ARITH_REMUI, q, nx);
  if (top == 1) {
    pid[1] = rest;
    return;
  }
  IrValue *ny = num_programs(r, 1);
  pid[1] = rw_bin(r, OP_ARITH_REMUI, rest, ny);
  IrValue *zs = rw_bin(r, OP_ARITH_DIVUI, rest, ny); /* (in order: the IR's numbering follows) */
  pid[2] = rw_bin(r, OP_ARITH_REMUI, zs, num_programs(r, 2));
}

/* Build the scf.while at the start of the kernel and move its ops into the body. */
static IrResult persist(Rewriter *r, IrOp *k) {
  IrOpVec ids = {0};
  rw_collect(k, is_program_id, &ids);
  int top = 0;
  for (uint32_t i = 0; i < ids.n; i++) {
    int d = (int)ir_attrs_TILEAS_GET_PROGRAM_ID(ids.v[i]).dim;
    if (d > top) top = d;
  }
  IrBlock *entry = r->entry;
  IrOp *first = entry->first;
  ir_builder_at_start(&r->b, entry);
  r->b.loc = k->loc;
  IrOp *init = rw_op(r, OP_TILEAS_GET_PROGRAM_ID, 0, NULL, r->i32);
  rw_set_str(r, init, "dim", "x");
  IrValue *init_v = &init->results[0];
  IrOp *loop = ir_build(&r->b, OP_SCF_WHILE, 1, &init_v, 1, &r->i32, 2);
  IrBlock *before = ir_region_ensure_block(r->ctx, &loop->regions[0]);
  IrBlock *after = ir_region_ensure_block(r->ctx, &loop->regions[1]);
  IrValue *p = ir_block_add_arg(r->ctx, before, r->i32),
          *q = ir_block_add_arg(r->ctx, after, r->i32);
  ir_builder_at_end(&r->b, before);
  IrValue *cond[2] = {rw_op1(r, OP_TILEAS_IS_VALID_PROGRAM_ID, 1, &p, r->i1), p};
  rw_op(r, OP_SCF_CONDITION, 2, cond, NULL);
  /* A programmatic dependent launch's wait and trigger that lead the body stay
  ** before the loop: once per CTA, before its first program's reads (as the
  ** stdlib GEMM's), not once per program (docs/PERF.md: 6-16 % slower). */
  while (first && is_griddep(first)) {
    IrOp *next = first->next;
    ir_op_unlink(first);
    ir_op_insert_before(init, first);
    first = next;
  }
  while (first) { /* the kernel's ops, in order, into the loop body */
    IrOp *next = first->next;
    ir_op_unlink(first);
    ir_block_append(after, first);
    first = next;
  }
  ir_builder_at_start(&r->b, after);
  IrValue *pid[3] = {NULL, NULL, NULL};
  decompose(r, q, top, pid);
  for (uint32_t i = 0; i < ids.n; i++)
    rw_replace(ids.v[i], pid[ir_attrs_TILEAS_GET_PROGRAM_ID(ids.v[i]).dim]);
  ir_opvec_free(&ids);
  ir_builder_at_end(&r->b, after);
  IrValue *next = rw_op1(r, OP_TILEAS_CANCEL_NEXT_PROGRAM_ID, 0, NULL, r->i32);
  rw_op(r, OP_SCF_YIELD, 1, &next, NULL);
  return IR_OK;
}

static IrResult persist_kernel(Rewriter *r, IrOp *k) {
  if (!rw_find(k, is_tileas)) return IR_OK;
  if (already_persistent(k)) {
    ir_op_warning(k, "Kernel is already dynamic persistent");
    return IR_OK;
  }
  return persist(r, k);
}

IrResult pass_dynamic_persistent(IrOp *module, IrPassCtx *pc) {
  Rewriter r;
  return rw_run(&r, sizeof r, module, pc, persist_kernel);
}
