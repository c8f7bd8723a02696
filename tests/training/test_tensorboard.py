"""pretrain_gpt --tensorboard-dir read back with TensorBoard's own reader (PyPI `tensorboard`):
Megatron's tags (training_log, evaluate_and_print_results, write_args_to_tensorboard,
Timers.write) at the right steps, the values equal to the printed training line to float32
precision, every record's masked CRC-32C checked with tensorboard's own crc code; and Megatron's
timers block after each training line at --timing-log-level 0/1/2 and each --timing-log-option
layout (megatron/core/timers.py, training.py training_log of core_v0.12.1)."""
import glob
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

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


def import_tensorboard():
    try:
        import tensorboard  # noqa: F401
        return None
    except ImportError:
        pass
    # scripts/setup.sh installs it; try once more here so a fresh checkout still runs the test
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--break-system-packages",
                        "tensorboard"], capture_output=True, text=True, timeout=600)
    try:
        import tensorboard  # noqa: F401,F811
        return None
    except ImportError:
        return "pip install tensorboard failed: " + (p.stderr.strip().splitlines() or ["?"])[-1]


def args(tmp, iters=6, log_interval=1, extra=()):
    return [EXE, "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32",
            "--micro-batch-size", "4", "--global-batch-size", "8",
            "--train-iters", str(iters), "--lr", "1e-3", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "2", "--log-interval", str(log_interval), "--eval-interval", "3",
            "--eval-iters", "1", "--mock-data", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
            "--attention-dropout", "0", "--hidden-dropout", "0", *extra]


def run(cmd, np=1):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if np > 1:  # (in a sanitizer build, OpenMPI's own MPI_Init allocations read as leaks)
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np), "-x",
               "OMP_NUM_THREADS=1", "-x", "ASAN_OPTIONS=detect_leaks=0", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


LINE = re.compile(r"^ \[[^]]+\] iteration +(\d+)/ +\d+ \| consumed samples: +(\d+) \|(.*)$")


def training_lines(out):
    """iteration -> {segment label: text value} of each printed training line."""
    lines = {}
    for l in out.splitlines():
        m = LINE.match(l)
        if m:
            segs = dict(s.strip().rsplit(": ", 1) for s in m.group(3).split("|") if ": " in s)
            segs["consumed samples"] = m.group(2)
            lines[int(m.group(1))] = segs
    return lines


def close32(a, b, rel=1e-6):
    return abs(a - b) <= rel * abs(b) + 1e-30


def records(path):
    """The payloads of the file's TFRecords."""
    data = open(path, "rb").read()
    i, out = 0, []
    while i + 12 <= len(data):
        ln = int.from_bytes(data[i:i + 8], "little")
        out.append(data[i + 12:i + 12 + ln])
        i += 16 + ln
    return out


def check_same_bytes_as_torch(path):
    """Every scalar and text event re-made by torch's SummaryWriter code (summary.scalar /
    summary.text, the Event protobuf) with our wall time and step serializes to our bytes."""
    try:
        from torch.utils.tensorboard.summary import scalar, text
    except ImportError as e:
        print(f"test_tensorboard: SKIP byte comparison with torch's SummaryWriter: {e}")
        return
    from tensorboard.compat.proto.event_pb2 import Event
    same = total = 0
    for payload in records(path)[1:]:
        ev = Event.FromString(payload)
        v = ev.summary.value[0]
        if v.HasField("tensor"):
            summ = text(v.tag[:-len("/text_summary")], v.tensor.string_val[0].decode())
        else:
            summ = scalar(v.tag, v.simple_value)
        ref = Event(wall_time=ev.wall_time, step=ev.step, summary=summ).SerializeToString()
        same += ref == payload
        total += 1
        if ref != payload and total - same <= 3:
            print("differs from torch:", payload.hex(), ref.hex())
    check(total > 0 and same == total, f"{same}/{total} events byte-identical to torch's")


