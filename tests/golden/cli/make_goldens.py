#!/usr/bin/env python3
"""Regenerates tests/golden/cli/megatron_cli.json by running Megatron-LM core_v0.12.1's own
Python (parse_args, validate_args, the micro-batch calculator, OptimizerParamScheduler,
report_theoretical_memory, num_floating_point_operations) on this CPU.

Usage: MEGATRON_ROOT=/work/ref/Megatron-LM /usr/bin/python3 tests/golden/cli/make_goldens.py
Needs /work/shared/megatron-cpu/shim.py (CPU shims for Megatron's imports). No Megatron code
is copied: the file holds only Megatron's outputs for the command lines in CASES."""
import contextlib
import io
import json
import math
import os
import sys
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
MEG = os.environ.setdefault('MEGATRON_ROOT', '/work/ref/Megatron-LM')
sys.path.insert(0, os.environ.get('MC_MEGATRON_SHIM_DIR', '/work/shared/megatron-cpu'))


def stub_packaging():
    """torch 1.13's Debian image lacks the 'packaging' module Megatron imports for versions."""
    try:
        import packaging.version  # noqa: F401
        return
    except ImportError:
        pass
    import re

    class Version:
        def __init__(self, s):
            self.t = tuple(int(x) for x in re.findall(r'\d+', str(s).split('+')[0])[:3])

        def __lt__(self, o): return self.t < o.t
        def __le__(self, o): return self.t <= o.t
        def __gt__(self, o): return self.t > o.t
        def __ge__(self, o): return self.t >= o.t
        def __eq__(self, o): return self.t == o.t

    p = types.ModuleType('packaging')
    v = types.ModuleType('packaging.version')
    v.Version = Version
    v.parse = Version
    p.version = v
    p.__path__ = []
    sys.modules['packaging'] = p
    sys.modules['packaging.version'] = v


stub_packaging()
import shim  # noqa: E402,F401
import logging  # noqa: E402
import warnings  # noqa: E402

warnings.simplefilter('ignore')
from megatron.training import arguments as MA  # noqa: E402
from megatron.training import global_vars as GV  # noqa: E402
import megatron.core.num_microbatches_calculator as NMC  # noqa: E402
from megatron.training import training as TR  # noqa: E402
from megatron.training.theoretical_memory_usage import report_theoretical_memory  # noqa: E402
from megatron.training.tokenizer.tokenizer import _vocab_size_with_padding  # noqa: E402

TINY = ['--num-layers', '4', '--hidden-size', '64', '--num-attention-heads', '4',
        '--seq-length', '128', '--max-position-embeddings', '128', '--micro-batch-size', '2',
        '--train-iters', '20', '--lr', '1e-3']
TINY_NOITERS = TINY[:-4]

GPT3_175B = ('--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 '
             '--max-position-embeddings 2048 --attention-backend auto --micro-batch-size 1 '
             '--global-batch-size 1536 --rampup-batch-size 16 16 5859375 --train-iters 500000 '
             '--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 '
             '--clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 '
             '--lr-warmup-fraction .001 --lr-decay-iters 430000 '
             '--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 '
             '--data-path /data/gpt_text_document --vocab-file /data/gpt2-vocab.json '
             '--merge-file /data/gpt2-merges.txt --split 949,50,1 --log-interval 100 '
             '--save-interval 10000 --eval-interval 1000 --save /ckpt --load /ckpt '
             '--eval-iters 10 --tensorboard-dir /tb').split()
GPT3_175B_NO_RAMPUP = [t for i, t in enumerate(GPT3_175B)
                       if not (GPT3_175B[i - 1:i] == ['--rampup-batch-size'] or
                               t == '--rampup-batch-size' or
                               (i >= 2 and GPT3_175B[i - 2] == '--rampup-batch-size') or
                               (i >= 3 and GPT3_175B[i - 3] == '--rampup-batch-size'))]
