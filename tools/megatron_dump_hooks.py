#!/usr/bin/env python3
"""Tensor dumps of Megatron-LM core_v0.12.1's own training run, in megatron.c's dump format and
with the names `pretrain_gpt --dump-dir` writes (docs/alignment.md, docs/formats/dump.md), so
that tools/compare_dumps.c lines the two runs up name by name.

Run it in place of pretrain_gpt.py, on every rank, with Megatron's own arguments after `--`:

    torchrun ... tools/megatron_dump_hooks.py --dump-dir DIR [--dump-iters 1,3] \\
        [--dump-ranks 0-3] [--dump-points batch,forward,...] \\
        [--megatron-root PATH/TO/Megatron-LM] -- <pretrain_gpt.py arguments>

or import it and call install(dump_dir, iters, ranks, points) before pretrain() runs. It adds
wrappers and hooks only (no numerics change): forward wrappers and tensor grad hooks on the
embedding, every TransformerLayer, the final layernorm and the output layer; a wrapper around
train_step (parameters before, clipped grads, optimizer state and parameters after the step,
the loss), around the config's finalize_model_grads_func (main grads before and after the
data-parallel reduction) and around get_batch_on_this_tp_rank (the batch). Layers are numbered
globally (layer_number - 1), as megatron.c does. With tensor parallelism every tensor is
written whole, as a tp 1 run holds it (as megatron.c writes them): at the end of the step the
shards are all-gathered over the tensor-parallel group (parameters, grads and optimizer state
along their partition_dim, a gated fc1's gate and up halves each; activations along the
sequence with sequence parallelism; logits along the vocabulary), and a sequence-parallel
parameter's grad before finalize_model_grads (this rank's sequence shard's part) is summed over
the group. Every rank of the group records (the gathers are collective); --dump-ranks chooses
which write. With the distributed optimizer the reduced grads (after finalize_model_grads each
rank's grad buffer holds its reduce-scattered shard), the clipped grads and the optimizer state
(the shard optimizer's, keyed by the fp32 shard params) are put together over the data-parallel
group with the optimizer's range maps, so they are the whole tensors a non-distributed run holds;
every data-parallel rank records then.
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mcdump  # noqa: E402

POINTS = ('batch', 'forward', 'backward', 'params', 'grads', 'optimizer', 'loss')

_S = {'dir': None, 'iters': None, 'ranks': None, 'points': set(POINTS), 'rec': None,
      'hooked': set(), 'iteration': 0, 'how': {}}


def parse_ranges(opt, s):
    """'1,3,5-7' -> list of (lo, hi); SystemExit naming the option otherwise."""
    out = []
    try:
        for part in s.split(','):
            lo, _, hi = part.partition('-')
            lo, hi = int(lo), int(hi) if hi else int(lo)
            if lo < 0 or hi < lo:
                raise ValueError
            out.append((lo, hi))
    except ValueError:
        raise SystemExit("%s '%s': expected numbers and ranges such as 1,3 or 1-2" % (opt, s))
    return out


def _in(ranges, v):
    return ranges is None or any(lo <= v <= hi for lo, hi in ranges)


def record(point, name, tensor, how=None):
    """Adds a copy under name (name@k for its k-th repeat) when recording `point`. how: how
    the tensor-parallel shards make the whole tensor (see _whole), None for a replicated one."""
    rec = _S['rec']
    if rec is None or point not in _S['points'] or tensor is None:
        return
    key, k = name, 1
    while key in rec:
        key = '%s@%d' % (name, k)
        k += 1
    rec[key] = tensor.detach().clone().cpu()
    if how is not None:
        _S['how'][key] = how


def _tp():
    """(tensor-parallel size, its process group)."""
    from megatron.core import parallel_state as ps
    return ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_group()


def _param_how(p, name, grad_before_finalize=False):
    """How the shards of a parameter-shaped tensor of p make the whole one."""
    if getattr(p, 'tensor_model_parallel', False):
        from megatron.training import get_args
        gated = ('.mlp.linear_fc1.' in name and p.partition_dim == 0 and
                 get_args().swiglu)  # [gate_r; up_r] on each rank
        return ('gated', 0) if gated else ('cat', p.partition_dim)
    if grad_before_finalize and getattr(p, 'sequence_parallel', False):
        return ('sum', None)  # this rank's sequence shard's part; finalize all-reduces it
    return None


def _activation_how(name, sequence_parallel):
    if name.startswith('forward.output_layer.output'):
        return ('cat', 2)  # [s, b, V/tp]
    if sequence_parallel and name.split('.')[0] in ('forward', 'backward'):
        return ('cat', 0)  # [s/tp, b, h]
    return None


def _whole(x, how, size, group):
    """The whole tensor from every tensor-parallel rank's x (collective over group)."""
    import torch
    kind, dim = how
    x = x.contiguous()
    if kind == 'sum':
        y = x.clone()
        torch.distributed.all_reduce(y, group=group)
        return y
    parts = [torch.empty_like(x) for _ in range(size)]
    torch.distributed.all_gather(parts, x, group=group)
    if kind == 'gated':
        halves = [q.chunk(2, dim=0) for q in parts]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(parts, dim=dim)


