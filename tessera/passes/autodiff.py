"""``autodiff``: build gradient (reverse-mode) and tangent (forward-mode) functions.

For a Graph IR function ``@f`` the pass adds, next to it, an ordinary Graph IR
function:

* reverse mode (default): ``@f_grad``. It recomputes the forward program, then
  walks it backwards applying the adjoint rule of every op
  (:mod:`tessera.autodiff.rules`), and returns the gradients with respect to
  the arguments in ``wrt`` (default: every floating-point argument), in that
  order, each with its argument's type. With ``return-value`` the primal
  results come first. When ``@f`` has exactly one result and it holds one
  element (a loss), the seed is 1; otherwise ``@f_grad`` takes one cotangent
  argument per floating-point result, after ``@f``'s own arguments (a VJP).
  A cast to a ``@loss_scale(k)`` policy multiplies its cotangent by ``k`` (it stores
  ``k x``); when the seeded loss is such a cast (or a cast of one), the backward pass
  runs on those scaled cotangents and the gradients are unscaled (times ``1/k``) at the
  end: scale the loss, unscale the gradients.
* forward mode (``mode=forward``): ``@f_jvp(args..., tangents...)`` returns the
  primal results followed by their tangents (the Jacobian-vector product with
  one tangent per argument in ``wrt``). It is derived from the reverse rules by
  transposition: the gradient function is linear in its cotangents, and the
  adjoint of that linear map is the JVP.

Random ops are recomputed with their own ``seed`` and ``offset``, so the
gradient sees exactly the samples of the forward pass; collectives are
transposed (``all_gather`` <-> ``reduce_scatter``). The result is the same
text every time for the same input.

Example::

    tessera-opt -p 'autodiff{function=loss wrt=1,2 return-value=true}' model.mlir
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, IntegerType, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.transforms.dead_code_elimination import region_dce

from tessera.autodiff import scientific_rules  # noqa: F401  (registers its rules)
from tessera.autodiff.emitter import GraphEmitter, numel
from tessera.autodiff.rules import (
    CUSTOM_VJP_ATTR,
    CUSTOM_VJPS,
    VJP_RULES,
    AutodiffError,
    lse_type,
)
from tessera.ir import graph as g
from tessera.ir.attrs import policy_of
from tessera.ir.graph import elem_of, shape_of

_SKIP_ATTRS = ("sym_name", "function_type", "sym_visibility", "arg_attrs", "res_attrs")


def _differentiable_type(t: Attribute) -> bool:
    return isinstance(t, TensorType) and not isinstance(t.element_type, IntegerType)


def _body(f: func.FuncOp) -> tuple[Block, func.ReturnOp]:
    blocks = list(f.body.blocks)
    if len(blocks) != 1:
        raise AutodiffError(
            f"autodiff: @{f.sym_name.data} has {len(blocks)} blocks; only single-block "
            "Graph IR functions can be differentiated"
        )
    ret = blocks[0].last_op
    if not isinstance(ret, func.ReturnOp):
        raise AutodiffError(f"autodiff: @{f.sym_name.data} does not end in func.return")
    return blocks[0], ret


def _describe(op: Operation, index: int, fname: str) -> str:
    loc = op.attributes.get("tessera.loc")
    where = f" at {loc.data}" if loc is not None and hasattr(loc, "data") else ""
    return f"{op.name} (operation #{index} of @{fname}{where})"


def _check_wrt(f: func.FuncOp, wrt: Sequence[int] | None) -> list[int]:
    types = f.function_type.inputs.data
    name = f.sym_name.data
    if wrt is None:
        return [i for i, t in enumerate(types) if _differentiable_type(t)]
    out = []
    for i in wrt:
        if not -len(types) <= i < len(types):
            raise AutodiffError(
                f"autodiff: argument index {i} out of range: @{name} has {len(types)} arguments"
            )
        i %= len(types)
        if not _differentiable_type(types[i]):
            raise AutodiffError(
                f"autodiff: argument {i} of @{name} has type {types[i]}; only "
                "floating-point tensors are differentiable"
            )
        out.append(i)
    return out


def loss_scale_of(v: SSAValue) -> float | None:
    """The ``k`` of a loss computed as a cast to a ``@loss_scale(k)`` policy: the loss
    value's own policy, or that of the value a chain of casts converted it from (the
    scaled loss cast back to f32, say); None otherwise."""
    while True:
        k = policy_of(v.type).loss_scale
        if k is not None:
            return k
        owner = v.owner
        if not isinstance(owner, g.CastOp):
            return None
        v = owner.input


def _save_attention_lse(
    forward: list[Operation], results: list[SSAValue], active: set[SSAValue]
) -> None:
    """Replace each active ``flash_attention`` of the recomputed forward program by a
    ``flash_attention_fwd`` (same operands and properties, plus the log-sum-exp)."""
    for i, op in enumerate(forward):
        if not isinstance(op, g.FlashAttentionOp) or op.result not in active:
            continue
        fwd = g.FlashAttentionFwdOp.create(
            operands=list(op.operands),
            result_types=[op.result.type, lse_type(op.q)],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        block = op.parent_block()
        assert block is not None
        block.insert_op_before(fwd, op)
        fwd.result.name_hint = op.result.name_hint
        op.result.replace_all_uses_with(fwd.result)
        results[:] = [fwd.result if r is op.result else r for r in results]
        active.discard(op.result)
        active.add(fwd.result)
        op.detach()
        op.erase()
        forward[i] = fwd


def vjp_function(
    f: func.FuncOp,
    *,
    wrt: Sequence[int] | None = None,
    return_value: bool = False,
    cotangent_args: bool | None = None,
    seed_outputs: Sequence[int] | None = None,
    name: str | None = None,
    fused_attention: bool = True,
) -> func.FuncOp:
    """The reverse-mode gradient function of ``f`` (see the module docstring).

    With ``fused_attention`` (the default) a differentiated ``tgraph.flash_attention``
    becomes ``tgraph.flash_attention_fwd``, which also returns the log-sum-exp, and its
    adjoint is one ``tgraph.flash_attention_bwd``; otherwise the adjoint is Graph IR
    that materializes the attention probabilities.

    ``cotangent_args`` forces (True) or forbids (False) cotangent arguments; by
    default they are used unless ``f`` returns a single one-element float result.
    ``seed_outputs`` limits the cotangent arguments to those results.
    """
    fname = f.sym_name.data
    block, ret = _body(f)
    wrt_idx = _check_wrt(f, wrt)
    in_types = list(f.function_type.inputs.data)
    out_types = list(f.function_type.outputs.data)
    float_outs = [i for i, t in enumerate(out_types) if _differentiable_type(t)]
    if cotangent_args is None:
        cotangent_args = not (
            len(out_types) == 1 and float_outs == [0] and numel(shape_of(out_types[0])) == 1
        )
    elif not cotangent_args and not (
        len(float_outs) == 1 and numel(shape_of(out_types[float_outs[0]])) == 1
    ):
        raise AutodiffError(
            f"autodiff: @{fname} must return one floating-point scalar to be differentiated "
            f"without cotangents; it returns ({', '.join(str(t) for t in out_types)})"
        )
    seeded = list(seed_outputs) if seed_outputs is not None else float_outs
    for i in seeded:
        if i not in float_outs:
            raise AutodiffError(f"autodiff: result {i} of @{fname} is not a floating-point tensor")
    ct_types = [out_types[i] for i in seeded] if cotangent_args else []

    new_block = Block(arg_types=[*in_types, *ct_types])
    mapping: dict[SSAValue, SSAValue] = dict(zip(block.args, new_block.args))
    for old, new in zip(block.args, new_block.args):
        new.name_hint = old.name_hint
    forward: list[Operation] = []
    for op in block.ops:
        if op is ret:
            break
        new = op.clone(value_mapper=mapping)
        new_block.add_op(new)
        forward.append(new)
    results = [mapping[v] for v in ret.arguments]

    # activity: values that depend on a differentiated argument
    active: set[SSAValue] = {new_block.args[i] for i in wrt_idx}
    for op in forward:
        if any(v in active for v in op.operands):
            active.update(r for r in op.results if _differentiable_type(r.type))

    if fused_attention:
        _save_attention_lse(forward, results, active)

    e = GraphEmitter(new_block)
    cts: dict[SSAValue, SSAValue] = {}

    def accumulate(v: SSAValue, c: SSAValue) -> None:
        if elem_of(c) != elem_of(v):
            c = e.cast(c, elem_of(v))
        cts[v] = e.add(cts[v], c) if v in cts else c

    if cotangent_args:
        for j, i in enumerate(seeded):
            if results[i] in active:
                accumulate(results[i], new_block.args[len(in_types) + j])
    else:
        r = results[float_outs[0]]
        if r in active:
            accumulate(r, e.const(1.0, r, shape_of(r)))

    for index in range(len(forward) - 1, -1, -1):
        op = forward[index]
        out_cts = [cts.get(r) for r in op.results]
        if all(c is None for c in out_cts):
            continue
        custom = op.attributes.get(CUSTOM_VJP_ATTR)
        if isinstance(custom, StringAttr):
            record = CUSTOM_VJPS.get(custom.data)
            if record is None:
                raise AutodiffError(
                    f"autodiff: {_describe(op, index, fname)} refers to custom_vjp rule "
                    f"'{custom.data}', which is not defined in this process"
                )
            inputs = [mapping.get(v, v) for v in record.inputs]
            needs = [v in active for v in inputs]
            ct = out_cts[0]
            assert ct is not None
            for v, c in zip(inputs, record.apply(new_block, mapping, ct, needs)):
                if c is not None:
                    accumulate(v, e.unbroadcast(c, shape_of(v)))
            continue
        needs = [v in active for v in op.operands]
        if not any(needs):
            continue
        rule = VJP_RULES.get(op)
        if rule is None:
            hint = (
                "; run autodiff before fusion"
                if op.name in ("tgraph.fused", "tgraph.matmul_epilogue")
                else ""
            )
            raise AutodiffError(
                f"autodiff: {_describe(op, index, fname)} is not differentiable: no adjoint "
                f"rule for {op.name}{hint}"
            )
        try:
            in_cts = rule(e, op, out_cts, needs)
        except AutodiffError as err:
            raise AutodiffError(f"{err} [{_describe(op, index, fname)}]") from None
        for v, c, need in zip(op.operands, in_cts, needs):
            if c is not None and need:
                accumulate(v, c)

    unscale = None if cotangent_args else loss_scale_of(results[float_outs[0]])
    outs: list[SSAValue] = list(results) if return_value else []
    for i in wrt_idx:
        arg = new_block.args[i]
        c = cts.get(arg)
        if c is None:
            c = e.zeros_like(arg)
        elif unscale is not None:
            c = e.mul(c, 1.0 / unscale)
        if c.type != arg.type:
            c = e.cast(c, arg.type)
        outs.append(c)
    new_block.add_op(func.ReturnOp(*outs))
    region = Region(new_block)
    region_dce(region)
    gf = func.FuncOp(
        name or f"{fname}_grad",
        FunctionType.from_lists([*in_types, *ct_types], [o.type for o in outs]),
        region,
    )
    for k, v in f.attributes.items():
        if k not in _SKIP_ATTRS:
            gf.attributes[k] = v
    return gf


def jvp_function(
    f: func.FuncOp, *, wrt: Sequence[int] | None = None, name: str | None = None
) -> func.FuncOp:
    """The forward-mode function ``f_jvp(args..., tangents...) -> (results..., tangents...)``.

    Built by transposing the reverse pass: with ``u`` the cotangents of the
    results, ``g(x, u) = J(x)ᵀ u`` is linear in ``u``, and the VJP of ``g`` with
    respect to ``u`` applied to a tangent ``t`` is ``J(x) t``.
    """
    fname = f.sym_name.data
    wrt_idx = _check_wrt(f, wrt)
    n_in = len(f.function_type.inputs.data)
    out_types = list(f.function_type.outputs.data)
    float_outs = [i for i, t in enumerate(out_types) if _differentiable_type(t)]
    n_out = len(out_types)
    # g(x, u) -> (y..., Jᵀu per wrt arg)
    gfun = vjp_function(f, wrt=wrt_idx, return_value=True, cotangent_args=True)
    # h(x, u, t) -> (y..., Jᵀu..., J t per result with a cotangent)
    u_idx = list(range(n_in, n_in + len(float_outs)))
    h = vjp_function(
        gfun,
        wrt=u_idx,
        return_value=True,
        cotangent_args=True,
        seed_outputs=list(range(n_out, n_out + len(wrt_idx))),
    )
    hblock, hret = _body(h)
    in_types = list(f.function_type.inputs.data)
    tan_types = [in_types[i] for i in wrt_idx]
    block = Block(arg_types=[*in_types, *tan_types])
    for old, new in zip(_body(f)[0].args, block.args):
        new.name_hint = old.name_hint
    for i, new in zip(wrt_idx, block.args[n_in:]):
        if new.name_hint is None and block.args[i].name_hint:
            new.name_hint = "t_" + block.args[i].name_hint
    e = GraphEmitter(block)
    mapping: dict[SSAValue, SSAValue] = {}
    for i in range(n_in):
        mapping[hblock.args[i]] = block.args[i]
    for i in u_idx:
        mapping[hblock.args[i]] = e.zeros_like(hblock.args[i])
    for j in range(len(wrt_idx)):
        mapping[hblock.args[len(u_idx) + n_in + j]] = block.args[n_in + j]
    for op in hblock.ops:
        if op is hret:
            break
        block.add_op(op.clone(value_mapper=mapping))
    hres = [mapping.get(v, v) for v in hret.arguments]
    primal = hres[:n_out]
    tangents = hres[n_out + len(wrt_idx) :]
    block.add_op(func.ReturnOp(*primal, *tangents))
    region = Region(block)
    region_dce(region)
    jf = func.FuncOp(
        name or f"{fname}_jvp",
        FunctionType.from_lists([*in_types, *tan_types], [v.type for v in (*primal, *tangents)]),
        region,
    )
    for k, v in f.attributes.items():
        if k not in _SKIP_ATTRS:
            jf.attributes[k] = v
    return jf


@dataclass(frozen=True)
class AutodiffPass(ModulePass):
    """Add ``@<f>_grad`` (reverse mode) or ``@<f>_jvp`` (forward mode) for functions.

    Options: ``function`` (a function name; empty: every function in the module
    that is not itself a derivative), ``wrt`` (argument indices; default: every
    floating-point argument), ``return-value`` (reverse mode: also return the
    primal results, first), ``mode`` (``reverse`` or ``forward``).
    """

    name = "autodiff"

    function: str = ""
    wrt: tuple[int, ...] | None = None
    return_value: bool = False
    mode: str = "reverse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.mode not in ("reverse", "forward"):
            raise AutodiffError(
                f"autodiff: unknown mode '{self.mode}'; valid: reverse, forward"
            )
        funcs = [f for f in op.ops if isinstance(f, func.FuncOp) and not f.is_declaration]
        names = {f.sym_name.data for f in op.ops if isinstance(f, func.FuncOp)}
        if self.function:
            targets = [f for f in funcs if f.sym_name.data == self.function]
            if not targets:
                raise AutodiffError(
                    f"autodiff: no function @{self.function} in the module "
                    f"(functions: {', '.join(sorted(names)) or 'none'})"
                )
        else:
            targets = [
                f
                for f in funcs
                if not f.sym_name.data.endswith(("_grad", "_jvp"))
            ]
        suffix = "_grad" if self.mode == "reverse" else "_jvp"
        for f in targets:
            new_name = f.sym_name.data + suffix
            if new_name in names:
                raise AutodiffError(f"autodiff: @{new_name} already exists in the module")
            if self.mode == "reverse":
                nf = vjp_function(f, wrt=self.wrt, return_value=self.return_value)
            else:
                nf = jvp_function(f, wrt=self.wrt)
            op.body.block.insert_op_after(nf, f)
            names.add(new_name)
