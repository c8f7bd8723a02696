#!/usr/bin/env python3
"""Forward dumps of a HuggingFace transformers model (GPT2LMHeadModel or LlamaForCausalLM), in
megatron.c's dump format and with the names `pretrain_gpt --dump-dir` writes (Megatron's module
names: docs/alignment.md, docs/formats/dump.md), so that build/bin/compare_dumps lines an HF
forward up with megatron.c's (or Megatron-LM's, tools/megatron_dump_hooks.py) name by name.

    python tools/hf_dump_hooks.py --model HF_DIR --dump-dir DIR \\
        (--batch-from OUR_DUMP | --tokens "17 5 900" [--tokens ...] [--labels ...]) \\
        [--dump-points batch,forward,loss] [--iteration N] [--dtype fp32|bf16|fp16]

--batch-from reads the micro-batches (batch.tokens, batch.tokens@1, ..., their labels and loss
masks) of a megatron.c or Megatron dump (a rank file or an iter_NNNNNNN directory, whose lowest
rank holding a batch is read), so both sides see the same tokens. The dump goes to
DIR/iter_NNNNNNN/rank_00000.dump (iteration 1 unless --iteration), written to .tmp and renamed.

Points (forward hooks only, no numerics change), activations sequence-first [s, b, h]:
  forward.embedding.output               GPT-2: transformer.drop (wte + wpe), Llama: embed_tokens
  forward.decoder.layers.N.input/.output the input and output hidden states of h[N] / layers[N]
  forward.decoder.final_layernorm.output transformer.ln_f / model.norm
  forward.output_layer.output            lm_head: the logits [s, b, V] (HF's true vocabulary)
  loss                                   with labels: sum(CE * loss_mask) / sum(loss_mask) over
                                         all micro-batches, Megatron's lm loss (fp32)
  batch.tokens/labels/loss_mask/position_ids  as given (Megatron's get_batch layout [b, s])
The second and later micro-batches get @1, @2, ... as in megatron.c's dumps.
From Python: `hf_dump_hooks.forward_dump(model, batches)` returns the ordered dict of tensors.
"""
import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mcdump  # noqa: E402

POINTS = ('batch', 'forward', 'loss')


def _modules(model):
    """(embedding output module, layers, final norm, output layer) of a supported model."""
    name = type(model).__name__
    if name == 'GPT2LMHeadModel':
        t = model.transformer
        return t.drop, list(t.h), t.ln_f, model.lm_head
    if name == 'LlamaForCausalLM':
        m = model.model
        return m.embed_tokens, list(m.layers), m.norm, model.lm_head
    raise SystemExit('hf_dump_hooks: %s is not supported (expected GPT2LMHeadModel or '
                     'LlamaForCausalLM)' % name)


class Recorder:
    """Named copies of tensors; a name recorded again gets @1, @2, ... (megatron.c's rule)."""

    def __init__(self, points):
        self.points = set(points)
        self.rec = collections.OrderedDict()

    def add(self, point, name, tensor):
        if point not in self.points:
            return
        key, k = name, 1
        while key in self.rec:
            key, k = '%s@%d' % (name, k), k + 1
        self.rec[key] = tensor.detach().clone()


def _seq_first(x):
    """[b, s, ...] -> [s, b, ...] (Megatron's activation layout), contiguous."""
    return x.transpose(0, 1).contiguous()