MIXTRAL = ('--use-mcore-models --disable-bias-linear --seq-length 4096 '
           '--max-position-embeddings 32768 --num-layers 32 --hidden-size 4096 '
           '--ffn-hidden-size 14336 --num-attention-heads 32 --init-method-std 0.01 '
           '--attention-dropout 0.0 --hidden-dropout 0.0 --normalization RMSNorm '
           '--position-embedding-type rope --swiglu --untie-embeddings-and-output-weights '
           '--group-query-attention --num-query-groups 8 --no-masked-softmax-fusion '
           '--no-position-embedding --rotary-base 1000000 --num-experts 8 --moe-router-topk 2 '
           '--moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2 '
           '--moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce '
           '--tokenizer-type Llama2Tokenizer --tokenizer-model /t.model --data-path /d '
           '--split 99990,8,2 --micro-batch-size 1 --global-batch-size 256 --lr 1e-4 '
           '--train-iters 500000 --lr-decay-iters 320000 --lr-decay-style cosine --min-lr 1.0e-5 '
           '--weight-decay 0.1 --lr-warmup-iters 500 --clip-grad 1.0 --bf16 '
           '--tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 '
           '--expert-model-parallel-size 8 --use-distributed-optimizer --sequence-parallel '
           '--log-interval 1 --save-interval 10000 --eval-interval 1000 --eval-iters 10 '
           '--save /c --load /c --no-load-optim --no-load-rng').split()
# Llama-2-7B style (SwiGLU, RMSNorm, RoPE, untied), the shape of the MindSpeed-LLM examples.
LLAMA2_7B = ('--num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 '
             '--num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 '
             '--position-embedding-type rope --normalization RMSNorm --swiglu '
             '--untie-embeddings-and-output-weights --disable-bias-linear '
             '--tokenizer-type NullTokenizer --vocab-size 32000 --micro-batch-size 1 '
             '--global-batch-size 1024 --train-iters 100 --lr 3e-4 --min-lr 3e-5 '
             '--lr-decay-style cosine --lr-warmup-iters 10 --bf16 '
             '--tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 '
             '--use-distributed-optimizer --sequence-parallel --recompute-activations').split()

