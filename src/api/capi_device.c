/*
** capi_device.c -- the C API's GPU: device memory, and launching a kernel of a
** module lowered by the `ptx` pipeline, with typed arguments checked against
** the kernel's parameters (a wrong count or type would otherwise be undefined
** behaviour in cuLaunchKernel). The CUDA driver is loaded at run time
** (src/cuda/cuda_rt.c): without one, tlDeviceOpen fails with a diagnostic.
*/
#include <stdlib.h>
#include <string.h>

#include "../cuda/cuda_rt.h"
#include "../dialects/kernel.h"
#include "../ptx/ptx.h"
#include "capi_impl.h"

/* A graph of the device (its list holds the live ones, so that a stale handle is refused). */
typedef struct DevGraph {
  TlcuGraph *g;
  struct DevGraph *next;
} DevGraph;

struct TlDevice {
  TlcuRuntime rt;
  CUmodule mod;       /* the module of the last launch, kept for the next */
  const IrOp *mod_of; /* ... of this module op */
  uint64_t mod_edits; /* ... at this count of the context's edits */
  bool mod_in_graph;  /* a graph launches mod: it stays loaded until the device closes */
  DevGraph *graphs;
};

static TlCtx *enter_device(tlDevice d, const char *fn) {
  TlCtx *c = tl_enter(d.context, d.ptr, fn);
  if (c && c->device != d.ptr) {
    tl_error(c, fn, "the device was closed");
    return NULL;
  }
  return c;
}

static bool cuda_ok(TlCtx *c, const char *fn, TlcuResult r) {
  if (r == TLCU_OK) return true;
  tl_error(c, fn, "%s", tlcu_error(&c->device->rt));
  return false;
}

void tl_device_close(TlCtx *c) {
  TlDevice *d = c->device;
  if (!d) return;
  while (d->graphs) {
    DevGraph *g = d->graphs;
    d->graphs = g->next;
    tlcu_graph_free(&d->rt, g->g);
    free(g);
  }
  if (d->mod && !d->mod_in_graph) tlcu_module_unload(&d->rt, d->mod);
  tlcu_shutdown(&d->rt);
  free(d);
  c->device = NULL;
}

tlDevice tlDeviceOpen(tlContext ctx, int ordinal) {
  static const char fn[] = "tlDeviceOpen";
  tlDevice r = {NULL, 0};
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, fn);
  if (!c) return r;
  if (c->device) {
    tl_error(c, fn, "the context has a device open already (one per context)");
    return r;
  }
  TlDevice *d = calloc(1, sizeof *d);
  if (!d) {
    tl_error(c, fn, "out of memory");
    return r;
  }
  if (tlcu_init(&d->rt, ordinal) != TLCU_OK) {
    tl_error(c, fn, "no GPU: %s", tlcu_error(&d->rt));
    tlcu_shutdown(&d->rt);
    free(d);
    return r;
  }
  c->device = d;
  r.ptr = d;
  r.context = c->serial;
  return r;
}

bool tlDeviceIsNull(tlDevice d) { return d.ptr == NULL; }

void tlDeviceClose(tlDevice d) {
  TlCtx *c = enter_device(d, "tlDeviceClose");
  if (c) tl_device_close(c);
}

tlLogicalResult tlDeviceAlloc(tlDevice d, size_t bytes, uint64_t *address) {
  static const char fn[] = "tlDeviceAlloc";
  TlCtx *c = enter_device(d, fn);
  if (!c) return (tlLogicalResult){0};
  if (!address || !bytes) {
    tl_error(c, fn, !address ? "the address pointer is NULL" : "zero bytes asked for");
    return (tlLogicalResult){0};
  }
  CUdeviceptr p = 0;
  if (!cuda_ok(c, fn, tlcu_mem_alloc(&c->device->rt, bytes, &p))) return (tlLogicalResult){0};
  *address = (uint64_t)p;
  return (tlLogicalResult){1};
}

tlLogicalResult tlDeviceFree(tlDevice d, uint64_t address) {
  static const char fn[] = "tlDeviceFree";
  TlCtx *c = enter_device(d, fn);
  if (!c) return (tlLogicalResult){0};
  return (tlLogicalResult){cuda_ok(c, fn, tlcu_mem_free(&c->device->rt, (CUdeviceptr)address))};
}

