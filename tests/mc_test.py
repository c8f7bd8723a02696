"""Shared pieces of the Python tests that drive the built programs (pretrain_gpt alone and under
mpirun): where the build and sources are, the pass/fail counter and summary line, the mpirun
command line, the parsers of the full-precision [exact] lines (MC_TEST_LOG_EXACT=1) and of the
validation/training lines, the relative-closeness test, and the GPT-2 / Llama model styles.

tests/ is on PYTHONPATH for the CTest Python tests (CMakeLists.txt); a test run by hand from
the source tree finds this module through its own sys.path.insert of tests/."""
import hashlib
import os
import re
import subprocess
import tempfile

BUILD = os.environ.get("MC_BUILD_DIR", "build")
SRC = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   ".."))
PRETRAIN = os.path.join(BUILD, "bin", "pretrain_gpt")


def torch2_python():
    """A PyTorch 2.x interpreter for tests whose 16-bit references need torch 2.x's CPU kernels:
    MC_TORCH2, /work/torch2-venv, or the build's bench-venv; None when there is none."""
    for p in (os.environ.get("MC_TORCH2", ""), "/work/torch2-venv/bin/python",
              os.path.join(BUILD, "bench-venv", "bin", "python")):
        if p and os.path.exists(p):
            return p
    return None


# The two model styles the parallel tests train (tiny: hidden 32); tests that need another
# size or FFN width keep their own list.
def gpt2(layers=2):
    """GPT-2 style: LayerNorm, GeLU, learned positions, tied embeddings, biases."""
    return ["--num-layers", str(layers), "--hidden-size", "32", "--num-attention-heads", "4"]


def llama(layers=2):
    """Llama style: RMSNorm, SwiGLU, RoPE, 8 heads in 4 query groups, no biases, untied."""
    return ["--num-layers", str(layers), "--hidden-size", "32", "--num-attention-heads", "8",
            "--group-query-attention", "--num-query-groups", "4", "--ffn-hidden-size", "64",
            "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
            "--disable-bias-linear", "--untie-embeddings-and-output-weights"]


# searched anywhere in a line: mpirun forwards each rank's output in pieces, and under heavy
# load a piece of another rank's output can land at the start of the line
EXACT = re.compile(r"\[exact\] iteration (\d+) \| lm loss: (\S+) \| grad norm: (\S+) \| "
                   r"params norm: (\S+)$")
VALID = re.compile(r"^ validation loss at (.*) \| lm loss value: (\S+) \|")
# searched, not matched at the line start: under mpirun another rank's unterminated output can
# land at the start of the logging rank's line (seen once in test_parallel_training, tp2 dp2)
TRAIN = re.compile(r" \[[^]]*\] iteration +\d+/ +\d+ \| consumed samples: +(\d+) \|")


def parse_exact(out):
    """(iteration, lm loss, grad norm, params norm) strings of every [exact] line."""
    return [m.groups() for m in map(EXACT.search, out.splitlines()) if m]


