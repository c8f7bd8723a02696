"""The transformers side of tests/inference/test_generate_hf.py and bench/generate/run.py; runs
inside build/hf-venv (scripts/setup_hf_venv.sh), never with the system Python.

  hf_generate.py DIR IN.json OUT.json [LOGITS.npy]
IN.json: {"prompts": [[ids], ...], "max_new_tokens": N, "eos": ID, "threads": T, "warmup": bool}. Each prompt runs
alone (no padding) through GPT2LMHeadModel / LlamaForCausalLM.from_pretrained(DIR).generate
(greedy, KV cache); OUT.json gets the new tokens (the eos that stopped a row left out) and the
prefill / decode seconds. LOGITS.npy: the fp32 logits [n, V] of the first prompt's tokens."""
import json
import sys
import time

import numpy as np
import torch


def main():
    import transformers as tf
    path, inp, out = sys.argv[1:4]
    spec = json.load(open(inp))
    torch.set_num_threads(int(spec.get("threads", 1)))
    model = tf.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    eos = spec["eos"]
    res = {"class": type(model).__name__, "tokens": [], "prefill_s": 0.0, "decode_s": 0.0,
           "prefill_tokens": 0, "decode_tokens": 0}
    with torch.no_grad():
        if spec.get("warmup"):  # one untimed generation first (kernel selection, allocations)
            model.generate(torch.tensor([spec["prompts"][0]]), do_sample=False, max_new_tokens=2,
                           eos_token_id=eos, pad_token_id=eos)
        for p in spec["prompts"]:
            ids = torch.tensor([p])
            t0 = time.perf_counter()
            model(ids)  # prefill alone: its time
            t1 = time.perf_counter()
            g = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=spec["max_new_tokens"], eos_token_id=eos,
                               pad_token_id=eos, num_beams=1)
            t2 = time.perf_counter()
            new = g[0, len(p):].tolist()
            if eos in new:
                new = new[:new.index(eos)]
            res["tokens"].append(new)
            res["prefill_s"] += t1 - t0
            res["prefill_tokens"] += len(p)
            # generate's own prefill is inside t2 - t1; decode = the rest
            res["decode_s"] += max(t2 - t1 - (t1 - t0), 0.0)
            res["decode_tokens"] += max(len(new) - 1, 0)
        if len(sys.argv) > 4:
            logits = model(torch.tensor([spec["prompts"][0]])).logits[0].float().numpy()
            np.save(sys.argv[4], logits.astype(np.float32))
    json.dump(res, open(out, "w"))


if __name__ == "__main__":
    main()
