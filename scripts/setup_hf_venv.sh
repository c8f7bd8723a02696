#!/bin/sh
# Creates build/hf-venv: a virtual environment over the system Python (/usr/bin/python3, with
# Debian's torch 1.13, numpy and regex visible through --system-site-packages) plus pinned
# HuggingFace transformers + safetensors, for the convert_checkpoint HF tests
# (tests/convert/test_convert_hf.py). transformers is never installed system-wide: its
# dependencies would upgrade the system `regex`. The system numpy/regex/torch are pinned through
# a constraints file so pip does not replace them inside the venv either.
# Usage: scripts/setup_hf_venv.sh [build-dir]    (default: build)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
venv=$build/hf-venv
# transformers 4.44.2 is the last release line whose PyTorch integration still imports under
# torch 1.13 (later ones need torch >= 2.0 for several modules); tokenizers follows it.
TRANSFORMERS=4.44.2
SAFETENSORS=0.4.5
mkdir -p "$build"
if [ ! -x "$venv/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
cons=$venv/constraints.txt
/usr/bin/python3 - "$cons" <<'PY'
import sys, importlib.metadata as md
with open(sys.argv[1], "w") as f:
    for name in ("numpy", "regex", "torch"):
        try:
            f.write(f"{name}=={md.version(name)}\n")
        except md.PackageNotFoundError:
            pass
PY
"$venv/bin/python" -m pip install --quiet -c "$cons" \
    "transformers==$TRANSFORMERS" "safetensors==$SAFETENSORS"
"$venv/bin/python" -c "
import torch, transformers, safetensors, regex, numpy
from transformers import GPT2LMHeadModel, LlamaForCausalLM
print('hf-venv ok: torch', torch.__version__, 'transformers', transformers.__version__,
      'safetensors', safetensors.__version__)
"
