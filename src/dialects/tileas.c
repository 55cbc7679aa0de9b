/*
** tileas.c -- verifiers of the tile-program level (tileas.def): tile layouts,
** the global tensors, and the shape rules of the tile ops. docs/tileprog.md
** says what each op means.
*/
#include <string.h>

#include "../ir/checked.h"
#include "kernel.h"
#include "sm90_limits.h"

#define TILEAS_MAX_TENSOR_RANK 5 /* what a TMA box can address */

/* {======================================================================
** Layouts and tensors
** ======================================================================= */

/* Is a an array of n positive integers? */
static bool positive_ints(const IrAttr *a, uint32_t n) {
  if (a->kind != IR_ATTR_ARRAY || a->u.arr.n != n) return false;
  for (uint32_t i = 0; i < n; i++)
    if (a->u.arr.elems[i]->kind != IR_ATTR_INT || a->u.arr.elems[i]->u.i < 1) return false;
  return true;
}

/* A blocked layout's distribution over the threads (tileas-assign-layouts):
** `size` elements a thread holds contiguously per dim, `lanes` of a warp per
** dim (powers of two, 32 in all), with its `warps`; all three or none. */
static bool check_distribution(IrOp *op, const IrType *t, int kind) {
  const IrAttr *size = ir_attr_dict_get(t->layout, "size"),
               *lanes = ir_attr_dict_get(t->layout, "lanes");
  if (!size && !lanes) return true;
  if (kind != LAYOUT_BLOCKED || !size || !lanes || !ir_attr_dict_get(t->layout, "warps")) {
    ir_op_error(op,
                "%s: 'size' and 'lanes' distribute a blocked layout, with its 'warps' (all three)",
                ir_op_type_str(op, t));
    return false;
  }
  int64_t n = 1; /* 0 once it cannot be 32: a product past 32 stops there, so it cannot overflow */
  for (uint32_t d = 0; d < t->rank && n; d++) {
    int64_t x = lanes->u.arr.elems[d]->u.i;
    n = (x & (x - 1)) || x > 32 || n * x > 32 ? 0 : n * x;
  }
  if (n != 32) {
    ir_op_error(op, "the layout's 'lanes' of %s must be powers of two, 32 in all (a warp's lanes)",
                ir_op_type_str(op, t));
    return false;
  }
  return true;
}

bool tileas_check_layout(IrOp *op, const IrType *t) {
  if (t->kind != IR_TY_TILE || !t->layout) return true;
  const IrAttr *l = t->layout, *kind = ir_attr_dict_get(l, "kind");
  int k = kind && kind->kind == IR_ATTR_STR ? ir_enum_index(LAYOUT_KIND_names, kind->u.str.s) : -1;
  if (k < 0) {
    ir_op_error(
        op,
        "the layout of %s needs a 'kind': blocked, mma, mma_operand, slice, replicated or shared",
        ir_op_type_str(op, t));
    return false;
  }
  if ((k == LAYOUT_SHARED) != (t->space == IR_MS_SHARED)) {
    ir_op_error(op,
                "%s: a layout of kind 'shared' is for shared tiles, the others for register tiles",
                ir_op_type_str(op, t));
    return false;
  }
  static const char *const per_dim[] = {"warps", "cta", "cta_stride", "size", "lanes"};
  for (int i = 0; i < 5; i++) {
    const IrAttr *a = ir_attr_dict_get(l, per_dim[i]);
    if (a && !positive_ints(a, t->rank)) {
      ir_op_error(op, "the layout's '%s' of %s must be %u positive integers, one per dim",
                  per_dim[i], ir_op_type_str(op, t), t->rank);
      return false;
    }
  }
  if (!check_distribution(op, t, k)) return false;
  const IrAttr *sw = ir_attr_dict_get(l, "swizzle");
  if (sw && (k != LAYOUT_SHARED || sw->kind != IR_ATTR_INT ||
             (sw->u.i != 0 && sw->u.i != 32 && sw->u.i != 64 && sw->u.i != 128))) {
    ir_op_error(op,
                "the layout's 'swizzle' of %s must be 0, 32, 64 or 128 bytes, on a shared layout",
                ir_op_type_str(op, t));
    return false;
  }
  if (k == LAYOUT_SLICE) {
    const IrAttr *parent = ir_attr_dict_get(l, "parent"), *dim = ir_attr_dict_get(l, "dim");
    if (!parent || parent->kind != IR_ATTR_DICT || !dim || dim->kind != IR_ATTR_INT ||
        dim->u.i < 0 || dim->u.i > (int64_t)t->rank) {
      ir_op_error(
          op, "the slice layout of %s needs a 'parent' layout and the 'dim' (0 to %u) it removes",
          ir_op_type_str(op, t), t->rank);
      return false;
    }
  }
  return true;
}