def check_crcs(path):
    """Walks the TFRecord framing with tensorboard's own masked CRC-32C."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    data = open(path, "rb").read()
    i = n = 0
    ok = True
    while i < len(data):
        ln = int.from_bytes(data[i:i + 8], "little")
        ok &= int.from_bytes(data[i + 8:i + 12], "little") == masked_crc32c(data[i:i + 8])
        ok &= int.from_bytes(data[i + 12 + ln:i + 16 + ln], "little") == \
            masked_crc32c(data[i + 12:i + 12 + ln])
        i += 16 + ln
        n += 1
    check(ok and i == len(data), f"every record framed with valid masked CRCs ({n} records)")
    return n


def test_tags_and_values(tmp):
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.backend.event_processing import event_file_loader
    tb = os.path.join(tmp, "tb", "run1")  # parents are created, as SummaryWriter does
    p = run(args(tmp, extra=["--tensorboard-dir", tb, "--log-params-norm",
                             "--log-validation-ppl-to-tensorboard",
                             "--log-world-size-to-tensorboard", "--tensorboard-queue-size", "5",
                             "--one-logger-run-name", "r" * 5000]))  # a text longer than 4 KiB
    check(p.returncode == 0, f"run with --tensorboard-dir exits 0 ({p.returncode}: {p.stderr[-400:]})")
    check("> setting tensorboard ...\n" in p.stdout, "prints '> setting tensorboard ...'")
    files = glob.glob(os.path.join(tb, "*"))
    check(len(files) == 1, f"one event file ({files})")
    if len(files) != 1:
        return
    name = os.path.basename(files[0])
    host = re.escape(socket.gethostname())
    check(re.fullmatch(r"events\.out\.tfevents\.\d{10}\.%s\.\d+\.0" % host, name) is not None,
          f"SummaryWriter's file name ({name})")
    check_crcs(files[0])
    check_same_bytes_as_torch(files[0])
    first = next(iter(event_file_loader.EventFileLoader(files[0]).Load()))
    check(first.file_version == "brain.Event:2", "file_version event first")

    acc = ea.EventAccumulator(tb, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {"learning-rate", "batch-size", "lm loss", "loss-scale", "world-size", "grad-norm",
            "num-zeros", "params-norm", "lm loss validation", "lm loss validation ppl"}
    for t in sorted(want):
        check(t in tags and t + " vs samples" in tags, f"tags {t!r} and {t + ' vs samples'!r}")
    check(not any(t.endswith("-time") for t in tags), "no timer tags without --log-timers-to-tensorboard")

    lines = training_lines(p.stdout)
    check(sorted(lines) == [1, 2, 3, 4, 5, 6], f"six training lines ({sorted(lines)})")

    def series(tag):
        return [(e.step, e.value) for e in acc.Scalars(tag)]

    for tag, seg, tol in (("learning-rate", "learning rate", None), ("lm loss", "lm loss", None),
                          ("grad-norm", "grad norm", 5e-4), ("params-norm", "params norm", 5e-4),
                          ("num-zeros", "num zeros", 0.0), ("batch-size", "global batch size", 0.0),
                          ("loss-scale", "loss scale", 0.0)):
        s = series(tag)
        check([st for st, _ in s] == sorted(lines), f"{tag}: one value per iteration at steps 1..6")
        vs = series(tag + " vs samples")
        check([st for st, _ in vs] == [int(lines[k]["consumed samples"]) for k in sorted(lines)],
              f"{tag} vs samples: steps are the consumed samples")
        check([v for _, v in vs] == [v for _, v in s], f"{tag} vs samples: same values")
        for st, v in s:
            if st not in lines or seg not in lines[st]:
                check(False, f"{tag}: iteration {st} has a printed {seg!r}")
                continue
            printed = float(lines[st][seg])
            good = close32(v, printed) if tol is None else abs(v - printed) <= tol + 1e-6
            check(good, f"{tag} @{st}: TensorBoard {v!r} vs printed {lines[st][seg]}")
    check(all(v == 1.0 for _, v in series("world-size")), "world-size 1")

    # validation: in-loop at 3 and 6, then the final validation and test evaluations at 6, all
    # under "<key> validation" as Megatron writes them; values equal the printed boxes
    boxes = re.findall(r"^ validation loss at iteration (\d+)(?: on \w+ set)? \| lm loss value: "
                       r"(\S+) \| lm loss PPL: (\S+) \| $", p.stdout, re.M)
    val = series("lm loss validation")
    check([(st) for st, _ in val] == [int(b[0]) for b in boxes] == [3, 6, 6, 6],
          f"validation steps {val} vs boxes {boxes}")
    for (st, v), (_, loss, ppl) in zip(val, boxes):
        check(close32(v, float(loss)), f"validation @{st}: {v!r} vs printed {loss}")
    for (st, v), (_, loss, ppl) in zip(series("lm loss validation ppl"), boxes):
        check(close32(v, float(ppl)), f"validation ppl @{st}: {v!r} vs printed {ppl}")
    check([st for st, _ in series("lm loss validation vs samples")] == [24, 48, 48, 48],
          "validation vs samples at the consumed training samples")

    # write_args_to_tensorboard: str(value) of each argument, at the start iteration
    texts = set(acc.Tags()["tensors"])
    dump = dict(re.findall(r"^  (\w+) \.* (.*)$", p.stdout, re.M))
    check(len(dump) > 400 and all(k + "/text_summary" in texts for k in dump),
          f"every argument of the dump written as text ({len(dump)} args, {len(texts)} texts)")
    for k in ("hidden_size", "lr", "tensorboard_dir", "lr_decay_style", "data_path", "iteration",
              "one_logger_run_name"):
        ev = acc.Tensors(k + "/text_summary")
        got = ev[0].tensor_proto.string_val[0].decode() if ev else None
        check(ev and ev[0].step == 0 and got == dump.get(k, "0"),
              f"text {k}: {(got or '')[:80]!r} ({len(got or '')} chars) vs dump "
              f"{dump.get(k, '')[:80]!r} ({len(dump.get(k, ''))} chars)")


def test_timers_to_tensorboard(tmp):
    from tensorboard.backend.event_processing import event_accumulator as ea
    tb = os.path.join(tmp, "tb2")
    p = run(args(tmp, iters=4, log_interval=2,
                 extra=["--tensorboard-dir", tb, "--timing-log-level", "2",
                        "--log-timers-to-tensorboard", "--log-throughput",
                        "--no-log-loss-scale-to-tensorboard"]))
    check(p.returncode == 0, f"--log-timers-to-tensorboard run exits 0 ({p.stderr[-300:]})")
    acc = ea.EventAccumulator(tb, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for t in ("forward-backward-time", "forward-compute-time", "backward-compute-time",
              "batch-generator-time", "optimizer-time", "all-grads-sync-time"):
        check(t in tags and [e.step for e in acc.Scalars(t)] == [1, 2, 3, 4],
              f"{t} every iteration (--tensorboard-log-interval 1)")
    fb = acc.Scalars("forward-backward-time")
    check(all(0 < e.value < 60 for e in fb), "timer values are seconds per iteration")
    check([e.step for e in acc.Scalars("iteration-time")] == [2, 4], "iteration-time at log intervals")
    check([e.step for e in acc.Scalars("throughput")] == [2, 4], "throughput with --log-throughput")
    check("loss-scale" not in tags, "--no-log-loss-scale-to-tensorboard drops loss-scale")
    # Megatron's quirk: Timers.write reset the timers, so no block follows the training lines
    check("forward-backward ......" not in p.stdout, "timers block emptied by Timers.write")


TIMER_ROW = re.compile(r"^    ((\S+) \.+): \((\d+\.\d\d), (\d+\.\d\d)\)$")


def blocks_after_lines(out, values=None):
    """The timer names printed right after each training line (values[i][name] = ms)."""
    ls = out.splitlines()
    res = []
    for i, l in enumerate(ls):
        if not LINE.match(l):
            continue
        j = i + 1
        while j < len(ls) and ls[j].startswith("[Rank 0]"):
            j += 1
        names = []
        if j < len(ls) and ls[j] == "(min, max) time across ranks (ms):":
            j += 1
            while j < len(ls) and TIMER_ROW.match(ls[j]):
                m = TIMER_ROW.match(ls[j])
                check(m.group(1) == (m.group(2) + " ").ljust(48, "."),
                      f"name column ljust(48, '.'): {ls[j]!r}")
                check(m.group(3) == m.group(4), "one rank: min == max")
                names.append(m.group(2))
                if values is not None:
                    values.setdefault(len(res), {})[m.group(2)] = float(m.group(4))
                j += 1
        res.append([] if names == ["evaluate"] else names)  # an evaluation's own block
    return res


def test_timers_stdout(tmp):
    l1 = ["forward-backward", "layernorm-grads-all-reduce", "embedding-grads-all-reduce",
          "all-grads-sync", "optimizer"]
    l2 = ["forward-backward", "forward-compute", "backward-compute", "batch-generator"] + l1[1:]
    for level, want in (("0", []), ("1", l1), ("2", l2)):
        p = run(args(tmp, iters=4, log_interval=2, extra=["--timing-log-level", level]))
        check(p.returncode == 0, f"--timing-log-level {level} exits 0")
        ms = {}
        got = blocks_after_lines(p.stdout, ms)
        check(got == [want, want], f"level {level}: timers after each line {got}")
        for v in ms.values():  # nested regions: compute inside forward-backward, batches inside forward
            if "forward-compute" in v and "forward-backward" in v:
                check(v["forward-compute"] + v["backward-compute"] <= v["forward-backward"] + 0.02
                      and v["batch-generator"] <= v["forward-compute"] + 0.01,
                      f"level {level}: nested timer values consistent {v}")
        check("    model-and-optimizer-setup ......................: (" in p.stdout and
              "    evaluate .......................................: (" in p.stdout,
              f"level {level}: level-0 setup and evaluate timers printed")
    # the 'max' and 'all' layouts of --timing-log-option
    p = run(args(tmp, iters=4, log_interval=2,
                 extra=["--timing-log-level", "1", "--timing-log-option", "max"]))
    check(re.search(r"^max time across ranks \(ms\):\n    forward-backward \.{31}: \d+\.\d\d$",
                    p.stdout, re.M) is not None, "--timing-log-option max layout")
    p = run(args(tmp, iters=4, log_interval=2,
                 extra=["--timing-log-level", "1", "--timing-log-option", "all"]))
    check(re.search(r"^times across ranks \(ms\):\n  forward-backward:\n     rank  0: \d+\.\d\d$",
                    p.stdout, re.M) is not None, "--timing-log-option all layout")


def test_early_exit_flushes(tmp):
    from tensorboard.backend.event_processing import event_accumulator as ea
    tb = os.path.join(tmp, "tb5")
    p = run(args(tmp, iters=6, log_interval=5, extra=["--tensorboard-dir", tb, "--exit-interval", "2"]))
    check(p.returncode == 0 and "[exiting program at iteration 2]" in p.stdout,
          "--exit-interval 2 run exits 0")
    acc = ea.EventAccumulator(tb, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    check([e.step for e in acc.Scalars("lm loss")] == [1, 2],
          "events queued before an early exit reach the file")


def timer_rows_between_lines(out):
    """Under mpirun the ranks' lines interleave: the timer rows (other than evaluate's) printed
    between one training line and the next, in order."""
    res = None
    blocks = []
    for l in out.splitlines():
        if LINE.match(l):
            res = []
            blocks.append(res)
        m = TIMER_ROW.match(l)
        if m and res is not None and m.group(2) != "evaluate":
            res.append(m.group(2))
    return blocks


def test_two_ranks(tmp):
    """Tensor parallelism over 2 MPI ranks: one writer (the last rank), the collectives behind
    the params norm and the timers do not hang, the timers block reports min and max."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    if not shutil.which("mpirun"):
        print("test_tensorboard: SKIP two-rank run: mpirun not found")
        return
    tb = os.path.join(tmp, "tb_mpi")
    p = run(args(tmp, iters=4, log_interval=1,
                 extra=["--tensorboard-dir", tb, "--tensor-model-parallel-size", "2",
                        "--make-vocab-size-divisible-by", "64", "--log-params-norm",
                        "--timing-log-level", "2", "--log-timers-to-tensorboard",
                        "--tensorboard-log-interval", "2"]), np=2)
    check(p.returncode == 0, f"2-rank run exits 0 ({p.returncode}: {p.stderr[-400:]})")
    check(len(glob.glob(os.path.join(tb, "events.out.tfevents.*"))) == 1,
          "one event file for two ranks")
    check(p.stdout.count("> setting tensorboard ...") == 1, "one rank sets up the writer")
    acc = ea.EventAccumulator(tb, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    lines = training_lines(p.stdout)
    for tag, seg in (("lm loss", "lm loss"), ("params-norm", "params norm")):
        s = [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []
        check([st for st, _ in s] == [2, 4], f"2 ranks: {tag} at steps 2 and 4 ({s})")
        for st, v in s:
            printed = float(lines.get(st, {}).get(seg, "nan"))
            check(abs(v - printed) <= 1e-6 * abs(printed) + (5e-4 if seg == "params norm" else 0),
                  f"2 ranks: {tag} @{st} {v!r} vs printed {printed}")
    check("forward-backward-time" in acc.Tags()["scalars"], "2 ranks: timers written")
    p = run(args(tmp, iters=4, log_interval=2, extra=["--timing-log-level", "1"]), np=2)
    got = timer_rows_between_lines(p.stdout)
    check(p.returncode == 0 and got == [
        ["forward-backward", "layernorm-grads-all-reduce", "embedding-grads-all-reduce",
         "all-grads-sync", "optimizer"]] * 2, f"2 ranks (dp 2): timer blocks after each line {got}")


def test_errors(tmp):
    plain = os.path.join(tmp, "plain")
    open(plain, "w").close()
    p = run(args(tmp, iters=1, extra=["--tensorboard-dir", os.path.join(plain, "tb")]))
    check(p.returncode != 0 and plain in p.stderr + p.stdout and "not a directory" in p.stderr + p.stdout,
          f"a file in the way of --tensorboard-dir is a clear error ({p.stderr[-300:]!r})")
    p = run(args(tmp, iters=1, extra=["--tensorboard-dir", os.path.join(tmp, "tb3"),
                                      "--tensorboard-log-interval", "0"]))
    check(p.returncode != 0 and "--tensorboard-log-interval 0" in p.stderr + p.stdout,
          "--tensorboard-log-interval 0 refused")
    # supported now: its tags are checked in tests/training/test_memory_accounting.py
    p = run(args(tmp, iters=3, extra=["--tensorboard-dir", os.path.join(tmp, "tb4"),
                                      "--log-memory-to-tensorboard"]))
    check(p.returncode == 0 and "not supported" not in p.stderr + p.stdout,
          f"--log-memory-to-tensorboard accepted ({p.stderr[-300:]!r})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_timers_stdout(tmp)
        test_errors(tmp)
        why = import_tensorboard()
        if why:
            print(f"test_tensorboard: SKIP TensorBoard reader checks: {why}")
        else:
            test_tags_and_values(tmp)
            test_timers_to_tensorboard(tmp)
            test_early_exit_flushes(tmp)
            test_two_ranks(tmp)
    print(f"test_tensorboard: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
