"""Tensor-parallel generation under mpirun: build/bin/generate and run_text_generation_server
with --tensor-model-parallel-size N on N ranks against the one-process run of the same
checkpoint (itself checked against transformers in test_generate_hf.py).

  - a GPT-2-style model (LayerNorm, GeLU, learned positions, tied embeddings, biases) with an odd
    vocabulary (4001 rows: the vocab-parallel split pads the last rank), trained at TP 1 and
    saved as torch: at TP 2 the greedy tokens of a ragged batch are the TP-1 tokens, the logits
    of every prompt token within 1e-5 of max |logit|, the log probs within 1e-5; sampled tokens
    with a seed (temperature, top-k, top-p) are the TP-1 ones (rank 0 samples from the gathered
    logits with the same Philox stream and broadcasts), with and without the KV cache;
  - a Llama-style model (GQA: 8 heads in 4 query groups, RoPE, SwiGLU, RMSNorm, untied) trained
    at TP 2 and saved as torch_dist: TP 2 and TP 4 (one query group a rank), each rank reading
    only its shard, generate the TP-1 tokens and logits; so does a GPT-2-style model trained at
    TP 2 and saved as torch, each rank reading only its own mp_rank_NN file;
  - refusals end every rank: heads that the size does not divide (-np 3), more processes than
    --tensor-model-parallel-size;
  - the server at TP 2 (rank 0 serves, rank 1 follows): urllib's greedy answer has the TP-1
    generate's text and log probs; Megatron's text_generation_cli.py gets an answer; a bad request
    (400) and a client that hangs up mid-request leave the ranks serving the next request;
    SIGTERM to mpirun ends both ranks.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, Checks, gpt2, llama, mpirun_cmd, run_cmd  # noqa: E402

C = Checks("test_generate_tp")
BIN = os.path.join(BUILD, "bin")
GEN = os.path.join(BIN, "generate")
SRV = os.path.join(BIN, "run_text_generation_server")
MEGATRON = os.environ.get("MC_MEGATRON_ROOT", "/work/ref/Megatron-LM")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
PROMPTS = ["5 6 7 8 9 10 11", "12 13", "400 3000 17"]


def gen(np_, ckpt, *args, logits=None):
    """generate (json) on np_ ranks at TP np_: (rows, CompletedProcess)"""
    cmd = [GEN, "--load", ckpt, "--output-format", "json", *sum((["--prompt", q] for q in PROMPTS), []),
           *args]
    if logits:
        cmd += ["--dump-logits", logits]
    if np_ > 1:
        cmd = mpirun_cmd(np_, cmd + ["--tensor-model-parallel-size", str(np_)], ("OMP_NUM_THREADS=1",))
    p = run_cmd(cmd, ENV, 300)
    C.check(p.returncode == 0, "generate np %d %s: %s" % (np_, " ".join(args), p.stderr[-2000:]))
    return [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")], p


def compare(ckpt, tmp, np_, what, sampling=True):
    """greedy tokens, logits, log probs and sampled tokens at TP np_ against TP 1"""
    l1, ln = os.path.join(tmp, "l1.npy"), os.path.join(tmp, "l%d.npy" % np_)
    base = ["--max-tokens", "8", "--greedy", "--logprobs"]
    r1, _ = gen(1, ckpt, *base, logits=l1)
    rn, p = gen(np_, ckpt, *base, logits=ln)
    if "shard by shard" in what:  # the training loader reads this rank's regions / file only
        C.check("this rank's tensor-parallel shard" in p.stderr, "%s TP %d: not loaded shard by shard: %s"
                % (what, np_, p.stderr[-800:]))
    if not r1 or len(rn) != len(r1):
        C.check(False, "%s TP %d: %d rows for %d (%s)" % (what, np_, len(rn), len(r1), p.stdout[-500:]))
        return
    C.check([r["generated_tokens"] for r in rn] == [r["generated_tokens"] for r in r1],
            "%s TP %d greedy tokens %s, TP 1 %s" % (what, np_, [r["generated_tokens"] for r in rn],
                                                     [r["generated_tokens"] for r in r1]))
    a, b = np.load(l1), np.load(ln)
    rel = float(np.abs(a - b).max() / np.abs(a).max()) if a.shape == b.shape else 1.0
    C.check(a.shape == b.shape and rel < 1e-5, "%s TP %d logits: shape %s / %s, max diff %.3g of max |logit|"
            % (what, np_, a.shape, b.shape, rel))
    lp = max(abs(x - y) for r, s in zip(r1, rn) for x, y in zip(r["logprobs"], s["logprobs"]))
    C.check(lp < 1e-5, "%s TP %d log probs differ by %.3g" % (what, np_, lp))
    print("  %s TP %d: greedy tokens identical, logits %.2g of max |logit|, log probs %.2g" % (what, np_, rel, lp))
    for opts in [] if not sampling else (["--temperature", "0.9", "--seed", "7"], ["--top-k", "20", "--seed", "8"],
                 ["--top-p", "0.8", "--temperature", "1.5", "--seed", "9"]):
        s1, _ = gen(1, ckpt, "--max-tokens", "8", *opts)
        sn, _ = gen(np_, ckpt, "--max-tokens", "8", *opts)
        C.check(s1 and [r["generated_tokens"] for r in s1] == [r["generated_tokens"] for r in sn],
                "%s TP %d sampling %s: %s vs TP 1 %s" % (what, np_, opts, [r["generated_tokens"] for r in sn],
                                                        [r["generated_tokens"] for r in s1]))
    nk, _ = gen(np_, ckpt, "--max-tokens", "8", "--greedy", "--no-kv-cache")
    C.check([r["generated_tokens"] for r in nk] == [r["generated_tokens"] for r in r1],
            "%s TP %d --no-kv-cache tokens differ" % (what, np_))


def train(tmp, name, model, np_=1, fmt="torch", extra=()):
    ck = os.path.join(tmp, name)
    cmd = [os.path.join(BIN, "pretrain_gpt"), *model, "--seq-length", "32", "--max-position-embeddings", "64",
           "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3", "--lr", "3e-3",
           "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4000", "--init-method-std", "0.3",
           "--data-cache-path", os.path.join(tmp, "cache_" + name), "--ckpt-format", fmt, "--eval-iters", "0",
           "--transformer-impl", "local", "--save", ck, "--save-interval", "3", *extra]
    if np_ > 1:
        cmd = mpirun_cmd(np_, cmd + ["--tensor-model-parallel-size", str(np_)], ("OMP_NUM_THREADS=1",))
    p = run_cmd(cmd, ENV, 300)
    C.check(p.returncode == 0, "pretrain_gpt %s: %s" % (name, p.stderr[-2000:]))
    return ck if p.returncode == 0 else None


def refusals(ck):
    t0 = time.time()
    p = run_cmd(mpirun_cmd(3, [GEN, "--load", ck, "--prompt", "1 2", "--tensor-model-parallel-size", "3"],
                           ("OMP_NUM_THREADS=1",)), ENV, 120)
    C.check(p.returncode != 0 and "does not divide the checkpoint's num_attention_heads (4)" in p.stderr,
            "TP 3 of 4 heads: rc %d %s" % (p.returncode, p.stderr[-800:]))
    p = run_cmd(mpirun_cmd(2, [GEN, "--load", ck, "--prompt", "1 2"], ("OMP_NUM_THREADS=1",)), ENV, 120)
    C.check(p.returncode != 0 and "--tensor-model-parallel-size 1 with 2 processes" in p.stderr,
            "2 processes at TP 1: rc %d %s" % (p.returncode, p.stderr[-800:]))
    p = run_cmd(mpirun_cmd(2, [GEN, "--load", ck + "_missing", "--prompt", "1", "--tensor-model-parallel-size",
                               "2"], ("OMP_NUM_THREADS=1",)), ENV, 120)
    C.check(p.returncode != 0 and "no such directory" in p.stderr, "missing --load at TP 2: %s" % p.stderr[-500:])
    print("  refusals ended every rank in %.1f s" % (time.time() - t0))


def put(url, body, timeout=120):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="PUT", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def server(ck, tmp):
    log_path = os.path.join(tmp, "server.log")
    log = open(log_path, "w")
    cmd = mpirun_cmd(2, [SRV, "--load", ck, "--port", "0", "--tensor-model-parallel-size", "2"],
                     ("OMP_NUM_THREADS=1",))
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    m = None
    for _ in range(900):
        time.sleep(0.1)
        m = re.search(r"Serving megatron.c text generation on http://([0-9.]+):(\d+)/api", open(log_path).read())
        if m or srv.poll() is not None:
            break
    if not C.check(m is not None, "TP 2 server did not start: %s" % open(log_path).read()[-3000:]):
        os.killpg(srv.pid, signal.SIGKILL)
        return
    port = int(m.group(2))
    url = "http://127.0.0.1:%d/api" % port
    try:
        req = {"prompts": PROMPTS, "tokens_to_generate": 8, "top_k": 1, "logprobs": True}
        status, body = put(url, req)
        r1, _ = gen(1, ck, "--max-tokens", "8", "--greedy", "--logprobs")
        ok = status == 200 and r1
        if C.check(ok, "TP 2 server greedy: %d %r" % (status, body[:300])):
            ans = json.loads(body)
            C.check(ans["text"] == [r["text"] for r in r1], "TP 2 server text %s, TP 1 generate %s"
                    % (ans["text"], [r["text"] for r in r1]))
            lp = max(abs(x - y) for a, r in zip(ans["logprobs"], r1) for x, y in zip(a, r["logprobs"]))
            C.check(lp < 1e-5, "TP 2 server log probs differ from TP 1 by %.3g" % lp)
        status, body = put(url, {"prompts": ["1"], "top_k": 5, "top_p": 0.5})
        C.check(status == 400 and b"cannot set both top-k and top-p samplings." in body,
                "bad request: %d %r" % (status, body))
        s = socket.create_connection(("127.0.0.1", port))  # a client that hangs up mid-body
        s.sendall(b"PUT /api HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"pro")
        s.close()
        one = json.dumps({"prompts": ["9 10"], "tokens_to_generate": 30, "top_k": 1}).encode()
        status, body = put(url, one)
        s = socket.create_connection(("127.0.0.1", port))  # one that leaves during its generation
        s.sendall(b"PUT /api HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(one), one))
        s.close()
        again = put(url, one)
        C.check(status == 200 and again == (status, body), "after a bad request and hang-ups: %d %r / %r"
                % (status, body[:200], again[1][:200]))
        req = {"prompts": PROMPTS, "tokens_to_generate": 6, "temperature": 0.9, "random_seed": 11}
        a, b = put(url, req), put(url, req)
        C.check(a[0] == 200 and a == b, "random_seed twice at TP 2: %r / %r" % (a[1][:200], b[1][:200]))
        cli = os.path.join(MEGATRON, "tools", "text_generation_cli.py")
        if os.path.exists(cli):
            p = subprocess.run([sys.executable, cli, "127.0.0.1:%d" % port], input="5 6 7\n4\n",
                               capture_output=True, text=True, timeout=120)
            C.check("Megatron Response: \n5 6 7" in p.stdout,
                    "text_generation_cli.py at TP 2: %s %s" % (p.stdout[-800:], p.stderr[-800:]))
        C.check(srv.poll() is None, "the TP 2 server died")
    finally:
        t0 = time.time()
        srv.send_signal(signal.SIGTERM)  # mpirun forwards it: rank 0 stops, then tells rank 1
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()
            C.check(False, "SIGTERM did not end the TP 2 server")
        log.close()
        text = open(log_path).read()
        C.check("run_text_generation_server: stopped" in text, "no stop line: %s" % text[-1500:])
        C.check("rank 1" not in text, "rank 1 complained: %s" % text[-1500:])
        print("  TP 2 server: answered, ended %.1f s after SIGTERM" % (time.time() - t0))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ck = train(tmp, "gpt", gpt2(2), extra=["--make-vocab-size-divisible-by", "1"])
        if ck:
            compare(ck, tmp, 2, "GPT-2 style, 4001-row vocabulary")
            refusals(ck)
            server(ck, tmp)
        ll = train(tmp, "llama", llama(2), np_=2, fmt="torch_dist")
        if ll:
            compare(ll, tmp, 2, "Llama style GQA, trained at TP 2, torch_dist shard by shard")
            compare(ll, tmp, 4, "Llama style GQA, trained at TP 2, torch_dist shard by shard", sampling=False)
        g2 = train(tmp, "gpt_tp2", gpt2(2), np_=2)
        if g2:  # each rank reads its own mp_rank_NN file
            compare(g2, tmp, 2, "GPT-2 style, trained at TP 2, torch shard by shard", sampling=False)
    sys.exit(C.summary())


if __name__ == "__main__":
    main()
