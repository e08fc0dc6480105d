"""``tessera.optim``: SGD and AdamW steps over many tensors as one compiled update.

``SGD(params, lr, momentum, dampening, weight_decay, nesterov)`` and
``AdamW(params, lr, betas, eps, weight_decay)`` follow ``torch.optim``'s algorithms
(the formulas are those of ``tgraph.sgd_update`` and ``tgraph.adamw_update``,
:mod:`tessera.ir.graph.optim`). ``step(grads)`` updates the parameters in place;
without ``grads`` it takes each torch parameter's ``.grad`` and, as torch does, leaves
out the parameters whose gradient is None.

Parameters may be numpy arrays, CPU torch tensors (both run on the Graph IR reference
interpreter) or CUDA torch tensors (the GPU). The parameters are grouped by element
type (f32, bf16, f16, f64) and device; each group's step is one Graph IR function of one
update op, compiled once per group and set of parameters present. On the GPU the
function donates the parameters and the state (``tessera.donate``), so the kernels write
them in place: one multi-tensor kernel per group (several launches for more tensors than
one launch's parameter space holds, ``tile_optim.MAX_PARAM_BYTES``). The state is kept
in the parameters' element type, the math is in f32 (f64 for f64 parameters), and the
step's changing scalars (learning rate, bias corrections) travel in a small f32 tensor
(f64 for f64 parameters), so changing ``lr`` between steps recompiles nothing. Results are deterministic: every
element is computed by one lane in a fixed order, with no atomics.

Not supported (refused with a :class:`TesseraError`): ``amsgrad``, ``maximize``,
parameters of integer or complex type, and sparse gradients.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DenseArrayBase,
    ModuleOp,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Block, Region

from tessera.errors import TesseraError, TesseraTypeError
from tessera.ir import graph as g
from tessera.ir.dtypes import dtype_of
from tessera.runtime import convert

__all__ = ["SGD", "AdamW", "Optimizer"]


def _is_torch(x: Any) -> bool:
    return convert.is_torch_tensor(x)


def _numpy_of(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else convert.to_numpy(x)


def _write_back(dst: Any, value: Any) -> None:
    """Store ``value`` (numpy or torch) into ``dst`` in place (nothing when it is ``dst``)."""
    if value is dst:
        return
    if isinstance(dst, np.ndarray):
        dst[...] = value
        return
    import torch

    if isinstance(value, np.ndarray):
        value = convert.to_torch(value)
    if value.data_ptr() != dst.data_ptr():
        with torch.no_grad():  # parameters that require grad, as torch.optim updates them
            dst.copy_(value)


def _mark_modified(tensors: list[Any]) -> None:
    """Tell autograd that the kernels changed ``tensors`` in place (their version counters;
    torch's own in-place ops do it), so a graph that saved an old value fails loudly."""
    import torch

    bump = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)
    if bump is not None:
        bump(tensors)


_COMPILED: dict[tuple[Any, ...], _Group] = {}
"""Compiled steps by optimizer class, fixed hyper-parameters, element type, device and
parameter shapes: optimizers over equally shaped parameters share one."""


class _Group:
    """The compiled step of one element type, device and set of parameters."""

    def __init__(self, opt: Optimizer, idx: list[int], et: Any, cuda: bool):
        self.idx = idx
        self.cuda = cuda
        self.name = f"{opt.OP_TAG}_{str(et).lower()}_{len(idx)}"
        self.graph = opt._module(self.name, [opt.params[i] for i in idx], et)
        self._plan: Any = None
        self._runner: Any = None

    def run(self, args: list[Any]) -> list[Any]:
        if not self.cuda:
            from tessera.runtime.graph_interpreter import run_function

            return run_function(self.graph, self.name, [_numpy_of(a) for a in args])
        import torch

        dev = args[0].device
        # the plan is built for the tensors' device (the CPU stand-ins of bench/host_path.py
        # have none)
        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
            if self._plan is None:
                from tessera import compiler
                from tessera.runtime import cuda

                options = compiler.resolve_options()
                target = compiler.lower_through(self.graph, "graph", "target", options)
                ptx = compiler.lower(target, "ptx", options)
                self.target, self.ptx = target, ptx
                self._plan = cuda.host_plan(target, self.name, ptx)
                self._runner = self._plan.runner()
            out = self._runner(args) if self._runner is not None else None
            return out if out is not None else self._plan.run(args)

    def fast(self, args: list[Any]) -> list[Any] | None:
        """The prepared GPU call on ``args``, or None when it does not take them."""
        return self._runner(args) if self._runner is not None else None