/* The device of a copy whose host side (named what) is host; NULL on a refusal. */
static TlCtx *enter_copy(tlDevice d, const char *fn, const void *host, size_t bytes,
                         const char *what) {
  TlCtx *c = enter_device(d, fn);
  if (c && bytes && !host) {
    tl_error(c, fn, "the %s is NULL", what);
    return NULL;
  }
  return c;
}

tlLogicalResult tlDeviceCopyToDevice(tlDevice d, uint64_t dst, const void *src, size_t bytes) {
  static const char fn[] = "tlDeviceCopyToDevice";
  TlCtx *c = enter_copy(d, fn, src, bytes, "source");
  if (!c) return (tlLogicalResult){0};
  return (tlLogicalResult){
      !bytes || cuda_ok(c, fn, tlcu_memcpy_htod(&c->device->rt, (CUdeviceptr)dst, src, bytes))};
}

tlLogicalResult tlDeviceCopyToHost(tlDevice d, void *dst, uint64_t src, size_t bytes) {
  static const char fn[] = "tlDeviceCopyToHost";
  TlCtx *c = enter_copy(d, fn, dst, bytes, "destination");
  if (!c) return (tlLogicalResult){0};
  return (tlLogicalResult){
      !bytes || cuda_ok(c, fn, tlcu_memcpy_dtoh(&c->device->rt, dst, (CUdeviceptr)src, bytes))};
}

/* The kernel op named `name` at the top of module m, or NULL. */
static IrOp *find_kernel(IrOp *m, tlStringRef name) {
  IrBlock *body = m->nregions ? m->regions[0].first : NULL;
  for (IrOp *op = body ? body->first : NULL; op; op = op->next) {
    const IrAttr *sym = ir_op_attr(op, "sym_name");
    if (op->kind == OP_TILE_KERNEL && sym && sym->kind == IR_ATTR_STR &&
        sym->u.str.len == name.length && memcmp(sym->u.str.s, name.data, name.length) == 0)
      return op;
  }
  return NULL;
}

/* The argument kind a parameter of type t takes (-1: none the C API passes). */
static int arg_kind(const IrType *t) {
  if (t->kind == IR_TY_PTR) return TL_ARG_POINTER;
  if (t->kind == IR_TY_INDEX || ir_type_is_int_width(t, 64)) return TL_ARG_I64;
  if (ir_type_is_int_width(t, 32)) return TL_ARG_I32;
  if (ir_type_is_float(t) && t->fkind == IR_F32) return TL_ARG_F32;
  if (ir_type_is_float(t) && t->fkind == IR_F64) return TL_ARG_F64;
  return -1;
}

static const char *const arg_kind_names[] = {"i32", "i64", "f32", "f64", "pointer"};

/* The loaded module of m's PTX: the one of the last launch when m has not
** changed since. */
static bool load_module(TlCtx *c, const char *fn, IrOp *m, CUmodule *out) {
  TlDevice *d = c->device;
  if (d->mod && d->mod_of == m && d->mod_edits == ir_context_edits(c->ir)) {
    *out = d->mod;
    return true;
  }
  char *ptx = NULL;
  bool ok = false;
  TL_PROTECTED(c, fn, ok = ir_verify(m) == IR_OK && ptx_emit_module(m, &ptx) == IR_OK);
  if (!ok || c->broken) {
    if (!c->broken)
      tl_error(
          c, fn,
          "the module does not verify or cannot be emitted as PTX (lower it with the `ptx` pipeline)");
    ir_free(ptx);
    return false;
  }
  CUmodule mod;
  TlcuResult r = tlcu_module_load_ptx(&d->rt, ptx, &mod);
  ir_free(ptx);
  if (r != TLCU_OK) {
    tl_error(c, fn, "%s\n%s", tlcu_error(&d->rt), tlcu_jit_error_log(&d->rt));
    return false;
  }
  if (d->mod && !d->mod_in_graph) tlcu_module_unload(&d->rt, d->mod); /* else released at close */
  d->mod = mod, d->mod_of = m, d->mod_edits = ir_context_edits(c->ir), d->mod_in_graph = false;
  *out = mod;
  return true;
}

