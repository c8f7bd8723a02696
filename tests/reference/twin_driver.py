"""The PyTorch twin behind gpt_parity_driver's dump protocol (tests/drivers/gpt_parity_driver.c):
reads IN.dump, writes OUT.dump with the same tensors the C driver writes. Used to check the
parity harness itself (MC_PARITY_DRIVER="/usr/bin/python3 tests/reference/twin_driver.py" makes
the parity tests compare the twin with itself through the files) and to produce dumps for
tools that compare against the C engine by hand.

Usage: /usr/bin/python3 twin_driver.py IN.dump OUT.dump"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import torch  # noqa: E402

from reference import gpt_twin as T  # noqa: E402
from reference import mcdump  # noqa: E402

torch.set_num_threads(1)  # tiny tensors: threads only add synchronisation


def main(inp, outp):
    d = mcdump.read(inp)
    cfg = {k[7:]: (float(v) if k[7:] in T.FLOAT_FIELDS else int(v))
           for k, v in d.items() if k.startswith('config.')}
    dtype = {0: 'fp32', 1: 'bf16', 2: 'fp16'}[cfg.pop('params_dtype', 0)]
    twin = T.GPTTwin(cfg)
    with torch.no_grad():
        for name, p in twin.named_parameters():
            p.copy_(torch.from_numpy(d['param.' + name]))
    if dtype != 'fp32':
        return main16(d, twin, dtype, outp)
    tokens = torch.from_numpy(d['tokens'])
    labels = torch.from_numpy(d['labels'])
    dloss = torch.from_numpy(d['dloss'])
    mask = torch.from_numpy(d['attention_mask']).bool() if 'attention_mask' in d else None
    pos = torch.from_numpy(d['position_ids']) if 'position_ids' in d else None
    out = {}
    twin.eval()
    with torch.no_grad():
        out['logits'] = twin(tokens, pos, mask)[0]
    twin.train()
    twin.set_dropout('philox', step=0)
    _, loss = twin(tokens, pos, mask, labels)
    (loss * dloss).sum().backward()
    out['loss'] = loss
    for name, p in twin.named_parameters():
        out['grad.' + name] = p.grad.clone()
    steps = int(d.get('opt.steps', 0))
    if steps > 0:
        params = list(twin.parameters())
        opt = T.make_adamw(twin, float(d['opt.beta1']), float(d['opt.beta2']), float(d['opt.eps']))
        curve, norms = [], []
        for it in range(steps):
            twin.set_dropout('philox', step=it)
            for p in params:
                p.grad.zero_()
            _, loss = twin(tokens, pos, mask, labels)
            total = (loss * dloss).sum()
            total.backward()
            curve.append(float(total))
            norms.append(T.grad_norm_and_clip(params, float(d['opt.clip_grad'])))
            T.set_lr_wd(opt, float(d['opt.lr'][it]), float(d['opt.weight_decay'][it]))
            opt.step()
        out['train.loss'] = np.array(curve, dtype=np.float32)
        out['train.grad_norm'] = np.array(norms, dtype=np.float32)
        for name, p in twin.named_parameters():
            out['param.' + name] = p.detach()
    mcdump.write(outp, out)


def main16(d, twin, dtype, outp):
    """config.params_dtype bf16 / fp16: the twin's explicit 16-bit mode, Megatron's
    mixed-precision train step (parity/mixed16.py); dloss arrives already scaled."""
    from parity import mixed16
    twin.set_precision(T.Precision(dtype))
    batch = dict(tokens=torch.from_numpy(d['tokens']), labels=torch.from_numpy(d['labels']),
                 dloss=torch.from_numpy(d['dloss']))
    if 'attention_mask' in d:
        batch['attention_mask'] = torch.from_numpy(d['attention_mask']).bool()
    if 'position_ids' in d:
        batch['position_ids'] = torch.from_numpy(d['position_ids'])
    case = dict(twin=twin, batch=batch, dtype=dtype, loss_scale=float(d.get('opt.loss_scale', 1.0)))
    logits, loss, grads = mixed16.forward_backward16(case)
    out = {'logits': logits, 'loss': loss}
    out.update({'grad.' + n: g for n, g in grads.items()})
    steps = int(d.get('opt.steps', 0))
    if steps > 0:
        curve, norms, params = mixed16.train16(case, steps, [float(v) for v in d['opt.lr']],
                                               [float(v) for v in d['opt.weight_decay']])
        # the C driver's train.loss is sum(loss * dloss) of the scaled dloss
        out['train.loss'] = np.array(curve, dtype=np.float32) * np.float32(case['loss_scale'])
        out['train.grad_norm'] = np.array(norms, dtype=np.float32)
        out.update({'param.' + n: p for n, p in params.items()})
    mcdump.write(outp, out)


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit('usage: twin_driver.py IN.dump OUT.dump')
    main(sys.argv[1], sys.argv[2])
