"""A save that fails (here: the tracker file cannot be written, as on a full disk) removes the
iteration directory it was writing and never the last good checkpoint, so a retry needs room for
one copy, not two; and a tracker holding an iteration number beyond 64 bits is reported as an
invalid iteration, naming the file (it used to be clamped silently before a not-found error).
Issue 15, the smaller findings."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from mc_test import check, run_cmd, summary, PRETRAIN  # noqa: E402

TRACKER = "latest_checkpointed_iteration.txt"


def cmd(tmp, iters, extra=()):
    return [PRETRAIN, "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2",
            "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
            "--global-batch-size", "2", "--train-iters", str(iters), "--lr", "1e-3", "--lr-decay-iters", "6",
            "--log-interval", "1", "--mock-data", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
            "--ckpt-format", "torch", "--transformer-impl", "local", "--eval-iters", "0",
            "--save", os.path.join(tmp, "ck"), "--save-interval", "2", "--override-opt_param-scheduler", *extra]


env = dict(os.environ, OMP_NUM_THREADS="1")
with tempfile.TemporaryDirectory() as tmp:
    ck = os.path.join(tmp, "ck")
    r = run_cmd(cmd(tmp, 2), env, 120)
    check(r.returncode == 0 and open(os.path.join(ck, TRACKER)).read() == "2",
          "first save: %s" % r.stderr[-300:])
    good = sorted(os.listdir(os.path.join(ck, "iter_0000002", "mp_rank_00")))
    # the tracker's temporary name is taken by a directory: writing the tracker fails
    os.mkdir(os.path.join(ck, TRACKER + ".tmp"))
    r = run_cmd(cmd(tmp, 4, ["--load", ck]), env, 120)
    check(r.returncode != 0 and TRACKER in r.stderr, "tracker write fails: %s" % r.stderr[-300:])
    check(not os.path.exists(os.path.join(ck, "iter_0000004")),
          "the unreferenced iteration_0000004 is removed: %s" % os.listdir(ck))
    check(open(os.path.join(ck, TRACKER)).read() == "2" and
          sorted(os.listdir(os.path.join(ck, "iter_0000002", "mp_rank_00"))) == good,
          "the last good checkpoint is untouched: %s" % os.listdir(ck))
    os.rmdir(os.path.join(ck, TRACKER + ".tmp"))
    r = run_cmd(cmd(tmp, 4, ["--load", ck]), env, 120)
    check(r.returncode == 0 and open(os.path.join(ck, TRACKER)).read() == "4",
          "the retry succeeds: %s" % r.stderr[-300:])

    # a tracker number beyond 64 bits: an invalid iteration, naming the file
    with open(os.path.join(ck, TRACKER), "w") as f:
        f.write("99999999999999999999999")
    r = run_cmd(cmd(tmp, 6, ["--load", ck]), env, 120)
    check(r.returncode != 0 and "Invalid metadata file" in r.stderr and TRACKER in r.stderr and
          "99999999999999999999999" in r.stderr and "not a valid iteration number" in r.stderr,
          "huge tracker: %s" % r.stderr[-300:])
raise SystemExit(summary("test_ckpt_failed_save"))