def _gather_all(rec):
    """Every recorded tensor whole (every rank of the group recorded the same names in the
    same order: the same code ran on each)."""
    size, group = _tp()
    if size == 1:
        return rec
    from megatron.training import get_args
    sp = get_args().sequence_parallel
    out = {}
    for key, x in rec.items():
        how = _S['how'].get(key) or _activation_how(key, sp)
        out[key] = _whole(x, how, size, group) if how else x
    return out


def _gpt(chunk):
    """GPTModel inside DDP / Float16Module wrappers."""
    while not hasattr(chunk, 'decoder') and hasattr(chunk, 'module'):
        chunk = chunk.module
    return chunk


def _layer_map(gpt):
    """local layer index -> global index (layer_number is 1-based and global)."""
    return {i: layer.layer_number - 1 for i, layer in enumerate(gpt.decoder.layers)}


def param_names(model):
    """id(param) -> dump name, global layer numbers, the last stage's tied copy left out."""
    out = {}
    for chunk in model:
        gpt = _gpt(chunk)
        lm = _layer_map(gpt)
        for n, p in gpt.named_parameters():
            if getattr(p, 'shared', False):
                continue
            if n.startswith('decoder.layers.'):
                idx, _, rest = n[len('decoder.layers.'):].partition('.')
                n = 'decoder.layers.%d.%s' % (lm[int(idx)], rest)
            out[id(p)] = (n, p)
    return out


def _grad_hook(name):
    return lambda g: record('backward', name, g)


def _wrap(mod, before, after):
    """Calls before(args, kwargs) and after(output) around mod.forward (a wrapper on the
    instance rather than module hooks: TransformerBlock passes hidden_states by keyword, which
    forward pre-hooks see only from torch 2.0 on)."""
    inner = mod.forward

    def forward(*args, **kwargs):
        before(args, kwargs)
        out = inner(*args, **kwargs)
        after(out)
        return out
    mod.forward = forward


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _hook_chunk(chunk):
    gpt = _gpt(chunk)
    if id(gpt) in _S['hooked']:
        return
    _S['hooked'].add(id(gpt))

    def nothing(*_):
        pass

    def output(name):
        return lambda out: record('forward', name, _first(out))
    if getattr(gpt, 'pre_process', False):
        _wrap(gpt.embedding, nothing, output('forward.embedding.output'))
    for layer in gpt.decoder.layers:
        g = layer.layer_number - 1

        def before(args, kwargs, g=g):
            x = kwargs.get('hidden_states', args[0] if args else None)
            record('forward', 'forward.decoder.layers.%d.input' % g, x)
            if _S['rec'] is not None and x is not None and x.requires_grad:
                x.register_hook(_grad_hook('backward.decoder.layers.%d.input' % g))

        def after(out, g=g):
            y = _first(out)
            record('forward', 'forward.decoder.layers.%d.output' % g, y)
            if _S['rec'] is not None and y.requires_grad:
                y.register_hook(_grad_hook('backward.decoder.layers.%d.output' % g))
        _wrap(layer, before, after)
    if getattr(gpt, 'post_process', False):
        if getattr(gpt.decoder, 'final_layernorm', None) is not None:
            _wrap(gpt.decoder.final_layernorm, nothing,
                  output('forward.decoder.final_layernorm.output'))
        _wrap(gpt.output_layer, nothing, output('forward.output_layer.output'))


