#!/usr/bin/env python3
"""Generates src/training/args_table.{c,h} (the option table of pretrain_gpt) from
shared/spec/megatron_argument_catalog.json (every argparse action of Megatron-LM core_v0.12.1).

Usage: python3 scripts/gen_args_table.py [path/to/megatron_argument_catalog.json]
(default: ../shared/spec/ relative to the repository's parent). The catalog is read at generation
time only; the generated C files are committed.

Each option also gets a support class (the SUPPORTED / NOOP / UNUSED sets below); everything not
listed is UNSUPPORTED: refused at start-up when given with a value other than its default."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Options megatron.c implements (model, parallel layout, data, optimizer, schedules, logging,
# checkpoints). Value-level limits (e.g. --position-embedding-type mrope) are checked in args.c.
SUPPORTED = set('''
num_layers encoder_num_layers hidden_size ffn_hidden_size num_attention_heads kv_channels
group_query_attention num_query_groups max_position_embeddings position_embedding_type
use_rotary_position_embeddings rotary_base rotary_percent rotary_interleaved use_rope_scaling
rope_scaling_factor add_position_embedding make_vocab_size_divisible_by normalization norm_epsilon
squared_relu swiglu untie_embeddings_and_output_weights
attention_dropout hidden_dropout weight_decay start_weight_decay end_weight_decay
weight_decay_incr_style clip_grad adam_beta1 adam_beta2 adam_eps sgd_momentum
micro_batch_size batch_size global_batch_size rampup_batch_size decrease_batch_size_if_needed
check_for_nan_in_loss_and_grad iterations_to_skip calculate_per_token_loss
checkpoint_activations sequence_parallel train_iters train_samples log_interval exit_interval
exit_duration_in_mins exit_signal_handler bias_gelu_fusion add_bias_linear add_qkv_bias
optimizer dataloader_type use_cpu_initialization
seed data_parallel_random_init init_method_std
lr lr_decay_style lr_wsd_decay_style lr_decay_iters lr_decay_samples lr_wsd_decay_samples
lr_wsd_decay_iters lr_warmup_fraction lr_warmup_iters lr_warmup_samples lr_warmup_init warmup
min_lr override_opt_param_scheduler use_checkpoint_opt_param_scheduler
save save_interval no_save_optim no_save_rng load no_load_optim no_load_rng finetune
exit_on_missing_checkpoint ckpt_format async_save use_dist_ckpt_deprecated dist_ckpt_format_deprecated
ckpt_fully_parallel_save_deprecated ckpt_fully_parallel_save ckpt_step perform_initialization
ckpt_convert_format ckpt_convert_save auto_detect_ckpt_format dist_ckpt_strictness
fp16 bf16 loss_scale initial_loss_scale min_loss_scale loss_scale_window hysteresis
fp32_residual_connection apply_query_key_layer_scaling attention_softmax_in_fp32 apply_layernorm_1p
accumulate_allreduce_grads_in_fp32 grad_reduce_in_bf16 fp16_lm_cross_entropy use_precision_aware_optimizer
tensor_model_parallel_size encoder_tensor_model_parallel_size pipeline_model_parallel_size
encoder_pipeline_model_parallel_size model_parallel_size use_distributed_optimizer
num_layers_per_virtual_pipeline_stage num_virtual_stages_per_pipeline_rank
microbatch_group_size_per_vp_stage overlap_p2p_comm
context_parallel_size expert_model_parallel_size expert_tensor_parallel_size num_experts
data_parallel_sharding_strategy num_distributed_optimizer_instances
eval_iters eval_interval skip_train
data_path split train_data_path valid_data_path test_data_path data_cache_path mock_data
seq_length encoder_seq_length reset_position_ids reset_attention_mask eod_mask_loss
vocab_size vocab_file merge_file vocab_extra_ids tokenizer_type tokenizer_model
log_params_norm log_num_zeros_in_grad log_throughput log_progress timing_log_level
timing_log_option logging_level main_grads_dtype main_params_dtype exp_avg_dtype exp_avg_sq_dtype
moe_layer_freq moe_ffn_hidden_size lazy_mpu_init yaml_cfg use_legacy_models
tensorboard_dir tensorboard_log_interval tensorboard_queue_size log_timers_to_tensorboard
log_loss_scale_to_tensorboard log_validation_ppl_to_tensorboard log_world_size_to_tensorboard
distributed_timeout_minutes
overlap_grad_reduce overlap_param_gather ddp_bucket_size ddp_pad_buckets_for_high_nccl_busbw
ddp_average_in_collective ddp_num_buckets
log_memory_to_tensorboard
test_mode check_weight_hash_across_dp_replicas_interval
recompute_activations recompute_granularity recompute_method recompute_num_layers recompute_modules
distribute_saved_activations
attention_backend use_flash_attn
qk_layernorm decoupled_lr decoupled_min_lr
decoder_first_pipeline_num_layers decoder_last_pipeline_num_layers
spec
moe_router_topk moe_router_load_balancing_type moe_router_score_function moe_router_pre_softmax
moe_aux_loss_coeff moe_z_loss_coeff moe_token_dispatcher_type moe_per_layer_logging moe_grouped_gemm
'''.split())

# CUDA / performance knobs that do not change results on a CPU: accepted, no effect.
NOOP = set('''
masked_softmax_fusion bias_swiglu_fusion bias_dropout_fusion
apply_rope_fusion cross_entropy_loss_fusion cross_entropy_fusion_impl gradient_accumulation_fusion
async_tensor_model_parallel_allreduce no_persist_layer_norm
moe_layer_recompute
overlap_param_gather_with_optimizer_step
align_grad_reduce align_param_gather overlap_p2p_comm_warmup_flush
scatter_gather_tensors_in_pipeline use_ring_exchange_p2p gradient_reduce_div_fusion defer_embedding_wgrad_compute
wgrad_deferral_limit tp_comm_overlap tp_comm_overlap_cfg tp_comm_overlap_ag tp_comm_overlap_rs
tp_comm_overlap_rs_dgrad tp_comm_bulk_dgrad tp_comm_bulk_wgrad tp_comm_bootstrap_backend
tp_comm_split_ag tp_comm_split_rs pipeline_model_parallel_comm_backend
empty_unused_memory_level distributed_backend local_rank
manual_gc manual_gc_interval manual_gc_eval num_workers pin_cpu_grads pin_cpu_params
deprecated_use_mcore_models transformer_impl disable_bf16_reduced_precision_matmul
mmap_bin_files create_attention_mask_in_dataloader num_dataset_builder_threads deterministic_mode
ckpt_fully_parallel_load ckpt_assume_constant_structure use_persistent_ckpt_worker
barrier_with_L1_time nccl_communicator_config_path
profile profile_step_start profile_step_end use_pytorch_profiler profile_ranks
record_memory_history memory_snapshot_path enable_one_logger one_logger_project
one_logger_run_name one_logger_async app_tag_run_name app_tag_run_version
enable_cuda_graph cuda_graph_warmup_steps external_cuda_graph cuda_graph_scope
te_rng_tracker inference_rng_tracker enable_gloo_process_groups clone_scatter_output_in_embedding
onnx_safe init_model_with_meta_device train_sync_interval config_logger_dir
use_tokenizer_model_from_checkpoint_args s3_cache_path
'''.split())

# Groups whose options pretrain_gpt.py of Megatron itself never reads (BERT/ICT, vision,
# inference server): accepted with no effect, as in Megatron.
UNUSED_GROUPS = {'biencoder', 'vision', 'inference'}
UNUSED_EXTRA = set('''
decoder_num_layers bert_binary_head retriever_seq_length sample_rate mask_prob short_seq_prob
relative_attention_num_buckets relative_attention_max_distance adlr_autoresume_interval
mtp_loss_scaling_factor decoder_seq_length
'''.split())
NOT_UNUSED = {'qk_layernorm'}  # in the vision group but a GPT option

# megatron.c extensions, not in Megatron's parser (absent from the arguments dump).
# (option, dest, type, note)
EXTENSIONS = [
    ('--dry-run', 'dry_run', 'flag(store_true)',
     'megatron.c: validate the arguments, print the start-up report and the memory/FLOP '
     'estimate, then exit'),
    ('--use-fused-rmsnorm', 'use_fused_rmsnorm', 'flag(store_true)',
     'MindSpeed fused kernel: same results, no effect in megatron.c'),
    ('--use-fused-swiglu', 'use_fused_swiglu', 'flag(store_true)',
     'MindSpeed fused kernel: same results, no effect in megatron.c'),
    ('--use-fused-rotary-pos-emb', 'use_fused_rotary_pos_emb', 'flag(store_true)',
     'MindSpeed fused kernel: same results, no effect in megatron.c'),
    ('--use-fused-ring-attention-update', 'use_fused_ring_attention_update', 'flag(store_true)',
     'MindSpeed fused kernel: same results, no effect in megatron.c'),
    ('--use-mc2', 'use_mc2', 'flag(store_true)',
     'MindSpeed matmul+collective fusion: same results, no effect in megatron.c'),
    ('--use-ascend-mc2', 'use_ascend_mc2', 'flag(store_true)',
     'MindSpeed matmul+collective fusion: same results, no effect in megatron.c'),
    ('--use-fused-moe-token-permute-and-unpermute', 'use_fused_moe_token_permute_and_unpermute',
     'flag(store_true)', 'MindSpeed fused kernel: same results, no effect in megatron.c'),
    ('--trust-remote-code', 'trust_remote_code', 'flag(store_true)',
     'MindSpeed: lets transformers run a model repository\'s own Python code; megatron.c never '
     'executes remote code (its HF tokenizer reads only tokenizer.json/tokenizer_config.json)'),
    ('--use-ascend-coc', 'use_ascend_coc', 'flag(store_true)',
     'MindSpeed compute-communication overlap: same results, no effect in megatron.c'),
    ('--coc-fused-kernel', 'coc_fused_kernel', 'flag(store_true)',
     'MindSpeed compute-communication overlap: same results, no effect in megatron.c'),
    # MindSpeed-LLM options megatron.c implements (mindspeed_llm/features_manager/tokenizer/
    # build_tokenizer.py): value-taking, default None, used (no "accepted" note).
    ('--tokenizer-name-or-path', 'tokenizer_name_or_path', 'str',
     'MindSpeed-LLM: local HuggingFace tokenizer directory for --tokenizer-type '
     'PretrainedFromHF (tokenizer.json, tokenizer_config.json)'),
    ('--padded-vocab-size', 'padded_vocab_size', 'int',
     'MindSpeed-LLM: the padded vocabulary size itself, used as given instead of rounding up '
     'to --make-vocab-size-divisible-by x tp'),
    # mindspeed_llm/features_manager/common/rotary.py: Llama-3.x RoPE scaling with its constants
    ('--rope-scaling-type', 'rope_scaling_type', 'str',
     'MindSpeed-LLM: RoPE scaling variant; llama3 (with --rope-scaling-factor, '
     '--low-freq-factor, --high-freq-factor, --original-max-position-embeddings) is '
     'implemented, yarn / longrope / plm are refused'),
    ('--low-freq-factor', 'low_freq_factor', 'float',
     'MindSpeed-LLM: llama3 RoPE scaling, low-frequency factor (Megatron fixes 1)'),
    ('--high-freq-factor', 'high_freq_factor', 'float',
     'MindSpeed-LLM: llama3 RoPE scaling, high-frequency factor (Megatron fixes 4)'),
    ('--original-max-position-embeddings', 'original_max_position_embeddings', 'float',
     'MindSpeed-LLM: llama3 RoPE scaling, pretraining context length (Megatron fixes 8192)'),
    # mindspeed_llm/features_manager/pipeline_parallel/num_layer_list (NumLayerListFeature)
    ('--num-layer-list', 'num_layer_list', 'str',
     'MindSpeed-LLM: transformer layers of each pipeline stage, comma separated (e.g. 4,4,4,4; '
     'one per stage, summing to --num-layers)'),
    # mindspeed/core/memory/reuse_param: the bf16 weights live inside the fp32 main weights'
    # storage (fp32 = bf16 + 16-bit residual); a memory layout, not a different update
    ('--reuse-fp32-param', 'reuse_fp32_param', 'flag(store_true)',
     'MindSpeed memory saving (bf16 only): shares the bf16 weights\' and fp32 main weights\' '
     'storage, 2 bytes a parameter (/ DP with the distributed optimizer); megatron.c keeps both '
     'copies, same results as MindSpeed with --npu-deterministic (docs/cli-differences.md)'),
    # mindspeed_llm/training/arguments.py (legacy, Mistral): npu_fusion_attention's band
    ('--sliding-window', 'sliding_window', 'int',
     'MindSpeed-LLM: sliding-window attention, each query sees itself and the W keys before it '
     '(Mistral)'),
    # mindspeed_llm/features_manager/transformer/flash_attention/alibi_feature.py
    ('--square-alibi-mask', 'square_alibi_mask', 'flag(store_true)',
     'MindSpeed-LLM: with --position-embedding-type alibi, the [s, s] bias slope * (j - i) '
     'instead of the [1, s] row slope * j (the same softmax up to rounding)'),
    ('--fill-neg-inf', 'fill_neg_inf', 'flag(store_true)',
     'MindSpeed-LLM: with --position-embedding-type alibi, fill the future keys of the bias with '
     '-inf; the same results as the causal mask alone (both give those keys probability 0)'),
    ('--log-memory-estimate', 'log_memory_estimate', 'flag(store_true)',
     'megatron.c: at the end of training, print the theoretical memory estimate (as --dry-run) '
     'beside the measured peak, by category (docs/memory.md)'),
    ('--recompute-auto-budget-gb', 'recompute_auto_budget_gb', 'float',
     'megatron.c: an activation-memory budget in GB (2^30 bytes) per rank; picks the full '
     'recompute with the fewest recomputed layers per model chunk whose estimate fits and says '
     'so in the log; not with --recompute-granularity/-method/-num-layers (docs/recompute.md)'),
    # precision alignment (docs/alignment.md): tensor dumps of chosen iterations
    ('--dump-dir', 'dump_dir', 'str',
     'megatron.c: write tensor dumps (docs/formats/dump.md) of the chosen iterations to '
     'DIR/iter_NNNNNNN/rank_NNNNN.dump, named by Megatron module/parameter names '
     '(docs/alignment.md)'),
    ('--dump-iters', 'dump_iters', 'str',
     'megatron.c: with --dump-dir, the iterations to dump: a list of numbers and ranges such as '
     '"1,3" or "1-2" (default 1)'),
    ('--dump-ranks', 'dump_ranks', 'str',
     'megatron.c: with --dump-dir, the global ranks that write dumps, as "0,2" or "0-3" '
     '(default all)'),
    ('--dump-points', 'dump_points', 'str',
     'megatron.c: with --dump-dir, a comma list of what to dump among batch, forward, backward, '
     'params, grads, optimizer, loss (default all)'),
    # docs/alignment.md section 4b: the 16-bit elementwise rounding points of the reference
    ('--rounding-points', 'rounding_points', 'str',
     'megatron.c: where --bf16/--fp16 elementwise ops round, to match the platform the reference '
     'ran on. fused (default): Megatron on a GPU (fused bias-GELU/SwiGLU/dropout-add, fp32 norm '
     'statistics, each op rounded once). torch-cpu: Megatron run by PyTorch on a CPU (those '
     'functions and RoPE as separate 16-bit torch ops, LayerNorm statistics and weight-grad '
     'sums in 16 bits as torch\'s one-thread CPU kernel); slower, for aligning with such runs. '
     'No effect in fp32',
     (['fused', 'torch-cpu'], 'fused')),
]

# MindSpeed / MindSpeed-LLM options refused by name (they change results or need features
# megatron.c lacks). Value-taking ones list how many values follow (the parser skips nothing:
# the run stops at the first one).
MINDSPEED_REFUSED = '''
--context-parallel-algo --use-cp-send-recv-overlap
--first-k-dense-replace --moe-permutation-async-comm --no-shared-storage --n-shared-experts
--moe-intermediate-size --multi-head-latent-attention --qk-rope-head-dim --qk-nope-head-dim
--rope-scaling-beta-fast --rope-scaling-beta-slow --rope-scaling-mscale
--rope-scaling-mscale-all-dim --rope-scaling-original-max-position-embeddings --shape-order
--handler-name --enable-hf2mg-convert --model-type-hf --prompt-type
--tokenizer-not-use-fast --use-deter-comp --sparse-mode --use-distributed-optimizer-swap
--moe-alltoall-overlap-comm --moe-tp-extend-ep --moe-zero-memory --recompute-in-advance
--recompute-activation-function --swap-attention --adaptive-recompute-device-swap
--gemm-gradient-accumulation-fusion --noop-layers --input-layernorm-in-fp32 --o2-optimizer
--o2-gradient --lora-r --lora-alpha --lora-target-modules --dataset-additional-keys
--overlap-param-gather-with-optimizer-step-mindspeed --load-checkpoint-loosely
--jit-compile --use-flash-attn-mindspeed
--norm-topk-prob
--gelu-tanh --post-norm --query-pre-attn-scalar --output-logit-softcapping
--interleave-sliding-window --add-rmsnorm-offset --input-embeds-norm --tokenizer-padding-side
--longrope-freqs-type --long-factor --short-factor --tokenizer-kwargs
'''.split()

# Values that MindSpeed-LLM adds to the choices of Megatron options: refused by name (exit 2)
# instead of argparse's "invalid choice" (option and value as the user wrote them).
MINDSPEED_REFUSED_VALUES = [
    ('--tokenizer-type', 'MagistralTokenizer'),
]

# Settings of SUPPORTED options that this build refuses by value (src/training/refusals.c holds
# the checks; this is the note --help prints next to the option). Keep the two in step.
LIMITS = {
    'fp32_residual_connection': "with --bf16/--fp16 upstream's fp32 stream (not 0.12.1's, COMPATIBILITY.md); refused with --sequence-parallel, --distribute-saved-activations, --num-experts",
    'use_precision_aware_optimizer': 'Transformer Engine FusedAdam\'s update and state dtypes (docs/loss-scaling.md); checkpoints hold the fp32 masters and unscaled states; fp8 states refused',
    'fp16_lm_cross_entropy': 'needs --fp16; no numeric effect, as in Megatron core_v0.12.1 (its cross entropy widens the logits to fp32 either way)',
    'main_grads_dtype': 'only fp32 without --use-precision-aware-optimizer, as in Megatron',
    'exp_avg_dtype': 'fp8 refused (no Float8Tensor on a CPU); fp16 scaled per tensor as TE FusedAdam',
    'exp_avg_sq_dtype': 'fp8 refused (no Float8Tensor on a CPU); fp16 scaled per tensor as TE FusedAdam',
    'ckpt_format': '--save writes torch and torch_dist (torch_dist: fp32, bf16 and fp16, the ordinary or the distributed optimizer; the distributed optimizer with --no-ckpt-fully-parallel-save is refused by name); --load reads torch and torch_dist',
    'use_dist_ckpt_deprecated': 'deprecated, no effect (--ckpt-format chooses the format)',
    'dist_ckpt_strictness': 'torch_dist loads: Megatron\'s checks and messages for unexpected and missing keys; return_* report nothing (Megatron\'s load_checkpoint has no taker for the returned keys)',
    'async_save': 'torch_dist only (with --ckpt-format torch refused, as Megatron does); holds a host copy of the saved state until the save is finalized',
    'context_parallel_size': 'values above 1 refused',
    'num_experts': 'expert-parallel size 1, tensor-parallel size 1, no biases (docs/moe.md)',
    'moe_router_load_balancing_type': 'sinkhorn refused',
    'moe_grouped_gemm': 'refused: GroupedMLP / TEGroupedMLP checkpoint names (the experts run as SequentialMLP)',
    'moe_token_dispatcher_type': 'allgather and alltoall (the same at expert-parallel size 1); flex and alltoall_seq refused',
    'expert_model_parallel_size': 'values above 1 refused',
    'encoder_tensor_model_parallel_size': 'values above 0 refused',
    'encoder_pipeline_model_parallel_size': 'values above 0 refused',
    'data_parallel_sharding_strategy': 'only no_shard and optim',
    'num_distributed_optimizer_instances': 'only 1',
    'position_embedding_type': 'mrope and relative refused; alibi is MindSpeed-LLM\'s ALiBi (COMPATIBILITY.md)',
    'tokenizer_type': 'BertWordPiece* and *MultimodalTokenizer refused',
    'num_layers_per_virtual_pipeline_stage': 'at most 64 chunks; 1 chunk refused',
    'num_virtual_stages_per_pipeline_rank': 'at most 64; 1 refused',
    'spec': 'only MindSpeed-LLM\'s mindspeed_llm.tasks.models.spec.qwen3_spec layer_spec (the '
            'local spec\'s layers), with --transformer-impl local',
}

HELP_FILE = os.path.join(HERE, 'args_help.txt')


def read_help():
    """{option: one-line description} from args_help.txt ('--option<TAB>text'; '#' comments)."""
    out = {}
    with open(HELP_FILE) as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith('#'):
                continue
            opt, sep, text = line.rstrip('\n').partition('\t')
            assert sep and text.strip(), '%s:%d: want "--option<TAB>description"' % (HELP_FILE, n)
            assert opt not in out, '%s:%d: %s twice' % (HELP_FILE, n, opt)
            out[opt] = text.strip()
    return out


KIND = {'int': 'MC_ARGT_INT', 'float': 'MC_ARGT_FLOAT', 'str': 'MC_ARGT_STR',
        'flag(store_true)': 'MC_ARGT_STORE_TRUE', 'flag(store_false)': 'MC_ARGT_STORE_FALSE',
        'bool': 'MC_ARGT_BOOL', '<lambda>': 'MC_ARGT_ATTN_BACKEND',
        'moe_freq_type': 'MC_ARGT_MOE_FREQ'}

# Attributes that validate_args adds (they appear in the arguments dump).
DERIVED = ['rank', 'world_size', 'data_parallel_size', 'transformer_pipeline_model_parallel_size',
           'virtual_pipeline_model_parallel_size', 'params_dtype', 'consumed_train_samples',
           'consumed_valid_samples', 'skipped_train_samples', 'variable_seq_lengths',
           'use_dist_ckpt']


def cstr(s):
    if s is None:
        return 'NULL'
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'


def default_fields(d):
    """(kind, int, double, string, list items) of a Python default."""
    if d is None:
        return 'MC_V_NONE', 0, '0.0', None, None
    if isinstance(d, bool):
        return 'MC_V_BOOL', int(d), '0.0', None, None
    if isinstance(d, int):
        return 'MC_V_INT', d, '0.0', None, None
    if isinstance(d, float):
        return 'MC_V_FLOAT', 0, repr(d), None, None
    if isinstance(d, str):
        if d.startswith('AttnBackend.'):
            return 'MC_V_SYM', 0, '0.0', d, None
        return 'MC_V_STR', 0, '0.0', d, None
    if isinstance(d, list):
        return 'MC_V_LIST', 0, '0.0', None, [str(x) for x in d]
    raise SystemExit('unexpected default %r' % (d,))


def choices_of(a):
    """Choices as C strings (a None choice stays as "None": args.c never matches it, since a
    parsed value is a string); --distributed-backend also takes the MindSpeed/MPI spellings
    (all mean MPI here)."""
    ch = ['None' if x is None else x for x in (a['choices'] or [])]
    if a['dest'] == 'distributed_backend':
        ch += ['hccl', 'mpi']
    if a['dest'] == 'position_embedding_type':
        ch += ['alibi']  # MindSpeed-LLM's AlibiFeature (Baichuan2)
    if a['dest'] == 'tokenizer_type':
        ch += ['PretrainedFromHF']  # MindSpeed-LLM's AutoTokenizer over a local directory
    return ch


def support_of(a):
    dest = a['dest']
    if dest in SUPPORTED:
        return 'MC_ARG_SUPPORTED'
    if dest in NOOP:
        return 'MC_ARG_NOOP'
    if dest in UNUSED_EXTRA or (a['group'] in UNUSED_GROUPS and dest not in NOT_UNUSED):
        return 'MC_ARG_UNUSED'
    return 'MC_ARG_UNSUPPORTED'


SUPPORT_WORDS = {'MC_ARG_SUPPORTED': 'supported', 'MC_ARG_NOOP': 'accepted, no effect',
                 'MC_ARG_UNUSED': 'accepted, not used by GPT', 'MC_ARG_UNSUPPORTED': '**refused**',
                 'MC_ARG_EXTENSION': 'megatron.c extension'}


def write_options_doc(rows, helps):
    """docs/cli-options.md: every option with its support class, grouped by class, then every
    option with its description, grouped as Megatron's argparse groups them (as --help)."""
    titles = [
        ('MC_ARG_SUPPORTED', 'Supported',
         'Parsed, validated and (where it applies) used by the front end: dry run, memory and '
         'FLOP estimates, micro-batches, LR/WD schedule, log text, model/optimizer configs '
         '(src/training/model_config.c). The training loop, when it lands, must honour each of '
         'these or add it to the refused set. Some values are refused at start-up (see '
         'cli-differences.md).'),
        ('MC_ARG_NOOP', 'Accepted, no effect (CUDA / performance knobs)',
         'These change speed or memory on a GPU, not results; megatron.c accepts and ignores them.'),
        ('MC_ARG_UNUSED', 'Accepted, not used by GPT pretraining',
         "Megatron's own pretrain_gpt.py does not read them either (BERT/ICT, vision, inference)."),
        ('MC_ARG_UNSUPPORTED', 'Not supported yet: refused at start-up',
         'Given with a value other than the default, pretrain_gpt stops before training with '
         '"NotImplementedError: --<option> is not supported by megatron.c yet" (exit 1), one '
         'line per refused option, all of them at once (rank 0 only under mpirun). --dry-run '
         'reports the same list (src/training/refusals.c) and exits 1. Some values of '
         'supported options are refused too (the "megatron.c" column below).'),
        ('MC_ARG_EXTENSION', 'megatron.c extensions',
         'Not in Megatron\'s parser: --dry-run, and MindSpeed fused-kernel flags accepted with a '
         'one-line note.'),
    ]
    lines = ['# pretrain_gpt options and their support in megatron.c', '',
             'GENERATED by scripts/gen_args_table.py from megatron_argument_catalog.json '
             '(Megatron-LM core_v0.12.1, 455 options). Do not edit.', '']
    for cls, title, text in titles:
        sel = [a for a, sup, note in rows if sup == cls]
        lines += ['## %s (%d)' % (title, len(sel)), '', text, '']
        lines += [', '.join('`%s`' % '/'.join(a['options']) for a in sel), '']
    lines += ['MindSpeed / MindSpeed-LLM options refused by name (exit 2, '
              '"--x is a MindSpeed option that megatron.c does not support yet"):', '',
              ', '.join('`%s`' % o for o in MINDSPEED_REFUSED), '',
              'MindSpeed-LLM values of Megatron options refused by name (exit 2, '
              '"--x y is a MindSpeed option value that megatron.c does not support yet"):', '',
              ', '.join('`%s %s`' % ov for ov in MINDSPEED_REFUSED_VALUES), '']
    lines += ['## Every option, by group', '',
              'The groups and their order are those of Megatron\'s argparse parser '
              '(`pretrain_gpt --help` prints the same). The descriptions are megatron.c\'s own '
              '(scripts/args_help.txt).', '']
    group = None
    for a, sup, note in rows:
        if a['group'] != group:
            group = a['group']
            lines += ['', '### %s' % group, '', '| option | what it does | megatron.c |',
                      '|---|---|---|']
        text = note or helps[a['options'][0]]
        status = SUPPORT_WORDS[sup]
        if LIMITS.get(a['dest']):
            status += '; ' + LIMITS[a['dest']]
        lines.append('| `%s` | %s | %s |' % ('`, `'.join(a['options']), text.replace('|', '\\|'),
                                               status))
    lines.append('')
    path = os.path.join(ROOT, 'docs', 'cli-options.md')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + '.tmp', 'w') as f:
        f.write('\n'.join(lines))
    os.replace(path + '.tmp', path)


