"""Numerics on the CPU path: exact rounding into every storage format, stochastic
rounding from a counter-based RNG, fp6/fp4 packing and quantization policies.

``cast_array(x, policy, seed=None, offset=0)`` is the conversion every CPU path uses.
"""

from tessera.numerics.cast import cast_array

__all__ = ["cast_array"]
