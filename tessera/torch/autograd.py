"""``ts.jit`` functions as ``torch.autograd.Function``s: the bridge lives in the front end
(:mod:`tessera.frontend.torch_autograd`, which ``CompiledFunction.__call__`` uses when an
argument requires grad); this module keeps its public names beside the backend."""

from tessera.frontend.torch_autograd import JitFunction, call_differentiable

__all__ = ["JitFunction", "call_differentiable"]
