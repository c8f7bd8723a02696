"""Optional check (not run by CTest): the PyTorch twin (gpt_twin.py) against Megatron-LM
core_v0.12.1's own GPTModel with the local layer spec, run on the CPU through the team's shim
(/work/shared/megatron-cpu/shim.py). Same random weights (twin state dict loaded into Megatron's
model), same batch: compares logits, per-token loss and every parameter gradient; then (with no
config names given) 20 training steps of the twin's clip + AdamW against Megatron's own
DistributedDataParallel + finalize_model_grads + get_megatron_optimizer on gpt2, llama and
qkv_bias_only (loss curve within 1e-5, grad norm within 5e-4).

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

torch.set_num_threads(1)  # tiny tensors: threads only add synchronisation

from reference import gpt_twin as T  # noqa: E402
from parity.configs import CONFIGS  # noqa: E402


class _TorchLayerNormAffine(torch.autograd.Function):
    """Stands in for apex's FusedLayerNormAffineFunction (not on this CPU): torch's layer_norm."""

    @staticmethod
    def forward(ctx, x, weight, bias, shape, eps):
        with torch.enable_grad():
            xd, wd, bd = (t.detach().requires_grad_() for t in (x, weight, bias))
            y = F.layer_norm(xd, tuple(shape) if hasattr(shape, "__len__") else (shape,), wd, bd, eps)
        ctx.save_for_backward(xd, wd, bd, y)
        return y.detach()

    @staticmethod
    def backward(ctx, g):
        xd, wd, bd, y = ctx.saved_tensors
        gx, gw, gb = torch.autograd.grad(y, (xd, wd, bd), g)
        return gx, gw, gb, None, None


def use_fused_layer_norm():
    """--apply-layernorm-1p needs Megatron's FusedLayerNorm (apex) or TENorm: its torch fallback,
    WrappedTorchNorm, asserts on zero_centered_gamma. Megatron's FusedLayerNorm (its weight + 1
    and zero init) is used with torch's layer_norm in place of apex's kernel."""
    from megatron.core.fusions import fused_layer_norm as fln
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer import transformer_block
    saved = (gpt_layer_specs.LNImpl, transformer_block.LayerNormImpl)
    # FusedLayerNorm looks its kernel up at each forward: this part stays (only FusedLayerNorm
    # instances, i.e. the zero-centered configs, use it)
    fln.HAVE_FUSED_LAYER_NORM = True
    fln.FusedLayerNormAffineFunction = _TorchLayerNormAffine
    gpt_layer_specs.LNImpl = fln.FusedLayerNorm
    transformer_block.LayerNormImpl = fln.FusedLayerNorm

    def restore():  # the model is built: the other configs keep Megatron's CPU choice
        gpt_layer_specs.LNImpl, transformer_block.LayerNormImpl = saved
    return restore


def megatron_model(c, dtype=None):
    """Megatron's GPTModel for twin config c; dtype torch.bfloat16 / torch.float16 builds it as
    --bf16 / --fp16 do (params_dtype, weights created in it)."""
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
        use_cpu_initialization=True, init_method_std=0.02,
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
        params_dtype=dtype if dtype is not None else torch.float32)
    pos = {T.POS_LEARNED: 'learned_absolute', T.POS_ROPE: 'rope', T.POS_NONE: 'none'}[c['position_embedding_type']]
    restore = lambda: None
    if c['layernorm_zero_centered_gamma']:
        cfg.layernorm_zero_centered_gamma = True
        restore = use_fused_layer_norm()
    spec = get_gpt_layer_local_spec(normalization=norm)
    if c['rope_low_freq_factor'] or c['rope_high_freq_factor'] or c['rope_original_max_position']:
        # MindSpeed-LLM's llama3 constants: Megatron's own _apply_scaling, given them
        from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
        orig_scaling = RotaryEmbedding._apply_scaling

        def scaling(self, freqs, factor=8):
            return orig_scaling(self, freqs, factor=factor,
                                low_freq_factor=c['rope_low_freq_factor'] or 1,
                                high_freq_factor=c['rope_high_freq_factor'] or 4,
                                original_max_position_embeddings=c['rope_original_max_position'] or 8192)
        RotaryEmbedding._apply_scaling = scaling
        outer_restore = restore

        def restore():
            RotaryEmbedding._apply_scaling = orig_scaling
            outer_restore()
    try:
        return GPTModel(cfg, spec, vocab_size=c['padded_vocab_size'],
                        max_sequence_length=c['max_position_embeddings'],
                        share_embeddings_and_output_weights=not c['untie_embeddings_and_output_weights'],
                        position_embedding_type=pos, rotary_percent=c['rotary_percent'],
                        rotary_base=int(c['rotary_base']), rope_scaling=bool(c['use_rope_scaling']),
                        rope_scaling_factor=c['rope_scaling_factor'])
    finally:
        restore()


def megatron_train(meg, case, steps, lr, wd, hp):
    """Megatron's own train_step pieces at one micro-batch: DDP-wrapped model (grads in its
    buffer), finalize_model_grads, get_megatron_optimizer (Adam, clip_grad) whose step() clips and
    updates; lr and weight decay set per group as OptimizerParamScheduler does."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    ddp = DistributedDataParallel(meg.config, DistributedDataParallelConfig(
        grad_reduce_in_fp32=False, overlap_grad_reduce=False, use_distributed_optimizer=False), meg)
    oc = OptimizerConfig(optimizer='adam', lr=lr[0], weight_decay=wd[0], adam_beta1=hp['beta1'],
                         adam_beta2=hp['beta2'], adam_eps=hp['eps'], clip_grad=hp['clip_grad'],
                         bf16=False, fp16=False, params_dtype=torch.float32)
    opt = get_megatron_optimizer(oc, [ddp])
    b = case['batch']
    tokens, labels, dloss = b['tokens'], b['labels'], b['dloss']
    s = tokens.shape[1]
    mask = b.get('attention_mask')
    if mask is None:
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None].expand(tokens.shape[0], 1, s, s)
    pos = b.get('position_ids')
    if pos is None:
        pos = torch.arange(s).unsqueeze(0).expand_as(tokens)
    curve, norms = [], []
    for it in range(steps):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        loss = ddp(tokens, pos, mask, labels=labels)
        total = (loss * dloss).sum()
        total.backward()
        finalize_model_grads([ddp])
        for g in opt.param_groups:
            g['lr'] = lr[it]
            g['weight_decay'] = wd[it] * g.get('wd_mult', 1.0)
        ok, norm, _ = opt.step()
        curve.append(float(total))
        norms.append(float(norm))
    return curve, norms


