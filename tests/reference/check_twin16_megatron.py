"""Optional check (run by parity/test_twin16_megatron.py where Megatron and the shim exist): the
twin's 16-bit modes (gpt_twin.Precision) against Megatron-LM core_v0.12.1's own GPTModel built
as --bf16 / --fp16 do (params_dtype 16-bit, wrapped in Float16Module), run on the CPU through the
team's shim. Same rounded weights, same batch (fp16: dloss times the loss scale 1024, Megatron's
scaled loss): logits, per-token loss and every parameter grad (float(param.grad)); then 5
steps of Megatron's own DistributedDataParallel (fp32 main grads) + get_megatron_optimizer
(Float16OptimizerWithFloat16Params; fp16 with the constant loss scale) against the twin's
mixed16.train16 on gpt2 and llama: loss curve, grad norm, final 16-bit params.

Three twins against one Megatron run:
  eager    the twin's modules on real 16-bit torch tensors with Megatron's CPU op sequence (jit
           off: bias-GELU, bias-SwiGLU and bias-dropout-add op by op) -- must agree to within
           GEMM-order flips: this proves the twin's rounding points are Megatron's;
  native   the same with the GPU fusions' rounding points (design16 section 3, what the C
           engine does): reported (the cost of the fused-kernel approximation);
  explicit fp32 ops rounded at those points (the twin the engine parity tests use): reported.

fp16 needs torch >= 2 (CPU Half GEMM); under torch 1.13 only bf16 runs. The eager twin calls the
same torch kernels as Megatron, so it agrees under either torch (measured: bit for bit, logits,
loss and every grad, bf16 on torch 1.13 and 2.x, fp16 on torch 2.x; the fused twins differ by
typical ~2e-3 / worst ~3e-2 of max|want| in bf16, ~3e-4 / ~3e-3 in fp16, which the eager bound
would catch). Training, eager twin: loss curves bit for bit, grad norms within 4e-7 (fp32
norm order), final params bit for bit (bf16) / within 2e-5 (fp16); explicit twin: loss 1e-4 to
3e-3, grad norm 2e-4 to 1.5e-2 (Adam turns sign flips of tiny grads into lr-sized steps, so the
final params differ by up to ~5e-2 of max|param| in a few elements). The native / explicit (fused) twins
differ more under torch 1.13, whose CPU bf16 bmm accumulates in bf16 (every product and partial
sum rounded) and whose bf16 layer_norm / GELU kernels round inside: torch 2's CPU kernels, like a
GPU's, accumulate in fp32 and round once.

Usage: MEGATRON_ROOT=/work/ref/Megatron-LM PYTHON tests/reference/check_twin16_megatron.py
       [--dtype bf16|fp16] [config names]    (default: bf16 and fp16 on gpt2 llama swiglu
       qkv_bias_only untied softmax_fp32)
Exits non-zero when the eager twin differs by more than EAGER_BOUND (worst |diff| / max|want|
per tensor) or a result is not finite."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('MEGATRON_ROOT', '/work/ref/Megatron-LM')
sys.path.insert(0, os.environ.get('MC_SHIM_DIR', '/work/shared/megatron-cpu'))
import shim  # noqa: E402  (patches torch before Megatron is imported)
import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from reference import gpt_twin as T  # noqa: E402
from reference.check_twin_vs_megatron import megatron_model  # noqa: E402
from parity import mixed16  # noqa: E402

NAMES = ['gpt2', 'llama', 'swiglu', 'qkv_bias_only', 'untied', 'softmax_fp32']
# eager twin vs Megatron: both round at the same points; what is left is GEMM / reduction
# order flipping a 16-bit rounding, carried through the later layers
EAGER_BOUND = {'bf16': 5e-3, 'fp16': 1e-3}
TORCH2 = int(torch.__version__.split('.')[0]) >= 2


def megatron_run(case, dt):
    """Float16Module(GPTModel) forward/backward of sum(loss * dloss), then the eval logits."""
    from megatron.core.transformer.module import Float16Module
    twin, b = case['twin'], case['batch']
    meg = megatron_model(twin.c, dt)
    meg.load_state_dict({k: v.to(dt) for k, v in twin.state_dict().items()}, strict=False)
    model = Float16Module(meg.config, meg)
    tokens = b['tokens']
    s = tokens.shape[1]
    mask = b.get('attention_mask')
    if mask is None:
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None].expand(tokens.shape[0], 1, s, s)
    pos = b.get('position_ids')
    if pos is None:
        pos = torch.arange(s).unsqueeze(0).expand_as(tokens)
    loss = model(tokens, pos, mask, labels=b['labels'])
    (loss * b['dloss']).sum().backward()
    with torch.no_grad():
        logits = model(tokens, pos, mask).transpose(0, 1)  # [s, b, V], fp32
    grads = {n: p.grad.float() for n, p in meg.named_parameters()}
    return logits.float(), loss.detach().float(), grads


def megatron_train16(case, dt, steps, lr, wd):
    """Megatron's mixed-precision train step at one micro-batch: Float16Module(GPTModel) in DDP
    with fp32 main grads, finalize_model_grads, get_megatron_optimizer with bf16 / fp16 (a
    constant loss scale: the case's dloss already carries it) whose step unscales, clips, updates
    the fp32 main params and copies them back rounded."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module
    from parity import common
    twin, b = case['twin'], case['batch']
    meg = megatron_model(twin.c, dt)
    meg.load_state_dict({k: v.to(dt) for k, v in twin.state_dict().items()}, strict=False)
    model = Float16Module(meg.config, meg)
    ddp = DistributedDataParallel(meg.config, DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=False), model)
    hp = {k: T.f32(v) for k, v in common.ADAM.items()}
    fp16 = dt == torch.float16
    oc = OptimizerConfig(optimizer='adam', lr=lr[0], weight_decay=wd[0], adam_beta1=hp['beta1'],
                         adam_beta2=hp['beta2'], adam_eps=hp['eps'], clip_grad=hp['clip_grad'],
                         bf16=not fp16, fp16=fp16, params_dtype=dt,
                         loss_scale=case['loss_scale'] if fp16 else None)
    opt = get_megatron_optimizer(oc, [ddp])
    tokens, s = b['tokens'], b['tokens'].shape[1]
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None].expand(tokens.shape[0], 1, s, s)
    pos = torch.arange(s).unsqueeze(0).expand_as(tokens)
    curve, norms = [], []
    for it in range(steps):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        loss = ddp(tokens, pos, mask, labels=b['labels'])
        total = (loss * b['dloss']).sum()
        total.backward()
        finalize_model_grads([ddp])
        for g in opt.param_groups:
            g['lr'] = lr[it]
            g['weight_decay'] = wd[it] * g.get('wd_mult', 1.0)
        ok, norm, _ = opt.step()
        if not ok:
            raise RuntimeError('Megatron skipped step %d (inf/nan grads)' % it)
        curve.append(float(total) / case['loss_scale'])
        norms.append(float(norm))
    params = {n: p.detach().float() for n, p in meg.named_parameters()}
    mains = opt.state_dict()['fp32_from_fp16_params']
    return curve, norms, params, mains


