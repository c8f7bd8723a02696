"""--recompute-auto-budget-gb (megatron.c's, beyond Megatron) and the causal-only attention
mask (no [b, s, s] mask copy without --reset-attention-mask).

The reference for the budget's choice is the allocator, not the estimate the option uses: one
iteration with each explicit setting (no recompute, full block k for k < L, full uniform 1)
gives the activations category's peak (--log-memory-estimate, mc_alloc's counters). For
budgets between those peaks the option must pick the setting with the fewest recomputed layers
whose measured peak fits (so one layer fewer does not fit), say it in one line (and in
--dry-run), run bit-identically to the same setting given explicitly (8 iterations with
dropout: [exact] lines and the saved weights and optimizer state), and keep the measured peak
within the budget. A budget below full recompute of every layer is refused, and so is the
option beside the recompute options it sets. With two pipeline stages (two ranks) the same
holds for the most loaded stage.

The mask: a slot's bytes (the model's ' > activation memory' line) without
--reset-attention-mask are those with it less exactly one 64-byte-aligned b s^2 byte copy."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import mc_test  # noqa: E402
from recompute_cases import NONE, full, per_slot, run  # noqa: E402

S, B, L = 128, 2, 6
ITERS = 8  # iterations of each auto / explicit pair compared bit for bit
BASE = [*mc_test.gpt2(L), "--mock-data", "--vocab-size", "4096", "--seq-length", str(S),
        "--max-position-embeddings", str(S), "--micro-batch-size", str(B),
        "--global-batch-size", "4", "--lr", "1e-3", "--log-params-norm", "--log-interval", "1",
        "--attention-dropout", "0.1", "--hidden-dropout", "0.1", "--eval-iters", "0",
        "--tokenizer-type", "NullTokenizer"]
# candidate k (recomputed layers per chunk) -> its explicit setting
SETTINGS = [NONE] + [full("block", k) for k in range(1, L)] + [full("uniform", 1)]
CHOICE = re.compile(r"^ > --recompute-auto-budget-gb (\S+): (.*) \((\d+) of the up to (\d+) "
                    r"layers of each model chunk recomputed\): estimated activation memory "
                    r"\S+ GB \((\S+) MB\) on pipeline stage (\d+), the most loaded(?:; one layer "
                    r"fewer: \S+ GB \((\S+) MB\))?$", re.M)
MB = 2.0 ** 20


def setting_words(extra):
    return "no recompute" if not extra else " ".join(extra)


def expected_choice(peaks, budget_mb):
    """The fewest recomputed layers whose measured peak fits, or None."""
    return next((k for k, p in enumerate(peaks) if p <= budget_mb), None)


def measured_peaks(c, tmp):
    peaks = []
    for k, extra in enumerate(SETTINGS):
        r = run(BASE, extra, tmp, f"measure {k}", iters=1)
        c.check(r["rc"] == 0 and 0 in r["act_peak"], f"setting {k} ({setting_words(extra)}) "
                f"runs and reports its activations peak: {r['err']}")
        peaks.append(r["act_peak"].get(0, float("nan")))
    print("measured activations peak (MB) by recomputed layers per chunk:",
          ", ".join(f"{k}: {p:.2f}" for k, p in enumerate(peaks)))
    c.check(peaks[1] > peaks[0] and peaks[-1] < peaks[0],
            "block 1 keeps more than no recompute (its work area), every layer recomputed "
            "keeps least")
    return peaks


def budgets(peaks):
    """Budgets just above the peak of each setting that beats every setting before it, and
    one between two of them (0.02 MB: the table prints 2 decimals)."""
    out, best = [], float("inf")
    for k, p in enumerate(peaks):
        if p < best:
            out.append(p + 0.02)
            best = p
    out.append((peaks[-1] + peaks[0]) / 2)
    return out


def check_choice(c, tmp, peaks, budget_mb, exact_runs):
    want = expected_choice(peaks, budget_mb)
    gb = budget_mb / 1024.0
    auto = ["--recompute-auto-budget-gb", repr(gb)]
    dry = mc_test.run_pretrain(BASE + auto + ["--train-iters", str(ITERS), "--dry-run"])
    m = CHOICE.search(dry.stdout)
    c.check(dry.returncode == 0 and m is not None, f"budget {budget_mb:.2f} MB: the dry run "
            f"says the choice (rc {dry.returncode}): {dry.stdout[-600:]}{dry.stderr[-300:]}")
    if not m:
        return
    k = int(m.group(3))
    c.check(k == want, f"budget {budget_mb:.2f} MB: chose {k} recomputed layers "
            f"({m.group(2)}), the measured peaks say {want} is the fewest that fits")
    c.check(m.group(2) == setting_words(SETTINGS[k]), f"budget {budget_mb:.2f} MB: the line "
            f"names setting {k} as its options: {m.group(2)}")
    est = float(m.group(5))
    c.check(est <= budget_mb and abs(est - peaks[k]) <= 0.02, f"budget {budget_mb:.2f} MB: "
            f"estimate {est:.3f} MB fits and is the measured peak {peaks[k]:.2f} MB")
    if k > 0:
        c.check(m.group(7) is not None and float(m.group(7)) > budget_mb and
                peaks[k - 1] > budget_mb, f"budget {budget_mb:.2f} MB: one layer fewer "
                f"({m.group(7)} MB estimated, {peaks[k - 1]:.2f} MB measured) does not fit")
    c.check(f"activation recompute: {'none' if k == 0 else 'full, '}" in dry.stdout,
            f"budget {budget_mb:.2f} MB: the dry run's recompute line follows the choice")
    # the run: bit-identical to the explicit setting, measured peak within the budget
    r = run(BASE, auto, tmp, f"auto {budget_mb:.2f}", iters=ITERS)
    if k not in exact_runs:
        exact_runs[k] = run(BASE, SETTINGS[k], tmp, f"explicit {k}", iters=ITERS)
    e = exact_runs[k]
    ok = c.check(r["rc"] == 0 and e["rc"] == 0 and len(r["exact"]) == ITERS,
                 f"budget {budget_mb:.2f} MB: auto and explicit runs exit 0: {r['err']} "
                 f"{e['err']}")
    if not ok:
        return
    c.check(r["exact"] == e["exact"] and r["hash"] and r["hash"] == e["hash"],
            f"budget {budget_mb:.2f} MB: bit-identical to {setting_words(SETTINGS[k])} given "
            f"explicitly ([exact] lines and saved weights/optimizer state)")
    c.check(r["act_peak"].get(0, 1e30) <= budget_mb, f"budget {budget_mb:.2f} MB: measured "
            f"activations peak {r['act_peak'].get(0)} MB within it")


def refusals(c, tmp):
    cache = ["--data-cache-path", os.path.join(tmp, "cache"), "--train-iters", "1"]
    p = mc_test.run_pretrain(BASE + cache + ["--recompute-auto-budget-gb", "0.0001"])
    c.check(p.returncode == 1 and "even full recompute of every layer" in p.stderr,
            f"a budget below full recompute of every layer is refused (rc {p.returncode}): "
            f"{p.stderr[-400:]}")
    for extra, opt in ((["--recompute-granularity", "selective"], "--recompute-granularity"),
                       (["--recompute-activations"], "--recompute-activations"),
                       (["--recompute-method", "block"], "--recompute-method")):
        p = mc_test.run_pretrain(BASE + cache + ["--recompute-auto-budget-gb", "1"] + extra)
        c.check(p.returncode == 2 and f"argument --recompute-auto-budget-gb: not allowed with "
                f"argument {opt}" in p.stderr, f"the budget with {opt} is refused (rc "
                f"{p.returncode}): {p.stderr[-300:]}")
    p = mc_test.run_pretrain(BASE + cache + ["--recompute-auto-budget-gb", "1"])
    c.check(p.returncode == 0 and CHOICE.search(p.stdout) is not None,
            f"a training run says its choice in one line (rc {p.returncode}): "
            f"{p.stdout[-400:]}{p.stderr[-300:]}")
    p = mc_test.run_pretrain(BASE + cache + ["--recompute-auto-budget-gb", "-1"])
    c.check(p.returncode == 2 and "expected a positive number" in p.stderr,
            f"a negative budget is refused (rc {p.returncode}): {p.stderr[-300:]}")


def pipeline(c, tmp):
    """pp 2: the budget is fitted to the most loaded stage (stage 0 keeps 2 micro-batches in
    flight, the last holds the logits); two ranks run the choice bit-identically to it given
    explicitly, each rank's measured activations peak within the budget."""
    # unfused attention: its s x s scores make the layers, not the last stage's logits, the
    # bulk of the estimate, so a budget 15 % under no recompute is reachable by recomputing
    pp = ["--pipeline-model-parallel-size", "2", "--attention-backend", "unfused"]
    world = {"WORLD_SIZE": "2"}  # a dry run starts no ranks
    p = mc_test.run_pretrain(BASE + pp + ["--train-iters", "1", "--dry-run",
                                          "--recompute-auto-budget-gb", "1"], env=world)
    m = CHOICE.search(p.stdout)
    c.check(p.returncode == 0 and m is not None and m.group(3) == "0" and
            m.group(4) == str(L // 2), f"pp 2 dry run: no recompute fits 1 GB, over the "
            f"{L // 2} layers of a stage: {p.stdout[-500:]}{p.stderr[-300:]}")
    if not m:
        return
    budget_mb = float(m.group(5)) * 0.85
    auto = ["--recompute-auto-budget-gb", repr(budget_mb / 1024)]
    p = mc_test.run_pretrain(BASE + pp + auto + ["--train-iters", "1", "--dry-run"], env=world)
    m = CHOICE.search(p.stdout)
    c.check(p.returncode == 0 and m is not None and int(m.group(3)) > 0, f"pp 2: a budget "
            f"below no recompute's estimate picks some recompute: {p.stdout[-500:]}")
    if not m:
        return
    k = int(m.group(3))
    print(f"pp 2, budget {budget_mb:.2f} MB: {m.group(2)}, estimated {m.group(5)} MB on stage "
          f"{m.group(6)}")
    explicit = full("block", k) if k < L // 2 else full("uniform", 1)
    r = run(BASE + pp, auto, tmp, "pp auto", np=2, iters=4)
    e = run(BASE + pp, explicit, tmp, "pp explicit", np=2, iters=4)
    if c.check(r["rc"] == 0 and e["rc"] == 0 and len(r["exact"]) == 4, f"pp 2 runs exit 0: "
               f"{r['err']} {e['err']}"):
        c.check(r["exact"] == e["exact"] and r["hash"] and r["hash"] == e["hash"],
                f"pp 2: the budget's choice ({m.group(2)}) is bit-identical to it given "
                f"explicitly")
        c.check(sorted(r["act_peak"]) == [0, 1] and
                all(v <= budget_mb for v in r["act_peak"].values()),
                f"pp 2: each rank's activations peak {r['act_peak']} MB within the budget "
                f"{budget_mb:.2f} MB")


def mask_copy(c, tmp):
    """Without --reset-attention-mask the slot carves no [b, s, s] byte mask copy."""
    plain = run(BASE, NONE, tmp, "mask plain", iters=1)
    reset = run(BASE, ["--reset-attention-mask"], tmp, "mask reset", iters=1)
    want = (B * S * S + 63) // 64 * 64
    c.check(plain["rc"] == 0 and reset["rc"] == 0, f"mask runs exit 0: {plain['err']} "
            f"{reset['err']}")
    if plain["rc"] == 0 and reset["rc"] == 0:
        d = per_slot(reset) - per_slot(plain)
        print(f"slot bytes: {per_slot(plain)} causal-only, {per_slot(reset)} with "
              f"--reset-attention-mask (mask copy {d} bytes)")
        c.check(d == want, f"the causal-only slot is the reset-mask slot less its b s^2 mask "
                f"copy ({d} vs {want} bytes)")


def main():
    c = mc_test.CHECKS
    with tempfile.TemporaryDirectory() as tmp:
        mask_copy(c, tmp)
        refusals(c, tmp)
        pipeline(c, tmp)
        peaks = measured_peaks(c, tmp)
        exact_runs = {}
        for b in budgets(peaks):
            check_choice(c, tmp, peaks, b, exact_runs)
    return mc_test.summary("test_recompute_budget")


if __name__ == "__main__":
    sys.exit(main())
