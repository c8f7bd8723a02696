"""Optional: the twin's 16-bit modes against Megatron-LM core_v0.12.1's own GPTModel built as
--bf16 / --fp16 (reference/check_twin16_megatron.py): bf16 under Debian's torch 1.13, and bf16 +
fp16 under torch >= 2 (MC_TORCH2_PYTHON, default $MC_BUILD_DIR/bench-venv/bin/python) where
present. The eager twin (Megatron's CPU op sequence) must match to within GEMM-order flips
(measured: bit for bit); the fused twins' differences are printed. Runs only where a Megatron
checkout and the team's CPU shim exist (MEGATRON_ROOT, default /work/ref/Megatron-LM;
MC_SHIM_DIR, default /work/shared/megatron-cpu); elsewhere it prints 'skipped' and passes."""
import os
import subprocess
import sys

root = os.environ.get('MEGATRON_ROOT', '/work/ref/Megatron-LM')
shim = os.environ.get('MC_SHIM_DIR', '/work/shared/megatron-cpu')
if not (os.path.isdir(os.path.join(root, 'megatron', 'core')) and os.path.exists(os.path.join(shim, 'shim.py'))):
    print('test_twin16_megatron: 0 passed, 0 failed (skipped: no Megatron checkout at %s or shim at %s)' % (root, shim))
    sys.exit(0)
here = os.path.dirname(os.path.abspath(__file__))
check = os.path.join(here, '..', 'reference', 'check_twin16_megatron.py')
env = dict(os.environ, MEGATRON_ROOT=root, MC_SHIM_DIR=shim, PYTHONWARNINGS='ignore',
           PYTHONPATH=os.path.join(here, '..'))
pythons = [sys.executable]
py2 = os.environ.get('MC_TORCH2_PYTHON') or os.path.join(
    os.environ.get('MC_BUILD_DIR', 'build'), 'bench-venv', 'bin', 'python')
if os.path.exists(py2):
    pythons.append(py2)
bad = 0
for py in pythons:
    r = subprocess.run([py, check], env=env, capture_output=True, text=True, timeout=900)
    print(r.stdout.strip())
    if r.returncode != 0:
        print(r.stderr[-3000:])
        bad += 1
if len(pythons) == 1:
    print('(fp16 and the torch 2 run skipped: no torch >= 2 at %s; set MC_TORCH2_PYTHON)' % py2)
print('test_twin16_megatron: %d passed, %d failed' % (len(pythons) - bad, bad))
sys.exit(1 if bad else 0)
