"""Configurations of the parity tests: a GPT-2-style base, a Llama-style base, and one variant per
Megatron feature flag the C engine reproduces. Tiny sizes (h 32..48, 2 layers, s 16, b 2,
vocab 100) keep the whole suite fast. Fields and enum codes are struct mc_gpt_config's
(include/megatron/gpt.h), see reference/gpt_twin.py."""
from reference.gpt_twin import (ACT_GELU_ERF, ACT_GELU_TANH, ACT_SQUARED_RELU, ACT_SWIGLU,
                                NORM_LAYERNORM, NORM_RMSNORM, POS_LEARNED, POS_NONE, POS_ROPE)

# Megatron defaults for a GPT-2 model: learned absolute positions, LayerNorm, fused bias-GELU
# (tanh), linear biases, tied embeddings; vocab 100 padded to 128.
GPT2 = dict(num_layers=2, hidden_size=32, num_attention_heads=4, vocab_size=100,
            make_vocab_size_divisible_by=128, max_position_embeddings=32, seq_length=16,
            micro_batch_size=2, normalization=NORM_LAYERNORM, position_embedding_type=POS_LEARNED,
            activation=ACT_GELU_TANH, add_bias_linear=1, untie_embeddings_and_output_weights=0,
            hidden_dropout=0.0, attention_dropout=0.0)

# Llama: GQA + SwiGLU + RoPE + RMSNorm + untied, no linear biases.
LLAMA = dict(num_layers=2, hidden_size=48, num_attention_heads=6, num_query_groups=2,
             ffn_hidden_size=64, vocab_size=100, make_vocab_size_divisible_by=4,
             max_position_embeddings=16, seq_length=16, micro_batch_size=2,
             normalization=NORM_RMSNORM, norm_epsilon=1e-6, position_embedding_type=POS_ROPE,
             rotary_base=500000.0, activation=ACT_SWIGLU, add_bias_linear=0,
             untie_embeddings_and_output_weights=1, hidden_dropout=0.0, attention_dropout=0.0)


def variant(base, **kw):
    c = dict(base)
    c.update(kw)
    return c


