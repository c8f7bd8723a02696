"""Gradient accumulation over micro-batches (Megatron's forward_backward_no_pipelining with
num_microbatches = 3): grads accumulate (+=) across forward/backward calls, each micro-batch's loss
is its token mean divided by the number of micro-batches, and dropout draws a fresh stream per
micro-batch (c3 = micro << 24 | site, gpt_model.c). With dropout 0.1 on, the C engine's
per-micro-batch losses and accumulated grads must match the twin's (1e-4 * max|want|)."""
import os
import random
import sys

import numpy as np
import torch

from parity import common

M = 3


def check(name, seed, tmp, verbose):
    case = common.make_case(name, seed)
    twin = case['twin']
    twin.set_dropout_rates(0.1, 0.1)
    c = twin.c
    gen = torch.Generator().manual_seed(seed + 1)
    b, s = c['micro_batch_size'], c['seq_length']
    tokens = torch.randint(0, c['vocab_size'], (M, b, s), generator=gen)
    labels = torch.randint(0, c['vocab_size'], (M, b, s), generator=gen)
    mask = (torch.rand(M, b, s, generator=gen) > 0.3).float()
    mask[:, 0, 0] = 1.0
    dloss = mask / mask.sum(dim=(1, 2), keepdim=True) / M
    inp, out = os.path.join(tmp, name + '.acc.in.dump'), os.path.join(tmp, name + '.acc.out.dump')
    common.write_input(inp, case)
    from reference import mcdump
    d = mcdump.read(inp)
    d['config.hidden_dropout'] = np.float32(0.1)
    d['config.attention_dropout'] = np.float32(0.1)
    d.update({'accum.tokens': tokens.numpy(), 'accum.labels': labels.numpy(),
              'accum.dloss': dloss.numpy().astype(np.float32)})
    mcdump.write(inp, d)
    rep = common.Report(name + '/accum', 1e-4, verbose)
    try:
        got = common.run_driver(inp, out)
    except RuntimeError as e:
        rep.check('driver', False, str(e))
        return rep
    twin.zero_grad(set_to_none=True)
    twin.train()
    losses = []
    for k in range(M):
        twin.set_dropout('philox', step=0, micro=k)
        _, loss = twin(tokens[k], None, None, labels[k])
        (loss * dloss[k]).sum().backward()
        losses.append(loss.detach())
    rep.close('accum.loss', got.get('accum.loss'), torch.stack(losses).numpy()) if 'accum.loss' in got \
        else rep.check('accum.loss', False, 'missing from the driver output')
    for pname, p in twin.named_parameters():
        key = 'accum.grad.' + pname
        if key not in got:
            rep.check(key, False, 'missing')
            continue
        rep.close(key, got[key], p.grad.numpy())
    return rep


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('-')]
    verbose = '-q' not in sys.argv and os.environ.get('MC_PARITY_VERBOSE') != '0'
    seed = int(os.environ.get('MC_PARITY_SEED', random.SystemRandom().randrange(1 << 31)))
    tmp = common.tmpdir()
    passed = failed = 0
    for i, name in enumerate(args or ['gpt2', 'llama']):
        rep = check(name, seed + i, tmp, verbose)
        for line in rep.lines:
            print(line)
        passed += rep.passed
        failed += rep.failed
    print('test_grad_accumulation: %d passed, %d failed; seed %d' % (passed, failed, seed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