def _hidden(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _hook(rec, embedding, layers, final_norm, output_layer):
    """Registers the forward hooks; returns their handles."""
    handles = []

    def on_output(name):
        return lambda mod, args, out: rec.add('forward', name, _seq_first(_hidden(out)))

    def on_input(name):
        def pre(mod, args):
            if not args:  # (every supported model passes hidden_states positionally)
                raise RuntimeError('hf_dump_hooks: %s was called without a positional '
                                   'hidden_states argument' % name)
            rec.add('forward', name, _seq_first(args[0]))
        return pre

    handles.append(embedding.register_forward_hook(on_output('forward.embedding.output')))
    for i, layer in enumerate(layers):
        pre = 'forward.decoder.layers.%d.' % i
        handles.append(layer.register_forward_pre_hook(on_input(pre + 'input')))
        handles.append(layer.register_forward_hook(on_output(pre + 'output')))
    handles.append(final_norm.register_forward_hook(
        on_output('forward.decoder.final_layernorm.output')))
    handles.append(output_layer.register_forward_hook(on_output('forward.output_layer.output')))
    return handles


def forward_dump(model, batches, points=POINTS):
    """Runs each micro-batch through model (eval mode, no grad) with the hooks on. batches: list
    of dicts with 'tokens' (int64 [b, s]) and optionally 'labels' and 'loss_mask' ([b, s],
    Megatron's: labels[i] is the target of position i). Returns an ordered dict of tensors."""
    import torch
    rec = Recorder(points)
    handles = _hook(rec, *_modules(model))
    num, den, have_labels = torch.zeros((), dtype=torch.float64), 0.0, True
    try:
        model.eval()
        with torch.no_grad():
            for mb in batches:
                tokens = torch.as_tensor(mb['tokens'], dtype=torch.int64)
                b, s = tokens.shape
                pos = torch.arange(s, dtype=torch.int64).expand(b, s).contiguous()
                labels, mask = mb.get('labels'), mb.get('loss_mask')
                rec.add('batch', 'batch.tokens', tokens)
                if labels is not None:
                    labels = torch.as_tensor(labels, dtype=torch.int64)
                    mask = (torch.ones(b, s) if mask is None
                            else torch.as_tensor(mask, dtype=torch.float32))
                    rec.add('batch', 'batch.labels', labels)
                    rec.add('batch', 'batch.loss_mask', mask)
                rec.add('batch', 'batch.position_ids', pos)
                logits = model(input_ids=tokens, position_ids=pos, use_cache=False).logits
                if labels is None:
                    have_labels = False
                    continue
                # Megatron's loss_func: per-token CE in fp32, masked sum over masked count
                ce = torch.nn.functional.cross_entropy(
                    logits.float().reshape(b * s, -1), labels.reshape(-1), reduction='none')
                num += (ce * mask.reshape(-1)).sum().double()
                den += float(mask.sum())
    finally:
        for h in handles:
            h.remove()
    if have_labels and batches and den > 0:
        rec.add('loss', 'loss', (num / den).float())
    return rec.rec


def _batches_from(path):
    """The micro-batches of a dump file, or of the lowest rank of an iteration directory that
    holds a batch."""
    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if f.startswith('rank_') and f.endswith('.dump'))
        if not files:
            raise SystemExit('--batch-from %s: no rank_NNNNN.dump files in the directory' % path)
    for f in files:
        try:
            d = mcdump.read(f)
        except (OSError, mcdump.DumpError) as e:
            raise SystemExit('--batch-from %s: %s' % (f, e))
        out, k = [], 0
        while True:
            sfx = '' if k == 0 else '@%d' % k
            if 'batch.tokens' + sfx not in d:
                break
            mb = {'tokens': d['batch.tokens' + sfx]}
            if 'batch.labels' + sfx in d:
                mb['labels'] = d['batch.labels' + sfx]
                mb['loss_mask'] = d.get('batch.loss_mask' + sfx)
            out.append(mb)
            k += 1
        if out:
            return out
    raise SystemExit('--batch-from %s: no batch.tokens in it (dump it with --dump-points '
                     'batch,...)' % path)


def _ids(opt, s):
    try:
        ids = [int(x) for x in s.replace(',', ' ').split()]
    except ValueError:
        ids = []
    if not ids or min(ids) < 0:
        raise SystemExit("%s '%s': expected non-negative token ids separated by spaces" % (opt, s))
    return ids


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', required=True, help='HuggingFace model directory (or hub name)')
    p.add_argument('--dump-dir', required=True)
    p.add_argument('--batch-from', help='a megatron.c/Megatron dump file or iter_NNNNNNN directory')
    p.add_argument('--tokens', action='append', help='one sequence of token ids (repeat for a '
                   'batch of equal lengths)')
    p.add_argument('--labels', action='append', help='the targets of each --tokens sequence '
                   '(Megatron\'s labels: the next token of each position)')
    p.add_argument('--dump-points', default=','.join(POINTS))
    p.add_argument('--iteration', type=int, default=1)
    p.add_argument('--dtype', choices=('fp32', 'bf16', 'fp16'), default='fp32')
    a = p.parse_args(argv)
    points = [x for x in a.dump_points.split(',') if x]
    bad = [x for x in points if x not in POINTS]
    if bad or not points:
        raise SystemExit("--dump-points '%s': expected a comma list of %s"
                         % (a.dump_points, ','.join(POINTS)))
    if a.iteration < 0:
        raise SystemExit('--iteration %d: expected a number >= 0' % a.iteration)
    if bool(a.batch_from) == bool(a.tokens):
        raise SystemExit('give one of --batch-from and --tokens')
    if a.batch_from:
        batches = _batches_from(a.batch_from)
    else:
        rows = [_ids('--tokens', t) for t in a.tokens]
        if len({len(r) for r in rows}) != 1:
            raise SystemExit('--tokens: the sequences of a batch must have the same length')
        mb = {'tokens': rows}
        if a.labels:
            lab = [_ids('--labels', t) for t in a.labels]
            if [len(r) for r in lab] != [len(r) for r in rows]:
                raise SystemExit('--labels: expected one sequence per --tokens, of its length')
            mb['labels'] = lab
        batches = [mb]
    import torch
    import transformers
    dtype = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}[a.dtype]
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=dtype)
    tensors = forward_dump(model, batches, points)
    out = os.path.join(a.dump_dir, 'iter_%07d' % a.iteration)
    os.makedirs(out, exist_ok=True)
    mcdump.write(os.path.join(out, 'rank_00000.dump'), tensors)
    print('hf_dump_hooks: %d tensors of %d micro-batches -> %s'
          % (len(tensors), len(batches), os.path.join(out, 'rank_00000.dump')))


if __name__ == '__main__':
    main()
