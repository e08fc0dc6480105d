"""Python front ends: tracing operator graphs (``@ts.jit``, ``@graph.module``) and
tensor annotations (``ts.Tensor["M", "K", ts.bf16]``)."""
