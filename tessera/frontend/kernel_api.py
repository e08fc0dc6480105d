"""``ts.kernel`` / ``kernel``: the decorator object of tile kernels.

* ``@ts.kernel`` or ``@ts.kernel(group_size=256, grid=...)`` -> :class:`Kernel`
* ``@ts.kernel.autotune(space=dict(BM=[128, 256]))`` -> :class:`AutotunedKernel`
* ``@ts.kernel.func`` marks a helper that kernels call (any plain Python function
  is inlined from its source the same way; the marker documents intent)
* ``ts.kernel.from_source(text)`` compiles a kernel written in the guide's exact
  syntax (``y: mut f32[n]``, ``cp_async.shared.global(...)``), which Python
  itself cannot parse
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable
from typing import Any

from tessera.frontend.kernel import Kernel
from tessera.frontend.kernel_autotune import AutotunedKernel
from tessera.frontend.kernel_source import KernelSource

_GLOBAL_ATTR = re.compile(r"\.global\s*\(")


def guide_namespace() -> dict[str, Any]:
    """The names the guide's kernels use unqualified (``tile``, ``f16``, ``tbarrier``...)."""
    import tessera as ts
    from tessera import tile as tile_ns

    names: dict[str, Any] = {"ts": ts, "tessera": ts, "tile": tile_ns, "kernel": kernel}
    for n in ("tshared", "tbarrier", "cp_async", "mut"):
        names[n] = getattr(tile_ns, n)
    for n in ("f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "i8", "i32", "i64",
              "fp16", "fp32", "fp64", "int8", "int32", "int64"):
        names[n] = getattr(ts, n)
    return names


class KernelDecorator:
    """The ``ts.kernel`` object (see the module docstring)."""

    def __call__(
        self, fn: Callable[..., Any] | None = None, *, group_size: int | None = None,
        grid: Any = None,
    ) -> Any:
        if fn is None:
            return lambda f: Kernel(f, group_size=group_size, grid=grid)
        return Kernel(fn, group_size=group_size, grid=grid)

    def autotune(
        self, space: dict[str, list[Any]], *, group_size: int | None = None, grid: Any = None,
        warmup: int = 2, rep: int = 10,
    ) -> Callable[[Callable[..., Any]], AutotunedKernel]:
        """Decorator: tune the compile-time constants in ``space`` per argument shape."""

        def wrap(fn: Callable[..., Any]) -> AutotunedKernel:
            return AutotunedKernel(
                fn, space=space, group_size=group_size, grid=grid, warmup=warmup, rep=rep
            )

        return wrap

    @staticmethod
    def func(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Mark ``fn`` as a helper for kernels; a kernel inlines it at each call."""
        fn.__tessera_kernel_func__ = fn  # type: ignore[attr-defined]
        return fn

    def from_source(
        self,
        text: str,
        namespace: dict[str, Any] | None = None,
        *,
        file: str = "<kernel>",
        group_size: int | None = None,
        grid: Any = None,
    ) -> Kernel:
        """Compile a kernel from text in the guide's syntax.

        Names resolve in ``namespace`` (default: the caller's globals over
        :func:`guide_namespace`). A ``@kernel.autotune(space=...)`` decorator in
        the text is honoured.
        """
        ns = guide_namespace()
        ns.update(sys._getframe(1).f_globals if namespace is None else namespace)
        text = _GLOBAL_ATTR.sub(".global_(", text)
        source = KernelSource.from_text(text, ns, file=file)
        for dec in source.fn_def.decorator_list:
            if isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "autotune":
                kw = {
                    k.arg: eval(compile(ast.Expression(k.value), file, "eval"), ns)  # noqa: S307
                    for k in dec.keywords if k.arg
                }
                return AutotunedKernel(source=source, group_size=group_size, grid=grid, **kw)
        return Kernel(source=source, group_size=group_size, grid=grid)


kernel = KernelDecorator()
