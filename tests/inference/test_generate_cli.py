"""The command lines of build/bin/generate and run_text_generation_server: --help, and bad
input refused with a message naming the option / file and a non-zero status (2 for
command-line errors, 1 for failures), never a crash: no --load, a missing directory, a broken
torch_dist checkpoint, a tensor-parallel size without mpirun, pipeline parallelism, model options that contradict the checkpoint
(check_checkpoint_args's message), a tokenizer larger than the embedding, an empty prompt,
bad sampling values, a sequence longer than the learned positions; --add-BOS makes the empty
prompt work; a torch_dist checkpoint generates what the torch one of the same run does; sampled
tokens lie in Megatron's top-k / top-p sets (numpy, on the logits of each step) and top-k 1 is
greedy."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, Checks, gpt2, run_cmd  # noqa: E402

C = Checks("test_generate_cli")
BIN = os.path.join(BUILD, "bin")
GEN = os.path.join(BIN, "generate")
SRV = os.path.join(BIN, "run_text_generation_server")
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(cmd):
    return run_cmd(cmd, ENV, 300)


def refused(cmd, rc, *words):
    p = run(cmd)
    ok = p.returncode == rc and all(w in p.stderr for w in words)
    C.check(ok, "%s: rc %d (want %d), stderr %r (want %s)" % (" ".join(cmd[1:]), p.returncode, rc,
                                                              p.stderr[-600:], words))


def kept(logits, top_k, top_p, temperature):
    """Megatron's sample_from_logits filters (numpy): the token ids that may be drawn"""
    z = logits[:4097].astype(np.float64) / temperature
    order = np.argsort(-z, kind="stable")
    if top_k:
        return set(np.nonzero(z >= z[order[top_k - 1]])[0].tolist())
    p = np.exp(z[order] - z[order[0]])
    cum = np.cumsum(p / p.sum())
    drop = np.concatenate([[False], cum[:-1] > top_p])  # shifted by one: the first always kept
    return set(order[~drop].tolist())


def check_filters(tmp, ck):
    """every sampled token lies in the top-k / top-p set of the logits it was drawn from (the
    logits of prompt + tokens so far, from --dump-logits), and top-k 1 is greedy"""
    prompt = [5, 6, 7]
    greedy = json.loads(run([GEN, "--load", ck, "--prompt", "5 6 7", "--max-tokens", "5", "--greedy",
                             "--output-format", "json"]).stdout.splitlines()[0])["generated_tokens"]
    top1 = json.loads(run([GEN, "--load", ck, "--prompt", "5 6 7", "--max-tokens", "5", "--top-k", "1",
                           "--output-format", "json"]).stdout.splitlines()[0])["generated_tokens"]
    C.check(greedy == top1, "--top-k 1 is not greedy: %s vs %s" % (top1, greedy))
    for opts, k, p_ in ((["--top-k", "3"], 3, 0.0), (["--top-p", "0.3", "--temperature", "0.05"], 0, 0.3)):
        q = run([GEN, "--load", ck, "--prompt", "5 6 7", "--max-tokens", "5", "--output-format", "json",
                 "--seed", "3", *opts])
        gen = json.loads(q.stdout.splitlines()[0])["generated_tokens"] if q.returncode == 0 else []
        C.check(len(gen) > 0, "%s: %s" % (opts, q.stderr[-500:]))
        temp = float(opts[opts.index("--temperature") + 1]) if "--temperature" in opts else 1.0
        for i, tok in enumerate(gen):
            lg = os.path.join(tmp, "step.npy")
            seq = prompt + gen[:i]
            run([GEN, "--load", ck, "--prompt", " ".join(map(str, seq)), "--max-tokens", "1",
                 "--dump-logits", lg])
            allowed = kept(np.load(lg)[-1], k, p_, temp)
            C.check(tok in allowed, "%s step %d: token %d outside the filtered set of %d" %
                    (opts, i, tok, len(allowed)))


