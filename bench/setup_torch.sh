#!/usr/bin/env bash
# Installs the newest PyTorch from PyPI into a virtual environment for the benchmarks' PyTorch
# peers (tests use Debian's python3-torch instead). PyPI's Linux wheels are CUDA builds: their
# nvidia-* dependencies (several GB) are needed for `import torch` even on a CPU-only machine.
# BENCH_VENV picks the environment (default build/bench-venv). Prints the interpreter path.
# The tests also run Megatron itself under this interpreter where it exists (torch_dist and
# fp16 references, tests/checkpointing/megatron_cases.py), and megatron.core imports
# `packaging`, so it is installed too (a venv without it made those tests fail).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${BENCH_VENV:-$here/build/bench-venv}
if ! "$venv/bin/python" -c "import torch, numpy, packaging" 2>/dev/null; then
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q torch numpy packaging >&2
fi
echo "$venv/bin/python"
