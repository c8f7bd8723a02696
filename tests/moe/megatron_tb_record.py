"""Runs /work/shared/megatron-cpu/run_pretrain.py (Megatron's pretrain_gpt.py) with a recording
stand-in for torch.utils.tensorboard, for reference runs where PyPI's tensorboard is absent:
Megatron's training_log adds the MoE aux losses to its log line only when a TensorBoard writer
exists (track_moe_metrics), so the reference needs one. Every add_scalar(tag, value, step) is
appended to $MC_TB_RECORD as a JSON line (full precision); the rest of the writer does nothing.

usage: python megatron_tb_record.py RUN_PRETRAIN RECORD_JSON [Megatron arguments...]"""
import json
import os
import runpy
import sys
import types


class SummaryWriter:
    def __init__(self, log_dir=None, max_queue=10, **_):
        self.path = os.environ["MC_TB_RECORD"]

    def add_scalar(self, tag, value, step=None, *a, **k):
        with open(self.path, "a") as f:
            f.write(json.dumps({"tag": tag, "value": float(value), "step": int(step)}) + "\n")

    def __getattr__(self, name):  # add_text, flush, close, ...
        return lambda *a, **k: None


mod = types.ModuleType("torch.utils.tensorboard")
mod.SummaryWriter = SummaryWriter
sys.modules["torch.utils.tensorboard"] = mod
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
