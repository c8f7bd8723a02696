#!/usr/bin/env python3
"""tools/megatron_dump_hooks.py under Megatron-LM on this CPU: the shims of
/work/shared/megatron-cpu (what its run_pretrain.py applies before Megatron is imported), then
the hook script's own main. One process per rank, launched as run_pretrain.py is (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MEGATRON_ROOT set).

usage: megatron_cpu_dump.py --dump-dir DIR [--dump-iters ..] -- <pretrain_gpt.py arguments>"""
import os
import sys

sys.path.insert(0, "/work/shared/megatron-cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import shim  # noqa: E402  (sets sys.path to MEGATRON_ROOT)

shim.gloo_compat()
shim.emulate_cuda()
shim.rmsnorm_compat()
shim.distopt_compat()
shim.cpu_run_compat()
shim.pipeline_compat()

import megatron_dump_hooks  # noqa: E402

argv = sys.argv[1:]
if "--megatron-root" not in argv:
    argv = ["--megatron-root", os.environ["MEGATRON_ROOT"]] + argv
megatron_dump_hooks.main(argv)
print("MEGATRON_DUMP_DONE", flush=True)
import torch  # noqa: E402
if torch.distributed.is_initialized():
    torch.distributed.barrier()
sys.stdout.flush()
os._exit(0)
