#!/bin/sh
# convert_checkpoint throughput and peak memory on a Llama-style model (default ~270M parameters,
# 1.1 GB fp32: hidden 1024, 16 layers, 16 heads / 4 KV heads, ffn 2816, vocab 32000), made at random
# by transformers in build/hf-venv (scripts/setup_hf_venv.sh):
#   HF -> Megatron tp2 x pp2 (TE names) -> Megatron tp1 (local names) -> HF, each timed with
#   /usr/bin/time (wall seconds, max RSS), and the HF round trip checked bit-exact.
# Usage: bench/convert/run.sh [build-dir] [work-dir]      (work-dir needs ~5 GB)
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
work=${2:-/tmp/mc_bench_convert}
py=$build/hf-venv/bin/python
conv=$build/bin/convert_checkpoint
rm -rf "$work" && mkdir -p "$work"
OMP_NUM_THREADS=1 "$py" - "$work/hf" <<'PY'
import sys, torch, transformers as tf
torch.manual_seed(0)
cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                     num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                     tie_word_embeddings=False)
m = tf.LlamaForCausalLM(cfg)
print("parameters:", sum(p.numel() for p in m.parameters()))
m.save_pretrained(sys.argv[1], safe_serialization=True)
PY
step() {
    name=$1; shift
    /usr/bin/time -f "$name: %e s wall, %M KB max RSS" "$conv" --model-type GPT "$@" > "$work/$name.log"
}
step hf_to_tp2pp2 --loader hf --saver core --load-dir "$work/hf" --save-dir "$work/tp2pp2" \
    --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
step tp2pp2_to_tp1 --loader core --saver core --saver-transformer-impl local --load-dir "$work/tp2pp2" \
    --save-dir "$work/tp1" --target-tensor-parallel-size 1 --target-pipeline-parallel-size 1
step tp1_to_hf --loader core --saver hf --load-dir "$work/tp1" --save-dir "$work/hf2" --true-vocab-size 32000
du -sh "$work/hf" "$work/tp2pp2" "$work/tp1" "$work/hf2"
"$py" - "$work/hf" "$work/hf2" <<'PY'
import sys
from safetensors.torch import load_file
import glob, torch
def load(d):
    out = {}
    for f in sorted(glob.glob(d + "/*.safetensors")):
        out.update(load_file(f))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
print("HF -> tp2pp2 -> tp1 -> HF bit-exact:", same)
sys.exit(0 if same else 1)
PY
