"""Optional: the PyTorch twin against Megatron-LM core_v0.12.1's own GPTModel (local spec) on
every parity config and 20 training steps (reference/check_twin_vs_megatron.py), and the twin's
tensor-parallel layout against Megatron at tp=2 on gpt2, llama and swiglu
(reference/check_twin_tp_megatron.py, two gloo processes). Runs only where a Megatron checkout
and the team's CPU shim exist (MEGATRON_ROOT, default /work/ref/Megatron-LM; MC_SHIM_DIR, default
/work/shared/megatron-cpu); elsewhere it prints 'skipped' and passes, since CI machines need not
carry Megatron."""
import os
import subprocess
import sys

root = os.environ.get('MEGATRON_ROOT', '/work/ref/Megatron-LM')
shim = os.environ.get('MC_SHIM_DIR', '/work/shared/megatron-cpu')
if not (os.path.isdir(os.path.join(root, 'megatron', 'core')) and os.path.exists(os.path.join(shim, 'shim.py'))):
    print('test_twin_megatron: 0 passed, 0 failed (skipped: no Megatron checkout at %s or shim at %s)' % (root, shim))
    sys.exit(0)
here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, MEGATRON_ROOT=root, MC_SHIM_DIR=shim, PYTHONWARNINGS='ignore')
r = subprocess.run([sys.executable, os.path.join(here, '..', 'reference', 'check_twin_vs_megatron.py')],
                   env=env, capture_output=True, text=True)
lines = [l for l in r.stdout.splitlines() if l.strip()]
if r.returncode != 0:
    lines.append(r.stderr[-3000:])
env['MC_TP_PORT'] = str(29500 + os.getpid() % 400)  # concurrent runs must not share a port
r2 = subprocess.run([sys.executable, os.path.join(here, '..', 'reference', 'check_twin_tp_megatron.py'),
                     'gpt2', 'llama', 'swiglu'], env=env, capture_output=True, text=True, timeout=600)
lines += [l for l in r2.stdout.splitlines() if l.strip()]
if r2.returncode != 0:
    lines.append(r2.stderr[-3000:])
print('\n'.join(lines))
n = sum(1 for l in lines if 'worst rel err' in l or 'adam:' in l)
bad = (r.returncode != 0) + (r2.returncode != 0)
print('test_twin_megatron: %d passed, %d failed' % (n, bad))
sys.exit(1 if bad else 0)
