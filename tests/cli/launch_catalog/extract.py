#!/usr/bin/env python3
"""Regenerates the catalog of real launch scripts (tests/cli/launch_catalog/*.args): the
pretrain_gpt argument list of each script or functional-test config named in CATALOG below,
taken from the upstream git history, with the world size it launches with.

Usage: /usr/bin/python3 tests/cli/launch_catalog/extract.py
  (git dirs: MEGATRON_GIT, MINDSPEED_LLM_GIT, MINDSPEED_GIT; default /work/.mirror/<owner>+<name>/repo)

Nothing of those repositories is stored but the argument lists (configuration data).

Shell scripts: run by bash with torchrun/python/tee/mkdir/source/etc. replaced by shell
functions that record the arguments, so that shell variables resolve to the script's own
defaults. Values the user must fill in (positional `$1`, `"your data path"`,
`<Specify path ...>`) become /path/to/<VAR>. The world size is the script's WORLD_SIZE, else
GPUS/NPUS_PER_NODE x NNODES/NUM_NODES, else torchrun's --nproc_per_node x --nnodes.

Functional-test configs (model_config.yaml): MODEL_ARGS turned into an argument list the way
Megatron's tests/functional_tests/shell_test_utils/_run_training.sh does (`true` -> bare flag,
any other value -> the value's words); `${VAR}` -> /path/to/VAR. The harness's own
--exit-duration-in-mins (computed from the SLURM job's time) is left out. World size: the
config's node/GPU count from its name (`1N8G` -> 8), 8 (dgx_a100/h100 1N8G) when not named.

Args file format: `# key: value` header lines (source, world_size), then one option per line
with its values, shell-quoted."""
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

MIRROR = '/work/.mirror'
GITS = {
    'NVIDIA/Megatron-LM': os.environ.get('MEGATRON_GIT', MIRROR + '/NVIDIA+Megatron-LM/repo'),
    'Ascend/MindSpeed-LLM': os.environ.get('MINDSPEED_LLM_GIT',
                                           MIRROR + '/Ascend+MindSpeed-LLM/repo'),
    'Ascend/MindSpeed': os.environ.get('MINDSPEED_GIT', MIRROR + '/Ascend+MindSpeed/repo'),
}
MEG = ('NVIDIA/Megatron-LM', 'core_v0.12.1')
MSL = ('Ascend/MindSpeed-LLM', 'dfe2e3b0040acc4beb81d7cf48553ff14a8a7390')  # master 2026-02-03
MSL_LEGACY = ('Ascend/MindSpeed-LLM', '330ce601683b20c51aa26827aeb98b24f336bcc3')  # 2025-07-12
MS = ('Ascend/MindSpeed', '028de58ca629d035185b00ff7d1eb7eff4f7fd48')

FT = 'tests/functional_tests/test_cases/gpt/%s/model_config.yaml'
FT_CASES = '''
gpt3_mr_mcore_te_tp2_pp2_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_swiglu_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_untie_embeddings_and_outputs_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_sequence_parallel_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_disable_bias_linear_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp2_rope_embeddings_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp2_rope_embeddings_interleaved_no_fusion_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_vp1_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_vp1_decoupled_lr_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_vp1_uneven_pipeline_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_vp1_calculate_per_token_loss_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp4_vp1_dist_optimizer_overlap_grad_reduce_param_gather_dgx_a100_1N8G
gpt3_mr_mcore_te_tp4_pp1_qk_layernorm_test_mode_dgx_a100_1N8G
gpt3_mr_mcore_te_tp4_pp1_dist_optimizer_overlap_grad_reduce_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp1_uniform_full_recompute_dgx_a100_1N8G
gpt3_mr_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files_dgx_a100_1N8G
gpt3_mr_mcore_te_tp2_pp2_cross_entropy_loss_fusion_dgx_a100_1N8G
gpt3_mr_mcore_te_tp2_pp2_ddp_average_in_collective_dgx_a100_1N8G
gpt3_mr_mcore_te_tp2_pp2_defer_embedding_wgrad_compute_dgx_a100_1N8G
gpt3_mr_mcore_te_tp2_pp2_no_create_attention_mask_in_dataloader_dgx_a100_1N8G
gpt3_mr_mcore_tp2_pp2_uninstall_te_dgx_a100_1N8G
gpt3_mr_tp2_pp2_dgx_a100_1N8G
gpt3_mr_tp1_pp4_vp1_dgx_a100_1N8G
gpt3_345m_nightly_dgx_a100_1N8G_mcore_tp1_pp2_fp16
gpt3_345m_nightly_dgx_a100_1N8G_mcore_tp4_pp1
gpt3_345m_weekly_dgx_h100_1N8G_mcore_tp1_pp1_bf16_baseline
gpt3_7b_mr_dgx_a100_1N8G_tp1_pp4_memory_speed
'''.split()

# (repo, commit, path, catalog name)
CATALOG = (
    [MEG + ('examples/gpt3/train_gpt3_175b_distributed.sh', 'gpt3_175b'),
     MEG + ('examples/mixtral/train_mixtral_8x7b_distributed.sh', 'mixtral_8x7b')] +
    [MEG + (FT % c, 'ft_' + c) for c in FT_CASES] +
    [MSL + ('examples/mcore/%s/pretrain_%s.sh' % (d, n), n) for d, n in [
        ('llama2', 'llama2_7b_ptd'), ('llama2', 'llama2_13b_ptd'), ('llama2', 'llama2_70b_ptd'),
        ('llama3', 'llama3_8b_ptd'), ('llama31', 'llama31_8b_8k_ptd'),
        ('llama32', 'llama32_1b_8k_ptd'), ('llama33', 'llama33_70b_8k_ptd'),
        ('qwen25', 'qwen25_7b_32k_ptd'), ('qwen3', 'qwen3_8b_4K_ptd'),
        ('internlm25', 'internlm25_7b_32k_ptd'), ('baichuan2', 'baichuan2_13b_ptd')]] +
    [MSL_LEGACY + ('examples/legacy/mistral/pretrain_mistral_7b_ptd.sh', 'legacy_mistral_7b_ptd')] +
    [MS + ('tests_extend/example/train_distributed.sh', 'train_distributed')]
)