/* tlDeviceLaunch (wait) and tlDeviceLaunchOnStream (on `stream`, no wait). */
static tlLogicalResult launch(const char *fn, tlDevice dev, tlModule m, tlStringRef kernel,
                              const unsigned grid[3], intptr_t nArgs, const tlKernelArg *args,
                              uint64_t stream, bool wait) {
  TlCtx *c = enter_device(dev, fn);
  tlLogicalResult fail = {0};
  if (!c || !tl_check_owner(c, fn, "the module", m.context, m.ptr) ||
      !tl_check_string(c, fn, "the kernel name", kernel) ||
      !tl_check_count(c, fn, "argument", nArgs, args))
    return fail;
  IrOp *mod = (IrOp *)m.ptr;
  if (!tl_check_live_op(c, fn, "the module", mod)) return fail;
  if (mod->kind != OP_MODULE) {
    tl_error(c, fn, "the module handle holds a '%s' op", ir_op_name(mod));
    return fail;
  }
  if (!grid || !grid[0] || !grid[1] || !grid[2]) {
    tl_error(c, fn, "the grid must have three non-zero extents");
    return fail;
  }
  IrOp *k = find_kernel(mod, kernel);
  if (!k) {
    tl_error(c, fn, "the module has no kernel '%.*s'",
             (int)(kernel.length > 64 ? 64 : kernel.length), kernel.data);
    return fail;
  }
  IrBlock *entry = k->regions[0].first;
  uint32_t nparams = entry ? entry->nargs : 0;
  if ((uint32_t)nArgs != nparams) {
    tl_error(c, fn, "kernel '%.*s' takes %u arguments, got %lld", (int)kernel.length, kernel.data,
             nparams, (long long)nArgs);
    return fail;
  }
  void *ptrs[64];
  if (nparams > 64) {
    tl_error(c, fn, "at most 64 arguments");
    return fail;
  }
  for (uint32_t i = 0; i < nparams; i++) {
    int want = arg_kind(entry->args[i]->type);
    if (want < 0) {
      tl_error(c, fn, "parameter #%u of kernel '%.*s' has a type the C API does not pass", i,
               (int)kernel.length, kernel.data);
      return fail;
    }
    if ((int)args[i].kind != want) {
      tl_error(c, fn, "argument #%u: the kernel wants %s, got %s", i, arg_kind_names[want],
               (unsigned)args[i].kind < 5 ? arg_kind_names[args[i].kind] : "an unknown kind");
      return fail;
    }
    ptrs[i] = (void *)&args[i].value;
  }
  KernelSpec ks = kernel_spec(k);
  CUmodule cm;
  CUfunction f;
  if (!load_module(c, fn, mod, &cm)) return fail;
  const char *name =
      ir_attrs_TILE_KERNEL(k).sym_name; /* the kernel's name whole, whatever its length */
  if (!cuda_ok(c, fn, tlcu_function_get(&c->device->rt, cm, name, &f))) return fail;
  TlcuLaunch cfg;
  memset(&cfg, 0, sizeof cfg);
  if (ks.has_grid && (grid[0] != ks.grid[0] || grid[1] != ks.grid[1] || grid[2] != ks.grid[2])) {
    tl_error(
        c, fn,
        "kernel '%s' runs on the grid {%lld, %lld, %lld} only (its kernel_spec.grid), got {%u, %u, %u}",
        name, (long long)ks.grid[0], (long long)ks.grid[1], (long long)ks.grid[2], grid[0], grid[1],
        grid[2]);
    return fail;
  }
  for (uint32_t i = 0; i < nparams; i++) { /* kernel_spec.sizes: as k:launch checks them */
    const char *pname;
    KernelSize sz = kernel_param_size(k, i, &pname);
    if (sz == KERNEL_SIZE_ANY) continue;
    int64_t ctas = (int64_t)grid[0] * grid[1] * grid[2];
    int64_t want = sz == KERNEL_SIZE_GRID_THREADS ? ctas * ks.threads : ctas;
    int64_t got = args[i].kind == TL_ARG_I32 ? args[i].value.i32 : args[i].value.i64;
    if (got != want) {
      tl_error(c, fn,
               "kernel '%s' takes %s = the grid's %s (%lld: its kernel_spec.sizes), got %lld", name,
               pname, sz == KERNEL_SIZE_GRID_THREADS ? "threads" : "CTAs", (long long)want,
               (long long)got);
      return fail;
    }
  }
  for (int i = 0; i < 3; i++) {
    if (ks.has_cluster && grid[i] % (unsigned)ks.cluster[i]) {
      tl_error(c, fn, "grid extent %u is not a multiple of the kernel's cluster (%lld along %c)",
               grid[i], (long long)ks.cluster[i], "xyz"[i]);
      return fail;
    }
    cfg.grid[i] = grid[i];
    cfg.block[i] = (unsigned)ks.block[i];
    cfg.cluster[i] = ks.has_cluster ? (unsigned)ks.cluster[i] : 1;
  }
  /* all of the kernel's shared memory is dynamic in its PTX: the static allocations
  ** (lowered: shared_bytes counts them with kernel_spec.smem) come with the launch,
  ** as k:launch and its launch plan give them */
  int64_t shared = ir_attrs_TILE_KERNEL(k).shared_bytes;
  cfg.smem = (unsigned)(shared > ks.smem ? shared : ks.smem);
  cfg.name = name;
  if (cfg.smem > 48 * 1024 &&
      !cuda_ok(c, fn, tlcu_function_set_max_dynamic_smem(&c->device->rt, f, cfg.smem)))
    return fail;
  cfg.smem_allowed = 1;
  TlcuRuntime *rt = &c->device->rt;
  if (stream && !tlcu_stream_held(rt, (CUstream)(uintptr_t)stream)) {
    tl_error(c, fn,
             "the stream was not made by this device (tlDeviceCreateStream), or was destroyed");
    return fail;
  }
  cfg.stream = (CUstream)(uintptr_t)stream;
  if (!cuda_ok(c, fn, tlcu_launch(rt, f, &cfg, ptrs))) return fail;
  if (rt->capture) c->device->mod_in_graph = true;
  if (rt->capture || rt->update || !wait) return (tlLogicalResult){1}; /* nothing to wait for */
  return (tlLogicalResult){cuda_ok(c, fn, tlcu_synchronize(rt))};
}

