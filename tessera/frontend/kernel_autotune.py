"""``@kernel.autotune(space=dict(BM=[128, 256], stages=[2, 3]))``: pick a config per shape.

Every point of the space (the product of the lists, in order) is a set of
compile-time constants; a ``group_size`` entry sets the launch group size.
On the first call for a new shape signature (argument shapes and dtypes, the
other constants, the device) every config is compiled and run on copies of the
arguments:

* every config is checked to compile, run and agree with the first config
  that ran (a config that fails to compile, lower or launch, or disagrees, is
  skipped);
* with CUDA tensors, each agreeing config is then timed with CUDA events
  (``warmup`` runs, then the median of ``rep``) and the fastest wins;
* on the CPU interpreter, timings mean nothing: the first agreeing config is
  picked; a line on stderr says so.

Winners are kept in memory and in ``autotune.json`` under the cache root
(:mod:`tessera.tuning.kernel`, shared safely between processes), so later
processes skip the search; a stored config that is not a point of the space is
never run (the kernel is tuned again). A progress bar (:mod:`tessera.runtime.progress`) is drawn on stderr only
when stderr is a terminal.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.frontend.errors import TesseraError
from tessera.frontend.kernel import BoundCall, Kernel
from tessera.runtime import progress
from tessera.tuning import kernel as store


@dataclass
class TrialResult:
    """How one config did: ``ok``, its time in ms (GPU), or the error."""

    config: dict[str, Any]
    ok: bool
    ms: float | None = None
    error: str = ""


class AutotunedKernel(Kernel):
    """A kernel whose compile-time constants are chosen from ``space`` per shape."""

    def __init__(
        self,
        fn: Any = None,
        *,
        space: dict[str, list[Any]],
        warmup: int = 2,
        rep: int = 10,
        **kw: Any,
    ):
        super().__init__(fn, **kw)
        if not space or not all(isinstance(v, list | tuple) and v for v in space.values()):
            raise TesseraError("autotune: space must map names to non-empty lists of values")
        self.space = {k: list(v) for k, v in space.items()}
        self.warmup, self.rep = warmup, rep
        self.best: dict[str, dict[str, Any]] = {}
        self.last_trials: list[TrialResult] = []
        text = "\n".join(self.source.lines)
        self._src_hash = hashlib.sha256(text.encode()).hexdigest()[:16]

    def configs(self) -> list[dict[str, Any]]:
        keys = list(self.space)
        return [dict(zip(keys, vals)) for vals in itertools.product(*self.space.values())]

    def signature(self, call: BoundCall, fixed: dict[str, Any]) -> str:
        """The cache key: kernel, source, device, shapes/dtypes, other constants."""
        parts = []
        for p in self.params:
            v = call.values[p.name]
            if hasattr(v, "shape") and not isinstance(v, np.generic):
                parts.append(f"{p.name}:{tuple(v.shape)}:{v.dtype}")
        device = "cpu"
        if call.on_gpu:
            import torch

            device = torch.cuda.get_device_name()
        return (
            f"{self.__name__}:{self._src_hash}:{device}:{','.join(parts)}:"
            f"{json.dumps(fixed, sort_keys=True, default=str)}"
        )

    def __call__(
        self, *args: Any, grid: Any = None, group_size: int | None = None, **kwargs: Any
    ) -> Any:
        call = self.bind(args, kwargs)
        fixed = {k: v for k, v in call.constexprs.items() if k not in self.space}
        key = self.signature(call, fixed)
        cfg = self.best.get(key)
        if cfg is None:
            cfg = store.cached_config(key, self.configs())
        if cfg is None:
            cfg = self.tune(args, kwargs, grid, group_size, call, key)
        self.best[key] = cfg
        return self._run(args, kwargs, cfg, grid, group_size)

    def _run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], cfg: dict[str, Any],
        grid: Any, group_size: int | None,
    ) -> Any:
        consts = {k: v for k, v in cfg.items() if k != "group_size"}
        gs = cfg.get("group_size", group_size)
        return Kernel.__call__(self, *args, grid=grid, group_size=gs, **{**kwargs, **consts})

    def _copies(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
        def cp(v: Any) -> Any:
            if hasattr(v, "clone"):
                return v.clone()
            if isinstance(v, np.ndarray):
                return v.copy()
            return v

        return tuple(cp(a) for a in args), {k: cp(v) for k, v in kwargs.items()}

    def _outputs(self, args: tuple, kwargs: dict, ret: Any) -> list[np.ndarray]:
        """The writable arguments and the return value, as float64 numpy arrays."""
        from tessera.runtime.convert import is_cuda_tensor, to_numpy

        def host(v: Any) -> np.ndarray:
            if is_cuda_tensor(v):
                v = v.detach().cpu()
                if v.dtype.is_floating_point:
                    v = v.double()
            return np.asarray(to_numpy(v), np.float64)

        names = [p.name for p in self.params]
        vals = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
        outs = [host(vals[p.name]) for p in self.params if getattr(p, "mutable", False)]
        if ret is not None:
            outs.append(host(ret) if hasattr(ret, "shape") else np.asarray(ret, np.float64))
        return outs

    def tune(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
        group_size: int | None, call: BoundCall, key: str,
    ) -> dict[str, Any]:
        """Try every config; return the winner and record it in the caches."""
        configs = self.configs()
        trials: list[TrialResult] = []
        bar = progress.bar(len(configs), f"autotune {self.__name__}")
        reference: list[np.ndarray] | None = None
        for cfg in configs:
            a, kw = self._copies(args, kwargs)
            try:
                ret = self._run(a, kw, cfg, grid, group_size)
                outs = self._outputs(a, kw, ret)
                agree = reference is None or all(
                    o.shape == r.shape and np.allclose(o, r, rtol=1e-2, atol=1e-2, equal_nan=True)
                    for o, r in zip(outs, reference)
                )
                if reference is None:
                    reference = outs
                if not agree:
                    trials.append(TrialResult(cfg, False, error="results differ from the first "
                                              "config"))
                elif call.on_gpu:
                    ms = self._time_gpu(a, kw, cfg, grid, group_size)
                    trials.append(TrialResult(cfg, True, ms))
                else:
                    trials.append(TrialResult(cfg, True))
            except (TesseraError, ValueError, RuntimeError) as e:
                trials.append(TrialResult(cfg, False, error=str(e).splitlines()[0]))
            bar.update()
        bar.close()
        self.last_trials = trials
        good = [t for t in trials if t.ok]
        if not good:
            details = "; ".join(f"{t.config}: {t.error}" for t in trials)
            raise TesseraError(f"autotune {self.__name__}: no config of the space works ({details})")
        if call.on_gpu:
            win = min(good, key=lambda t: t.ms or 0.0)
            how = "gpu-timed"
        else:
            win = good[0]
            how = "cpu-first"
            sys.stderr.write(
                f"tessera autotune {self.__name__}: no GPU, so no timings; checked "
                f"{len(trials)} configs on the CPU interpreter ({len(good)} ran and agreed), "
                f"picked the first: {win.config}\n"
            )
        store.record(key, {
            "config": win.config, "how": how,
            "trials": [{"config": t.config, "ok": t.ok, "ms": t.ms, "error": t.error}
                       for t in trials],
        })
        return win.config

    def _time_gpu(
        self, args: tuple, kwargs: dict, cfg: dict[str, Any], grid: Any, group_size: int | None
    ) -> float:
        return store.time_ms(
            lambda: self._run(args, kwargs, cfg, grid, group_size), self.warmup, self.rep
        )