def _optimizers(optimizer):
    return getattr(optimizer, 'chained_optimizers', [optimizer])


def _main_params(optimizer, names):
    """name -> (model param, main param the optimizer steps)."""
    out = {}
    for o in _optimizers(optimizer):
        if hasattr(o, 'model_fp32_groups'):  # DistributedOptimizer: its param_groups hold
            for n, p in names.values():      # shards (its groups only the params this rank
                if str(p.dtype) == 'torch.float32':  # owns a part of); fp32 model params
                    out[n] = (p, p)                  # are their own mains
        elif hasattr(o, 'float16_groups'):  # Float16OptimizerWithFloat16Params
            for mg, fg in zip(o.float16_groups, o.fp32_from_float16_groups):
                for mp, fp in zip(mg, fg):
                    if id(mp) in names:
                        out[names[id(mp)][0]] = (mp, fp)
            for g in o.fp32_from_fp32_groups:
                for p in g:
                    if id(p) in names:
                        out[names[id(p)][0]] = (p, p)
        else:
            for g in o.optimizer.param_groups:
                for p in g['params']:
                    if id(p) in names:
                        out[names[id(p)][0]] = (p, p)
    return out


def _dist_optimizers(optimizer):
    return [o for o in _optimizers(optimizer) if hasattr(o, 'model_fp32_groups')]


def _dist_gathers(optimizer):
    """The distributed optimizer holds the reduced grads and its state in data-parallel shards:
    with the grads or optimizer point every rank takes part in putting them together."""
    return bool(_dist_optimizers(optimizer)) and bool(_S['points'] & {'grads', 'optimizer'})


def _dist_whole(optimizer, names, part):
    """name -> the whole fp32 tensor of every parameter in names, put together from the
    data-parallel ranks' shards. Each DistributedOptimizer pairs its model params with their
    shard main params (model_*_groups with shard_*_groups); _get_model_param_range_map's
    'param' range is the part of the (flattened) param this rank owns; part(model_param,
    shard_param, flat_range_slice) gives this rank's values there, or None. The ranges of the
    ranks are disjoint and cover each param: every rank writes its parts into zeros and the
    sum over the data-parallel group is exact (one nonzero term per element). Collective: the
    same names in the same order on every rank."""
    import torch
    from megatron.core import parallel_state as ps
    whole = {key: torch.zeros(p.numel(), dtype=torch.float32) for key, (_, p) in names.items()}
    for o in _dist_optimizers(optimizer):
        pairs = zip(o.model_float16_groups + o.model_fp32_groups,
                    o.shard_fp32_from_float16_groups + o.shard_fp32_groups)
        for mg, sg in pairs:
            for mp, sp in zip(mg, sg):
                if id(mp) not in whole:
                    continue
                r = o._get_model_param_range_map(mp)['param']
                x = part(mp, sp, slice(r.start, r.end))
                if x is not None:
                    whole[id(mp)][r.start:r.end] = x.detach().float().reshape(-1)
    group = ps.get_data_parallel_group(with_context_parallel=True)
    out = {}
    for key, (n, p) in names.items():
        torch.distributed.all_reduce(whole[key], group=group)
        out[n] = whole[key].view(p.shape)
    return out


def _dist_state_keys(optimizer):
    """The state tensors the shard optimizer keeps (the same on every rank: one optimizer)."""
    keys = set()
    for o in _dist_optimizers(optimizer):
        for st in o.optimizer.state.values():
            keys.update(k for k in ('exp_avg', 'exp_avg_sq', 'momentum_buffer') if k in st)
    return [k for k in ('exp_avg', 'exp_avg_sq', 'momentum_buffer') if k in keys]


def _ordered(names, mains):
    """Names in the model's parameter order (state_dict order, as megatron.c writes them)."""
    return [n for n, _ in names.values() if n in mains]


def _record_grads(prefix, names):
    for n, p in names.values():
        if getattr(p, 'main_grad', None) is not None:
            record('grads', prefix + n, p.main_grad.float(),
                   _param_how(p, n, grad_before_finalize=prefix == 'grad.'))


