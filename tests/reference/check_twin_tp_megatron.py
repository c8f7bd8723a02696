"""Optional check (not run by CTest): the twin's tensor-parallel layout (gpt_twin.tp_shard /
tp_unshard) against Megatron-LM core_v0.12.1 itself at --tensor-model-parallel-size 2, two gloo
processes on the CPU through the team's shim. Each rank loads tp_shard of the twin's random
weights into Megatron's GPTModel (local spec), runs forward/backward on the same batch, and
checks: its vocab-parallel logits equal the twin's logits[..., rank's vocab rows], the
per-token loss equals the twin's, and every gradient shard equals tp_shard of the twin's
gradient (1e-5 * max|want|). Also tp_unshard(tp_shard(x)) == x.

Usage: MEGATRON_ROOT=/work/ref/Megatron-LM /usr/bin/python3 tests/reference/check_twin_tp_megatron.py [config...]"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
DEFAULT = ['gpt2', 'llama', 'swiglu', 'gqa', 'untied', 'qkv_bias_only']


def rank_main(rank, names):
    os.environ.setdefault('MEGATRON_ROOT', '/work/ref/Megatron-LM')
    sys.path.insert(0, os.environ.get('MC_SHIM_DIR', '/work/shared/megatron-cpu'))
    import shim
    import torch
    torch.set_num_threads(1)
    from reference import gpt_twin as T
    from reference.check_twin_vs_megatron import megatron_model
    from parity.common import make_case
    shim.init_dist(world_size=2, rank=rank, port=int(os.environ.get('MC_TP_PORT', '29533')))
    shim.patch_rng_tracker()
    shim.emulate_cuda()
    shim.rmsnorm_compat()
    shim.gloo_compat()
    from megatron.core import parallel_state, tensor_parallel
    parallel_state.initialize_model_parallel(2, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    failed = []
    for name in names:
        case = make_case(name, seed=21)
        twin, b = case['twin'], case['batch']
        c = twin.c
        meg = megatron_model(c)
        sd = {k: T.tp_shard(k, v, c, 2, rank) for k, v in twin.state_dict().items()}
        msd = {k: v for k, v in meg.state_dict().items() if not k.endswith('_extra_state')}
        bad_shape = [k for k in msd if msd[k].shape != sd[k].shape]
        meg.load_state_dict(sd, strict=False)
        s = b['tokens'].shape[1]
        mask = b.get('attention_mask')
        if mask is None:
            mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None].expand(b['tokens'].shape[0], 1, s, s)
        pos = b.get('position_ids')
        if pos is None:
            pos = torch.arange(s).unsqueeze(0).expand_as(b['tokens'])
        loss = meg(b['tokens'], pos, mask, labels=b['labels'])
        (loss * b['dloss']).sum().backward()
        with torch.no_grad():
            logits = meg(b['tokens'], pos, mask)  # [b, s, V/2]
        tl, tloss = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'), b['labels'])
        (tloss * b['dloss']).sum().backward()
        V2 = c['padded_vocab_size'] // 2
        want_logits = tl.detach().transpose(0, 1)[..., rank * V2:(rank + 1) * V2]
        errs = [('logits', (logits - want_logits).abs().max() / want_logits.abs().max()),
                ('loss', (loss - tloss).abs().max() / tloss.abs().max())]
        mp = dict(meg.named_parameters())
        for k, p in twin.named_parameters():
            want = T.tp_shard(k, p.grad, c, 2, rank)
            g = mp[k].main_grad if getattr(mp[k], 'main_grad', None) is not None else mp[k].grad
            errs.append((k, (g - want).abs().max() / want.abs().max().clamp_min(1e-30)))
            full = p.detach()
            back = T.tp_unshard(k, [T.tp_shard(k, full, c, 2, r) for r in range(2)], c)
            if not torch.equal(back, full):
                errs.append((k + ' unshard', torch.tensor(1.0)))
        worst = max(errs, key=lambda e: float(e[1]))
        ok = float(worst[1]) <= 1e-5 and not bad_shape
        if rank == 0 or not ok:
            print('rank %d %-24s worst rel err %.2e (%s)%s' % (rank, name, float(worst[1]), worst[0],
                  (' shapes differ: %s' % bad_shape) if bad_shape else ''), flush=True)
        if not ok:
            failed.append(name)
    return 1 if failed else 0


def main():
    if len(sys.argv) > 2 and sys.argv[1] == '--rank':
        return rank_main(int(sys.argv[2]), sys.argv[3:])
    names = sys.argv[1:] or DEFAULT
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE), PYTHONWARNINGS='ignore')
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), '--rank', str(r)] + names, env=env)
             for r in range(2)]
    rcs = [p.wait(timeout=600) for p in procs]
    print('check_twin_tp_megatron: %d configs at tp=2, %s' % (len(names), 'ok' if not any(rcs) else 'FAILED'))
    return 1 if any(rcs) else 0


if __name__ == '__main__':
    sys.exit(main())
