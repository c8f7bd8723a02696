#!/usr/bin/env bash
# The main job on an embedded default: a corpus every Debian machine has (its license texts and
# this project's sources), a BPE tokenizer trained on it, Megatron's preprocessing, then
# pretrain_gpt under mpirun with a Megatron-style argument list, then a few lines generated from
# the checkpoint it saved. Takes a few minutes on 2 cores.
# Outputs go to build/demo/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=build/demo
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

rm -rf "$out/cache"   # the data is rebuilt below, so its index caches are too
echo "== 1/5 corpus"
python3 scripts/make_corpus.py "$out/corpus.jsonl" /usr/share/common-licenses src include docs

echo "== 2/5 train_tokenizer (byte-level BPE, GPT-2 format)"
build/bin/train_tokenizer --input "$out/corpus.jsonl" --json-keys text --vocab-size 4096 \
    --output-dir "$out/tokenizer"

echo "== 3/5 preprocess_data"
build/bin/preprocess_data --input "$out/corpus.jsonl" --output-prefix "$out/corpus" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$out/tokenizer/vocab.json" \
    --merge-file "$out/tokenizer/merges.txt" --append-eod --workers 2

echo "== 4/5 pretrain_gpt"
mpirun=(mpirun -np 1 --bind-to none)  # Open MPI would bind the rank to one core
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
GPT_ARGS=(
    --num-layers 4 --hidden-size 256 --num-attention-heads 8
    --seq-length 128 --max-position-embeddings 128
    --micro-batch-size 8 --global-batch-size 16
    --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20
    --weight-decay 0.1 --clip-grad 1.0 --adam-beta2 0.95
    --attention-dropout 0.0 --hidden-dropout 0.0
    --train-iters ${DEMO_ITERS:-200}
)
DATA_ARGS=(
    --data-path "$out/corpus_text_document" --split 949,50,1
    --tokenizer-type GPT2BPETokenizer --vocab-file "$out/tokenizer/vocab.json"
    --merge-file "$out/tokenizer/merges.txt" --data-cache-path "$out/cache"
)
OUTPUT_ARGS=(--log-interval 10 --eval-interval 100 --eval-iters 5 --log-throughput
    --save "$out/checkpoint" --save-interval ${DEMO_ITERS:-200} --ckpt-format torch)
rm -rf "$out/checkpoint"
"${mpirun[@]}" build/bin/pretrain_gpt "${GPT_ARGS[@]}" "${DATA_ARGS[@]}" "${OUTPUT_ARGS[@]}" \
    --distributed-backend gloo | tee "$out/train.log"
echo "== 5/5 generate (from the model just trained; docs/generation.md)"
build/bin/generate --load "$out/checkpoint" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$out/tokenizer/vocab.json" --merge-file "$out/tokenizer/merges.txt" \
    --prompt "This program is free software" --prompt "#include" \
    --max-tokens 48 --temperature 0.8 --top-k 40 --seed 1234
echo "demo: done; log in $out/train.log, checkpoint in $out/checkpoint"
