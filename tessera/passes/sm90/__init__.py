"""Pieces shared by the Hopper (sm_90a) kernels written directly as Target IR
(``lower-matmul-sm90``'s GEMM and ``lower-attention-sm90``'s flash attention):

* :mod:`.constants`: the named numbers of warpgroup-specialized kernels (threads per
  warpgroup, the shared-memory alignment and swizzle, mbarrier size, register budgets);
* :mod:`.asm`: :class:`~tessera.passes.sm90.asm.TargetAsm`, which appends instructions;
* :mod:`.builders`: the prologue (shared base, mbarrier initialization, the producer /
  consumer split), producer (tensor maps, waiting for a free slot), consumer (wgmma
  descriptors, fragment coordinates) and epilogue (global stores of fragment pairs)
  steps both kernels take;
* the kernels and their lowerings: :mod:`.lower_matmul_sm90` (the GEMM, pass
  ``lower-matmul-sm90``), :mod:`.epilogue` (its fused bias and activation),
  :mod:`.transpose` (K-major copies of fp8 operands), :mod:`.conv` (conv2d through
  im2col and the GEMM), :mod:`.lower_attention_sm90` (pass ``lower-attention-sm90``) and
  :mod:`.attention_bwd_sm90` (the attention backward's dK/dV and dQ kernels, lowered by
  the same pass).
"""