def check_training(names):
    """Twin's clip + AdamW (parity/common.twin_train) against Megatron's optimizer, 20 steps."""
    from parity import common
    from parity.test_adam_parity import schedule
    bad = []
    for name in names:
        case = make_case_for(name)
        c = case['twin'].c
        meg = megatron_model(c)
        meg.load_state_dict(case['twin'].state_dict(), strict=False)
        lr, wd = schedule()
        lr, wd = [T.f32(v) for v in lr], [T.f32(v) for v in wd]
        hp = {k: T.f32(v) for k, v in common.ADAM.items()}
        mc, mn = megatron_train(meg, case, len(lr), lr, wd, hp)
        tc, tn = common.twin_train(case, len(lr), lr, wd)[:2]
        lrel = max(abs(a - b) / abs(b) for a, b in zip(tc, mc))
        nrel = max(abs(a - b) / abs(b) for a, b in zip(tn, mn))
        print('%-28s adam: loss curve rel err %.2e, grad norm rel err %.2e (megatron %s)' % (
            name, lrel, nrel, ' '.join('%.5f' % v for v in mc[::4])))
        if lrel > 1e-5 or nrel > 5e-4:
            bad.append(name + '/adam')
    return bad


def make_case_for(name):
    from parity.common import make_case
    return make_case(name, seed=11)


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
        if c['layernorm_zero_centered_gamma'] and c['normalization'] == T.NORM_RMSNORM:
            print('%-28s skipped: zero-centered RMSNorm is TENorm only (no local-spec norm)' % name)
            continue
        if c.get('sliding_window'):
            print('%-28s skipped: --sliding-window is MindSpeed-LLM\'s (Megatron core_v0.12.1 has no '
                  'local-spec window; tests/backend/test_sliding_window.py checks it against PyTorch)' % name)
            continue
        if c.get('alibi'):
            print('%-28s skipped: ALiBi is MindSpeed-LLM\'s (Megatron core_v0.12.1 has none; '
                  'tests/backend/test_alibi.py checks it against PyTorch)' % name)
            continue
        meg = megatron_model(c)
        if c['layernorm_zero_centered_gamma']:  # FusedLayerNorm.reset_parameters: zeros
            z = [k for k, v in meg.state_dict().items() if 'layernorm.weight' in k and v.abs().max() == 0]
            print('%-28s megatron init: %d of 5 norm weights zero' % (name, len(z)))
            if len(z) != 5:
                failed.append(name + '/init')
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
    if not sys.argv[1:]:
        failed += check_training(['gpt2', 'llama', 'qkv_bias_only'])
    print('check_twin_vs_megatron: %d configs, %d failed (worst %.2e)%s' % (
        len(names), len(failed), worst_all, (': ' + ' '.join(failed)) if failed else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
