"""The transformers side of tests/convert/test_convert_hf.py; runs inside build/hf-venv (made by
scripts/setup_hf_venv.sh), never with the system Python.

  hf_side.py make gpt2|gpt2_bin|llama|llama_tied|llama_golden DIR SEED     a random tiny model, save_pretrained (safetensors;
                                           the Llama one sharded: model.safetensors.index.json;
                                           gpt2_bin: pytorch_model.bin)
  hf_side.py logits DIR TOKENS.pt OUT.pt   from_pretrained(DIR) logits [b, s, V] (fp32, eval)
"""
import os
import sys

import torch

torch.set_num_threads(1)


def make(kind, out, seed):
    import transformers as tf
    torch.manual_seed(seed)
    if kind in ("gpt2", "gpt2_bin"):
        cfg = tf.GPT2Config(vocab_size=1000, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                            activation_function="gelu_new", initializer_range=0.1,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = tf.GPT2LMHeadModel(cfg)
    elif kind == "llama_golden":  # tiny, for tests/golden/convert (Megatron's llama_mistral
        # loader fixes seq_length 4096, so max_position_embeddings must reach it)
        cfg = tf.LlamaConfig(vocab_size=256, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                             rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                             initializer_range=0.1,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 8192})
        model = tf.LlamaForCausalLM(cfg)
    elif kind == "llama_tied":  # Llama 3.2 style: tied embeddings, no rope scaling, MHA
        cfg = tf.LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                             rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
                             initializer_range=0.1)
        model = tf.LlamaForCausalLM(cfg)
    else:
        cfg = tf.LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                             initializer_range=0.1,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 8192})
        model = tf.LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 / biases away from 0, so that they matter
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=kind != "gpt2_bin",
                          max_shard_size="40KB" if kind == "llama" else "5GB")
    if kind == "llama_golden":  # a small byte-level BPE tokenizer: its size is the true vocabulary
        import tokenizers as tk
        tok = tk.Tokenizer(tk.models.BPE())
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = tk.trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                         initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
        text = ["the quick brown fox jumps over the lazy dog %d times" % i for i in range(200)]
        tok.train_from_iterator(text, trainer)
        tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(
            os.path.join(out, "tokenizer"))


def logits(path, tokens_path, out):
    import transformers as tf
    model = tf.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model.eval()
    tokens = torch.load(tokens_path)
    with torch.no_grad():
        y = model(input_ids=tokens, use_cache=False).logits
    torch.save({"logits": y.float(), "class": type(model).__name__,
                "tied": bool(model.config.tie_word_embeddings)}, out)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        logits(sys.argv[2], sys.argv[3], sys.argv[4])