bool tileas_check_tensor(IrOp *op, const IrType *t) {
  const IrType *elem = t->params[0]->u.ty;
  int64_t rank = ir_type_param_int(t, 1, 0);
  if (!ir_type_is_float(elem) && !ir_type_is_int(elem)) {
    ir_op_error(op, "%s: the element type must be an integer or a float", ir_op_type_str(op, t));
    return false;
  }
  if (rank < 1 || rank > TILEAS_MAX_TENSOR_RANK) {
    ir_op_error(op, "%s: the rank must be in [1, %d]", ir_op_type_str(op, t),
                TILEAS_MAX_TENSOR_RANK);
    return false;
  }
  return true;
}

/* The layouts of every tile operand and result of op. */
static bool check_layouts(IrOp *op) {
  for (uint32_t i = 0; i < op->noperands; i++)
    if (!tileas_check_layout(op, op->operands[i].value->type)) return false;
  for (uint32_t i = 0; i < op->nresults; i++)
    if (!tileas_check_layout(op, op->results[i].type)) return false;
  return true;
}

/* Does a tile type have a static shape (else the error)? */
static bool static_tile(IrOp *op, const IrType *t) {
  if (ir_type_has_static_shape(t)) return true;
  ir_op_error(op, "%s: tiles have static shapes", ir_op_type_str(op, t));
  return false;
}

static bool same_shape(const IrType *a, const IrType *b) {
  return a->rank == b->rank && memcmp(a->shape, b->shape, a->rank * sizeof(int64_t)) == 0;
}

static IrResult need_rmem(IrOp *op, const IrType *t, const char *what) {
  if (t->space == IR_MS_RMEM) return IR_OK;
  ir_op_error(op, "%s must be a register tile, got %s", what, ir_op_type_str(op, t));
  return IR_FAIL;
}

/* }====================================================================== */

/* {======================================================================
** Memory
** ======================================================================= */

