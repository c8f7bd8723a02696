#!/usr/bin/env python3
"""Runs Megatron-LM core_v0.12.1's tools/preprocess_data.py unchanged under Debian's torch 1.13,
for make_goldens.py. Import plumbing only (as shared/megatron-cpu/run_preprocess.py does):
`megatron`, `megatron.core` and `megatron.training` become bare packages (their __init__
files import model code that needs torch >= 2), the multimodal tokenizer is a stand-in class,
`megatron.training.arguments` holds only the real `_add_tokenizer_args`, and
`print_rank_0` (logging, used by TikTokenizer) is plain print.

usage: MEGATRON_ROOT=... /usr/bin/python3 megatron_preprocess.py [preprocess_data.py args...]
"""
import ast
import os
import runpy
import sys
import types

M = os.environ["MEGATRON_ROOT"]
sys.path.insert(0, M)
for name, sub in [("megatron", "megatron"), ("megatron.core", "megatron/core"),
                  ("megatron.training", "megatron/training")]:
    mod = types.ModuleType(name)
    mod.__path__ = [os.path.join(M, sub)]
    sys.modules[name] = mod
import megatron.core.parallel_state  # noqa: E402,F401  (must precede megatron.core.utils)

training = sys.modules["megatron.training"]
training.print_rank_0 = print
utils = types.ModuleType("megatron.training.utils")
utils.print_rank_0 = print
sys.modules[utils.__name__] = utils
mm = types.ModuleType("megatron.training.tokenizer.multimodal_tokenizer")
mm.MultimodalTokenizer = type("MultimodalTokenizer", (), {})
sys.modules[mm.__name__] = mm
src = os.path.join(M, "megatron", "training", "arguments.py")
fn = [n for n in ast.parse(open(src).read()).body
      if isinstance(n, ast.FunctionDef) and n.name == "_add_tokenizer_args"]
args_mod = types.ModuleType("megatron.training.arguments")
exec(compile(ast.Module(body=fn, type_ignores=[]), src, "exec"), args_mod.__dict__)
sys.modules[args_mod.__name__] = args_mod

tool = os.path.join(M, "tools", "preprocess_data.py")
sys.argv = [tool] + sys.argv[1:]
runpy.run_path(tool, run_name="__main__")
