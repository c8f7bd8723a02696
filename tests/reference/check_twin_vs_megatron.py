"""Optional check (not run by CTest): the PyTorch twin (gpt_twin.py) against Megatron-LM
core_v0.12.1's own GPTModel with the local layer spec, run on the CPU through the team's shim
(/work/shared/megatron-cpu/shim.py). Same random weights (twin state dict loaded into Megatron's
model), same batch: compares logits, per-token loss and every parameter gradient.

Usage: MEGATRON_ROOT=/work/ref/Megatron-LM /usr/bin/python3 tests/reference/check_twin_vs_megatron.py
Exits non-zero when any config differs by more than 1e-5 * max|want| (fp32, same op order up to
GEMM blocking)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('MEGATRON_ROOT', '/work/ref/Megatron-LM')
sys.path.insert(0, os.environ.get('MC_SHIM_DIR', '/work/shared/megatron-cpu'))
import shim  # noqa: E402  (patches torch before Megatron is imported)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from reference import gpt_twin as T  # noqa: E402
from parity.configs import CONFIGS  # noqa: E402


def megatron_model(c):
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    act = {T.ACT_GELU_TANH: F.gelu, T.ACT_GELU_ERF: F.gelu, T.ACT_SWIGLU: F.silu,
           T.ACT_SQUARED_RELU: lambda x: torch.pow(F.relu(x), 2)}[c['activation']]
    norm = 'RMSNorm' if c['normalization'] == T.NORM_RMSNORM else 'LayerNorm'
    cfg = TransformerConfig(
        num_layers=c['num_layers'], hidden_size=c['hidden_size'],
        num_attention_heads=c['num_attention_heads'], num_query_groups=c['num_query_groups'],
        kv_channels=c['kv_channels'], ffn_hidden_size=c['ffn_hidden_size'],
        normalization=norm, layernorm_epsilon=c['norm_epsilon'],
        gated_linear_unit=c['activation'] == T.ACT_SWIGLU, activation_func=act,
        bias_activation_fusion=c['activation'] in (T.ACT_GELU_TANH, T.ACT_SWIGLU),
        add_bias_linear=bool(c['add_bias_linear']), add_qkv_bias=bool(c['add_qkv_bias']),
        apply_query_key_layer_scaling=bool(c['apply_query_key_layer_scaling']),
        attention_softmax_in_fp32=bool(c['attention_softmax_in_fp32']),
        hidden_dropout=0.0, attention_dropout=0.0, masked_softmax_fusion=False,
        persist_layer_norm=False, gradient_accumulation_fusion=False, apply_rope_fusion=False,
        bias_dropout_fusion=False, rotary_interleaved=bool(c['rotary_interleaved']),
        use_cpu_initialization=True, init_method_std=0.02)
    pos = {T.POS_LEARNED: 'learned_absolute', T.POS_ROPE: 'rope', T.POS_NONE: 'none'}[c['position_embedding_type']]
    spec = get_gpt_layer_local_spec(normalization=norm)
    return GPTModel(cfg, spec, vocab_size=c['padded_vocab_size'],
                    max_sequence_length=c['max_position_embeddings'],
                    share_embeddings_and_output_weights=not c['untie_embeddings_and_output_weights'],
                    position_embedding_type=pos, rotary_percent=c['rotary_percent'],
                    rotary_base=int(c['rotary_base']), rope_scaling=bool(c['use_rope_scaling']),
                    rope_scaling_factor=c['rope_scaling_factor'])


def main():
    shim.init_dist()
    shim.patch_rng_tracker()
    shim.emulate_cuda()
    shim.rmsnorm_compat()
    from megatron.core import parallel_state, tensor_parallel
    parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    from parity.common import make_case
    worst_all, failed = 0.0, []
    names = sys.argv[1:] or list(CONFIGS)
    for name in names:
        case = make_case(name, seed=7)
        twin = case['twin']
        c = twin.c
        meg = megatron_model(c)
        sd = {k: v for k, v in meg.state_dict().items() if not k.endswith('_extra_state')}
        tsd = twin.state_dict()
        if list(sd) != list(tsd) or any(sd[k].shape != tsd[k].shape for k in sd):
            print('%s: state dict differs\n megatron %s\n twin     %s' % (
                name, [(k, tuple(v.shape)) for k, v in sd.items()], [(k, tuple(v.shape)) for k, v in tsd.items()]))
            failed.append(name)
            continue
        meg.load_state_dict(tsd, strict=False)
        b = case['batch']
        mask = b.get('attention_mask')
        if mask is None:
            s = b['tokens'].shape[1]
            mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None].expand(b['tokens'].shape[0], 1, s, s)
        pos = b.get('position_ids')
        if pos is None:
            pos = torch.arange(b['tokens'].shape[1]).unsqueeze(0).expand_as(b['tokens'])
        loss = meg(b['tokens'], pos, mask, labels=b['labels'])
        (loss * b['dloss']).sum().backward()
        logits = meg(b['tokens'], pos, mask)  # [b, s, V]
        tl, tloss = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'), b['labels'])
        (tloss * b['dloss']).sum().backward()
        errs = [('logits', (logits.transpose(0, 1) - tl).abs().max() / tl.abs().max()),
                ('loss', (loss - tloss).abs().max() / tloss.abs().max())]
        mp = dict(meg.named_parameters())
        for k, p in twin.named_parameters():
            g = mp[k].grad
            errs.append((k, (g - p.grad).abs().max() / p.grad.abs().max().clamp_min(1e-30)))
        worst = max(errs, key=lambda e: float(e[1]))
        print('%-28s worst rel err %.2e (%s)' % (name, float(worst[1]), worst[0]))
        worst_all = max(worst_all, float(worst[1]))
        if float(worst[1]) > 1e-5:
            failed.append(name)
    print('check_twin_vs_megatron: %d configs, %d failed (worst %.2e)%s' % (
        len(names), len(failed), worst_all, (': ' + ' '.join(failed)) if failed else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