IrResult tileas_verify_tiled_access(IrOp *op) {
  bool store = op->kind == OP_TILEAS_TILED_STORE;
  const IrType *tensor = op->operands[0].value->type;
  const IrType *tile = store ? op->operands[op->noperands - 1].value->type : op->results[0].type;
  if (!tileas_check_tensor(op, tensor)) return IR_FAIL;
  if (tile->kind != IR_TY_TILE)
    return dia_type_error(op, "expected the stored tile last, got %s", tile);
  uint32_t ncoords = op->noperands - 1 - store;
  for (uint32_t i = 1; i <= ncoords; i++)
    if (!ir_type_is_int_width(op->operands[i].value->type, 32))
      return dia_type_error(op, "tile coordinates are i32, got %s", op->operands[i].value->type);
  int64_t rank = ir_type_param_int(tensor, 1, 0);
  if (ncoords != rank) {
    ir_op_error(op, "expected %lld tile coordinates (the tensor's rank), got %u", (long long)rank,
                ncoords);
    return IR_FAIL;
  }
  if (tile->rank > rank) { /* a tile may leave out leading dims: their coordinates index elements */
    ir_op_error(op, "a tile of rank %u for a tensor of rank %lld", tile->rank, (long long)rank);
    return IR_FAIL;
  }
  if (tile->elem != tensor->params[0]->u.ty) {
    ir_op_error(op, "the tile's element type %s differs from the tensor's %s",
                ir_op_type_str(op, tile->elem), ir_op_type_str(op, tensor->params[0]->u.ty));
    return IR_FAIL;
  }
  const IrAttr *pad = ir_attrs_TILEAS_TILED_LOAD(op).padding;
  if (pad && (store || (pad->kind != IR_ATTR_INT && pad->kind != IR_ATTR_FLOAT) ||
              (pad->kind == IR_ATTR_FLOAT && !ir_type_is_float(tile->elem)))) {
    ir_op_error(
        op,
        "'padding' is the number a load reads out of bounds (a float for a float tile), on loads only");
    return IR_FAIL;
  }
  int reduce = ir_attrs_TILEAS_TILED_LOAD(op).reduce;
  if (reduce >= 0 && (!store || reduce != TMA_REDUCE_ADD)) {
    ir_op_error(op,
                "'reduce' is `add` (a store that adds the tile into the tensor), on stores only");
    return IR_FAIL;
  }
  if (reduce >= 0 && !(ir_type_is_float(tile->elem) && tile->elem->fkind == IR_F32) &&
      !ir_type_is_int_width(tile->elem, 32)) {
    ir_op_error(op, "a reduce-add store adds f32 or i32 elements (atomically), got %s",
                ir_op_type_str(op, tile->elem));
    return IR_FAIL;
  }
  return static_tile(op, tile) && check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_alloc_tensor(IrOp *op) {
  return static_tile(op, op->results[0].type) && check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_copy(IrOp *op) {
  const IrType *src = op->operands[0].value->type, *dst = op->operands[1].value->type;
  if (!same_shape(src, dst) || src->elem != dst->elem) {
    ir_op_error(op, "copies %s into %s: the shapes and element types must match",
                ir_op_type_str(op, src), ir_op_type_str(op, dst));
    return IR_FAIL;
  }
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_convert_layout(IrOp *op) {
  const IrType *from = op->operands[0].value->type, *to = op->results[0].type;
  if (!same_shape(from, to) || from->elem != to->elem)
    return dia_type_error(op, "the result must have the operand's shape and element type, got %s",
                          to);
  if (from->space == IR_MS_RMEM && to->space != IR_MS_RMEM)
    return dia_type_error(
        op,
        "a register tile converts only into registers (tileas.copy writes shared tiles), got %s",
        to);
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

/* }====================================================================== */

/* {======================================================================
** Compute
** ======================================================================= */

IrResult tileas_verify_splat(IrOp *op) {
  const IrType *t = op->results[0].type;
  if (need_rmem(op, t, "the result")) return IR_FAIL;
  if (op->operands[0].value->type != t->elem)
    return dia_type_error(op, "the operand must have the tile's element type, got %s",
                          op->operands[0].value->type);
  return static_tile(op, t) && check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_iota(IrOp *op) {
  const IrType *t = op->results[0].type;
  if (need_rmem(op, t, "the result")) return IR_FAIL;
  if (!ir_type_is_int_width(t->elem, 32))
    return dia_type_error(op, "the result is a tile of i32, got %s", t);
  if (ir_attrs_TILEAS_IOTA(op).dim >= t->rank) {
    ir_op_error(op, "dim %lld of a tile of rank %u", (long long)ir_attrs_TILEAS_IOTA(op).dim,
                t->rank);
    return IR_FAIL;
  }
  return static_tile(op, t) && check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_dot(IrOp *op) {
  IrAttrs_TILEAS_DOT at = ir_attrs_TILEAS_DOT(op);
  const IrType *a = op->operands[0].value->type, *b = op->operands[1].value->type,
               *acc = op->operands[2].value->type, *r = op->results[0].type;
  if (a->rank != 2 || b->rank != 2 || acc->rank != 2) {
    ir_op_error(op, "a, b and acc are tiles of rank 2");
    return IR_FAIL;
  }
  if (r != acc) return dia_type_error(op, "the result must have the accumulator's type %s", acc);
  if (need_rmem(op, acc, "the accumulator")) return IR_FAIL;
  if (a->elem != b->elem) {
    ir_op_error(op, "a and b have different element types %s and %s", ir_op_type_str(op, a->elem),
                ir_op_type_str(op, b->elem));
    return IR_FAIL;
  }
  int64_t m = a->shape[at.transpose_a], ka = a->shape[!at.transpose_a];
  int64_t kb = b->shape[at.transpose_b], n = b->shape[!at.transpose_b];
  if (ka != kb || acc->shape[0] != m || acc->shape[1] != n) {
    ir_op_error(
        op,
        "shapes do not multiply: a [M, K] = [%lld, %lld], b [K, N] = [%lld, %lld], acc [%lld, %lld]",
        (long long)m, (long long)ka, (long long)kb, (long long)n, (long long)acc->shape[0],
        (long long)acc->shape[1]);
    return IR_FAIL;
  }
  if (at.fp8 >= 0) { /* fp8 bytes in 8-bit integer tiles, f32 accumulation */
    if (!ir_type_is_int_width(a->elem, 8))
      return dia_type_error(op, "an fp8 dot takes tiles of 8-bit integers (fp8 bytes), got %s", a);
    if (!ir_type_is_float(acc->elem) || acc->elem->fkind != IR_F32)
      return dia_type_error(op, "an fp8 dot accumulates in f32, got %s", acc);
    return check_layouts(op) ? IR_OK : IR_FAIL;
  }
  bool int_acc = ir_type_is_int_width(acc->elem, 32);
  if (!ir_type_is_float(acc->elem) && !int_acc)
    return dia_type_error(op, "the accumulator's elements are floats or i32, got %s", acc->elem);
  if (int_acc != ir_type_is_int(a->elem))
    return dia_type_error(op, "integer operands accumulate in i32, floats in a float, got %s", acc);
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_math(IrOp *op) {
  const IrType *t = op->results[0].type;
  if (!ir_type_is_float(t->elem)) return dia_type_error(op, "needs a float tile, got %s", t);
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_reduce(IrOp *op) {
  const IrType *t = op->operands[0].value->type, *r = op->results[0].type;
  int64_t dim = ir_attrs_TILEAS_REDUCE(op).dim;
  if (dim >= t->rank) {
    ir_op_error(op, "dim %lld is out of range for a tile of rank %u", (long long)dim, t->rank);
    return IR_FAIL;
  }
  if (t->rank == 1) {
    if (r != t->elem)
      return dia_type_error(op, "reducing a rank-1 tile gives its element type, got %s", r);
    return check_layouts(op) ? IR_OK : IR_FAIL;
  }
  int64_t shape[16];
  for (uint32_t i = 0, j = 0; i < t->rank; i++)
    if (i != dim) shape[j++] = t->shape[i];
  if (r->kind != IR_TY_TILE || r->elem != t->elem || r->rank != t->rank - 1 ||
      memcmp(r->shape, shape, r->rank * sizeof(int64_t)) != 0)
    return dia_type_error(op, "the result must be the operand without dimension dim, got %s", r);
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_broadcast(IrOp *op) {
  const IrType *t = op->operands[0].value->type, *r = op->results[0].type;
  if (r->rank != t->rank || r->elem != t->elem)
    return dia_type_error(op, "the result must have the operand's rank and element type, got %s",
                          r);
  for (uint32_t i = 0; i < t->rank; i++)
    if (t->shape[i] != r->shape[i] && t->shape[i] != 1) {
      ir_op_error(op, "dim %u of extent %lld cannot broadcast to %lld (only size-1 dims widen)", i,
                  (long long)t->shape[i], (long long)r->shape[i]);
      return IR_FAIL;
    }
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_transpose(IrOp *op) {
  const IrType *t = op->operands[0].value->type, *r = op->results[0].type;
  if (t->rank != 2 || r->rank != 2 || r->elem != t->elem || r->shape[0] != t->shape[1] ||
      r->shape[1] != t->shape[0])
    return dia_type_error(
        op, "transposes a rank-2 tile into one of its dims swapped and its element type, got %s",
        r);
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_expand_dim(IrOp *op) {
  const IrType *t = op->operands[0].value->type, *r = op->results[0].type;
  int64_t dim = ir_attrs_TILEAS_EXPAND_DIM(op).dim;
  if (dim > t->rank) {
    ir_op_error(op, "dim %lld is out of range for a tile of rank %u", (long long)dim, t->rank);
    return IR_FAIL;
  }
  bool ok = r->rank == t->rank + 1 && r->elem == t->elem && r->shape[dim] == 1;
  for (uint32_t i = 0, j = 0; ok && i < r->rank; i++)
    if (i != dim) ok = r->shape[i] == t->shape[j++];
  if (!ok)
    return dia_type_error(op, "the result must be the operand with a size-1 dim at dim, got %s", r);
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_extract_slice(IrOp *op) {
  IrAttrs_TILEAS_EXTRACT_SLICE a = ir_attrs_TILEAS_EXTRACT_SLICE(op);
  const IrType *t = op->operands[0].value->type, *r = op->results[0].type;
  if (a.offsets.n != t->rank || a.sizes.n != t->rank) {
    ir_op_error(op, "offsets and sizes need one entry per dim (%u)", t->rank);
    return IR_FAIL;
  }
  if (r->rank != t->rank || r->elem != t->elem)
    return dia_type_error(op, "the result must have the operand's rank and element type, got %s",
                          r);
  for (uint32_t i = 0; i < t->rank; i++) {
    int64_t off = ir_attr_list_int(a.offsets, i), size = ir_attr_list_int(a.sizes, i);
    if (size != r->shape[i]) {
      ir_op_error(op, "sizes[%u] = %lld differs from the result's extent %lld", i, (long long)size,
                  (long long)r->shape[i]);
      return IR_FAIL;
    }
    if (off < 0 || off > t->shape[i] - size) {
      int64_t end;
      if (ck_add(off, size, &end))
        ir_op_error(op, "the slice [%lld, %lld) of dim %u is outside [0, %lld)", (long long)off,
                    (long long)end, i, (long long)t->shape[i]);
      else
        ir_op_error(op, "the slice of dim %u at %lld, %lld long, is outside [0, %lld)", i,
                    (long long)off, (long long)size, (long long)t->shape[i]);
      return IR_FAIL;
    }
  }
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

IrResult tileas_verify_extract(IrOp *op) {
  const IrType *t = op->operands[0].value->type;
  if (op->noperands - 1 != t->rank) {
    ir_op_error(op, "expected %u indices (the tile's rank), got %u", t->rank, op->noperands - 1);
    return IR_FAIL;
  }
  if (op->results[0].type != t->elem)
    return dia_type_error(op, "the result must be the tile's element type %s", t->elem);
  if (need_rmem(op, t, "the operand")) return IR_FAIL;
  return check_layouts(op) ? IR_OK : IR_FAIL;
}

/* }====================================================================== */

/* {======================================================================
** Agents
** ======================================================================= */

IrResult tileas_verify_agent(IrOp *op) {
  if (!kernel_of(op)) {
    ir_op_error(op, "must be inside a tile.kernel");
    return IR_FAIL;
  }
  IrOp *outer = ir_op_ancestor(op, OP_TILEAS_AGENT);
  if (outer) {
    IrDiag *d = ir_op_error(op, "agents do not nest");
    ir_op_note(d, outer, "the enclosing agent");
    return IR_FAIL;
  }
  return IR_OK;
}

/* The emitter writes the text between quotes as it is: printable ASCII only, no
** quote or backslash, so that a text cannot end the directive and write PTX of its own. */
IrResult tileas_verify_pragma(IrOp *op) {
  const IrAttr *t = ir_op_attr(op, "text");
  for (size_t i = 0; t && i < t->u.str.len; i++) {
    unsigned char ch = (unsigned char)t->u.str.s[i];
    if (ch < 0x20 || ch > 0x7e || ch == '"' || ch == '\\') {
      ir_op_error(
          op,
          "text: character #%zu (code %u) cannot be in a .pragma string (printable ASCII but '\"' "
          "and '\\')",
          i + 1, ch);
      return IR_FAIL;
    }
  }
  return IR_OK;
}

IrResult tileas_verify_agent_switch(IrOp *op) {
  IrAttrs_TILEAS_AGENT_SWITCH a = ir_attrs_TILEAS_AGENT_SWITCH(op);
  uint32_t n = a.num_warps.n;
  if (a.warp_id.n != n || a.agent_strides.n != n) {
    ir_op_error(op, "num_warps, warp_id and agent_strides need one entry per case (%u, %u, %u)", n,
                a.warp_id.n, a.agent_strides.n);
    return IR_FAIL;
  }
  bool hole[SM90_MAX_WARPS] = {false};
  int64_t prev = -1;
  for (uint32_t i = 0; i < a.holes.n; i++) {
    int64_t h = ir_attr_list_int(a.holes, i);
    if (h <= prev || h >= n) {
      ir_op_error(op, "holes must be ascending entry indexes below %u, got %lld", n, (long long)h);
      return IR_FAIL;
    }
    hole[h] = true;
    prev = h;
  }
  for (uint32_t i = 0; i < n; i++)
    if (ir_attr_list_int(a.num_warps, i) < 1 || ir_attr_list_int(a.warp_id, i) < 0 ||
        ir_attr_list_int(a.agent_strides, i) < 1) {
      ir_op_error(op, "entry %u needs num_warps >= 1, warp_id >= 0 and a stride >= 1", i);
      return IR_FAIL;
    }
  IrBlock *body = op->regions[0].first;
  uint32_t e = 0;
  for (IrOp *o = body ? body->first : NULL; o; o = o->next) {
    if (o->kind != OP_TILEAS_AGENT) {
      ir_op_error(o, "an agent_switch holds only tileas.agent ops");
      return IR_FAIL;
    }
    while (e < n && hole[e])
      e++;
    if (e == n) {
      ir_op_error(o, "more agents than the %u entries that are not holes", n - a.holes.n);
      return IR_FAIL;
    }
    int64_t want = ir_attr_list_int(a.num_warps, e), have = ir_attrs_TILEAS_AGENT(o).num_warps;
    if (want != have) {
      ir_op_error(o, "num_warps = %lld, but its entry %u of the agent_switch says %lld",
                  (long long)have, e, (long long)want);
      return IR_FAIL;
    }
    e++;
  }
  while (e < n && hole[e])
    e++;
  if (e != n) {
    ir_op_error(op, "entry %u has no agent (not a hole)", e);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** Stamps: what the rows of tileas.def's stamps cannot say
** ======================================================================= */

/* How many CTAs share a tile's bytes: its layout's CTA part (a CTA holds its
** block of the tile, of every piece of a `cta_repeat`); a tile not split yet
** in a kernel of n CTAs a cluster: n, the most tileas-plan-cta can split it
** (what it does not split, convert-tile-to-nvvm's shared memory check sees). */
static int64_t ctas_sharing(const IrOp *op, const IrType *t) {
  const IrAttr *cta = t->layout ? ir_attr_dict_get(t->layout, "cta") : NULL;
  if (!cta) {
    KernelSpec ks = kernel_spec_of(op);
    return ks.ok && ks.ctas > 1 ? ks.ctas : 1;
  }
  int64_t n = 1;
  if (!positive_ints(cta, t->rank)) return 1; /* the layout's check says */
  for (uint32_t i = 0; i < t->rank && n <= SM90_MAX_SMEM; i++)
    n *= cta->u.arr.elems[i]->u.i;
  return n;
}

/* A ring (tileas.stages on an alloc_tensor): a CTA's stages fit the shared
** memory of one block, so that neither a lowering nor the protocol model
** sizes a ring past what a block can hold. */
IrResult tileas_check_stages(IrOp *op) {
  if (op->nresults != 1 || op->results[0].type->kind != IR_TY_TILE)
    return IR_OK; /* the signature says */
  const IrType *t = op->results[0].type;
  int64_t bytes = dia_type_storage_bytes(t), stages = ir_stamp_TILEAS_STAGES(op).value,
          n = ctas_sharing(op, t);
  if (bytes <= 0) return IR_OK; /* a dynamic shape: static_tile says */
  bytes = (bytes + n - 1) / n;
  if (stages <= SM90_MAX_SMEM / bytes) return IR_OK;
  ir_op_error(
      op,
      "tileas.stages = %lld: stages of %lld bytes%s take more than the %d bytes of a block's shared memory (at most %lld of them)",
      (long long)stages, (long long)bytes, n > 1 ? " a CTA" : "", SM90_MAX_SMEM,
      (long long)(SM90_MAX_SMEM / bytes));
  return IR_FAIL;
}

/* [c, n] on a consumer agent: replica c of n. */
IrResult tileas_check_replica(IrOp *op) {
  IrAttrList r = ir_stamp_TILEAS_REPLICA(op).value;
  int64_t c = ir_attr_list_int(r, 0), n = ir_attr_list_int(r, 1);
  if (r.n == 2 && n >= 1 && c >= 0 && c < n) return IR_OK;
  ir_op_error(op, "tileas.replica must be [c, n]: replica c (from 0) of n");
  return IR_FAIL;
}

/* [g, 2] on a consumer agent that is no replica: consumer g of the two of a
** ping-pong or ksplit pair (named by `what`). */
static IrResult check_pair(IrOp *op, IrAttrList r, const char *attr, const char *what) {
  int64_t g = ir_attr_list_int(r, 0), n = ir_attr_list_int(r, 1);
  if (r.n == 2 && n == 2 && (g == 0 || g == 1) &&
      ir_attrs_TILEAS_AGENT(op).kind == AGENT_CONSUMER && !ir_op_attr(op, "tileas.replica"))
    return IR_OK;
  ir_op_error(
      op, "%s must be [g, 2] on a consumer agent that is no replica: %s consumer g (0 or 1) of 2",
      attr, what);
  return IR_FAIL;
}

IrResult tileas_check_pingpong(IrOp *op) {
  return check_pair(op, ir_stamp_TILEAS_PINGPONG(op).value, "tileas.pingpong", "ping-pong");
}

IrResult tileas_check_ksplit(IrOp *op) {
  if (ir_op_attr(op, "tileas.pingpong")) {
    ir_op_error(
        op,
        "tileas.ksplit and tileas.pingpong on one agent: its consumers split either the programs or the k blocks");
    return IR_FAIL;
  }
  return check_pair(op, ir_stamp_TILEAS_KSPLIT(op).value, "tileas.ksplit", "ksplit");
}

/* One multiple per dim of the slice, none negative. */
IrResult tileas_check_replica_offsets(IrOp *op) {
  IrAttrList per = ir_stamp_TILEAS_REPLICA_OFFSETS(op).value;
  uint32_t rank = op->noperands ? op->operands[0].value->type->rank : 0;
  bool ok = per.n == rank;
  for (uint32_t i = 0; i < per.n && ok; i++)
    ok = ir_attr_list_int(per, i) >= 0;
  if (ok) return IR_OK;
  ir_op_error(op, "tileas.replica_offsets needs %u integers >= 0, one per dim of the slice", rank);
  return IR_FAIL;
}

/* "persistent", "dynamic" (ids claimed at run time), "data_parallel" (a
** CTA a program), "split_tail" (whole programs in whole rounds of the workers,
** then the rest a consumer replica's rows at a time) or a dictionary: its
** entries are tileprog.schedule's (Lua), which fills in the workers from the
** device when they are absent. */
IrResult tileas_check_schedule(IrOp *op) {
  const IrAttr *s = ir_stamp_TILEAS_SCHEDULE(op).value;
  if (s->kind == IR_ATTR_DICT ||
      (s->kind == IR_ATTR_STR &&
       (strcmp(s->u.str.s, "persistent") == 0 || strcmp(s->u.str.s, "dynamic") == 0 ||
        strcmp(s->u.str.s, "data_parallel") == 0 || strcmp(s->u.str.s, "split_tail") == 0)))
    return IR_OK;
  ir_op_error(op, "tileas.schedule must be \"persistent\", \"dynamic\", \"data_parallel\", "
                  "\"split_tail\" or a dictionary {kind, programs, workers [, splits]}");
  return IR_FAIL;
}

/* One entry per parameter of the kernel, each KIND[:PART]... with the parts
** its TILEAS_PARAM row counts: "map:A", "dim:A:0", "programs:x", "workspace". */
IrResult tileas_check_params(IrOp *op) {
  static const int parts[] = {
#define PARTS(id, name, n) n,
      TILEAS_PARAM_LIST(PARTS)
#undef PARTS
  };
  IrAttrList l = ir_stamp_TILEAS_PARAMS(op).value;
  IrBlock *body = op->nregions ? op->regions[0].first : NULL;
  uint32_t nargs = body ? body->nargs : 0;
  if (l.n != nargs) {
    ir_op_error(op, "tileas.params has %u entries for %u parameters", l.n, nargs);
    return IR_FAIL;
  }
  for (uint32_t i = 0; i < l.n; i++) {
    const char *e = ir_attr_list_str(l, i), *colon = strchr(e, ':');
    size_t klen = colon ? (size_t)(colon - e) : strlen(e);
    int k = -1, n = 0;
    for (int j = 0; j < TILEAS_PARAM__COUNT && k < 0; j++)
      if (strlen(TILEAS_PARAM_names[j]) == klen && strncmp(TILEAS_PARAM_names[j], e, klen) == 0)
        k = j;
    for (const char *p = colon; p; p = strchr(p + 1, ':')) {
      bool empty = p[1] == '\0' || p[1] == ':';
      n = empty || n < 0 ? -1 : n + 1;
    }
    if (k < 0 || n != parts[k]) {
      ir_op_error(
          op,
          "tileas.params entry %u '%s' is not one of map:T, ptr:T, dim:T:D, stride:T:D, arg:NAME, programs:x|y|z, workspace",
          i, e);
      return IR_FAIL;
    }
  }
  return IR_OK;
}

/* }====================================================================== */