# (name, argv, WORLD_SIZE)
CASES = [
    ('tiny', TINY, 1),
    ('tiny_swiglu', TINY + ['--swiglu'], 1),
    ('swiglu_768', TINY_NOITERS + ['--train-iters', '5', '--lr', '1e-4', '--hidden-size', '768',
                                   '--num-attention-heads', '12', '--swiglu'], 1),
    ('tp2_pp2_ws8', TINY + ['--tensor-model-parallel-size', '2',
                            '--pipeline-model-parallel-size', '2'], 8),
    ('bf16', TINY + ['--bf16'], 1),
    ('fp16_dynamic', TINY + ['--fp16'], 1),
    ('fp16_static', TINY + ['--fp16', '--loss-scale', '1024'], 1),
    ('data_path_split_warning', TINY + ['--data-path', '/x/y_text_document'], 1),
    ('null_tokenizer_override', TINY + ['--tokenizer-type', 'NullTokenizer',
                                        '--vocab-size', '1000'], 1),
    ('recompute_activations', TINY + ['--recompute-activations'], 1),
    ('gqa', TINY + ['--group-query-attention', '--num-query-groups', '2'], 1),
    ('rope_legacy_flag', TINY + ['--use-rotary-position-embeddings'], 1),
    ('no_bias', TINY + ['--disable-bias-linear'], 1),
    ('sample_based', TINY_NOITERS + ['--train-samples', '2000', '--lr-decay-samples', '1500',
                                     '--lr-warmup-samples', '100', '--lr', '1e-3',
                                     '--lr-decay-style', 'cosine', '--min-lr', '1e-5'], 1),
    ('rampup_samples', TINY_NOITERS + ['--train-samples', '400', '--global-batch-size', '16',
                                       '--rampup-batch-size', '4', '4', '120', '--lr', '2e-3',
                                       '--lr-warmup-samples', '40'], 1),
    ('rampup_decrease', TINY_NOITERS + ['--train-samples', '300', '--global-batch-size', '24',
                                        '--rampup-batch-size', '6', '6', '90', '--lr', '2e-3',
                                        '--decrease-batch-size-if-needed'], 2),
    ('interleaved', TINY + ['--pipeline-model-parallel-size', '2',
                            '--num-layers-per-virtual-pipeline-stage', '1'], 2),
    ('virtual_stages', TINY + ['--pipeline-model-parallel-size', '2',
                               '--num-virtual-stages-per-pipeline-rank', '2'], 4),
    ('wd_linear', TINY + ['--weight-decay-incr-style', 'linear', '--start-weight-decay', '0.01',
                          '--end-weight-decay', '0.1'], 1),
    ('wd_cosine', TINY + ['--weight-decay-incr-style', 'cosine', '--start-weight-decay', '0.0',
                          '--end-weight-decay', '0.1'], 1),
    ('wsd_exp', TINY + ['--lr-decay-style', 'WSD', '--lr-wsd-decay-iters', '8',
                        '--lr-warmup-iters', '2'], 1),
    ('wsd_linear', TINY + ['--lr-decay-style', 'WSD', '--lr-wsd-decay-iters', '8',
                           '--lr-wsd-decay-style', 'linear'], 1),
    ('wsd_cosine', TINY + ['--lr-decay-style', 'WSD', '--lr-wsd-decay-iters', '8',
                           '--lr-wsd-decay-style', 'cosine', '--min-lr', '1e-4'], 1),
    ('inverse_sqrt', TINY + ['--lr-decay-style', 'inverse-square-root', '--lr-warmup-iters', '3',
                             '--lr-decay-iters', '15'], 1),
    ('inverse_sqrt_nowarmup', TINY + ['--lr-decay-style', 'inverse-square-root'], 1),
    ('constant_warmup_init', TINY + ['--lr-decay-style', 'constant', '--lr-warmup-iters', '4',
                                     '--lr-warmup-init', '1e-4'], 1),
    ('cosine_fraction', TINY + ['--lr-decay-style', 'cosine', '--lr-warmup-fraction', '0.15',
                                '--min-lr', '1e-5', '--global-batch-size', '6'], 1),
    ('linear_decay_iters', TINY + ['--lr-decay-iters', '12', '--lr-warmup-iters', '2',
                                   '--min-lr', '2e-4'], 1),
    ('moe_freq_list', TINY + ['--num-experts', '4', '--moe-layer-freq', '([0]+[1]*3)'], 1),
    ('attention_backend_flash', TINY + ['--attention-backend', 'flash'], 1),
    ('seq_parallel_tp1', TINY + ['--sequence-parallel'], 1),
    ('dist_opt_overlap', TINY + ['--use-distributed-optimizer', '--overlap-grad-reduce',
                                 '--overlap-param-gather'], 2),
    ('equals_and_repeat', TINY + ['--hidden-size=32', '--hidden-size', '128', '--seed=7',
                                  '--num-layers', ' 1_2 ', '--init-method-std', '.001',
                                  '--onnx-safe', 'False'], 1),
    ('negative_value', TINY + ['--inference-batch-times-seqlen-threshold', '-1',
                               '--data-path', '0.5', 'a', '--split', '1,1,1'], 1),
    ('cp_comm_list', TINY + ['--cp-comm-type', 'p2p', 'a2a'], 1),
    ('llama2_7b_ws32', LLAMA2_7B, 32),
    ('interleaved_sp_selective', TINY + ['--tensor-model-parallel-size', '2',
                                         '--pipeline-model-parallel-size', '2',
                                         '--num-layers-per-virtual-pipeline-stage', '1',
                                         '--sequence-parallel', '--recompute-granularity',
                                         'selective', '--global-batch-size', '8'], 4),
    ('sp_selective_untied_pp1', TINY + ['--tensor-model-parallel-size', '2', '--sequence-parallel',
                                        '--recompute-activations',
                                        '--untie-embeddings-and-output-weights',
                                        '--use-distributed-optimizer'], 8),
    ('mla_q_lora', TINY + ['--multi-latent-attention', '--q-lora-rank', '32',
                           '--kv-lora-rank', '16', '--qk-head-dim', '16',
                           '--qk-pos-emb-head-dim', '8', '--v-head-dim', '16'], 1),
    ('mtp_rope', TINY + ['--mtp-num-layers', '2', '--position-embedding-type', 'rope'], 1),
    ('mixtral_8x7b_ws64', MIXTRAL, 64),
    ('gpt3_175b_no_rampup_ws1024', GPT3_175B_NO_RAMPUP, 1024),
    ('ckpt_activations_exit0', TINY + ['--checkpoint-activations'], 1),
    # failures
    ('gpt3_175b_ws1024', GPT3_175B, 1024),
    ('err_no_mbs', [t for t in TINY if t not in ('--micro-batch-size', '2')], 1),
    ('err_kv_divisible', TINY + ['--hidden-size', '66'], 1),
    ('err_seq_gt_maxpos', TINY + ['--seq-length', '256'], 1),
    ('err_world_size', TINY + ['--tensor-model-parallel-size', '4'], 6),
    ('err_batch_size', TINY + ['--batch-size', '4'], 1),
    ('err_warmup', TINY + ['--warmup', '10'], 1),
    ('err_model_parallel_size', TINY + ['--model-parallel-size', '2'], 1),
    ('err_iters_and_samples', TINY + ['--train-samples', '100'], 1),
    ('err_fraction_and_iters', TINY + ['--lr-warmup-fraction', '0.1', '--lr-warmup-iters', '2'], 1),
    ('err_samples_warmup_iters', TINY_NOITERS + ['--train-samples', '100', '--lr-warmup-iters', '2'], 1),
    ('err_fp16_bf16', TINY + ['--fp16', '--bf16'], 1),
    ('err_fp32_residual', TINY + ['--fp32-residual-connection'], 1),
    ('err_num_experts_zero', TINY + ['--num-experts', '0'], 1),
    ('err_no_position_embedding', TINY + ['--no-position-embedding'], 1),
    ('err_rotary_interleaved', TINY + ['--position-embedding-type', 'rope', '--rotary-interleaved'], 1),
    ('err_in_memory_ckpt', TINY + ['--non-persistent-ckpt-type', 'in_memory'], 1),
    ('err_save_no_interval', TINY + ['--save', '/tmp/x'], 1),
    ('err_min_lr', TINY + ['--min-lr', '1'], 1),
    ('err_pp_layers', TINY + ['--pipeline-model-parallel-size', '3'], 3),
    ('err_two_sources', TINY + ['--mock-data', '--data-path', 'x'], 1),
    ('err_distribute_saved', TINY + ['--distribute-saved-activations'], 1),
    ('err_overlap_param_gather', TINY + ['--overlap-param-gather'], 1),
    ('err_expert_parallel', TINY + ['--expert-model-parallel-size', '2'], 2),
    ('err_interleaved_pp1', TINY + ['--num-layers-per-virtual-pipeline-stage', '1'], 1),
    ('err_selective_method', TINY + ['--recompute-granularity', 'selective',
                                     '--recompute-method', 'uniform'], 1),
    ('err_wd_linear_missing', TINY + ['--weight-decay-incr-style', 'linear'], 1),
    ('err_mtp_learned', TINY + ['--mtp-num-layers', '1'], 1),
    # argparse errors (exit 2) and the enum KeyError (exit 1)
    ('arg_unknown', TINY + ['--use-fused-rmsnorm', '--DDP-impl', 'local'], 1),
    ('arg_abbrev', TINY + ['--hidden', '256'], 1),
    ('arg_bad_int', TINY + ['--global-batch-size', '2.5'], 1),
    ('arg_bad_float', TINY + ['--clip-grad', 'one'], 1),
    ('arg_bad_choice', TINY + ['--lr-decay-style', 'poly'], 1),
    ('arg_bad_int_choice', TINY + ['--timing-log-level', '3'], 1),
    ('arg_missing_value', TINY + ['--lr'], 1),
    ('arg_flag_value', TINY + ['--bf16=true'], 1),
    ('arg_plus_empty', TINY + ['--cp-comm-type', '--bf16'], 1),
    ('arg_backend_hccl', TINY + ['--distributed-backend', 'hccl'], 1),
    ('arg_attention_backend_keyerror', TINY + ['--attention-backend', 'foo'], 1),
    ('arg_negative_not_number', TINY + ['--lr', '-1e-3'], 1),
]


