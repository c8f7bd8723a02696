#!/usr/bin/env python3
"""Makes the tokenizer goldens in this directory (see README.md). Run from the repository root:
   /usr/bin/python3 tests/golden/tokenizer/make_goldens.py
Needs: Megatron-LM core_v0.12.1 source (MC_MEGATRON_DIR, default /work/ref/Megatron-LM),
python3-regex, and the PyPI packages `tokenizers` and `sentencepiece`. Training data: the
Debian license texts in /usr/share/common-licenses."""
import glob
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tokenizer"))
import tokdriver as td  # noqa: E402

LIC = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
L3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
      r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN = L3.replace(r"\p{N}{1,3}", r"\p{N}")


def texts_for_goldens(n_random=400, n_license=200):
    return td.NASTY + td.random_strings(n_random, seed=4321) + td.license_lines(n_license)


def gpt2_golden():
    path = os.path.join(td.MEGATRON, "megatron", "training", "tokenizer", "gpt2_tokenization.py")
    spec = importlib.util.spec_from_file_location("mg_gpt2_tokenization", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tok = mod.GPT2Tokenizer(os.path.join(td.GPT2_DIR, "vocab.json"), os.path.join(td.GPT2_DIR, "merges.txt"),
                            errors="replace", special_tokens=[], max_len=None)
    texts = texts_for_goldens()
    with open(os.path.join(HERE, "gpt2_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"made_by": "make_goldens.py with Megatron-LM core_v0.12.1 GPT2Tokenizer",
                   "texts": texts, "ids": [tok.encode(t) for t in texts]}, f, ensure_ascii=False)


def hf_models():
    from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
    out = {}

    def train(tok, size, special):
        tr = trainers.BpeTrainer(vocab_size=size, special_tokens=special, show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train(LIC, tr)
        tok.decoder = decoders.ByteLevel()
        return tok

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    out["hf_gpt2"] = (train(t, 800, ["<|endoftext|>"]), "<|endoftext|>")

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    out["hf_gpt2_prefix"] = (train(t, 600, ["<|endoftext|>"]), "<|endoftext|>")

    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(L3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t = train(t, 900, [])
    t.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"])
    bos = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    out["hf_llama3"] = (t, "<|end_of_text|>")

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(L3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    out["hf_split_prefix"] = (train(t, 500, ["<|endoftext|>"]), "<|endoftext|>")

    out["hf_llama2"] = (llama2_style(metaspace=False), "</s>")
    out["hf_metaspace"] = (llama2_style(metaspace=True), "</s>")

    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t = train(t, 700, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    out["hf_qwen2"] = (t, "<|endoftext|>")
    return out


def llama2_style(metaspace):
    """A SentencePiece-style BPE in tokenizer.json form, as transformers converts Llama-2 /
    Mistral: character-level BPE, <0xXX> byte tokens in the model vocab (ids 3..258) for byte
    fallback, <unk> fused, a BOS template; either the old normalizer (Prepend + Replace) or the
    newer Metaspace pre-tokenizer (prepend_scheme first)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=90,
                             show_progress=False)
    t.train(LIC, tr)
    j = json.loads(t.to_str())
    old = j["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for tok, i in sorted(old.items(), key=lambda kv: kv[1]):
        if tok not in vocab:
            vocab[tok] = len(vocab)
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    if metaspace:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                              "split": False}
        j["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                        "split": False}
    else:
        j["decoder"] = json.loads(decoders.Sequence([
            decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
            decoders.Strip(" ", 1, 0)]).__getstate__())
    t = Tokenizer.from_str(json.dumps(j))
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                     special_tokens=[("<s>", 1)])
    return t


def hf_golden():
    texts = texts_for_goldens(80, 30)
    cases = {}
    for name, (tok, eos) in hf_models().items():
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos}, f, indent=2)
        use = texts + ["", " ", "  two  spaces ", "<s>x</s>y", "a<unk>b", "\u2581already"]
        use = [t for t in use if name != "hf_qwen2" or all(ord(ch) < 0x300 for ch in t)]
        cases[name] = {"texts": use, "ids": [tok.encode(t).ids for t in use],
                       "vocab_size": tok.get_vocab_size(with_added_tokens=True),
                       "eod": tok.token_to_id(eos)}
    import tokenizers
    with open(os.path.join(HERE, "hf_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"made_by": "make_goldens.py with tokenizers %s" % tokenizers.__version__,
                   "cases": cases}, f, ensure_ascii=False)


# Small normalization rules (source code points -> target code points, hex) so that one
# committed model exercises the precompiled charsmap without the 240 KB of nmt_nfkc's.
SPM_RULES = [("FF21", "41"), ("FF41", "61"), ("FB01", "66 69"), ("2460", "31"), ("3000", "20"),
             ("65 301", "E9"), ("41 42 43", "61 62 63"), ("2028", "20 20"), ("D7", "78")]


def spm_models(d):
    import sentencepiece as spm
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for p in LIC:
            f.write(open(p, encoding="utf-8").read() + "\n")
        f.write("\u6771\u4eac\u90fd \u4e2d\u6587 caf\u00e9 na\u00efve \uff26\uff55\uff4c\uff4c \u2460\u2461 \ufb01\n")
    rules = os.path.join(d, "rules.tsv")
    with open(rules, "w") as f:
        for a, b in SPM_RULES:
            f.write("%s\t%s\n" % (a, b))
    common = dict(input=corpus, minloglevel=2, num_threads=1)
    # Unigram with the default nmt_nfkc normalizer (precompiled charsmap)
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(d, "uni_nfkc"), vocab_size=600, **common)
    # Llama-2-like BPE: identity normalizer, byte fallback, split digits, no whitespace removal
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(d, "bpe_llama"), vocab_size=600,
                                   model_type="bpe", byte_fallback=True, split_digits=True,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   allow_whitespace_only_pieces=True, **common)
    # Unigram with user-defined and control symbols, a pad piece and a small custom charsmap
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(d, "uni_user"), vocab_size=500,
                                   user_defined_symbols=["<EOD>", "@@", "foo bar"],
                                   control_symbols=["<ctl>"], pad_id=3, normalization_rule_tsv=rules,
                                   **common)
    # BPE with whitespace as suffix and no bos piece
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(d, "bpe_suffix"), vocab_size=400,
                                   model_type="bpe", normalization_rule_name="identity",
                                   treat_whitespace_as_suffix=True, bos_id=-1, **common)
    return ["uni_nfkc", "bpe_llama", "uni_user", "bpe_suffix"]


SPM_EXTRA = ["  lead  and  trail  ", "foo bar", "x@@y", "<EOD>", "a<EOD>b<s>c</s>d<pad>e", "<ctl>",
             "\uff21\uff22\uff43 ABC \ufb01 \u2460 e\u0301 \u00d7", "1234567890", "<CLS><SEP><MASK>"]


def spm_golden():
    import shutil
    import tempfile
    import sentencepiece
    mt = td.megatron_tokenizer_module()
    classes = {"SentencePieceTokenizer": mt._SentencePieceTokenizer,
               "GPTSentencePieceTokenizer": mt._GPTSentencePieceTokenizer,
               "Llama2Tokenizer": mt._Llama2Tokenizer}
    out_dir = os.path.join(HERE, "spm")
    os.makedirs(out_dir, exist_ok=True)
    texts = texts_for_goldens(60, 30) + SPM_EXTRA
    cases = {}
    with tempfile.TemporaryDirectory() as d:
        for name in spm_models(d):
            shutil.copy(os.path.join(d, name + ".model"), os.path.join(out_dir, name + ".model"))
            for kind, cls in classes.items():
                tok = cls(os.path.join(out_dir, name + ".model"))
                pad = getattr(tok, "pad") if kind != "Llama2Tokenizer" else -1
                cases["%s/%s" % (name, kind)] = {
                    "ids": [tok.tokenize(t) for t in texts],
                    "vocab_size": tok.vocab_size, "eod": tok.eod, "pad": pad}
    with open(os.path.join(HERE, "spm_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"made_by": "make_goldens.py with Megatron-LM core_v0.12.1 tokenizer classes and "
                   "sentencepiece %s" % sentencepiece.__version__, "texts": texts, "cases": cases}, f,
                  ensure_ascii=False, separators=(",", ":"))


def tiktoken_vocab(path, n_merges=700):
    """A tiktoken JSON vocab ({rank, token_bytes, token_str}): the 256 bytes, then the merges of
    a byte-level BPE trained by HuggingFace `tokenizers` on the license texts, in merge order."""
    import base64
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.train(LIC, trainers.BpeTrainer(vocab_size=256 + n_merges, show_progress=False,
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    byte_of = {v: k for k, v in _bytes_to_unicode().items()}
    toks = [bytes([i]) for i in range(256)]
    for a, b in json.loads(t.to_str())["model"]["merges"]:
        tb = bytes(byte_of[ch] for ch in a + b)
        if tb not in toks:
            toks.append(tb)
    with open(path, "w") as f:
        json.dump([{"rank": i, "token_bytes": base64.b64encode(tb).decode(),
                    "token_str": tb.decode("utf-8", "replace")} for i, tb in enumerate(toks)], f)
    return len(toks)


def _bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


TIKTOKEN_CONFIGS = [  # (pattern, vocab_size, num_special_tokens, special_tokens)
    ("v1", 900, 100, None), ("v1", 950, 40, ["<unk>", "<s>", "</s>", "<mask>", "<|endoftext|>"]),
    ("v2", 900, 100, None)]


def tiktoken_golden():
    import tiktoken
    mt = td.megatron_tokenizer_module()
    path = os.path.join(HERE, "tiktoken_vocab.json")
    tiktoken_vocab(path)
    texts = texts_for_goldens(80, 30) + ["<s>x</s>", "<|endoftext|>", "<SPECIAL_7>"]
    cases = []
    for pattern, vs, ns, sp in TIKTOKEN_CONFIGS:
        pat = mt.PATTERN_TIKTOKEN if pattern == "v1" else mt.PATTERN_TIKTOKEN_V2
        tok = mt.CustomTikTokenizer(path, pat, vs, ns, sp)
        cases.append({"pattern": pattern, "vocab_size": vs, "num_special_tokens": ns, "special_tokens": sp,
                      "eod": tok.eod, "ids": [tok.tokenize(t) for t in texts]})
    with open(os.path.join(HERE, "tiktoken_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"made_by": "make_goldens.py with Megatron-LM core_v0.12.1 CustomTikTokenizer "
                   "(patterns v1, v2) and tiktoken %s" % tiktoken.__version__, "texts": texts,
                   "cases": cases}, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    what = sys.argv[1:] or ["gpt2", "hf", "spm", "tiktoken"]
    if "gpt2" in what:
        gpt2_golden()
    if "hf" in what:
        hf_golden()
    if "spm" in what:
        spm_golden()
    if "tiktoken" in what:
        tiktoken_golden()