class Optimizer:
    """What :class:`SGD` and :class:`AdamW` share: parameters, their state, grouping by
    element type and device, and the compiled steps."""

    OP_TAG = "optim"
    STATE: tuple[str, ...] = ()
    HYPER: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Any], lr: float):
        self.params = list(params)
        if not self.params:
            raise TesseraError("tessera.optim: got an empty parameter list")
        if not lr >= 0.0:
            raise TesseraError(f"tessera.optim: lr must be >= 0, got {lr}")
        if len({id(p) for p in self.params}) != len(self.params):
            raise TesseraError(
                "tessera.optim: a parameter appears more than once in the list (one update "
                "would race with the other)"
            )
        self.lr = float(lr)
        self.state: list[dict[str, Any]] = [{} for _ in self.params]
        self._groups: dict[tuple[Any, ...], _Group] = {}
        self._hyper_cache: dict[tuple[Any, ...], tuple[tuple[float, ...], Any]] = {}
        self._fast: list[tuple[Any, ...]] | None = None
        """After a step of every parameter, all on CUDA devices and at one step count:
        ``(key, group, indices, params, flat state)`` per group, for :meth:`_fast_step`."""
        self._keys = []
        for k, p in enumerate(self.params):
            if not (isinstance(p, np.ndarray) or _is_torch(p)):
                raise TesseraTypeError(
                    f"tessera.optim: parameter {k} is {type(p).__name__}; expected a numpy "
                    "array or a torch tensor"
                )
            d = dtype_of(p.dtype, where=f"tessera.optim parameter {k}")
            if d.kind != "float" or d.name not in ("fp64", "fp32", "fp16", "bf16"):
                raise TesseraTypeError(
                    f"tessera.optim: parameter {k} is {d.name}; f64, f32, f16 and bf16 "
                    "parameters are supported"
                )
            if _is_torch(p) and p.is_sparse:
                raise TesseraError(f"tessera.optim: parameter {k} is sparse")
            cuda = convert.is_cuda_tensor(p)
            self._keys.append((d.ir_type, cuda, p.device.index if cuda else None))

    # ------------------------------------------------------------ subclass hooks
    def _op(self, params: list[Any], grads: list[Any], states: list[list[Any]],
            hyper: Any) -> Any:
        raise NotImplementedError

    def _hyper(self, k: int) -> list[float]:
        """The ``hyper`` entries for a parameter at its step ``k`` (from 1)."""
        raise NotImplementedError

    def _state_names(self) -> tuple[str, ...]:
        return self.STATE

    def _fixed(self) -> tuple[Any, ...]:
        """The hyper-parameters compiled into the update (properties of its op)."""
        raise NotImplementedError

    # ------------------------------------------------------------ the Graph IR step
    def _module(self, name: str, params: list[Any], et: Any) -> ModuleOp:
        """``func @name(params, grads, state..., hyper) -> (params, state...)``, donating
        the parameters and the state."""
        n = len(params)
        types = [TensorType(et, list(p.shape)) for p in params]
        nstate = len(self._state_names())
        arg_types = types * (2 + nstate) + [g.hyper_type(et, len(self.HYPER))]
        block = Block(arg_types=arg_types)
        a = list(block.args)
        ps, gs = a[:n], a[n:2 * n]
        states = [a[(2 + s) * n:(3 + s) * n] for s in range(nstate)]
        op = self._op(ps, gs, states, a[-1])
        block.add_op(op)
        block.add_op(func.ReturnOp(*op.results))
        fn = func.FuncOp(name, (arg_types, [r.type for r in op.results]), Region(block))
        donate = list(range(n)) + list(range(2 * n, (2 + nstate) * n))
        fn.attributes["tessera.donate"] = DenseArrayBase.from_list(i64, donate)
        module = ModuleOp([fn])
        module.verify()
        return module

    # ------------------------------------------------------------ stepping
    def zero_grad(self) -> None:
        """Set each torch parameter's ``.grad`` to None (as ``torch.optim`` does)."""
        for p in self.params:
            if _is_torch(p):
                p.grad = None

    def step(self, grads: Sequence[Any] | None = None) -> None:
        """Update every parameter whose gradient is given (``grads[i]`` for parameter
        ``i``, None to skip it; without ``grads``: the torch parameters' ``.grad``)."""
        if grads is None:
            grads = [getattr(p, "grad", None) if _is_torch(p) else None for p in self.params]
            if all(gr is None for gr in grads) and not any(_is_torch(p) for p in self.params):
                raise TesseraError("tessera.optim: step() of numpy parameters needs grads")
        grads = list(grads)
        if len(grads) != len(self.params):
            raise TesseraError(
                f"tessera.optim: {len(grads)} gradients for {len(self.params)} parameters"
            )
        if self._fast is not None and all(gr is not None for gr in grads):
            self._fast_step(grads)
            return
        self._fast = None
        by_key: dict[tuple[Any, ...], list[int]] = {}
        for k, (p, gr) in enumerate(zip(self.params, grads)):
            if gr is None:
                continue
            if tuple(gr.shape) != tuple(p.shape):
                raise TesseraError(
                    f"tessera.optim: gradient {k} has shape {tuple(gr.shape)}, parameter "
                    f"{k} {tuple(p.shape)}"
                )
            if _is_torch(gr) and gr.is_sparse:
                raise TesseraError(f"tessera.optim: gradient {k} is sparse")
            by_key.setdefault(self._keys[k], []).append(k)
        for key, idx in by_key.items():
            self._step_group(key, idx, grads)
        if len(by_key) and sum(len(i) for i in by_key.values()) == len(self.params) and all(
            key[1] for key in by_key
        ) and len({st["step"] for st in self.state}) == 1:
            names = self._state_names()
            self._fast = [
                (key, self._groups[(key, tuple(idx))], idx,
                 [self.params[i] for i in idx],
                 [self.state[i][s] for s in names for i in idx])
                for key, idx in by_key.items()
            ]

    def _fast_step(self, grads: list[Any]) -> None:
        """A step of CUDA parameters that all stepped together last time: the groups, their
        parameter and state lists are those of the last step; the prepared GPU call checks
        the gradients (and the rest), and a group whose arguments it does not take (a
        gradient of another dtype, a non-contiguous one) takes the checked path."""
        step = self.state[0]["step"] + 1
        for key, group, idx, params, states in self._fast:  # type: ignore[union-attr]
            h = self._device_hyper(key, step, params[0].device)
            out = group.fast([*params, *(grads[i] for i in idx), *states, h])
            if out is None:
                self._step_group(key, idx, grads)
                continue
            for dst, value in zip([*params, *states], out):
                if value is not dst:
                    _write_back(dst, value)
            _mark_modified(params)
            for i in idx:
                self.state[i]["step"] = step

    def _step_group(self, key: tuple[Any, ...], idx: list[int], grads: list[Any]) -> None:
        et, cuda, _ = key
        steps = {self.state[i].get("step", 0) + 1 for i in idx}
        # parameters at different step counts (some skipped before) step separately
        if len(steps) > 1:
            parts = [[i for i in idx if self.state[i].get("step", 0) + 1 == s]
                     for s in sorted(steps)]
            for part in parts:
                self._step_group(key, part, grads)
            return
        step = steps.pop()
        gkey = (key, tuple(idx))
        group = self._groups.get(gkey)
        if group is None:
            shared = (type(self).__name__, self._fixed(), key,
                      tuple(tuple(self.params[i].shape) for i in idx))
            group = _COMPILED.get(shared)
            if group is None:
                group = _COMPILED[shared] = _Group(self, idx, et, cuda)
            self._groups[gkey] = group
        params = [self.params[i] for i in idx]
        names = self._state_names()
        for i in idx:
            for s in names:
                if s not in self.state[i]:
                    self.state[i][s] = self._zeros(self.params[i])
        states = [[self.state[i][s] for i in idx] for s in names]
        gs = []
        for i in idx:
            gr = grads[i]
            p = self.params[i]
            if _is_torch(p) != _is_torch(gr) or (_is_torch(p) and gr.device != p.device):
                raise TesseraError(
                    f"tessera.optim: gradient {i} is not on parameter {i}'s device"
                )
            if _is_torch(gr) and gr.dtype != p.dtype:
                gr = gr.to(p.dtype)
            elif isinstance(gr, np.ndarray) and gr.dtype != p.dtype:
                gr = gr.astype(p.dtype)
            gs.append(gr)
        if cuda:
            h = self._device_hyper(key, step, params[0].device)
        else:
            h = np.asarray(self._hyper(step), np.float64 if et == f64 else np.float32)
        flat_states = [x for s in states for x in s]
        out = group.run([*params, *gs, *flat_states, h])
        for dst, value in zip([*params, *flat_states], out):
            _write_back(dst, value)
        if cuda:
            _mark_modified(params)
        for i in idx:
            self.state[i]["step"] = step

    def _device_hyper(self, key: tuple[Any, ...], step: int, device: Any) -> Any:
        """The ``hyper`` tensor of a step on a CUDA device: the last one when the values
        are unchanged (SGD after its first step), else a copy from pinned memory that does
        not wait for the GPU (a plain host-to-device copy would synchronize every step)."""
        import torch

        values = tuple(self._hyper(step))
        last = self._hyper_cache.get(key)
        if last is not None and last[0] == values:
            return last[1]
        dt = torch.float64 if key[0] == f64 else torch.float32
        if device.type == "cuda":
            h = torch.tensor(values, dtype=dt, pin_memory=True).to(device, non_blocking=True)
        else:  # the CPU stand-ins of bench/host_path.py
            h = torch.tensor(values, dtype=dt, device=device)
        self._hyper_cache[key] = (values, h)
        return h

    @staticmethod
    def _zeros(p: Any) -> Any:
        if isinstance(p, np.ndarray):
            return np.zeros_like(p)
        import torch

        return torch.zeros_like(p, memory_format=torch.contiguous_format)