tlLogicalResult tlDeviceLaunch(tlDevice dev, tlModule m, tlStringRef kernel, const unsigned grid[3],
                               intptr_t nArgs, const tlKernelArg *args) {
  return launch("tlDeviceLaunch", dev, m, kernel, grid, nArgs, args, 0, true);
}

tlLogicalResult tlDeviceLaunchOnStream(tlDevice dev, tlModule m, tlStringRef kernel,
                                       const unsigned grid[3], intptr_t nArgs,
                                       const tlKernelArg *args, uint64_t stream) {
  static const char fn[] = "tlDeviceLaunchOnStream";
  if (!stream) {
    TlCtx *c = enter_device(dev, fn);
    if (c) tl_error(c, fn, "the stream is 0 (tlDeviceCreateStream makes one)");
    return (tlLogicalResult){0};
  }
  return launch(fn, dev, m, kernel, grid, nArgs, args, stream, false);
}

/* {======================================================================
** Streams
** ======================================================================= */

tlLogicalResult tlDeviceCreateStream(tlDevice d, uint64_t *stream) {
  static const char fn[] = "tlDeviceCreateStream";
  TlCtx *c = enter_device(d, fn);
  if (!c) return (tlLogicalResult){0};
  if (!stream) {
    tl_error(c, fn, "the stream pointer is NULL");
    return (tlLogicalResult){0};
  }
  CUstream s = NULL;
  if (!cuda_ok(c, fn, tlcu_stream_create(&c->device->rt, &s))) return (tlLogicalResult){0};
  *stream = (uint64_t)(uintptr_t)s;
  return (tlLogicalResult){1};
}

tlLogicalResult tlDeviceDestroyStream(tlDevice d, uint64_t stream) {
  static const char fn[] = "tlDeviceDestroyStream";
  TlCtx *c = enter_device(d, fn);
  if (!c) return (tlLogicalResult){0};
  return (tlLogicalResult){
      cuda_ok(c, fn, tlcu_stream_destroy(&c->device->rt, (CUstream)(uintptr_t)stream))};
}

tlLogicalResult tlDeviceSynchronize(tlDevice d, uint64_t stream) {
  static const char fn[] = "tlDeviceSynchronize";
  TlCtx *c = enter_device(d, fn);
  if (!c) return (tlLogicalResult){0};
  TlcuRuntime *rt = &c->device->rt;
  if (!stream) return (tlLogicalResult){cuda_ok(c, fn, tlcu_synchronize(rt))};
  if (!tlcu_stream_held(rt, (CUstream)(uintptr_t)stream)) {
    tl_error(c, fn,
             "the stream was not made by this device (tlDeviceCreateStream), or was destroyed");
    return (tlLogicalResult){0};
  }
  return (tlLogicalResult){
      cuda_ok(c, fn, tlcu_stream_synchronize(rt, (CUstream)(uintptr_t)stream))};
}

