#!/usr/bin/env bash
# Installs the newest PyTorch from PyPI into a virtual environment for the benchmarks' PyTorch
# peers (tests use Debian's python3-torch instead). PyPI's Linux wheels are CUDA builds: their
# nvidia-* dependencies (several GB) are needed for `import torch` even on a CPU-only machine.
# BENCH_VENV picks the environment (default build/bench-venv). Prints the interpreter path.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${BENCH_VENV:-$here/build/bench-venv}
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q torch numpy >&2
fi
echo "$venv/bin/python"