class SGD(Optimizer):
    """Stochastic gradient descent as ``torch.optim.SGD``: with momentum ``m``,
    dampening ``d``, weight decay ``wd``::

        g = grad + wd * p
        buf = g on the first step, else m * buf + (1 - d) * g
        g = g + m * buf if nesterov else buf
        p = p - lr * g
    """

    OP_TAG = "sgd"
    HYPER = g.SGD_HYPER

    def __init__(
        self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0,
        dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, *,
        maximize: bool = False,
    ):
        if maximize:
            raise TesseraError("tessera.optim.SGD: maximize=True is not supported")
        if not momentum >= 0.0 or not weight_decay >= 0.0:
            raise TesseraError(
                f"tessera.optim.SGD: momentum and weight_decay must be >= 0, got {momentum}, "
                f"{weight_decay}"
            )
        if nesterov and (momentum <= 0.0 or dampening != 0.0):
            raise TesseraError(
                "tessera.optim.SGD: nesterov needs a momentum > 0 and zero dampening"
            )
        super().__init__(params, lr)
        self.momentum = float(momentum)
        self.dampening = float(dampening)
        self.weight_decay = float(weight_decay)
        self.nesterov = bool(nesterov)

    def _state_names(self) -> tuple[str, ...]:
        return ("momentum_buffer",) if self.momentum else ()

    def _op(self, params, grads, states, hyper):  # type: ignore[no-untyped-def]
        return g.SGDUpdateOp(
            params, grads, states[0] if states else [], hyper, momentum=self.momentum,
            weight_decay=self.weight_decay, nesterov=self.nesterov,
        )

    def _fixed(self) -> tuple[Any, ...]:
        return (self.momentum, self.weight_decay, self.nesterov)

    def _hyper(self, k: int) -> list[float]:
        if k == 1:
            return [self.lr, 0.0, 1.0]  # the buffer starts as the gradient
        return [self.lr, self.momentum, 1.0 - self.dampening]


