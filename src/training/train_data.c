/* pretrain_gpt's datasets from the command line: core_gpt_dataset_config_from_args,
 * train_valid_test_datasets_provider and build_train_valid_test_datasets of Megatron's
 * pretrain_gpt.py / training.py (core_v0.12.1), read sequentially like
 * MegatronPretrainingSampler with one data-parallel rank. */
#include "training/train_data.h"

#include <string.h>

#include "training/dry_run.h"

struct mc_train_data {
    struct mc_train_data_config c;
    mc_megatron_dataset *ds[3];
    int64_t token_limit; /* 0: no check */
};

/* The strings of a list-valued option (nargs='*'), or n = 0 when it is None or empty. */
static mc_status list_strings(const struct mc_args *a, enum mc_arg_id id, const char ***out, int *n)
{
    const struct mc_val *v = &a->v[id];
    *out = NULL;
    *n = 0;
    if (v->kind != MC_V_LIST || v->n == 0)
        return MC_OK;
    const char **s = mc_alloc((size_t)v->n * sizeof(*s));
    if (!s)
        return MC_ERR_NOMEM;
    for (int i = 0; i < v->n; i++)
        s[i] = v->items[i].s;
    *out = s;
    *n = v->n;
    return MC_OK;
}

/* The blend of one list: the caller's words when given, else the option's values. */
static mc_status blend_of(const struct mc_args *a, enum mc_arg_id id, const char **words,
                          int n_words, bool use_words, struct mc_blend *b, bool *present)
{
    if (use_words) {
        *present = n_words > 0;
        return n_words ? mc_blend_from_list(words, n_words, b) : MC_OK;
    }
    const char **toks;
    int n;
    mc_status st = list_strings(a, id, &toks, &n);
    *present = n > 0;
    if (st || !n)
        return st;
    st = mc_blend_from_list(toks, n, b);
    mc_free(toks);
    return st;
}

mc_status mc_train_data_config_init(struct mc_train_data_config *d, const struct mc_args *a,
                                    int64_t eod, const struct mc_data_lists *lists)
{
    memset(d, 0, sizeof(*d));
    struct mc_gpt_dataset_config *c = &d->cfg;
    c->random_seed = mc_args_int(a, MC_A_seed);
    c->sequence_length = mc_args_int(a, MC_A_seq_length);
    c->path_to_cache = mc_args_str(a, MC_A_data_cache_path);
    c->reset_position_ids = mc_args_bool(a, MC_A_reset_position_ids);
    c->reset_attention_mask = mc_args_bool(a, MC_A_reset_attention_mask);
    c->eod_mask_loss = mc_args_bool(a, MC_A_eod_mask_loss);
    c->create_attention_mask = mc_args_bool(a, MC_A_create_attention_mask_in_dataloader);
    c->drop_last_partial_validation_sequence = true;
    c->add_extra_token_to_sequence = true;
    c->mmap_bin_files = mc_args_bool(a, MC_A_mmap_bin_files);
    c->eod = eod;
    c->pad = -1;
    int64_t vocab = mc_args_is_none(a, MC_A_vocab_size) ? 0 : mc_args_int(a, MC_A_vocab_size);
    struct mc_tokenizer_args ta; /* the tokenizer's files, as build_tokenizer reads them */
    mc_tokenizer_args_from(a, &ta);
    mc_status st = mc_gpt_tokenizer_desc_from_args(
        &c->tokenizer, ta.tokenizer_type, ta.vocab_file, ta.merge_file, ta.tokenizer_model, vocab,
        d->vocab_buf);
    if (st)
        return st;
    bool have;
    if ((st = blend_of(a, MC_A_data_path, lists ? lists->data : NULL, lists ? lists->n_data : 0,
                       lists != NULL, &d->blend, &have)))
        return st;
    if (have) {
        c->blend = &d->blend;
        c->split = mc_args_str(a, MC_A_split);
    }
    static const enum mc_arg_id per[3] = {MC_A_train_data_path, MC_A_valid_data_path,
                                          MC_A_test_data_path};
    for (int i = 0; i < 3; i++) {
        if ((st = blend_of(a, per[i], lists ? lists->per_split[i] : NULL,
                           lists ? lists->n_per_split[i] : 0, lists != NULL, &d->per_split[i],
                           &have)))
            return st;
        if (have)
            c->blend_per_split[i] = &d->per_split[i];
    }
    if (!c->blend && !c->blend_per_split[0] && !mc_args_bool(a, MC_A_mock_data))
        return mc_error(MC_ERR_CONFIG, "no training data: give --data-path (or --train-data-path "
                                       "/ --valid-data-path / --test-data-path, or --mock-data)");
    return mc_gpt_dataset_config_finalize(c);
}

void mc_train_data_config_free(struct mc_train_data_config *d)
{
    mc_blend_free(&d->blend);
    for (int i = 0; i < 3; i++)
        mc_blend_free(&d->per_split[i]);
}

void mc_train_data_num_samples(const struct mc_args *a, int64_t sizes[3])
{
    int64_t gbs = mc_args_int(a, MC_A_global_batch_size);
    int64_t train_samples = mc_args_is_none(a, MC_A_train_samples) ? 0
                                                                     : mc_args_int(a, MC_A_train_samples);
    /* update_train_iters without a batch-size ramp: whole global batches of the samples */
    int64_t iters = mc_args_is_none(a, MC_A_train_iters) ? train_samples / gbs
                                                          : mc_args_int(a, MC_A_train_iters);
    mc_gpt_train_valid_test_num_samples(iters, train_samples, gbs,
                                        mc_args_int(a, MC_A_eval_interval),
                                        mc_args_int(a, MC_A_eval_iters), sizes);
}

