"""build/bin/run_text_generation_server against the clients of Megatron's server
(megatron/inference/text_generation_server.py, core_v0.12.1), on loopback only.

A tiny GPT (pretrain_gpt, 2 iterations, --ckpt-format torch) is served with a byte-level BPE
tokenizer made by train_tokenizer (GPT2BPETokenizer). Checks:
  - Megatron's own client, tools/text_generation_cli.py (run as is when the Megatron tree is at
    MC_MEGATRON_ROOT, else the same request it sends: requests.put with its JSON), gets an
    answer ("Megatron Response:" and the prompt's continuation);
  - a plain urllib PUT /api (greedy: top_k 1, logprobs) gets jsonify's exact layout (sorted
    keys, no spaces, newline), text = the prompt + the generation of build/bin/generate on the
    same checkpoint and prompts (same tokens, same log probs), segments joining to the text,
    one log prob per token after the first;
  - curl gets the same body;
  - random_seed gives the same sampled text twice; add_BOS makes an empty prompt work; a
    request past the model's positions gets Megatron's TokenOverflowError text;
  - bad requests get Megatron's messages as JSON strings with status 400 (each message is also
    found in Megatron's server source when it is present), and wrong method / path / content
    type get flask_restful's {"message": ...} with 405 / 404 / 415;
  - the server listens on 127.0.0.1 only.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, Checks, gpt2, run_cmd  # noqa: E402

C = Checks("test_text_generation_server")
BIN = os.path.join(BUILD, "bin")
MEGATRON = os.environ.get("MC_MEGATRON_ROOT", "/work/ref/Megatron-LM")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
PROMPTS = ["The license grants", "Copyright (C) 2007 Free Software Foundation, Inc. \u00e9t\u00e9"]

# (request, Megatron's message), in the order Megatron checks them
BAD = [
    ({"tokens_to_generate": 4}, "prompts argument required"),
    ({"prompts": ["a"], "max_len": 4}, "max_len is no longer used.  Replace with tokens_to_generate"),
    ({"prompts": ["a"], "sentences": ["a"]}, "sentences is no longer used.  Replace with prompts"),
    ({"prompts": "a"}, "prompts is not a list of strings"),
    ({"prompts": []}, "prompts is empty"),
    ({"prompts": ["a"] * 129}, "Maximum number of prompts is 128"),
    ({"prompts": ["a"], "tokens_to_generate": 1.5}, "tokens_to_generate must be an integer greater than 0"),
    ({"prompts": ["a"], "tokens_to_generate": -1},
     "tokens_to_generate must be an integer greater than or equal to 0"),
    ({"prompts": ["a"], "logprobs": 1}, "logprobs must be a boolean value"),
    ({"prompts": ["a"], "tokens_to_generate": 0}, "tokens_to_generate=0 implies logprobs should be True"),
    ({"prompts": ["a"], "temperature": "hot"},
     "temperature must be a positive number less than or equal to 1000.0"),
    ({"prompts": ["a"], "temperature": 0}, "temperature must be a positive number less than or equal to 100.0"),
    ({"prompts": ["a"], "top_k": 0.5},
     "top_k must be an integer equal to or greater than 0 and less than or equal to 1000"),
    ({"prompts": ["a"], "top_k": 1001},
     "top_k must be equal to or greater than 0 and less than or equal to 1000"),
    ({"prompts": ["a"], "top_p": 1}, "top_p must be a positive float less than or equal to 1.0"),
    ({"prompts": ["a"], "top_k": 5, "top_p": 0.5}, "cannot set both top-k and top-p samplings."),
    ({"prompts": ["a"], "top_p": 1.5}, "top_p must be less than or equal to 1.0"),
    ({"prompts": ["a"], "top_p_decay": 0.5}, "top_p_decay cannot be set without top_p"),
    ({"prompts": ["a"], "top_p": 0.5, "top_p_bound": 0.9}, "top_p_bound must be greater than 0 and less than top_p"),
    ({"prompts": ["a"], "add_BOS": "yes"}, "add_BOS must be a boolean value"),
    ({"prompts": [""]}, "Empty prompts require add_BOS=true"),
    ({"prompts": ["a"], "stop_on_eol": 0}, "stop_on_eol must be a boolean value"),
    ({"prompts": ["a"], "random_seed": -2}, "random_seed must be a positive integer"),
    ({"prompts": ["a"], "random_seed": "x"}, "random_seed must be integer"),
    ({"prompts": ["a"], "no_log": "x"}, "no_log must be a boolean value"),
    ({"prompts": ["a", "b"], "beam_width": 2}, "When doing beam_search, batch size must be 1"),
]


def put(url, body, content_type="application/json", method="PUT"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def setup(tmp):
    tok = os.path.join(tmp, "tok")
    corpus = os.path.join(tmp, "corpus.txt")
    lic = "/usr/share/common-licenses"
    text = "".join(open(os.path.join(lic, n), errors="replace").read() for n in ("GPL-3", "Apache-2.0")) \
        if os.path.isdir(lic) else "the quick brown fox jumps over the lazy dog\n" * 500
    open(corpus, "w").write(text)
    p = run_cmd([os.path.join(BIN, "train_tokenizer"), "--input", corpus, "--vocab-size", "1000",
                 "--output-dir", tok], ENV, 300)
    C.check(p.returncode == 0, "train_tokenizer: %s" % p.stderr[-2000:])
    ckpt = os.path.join(tmp, "ck")
    p = run_cmd([os.path.join(BIN, "pretrain_gpt"), *gpt2(2), "--seq-length", "64",
                 "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "4",
                 "--train-iters", "2", "--lr", "1e-3", "--mock-data", "--tokenizer-type", "NullTokenizer",
                 "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
                 "--init-method-std", "0.3", "--ckpt-format", "torch", "--transformer-impl", "local",
                 "--eval-iters", "0", "--save", ckpt, "--save-interval", "2"], ENV, 300)
    C.check(p.returncode == 0, "pretrain_gpt: %s" % p.stderr[-2000:])
    return ckpt, ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", os.path.join(tok, "vocab.json"),
                  "--merge-file", os.path.join(tok, "merges.txt")]


def start(ckpt, tok_args, log):
    srv = subprocess.Popen([os.path.join(BIN, "run_text_generation_server"), "--load", ckpt, *tok_args,
                            "--port", "0", "--seed", "5"], stdout=log, stderr=subprocess.STDOUT, env=ENV)
    for _ in range(600):
        time.sleep(0.1)
        m = re.search(r"Serving megatron.c text generation on http://([0-9.]+):(\d+)/api",
                      open(log.name).read())
        if m or srv.poll() is not None:
            break
    if not C.check(m is not None, "server did not start: %s" % open(log.name).read()[-3000:]):
        srv.kill()
        return None, None, None
    return srv, m.group(1), int(m.group(2))


def check_greedy(url, ckpt, tok_args):
    req = {"prompts": PROMPTS, "tokens_to_generate": 10, "top_k": 1, "logprobs": True}
    status, body = put(url, req)
    C.check(status == 200, "greedy PUT: %d %s" % (status, body[:500]))
    if status != 200:
        return
    ans = json.loads(body)
    # jsonify's bytes: sorted keys, separators (",", ":"), ASCII escapes, a newline
    C.check(body == (json.dumps(ans, sort_keys=True, separators=(",", ":")) + "\n").encode(),
            "body is not jsonify's layout: %r" % body[:300])
    C.check(list(ans) == ["logprobs", "segments", "text"], "keys %s" % list(ans))
    p = run_cmd([os.path.join(BIN, "generate"), "--load", ckpt, *tok_args, "--greedy", "--logprobs",
                 "--max-tokens", "10", "--output-format", "json", *sum((["--prompt", q] for q in PROMPTS), [])],
                ENV, 300)
    C.check(p.returncode == 0, "generate: %s" % p.stderr[-2000:])
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    for i, q in enumerate(PROMPTS):
        C.check(ans["text"][i].startswith(q), "text %d does not start with its prompt: %r" % (i, ans["text"][i]))
        C.check(ans["text"][i] == rows[i]["text"], "text %d: server %r, generate %r" % (i, ans["text"][i], rows[i]["text"]))
        C.check("".join(ans["segments"][i]) == ans["text"][i], "segments %d do not join to the text" % i)
        n = len(rows[i]["prompt_tokens"]) + len(rows[i]["generated_tokens"])
        C.check(len(ans["segments"][i]) == n, "segments %d: %d for %d tokens" % (i, len(ans["segments"][i]), n))
        C.check(len(ans["logprobs"][i]) == n - 1, "logprobs %d: %d for %d tokens" % (i, len(ans["logprobs"][i]), n))
        C.check(ans["logprobs"][i] == rows[i]["logprobs"], "logprobs %d differ from generate's" % i)
        C.check(all(v <= 0 for v in ans["logprobs"][i]), "positive log prob")
    print("  greedy answer: %s" % body[:200])
    c = subprocess.run(["curl", "-s", "-X", "PUT", url, "-H", "Content-Type: application/json",
                        "-d", json.dumps(req)], capture_output=True, timeout=120) \
        if os.path.exists("/usr/bin/curl") else None
    if c is not None:
        C.check(c.returncode == 0 and c.stdout == body, "curl got another body: %r" % c.stdout[:300])


def check_megatron_client(host, port):
    cli = os.path.join(MEGATRON, "tools", "text_generation_cli.py")
    if os.path.exists(cli):
        p = subprocess.run([sys.executable, cli, "%s:%d" % (host, port)], input="The license\n6\n",
                           capture_output=True, text=True, timeout=120)
        # the client loops on input() until stdin ends (EOFError)
        C.check("Megatron Response: \nThe license" in p.stdout,
                "text_generation_cli.py: %s %s" % (p.stdout[-1000:], p.stderr[-1000:]))
        print("  Megatron's client: %s" % p.stdout.strip().replace("\n", " | ")[:200])
    else:  # the request it sends
        import requests
        r = requests.put("http://%s:%d/api" % (host, port), data=json.dumps({"prompts": ["The license"],
                         "tokens_to_generate": 6}), headers={"Content-Type": "application/json"})
        C.check(r.status_code == 200 and r.json()["text"][0].startswith("The license"), "requests: %s" % r.text)


def check_bad(url):
    src = os.path.join(MEGATRON, "megatron", "inference", "text_generation_server.py")
    megatron = open(src).read() if os.path.exists(src) else None
    for req, msg in BAD:
        status, body = put(url, req)
        C.check(status == 400 and body == (json.dumps(msg) + "\n").encode(),
                "%s: %d %r, want 400 %r" % (req, status, body, msg))
        if megatron is not None:
            C.check('"%s"' % msg in megatron, "not Megatron's message: %r" % msg)
    for args, status_want in ((("PUT", b"{}", "text/plain"), 415), (("GET", b"", "application/json"), 405)):
        method, data, ct = args
        status, body = put(url, data, ct, method)
        C.check(status == status_want and json.loads(body).get("message"), "%s: %d %r" % (args, status, body))
    status, body = put(url.replace("/api", "/nope"), {"prompts": ["a"]})
    C.check(status == 404 and "not found" in json.loads(body)["message"], "404: %d %r" % (status, body))
    status, body = put(url, b"{not json")
    C.check(status == 400 and json.loads(body)["message"].startswith("Failed to decode JSON object"),
            "bad JSON: %d %r" % (status, body))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, tok_args = setup(tmp)
        if C.failed:
            sys.exit(C.summary())
        log = open(os.path.join(tmp, "server.log"), "w")
        srv, host, port = start(ckpt, tok_args, log)
        if srv is None:
            sys.exit(C.summary())
        try:
            C.check(host == "127.0.0.1", "listens on %s, not loopback" % host)
            url = "http://127.0.0.1:%d/api" % port
            check_greedy(url, ckpt, tok_args)
            check_megatron_client(host, port)
            req = {"prompts": PROMPTS, "tokens_to_generate": 8, "temperature": 0.9, "random_seed": 11}
            a, b = put(url, req), put(url, req)
            C.check(a[0] == 200 and a == b, "random_seed 11 twice: %r / %r" % (a[1][:200], b[1][:200]))
            status, body = put(url, {"prompts": [""], "add_BOS": True, "tokens_to_generate": 3, "top_k": 1})
            C.check(status == 200 and json.loads(body)["text"][0].startswith("<|endoftext|>"),
                    "add_BOS with an empty prompt: %d %r" % (status, body[:200]))
            status, body = put(url, {"prompts": ["a"], "tokens_to_generate": 5000})
            C.check(status == 400 and b"Maximum allowed sequence length was set to 64 tokens" in body,
                    "too long: %d %r" % (status, body))
            check_bad(url)
            C.check(srv.poll() is None, "the server died")
        finally:
            srv.terminate()
            try:
                srv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                srv.kill()
            log.close()
        print(open(os.path.join(tmp, "server.log")).read()[-600:])
    sys.exit(C.summary())


if __name__ == "__main__":
    main()
