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
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t = train(t, 700, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    out["hf_qwen2"] = (t, "<|endoftext|>")
    return out


def hf_golden():
    texts = texts_for_goldens(150, 60)
    cases = {}
    for name, (tok, eos) in hf_models().items():
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos}, f, indent=2)
        use = [t for t in texts if name != "hf_qwen2" or all(ord(ch) < 0x300 for ch in t)]
        cases[name] = {"texts": use, "ids": [tok.encode(t).ids for t in use],
                       "vocab_size": tok.get_vocab_size(with_added_tokens=True),
                       "eod": tok.token_to_id(eos)}
    import tokenizers
    with open(os.path.join(HERE, "hf_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"made_by": "make_goldens.py with tokenizers %s" % tokenizers.__version__,
                   "cases": cases}, f, ensure_ascii=False)


if __name__ == "__main__":
    what = sys.argv[1:] or ["gpt2", "hf"]
    if "gpt2" in what:
        gpt2_golden()
    if "hf" in what:
        hf_golden()