def main():
    cat_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, '..', '..', 'shared', 'spec', 'megatron_argument_catalog.json')
    if not os.path.exists(cat_path):
        cat_path = '/work/shared/spec/megatron_argument_catalog.json'
    cat = json.load(open(cat_path))
    args = cat['arguments']
    assert len(args) == 455, len(args)
    dests = [a['dest'] for a in args]
    for s in (SUPPORTED, NOOP, UNUSED_EXTRA):
        unknown = s - set(dests)
        assert not unknown, unknown
    ids = dests + DERIVED + [e[1] for e in EXTENSIONS]
    assert len(set(ids)) == len(ids)
    helps = read_help()
    missing = [a['options'][0] for a in args if a['options'][0] not in helps]
    assert not missing, 'no description in args_help.txt for %s' % missing
    extra = set(helps) - {a['options'][0] for a in args}
    assert not extra, 'args_help.txt describes unknown options %s' % sorted(extra)
    unknown_limits = set(LIMITS) - set(dests)
    assert not unknown_limits, unknown_limits

    h = []
    h.append('/* GENERATED by scripts/gen_args_table.py from megatron_argument_catalog.json '
             '(Megatron-LM core_v0.12.1). Do not edit. */')
    h.append('#ifndef MC_TRAINING_ARGS_TABLE_H\n#define MC_TRAINING_ARGS_TABLE_H')
    h.append('/* One id per argparse dest, then the attributes validate_args derives, then the '
             'megatron.c extensions. */')
    h.append('enum mc_arg_id {')
    for d in ids:
        h.append('    MC_A_%s,' % d)
    h.append('    MC_A_COUNT')
    h.append('};')
    h.append('#define MC_A_NUM_OPTIONS %d   /* Megatron options: ids [0, this) */' % len(dests))
    h.append('#define MC_A_FIRST_DERIVED MC_A_%s' % DERIVED[0])
    h.append('#define MC_A_FIRST_EXTENSION MC_A_%s' % EXTENSIONS[0][1])
    h.append('#define MC_NUM_MINDSPEED_REFUSED %d' % len(MINDSPEED_REFUSED))
    h.append('#define MC_NUM_MINDSPEED_REFUSED_VALUES %d' % len(MINDSPEED_REFUSED_VALUES))
    h.append('#endif')

    c = []
    c.append('/* GENERATED by scripts/gen_args_table.py from megatron_argument_catalog.json '
             '(Megatron-LM core_v0.12.1). Do not edit.\n'
             ' * Mirrors add_megatron_arguments() of megatron/training/arguments.py: every option '
             'with its dest,\n * type, nargs, default, choices and argparse group, plus its '
             'support class in megatron.c:\n'
             ' *   SUPPORTED   implemented; UNSUPPORTED refused at start-up when given a '
             'non-default value;\n'
             ' *   NOOP        CUDA/performance knob that does not change results: accepted, '
             'no effect;\n'
             ' *   UNUSED      not read by Megatron\'s own GPT pretraining either: accepted, no '
             'effect. */')
    c.append('#include "training/args.h"\n')
    n_sup = {}
    rows = []
    for a in args:
        sup = support_of(a)
        n_sup[sup] = n_sup.get(sup, 0) + 1
        rows.append((a, sup, None))
    for opt, dest, typ, note, *choice in EXTENSIONS:  # choice: [(choices, default)]
        choices, default = choice[0] if choice else (None, False if typ.startswith('flag') else None)
        rows.append(({'options': [opt], 'dest': dest, 'type': typ, 'nargs': 0,
                      'default': default, 'choices': choices,
                      'group': 'megatron.c extensions'}, 'MC_ARG_EXTENSION', note))
    for a, sup, note in rows:
        d = a['dest']
        choices = choices_of(a)
        if choices:
            ch = ', '.join(cstr(str(x)) for x in choices)
            c.append('static const char *const ch_%s[] = {%s, NULL};' % (d, ch))
        kind, iv, fv, sv, lst = default_fields(a['default'])
        if lst is not None:
            c.append('static const char *const dl_%s[] = {%s};' % (
                d, ', '.join(cstr(x) for x in lst) if lst else 'NULL'))
    c.append('')
    c.append('const struct mc_arg_def mc_arg_defs[MC_A_COUNT] = {')
    for a, sup, note in rows:
        d = a['dest']
        opts = a['options']
        kind, iv, fv, sv, lst = default_fields(a['default'])
        nargs = {None: "0", 0: "0", '*': "'*'", '+': "'+'"}[a['nargs']]
        c.append('    [MC_A_%s] = {%s, %s, %s, %s, %s, %s, %s, {%s, %d, %s, %s, %s, %d}, %s, %s, '
                 '%s, %s},' % (
            d, cstr(opts[0]), cstr(opts[1] if len(opts) > 1 else None), cstr(d),
            cstr(a['group']), KIND[a['type']], nargs,
            'ch_%s' % d if choices_of(a) else 'NULL',
            kind, iv, fv, cstr(sv), ('dl_%s' % d) if lst is not None else 'NULL',
            len(lst) if lst else 0, sup, cstr(note),
            cstr(note if note else helps[opts[0]]), cstr(LIMITS.get(d))))
    for d in DERIVED:
        c.append('    [MC_A_%s] = {NULL, NULL, %s, NULL, MC_ARGT_DERIVED, 0, NULL, '
                 '{MC_V_NONE, 0, 0.0, NULL, NULL, 0}, MC_ARG_SUPPORTED, NULL, NULL, NULL},' % (
                     d, cstr(d)))
    c.append('};\n')
    c.append('/* MindSpeed / MindSpeed-LLM options that megatron.c refuses by name. */')
    c.append('const char *const mc_mindspeed_refused[MC_NUM_MINDSPEED_REFUSED] = {')
    for o in MINDSPEED_REFUSED:
        c.append('    %s,' % cstr(o))
    c.append('};')
    c.append('/* MindSpeed-LLM values of Megatron options, refused by name: {option, value}. */')
    c.append('const char *const mc_mindspeed_refused_values[MC_NUM_MINDSPEED_REFUSED_VALUES][2] = {')
    for o, v in MINDSPEED_REFUSED_VALUES:
        c.append('    {%s, %s},' % (cstr(o), cstr(v)))
    c.append('};')
    write_options_doc(rows, helps)
    out_dir = os.path.join(ROOT, 'src', 'training')
    for name, lines in (('args_table.h', h), ('args_table.c', c)):
        tmp = os.path.join(out_dir, name + '.tmp')
        with open(tmp, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        os.replace(tmp, os.path.join(out_dir, name))
    print('gen_args_table: %d options (%s), %d derived, %d extensions' % (
        len(args), ', '.join('%s %d' % (k[7:].lower(), v) for k, v in sorted(n_sup.items())),
        len(DERIVED), len(EXTENSIONS)))


if __name__ == '__main__':
    main()