def check_training(dtypes, names, steps=5):
    """The twin's mixed16.train16 (eager and explicit) against Megatron's optimizer: loss curve,
    grad norm, final 16-bit model params."""
    from parity.test_adam_parity import schedule
    failed = []
    for dtype in dtypes:
        dt = T.DTYPES[dtype]
        for i, name in enumerate(names):
            case = mixed16.make_case16(name, 31 + i, dtype)
            lr, wd = schedule()
            lr, wd = [T.f32(v) for v in lr[:steps]], [T.f32(v) for v in wd[:steps]]
            mc, mn, mp, _ = megatron_train16(case, dt, steps, lr, wd)
            line = '%s %-14s train %d steps:' % (dtype, name, steps)
            for mode in ('eager', 'explicit'):
                prec = T.Precision(dtype, native=mode == 'eager', fused=mode != 'eager')
                tc, tn, tp = mixed16.train16(mixed16.with_precision(case, prec), steps, lr, wd)
                lerr = max(abs(a - b) / abs(b) for a, b in zip(tc, mc))
                nerr = max(abs(a - b) / abs(b) for a, b in zip(tn, mn))
                perr = max(float((tp[n].to(dt).float() - mp[n]).abs().max() / mp[n].abs().max()) for n in mp)
                line += '  %s loss %.1e norm %.1e params %.1e' % (mode, lerr, nerr, perr)
                if mode == 'eager' and not max(lerr, nerr, perr) <= EAGER_BOUND[dtype]:
                    failed.append('%s/%s/train' % (dtype, name))
            print(line)
    return failed


def compare(label, got, want, stats):
    worst = 0.0
    pairs = [('logits', got[0], want[0]), ('loss', got[1], want[1])]
    pairs += [(n, got[2][n], want[2][n]) for n in want[2]]
    for n, g, w in pairs:
        g, w = g.detach().numpy(), w.detach().numpy()
        if not np.all(np.isfinite(g)):
            return float('inf')
        worst = max(worst, stats.add(mixed16.kind_of(n), g, w))
    return worst


def main():
    args = sys.argv[1:]
    dtypes = ['bf16', 'fp16'] if TORCH2 else ['bf16']
    if '--dtype' in args:
        i = args.index('--dtype')
        dtypes = [args[i + 1]]
        del args[i:i + 2]
    names = args or NAMES
    shim.init_dist()
    shim.patch_rng_tracker()
    shim.emulate_cuda()
    shim.rmsnorm_compat()
    from megatron.core import parallel_state, tensor_parallel
    parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    failed = []
    for dtype in dtypes:
        dt = T.DTYPES[dtype]
        stats = {k: mixed16.Stats() for k in ('eager', 'native', 'explicit')}
        for i, name in enumerate(names):
            case = mixed16.make_case16(name, 7 + i, dtype)
            want = megatron_run(case, dt)
            line = '%s %-14s' % (dtype, name)
            for mode in ('eager', 'native', 'explicit'):
                prec = T.Precision(dtype, native=mode != 'explicit', fused=mode != 'eager')
                got = mixed16.forward_backward16(mixed16.with_precision(case, prec))
                worst = compare(mode, got, want, stats[mode])
                line += '  %s worst %.1e' % (mode, worst)
                if mode == 'eager' and not worst <= EAGER_BOUND[dtype]:
                    failed.append('%s/%s' % (dtype, name))
            print(line)
        for mode in ('eager', 'native', 'explicit'):
            for line in stats[mode].lines('%s megatron vs %-8s' % (dtype, mode)):
                print(line)
    failed += check_training(dtypes, ['gpt2', 'llama'])
    print('check_twin16_megatron: torch %s, %s x %d configs, %d failed%s' % (
        torch.__version__, '/'.join(dtypes), len(names), len(failed),
        (': ' + ' '.join(failed)) if failed else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
