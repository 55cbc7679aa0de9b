/*
** ptx.h -- the PTX emitter: a module whose kernels hold nvvm + arith + scf
** (what the `ptx` pipeline leaves) to PTX text for sm_90a. docs/ptx.md
** describes the output: registers, control flow, parameters, each op's PTX.
*/
#ifndef TILUA_PTX_H
#define TILUA_PTX_H

#include "../ir/ir.h"

/* The .version written: the lowest that has every instruction used (8.0 for
** sm_90a; 8.4 for mma.sync on fp8), in tenths. */
#define PTX_VERSION_MIN 80
#define PTX_TARGET "sm_90a"

/* Emit every tile.kernel of the module. On success *out is an ir_malloc block of
** NUL-terminated PTX text (the caller frees it with ir_free); on failure *out is NULL and
** the context holds diagnostics naming each op that cannot be emitted. */
IrResult ptx_emit_module(IrOp *module, char **out);

/* Check the PTX row of op kind `kind` against the op's signature and attribute
** rows (a template naming an operand the op cannot have, an attribute it does
** not declare, bad syntax); nvvm ops need a row. false with *why when wrong. */
bool ptx_check_template(int kind, const char **why);

#endif
