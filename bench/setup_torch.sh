#!/usr/bin/env bash
# Installs the fastest PyTorch that runs on this CPU-only machine into build/bench-venv, for the
# benchmarks' PyTorch peers (never used by tests, which use Debian's python3-torch).
# PyPI's Linux torch wheels are CUDA builds; 2.5.1 imports without the CUDA libraries
# (newer wheels preload libcudart/libcublas at import and fail), so it is installed without
# its nvidia-* dependencies. Prints the interpreter path on success.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${BENCH_VENV:-$here/build/bench-venv}
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --no-deps torch==2.5.1 >&2
  "$venv/bin/pip" install -q numpy typing_extensions sympy networkx jinja2 filelock fsspec >&2
fi
echo "$venv/bin/python"
