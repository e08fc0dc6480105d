"""Running Tessera programs: the numpy reference interpreter, conversion of
torch/numpy values, and dispatch to a GPU backend."""

from tessera.runtime.graph_interpreter import run_function

__all__ = ["run_function"]
