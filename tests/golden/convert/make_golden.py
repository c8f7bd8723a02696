#!/usr/bin/env python3
"""Runs Megatron-LM core_v0.12.1's own tools/checkpoint/convert.py on this machine's CPU
(/usr/bin/python3, torch 1.13) to make the goldens of tests/convert/test_convert_megatron_golden.py.

usage: MEGATRON_ROOT=<Megatron-LM core_v0.12.1> /usr/bin/python3 make_golden.py <convert.py args>

Our own wrapper (no Megatron code): it imports /work/shared/megatron-cpu/shim.py (CUDA-only calls
made harmless, torch.distributed.checkpoint stubbed), then makes three things convert.py needs on a
GPU machine harmless without changing what it computes: the fused-kernel build
(megatron.legacy.fused_kernels.load, CUDA compilation only), the saver's Transformer Engine
version check (importlib.metadata.version('transformer-engine'); the savers are run with
--saver-transformer-impl local, so TE is never imported), persist_layer_norm /
gradient_accumulation_fusion / apply_rope_fusion (choices of apex/TE kernels that the CPU refuses and the converter's own
argument parsing offers no option to turn off; neither touches a stored value), then runs
convert.py's main()."""
import importlib.metadata
import os
import runpy
import sys

SHIM = os.environ.get("MC_MEGATRON_CPU", "/work/shared/megatron-cpu")
sys.path.insert(0, SHIM)
import shim  # noqa: E402,F401  (puts MEGATRON_ROOT on sys.path)

shim.emulate_cuda()
shim.legacy_compat()  # the legacy model's apex LayerNorm -> torch's (the legacy saver builds one)
shim.rmsnorm_compat()  # torch 1.13 has no torch.nn.RMSNorm: the shim's stand-in (same formula)
import megatron.legacy.fused_kernels as fk  # noqa: E402

fk.load = lambda args: None
import megatron.core.transformer.transformer_config as tc  # noqa: E402

_post_init = tc.TransformerConfig.__post_init__


def _no_persist(self):
    self.persist_layer_norm = False
    self.gradient_accumulation_fusion = False
    self.apply_rope_fusion = False
    _post_init(self)


tc.TransformerConfig.__post_init__ = _no_persist
_version = importlib.metadata.version
importlib.metadata.version = lambda name: "1.13.0" if name == "transformer-engine" else _version(name)

try:  # llama_mistral loader: from_pretrained(low_cpu_mem_usage=True, device_map="cpu") wants
    # the accelerate package; loading plainly on the CPU gives the same tensors
    import transformers

    _from_pretrained = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def _plain(cls, *a, **k):
        k.pop("low_cpu_mem_usage", None)
        k.pop("device_map", None)
        return _from_pretrained(cls, *a, **k)

    transformers.AutoModelForCausalLM.from_pretrained = classmethod(_plain)
except ImportError:  # the system Python has no transformers: fine for the Megatron loaders
    pass

tools = os.path.join(os.environ["MEGATRON_ROOT"], "tools", "checkpoint")
sys.path.insert(0, tools)
sys.argv = [os.path.join(tools, "convert.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