def ci_cases(limit=40):
    """GPT command lines of Megatron's own CI (tests/functional_tests/test_cases/gpt/*/
    model_config.yaml, MODEL_ARGS): `true` is a flag, `false` is left out, quoted values split
    on spaces, ${VAR}/$VAR become /tmp/VAR. Resume variants are skipped (same arguments)."""
    import glob
    import re
    out = []
    for d in sorted(glob.glob(os.path.join(MEG, 'tests/functional_tests/test_cases/gpt/*/'))):
        name = os.path.basename(d.rstrip('/'))
        path = os.path.join(d, 'model_config.yaml')
        if 'resume' in name or 'frozen' in name or not os.path.exists(path):
            continue
        argv, inside = [], False
        for line in open(path):
            if line.startswith('MODEL_ARGS:'):
                inside = True
                continue
            if inside and line.strip() and not line.startswith(' '):
                break
            m = re.match(r'\s+(--[\w-]+):\s*(.*)$', line) if inside else None
            if not m:
                continue
            key, val = m.group(1), m.group(2).split(' #')[0].split('  #')[0].strip()
            val = re.sub(r'\$\{?(\w+)\}?', r'/tmp/\1', val)
            if val == 'true':
                argv.append(key)
            elif val == 'false':
                continue
            else:
                argv.append(key)
                argv += val.strip('"').strip("'").split()
        out.append(('ci_' + name[:60], argv, 8))
        if len(out) >= limit:
            break
    return out


