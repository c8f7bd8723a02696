"""Memory accounting (docs/memory.md): --log-memory-to-tensorboard writes Megatron's four
training_log tags (mem-reserved-bytes, mem-allocated-bytes, mem-max-allocated-bytes,
mem-allocated-count, in that order, every --tensorboard-log-interval: megatron/training/
training.py of core_v0.12.1), read back with TensorBoard's own reader; the memory line's fields
agree with them; --log-memory-estimate's categories sum to the totals, its parameter, gradient
and optimizer-state bytes equal what the model's shapes say (Megatron's GPT parameter count,
4 + 4 + 8 bytes each in fp32 with Adam), and the process's peak resident set measured by the
kernel (wait4's ru_maxrss of the child, not our code) lies within 10% of the allocator's peak on
a run whose activations dominate the runtime's fixed overhead."""
import glob
import os
import re
import subprocess
import sys
import tempfile

BUILD = os.environ.get("MC_BUILD_DIR", "build")
EXE = os.path.join(BUILD, "bin", "pretrain_gpt")
MB = 1024.0 * 1024.0
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def model_args(tmp, L, h, heads, s, vocab, iters, extra=()):
    return [EXE, "--num-layers", str(L), "--hidden-size", str(h),
            "--num-attention-heads", str(heads), "--seq-length", str(s),
            "--max-position-embeddings", str(s), "--micro-batch-size", "1",
            "--global-batch-size", "1", "--train-iters", str(iters), "--lr", "1e-4",
            "--log-interval", "2", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", str(vocab),
            "--data-cache-path", os.path.join(tmp, "cache"), *extra]