def main():
    for prog in (GEN, SRV):
        p = run([prog, "--help"])
        C.check(p.returncode == 0 and "--load" in p.stdout and "--tokenizer-type" in p.stdout,
                "%s --help: %s" % (prog, p.stdout[:300]))
        refused([prog], 2, "the following arguments are required: --load")
        refused([prog, "--load", "/nonexistent/ck"] + (["--prompt", "1"] if prog == GEN else []), 1,
                "--load /nonexistent/ck: no such directory")
        refused([prog, "--load", "x", "--bogus"], 2, "unrecognized arguments: --bogus")
    p = run([GEN, "--help"])
    for opt in ("--max-tokens", "--greedy", "--temperature", "--top-k", "--top-p", "--seed", "--no-kv-cache",
                "--prompts-file"):
        C.check(opt in p.stdout, "generate --help lacks %s" % opt)
    with tempfile.TemporaryDirectory() as tmp:
        ck = os.path.join(tmp, "ck")
        p = run([os.path.join(BIN, "pretrain_gpt"), *gpt2(2), "--seq-length", "16",
                 "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
                 "--train-iters", "1", "--lr", "1e-3", "--mock-data", "--tokenizer-type", "NullTokenizer",
                 "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
                 "--ckpt-format", "torch", "--transformer-impl", "local", "--eval-iters", "0",
                 "--save", ck, "--save-interval", "1"])
        if not C.check(p.returncode == 0, "pretrain_gpt: %s" % p.stderr[-1500:]):
            sys.exit(C.summary())
        base = [GEN, "--load", ck, "--prompt", "1 2 3", "--max-tokens", "4"]
        p = run(base)
        C.check(p.returncode == 0 and p.stdout.startswith("1 2 3"), "plain run: %s %s" % (p.stdout, p.stderr))
        C.check("prefill" in p.stderr and "tokens/s" in p.stderr, "no speed line: %s" % p.stderr)
        refused(base + ["--tensor-model-parallel-size", "2"], 1,
                "--tensor-model-parallel-size 2 with 1 processes", "mpirun -np 2")
        refused(base + ["--pipeline-model-parallel-size", "2"], 1,
                "--pipeline-model-parallel-size 2: pipeline-parallel generation is not implemented")
        refused(base + ["--num-layers", "3"], 1,
                "num_layers value from checkpoint (2) is not equal to the input argument value (3).")
        refused(base + ["--swiglu"], 1, "--swiglu was given but the checkpoint was trained without it")
        refused(base + ["--num-layers", "2", "--hidden-size", "32", "--use-mcore-models", "--bf16",
                        "--micro-batch-size", "1", "--max-tokens", "x"], 2, "--max-tokens")
        refused(base + ["--vocab-size", "9000"], 1, "the tokenizer has 9001 tokens")
        refused([GEN, "--load", ck, "--prompt", ""], 1, "Empty prompts require add_BOS")
        refused(base + ["--top-k", "5", "--top-p", "0.5"], 1, "Cannot have top-p and top-k both greater than zero")
        refused(base + ["--temperature", "0"], 1, "--temperature 0")
        refused(base + ["--greedy", "--top-k", "3"], 2, "--greedy with")
        refused([GEN, "--load", ck, "--prompt", "1", "--max-tokens", "20"], 1,
                "longer than the model's learned position embeddings (--max-position-embeddings 16)")
        p = run([GEN, "--load", ck, "--prompt", "", "--add-BOS", "--max-tokens", "3", "--output-format", "json"])
        ok = p.returncode == 0 and json.loads(p.stdout.splitlines()[0])["prompt_tokens"] == [4096]
        C.check(ok, "--add-BOS: %s %s" % (p.stdout, p.stderr))
        check_filters(tmp, ck)
        pf = os.path.join(tmp, "prompts.txt")
        open(pf, "w").write('1 2\n{"prompt": "3 4"}\n\n5\n')
        p = run([GEN, "--load", ck, "--prompts-file", pf, "--max-tokens", "2", "--output-format", "json"])
        rows = [json.loads(x)["prompt_tokens"] for x in p.stdout.splitlines() if x.startswith("{")]
        C.check(p.returncode == 0 and rows == [[1, 2], [3, 4], [5]], "--prompts-file: %s %s" % (rows, p.stderr))
        refused([GEN, "--load", ck, "--prompts-file", os.path.join(tmp, "none.txt")], 1, "--prompts-file")
        p = run([GEN, "--load", ck, "--prompts", "1 2", "3", "--num-tokens-to-generate", "2", "--top_k", "1",
                 "--output-format", "json"])  # Megatron's offline-mode spellings
        rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        C.check(p.returncode == 0 and [r["prompt_tokens"] for r in rows] == [[1, 2], [3]] and
                all(len(r["generated_tokens"]) == 2 for r in rows), "--prompts: %s %s" % (p.stdout, p.stderr))
        # torch_dist (Megatron's default format): the same run saved both ways generates the same
        # tokens and the same logits
        dist = os.path.join(tmp, "ck_dist")
        p = run([os.path.join(BIN, "pretrain_gpt"), *gpt2(2), "--seq-length", "16",
                 "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
                 "--train-iters", "1", "--lr", "1e-3", "--mock-data", "--tokenizer-type", "NullTokenizer",
                 "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
                 "--ckpt-format", "torch_dist", "--eval-iters", "0", "--save", dist, "--save-interval", "1",
                 "--attention-backend", "unfused"])  # the local-spec run's attention, so the same weights
        if C.check(p.returncode == 0, "pretrain_gpt torch_dist: %s" % p.stderr[-1500:]):
            outs = []
            for ckpt in (ck, dist):
                lg = os.path.join(tmp, os.path.basename(ckpt) + ".npy")
                q = run([GEN, "--load", ckpt, "--prompt", "5 6 7 8", "--max-tokens", "6", "--output-format", "json",
                         "--dump-logits", lg])
                C.check(q.returncode == 0, "generate %s: %s" % (ckpt, q.stderr[-1500:]))
                outs.append((q.stdout, open(lg, "rb").read() if q.returncode == 0 else None))
            C.check("torch_dist" in q.stderr, "torch_dist load line: %s" % q.stderr[:300])
            C.check(outs[0] == outs[1], "torch and torch_dist checkpoints generate differently: %s / %s"
                    % (outs[0][0], outs[1][0]))
        broken = os.path.join(tmp, "dist_broken")
        os.makedirs(os.path.join(broken, "iter_0000001"))
        open(os.path.join(broken, "latest_checkpointed_iteration.txt"), "w").write("1")
        open(os.path.join(broken, "iter_0000001", "metadata.json"), "w").write("{}")
        refused([GEN, "--load", broken, "--prompt", "1"], 1, "common.pt")
        refused([SRV, "--load", ck, "--host", "not-an-ip", "--port", "0"], 1, "--host not-an-ip")
    sys.exit(C.summary())


if __name__ == "__main__":
    main()