# name -> (config, batch options). Batch options: 'mask' = explicit random attention mask
# (with a fully masked row), 'pos' = random position ids, 'b'/'s' = a micro-batch smaller than
# the configured maximum (micro_batch_size x seq_length).
CONFIGS = {
    'gpt2': (GPT2, {}),
    'llama': (LLAMA, {}),
    'pos_rope': (variant(GPT2, position_embedding_type=POS_ROPE), {}),
    'pos_none': (variant(GPT2, position_embedding_type=POS_NONE), {}),
    'rope_percent': (variant(GPT2, position_embedding_type=POS_ROPE, rotary_percent=0.5), {}),
    'rope_interleaved': (variant(GPT2, position_embedding_type=POS_ROPE, rotary_interleaved=1), {}),
    # base 1e6 with kv_channels 8 puts the four frequencies in all three Llama-3 bands
    'rope_scaling': (variant(GPT2, position_embedding_type=POS_ROPE, use_rope_scaling=1,
                             rope_scaling_factor=8.0, rotary_base=1000000.0), {}),
    # MindSpeed-LLM's --rope-scaling-type llama3 with its own constants (all three bands)
    'rope_scaling_mindspeed': (variant(GPT2, position_embedding_type=POS_ROPE, use_rope_scaling=1,
                                       rope_scaling_factor=32.0, rotary_base=1000000.0,
                                       rope_low_freq_factor=2.0, rope_high_freq_factor=8.0,
                                       rope_original_max_position=16384.0), {}),
    'rmsnorm': (variant(GPT2, normalization=NORM_RMSNORM, norm_epsilon=1e-3), {}),
    # MindSpeed-LLM's --sliding-window (Mistral): keys i - 5 .. i of 16 (and with documents)
    'sliding_window': (variant(LLAMA, sliding_window=5), {}),
    'sliding_window_docs': (variant(LLAMA, sliding_window=5), {'mask': True}),
    # MindSpeed-LLM's ALiBi: square form with -inf fill (Baichuan2's), row form, documents,
    # flash attention, layer scaling; 6 and 5 heads are not powers of two
    'alibi_square': (variant(LLAMA, position_embedding_type=POS_NONE, alibi=2,
                             alibi_fill_neg_inf=1), {}),
    'alibi_row': (variant(GPT2, position_embedding_type=POS_NONE, alibi=1, hidden_size=40,
                          num_attention_heads=5), {}),
    'alibi_docs': (variant(LLAMA, position_embedding_type=POS_NONE, alibi=2), {'mask': True}),
    'alibi_flash': (variant(LLAMA, position_embedding_type=POS_NONE, alibi=2, alibi_fill_neg_inf=1,
                            flash_attention=1), {}),
    'alibi_row_flash': (variant(GPT2, position_embedding_type=POS_NONE, alibi=1,
                                alibi_fill_neg_inf=1, flash_attention=1), {}),
    'alibi_layer_scaling': (variant(GPT2, num_layers=3, position_embedding_type=POS_NONE, alibi=2,
                                    apply_query_key_layer_scaling=1), {}),
    'layernorm_eps': (variant(GPT2, norm_epsilon=1e-2), {}),
    # --apply-layernorm-1p: zero-centered norm weights (LayerNorm, and TENorm's RMSNorm)
    'layernorm_1p': (variant(GPT2, layernorm_zero_centered_gamma=1), {}),
    'rmsnorm_1p': (variant(LLAMA, layernorm_zero_centered_gamma=1), {}),
    'gelu_erf': (variant(GPT2, activation=ACT_GELU_ERF), {}),
    'swiglu': (variant(GPT2, activation=ACT_SWIGLU, ffn_hidden_size=40), {}),
    'squared_relu': (variant(GPT2, activation=ACT_SQUARED_RELU), {}),
    'gqa': (variant(GPT2, num_query_groups=2), {}),
    'mqa': (variant(GPT2, num_query_groups=1), {}),
    'kv_channels': (variant(GPT2, kv_channels=12), {}),
    'qk_layer_scaling': (variant(GPT2, num_layers=3, apply_query_key_layer_scaling=1), {}),
    'softmax_fp32': (variant(GPT2, attention_softmax_in_fp32=1), {}),
    'no_bias': (variant(GPT2, add_bias_linear=0, activation=ACT_GELU_ERF), {}),
    'qkv_bias_only': (variant(GPT2, add_bias_linear=0, add_qkv_bias=1, activation=ACT_GELU_ERF), {}),
    'untied': (variant(GPT2, untie_embeddings_and_output_weights=1), {}),
    'vocab_unpadded': (variant(GPT2, make_vocab_size_divisible_by=4), {}),
    'vocab_padded_odd': (variant(GPT2, vocab_size=77, make_vocab_size_divisible_by=64), {}),
    'attention_mask': (GPT2, {'mask': True}),
    'position_ids': (GPT2, {'pos': True}),
    # sizes that are not multiples of any SIMD width or GEMM block: kernel tails
    'odd_sizes_gpt2': (variant(GPT2, hidden_size=40, num_attention_heads=5, ffn_hidden_size=100,
                               vocab_size=301, make_vocab_size_divisible_by=16, seq_length=23,
                               micro_batch_size=3, max_position_embeddings=29), {}),
    'odd_sizes_llama': (variant(LLAMA, hidden_size=36, num_attention_heads=6, num_query_groups=3,
                                ffn_hidden_size=52, vocab_size=211, make_vocab_size_divisible_by=1,
                                seq_length=19, micro_batch_size=3, max_position_embeddings=19), {}),
    'smaller_batch_gpt2': (GPT2, {'b': 1, 's': 11}),
    'smaller_batch_llama': (LLAMA, {'b': 1, 's': 9}),
    'rope_ignores_position_ids': (variant(GPT2, position_embedding_type=POS_ROPE), {'pos': True, 'mask': True}),
}

# 16-bit only configurations (tests/parity/test_mixed_parity.py): --fp32-residual-connection,
# which Megatron refuses in fp32 (REFUSED below). The GPT-2 one with hidden dropout (the fp32
# dropout of the residual adds and the embedding).
CONFIGS16 = {
    'gpt2_fp32res': (variant(GPT2, fp32_residual_connection=1, hidden_dropout=0.1), {}),
    'llama_fp32res': (variant(LLAMA, fp32_residual_connection=1), {}),
}

# Configurations Megatron refuses (TransformerConfig.__post_init__ / validate_args): the C model
# must refuse them too, with MC_ERR_CONFIG and a message naming the option. name -> (config,
# text the message must contain).
REFUSED = {
    # arguments.py: 'residual connection in fp32 only supported when using fp16 or bf16'
    'fp32_residual_in_fp32': (variant(GPT2, fp32_residual_connection=1), 'fp32-residual-connection'),
    # TransformerConfig: fused bias-GELU needs add_bias_linear (pretrain_gpt's arguments.py
    # instead turns the fusion off, i.e. exact erf GELU, when --disable-bias-linear is given)
    'tanh_gelu_without_bias': (variant(GPT2, add_bias_linear=0, activation=ACT_GELU_TANH), 'bias'),
    'groups_not_dividing_heads': (variant(GPT2, num_query_groups=3), 'num-query-groups'),
}
