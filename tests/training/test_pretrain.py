"""pretrain_gpt end to end on Megatron's mock data: the training line layout, consumed samples,
the loss averaging semantics, the exit conditions (train-iters, --exit-interval, SIGTERM with
--exit-signal-handler) and the start-up refusals of what this build cannot do yet."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("MC_BUILD_DIR", "build")
EXE = os.path.join(BUILD, "bin", "pretrain_gpt")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def args(tmp, iters=6, mbs=4, gbs=8, extra=()):
    return [EXE, "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32",
            "--micro-batch-size", str(mbs), "--global-batch-size", str(gbs),
            "--train-iters", str(iters), "--lr", "1e-3", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "2", "--log-interval", "1", "--eval-interval", "3",
            "--eval-iters", "1", "--mock-data", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
            "--attention-dropout", "0", "--hidden-dropout", "0", *extra]


def run(cmd, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, **kw)


LINE = re.compile(
    r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \|"
    r" elapsed time per iteration \(ms\): \d+\.\d \| learning rate: (\d\.\d{6}E[+-]\d\d) \|"
    r" global batch size: +(\d+) \| lm loss: (\d\.\d{6}E[+-]\d\d) \| loss scale: 1\.0 \|"
    r" grad norm: \d+\.\d{3} \| num zeros: \d+\.0 \| number of skipped iterations: +0 \|"
    r" number of nan iterations: +0 \|$")


def losses(out):
    return [float(m.group(6)) for m in map(LINE.match, out.splitlines()) if m]


def test_training_lines(tmp):
    p = run(args(tmp))
    check(p.returncode == 0, f"plain run exits 0 (got {p.returncode}: {p.stderr[-500:]})")
    lines = [m for m in map(LINE.match, p.stdout.splitlines()) if m]
    check(len(lines) == 6, f"one training line per iteration (got {len(lines)})")
    for k, m in enumerate(lines, 1):
        check(int(m.group(1)) == k and int(m.group(2)) == 6, "iteration k/6")
        check(int(m.group(3)) == 8 * k, "consumed samples = 8 k")
        check(int(m.group(5)) == 8, "global batch size")
    # warmup 2 iterations from 0 to 1e-3: the line of iteration 1 prints the lr of the next one
    check(lines and lines[0].group(4) == "5.000000E-04", "warmup lr printed after step 1")
    for name in ("[after megatron is initialized] datetime:", "training ...",
                 "[after training is done] datetime:", " validation loss at iteration 3 |",
                 " validation loss at iteration 6 on validation set |",
                 " validation loss at iteration 6 on test set |",
                 "INFO:megatron.core.num_microbatches_calculator:setting number of microbatches to constant 2",
                 " > padded vocab (size: 4097) with 127 dummy tokens (new size: 4224)"):
        check(name in p.stdout, f"stdout has {name!r}")
    box = [l for l in p.stdout.splitlines() if l.startswith(" validation loss at iteration 3 |")]
    if box:
        i = p.stdout.splitlines().index(box[0])
        dash = p.stdout.splitlines()[i - 1]
        check(dash == "-" * (len(box[0]) + 1), "validation box dashes one longer than the line")
    ls = losses(p.stdout)
    check(len(ls) == 6 and ls[-1] < ls[0], f"loss falls {ls}")
    again = run(args(tmp))
    check(losses(again.stdout) == ls, "a rerun gives the same losses (bit-identical printing)")


def test_micro_batch_semantics(tmp):
    # Equal token counts per micro-batch: 2 x mbs 4 and 1 x mbs 8 are the same average.
    a = losses(run(args(tmp, mbs=4)).stdout)
    b = losses(run(args(tmp, mbs=8)).stdout)
    check(len(a) == len(b) == 6 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b)),
          f"gradient accumulation equals the big micro-batch: {a} vs {b}")
    # With --eod-mask-loss the micro-batches hold different token counts: the global token
    # mean (--calculate-per-token-loss) is independent of the split, Megatron's default is not.
    extra = ("--eod-mask-loss", "--calculate-per-token-loss")
    c = losses(run(args(tmp, mbs=2, extra=extra)).stdout)
    d = losses(run(args(tmp, mbs=8, extra=extra)).stdout)
    check(len(c) == len(d) == 6 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(c, d)),
          f"per-token loss independent of the micro-batch split: {c} vs {d}")


def test_exit_interval(tmp):
    p = run(args(tmp, iters=10, extra=("--exit-interval", "4")))
    check(p.returncode == 0, "--exit-interval exits 0")
    check("[exiting program at iteration 4] datetime:" in p.stdout, "exit message")
    check("on validation set" not in p.stdout, "no final evaluation after an exit")
    check(len(losses(p.stdout)) == 4, "4 iterations ran")


def test_sigterm(tmp):
    cmd = args(tmp, iters=100000, extra=("--exit-signal-handler",))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    for line in p.stdout:  # wait for the loop to be running
        seen.append(line)
        if LINE.match(line.rstrip("\n")):
            break
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    out = "".join(seen) + out
    check(p.returncode == 0, f"SIGTERM with --exit-signal-handler exits 0 (got {p.returncode})")
    check("[exiting program after receiving SIGTERM.] datetime:" in out, "SIGTERM exit message")


def test_refusals(tmp):
    for extra, env, words in (
        (("--save", os.path.join(tmp, "ck"), "--save-interval", "2", "--ckpt-format", "zarr"), {},
         "--ckpt-format zarr is not supported by megatron.c yet (--save)"),
        (("--bf16", "--fp32-residual-connection", "--num-experts", "2"), {},
         "--fp32-residual-connection with --num-experts"),
        ((), {"WORLD_SIZE": "2", "RANK": "0"}, "world size"),
    ):
        e = dict(os.environ, OMP_NUM_THREADS="1", **env)
        p = subprocess.run(args(tmp, extra=extra), capture_output=True, text=True, env=e, timeout=120)
        check(p.returncode != 0, f"{extra or env} refused with non-zero exit")
        check(words in p.stderr and "training ..." not in p.stdout.splitlines(),
              f"{extra or env}: message names {words!r} before training: {p.stderr[-300:]}")


def test_stale_cache(tmp):
    """The cache name does not depend on the data (as in Megatron): a cache built for other
    data under the same prefix must be refused at start-up, naming the fix."""
    import json
    import random
    prep = os.path.join(BUILD, "bin", "preprocess_data")
    prefix, cache = os.path.join(tmp, "stale"), os.path.join(tmp, "stale_cache")
    data_args = ["--data-path", prefix + "_text_document", "--split", "1,0,0",
                 "--data-cache-path", cache, "--eval-iters", "0"]
    rng = random.Random(7)
    for attempt, (lo, hi) in enumerate(((20, 60), (70, 200))):
        src = os.path.join(tmp, f"stale{attempt}.jsonl")
        with open(src, "w") as f:
            for _ in range(60):
                toks = [str(rng.randrange(4000)) for _ in range(rng.randrange(lo, hi))]
                f.write(json.dumps({"text": " ".join(toks)}) + "\n")
        r = run([prep, "--input", src, "--output-prefix", prefix, "--tokenizer-type", "NullTokenizer",
                 "--vocab-size", "4096", "--append-eod", "--workers", "1"])
        check(r.returncode == 0, f"preprocess_data for the stale-cache test: {r.stderr[-300:]}")
        cmd = [a for a in args(tmp, iters=4) if a != "--mock-data"]
        i = cmd.index("--data-cache-path")
        del cmd[i:i + 2]
        i = cmd.index("--eval-iters")
        del cmd[i:i + 2]
        p = run(cmd + data_args)
        if attempt == 0:
            check(p.returncode == 0, f"first run builds the cache: {p.stderr[-300:]}")
        else:
            check(p.returncode != 0 and "built for other data" in p.stderr,
                  f"a cache built for other data is refused: rc {p.returncode} {p.stderr[-300:]}")


def main():
    if not os.path.exists(EXE):
        print(f"FAIL: {EXE} is not built")
        sys.exit(1)
    with tempfile.TemporaryDirectory() as tmp:
        for t in (test_training_lines, test_micro_batch_semantics, test_exit_interval,
                  test_sigterm, test_refusals, test_stale_cache):
            t(tmp)
    print(f"test_pretrain: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