/* }====================================================================== */

/* {======================================================================
** Graphs
** ======================================================================= */

tlLogicalResult tlDeviceBeginGraph(tlDevice d) {
  static const char fn[] = "tlDeviceBeginGraph";
  TlCtx *c = enter_device(d, fn);
  return (tlLogicalResult){c && cuda_ok(c, fn, tlcu_graph_begin(&c->device->rt))};
}

tlGraph tlDeviceEndGraph(tlDevice d) {
  static const char fn[] = "tlDeviceEndGraph";
  tlGraph r = {NULL, 0};
  TlCtx *c = enter_device(d, fn);
  if (!c) return r;
  DevGraph *g = calloc(1, sizeof *g);
  if (!g) {
    tl_error(c, fn, "out of memory");
    TlcuGraph *lost = NULL;
    if (tlcu_graph_end(&c->device->rt, &lost) == TLCU_OK) tlcu_graph_free(&c->device->rt, lost);
    return r;
  }
  if (!cuda_ok(c, fn, tlcu_graph_end(&c->device->rt, &g->g))) {
    free(g);
    return r;
  }
  g->next = c->device->graphs;
  c->device->graphs = g;
  r.ptr = g;
  r.context = c->serial;
  return r;
}

bool tlGraphIsNull(tlGraph g) { return g.ptr == NULL; }

/* The context of a graph handle that names a live graph of its device; NULL after a refusal. */
static TlCtx *enter_graph(tlGraph g, const char *fn) {
  TlCtx *c = tl_enter(g.context, g.ptr, fn);
  if (!c) return NULL;
  for (DevGraph *x = c->device ? c->device->graphs : NULL; x; x = x->next)
    if (x == g.ptr) return c;
  tl_error(c, fn, "the graph was destroyed, or its device closed");
  return NULL;
}

intptr_t tlGraphGetNumNodes(tlGraph g) {
  TlCtx *c = enter_graph(g, "tlGraphGetNumNodes");
  return c ? tlcu_graph_nodes(((DevGraph *)g.ptr)->g) : -1;
}

tlLogicalResult tlGraphLaunch(tlGraph g) {
  static const char fn[] = "tlGraphLaunch";
  TlCtx *c = enter_graph(g, fn);
  if (!c) return (tlLogicalResult){0};
  TlcuRuntime *rt = &c->device->rt;
  return (tlLogicalResult){
      cuda_ok(c, fn, tlcu_graph_launch(rt, ((DevGraph *)g.ptr)->g, NULL, NULL, 0)) &&
      cuda_ok(c, fn, tlcu_synchronize(rt))};
}

tlLogicalResult tlGraphBeginUpdate(tlGraph g) {
  static const char fn[] = "tlGraphBeginUpdate";
  TlCtx *c = enter_graph(g, fn);
  return (tlLogicalResult){
      c && cuda_ok(c, fn, tlcu_graph_update_begin(&c->device->rt, ((DevGraph *)g.ptr)->g))};
}

tlLogicalResult tlGraphEndUpdate(tlGraph g) {
  static const char fn[] = "tlGraphEndUpdate";
  TlCtx *c = enter_graph(g, fn);
  if (c && c->device->rt.update != ((DevGraph *)g.ptr)->g) {
    tl_error(c, fn, "the graph is not being updated (tlGraphBeginUpdate)");
    return (tlLogicalResult){0};
  }
  return (tlLogicalResult){c && cuda_ok(c, fn, tlcu_graph_update_end(&c->device->rt))};
}

void tlGraphDestroy(tlGraph g) {
  TlCtx *c = enter_graph(g, "tlGraphDestroy");
  if (!c) return;
  for (DevGraph **p = &c->device->graphs; *p; p = &(*p)->next)
    if (*p == g.ptr) {
      DevGraph *x = *p;
      *p = x->next;
      tlcu_graph_free(&c->device->rt, x->g);
      free(x);
      return;
    }
}

/* }====================================================================== */
