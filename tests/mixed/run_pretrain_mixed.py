#!/usr/bin/env python3
"""/work/shared/megatron-cpu/run_pretrain.py (Megatron-LM core_v0.12.1's own pretrain_gpt.py on a
CPU) for the mixed-precision goldens, with one choice made differently: the RMSNorm.

torch < 2.4 has no torch.nn.RMSNorm; the shared shim's stand-in computes in the input dtype (bf16
products, mean and rsqrt). Megatron users run RMSNorm from Transformer Engine or Apex, which
compute in fp32 and round the output once; megatron.c does the same (design: norms fp32 inside,
output rounded). So by default (MC_RMSNORM=fp32) this wrapper installs an RMSNorm that widens
x and the weight to fp32, computes y = x * rsqrt(mean(x^2) + eps) * w there and rounds y once to
the input dtype (autograd gives the matching backward: fp32 inside, dx and dw rounded once).
MC_RMSNORM=shim keeps the shared shim's stand-in (used to measure the difference).

One CPU addition: torch 1.13's gloo cannot all-reduce 16-bit tensors ("Invalid scalar type"; tp2
reduces the bf16 embedding and row-parallel outputs). They are summed in fp32 and rounded back to
the tensor's dtype once: with two ranks exactly what NCCL computes (round(a + b)).
Nothing else changes; usage is run_pretrain.py's."""
import os
import runpy
import sys

RUN_PRETRAIN = "/work/shared/megatron-cpu/run_pretrain.py"
sys.path.insert(0, os.path.dirname(RUN_PRETRAIN))
import shim  # noqa: E402  (the shared shim: sys.path, gloo, CUDA emulation)
import torch  # noqa: E402


class Fp32RMSNorm(torch.nn.Module):
    """RMSNorm computed in fp32, output rounded once to the input dtype (TE / Apex numerics)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape, dtype=dtype))

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        dims = tuple(range(-len(self.normalized_shape), 0))
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps) * self.weight.float()
        return y.to(x.dtype)


def rmsnorm_fp32_compat():
    torch.nn.RMSNorm = Fp32RMSNorm
    import megatron.core.transformer.torch_norm as TN
    _orig = TN.is_torch_min_version
    TN.is_torch_min_version = lambda v, *a, **k: True if v == "2.4.0a0" else _orig(v, *a, **k)


def gloo_16bit_compat(_shared=shim.gloo_compat):
    _shared()
    import torch.distributed as dist
    _all_reduce = dist.all_reduce

    class _Done:
        def wait(self):
            return None

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if tensor.dtype not in (torch.bfloat16, torch.float16):
            return _all_reduce(tensor, op=op, group=group, async_op=async_op)
        wide = tensor.float()
        _all_reduce(wide, op=op, group=group)
        tensor.copy_(wide)
        return _Done() if async_op else None
    dist.all_reduce = all_reduce


shim.gloo_compat = gloo_16bit_compat
choice = os.environ.get("MC_RMSNORM", "fp32")
if choice == "fp32":
    shim.rmsnorm_compat = rmsnorm_fp32_compat  # run_pretrain.py calls it after gloo/CUDA set-up
elif choice != "shim":
    raise SystemExit(f"MC_RMSNORM={choice!r}: expected 'fp32' or 'shim'")
sys.argv = [RUN_PRETRAIN] + sys.argv[1:]
runpy.run_path(RUN_PRETRAIN, run_name="__main__")