def file_hashes(d):
    """{path relative to d: sha256} of every file under d."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def parse_valid(out):
    """(where, lm loss) strings of every validation/test loss line."""
    return [m.groups() for m in map(VALID.match, out.splitlines()) if m]


def parse_train(out):
    """Consumed-samples field of every training log line."""
    return [m.group(1) for m in map(TRAIN.search, out.splitlines()) if m]


class Checks:
    """A pass/fail counter: check() counts one check and prints what failed; summary() prints
    the line 'name: P passed, F failed[ extra]' that every test ends with."""

    def __init__(self, name=None):
        self.name, self.passed, self.failed = name, 0, 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what, flush=True)
        return cond

    def summary(self, name=None, extra=""):
        """Print the summary line; return the exit status (1 when a check failed)."""
        print(f"{name or self.name}: {self.passed} passed, {self.failed} failed" +
              (f" {extra}" if extra else ""))
        return 1 if self.failed else 0


CHECKS = Checks()  # the counter of the test script that imports this module


def check(cond, what):
    """Count one check of the test script (CHECKS); print what failed."""
    return CHECKS.check(cond, what)


def summary(name, extra=""):
    """Print the script's summary line 'name: P passed, F failed[ extra]'; return the exit
    status."""
    return CHECKS.summary(name, extra)


def check_lines(live, golden, source="megatron"):
    """A live listing against its committed golden: one check per line pair (the first three
    differences printed), and one failed check when the line counts differ."""
    for i, (a, b) in enumerate(zip(live, golden)):
        if a == b:
            CHECKS.passed += 1
        else:
            CHECKS.failed += 1
            if CHECKS.failed <= 3:
                print("line %d differs:\n  %-8s %s\n  golden   %s"
                      % (i + 1, source, a[:200], b[:200]))
    if len(live) != len(golden):
        CHECKS.failed += 1
        print("line counts differ: %s %d, golden %d" % (source, len(live), len(golden)))


def close(a, b, rel=1e-5):
    """a and b (numbers or their strings) within rel of the larger magnitude."""
    return abs(float(a) - float(b)) <= rel * max(abs(float(a)), abs(float(b)))


def rel(a, b):
    """Relative difference of a and b (numbers or their strings)."""
    a, b = float(a), float(b)
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


# every mpirun of the tests: root in CI containers, more ranks than the 2 cores
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def mpirun_cmd(np, cmd, env_vars=("OMP_NUM_THREADS=1", "MC_TEST_LOG_EXACT=1")):
    """cmd under mpirun with np ranks (oversubscribed), exporting env_vars (NAME=VALUE or NAME)
    to every rank."""
    return [*MPIRUN, "-np", str(np), *[a for v in env_vars for a in ("-x", v)], *cmd]


def run_pretrain(args, np=1, timeout=240, env=None, exact=True, exe=PRETRAIN):
    """exe with args, alone (np == 1) or under mpirun with np ranks, with OMP_NUM_THREADS=1 and
    (exact) MC_TEST_LOG_EXACT=1; env: more variables to set (a value of None removes one from the
    inherited environment), passed to every rank. Returns the CompletedProcess (text).
    Raises subprocess.TimeoutExpired past timeout seconds."""
    full = dict(os.environ, OMP_NUM_THREADS="1")
    names = ["OMP_NUM_THREADS"]
    if exact:
        full["MC_TEST_LOG_EXACT"] = "1"
        names.append("MC_TEST_LOG_EXACT")
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = str(v)
            names.append(k)
    cmd = [exe, *args] if np == 1 else mpirun_cmd(np, [exe, *args], names)
    return run_cmd(cmd, full, timeout)


def run_cmd(cmd, env, timeout):
    """subprocess.run(cmd) (text) with stderr to a pipe and stdout to a temporary file, read back
    into the CompletedProcess's .stdout. A file, not a pipe: a regular file never makes
    mpirun's output forwarding wait on a slow reader under heavy load (a CI run once lost a
    line that way). On timeout the TimeoutExpired raised carries the output so far in .stdout."""
    with tempfile.TemporaryFile("w+") as out:
        try:
            p = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, env=env,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out.seek(0)
            e.stdout = out.read()
            raise
        out.seek(0)
        p.stdout = out.read()
    return p


def compare_curves(name, exact, ref_exact, valid, ref_valid, ref_name="single process"):
    """One check per iteration (lm loss, grad norm and params norm within 1e-5 relative) and per
    validation/test line; returns the largest relative difference of the iteration values."""
    worst = 0.0
    for (i, l, g, pn), (ri, rl, rg, rpn) in zip(exact, ref_exact):
        ok = i == ri and close(l, rl) and close(g, rg) and close(pn, rpn)
        check(ok, f"{name} iteration {i}: lm loss {l} grad norm {g} params norm {pn}, "
                  f"{ref_name} {rl} {rg} {rpn}")
        worst = max(worst, abs(float(l) / float(rl) - 1), abs(float(g) / float(rg) - 1),
                    abs(float(pn) / float(rpn) - 1))
    for (w, v), (rw, rv) in zip(valid, ref_valid):
        check(w == rw and close(v, rv), f"{name} validation at {w}: {v} vs {rv}")
    return worst