CASES += ci_cases()


class Opt:
    """Stands in for the optimizer: OptimizerParamScheduler only touches param_groups."""
    def __init__(self):
        self.param_groups = [{}]


def run_case(name, argv, world):
    os.environ['WORLD_SIZE'] = str(world)
    os.environ['RANK'] = '0'
    os.environ['CUDA_DEVICE_MAX_CONNECTIONS'] = '1'
    os.environ['NCCL_ALGO'] = 'Tree'  # Megatron's CI sets it; --deterministic-mode checks it
    sys.argv = ['pretrain_gpt.py'] + argv
    out, err = io.StringIO(), io.StringIO()
    res = {'name': name, 'argv': argv, 'world_size': world}
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter('%(levelname)s:%(name)s:%(message)s'))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    NMC._GLOBAL_NUM_MICROBATCHES_CALCULATOR = None
    args = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = MA.parse_args()
            MA.validate_args(args, {'tokenizer_type': 'GPT2BPETokenizer'})
        res['exit'] = 0
    except SystemExit as e:
        res['exit'] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        res['system_exit'] = True
    except Exception as e:  # noqa: BLE001
        res['exit'] = 1
        msg = str(e)
        res['error'] = type(e).__name__ + (': ' + msg if msg else '')
    res['stdout'] = out.getvalue()
    errl = [l for l in err.getvalue().splitlines() if l.strip()]
    res['stderr_last'] = errl[-1] if errl else ''
    if res['exit'] != 0 or args is None or 'error' in res or res.get('system_exit'):
        return res
    extras(args, res, out)
    return res


def extras(args, res, out):
    """What Megatron computes after validate_args: micro-batches, padded vocab, memory, FLOPs,
    and the LR/WD after every iteration of a simulated train loop."""
    GV._GLOBAL_ARGS = args  # get_optimizer_param_scheduler reads the global args
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter('%(levelname)s:%(name)s:%(message)s'))
    logging.getLogger().handlers = [handler]
    try:
        with contextlib.redirect_stdout(buf):
            NMC.init_num_microbatches_calculator(0, args.rampup_batch_size, args.global_batch_size,
                                                 args.micro_batch_size, args.data_parallel_size,
                                                 args.decrease_batch_size_if_needed)
    except Exception as e:  # noqa: BLE001
        res['microbatches_error'] = type(e).__name__ + ': ' + str(e)
        res['microbatches_log'] = buf.getvalue()
        return
    res['microbatches_log'] = buf.getvalue()
    if args.tokenizer_type == 'NullTokenizer':
        orig = args.vocab_size + 1
    elif args.tokenizer_type == 'GPT2BPETokenizer':
        orig = 50257  # GPT-2's vocab.json; the cases name no readable file
    else:
        sched(args, res)  # the vocabulary comes from a tokenizer model file: no estimate
        return
    args.padded_vocab_size = _vocab_size_with_padding(orig, args, logging_enabled=False)
    res['padded_vocab_size'] = args.padded_vocab_size
    GV._GLOBAL_ARGS = args
    mem = io.StringIO()
    with contextlib.redirect_stdout(mem):
        report_theoretical_memory(args, num_microbatches=NMC.get_num_microbatches(), verbose=True)
    res['memory_report'] = mem.getvalue()
    res['flops'] = TR.num_floating_point_operations(
        args, NMC.get_current_running_global_batch_size())
    sched(args, res)