def _wrap_finalize(config, names, optimizer):
    inner = config.finalize_model_grads_func

    def finalize(*a, **k):
        _record_grads('grad.', names)
        r = inner(*a, **k)
        if not _dist_optimizers(optimizer):
            _record_grads('grad_reduced.', names)
        elif 'grads' in _S['points']:
            # the reduce-scatter left each rank's reduced shard in its grad buffer (the rest
            # of main_grad holds its own scaled grads): the owners' parts put together
            whole = _dist_whole(optimizer, names, lambda mp, sp, r: mp.main_grad.view(-1)[r])
            for n, p in names.values():
                record('grads', 'grad_reduced.' + n, whole[n], _param_how(p, n))
        return r
    return inner, finalize


def _record_after_step(optimizer, order, mains):
    """The clipped main grads, the optimizer state and the stepped main params."""
    for n in order:
        if mains[n][1].grad is not None:
            record('grads', 'grad_clipped.' + n, mains[n][1].grad.float(),
                   _param_how(mains[n][0], n))
    states = {}
    for o in _optimizers(optimizer):
        states.update(o.optimizer.state)
    for n in order:
        main = mains[n][1]
        for key in ('exp_avg', 'exp_avg_sq', 'momentum_buffer'):
            if key in states.get(main, {}):
                record('optimizer', 'optimizer.%s.%s' % (key, n), states[main][key].float(),
                       _param_how(mains[n][0], n))
        record('optimizer', 'optimizer.param.' + n, main.float(), _param_how(mains[n][0], n))


def _record_dist_after_step(optimizer, names, order, mains):
    """The same under the distributed optimizer: the shard main params' grads (views of the
    grad buffer's reduced shard, clipped in place) and their state (the shard optimizer's,
    keyed by the shard params) put together over the data-parallel group; the stepped params
    are the fp32 model params, all-gathered by the step."""
    def how(n):
        return _param_how(mains[n][0], n)
    if 'grads' in _S['points']:
        whole = _dist_whole(optimizer, names, lambda mp, sp, r: sp.grad)
        for n in order:
            record('grads', 'grad_clipped.' + n, whole[n], how(n))
    if 'optimizer' not in _S['points']:
        return
    states = {}
    for o in _dist_optimizers(optimizer):
        states.update(o.optimizer.state)
    keys = _dist_state_keys(optimizer)
    wholes = [_dist_whole(optimizer, names, lambda mp, sp, r, k=k: states.get(sp, {}).get(k))
              for k in keys]
    for n in order:
        for key, whole in zip(keys, wholes):
            record('optimizer', 'optimizer.%s.%s' % (key, n), whole[n], how(n))
        record('optimizer', 'optimizer.param.' + n, mains[n][1].float(), how(n))


def _file(iteration, rank):
    d = os.path.join(_S['dir'], 'iter_%07d' % iteration)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, 'rank_%05d.dump' % rank)


def _train_step_wrapper(inner):
    def train_step(forward_step_func, data_iterator, model, optimizer, opt_param_scheduler,
                   config, *a, **k):
        import torch
        from megatron.training import get_args
        iteration = get_args().curr_iteration + 1
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        write = _in(_S['ranks'], rank)
        if not (_in(_S['iters'], iteration) and
                (write or _tp()[0] > 1 or _dist_gathers(optimizer))):
            return inner(forward_step_func, data_iterator, model, optimizer,
                         opt_param_scheduler, config, *a, **k)
        for chunk in model:
            _hook_chunk(chunk)
        names = param_names(model)
        mains = _main_params(optimizer, names)
        order = _ordered(names, mains)
        _S['rec'], _S['how'] = {}, {}
        for n in order:
            record('params', 'param.' + n, mains[n][1].float(), _param_how(mains[n][0], n))
        saved, config.finalize_model_grads_func = _wrap_finalize(config, names, optimizer)
        try:
            out = inner(forward_step_func, data_iterator, model, optimizer, opt_param_scheduler,
                        config, *a, **k)
        finally:
            config.finalize_model_grads_func = saved
        if _dist_optimizers(optimizer):
            _record_dist_after_step(optimizer, names, order, mains)
        else:
            _record_after_step(optimizer, order, mains)
        loss = out[0].get('lm loss') if out and isinstance(out[0], dict) else None
        if loss is not None:
            record('loss', 'loss', torch.as_tensor(loss, dtype=torch.float32).reshape(()))
        rec, _S['rec'] = _S['rec'], None
        rec = _gather_all(rec)
        if write:
            mcdump.write(_file(iteration, rank), rec)
        return out
    return train_step