mc_status mc_train_data_init(const struct mc_args *a, int64_t eod, int64_t pad, FILE *out,
                             mc_train_data **ret)
{
    mc_train_data *d = mc_calloc(1, sizeof(*d));
    if (!d)
        return MC_ERR_NOMEM;
    mc_status st = mc_train_data_config_init(&d->c, a, eod, NULL);
    if (st)
        goto fail;
    d->c.cfg.pad = pad; /* GPTDataset reads tokenizer.pad (no option of its own) */
    int64_t sizes[3];
    mc_train_data_num_samples(a, sizes);
    if (out) {
        fprintf(out, "> building train, validation, and test datasets ...\n");
        fprintf(out, " > datasets target sizes (minimum size):\n");
        fprintf(out, "    train:      %lld\n", (long long)sizes[0]);
        fprintf(out, "    validation: %lld\n", (long long)sizes[1]);
        fprintf(out, "    test:       %lld\n", (long long)sizes[2]);
    }
    if ((st = mc_gpt_build_datasets(&d->c.cfg, sizes, d->ds)))
        goto fail;
    if (out)
        fprintf(out, "> finished creating GPT datasets ...\n");
    *ret = d;
    return MC_OK;
fail:
    mc_train_data_free(d);
    return st;
}

void mc_train_data_free(mc_train_data *d)
{
    if (!d)
        return;
    for (int i = 0; i < 3; i++)
        mc_megatron_dataset_free(d->ds[i]);
    mc_train_data_config_free(&d->c);
    mc_free(d);
}

bool mc_train_data_has(const mc_train_data *d, int split)
{
    return d->ds[split] && mc_megatron_dataset_len(d->ds[split]) > 0;
}

mc_status mc_micro_batch_init(struct mc_micro_batch *mb, int64_t b, int64_t s, bool with_mask)
{
    memset(mb, 0, sizeof(*mb));
    mb->b = b;
    mb->s = s;
    size_t n = (size_t)(b * s);
    mb->tokens = mc_alloc(n * sizeof(int64_t));
    mb->labels = mc_alloc(n * sizeof(int64_t));
    mb->position_ids = mc_alloc(n * sizeof(int64_t));
    mb->loss_mask = mc_alloc(n * sizeof(float));
    /* without --reset-attention-mask the mask is the plain causal one the model applies itself */
    mb->attention_mask = with_mask ? mc_alloc(n * (size_t)s) : NULL;
    if (!mb->tokens || !mb->labels || !mb->position_ids || !mb->loss_mask ||
        (with_mask && !mb->attention_mask)) {
        mc_micro_batch_free(mb);
        return mc_error(MC_ERR_NOMEM, "out of memory for a %lldx%lld micro-batch", (long long)b,
                        (long long)s);
    }
    return MC_OK;
}

void mc_micro_batch_free(struct mc_micro_batch *mb)
{
    mc_free(mb->tokens);
    mc_free(mb->labels);
    mc_free(mb->position_ids);
    mc_free(mb->loss_mask);
    mc_free(mb->attention_mask);
    memset(mb, 0, sizeof(*mb));
}

/* An id the model has no embedding row for: name the data file it came from, which the
 * forward pass (and Megatron's embedding lookup) cannot. */
static mc_status check_sample(const mc_train_data *d, int split, int id, int64_t idx,
                              const struct mc_gpt_sample *smp, int64_t s)
{
    static const char *const names[3] = {"train", "valid", "test"};
    for (int64_t i = 0; i < s; i++) {
        int64_t t = smp->tokens[i], l = smp->labels[i];
        bool bt = t < 0 || t >= d->token_limit, bl = l < 0 || l >= d->token_limit;
        if (!bt && !bl)
            continue;
        int64_t bad = bt ? t : l;
        const struct mc_blend *b = d->c.cfg.blend ? d->c.cfg.blend : d->c.cfg.blend_per_split[split];
        const char *file = b && id >= 0 && id < b->n ? b->prefixes[id] : NULL;
        return mc_error(MC_ERR_FORMAT, "%s%s: token id %lld (position %lld of %s sample %lld) is "
                        "outside the model's padded vocabulary [0, %lld): the data was made "
                        "with another tokenizer than --tokenizer-type/--vocab-file say",
                        file ? file : "--mock-data", file ? ".bin" : "", (long long)bad,
                        (long long)i, names[split], (long long)idx, (long long)d->token_limit);
    }
    return MC_OK;
}

mc_status mc_train_data_get(const mc_train_data *d, int split, int64_t first,
                            struct mc_micro_batch *mb)
{
    const mc_megatron_dataset *ds = d->ds[split];
    int64_t len = mc_megatron_dataset_len(ds), s = mb->s;
    for (int64_t j = 0; j < mb->b; j++) {
        struct mc_gpt_sample smp = {
            .tokens = mb->tokens + j * s,
            .labels = mb->labels + j * s,
            .loss_mask = mb->loss_mask + j * s,
            .position_ids = mb->position_ids + j * s,
            .attention_mask = mb->attention_mask ? mb->attention_mask + j * s * s : NULL,
        };
        int id = 0;
        mc_status st = mc_megatron_dataset_get(ds, (first + j) % len, &smp, &id);
        if (st)
            return st;
        if (d->token_limit && (st = check_sample(d, split, id, (first + j) % len, &smp, s)))
            return st;
    }
    return MC_OK;
}

void mc_train_data_set_token_limit(mc_train_data *d, int64_t limit) { d->token_limit = limit; }
