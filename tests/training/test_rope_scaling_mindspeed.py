"""MindSpeed-LLM's Llama-3.x RoPE scaling options (--rope-scaling-type llama3 with
--rope-scaling-factor, --low-freq-factor, --high-freq-factor, --original-max-position-embeddings;
mindspeed_llm/core/models/common/embeddings/rotary_pos_embedding.py, apply_llama3_scaling).
The model math is in tests/parity (config rope_scaling_mindspeed, C model against the twin);
here: (1) the twin's inv_freq against MindSpeed's per-frequency loop, written out again from
its code (fp32 tensors, Python-float constants), for several constant sets; (2) pretrain_gpt with
MindSpeed's options set to Megatron's fixed constants (1, 4, 8192) trains bit for bit as with
Megatron's --use-rope-scaling, other constants change the run; (3) what is refused, by name."""
import math
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import mc_test  # noqa: E402
from mc_test import check, summary  # noqa: E402
from reference import gpt_twin as T  # noqa: E402


def mindspeed_llama3(freqs, factor, low, high, original):
    """apply_llama3_scaling: one frequency at a time, as MindSpeed-LLM loops."""
    low_wavelen, high_wavelen = original / low, original / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(freq)
        elif wavelen > low_wavelen:
            out.append(freq / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return torch.tensor(out, dtype=freqs.dtype)


def check_formula():
    for kv, base, factor, low, high, orig in ((8, 1e6, 32.0, 2.0, 8.0, 16384.0),
                                              (128, 500000.0, 8.0, 1.0, 4.0, 8192.0),
                                              (64, 500000.0, 32.0, 1.0, 4.0, 8192.0),
                                              (64, 10000.0, 16.0, 0.5, 3.0, 2048.0)):
        c = T.derive(dict(hidden_size=kv * 2, num_attention_heads=2, position_embedding_type=T.POS_ROPE,
                          rotary_base=base, use_rope_scaling=1, rope_scaling_factor=factor,
                          rope_low_freq_factor=low, rope_high_freq_factor=high,
                          rope_original_max_position=orig))
        plain = dict(c, use_rope_scaling=0)
        want = mindspeed_llama3(T.rope_inv_freq(plain), factor, low, high, orig)
        got = T.rope_inv_freq(c)
        bands = (got != T.rope_inv_freq(plain)).sum().item()
        check(torch.equal(got, want), "twin inv_freq = MindSpeed's loop (kv %d, %s): max diff %g"
              % (kv, (factor, low, high, orig), (got - want).abs().max().item()))
        print("kv %d %s: %d of %d frequencies scaled" % (kv, (factor, low, high, orig), bands, len(got)))


def args(tmp, extra):
    return [*mc_test.llama(2), "--seq-length", "32", "--max-position-embeddings", "32",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3",
            "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0", "--rotary-base", "500000",
            "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
            "--hidden-dropout", "0", "--kv-channels", "64", *extra]


MS = ["--rope-scaling-type", "llama3", "--rope-scaling-factor", "8", "--low-freq-factor", "1",
      "--high-freq-factor", "4", "--original-max-position-embeddings", "8192"]


def check_runs(tmp):
    runs = {}
    for name, extra in (("megatron", ["--use-rope-scaling", "--rope-scaling-factor", "8"]),
                        ("mindspeed", MS),
                        ("other", MS[:-1] + ["2048"]),
                        ("none", [])):
        p = mc_test.run_pretrain(args(tmp, extra))
        check(p.returncode == 0, "%s run: %s" % (name, p.stderr[-400:]))
        runs[name] = mc_test.parse_exact(p.stdout)
    check(len(runs["mindspeed"]) == 3 and runs["mindspeed"] == runs["megatron"],
          "MindSpeed llama3 options with 1/4/8192 = Megatron's --use-rope-scaling: %s %s" % (
              runs["mindspeed"], runs["megatron"]))
    check(runs["other"] != runs["megatron"] and runs["megatron"] != runs["none"],
          "other constants / no scaling change the run")
    for extra, want in ((["--rope-scaling-type", "yarn"], "--rope-scaling-type yarn is not supported"),
                        (MS[:6] + MS[8:], "--rope-scaling-type llama3 needs --high-freq-factor"),
                        (MS + ["--use-rope-scaling"], "would apply the Llama-3 scaling twice"),
                        (MS[:5] + ["4", "--high-freq-factor", "1"] + MS[8:], "0 < low < high")):
        p = mc_test.run_pretrain(args(tmp, extra))
        check(p.returncode != 0 and want in p.stderr, "%s refused: rc %d %s" % (
            extra, p.returncode, p.stderr[-300:]))


def main():
    check_formula()
    with tempfile.TemporaryDirectory() as tmp:
        check_runs(tmp)
    return summary("test_rope_scaling_mindspeed")


if __name__ == "__main__":
    sys.exit(main())