class AdamW(Optimizer):
    """Adam with decoupled weight decay as ``torch.optim.AdamW``: at step ``t``::

        p = p * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    """

    OP_TAG = "adamw"
    STATE = ("exp_avg", "exp_avg_sq")
    HYPER = g.ADAMW_HYPER

    def __init__(
        self, params: Iterable[Any], lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
    ):
        if amsgrad:
            raise TesseraError("tessera.optim.AdamW: amsgrad=True is not supported")
        if maximize:
            raise TesseraError("tessera.optim.AdamW: maximize=True is not supported")
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise TesseraError(f"tessera.optim.AdamW: betas must be in [0, 1), got {betas}")
        if not eps >= 0.0 or not weight_decay >= 0.0:
            raise TesseraError(
                f"tessera.optim.AdamW: eps and weight_decay must be >= 0, got {eps}, "
                f"{weight_decay}"
            )
        super().__init__(params, lr)
        self.betas = (b1, b2)
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)

    def _op(self, params, grads, states, hyper):  # type: ignore[no-untyped-def]
        return g.AdamWUpdateOp(
            params, grads, states[0], states[1], hyper,
            beta1=self.betas[0], beta2=self.betas[1], eps=self.eps,
        )

    def _fixed(self) -> tuple[Any, ...]:
        return (*self.betas, self.eps)

    def _hyper(self, k: int) -> list[float]:
        b1, b2 = self.betas
        return [
            1.0 - self.lr * self.weight_decay,
            self.lr / (1.0 - b1**k),
            math.sqrt(1.0 - b2**k),
        ]