SHORT = {'NVIDIA/Megatron-LM': 'megatron', 'Ascend/MindSpeed-LLM': 'mindspeed_llm',
         'Ascend/MindSpeed': 'mindspeed'}

STUBS = r'''
__emit() { printf '%s\0' "$@" > "$CAT_OUT"; printf '%s\n' "${WORLD_SIZE:-}" \
  "${GPUS_PER_NODE:-${NPUS_PER_NODE:-${NPROC_PER_NODE:-}}}" "${NNODES:-${NUM_NODES:-1}}" \
  > "$CAT_OUT.ws"; exit 0; }
torchrun() { __emit "$@"; }
python() { __emit "$@"; }
python3() { __emit "$@"; }
msrun() { __emit "$@"; }
tee() { cat > /dev/null; }
mkdir() { :; }
source() { :; }
rm() { :; }
'''


def git_show(repo, commit, path):
    return subprocess.run(['git', '--git-dir', GITS[repo], 'show', commit + ':' + path],
                          check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout


def fill_placeholders(text):
    """Values a user must fill in -> /path/to/<VAR> (names the variable, so the test knows it)."""
    # VAR=$1 (positional), VAR="your data path", VAR=<Specify path ...>, VAR="two words".
    pat = r'^(\s*(?:export\s+)?)(\w+)=(\$\d+|["\']?your[^\n#]*?|<[^\n#]*?|"[^"$\n]* [^"$\n]*")(\s+#.*)?$'
    return re.sub(pat, r'\1\2=/path/to/\2\4', text, flags=re.M)


def world_from_torchrun(argv):
    def opt(name, default):
        for k, a in enumerate(argv):
            if a == name and k + 1 < len(argv):
                return int(argv[k + 1])
            if a.startswith(name + '='):
                return int(a.split('=', 1)[1])
        return default
    return opt('--nproc_per_node', 1) * opt('--nnodes', 1)


def extract_shell(text):
    text = fill_placeholders(text)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'argv')
        subprocess.run(['bash', '-c', STUBS + text], cwd=d, check=True,
                       stdout=subprocess.DEVNULL,
                       env={'PATH': '/usr/bin:/bin', 'CAT_OUT': out, 'HOME': d})
        argv = open(out).read().split('\0')[:-1]
        ws, per_node, nodes = (open(out + '.ws').read().split('\n') + ['', '', ''])[:3]
    i = next(k for k, a in enumerate(argv) if a.endswith('.py'))
    if ws:
        world = int(ws)
    elif per_node:
        world = int(per_node) * int(nodes or 1)
    else:
        world = world_from_torchrun(argv[:i])
    return argv[i + 1:], world


def yaml_model_args(text):
    """MODEL_ARGS of a functional-test config: [(key, value string)] in order (a flat mapping
    of `--key: value` lines; comments dropped)."""
    out, inside = [], False
    for line in text.split('\n'):
        if re.match(r'^\S', line):
            inside = line.startswith('MODEL_ARGS:')
            continue
        if not inside or not line.strip() or line.strip().startswith('#'):
            continue
        m = re.match(r'^\s+(--[\w-]+):\s*(.*)$', line)
        if not m:
            raise SystemExit('unexpected MODEL_ARGS line: %r' % line)
        value = re.sub(r'\s+#.*$', '', m.group(2)).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in '"\'':
            value = value[1:-1]
        out.append((m.group(1), value))
    return out


def extract_yaml(text, path):
    argv = []
    for key, value in yaml_model_args(text):
        value = re.sub(r'\$\{(\w+)\}', r'/path/to/\1', value)
        argv.append(key)
        if value != 'true':
            argv += value.split()
    m = re.search(r'(\d+)N(\d+)G', path)
    return argv, int(m.group(1)) * int(m.group(2)) if m else 8


def option_lines(argv):
    """One line per option with its values (a value never starts with --<letter>)."""
    lines = []
    for a in argv:
        if re.match(r'^--[A-Za-z]', a) or not lines:
            lines.append([a])
        else:
            lines[-1].append(a)
    return [' '.join(shlex.quote(x) for x in l) for l in lines]


def main():
    names = set()
    for repo, commit, path, name in CATALOG:
        fname = '%s__%s.args' % (SHORT[repo], name)
        assert fname not in names, fname
        names.add(fname)
        text = git_show(repo, commit, path)
        if path.endswith('.yaml'):
            argv, world = extract_yaml(text, path)
        else:
            argv, world = extract_shell(text)
        body = ['# source: %s@%s:%s' % (repo, commit, path), '# world_size: %d' % world]
        body += option_lines(argv)
        tmp = os.path.join(HERE, fname + '.tmp')
        with open(tmp, 'w') as f:
            f.write('\n'.join(body) + '\n')
        os.replace(tmp, os.path.join(HERE, fname))
        print('%-70s world %4d  %3d options' % (fname, world, len(body) - 2))
    print('%d scripts' % len(CATALOG))


if __name__ == '__main__':
    sys.exit(main())