def sched(args, res):
    if args.lr is None or args.train_iters is None and args.train_samples is None:
        return
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter('%(levelname)s:%(name)s:%(message)s'))
    logging.getLogger().handlers = [handler]
    with contextlib.redirect_stdout(buf):
        s = TR.get_optimizer_param_scheduler(Opt())
    res['scheduler_log'] = buf.getvalue()
    res['train_iters'] = args.train_iters
    steps = []
    consumed = 0
    with contextlib.redirect_stdout(io.StringIO()):
        for it in range(1, min(args.train_iters, 10 if res['name'].startswith('ci_') else 200) + 1):
            NMC.update_num_microbatches(consumed, consistency_check=False, verbose=True)
            NMC.update_num_microbatches(consumed, consistency_check=True, verbose=True)
            inc = NMC.get_num_microbatches() * args.micro_batch_size * args.data_parallel_size
            s.step(increment=inc)
            consumed += inc
            steps.append([it, NMC.get_num_microbatches(), consumed, s.get_lr(s.optimizer.param_groups[0]),
                          s.get_wd()])
    res['steps'] = steps


HEADER = '------------------------ arguments ------------------------'
FOOTER = '-------------------- end of arguments ---------------------'


def split_stdout(text):
    """(lines before the dump, {name: value} of the dump in printed order, lines after)."""
    lines = text.split('\n')
    if HEADER not in lines:
        return lines, None, []
    a, b = lines.index(HEADER), lines.index(FOOTER)
    dump = {}
    for l in lines[a + 1:b]:
        name = l[2:].split(' ', 1)[0]
        rest = l[2 + len(name) + 1:]
        dump[name] = rest.lstrip('.')[1:] if rest.startswith('.') else rest[1:]
    return lines[:a], dump, lines[b + 1:]


def compact(cases):
    """Keeps the full dump of the first case only; the others store what differs from it."""
    base_pre, base, _ = split_stdout(cases[0]['stdout'])
    for c in cases:
        pre, dump, post = split_stdout(c.pop('stdout'))
        c['stdout_pre'] = pre
        c['stdout_post'] = post
        if dump is None:
            continue
        c['dump_changed'] = {k: v for k, v in dump.items() if base.get(k) != v}
        c['dump_removed'] = [k for k in base if k not in dump]
        c['dump_order'] = list(dump) if c is cases[0] else None
    return base


def usage_text():
    """argparse's usage block as printed before an error (COLUMNS unset: 80 columns)."""
    os.environ.pop('COLUMNS', None)
    sys.argv = ['pretrain_gpt.py', '--lr', 'x']
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            MA.parse_args()
    except SystemExit:
        pass
    return err.getvalue()


def main():
    cases = [run_case(*c) for c in CASES]
    # A check that needs a GPU (device arch) says nothing about a CPU port: leave those out.
    cases = [c for c in cases if 'CUDA' not in c.get('error', '')]
    base = compact(cases)
    out = {'megatron': 'Megatron-LM core_v0.12.1', 'usage': usage_text(), 'baseline_dump': base,
           'cases': cases}
    path = os.path.join(HERE, 'megatron_cli.json')
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(out, f, indent=1)
        f.write('\n')
    os.replace(tmp, path)
    print('make_goldens: %d cases -> %s' % (len(CASES), path))


if __name__ == '__main__':
    main()
