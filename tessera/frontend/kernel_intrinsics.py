"""Placeholders for the names that exist only inside ``@ts.kernel`` bodies.

``ts.tile.linear_id``, ``tbarrier``, ``cp_async``... are :class:`Intrinsic`
objects: the kernel compiler recognises them by name and emits Tile IR;
calling one from ordinary Python raises an error that says so.
``tshared.alloc[f16]`` binds a dtype (:meth:`Intrinsic.__getitem__`), and
``cp_async.shared.global_`` is the same intrinsic as ``cp_async`` reached
through attribute names (``global`` is a Python keyword, so in ``.py`` files
the guide's ``cp_async.shared.global(...)`` is written ``.global_``; kernels
given as text may use ``.global``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Intrinsic:
    """A kernel-only builtin, identified by ``name``; ``bound`` holds ``[dtype]`` items."""

    name: str
    doc: str = ""
    bound: tuple[Any, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{self.name}() can only be used inside a @ts.kernel function, which is "
            "compiled to Tile IR rather than run by Python"
        )

    def __getitem__(self, item: Any) -> Intrinsic:
        items = item if isinstance(item, tuple) else (item,)
        return Intrinsic(self.name, self.doc, self.bound + items, self.aliases)

    def __getattr__(self, attr: str) -> Intrinsic:
        aliases = object.__getattribute__(self, "aliases")
        if attr in aliases:
            return Intrinsic(aliases[attr], self.doc, self.bound, aliases)
        raise AttributeError(f"{self.name} has no attribute '{attr}'")

    def __repr__(self) -> str:
        return f"<tile intrinsic {self.name}>"