def run(cmd):
    """(returncode, stdout+stderr, peak resident set in bytes as the kernel counted it)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, ru.ru_maxrss * 1024  # KiB on Linux


MEM_LINE = re.compile(r"^\[Rank 0\] \(after (\d+) iterations\) memory \(MB\) \| allocated: (\S+) "
                      r"\| max allocated: (\S+) \| reserved: (\S+) \| max reserved: (\S+)$")
ROW = re.compile(r"^\[Rank 0\]   (\S.*?) +(n/a|[0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)$")
TOTAL = re.compile(r"^\[Rank 0\]   total allocated +(n/a|[0-9.]+) +([0-9.]+) +([0-9.]+)$")
RSS = re.compile(r"^\[Rank 0\]   process resident set +([0-9.]+) +([0-9.]+)$")
CATEGORIES = ["parameters", "gradients", "optimizer state", "activations",
              "communication buffers", "workspace", "other"]


def estimate_table(out):
    """{category: (estimate or None, peak, at peak, now)} in MB, total (peak, now), rss."""
    rows, total, rss = {}, None, None
    for l in out.splitlines():
        m = TOTAL.match(l)
        if m:
            total = (float(m.group(2)), float(m.group(3)))
            continue
        m = RSS.match(l)
        if m:
            rss = (float(m.group(1)), float(m.group(2)))
            continue
        m = ROW.match(l)
        if m and m.group(1) in CATEGORIES:
            est = None if m.group(2) == "n/a" else float(m.group(2))
            rows[m.group(1)] = (est, float(m.group(3)), float(m.group(4)), float(m.group(5)))
    return rows, total, rss


def gpt_params(L, h, s, vocab):
    """Megatron's GPT with biases, learned positions and tied embeddings: the word embedding
    (NullTokenizer: vocab + 1 entries, padded to a multiple of 128), the position embedding, per layer qkv (3h^2 + 3h), proj (h^2 + h), fc1 (4h^2 + 4h), fc2 (4h^2 + h) and
    two LayerNorms (4h), then the final LayerNorm."""
    padded = (vocab + 1 + 127) // 128 * 128
    return padded * h + s * h + L * (12 * h * h + 13 * h) + 2 * h


def read_scalars(tb_dir):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    order, values = [], {}
    for f in files:
        for ev in EventFileLoader(f).Load():
            for v in ev.summary.value:
                if v.HasField("simple_value"):
                    order.append((ev.step, v.tag))
                    values.setdefault(v.tag, {})[ev.step] = v.simple_value
                elif v.HasField("tensor") and v.metadata.plugin_data.plugin_name == "scalars":
                    import numpy as np
                    from tensorboard.util import tensor_util
                    order.append((ev.step, v.tag))
                    values.setdefault(v.tag, {})[ev.step] = float(
                        np.asarray(tensor_util.make_ndarray(v.tensor)).item())
    return files, order, values


def test_tensorboard_and_line(tmp):
    tb = os.path.join(tmp, "tb")
    rc, out, _ = run(model_args(tmp, 2, 64, 4, 64, 4096, 4,
                                ("--tensorboard-dir", tb, "--log-memory-to-tensorboard",
                                 "--log-memory-estimate")))
    check(rc == 0, "tensorboard run exits 0 (rc %d): %s" % (rc, out[-2000:]))
    if rc:
        return
    files, order, vals = read_scalars(tb)
    check(len(files) == 1, "one event file (%s)" % files)
    tags = ["mem-reserved-bytes", "mem-allocated-bytes", "mem-max-allocated-bytes",
            "mem-allocated-count"]
    for t in tags:
        check(sorted(vals.get(t, {})) == [1, 2, 3, 4], "%s at steps 1..4: %s" % (t, vals.get(t)))
    for step in (1, 2, 3, 4):  # Megatron writes the four in this order, after the others
        seen = [tag for st, tag in order if st == step and tag.startswith("mem-")]
        check(seen == tags, "step %d: mem tags in Megatron's order: %s" % (step, seen))
        got = [tag for st, tag in order if st == step and not tag.endswith("vs samples")]
        check(got[-4:] == tags, "step %d: the mem tags come last: %s" % (step, got))
    if all(t in vals and 2 in vals[t] for t in tags):
        alloc, peak = vals["mem-allocated-bytes"][2], vals["mem-max-allocated-bytes"][2]
        check(0 < alloc <= peak, "0 < allocated %g <= max allocated %g" % (alloc, peak))
        check(vals["mem-allocated-count"][2] >= 20 and
              vals["mem-allocated-count"][2] == int(vals["mem-allocated-count"][2]),
              "a whole, plausible live block count: %g" % vals["mem-allocated-count"][2])
        check(vals["mem-reserved-bytes"][2] > alloc,
              "resident set %g above the allocated bytes %g" % (vals["mem-reserved-bytes"][2],
                                                               alloc))
        # the memory line after iteration 2 reads the same counters (float32 in the file)
        lines = [MEM_LINE.match(l) for l in out.splitlines() if MEM_LINE.match(l)]
        check(len(lines) == 1 and lines[0].group(1) == "2", "one memory line, after 2 iterations")
        if lines:
            a, ma, r, mr = (float(lines[0].group(k)) * MB for k in (2, 3, 4, 5))
            check(abs(a - alloc) <= 1e-6 * alloc + 64, "line allocated %g == tag %g" % (a, alloc))
            check(abs(ma - peak) <= 1e-6 * peak + 64, "line max allocated %g == tag %g" % (ma, peak))
            res = vals["mem-reserved-bytes"][2]
            check(abs(r - res) <= 4 * MB, "line reserved %g ~ tag %g" % (r, res))
            check(mr >= r, "max reserved %g >= reserved %g" % (mr, r))
    rows, total, rss = estimate_table(out)
    check(sorted(rows) == sorted(CATEGORIES) and total and rss, "estimate table complete: %s" % rows)
    if rows and total:
        now = sum(r[3] for r in rows.values())
        at_peak = sum(r[2] for r in rows.values())
        check(abs(now - total[1]) <= 0.01 * len(rows), "now by category %g sum to %g" % (now, total[1]))
        check(abs(at_peak - total[0]) <= 0.01 * len(rows),
              "at-peak by category %g sum to the peak %g" % (at_peak, total[0]))
        check(all(r[1] >= r[2] - 0.005 and r[1] >= r[3] - 0.005 for r in rows.values()),
              "each category's peak bounds its at-peak and current bytes")
    # without the option: none of the tags
    tb2 = os.path.join(tmp, "tb_off")
    rc, out, _ = run(model_args(tmp, 2, 64, 4, 64, 4096, 2, ("--tensorboard-dir", tb2)))
    _, _, vals = read_scalars(tb2)
    check(rc == 0 and "lm loss" in vals and not any(t.startswith("mem-") for t in vals),
          "no mem-* tags without --log-memory-to-tensorboard: %s" % sorted(vals))


def test_peak_matches_rss(tmp):
    """Activations dominate (16 heads x s^2 attention probabilities per layer), so the process's
    own overhead (code, libraries, stacks: ~15 MB) stays small beside the accounted peak."""
    L, h, heads, s, vocab = 2, 128, 16, 1024, 8192
    rc, out, maxrss = run(model_args(tmp, L, h, heads, s, vocab, 2, ("--log-memory-estimate",
                                                                     "--attention-backend",
                                                                     "unfused")))
    check(rc == 0, "memory run exits 0 (rc %d): %s" % (rc, out[-2000:]))
    rows, total, rss = estimate_table(out)
    if rc or not rows or not total:
        check(False, "estimate table printed")
        return
    n = gpt_params(L, h, s, vocab)
    for cat, per in (("parameters", 4), ("gradients", 4), ("optimizer state", 8)):
        check(abs(rows[cat][1] - n * per / MB) <= 0.006,
              "%s peak %.2f MB == %d params x %d bytes = %.2f MB" % (cat, rows[cat][1], n, per,
                                                                     n * per / MB))
    check(rows["activations"][1] > 0.5 * total[0], "activations dominate: %s of %s MB"
          % (rows["activations"][1], total[0]))
    peak = total[0] * MB
    ratio = maxrss / peak
    print("peak resident set %.1f MB (kernel), accounted peak %.1f MB, ratio %.3f"
          % (maxrss / MB, peak / MB, ratio))
    check(0.9 <= ratio <= 1.1, "peak RSS %.1f MB within 10%% of the accounted peak %.1f MB"
          % (maxrss / MB, peak / MB))
    check(abs(rss[0] * MB - maxrss) <= 2 * MB,
          "the table's peak resident set %.1f MB is the kernel's %.1f MB" % (rss[0], maxrss / MB))


def main():
    try:
        import tensorboard  # noqa: F401  (scripts/setup.sh installs it)
    except ImportError:
        print("tensorboard is not installed for %s (scripts/setup.sh)" % sys.executable)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        test_tensorboard_and_line(tmp)
        test_peak_matches_rss(tmp)
    print("test_memory_accounting: %d checks, %d failed" % (passed + failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
