"""Network faults between hosts (issue 15, item 3): two "hosts" are network namespaces made by
this test (ip netns), each with a control link (mpirun's runtime, like a cluster's management
network) and a data link (the ranks' MPI traffic, Open MPI's tcp BTL restricted to it), both
veth pairs whose addresses exist only inside these namespaces. mpirun runs in host A and starts
its daemon in host B through an rsh agent of ours (ip netns exec B), so no ssh is involved.

A dp2 run (one rank per host, --save every few iterations, a short distributed timeout) is hit
on the data link by one fault, named on the command line:
  cut       the data link goes down (ip link set ... down);
  throttle  the data link is shaped to 8 kbit/s with 50 ms of queue (tc tbf): packets are
            dropped and delayed far beyond what the run needs;
  netem     40% loss and 400 ms delay (tc netem); skipped, saying why, when the kernel has no
            sch_netem (netem needs that module; tbf is built in).
Every rank must then be gone within the timeout plus a margin, each rank's watchdog printing
one message naming its peer (world rank and host), and the checkpoint saved before the fault
must still load. The seconds from the fault until every rank is gone are printed.

Skipped (exit 77) when not root or when ip netns cannot make a namespace. The namespaces are
removed on every exit path (their processes killed first)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import PRETRAIN, check, summary  # noqa: E402

SKIP = 77
TIMEOUT = 8             # MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS for the run
MARGIN = 20             # seconds after the timeout within which every rank must be gone
TAG = "%05d" % (os.getpid() % 100000)
NS = {"A": f"mcnet{TAG}a", "B": f"mcnet{TAG}b"}
NET = 1 + os.getpid() % 250  # the third octet: the links live only inside our namespaces
CTRL = {"A": f"10.251.{NET}.1", "B": f"10.251.{NET}.2"}
DATA = {"A": f"10.252.{NET}.1", "B": f"10.252.{NET}.2"}
DEV = {"ctrl": (f"mc{TAG}ca", f"mc{TAG}cb"), "data": (f"mc{TAG}da", f"mc{TAG}db")}


def ip(*a, check_rc=True):
    p = subprocess.run(["ip", *a], capture_output=True, text=True)
    if check_rc and p.returncode:
        raise RuntimeError(f"ip {' '.join(a)}: {p.stderr.strip()}")
    return p


def make_hosts():
    for h in "AB":
        ip("netns", "add", NS[h])
        ip("-n", NS[h], "link", "set", "lo", "up")
    for link, addrs in (("ctrl", CTRL), ("data", DATA)):
        a, b = DEV[link]
        ip("-n", NS["A"], "link", "add", a, "type", "veth", "peer", "name", b, "netns", NS["B"])
        for h, dev in (("A", a), ("B", b)):
            ip("-n", NS[h], "addr", "add", addrs[h] + "/24", "dev", dev)
            ip("-n", NS[h], "link", "set", dev, "up")


def remove_hosts():
    for h in "AB":
        pids = ip("netns", "pids", NS[h], check_rc=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
    time.sleep(0.2 if any(ip("netns", "pids", NS[h], check_rc=False).stdout for h in "AB")
               else 0)
    for h in "AB":
        ip("netns", "del", NS[h], check_rc=False)


def pids_in_hosts():
    return [p for h in "AB" for p in ip("netns", "pids", NS[h], check_rc=False).stdout.split()]


def write_agent(tmp):
    """mpirun's rsh agent: 'agent [options] host command...' runs command in host's namespace."""
    path = os.path.join(tmp, "netns_agent.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nwhile [ \"${1#-}\" != \"$1\" ]; do shift; done\nhost=$1; shift\n"
                f"case $host in {CTRL['A']}) ns={NS['A']};; {CTRL['B']}) ns={NS['B']};;\n"
                "  *) echo \"netns_agent: unknown host $host\" >&2; exit 1;; esac\n"
                "exec ip netns exec \"$ns\" sh -c \"$*\"\n")
    os.chmod(path, 0o755)
    return path


def train_args(tmp, iters, extra=()):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
            "--global-batch-size", "4", "--train-iters", str(iters), "--lr", "1e-3",
            "--log-interval", "5", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096", "--ckpt-format", "torch",
            "--data-cache-path", os.path.join(tmp, "cache"), *extra]


def start_run(tmp, agent, ckpt):
    out = open(os.path.join(tmp, "out.txt"), "w+")
    cmd = ["ip", "netns", "exec", NS["A"], "mpirun", "--allow-run-as-root", "--oversubscribe",
           "--host", f"{CTRL['A']},{CTRL['B']}", "-np", "2", "--mca", "plm_rsh_agent", agent,
           "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", f"10.252.{NET}.0/24",
           "--mca", "oob_tcp_if_include", f"10.251.{NET}.0/24", "-x", "OMP_NUM_THREADS=1",
           "-x", f"MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS={TIMEOUT}", os.path.abspath(PRETRAIN),
           *train_args(tmp, 100000, ["--save", ckpt, "--save-interval", "10"])]
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    return p, out


def saved_iteration(ckpt):
    try:
        with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0


def inject(fault):
    a = DEV["data"][0]
    if fault == "cut":
        ip("-n", NS["A"], "link", "set", a, "down")
    elif fault == "throttle":
        ip("netns", "exec", NS["A"], "tc", "qdisc", "add", "dev", a, "root", "tbf", "rate",
           "8kbit", "burst", "1600", "latency", "50ms")
    else:
        ip("netns", "exec", NS["A"], "tc", "qdisc", "add", "dev", a, "root", "netem", "loss",
           "40%", "delay", "400ms")


def netem_available():
    p = subprocess.run(["ip", "netns", "exec", NS["A"], "tc", "qdisc", "add", "dev",
                        DEV["ctrl"][0], "root", "netem", "delay", "1ms"],
                       capture_output=True, text=True)
    if p.returncode == 0:
        ip("netns", "exec", NS["A"], "tc", "qdisc", "del", "dev", DEV["ctrl"][0], "root")
        return True, ""
    return False, p.stderr.strip()


def run_fault(tmp, fault):
    agent = write_agent(tmp)
    ckpt = os.path.join(tmp, "ckpt")
    p, out = start_run(tmp, agent, ckpt)
    try:
        t0 = time.time()
        while saved_iteration(ckpt) < 10 and p.poll() is None and time.time() - t0 < 40:
            time.sleep(0.2)
        saved = saved_iteration(ckpt)
        check(saved >= 10, f"{fault}: a checkpoint is saved before the fault (iteration {saved})")
        if saved < 10:
            return
        shutil.copytree(ckpt, ckpt + ".before")  # what was saved before the fault
        inject(fault)
        t_fault = time.time()
        try:
            rc = p.wait(timeout=TIMEOUT + MARGIN)
        except subprocess.TimeoutExpired:
            rc = None
        while pids_in_hosts() and time.time() - t_fault < TIMEOUT + MARGIN:
            time.sleep(0.1)
        gone = time.time() - t_fault
        left = pids_in_hosts()
        print(f"{fault}: every rank gone {gone:.1f} s after the fault (timeout {TIMEOUT} s, "
              f"mpirun rc {rc})", flush=True)
        check(rc not in (0, None) and not left and gone < TIMEOUT + MARGIN,
              f"{fault}: the job ends on every rank within the timeout + {MARGIN} s (rc {rc}, "
              f"{gone:.1f} s, processes left {left})")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    out.seek(0)
    text = out.read()
    msgs = [l for l in text.splitlines() if "longer than the distributed timeout" in l]
    named = [m for m in msgs if re.search(r"with world rank \d+ on \S+ has waited", m)]
    for m in msgs:
        print("  " + m[:300])
    check(1 <= len(msgs) <= 2 and len(named) == len(msgs) and
          all(sum(f"megatron.c: rank {r}: " in m for m in msgs) <= 1 for r in (0, 1)),
          f"{fault}: one watchdog message per waiting rank, naming its peer ({text[-800:]})")
    # the checkpoint saved before the fault loads (one process, no network involved)
    before = ckpt + ".before"
    it = saved_iteration(before)
    r = subprocess.run([PRETRAIN, *train_args(tmp, 100000, ["--load", before, "--exit-interval",
                                                            str(it + 5)])],
                       capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                       timeout=120)
    check(r.returncode == 0 and f"iteration {it + 5:8d}/" in r.stdout,
          f"{fault}: the checkpoint of iteration {it} saved before the fault loads and trains on "
          f"(rc {r.returncode}: {r.stderr[-400:]})")


def main():
    fault = sys.argv[1] if len(sys.argv) > 1 else ""
    if fault not in ("cut", "throttle", "netem"):
        print("usage: net_faults.py cut|throttle|netem", file=sys.stderr)
        return 2
    name = f"net_faults_{fault}"
    if os.geteuid() != 0:
        print(f"{name}: SKIPPED: needs root to make network namespaces (ip netns)")
        return SKIP
    if not shutil.which("ip") or not shutil.which("mpirun"):
        print(f"{name}: SKIPPED: needs the ip tool (iproute2) and mpirun")
        return SKIP
    try:
        try:
            make_hosts()
        except RuntimeError as e:
            print(f"{name}: SKIPPED: cannot make the test hosts with ip netns / veth: {e}")
            return SKIP
        if fault == "netem":
            ok, why = netem_available()
            if not ok:
                print(f"{name}: SKIPPED: tc netem is unavailable on this kernel ({why}): the "
                      "sch_netem module is not loaded and cannot be loaded here; loss and delay "
                      "are covered by the throttle test (tc tbf, built in)")
                return SKIP
        with tempfile.TemporaryDirectory() as tmp:
            run_fault(tmp, fault)
    finally:
        remove_hosts()
    return summary(name)


if __name__ == "__main__":
    sys.exit(main())
