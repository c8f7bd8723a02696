"""MindSpeed-LLM's --tokenizer-type PretrainedFromHF --tokenizer-name-or-path DIR and its
--padded-vocab-size (mindspeed_llm/training/tokenizer/tokenizer.py, build_tokenizer and
_AutoTokenizer; mindspeed_llm/features_manager/tokenizer/build_tokenizer.py):

* the tokenizer: ids of HF `tokenizers` (live; the same pipelines as HuggingFaceTokenizer),
  vocab size len(tokenizer), eod = eos_token_id, class _AutoTokenizer, and the pad GPTDataset
  reads: pad_token_id (tokenizer_config.json, else special_tokens_map.json), else eos_token_id
  (_AutoTokenizer.__init__ sets pad_token_id = eos_token_id when there is none);
* pretrain_gpt: MindSpeed's " > building PretrainFromHF tokenizer..." line; the vocabulary
  padded with Megatron's rule, or to exactly --padded-vocab-size (no padding line), carried into
  the checkpoint (args.padded_vocab_size and the embedding's rows); that pad reaches GPTDataset
  (labels equal to it are masked: a run whose data holds eos tokens differs from
  HuggingFaceTokenizer's, a run whose pad never occurs is bit-identical to it);
* preprocess_data takes the same two options (ids as HuggingFaceTokenizer's)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tokdriver as td  # noqa: E402
import mc_test  # noqa: E402

c = td.Counter("test_pretrained_from_hf")
GOLD = os.path.join(td.SRC, "tests", "golden", "tokenizer")
PRETRAIN = os.path.join(td.BUILD, "bin", "pretrain_gpt")
PREP = os.path.join(td.BUILD, "bin", "preprocess_data")
try:
    import tokenizers
except ImportError:
    tokenizers = None
    print("python package `tokenizers` not installed: encodings checked against "
          "HuggingFaceTokenizer's (itself tested against it)")

TEXTS = td.NASTY[:80] + td.license_lines(200) + ["<|endoftext|>a<|endoftext|>", "<|begin_of_text|>x"]


def check_tokenizer():
    for name in ("hf_gpt2", "hf_llama3", "hf_qwen2"):
        model = os.path.join(GOLD, name)
        texts = [t for t in TEXTS if name != "hf_qwen2" or all(ord(ch) < 0x300 for ch in t)]
        got = td.encode(texts, "PretrainedFromHF", model=model)
        if tokenizers is not None:
            ref = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
            want = [ref.encode(t).ids for t in texts]
            vocab = ref.get_vocab_size(with_added_tokens=True)
        else:
            want = td.encode(texts, "HuggingFaceTokenizer", model=model)
            vocab = int(td.info("HuggingFaceTokenizer", model=model)[1].split()[0])
        bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
        c.check(not bad, "%s: %d encodings differ, first %s" % (name, len(bad), bad[:1]))
        eod = int(td.info("HuggingFaceTokenizer", model=model)[1].split()[1])
        rc, out = td.info("PretrainedFromHF", model=model)
        # no pad token in these directories: pad = eos
        c.check(out == "%d %d %d _AutoTokenizer" % (vocab, eod, eod), "%s info %s" % (name, out))
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(GOLD, "hf_llama3")
        ref = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
        added = {a["content"]: a["id"] for a in ref["added_tokens"]}
        pad_name = next(n for n in added if "end_of_text" not in n)
        eod = int(td.info("HuggingFaceTokenizer", model=src)[1].split()[1])
        for where in ("tokenizer_config.json", "special_tokens_map.json"):
            m = os.path.join(d, where.split(".")[0])
            shutil.copytree(src, m)
            cfgpath = os.path.join(m, where)
            cfg = json.load(open(cfgpath)) if os.path.exists(cfgpath) else {}
            cfg["pad_token"] = {"content": pad_name, "lstrip": False} if where[0] == "s" else pad_name
            json.dump(cfg, open(cfgpath, "w"))
            rc, out = td.info("PretrainedFromHF", model=m)
            c.check(out.split()[1:3] == [str(eod), str(added[pad_name])],
                    "pad_token %s in %s: got %s want pad %d" % (pad_name, where, out, added[pad_name]))
            rc, out = td.info("HuggingFaceTokenizer", model=m)
            c.check(out.split()[2] == "-1", "Megatron's HuggingFaceTokenizer has no pad: %s" % out)
        cfg = json.load(open(os.path.join(src, "tokenizer_config.json")))
        cfg["pad_token"] = "<no such token>"
        m = os.path.join(d, "badpad")
        shutil.copytree(src, m)
        json.dump(cfg, open(os.path.join(m, "tokenizer_config.json"), "w"))
        rc, out = td.info("PretrainedFromHF", model=m)
        c.check("INITERR" in out and "pad_token <no such token> is not a token" in out, out)
    rc, out = td.info("PretrainedFromHF", model="/nonexistent/tok")
    c.check("INITERR" in out and "--tokenizer-name-or-path /nonexistent/tok does not exist" in out, out)
    rc, out = td.info("PretrainedFromHF")
    c.check("Missing tokenizer_name_or_path" in out, out)


def model_args(tmp, tok_dir, tok_type="PretrainedFromHF", extra=()):
    tok = (["--tokenizer-name-or-path", tok_dir] if tok_type == "PretrainedFromHF"
           else ["--tokenizer-model", tok_dir])
    return [PRETRAIN, *mc_test.gpt2(2), "--seq-length", "32", "--max-position-embeddings", "32",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2",
            "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0", "--seed", "5",
            "--attention-dropout", "0", "--hidden-dropout", "0",
            "--data-cache-path", os.path.join(tmp, "cache-" + tok_type),
            "--tokenizer-type", tok_type, *tok, *extra]


def run(cmd, world_size=None):
    env = {"WORLD_SIZE": str(world_size)} if world_size else None
    return mc_test.run_pretrain(cmd[1:], exact=True, env=env)


def check_pretrain(tmp):
    tok = os.path.join(GOLD, "hf_gpt2")  # 800 tokens, eos <|endoftext|> = id 0
    p = run(model_args(tmp, tok, extra=["--mock-data", "--dry-run"]))
    lines = p.stdout.splitlines()
    c.check(p.returncode == 0 and " > building PretrainFromHF tokenizer. Vocab file is un-used, "
            "loading tokenizer from pre-trained model" in lines and
            " > padded vocab (size: 800) with 96 dummy tokens (new size: 896)" in lines,
            "dry run: MindSpeed's tokenizer line and Megatron's padding: rc %d %s" % (
                p.returncode, (p.stdout + p.stderr)[-600:]))
    p = run(model_args(tmp, tok, extra=["--mock-data", "--dry-run", "--padded-vocab-size", "810"]))
    c.check(p.returncode == 0 and "padded vocab" not in p.stdout,
            "--padded-vocab-size: used as given, no padding line: %s" % p.stdout[-300:])
    for size, tp, want in (("799", "1", "smaller than the tokenizer's vocabulary (800 tokens)"),
                           ("811", "2", "not divisible by --tensor-model-parallel-size 2")):
        p = run(model_args(tmp, tok, extra=["--mock-data", "--dry-run", "--padded-vocab-size", size,
                                            "--tensor-model-parallel-size", tp]),
                world_size=int(tp))
        c.check(p.returncode != 0 and want in p.stderr, "--padded-vocab-size %s tp %s: rc %d %s" % (
            size, tp, p.returncode, p.stderr[-300:]))


def check_dataset_pad(tmp):
    """The pad reaches GPTDataset: masked labels change the loss only when the pad occurs."""
    src = os.path.join(GOLD, "hf_gpt2")
    withpad = os.path.join(tmp, "withpad")
    shutil.copytree(src, withpad)
    tj = json.load(open(os.path.join(withpad, "tokenizer.json"), encoding="utf-8"))
    tj["added_tokens"].append({"id": 800, "content": "<pad>", "single_word": False, "lstrip": False,
                               "rstrip": False, "normalized": False, "special": True})
    json.dump(tj, open(os.path.join(withpad, "tokenizer.json"), "w"))
    cfg = json.load(open(os.path.join(withpad, "tokenizer_config.json")))
    cfg["pad_token"] = "<pad>"
    json.dump(cfg, open(os.path.join(withpad, "tokenizer_config.json"), "w"))
    jl = os.path.join(tmp, "docs.jsonl")
    with open(jl, "w") as f:
        for line in td.license_lines(120):
            f.write(json.dumps({"text": line}) + "\n")
    losses, data_of = {}, {}
    for tok_dir, tok_type in ((src, "PretrainedFromHF"), (src, "HuggingFaceTokenizer"),
                              (withpad, "PretrainedFromHF"), (withpad, "HuggingFaceTokenizer")):
        for eod in (True, False):
            prefix = os.path.join(tmp, "d-%s-%s-%d" % (os.path.basename(tok_dir), tok_type, eod))
            tok = (["--tokenizer-name-or-path", tok_dir] if tok_type == "PretrainedFromHF"
                   else ["--tokenizer-model", tok_dir])
            r = subprocess.run([PREP, "--input", jl, "--output-prefix", prefix, "--tokenizer-type",
                                tok_type, *tok, "--workers", "1"] + (["--append-eod"] if eod else []),
                               capture_output=True, text=True)
            c.check(r.returncode == 0, "preprocess_data %s: %s" % (tok_type, r.stderr[-300:]))
            data = ["--data-path", prefix + "_text_document", "--split", "1,0,0"]
            data_of[tok_dir, tok_type] = data
            p = run(model_args(tmp, tok_dir, tok_type, data))
            c.check(p.returncode == 0, "train %s: %s" % (tok_type, p.stderr[-400:]))
            losses[os.path.basename(tok_dir), tok_type, eod] = mc_test.parse_exact(p.stdout)
    c.check(open(os.path.join(tmp, "d-hf_gpt2-PretrainedFromHF-1_text_document.bin"), "rb").read() ==
            open(os.path.join(tmp, "d-hf_gpt2-HuggingFaceTokenizer-1_text_document.bin"), "rb").read(),
            "preprocess_data: PretrainedFromHF writes HuggingFaceTokenizer's tokens")
    a = losses["hf_gpt2", "PretrainedFromHF", True]
    b = losses["hf_gpt2", "HuggingFaceTokenizer", True]
    c.check(len(a) == 2 and len(b) == 2 and a[0][1] != b[0][1],
            "pad = eos: eos labels masked, loss differs from HuggingFaceTokenizer's: %s %s" % (a, b))
    for key in (("hf_gpt2", False), ("withpad", True), ("withpad", False)):
        a = losses[key[0], "PretrainedFromHF", key[1]]
        b = losses[key[0], "HuggingFaceTokenizer", key[1]]
        c.check(len(a) == 2 and a == b, "pad absent from the data (%s, eod %s): identical runs %s %s"
                % (key[0], key[1], a, b))
    check_checkpoint(tmp, src, data_of[src, "PretrainedFromHF"])


def check_checkpoint(tmp, tok, data):
    """A checkpoint with exactly that many embedding rows, and its args saying so."""
    save = os.path.join(tmp, "ckpt")
    p = run(model_args(tmp, tok, extra=data + ["--padded-vocab-size", "810", "--save", save,
                                               "--save-interval", "2", "--ckpt-format", "torch"]))
    c.check(p.returncode == 0, "train + save with --padded-vocab-size: %s" % p.stderr[-500:])
    try:
        import torch
    except ImportError:
        print("torch not installed: checkpoint contents not read")
        return
    sys.path.insert(0, os.path.join(td.SRC, "tests", "checkpointing"))
    import torch_stubs  # the Megatron enums the pickle names
    torch_stubs.install()
    sd = torch.load(os.path.join(save, "iter_0000002", "mp_rank_00", "model_optim_rng.pt"),
                    map_location="cpu")
    emb = sd["model"]["embedding.word_embeddings.weight"]
    c.check(tuple(emb.shape) == (810, 32) and sd["args"].padded_vocab_size == 810,
            "checkpoint: embedding %s, args.padded_vocab_size %s" % (
                tuple(emb.shape), sd["args"].padded_vocab_size))


def main():
    check_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        check_pretrain(tmp)
        check_dataset_pad(tmp)
    c.finish()


if __name__ == "__main__":
    sys.exit(main())