def _batch_wrapper(inner):
    def get_batch_on_this_tp_rank(data_iterator):
        batch = inner(data_iterator)
        if _S['rec'] is not None and batch is not None:
            for key in ('tokens', 'labels', 'loss_mask', 'position_ids'):
                if batch.get(key) is not None:
                    record('batch', 'batch.' + key, batch[key])
        return batch
    return get_batch_on_this_tp_rank


def install(dump_dir, iters='1', ranks=None, points=None):
    """Patches Megatron (imports megatron.training): call before pretrain_gpt.py is run."""
    import megatron.training.training as T
    import megatron.training.utils as U
    _S['dir'] = dump_dir
    _S['iters'] = parse_ranges('--dump-iters', iters)
    _S['ranks'] = parse_ranges('--dump-ranks', ranks) if ranks else None
    if points:
        chosen = set(points.split(',')) if points != 'all' else set(POINTS)
        bad = chosen - set(POINTS)
        if bad:
            raise SystemExit("--dump-points '%s': unknown point %s (expected %s or all)" %
                             (points, sorted(bad)[0], ', '.join(POINTS)))
        _S['points'] = chosen
    T.train_step = _train_step_wrapper(T.train_step)
    U.get_batch_on_this_tp_rank = _batch_wrapper(U.get_batch_on_this_tp_rank)


def check_layout(margs):
    """Refuses what megatron.c's --dump-dir refuses (the names would not line up)."""
    def val(opt, default):
        return margs[margs.index(opt) + 1] if opt in margs else default
    if int(val('--tensor-model-parallel-size', '1')) > 1 and '--num-experts' in margs:
        raise SystemExit('megatron_dump_hooks: --tensor-model-parallel-size > 1 with '
                         '--num-experts is not implemented yet (the experts\' shards are not '
                         'gathered)')
    if int(val('--context-parallel-size', '1')) > 1:
        raise SystemExit('megatron_dump_hooks: --context-parallel-size > 1 is not implemented '
                         'yet')
    if ('--use-distributed-optimizer' in margs and _S['points'] & {'params', 'optimizer'} and
            ('--bf16' in margs or '--fp16' in margs)):
        raise SystemExit('megatron_dump_hooks: the params and optimizer points with '
                         '--use-distributed-optimizer and --bf16/--fp16 are not implemented (the '
                         'fp32 main parameters are sharded over the data-parallel group)')


def main(argv):
    if '--' not in argv:
        raise SystemExit(__doc__)
    ours, margs = argv[:argv.index('--')], argv[argv.index('--') + 1:]
    opts = {'--dump-dir': None, '--dump-iters': '1', '--dump-ranks': None,
            '--dump-points': None, '--megatron-root': os.environ.get('MEGATRON_ROOT', '.')}
    i = 0
    while i < len(ours):
        if ours[i] not in opts or i + 1 >= len(ours):
            raise SystemExit('megatron_dump_hooks: unknown option or missing value: %s' % ours[i])
        opts[ours[i]] = ours[i + 1]
        i += 2
    if not opts['--dump-dir']:
        raise SystemExit('megatron_dump_hooks: --dump-dir DIR is required')
    root = opts['--megatron-root']
    script = os.path.join(root, 'pretrain_gpt.py')
    if not os.path.exists(script):
        raise SystemExit('megatron_dump_hooks: no pretrain_gpt.py in %s (--megatron-root or '
                         'MEGATRON_ROOT: a Megatron-LM checkout)' % root)
    sys.path.insert(0, os.path.abspath(root))
    install(opts['--dump-dir'], opts['--dump-iters'], opts['--dump-ranks'], opts['--dump-points'])
    check_layout(margs)
    sys.argv = [script] + margs
    runpy.run_path(script, run_name='__main__')


if __name__ == '__main__':
    main(sys.argv[1:])
