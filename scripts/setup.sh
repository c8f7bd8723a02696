#!/usr/bin/env bash
# Installs everything megatron.c needs on a fresh Debian 12 machine: the C toolchain, CMake,
# OpenMP, MPI, the GEMM libraries, and Debian's CPU PyTorch for the parity tests.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libblis-dev libdnnl-dev libopenmpi-dev openmpi-bin
      python3 python3-numpy python3-torch python3-regex python3-pybind11 python3-pip python3-venv)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The tokenizer tests compare live against these PyPI packages (they fall back to committed
# goldens when the packages cannot be installed); tests/training/test_tensorboard.py reads our
# event files with tensorboard's own reader. Never add `transformers` here: it upgrades
# `regex` over Debian's, which Megatron's GPT-2 tokenizer is checked against.
py_pkgs=(sentencepiece tokenizers tiktoken tensorboard)
if ! /usr/bin/python3 -c "import sentencepiece, tokenizers, tiktoken, tensorboard" 2>/dev/null; then
  /usr/bin/python3 -m pip install -q --break-system-packages "${py_pkgs[@]}" \
    || echo "setup: warning: could not install ${py_pkgs[*]} from PyPI; tokenizer tests use goldens, the TensorBoard reader checks skip"
fi
echo "setup: all packages present"
