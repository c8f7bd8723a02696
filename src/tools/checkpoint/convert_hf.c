/* HuggingFace checkpoints in the converter: import (as Megatron's loader_llama_mistral.py with
 * --checkpoint-type hf does for Llama, and the GPT-2 mapping Megatron lacks) and export of
 * GPT2LMHeadModel and LlamaForCausalLM directories: config.json as transformers writes it plus
 * model.safetensors (on import also a sharded model.safetensors.index.json, or pytorch_model.bin
 * files read with our torch.load). Parameter mappings:
 * spec megatron-model-parallel-ckpt.md 3.8 (verified there numerically against Megatron). */
#include "tools/checkpoint/convert.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/checkpoint/convert_args.h"
#include "checkpointing/safetensors.h"
#include "core/json.h"
#include "megatron/tokenizer.h"

enum arch { ARCH_GPT2, ARCH_LLAMA };

/* ---- float32 views of the model's tensors ------------------------------------------------------ */
static float *as_f32(const struct mc_cv_tensor *t)
{
    struct mc_tensor v = mc_cv_view(t);
    int64_t n = mc_tensor_numel(&v);
    float *f = mc_alloc((size_t)(n ? n : 1) * sizeof(float));
    if (!f)
        return NULL;
    mc_dtype_to_f32(f, v.data, v.dtype, n);
    return f;
}

/* Megatron's grouped QKV row of (group g, slot, d) and HF's q/k/v row: slot < np/ng is query
 * head g*np/ng + slot, slot np/ng is key head g, slot np/ng + 1 value head g. */
struct qkv_dims {
    int64_t np, ng, hn, cols;
};

static int64_t grouped_row(const struct qkv_dims *q, int64_t g, int64_t slot, int64_t d)
{
    return (g * (q->np / q->ng + 2) + slot) * q->hn + d;
}

/* split (to_hf) or join the grouped layout and the HF q [np*hn], k [ng*hn], v [ng*hn] rows */
static void qkv_map(float *grouped, float *q, float *k, float *v, const struct qkv_dims *x, bool to_hf)
{
    int64_t per = x->np / x->ng;
    size_t row = (size_t)x->cols * sizeof(float);
    for (int64_t g = 0; g < x->ng; g++)
        for (int64_t slot = 0; slot < per + 2; slot++)
            for (int64_t d = 0; d < x->hn; d++) {
                float *m = grouped + grouped_row(x, g, slot, d) * x->cols;
                float *h = slot < per ? q + ((g * per + slot) * x->hn + d) * x->cols
                           : slot == per ? k + (g * x->hn + d) * x->cols
                                         : v + (g * x->hn + d) * x->cols;
                memcpy(to_hf ? h : m, to_hf ? m : h, row);
            }
}

static void transpose(float *dst, const float *src, int64_t r, int64_t c)
{
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            dst[j * r + i] = src[i * c + j];
}

/* ================================================================================================
 * Export
 * ============================================================================================= */

struct out {
    struct mc_st_item *items;
    float **bufs;
    int64_t n, cap;
};

static float *out_add(struct out *o, const char *name, int ndim, int64_t d0, int64_t d1)
{
    if (o->n == o->cap) {
        int64_t cap = o->cap ? 2 * o->cap : 64;
        struct mc_st_item *it = mc_calloc((size_t)cap, sizeof(*it));
        float **b = mc_calloc((size_t)cap, sizeof(*b));
        if (!it || !b) {
            mc_free(it);
            mc_free(b);
            return NULL;
        }
        if (o->n) {
            memcpy(it, o->items, (size_t)o->n * sizeof(*it));
            memcpy(b, o->bufs, (size_t)o->n * sizeof(*b));
        }
        mc_free(o->items);
        mc_free(o->bufs);
        o->items = it, o->bufs = b, o->cap = cap;
    }
    float *buf = mc_alloc((size_t)(d0 * (ndim > 1 ? d1 : 1)) * sizeof(float) + 4);
    char *nm = mc_alloc(strlen(name) + 1);
    if (!buf || !nm) {
        mc_free(buf);
        mc_free(nm);
        return NULL;
    }
    strcpy(nm, name);
    struct mc_st_item *it = &o->items[o->n];
    it->name = nm;
    it->ndim = ndim;
    it->shape[0] = d0;
    it->shape[1] = d1;
    it->data = buf;
    o->bufs[o->n++] = buf;
    return buf;
}

static void out_free(struct out *o)
{
    for (int64_t i = 0; i < o->n; i++) {
        mc_free((void *)o->items[i].name);
        mc_free(o->bufs[i]);
    }
    mc_free(o->items);
    mc_free(o->bufs);
}

struct exporter {
    const struct mc_cv_model *m;
    const struct mc_cv_options *o;
    enum arch arch;
    int64_t vocab; /* rows written: the true vocabulary */
    struct out out;
};

/* A tensor copied (transposed when `t`) under an HF name; rows limited to `rows` (vocab). */
static mc_status emit(struct exporter *e, const char *name, const struct mc_cv_tensor *src, bool tr,
                      int64_t rows)
{
    float *f = as_f32(src);
    if (!f)
        return MC_ERR_NOMEM;
    int64_t r = rows > 0 ? rows : src->shape[0], c = src->shape[1];
    float *dst = src->ndim == 1 ? out_add(&e->out, name, 1, r, 1)
                 : tr ? out_add(&e->out, name, 2, c, r) : out_add(&e->out, name, 2, r, c);
    if (dst && tr)
        transpose(dst, f, r, c);
    else if (dst)
        memcpy(dst, f, (size_t)(r * c) * sizeof(float));
    mc_free(f);
    return dst ? MC_OK : MC_ERR_NOMEM;
}

static const struct mc_cv_tensor *L(const struct exporter *e, int64_t l, const char *what)
{
    return mc_cv_get(e->m, "layer %lld %s", (long long)l, what);
}

/* GPT-2: c_attn [h, 3h] = [Wq | Wk | Wv]^T with the heads of Megatron's grouped QKV. */
static mc_status gpt2_attn(struct exporter *e, int64_t l)
{
    const struct mc_cv_meta *md = &e->m->md;
    int64_t h = md->hidden_size;
    char name[128];
    for (int bias = 0; bias < 2; bias++) {
        const struct mc_cv_tensor *t = L(e, l, bias ? "qkv bias" : "qkv weight");
        struct qkv_dims x = {md->num_attention_heads, md->num_query_groups, md->kv_channels, bias ? 1 : h};
        float *g = as_f32(t), *hf = mc_alloc((size_t)(3 * h * x.cols) * sizeof(float));
        snprintf(name, sizeof(name), "transformer.h.%lld.attn.c_attn.%s", (long long)l, bias ? "bias" : "weight");
        float *dst = g && hf ? (bias ? out_add(&e->out, name, 1, 3 * h, 1) : out_add(&e->out, name, 2, h, 3 * h)) : NULL;
        if (dst) {
            qkv_map(g, hf, hf + h * x.cols, hf + 2 * h * x.cols, &x, true);
            if (bias)
                memcpy(dst, hf, (size_t)(3 * h) * sizeof(float));
            else
                transpose(dst, hf, 3 * h, h);
        }
        mc_free(g);
        mc_free(hf);
        if (!dst)
            return MC_ERR_NOMEM;
    }
    return MC_OK;
}

static mc_status gpt2_layer(struct exporter *e, int64_t l)
{
    static const struct { const char *what, *hf; bool tr; } map[] = {
        {"input norm weight", "ln_1.weight", false}, {"input norm bias", "ln_1.bias", false},
        {"dense weight", "attn.c_proj.weight", true}, {"dense bias", "attn.c_proj.bias", false},
        {"post norm weight", "ln_2.weight", false}, {"post norm bias", "ln_2.bias", false},
        {"mlp l0 weight", "mlp.c_fc.weight", true}, {"mlp l0 bias", "mlp.c_fc.bias", false},
        {"mlp l1 weight", "mlp.c_proj.weight", true}, {"mlp l1 bias", "mlp.c_proj.bias", false},
    };
    char name[160];
    mc_status st = MC_OK;
    for (size_t k = 0; !st && k < sizeof(map) / sizeof(*map); k++) {
        snprintf(name, sizeof(name), "transformer.h.%lld.%s", (long long)l, map[k].hf);
        st = emit(e, name, L(e, l, map[k].what), map[k].tr, 0);
        if (!st && k == 1)
            st = gpt2_attn(e, l);
    }
    return st;
}

static mc_status llama_layer(struct exporter *e, int64_t l)
{
    const struct mc_cv_meta *md = &e->m->md;
    int64_t h = md->hidden_size, np = md->num_attention_heads, ng = md->num_query_groups;
    int64_t hn = md->kv_channels, ffn = md->ffn_hidden_size;
    char name[160];
    const char *pre = "model.layers";
    snprintf(name, sizeof(name), "%s.%lld.input_layernorm.weight", pre, (long long)l);
    mc_status st = emit(e, name, L(e, l, "input norm weight"), false, 0);
    struct qkv_dims x = {np, ng, hn, h};
    float *g = st ? NULL : as_f32(L(e, l, "qkv weight"));
    float *q = NULL, *k = NULL, *v = NULL;
    if (g) {
        snprintf(name, sizeof(name), "%s.%lld.self_attn.q_proj.weight", pre, (long long)l);
        q = out_add(&e->out, name, 2, np * hn, h);
        snprintf(name, sizeof(name), "%s.%lld.self_attn.k_proj.weight", pre, (long long)l);
        k = q ? out_add(&e->out, name, 2, ng * hn, h) : NULL;
        snprintf(name, sizeof(name), "%s.%lld.self_attn.v_proj.weight", pre, (long long)l);
        v = k ? out_add(&e->out, name, 2, ng * hn, h) : NULL;
        if (v)
            qkv_map(g, q, k, v, &x, true);
    }
    mc_free(g);
    if (!st && !v)
        return MC_ERR_NOMEM;
    snprintf(name, sizeof(name), "%s.%lld.self_attn.o_proj.weight", pre, (long long)l);
    st = st ? st : emit(e, name, L(e, l, "dense weight"), false, 0);
    snprintf(name, sizeof(name), "%s.%lld.post_attention_layernorm.weight", pre, (long long)l);
    st = st ? st : emit(e, name, L(e, l, "post norm weight"), false, 0);
    float *fc1 = st ? NULL : as_f32(L(e, l, "mlp l0 weight"));
    if (fc1) { /* [gate; up] */
        snprintf(name, sizeof(name), "%s.%lld.mlp.gate_proj.weight", pre, (long long)l);
        float *gate = out_add(&e->out, name, 2, ffn, h);
        snprintf(name, sizeof(name), "%s.%lld.mlp.up_proj.weight", pre, (long long)l);
        float *up = gate ? out_add(&e->out, name, 2, ffn, h) : NULL;
        if (up) {
            memcpy(gate, fc1, (size_t)(ffn * h) * sizeof(float));
            memcpy(up, fc1 + ffn * h, (size_t)(ffn * h) * sizeof(float));
        } else
            st = MC_ERR_NOMEM;
    } else if (!st)
        st = MC_ERR_NOMEM;
    mc_free(fc1);
    snprintf(name, sizeof(name), "%s.%lld.mlp.down_proj.weight", pre, (long long)l);
    return st ? st : emit(e, name, L(e, l, "mlp l1 weight"), false, 0);
}

/* Why the model cannot be written as e->arch (NULL: it can). */
static const char *why_not(const struct exporter *e)
{
    const struct mc_cv_meta *md = &e->m->md;
    const char *why = NULL;
    const struct mc_pk *ck = md->checkpoint_args;
    const struct mc_pk *sq = mc_pk_get(ck, "squared_relu"), *p1 = mc_pk_get(ck, "apply_layernorm_1p");
    if (!strcmp(md->position_embedding_type, "alibi"))
        why = "ALiBi attention (--position-embedding-type alibi: Hugging Face's GPT-2 and Llama "
              "have no ALiBi; Baichuan2's remote modeling code is not written)";
    else if (sq && sq->kind == MC_PK_BOOL && sq->b)
        why = "--squared-relu";
    else if (p1 && p1->kind == MC_PK_BOOL && p1->b)
        why = "--apply-layernorm-1p";
    else if (e->arch == ARCH_GPT2) {
        if (strcmp(md->position_embedding_type, "learned_absolute"))
            why = "a RoPE / no-position-embedding model (GPT-2 has learned absolute positions)";
        else if (strcmp(md->normalization, "LayerNorm"))
            why = "RMSNorm (GPT-2 uses LayerNorm)";
        else if (md->swiglu)
            why = "SwiGLU (GPT-2 uses GELU)";
        else if (!md->linear_bias)
            why = "--disable-bias-linear (GPT-2 has biases on every linear layer)";
        else if (md->num_query_groups != md->num_attention_heads)
            why = "grouped-query attention";
        else if (md->kv_channels * md->num_attention_heads != md->hidden_size)
            why = "--kv-channels other than hidden/heads";
    } else {
        if (strcmp(md->position_embedding_type, "rope"))
            why = "learned absolute positions (Llama uses RoPE)";
        else if (md->rotary_interleaved)
            why = "--rotary-interleaved (HF Llama rotates halves)";
        else if (md->rotary_percent != 1.0)
            why = "--rotary-percent other than 1.0";
        else if (strcmp(md->normalization, "RMSNorm"))
            why = "LayerNorm (Llama uses RMSNorm)";
        else if (!md->swiglu)
            why = "a non-SwiGLU MLP";
        else if (md->linear_bias || md->qkv_bias)
            why = "linear biases (Llama has none)";
        else if (md->kv_channels * md->num_attention_heads != md->hidden_size)
            why = "--kv-channels other than hidden/heads";
    }
    return why;
}

/* GPT2LMHeadModel or LlamaForCausalLM, whichever can hold the model; else an error naming what
 * each one lacks. */
static mc_status pick_arch(struct exporter *e)
{
    e->arch = ARCH_GPT2;
    const char *gpt2 = why_not(e);
    e->arch = ARCH_LLAMA;
    const char *llama = why_not(e);
    if (gpt2 && llama)
        return mc_error(MC_ERR_UNSUPPORTED, "--saver hf: the model maps to no HuggingFace class: "
                        "not GPT2LMHeadModel (it has %s), not LlamaForCausalLM (it has %s)", gpt2, llama);
    e->arch = gpt2 ? ARCH_LLAMA : ARCH_GPT2;
    return MC_OK;
}

/* NullTokenizer(vocab_size) has vocab_size + 1 tokens (the EOD). */
static int64_t export_vocab(const struct exporter *e, int64_t rows)
{
    const struct mc_cv_meta *md = &e->m->md;
    if (md->true_vocab_size > 0)
        return md->true_vocab_size < rows ? md->true_vocab_size : rows;
    const struct mc_pk *ck = md->checkpoint_args, *vs = mc_pk_get(ck, "vocab_size");
    if (!strcmp(md->tokenizer_type, "NullTokenizer") && vs && vs->kind == MC_PK_INT && vs->i + 1 <= rows)
        return vs->i + 1;
    if (e->o->log)
        fprintf(e->o->log, "warning: true vocabulary size unknown (give --true-vocab-size or "
                "--vocab-file); exporting all %lld padded rows\n", (long long)rows);
    return rows;
}

static mc_status weights(struct exporter *e)
{
    const struct mc_cv_model *m = e->m;
    const struct mc_cv_tensor *word = mc_cv_get(m, "word embeddings");
    e->vocab = export_vocab(e, word->shape[0]);
    bool gpt2 = e->arch == ARCH_GPT2;
    mc_status st = emit(e, gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", word, false, e->vocab);
    if (!st && gpt2)
        st = emit(e, "transformer.wpe.weight", mc_cv_get(m, "position embeddings"), false, 0);
    for (int64_t l = 0; !st && l < m->md.num_layers; l++)
        st = gpt2 ? gpt2_layer(e, l) : llama_layer(e, l);
    st = st ? st : emit(e, gpt2 ? "transformer.ln_f.weight" : "model.norm.weight",
                        mc_cv_get(m, "final norm weight"), false, 0);
    if (!st && gpt2)
        st = emit(e, "transformer.ln_f.bias", mc_cv_get(m, "final norm bias"), false, 0);
    if (!st && m->md.untied)
        st = emit(e, "lm_head.weight", mc_cv_get(m, "output layer weight"), false, e->vocab);
    return st;
}

/* config.json: keys sorted, indent 2, as PretrainedConfig.to_json_file writes. */
struct kv {
    const char *key;
    char val[256];
};

/* The exported weights' dtype: the model's params_dtype (a --bf16 / --fp16 checkpoint's). */
static enum mc_dtype hf_dtype(const struct mc_cv_meta *md)
{
    return md->params_dtype == MC_DTYPE_BF16 || md->params_dtype == MC_DTYPE_F16 ? md->params_dtype
                                                                                : MC_DTYPE_F32;
}

/* repr(float), as json.dumps writes it ("1e-05", "500000.0") */
static const char *pyfloat(char *buf, size_t n, double x)
{
    struct mc_json_buf b = {0};
    snprintf(buf, n, "%s", mc_json_write_double(&b, x) ? "null" : b.data);
    mc_free(b.data);
    return buf;
}

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const struct kv *)a)->key, ((const struct kv *)b)->key);
}

static mc_status write_config(const struct exporter *e, const char *dir)
{
    const struct mc_cv_meta *md = &e->m->md;
    struct kv kv[40];
    int n = 0;
#define S(k, ...) (kv[n].key = (k), snprintf(kv[n].val, sizeof(kv[n].val), __VA_ARGS__), n++)
    struct mc_json_buf jb = {0};
    char f1[40], f2[40];
    if (e->arch == ARCH_GPT2) {
        S("architectures", "[\n    \"GPT2LMHeadModel\"\n  ]");
        S("model_type", "\"gpt2\"");
        S("activation_function", md->gelu_tanh ? "\"gelu_new\"" : "\"gelu\"");
        S("n_embd", "%lld", (long long)md->hidden_size);
        S("n_layer", "%lld", (long long)md->num_layers);
        S("n_head", "%lld", (long long)md->num_attention_heads);
        S("n_positions", "%lld", (long long)md->max_position_embeddings);
        S("n_ctx", "%lld", (long long)md->max_position_embeddings);
        S("n_inner", "%lld", (long long)md->ffn_hidden_size);
        S("layer_norm_epsilon", "%s", pyfloat(f1, sizeof(f1), md->norm_epsilon));
        S("scale_attn_weights", "true");
        S("scale_attn_by_inverse_layer_idx", "false");
        S("reorder_and_upcast_attn", "false");
        S("attn_pdrop", "0.0");
        S("embd_pdrop", "0.0");
        S("resid_pdrop", "0.0");
    } else {
        S("architectures", "[\n    \"LlamaForCausalLM\"\n  ]");
        S("model_type", "\"llama\"");
        S("hidden_act", "\"silu\"");
        S("hidden_size", "%lld", (long long)md->hidden_size);
        S("intermediate_size", "%lld", (long long)md->ffn_hidden_size);
        S("num_hidden_layers", "%lld", (long long)md->num_layers);
        S("num_attention_heads", "%lld", (long long)md->num_attention_heads);
        S("num_key_value_heads", "%lld", (long long)md->num_query_groups);
        S("head_dim", "%lld", (long long)md->kv_channels);
        S("max_position_embeddings", "%lld", (long long)md->max_position_embeddings);
        S("rms_norm_eps", "%s", pyfloat(f1, sizeof(f1), md->norm_epsilon));
        S("rope_theta", "%s", pyfloat(f2, sizeof(f2), md->rotary_base));
        if (md->use_rope_scaling)
            S("rope_scaling", "{\n    \"factor\": %s,\n    \"high_freq_factor\": 4.0,\n    "
              "\"low_freq_factor\": 1.0,\n    \"original_max_position_embeddings\": 8192,\n    "
              "\"rope_type\": \"llama3\"\n  }", pyfloat(f1, sizeof(f1), md->rope_scaling_factor));
        else
            S("rope_scaling", "null");
        S("attention_bias", "false");
        S("attention_dropout", "0.0");
        S("mlp_bias", "false");
        S("pretraining_tp", "1");
    }
    S("vocab_size", "%lld", (long long)e->vocab);
    S("tie_word_embeddings", md->untied ? "false" : "true");
    S("torch_dtype", "\"%s\"", mc_dtype_name(hf_dtype(md))); /* the weights' precision */
    S("initializer_range", "0.02");
    S("use_cache", "true");
#undef S
    qsort(kv, (size_t)n, sizeof(*kv), kv_cmp);
    mc_status st = mc_json_buf_printf(&jb, "{\n");
    for (int k = 0; !st && k < n; k++)
        st = mc_json_buf_printf(&jb, "  \"%s\": %s%s\n", kv[k].key, kv[k].val, k + 1 < n ? "," : "");
    st = st ? st : mc_json_buf_printf(&jb, "}\n");
    char path[4400];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = st ? NULL : fopen(path, "wb");
    if (!st && (!f || fwrite(jb.data, 1, jb.len, f) != jb.len))
        st = mc_error(MC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) && !st)
        st = mc_error(MC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    mc_free(jb.data);
    return st;
}

mc_status mc_cv_save_hf(const struct mc_cv_model *m, const struct mc_cv_options *o)
{
    struct exporter e = {.m = m, .o = o};
    if (o->target_tp > 1 || o->target_pp > 1)
        return mc_error(MC_ERR_CONFIG, "--saver hf writes one unsharded model; "
                        "--target-tensor/pipeline-parallel-size must be 1 (or absent)");
    mc_status st = pick_arch(&e);
    char tmp[4200], path[4300];
    if (st || (st = mc_cv_begin_output(o->save_dir, tmp, sizeof(tmp))))
        return st;
    st = weights(&e);
    snprintf(path, sizeof(path), "%s/model.safetensors", tmp);
    /* a bf16 / fp16 model stays 16-bit: its values pass through fp32 exactly and round back to
     * themselves */
    st = st ? st : mc_st_write(path, e.out.items, e.out.n, hf_dtype(&m->md));
    st = st ? st : write_config(&e, tmp);
    st = st ? st : mc_cv_finish_output(o->save_dir, tmp);
    if (st)
        mc_cv_abort_output(tmp);
    else if (o->log)
        fprintf(o->log, "saved %s as %s: %lld tensors, vocab %lld\n", o->save_dir,
                e.arch == ARCH_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM", (long long)e.out.n,
                (long long)e.vocab);
    out_free(&e.out);
    return st;
}

/* ================================================================================================
 * Import
 * ============================================================================================= */

struct importer {
    struct mc_cv_model *m;
    const struct mc_cv_options *o;
    enum arch arch;
    struct mc_st_file files[64];
    int nfiles;
    mc_pk_doc *bin_docs[64]; /* the torch.load trees of pytorch_model*.bin files */
    int nbin_docs;
    const char *prefix; /* GPT-2: "transformer." or "" (the original hub checkpoint) */
};

static const struct mc_st_tensor *find(const struct importer *im, const char *name)
{
    for (int k = 0; k < im->nfiles; k++) {
        const struct mc_st_tensor *t = mc_st_find(&im->files[k], name);
        if (t)
            return t;
    }
    return NULL;
}

static mc_status need(const struct importer *im, const char *name, int ndim, int64_t d0, int64_t d1,
                      const struct mc_st_tensor **out)
{
    const struct mc_st_tensor *t = find(im, name);
    if (!t)
        return mc_error(MC_ERR_FORMAT, "--load-dir %s: no tensor '%s' in the safetensors files",
                        im->o->load_dir, name);
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim > 1 && t->shape[1] != d1))
        return mc_error(MC_ERR_SHAPE, "--load-dir %s: '%s' has shape [%lld, %lld], config.json "
                        "implies [%lld, %lld]", im->o->load_dir, name, (long long)t->shape[0],
                        (long long)(t->ndim > 1 ? t->shape[1] : 1), (long long)d0, (long long)d1);
    *out = t;
    return MC_OK;
}

/* A model tensor `what` from HF tensor `name` [d0, d1] (transposed for GPT-2's Conv1D). */
static mc_status take(struct importer *im, const char *what, const char *name, int ndim, int64_t d0,
                      int64_t d1, bool tr)
{
    const struct mc_st_tensor *t;
    mc_status st = need(im, name, ndim, d0, d1, &t);
    struct mc_cv_tensor *c;
    if (st || (st = mc_cv_add(im->m, &c, MC_DTYPE_F32, ndim, tr ? d1 : d0, tr ? d0 : d1, "%s", what)))
        return st;
    if (!tr) {
        mc_st_to_f32(t, (float *)c->data);
        return MC_OK;
    }
    float *f = mc_alloc((size_t)t->numel * sizeof(float));
    if (!f)
        return MC_ERR_NOMEM;
    mc_st_to_f32(t, f);
    transpose((float *)c->data, f, d0, d1);
    mc_free(f);
    return MC_OK;
}

static mc_status gpt2_qkv(struct importer *im, int64_t l, int bias)
{
    const struct mc_cv_meta *md = &im->m->md;
    int64_t h = md->hidden_size;
    char name[160];
    snprintf(name, sizeof(name), "%sh.%lld.attn.c_attn.%s", im->prefix, (long long)l, bias ? "bias" : "weight");
    const struct mc_st_tensor *t;
    mc_status st = bias ? need(im, name, 1, 3 * h, 1, &t) : need(im, name, 2, h, 3 * h, &t);
    struct mc_cv_tensor *c;
    if (st || (st = mc_cv_add(im->m, &c, MC_DTYPE_F32, bias ? 1 : 2, 3 * h, h, "layer %lld qkv %s",
                              (long long)l, bias ? "bias" : "weight")))
        return st;
    struct qkv_dims x = {md->num_attention_heads, md->num_query_groups, md->kv_channels, bias ? 1 : h};
    float *f = mc_alloc((size_t)t->numel * sizeof(float)), *rows = mc_alloc((size_t)t->numel * sizeof(float));
    if (f && rows) {
        mc_st_to_f32(t, f);
        if (bias)
            memcpy(rows, f, (size_t)t->numel * sizeof(float));
        else
            transpose(rows, f, h, 3 * h); /* [3h, h] = [Wq; Wk; Wv] */
        qkv_map((float *)c->data, rows, rows + h * x.cols, rows + 2 * h * x.cols, &x, false);
    }
    mc_free(f);
    mc_free(rows);
    return f && rows ? MC_OK : MC_ERR_NOMEM;
}

static mc_status gpt2_import_layer(struct importer *im, int64_t l)
{
    const struct mc_cv_meta *md = &im->m->md;
    int64_t h = md->hidden_size, ffn = md->ffn_hidden_size;
    static const struct { const char *what, *hf; int ndim; int dims; bool tr; } map[] = {
        {"input norm weight", "ln_1.weight", 1, 0, false}, {"input norm bias", "ln_1.bias", 1, 0, false},
        {"dense weight", "attn.c_proj.weight", 2, 0, true}, {"dense bias", "attn.c_proj.bias", 1, 0, false},
        {"post norm weight", "ln_2.weight", 1, 0, false}, {"post norm bias", "ln_2.bias", 1, 0, false},
        {"mlp l0 weight", "mlp.c_fc.weight", 2, 1, true}, {"mlp l0 bias", "mlp.c_fc.bias", 1, 2, false},
        {"mlp l1 weight", "mlp.c_proj.weight", 2, 3, true}, {"mlp l1 bias", "mlp.c_proj.bias", 1, 0, false},
    };
    mc_status st = gpt2_qkv(im, l, 0);
    st = st ? st : gpt2_qkv(im, l, 1);
    char name[160], what[64];
    for (size_t k = 0; !st && k < sizeof(map) / sizeof(*map); k++) {
        snprintf(name, sizeof(name), "%sh.%lld.%s", im->prefix, (long long)l, map[k].hf);
        snprintf(what, sizeof(what), "layer %lld %s", (long long)l, map[k].what);
        int64_t d0 = map[k].dims == 2 ? ffn : map[k].dims == 3 ? ffn : h;
        int64_t d1 = map[k].dims == 1 ? ffn : h;
        st = take(im, what, name, map[k].ndim, d0, map[k].ndim > 1 ? d1 : 1, map[k].tr);
    }
    return st;
}

static mc_status llama_import_layer(struct importer *im, int64_t l)
{
    const struct mc_cv_meta *md = &im->m->md;
    int64_t h = md->hidden_size, np = md->num_attention_heads, ng = md->num_query_groups;
    int64_t hn = md->kv_channels, ffn = md->ffn_hidden_size;
    char name[160], what[64];
    const struct mc_st_tensor *tq, *tk, *tv, *tg, *tu;
#define NM(s) (snprintf(name, sizeof(name), "model.layers.%lld.%s", (long long)l, s), name)
#define WH(s) (snprintf(what, sizeof(what), "layer %lld %s", (long long)l, s), what)
    mc_status st = take(im, WH("input norm weight"), NM("input_layernorm.weight"), 1, h, 1, false);
    st = st ? st : need(im, NM("self_attn.q_proj.weight"), 2, np * hn, h, &tq);
    st = st ? st : need(im, NM("self_attn.k_proj.weight"), 2, ng * hn, h, &tk);
    st = st ? st : need(im, NM("self_attn.v_proj.weight"), 2, ng * hn, h, &tv);
    struct mc_cv_tensor *c;
    st = st ? st : mc_cv_add(im->m, &c, MC_DTYPE_F32, 2, (np + 2 * ng) * hn, h, "%s", WH("qkv weight"));
    if (!st) {
        float *q = mc_alloc((size_t)tq->numel * 4), *k = mc_alloc((size_t)tk->numel * 4),
              *v = mc_alloc((size_t)tv->numel * 4);
        struct qkv_dims x = {np, ng, hn, h};
        if (q && k && v) {
            mc_st_to_f32(tq, q), mc_st_to_f32(tk, k), mc_st_to_f32(tv, v);
            qkv_map((float *)c->data, q, k, v, &x, false);
        } else
            st = MC_ERR_NOMEM;
        mc_free(q), mc_free(k), mc_free(v);
    }
    st = st ? st : take(im, WH("dense weight"), NM("self_attn.o_proj.weight"), 2, h, np * hn, false);
    st = st ? st : take(im, WH("post norm weight"), NM("post_attention_layernorm.weight"), 1, h, 1, false);
    st = st ? st : need(im, NM("mlp.gate_proj.weight"), 2, ffn, h, &tg);
    st = st ? st : need(im, NM("mlp.up_proj.weight"), 2, ffn, h, &tu);
    st = st ? st : mc_cv_add(im->m, &c, MC_DTYPE_F32, 2, 2 * ffn, h, "%s", WH("mlp l0 weight"));
    if (!st) {
        mc_st_to_f32(tg, (float *)c->data);
        mc_st_to_f32(tu, (float *)c->data + ffn * h);
    }
    st = st ? st : take(im, WH("mlp l1 weight"), NM("mlp.down_proj.weight"), 2, h, ffn, false);
#undef NM
#undef WH
    return st;
}

/* ---- config.json ------------------------------------------------------------------------------- */
struct cfg {
    const struct mc_json *root;
    const char *path;
};

static mc_status cfg_int(const struct cfg *c, const char *key, int64_t dflt, int64_t *out)
{
    const struct mc_json *v = mc_json_get(c->root, key);
    if (!v || v->type == MC_JSON_NULL) {
        if (dflt < 0)
            return mc_error(MC_ERR_FORMAT, "%s: no '%s'", c->path, key);
        *out = dflt;
        return MC_OK;
    }
    if (v->type != MC_JSON_NUMBER || !v->is_int || v->inum < 0)
        return mc_error(MC_ERR_FORMAT, "%s: '%s' must be a non-negative integer", c->path, key);
    *out = v->inum;
    return MC_OK;
}

static double cfg_num(const struct cfg *c, const char *key, double dflt)
{
    const struct mc_json *v = mc_json_get(c->root, key);
    return v && v->type == MC_JSON_NUMBER ? v->num : dflt;
}

static int cfg_bool(const struct cfg *c, const char *key, int dflt)
{
    const struct mc_json *v = mc_json_get(c->root, key);
    return v && v->type == MC_JSON_TRUE ? 1 : v && v->type == MC_JSON_FALSE ? 0 : dflt;
}

static const char *cfg_str(const struct cfg *c, const char *key)
{
    const struct mc_json *v = mc_json_get(c->root, key);
    return v && v->type == MC_JSON_STRING ? v->str : NULL;
}

static mc_status refuse(const struct cfg *c, const char *what)
{
    return mc_error(MC_ERR_UNSUPPORTED, "%s: %s has no Megatron GPT equivalent; not converted", c->path, what);
}

static mc_status gpt2_config(struct importer *im, const struct cfg *c)
{
    struct mc_cv_meta *md = &im->m->md;
    mc_status st = cfg_int(c, "n_embd", -1, &md->hidden_size);
    st = st ? st : cfg_int(c, "n_layer", -1, &md->num_layers);
    st = st ? st : cfg_int(c, "n_head", -1, &md->num_attention_heads);
    st = st ? st : cfg_int(c, "n_positions", -1, &md->max_position_embeddings);
    st = st ? st : cfg_int(c, "n_inner", 0, &md->ffn_hidden_size);
    if (st)
        return st;
    const char *act = cfg_str(c, "activation_function");
    act = act ? act : "gelu_new";
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu"))
        return refuse(c, "activation_function other than gelu_new / gelu_pytorch_tanh / gelu");
    if (!cfg_bool(c, "scale_attn_weights", 1) || cfg_bool(c, "scale_attn_by_inverse_layer_idx", 0))
        return refuse(c, "scale_attn_weights false or scale_attn_by_inverse_layer_idx true");
    md->gelu_tanh = strcmp(act, "gelu") != 0;
    md->num_query_groups = md->num_attention_heads;
    if (!md->ffn_hidden_size)
        md->ffn_hidden_size = 4 * md->hidden_size;
    md->norm_epsilon = cfg_num(c, "layer_norm_epsilon", 1e-5);
    md->linear_bias = true;
    md->untied = !cfg_bool(c, "tie_word_embeddings", 1);
    strcpy(md->position_embedding_type, "learned_absolute");
    strcpy(md->normalization, "LayerNorm");
    strcpy(md->tokenizer_type, "GPT2BPETokenizer");
    return MC_OK;
}

static mc_status llama_rope_scaling(const struct cfg *c, struct mc_cv_meta *md)
{
    const struct mc_json *rs = mc_json_get(c->root, "rope_scaling");
    if (!rs || rs->type == MC_JSON_NULL)
        return MC_OK;
    struct cfg r = {rs, c->path};
    const char *type = cfg_str(&r, "rope_type");
    type = type ? type : cfg_str(&r, "type");
    if (!type || strcmp(type, "llama3"))
        return refuse(c, "rope_scaling other than rope_type llama3");
    if (cfg_num(&r, "low_freq_factor", 1) != 1 || cfg_num(&r, "high_freq_factor", 4) != 4 ||
        cfg_num(&r, "original_max_position_embeddings", 8192) != 8192)
        return refuse(c, "llama3 rope_scaling with low_freq_factor != 1, high_freq_factor != 4 or "
                      "original_max_position_embeddings != 8192 (Megatron's --use-rope-scaling fixes them)");
    md->use_rope_scaling = true;
    md->rope_scaling_factor = cfg_num(&r, "factor", 8);
    return MC_OK;
}

static mc_status llama_config(struct importer *im, const struct cfg *c)
{
    struct mc_cv_meta *md = &im->m->md;
    mc_status st = cfg_int(c, "hidden_size", -1, &md->hidden_size);
    st = st ? st : cfg_int(c, "num_hidden_layers", -1, &md->num_layers);
    st = st ? st : cfg_int(c, "num_attention_heads", -1, &md->num_attention_heads);
    st = st ? st : cfg_int(c, "num_key_value_heads", md->num_attention_heads, &md->num_query_groups);
    st = st ? st : cfg_int(c, "intermediate_size", -1, &md->ffn_hidden_size);
    st = st ? st : cfg_int(c, "max_position_embeddings", -1, &md->max_position_embeddings);
    if (st)
        return st;
    if (md->num_attention_heads <= 0 || md->hidden_size % md->num_attention_heads)
        return mc_error(MC_ERR_FORMAT, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld",
                        c->path, (long long)md->hidden_size, (long long)md->num_attention_heads);
    st = cfg_int(c, "head_dim", md->hidden_size / md->num_attention_heads, &md->kv_channels);
    const char *act = cfg_str(c, "hidden_act");
    if (!st && act && strcmp(act, "silu"))
        return refuse(c, "hidden_act other than silu");
    if (!st && (cfg_bool(c, "attention_bias", 0) || cfg_bool(c, "mlp_bias", 0)))
        return refuse(c, "attention_bias / mlp_bias");
    md->norm_epsilon = cfg_num(c, "rms_norm_eps", 1e-6);
    md->rotary_base = cfg_num(c, "rope_theta", 10000);
    md->swiglu = true;
    md->linear_bias = false;
    md->gelu_tanh = false;
    md->untied = !cfg_bool(c, "tie_word_embeddings", 0);
    strcpy(md->position_embedding_type, "rope");
    strcpy(md->normalization, "RMSNorm");
    strcpy(md->tokenizer_type, "HuggingFaceTokenizer");
    return st ? st : llama_rope_scaling(c, md);
}

static mc_status read_config(struct importer *im, int64_t *hf_vocab)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/config.json", im->o->load_dir);
    mc_json_doc *doc;
    mc_status st = mc_json_parse_file(path, &doc);
    if (st)
        return st;
    struct cfg c = {mc_json_doc_root(doc), path};
    const char *type = cfg_str(&c, "model_type");
    const struct mc_json *archs = mc_json_get(c.root, "architectures");
    const char *arch = archs && archs->type == MC_JSON_ARRAY && archs->len == 1 &&
                       archs->items[0].type == MC_JSON_STRING ? archs->items[0].str : NULL;
    if ((type && !strcmp(type, "gpt2")) || (arch && !strcmp(arch, "GPT2LMHeadModel"))) {
        im->arch = ARCH_GPT2;
        st = gpt2_config(im, &c);
    } else if ((type && !strcmp(type, "llama")) || (arch && !strcmp(arch, "LlamaForCausalLM"))) {
        im->arch = ARCH_LLAMA;
        st = llama_config(im, &c);
    } else {
        st = mc_error(MC_ERR_UNSUPPORTED, "%s: model_type '%s' / architectures '%s': the hf loader "
                      "imports GPT2LMHeadModel (gpt2) and LlamaForCausalLM (llama)", path,
                      type ? type : "?", arch ? arch : "?");
    }
    st = st ? st : cfg_int(&c, "vocab_size", -1, hf_vocab);
    mc_json_doc_free(doc);
    return st;
}

/* A pytorch_model.bin (torch.save of the state dict) read with our torch.load, presented as a
 * safetensors file: its float tensors, pointing into the mapping `doc` keeps. */
static mc_status open_bin(struct importer *im, struct mc_st_file *f, const char *path)
{
    memset(f, 0, sizeof(*f));
    mc_pk_doc **doc = &im->bin_docs[im->nbin_docs];
    struct mc_pk *root;
    mc_status st = mc_pk_doc_init(doc);
    if (st)
        return st;
    im->nbin_docs++;
    if ((st = mc_torch_load(*doc, path, &root)))
        return st;
    if (!mc_pk_is_map(root))
        return mc_error(MC_ERR_FORMAT, "%s: not a state dict", path);
    f->path = mc_alloc(strlen(path) + 1);
    f->t = mc_calloc((size_t)(root->n / 2 + 1), sizeof(*f->t));
    if (!f->path || !f->t)
        return MC_ERR_NOMEM;
    strcpy(f->path, path);
    for (int64_t i = 0; i + 1 < root->n; i += 2) {
        const struct mc_pk *k = root->items[i], *v = root->items[i + 1];
        if (k->kind != MC_PK_STR || v->kind != MC_PK_TENSOR || !mc_dtype_is_float(v->dtype) ||
            v->ndim > MC_ST_MAX_DIM)
            continue; /* buffers such as GPT-2's attn.bias masks are not weights */
        if (!mc_pk_tensor_contiguous(v))
            return mc_error(MC_ERR_UNSUPPORTED, "%s: '%s' is a non-contiguous view", path, k->s);
        struct mc_st_tensor *t = &f->t[f->n];
        t->name = mc_alloc(strlen(k->s) + 1);
        if (!t->name)
            return MC_ERR_NOMEM;
        strcpy(t->name, k->s);
        t->dtype = v->dtype;
        t->ndim = v->ndim;
        memcpy(t->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
        t->numel = mc_pk_tensor_numel(v);
        t->data = (const uint8_t *)v->storage->data + (size_t)v->offset * mc_dtype_size(t->dtype);
        f->n++;
    }
    return MC_OK;
}

static mc_status open_file(struct importer *im, const char *path)
{
    if (im->nfiles == 64)
        return mc_error(MC_ERR_UNSUPPORTED, "--load-dir %s: more than 64 shard files", im->o->load_dir);
    struct mc_st_file *f = &im->files[im->nfiles++];
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".bin"))
        return open_bin(im, f, path);
    return mc_st_open(f, path);
}

/* The shard files an index's weight_map names, each opened once. */
static mc_status open_index(struct importer *im, const char *path)
{
    mc_json_doc *doc;
    mc_status st = mc_json_parse_file(path, &doc);
    if (st)
        return st;
    const struct mc_json *wm = mc_json_get(mc_json_doc_root(doc), "weight_map");
    if (!wm || wm->type != MC_JSON_OBJECT)
        st = mc_error(MC_ERR_FORMAT, "%s: no weight_map object", path);
    for (int64_t i = 0; !st && wm && i < wm->len; i++) {
        const char *file = wm->items[i].str;
        bool seen = false;
        if (wm->items[i].type != MC_JSON_STRING || strchr(file, '/')) {
            st = mc_error(MC_ERR_FORMAT, "%s: weight_map values must be file names", path);
            break;
        }
        for (int k = 0; k < im->nfiles && !seen; k++)
            seen = !strcmp(strrchr(im->files[k].path, '/') + 1, file);
        char fp[4400];
        snprintf(fp, sizeof(fp), "%s/%s", im->o->load_dir, file);
        if (!seen)
            st = open_file(im, fp);
    }
    mc_json_doc_free(doc);
    return st;
}

/* model.safetensors, model.safetensors.index.json, pytorch_model.bin or
 * pytorch_model.bin.index.json, the first present (transformers' order of preference). */
static mc_status open_weights(struct importer *im)
{
    static const char *const names[] = {"model.safetensors", "model.safetensors.index.json",
                                        "pytorch_model.bin", "pytorch_model.bin.index.json"};
    char path[4200];
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof(path), "%s/%s", im->o->load_dir, names[k]);
        if (!access(path, R_OK))
            return k % 2 ? open_index(im, path) : open_file(im, path);
    }
    return mc_error(MC_ERR_IO, "--load-dir %s: no model.safetensors, model.safetensors.index.json, "
                    "pytorch_model.bin or pytorch_model.bin.index.json", im->o->load_dir);
}

static mc_status import_weights(struct importer *im, int64_t hf_vocab)
{
    const struct mc_cv_meta *md = &im->m->md;
    int64_t h = md->hidden_size;
    bool gpt2 = im->arch == ARCH_GPT2;
    im->prefix = gpt2 && !find(im, "transformer.wte.weight") && find(im, "wte.weight") ? "" : "transformer.";
    char name[160];
    snprintf(name, sizeof(name), "%swte.weight", im->prefix);
    mc_status st = take(im, "word embeddings", gpt2 ? name : "model.embed_tokens.weight", 2, hf_vocab, h, false);
    snprintf(name, sizeof(name), "%swpe.weight", im->prefix);
    if (!st && gpt2)
        st = take(im, "position embeddings", name, 2, md->max_position_embeddings, h, false);
    for (int64_t l = 0; !st && l < md->num_layers; l++)
        st = gpt2 ? gpt2_import_layer(im, l) : llama_import_layer(im, l);
    snprintf(name, sizeof(name), "%sln_f.weight", im->prefix);
    st = st ? st : take(im, "final norm weight", gpt2 ? name : "model.norm.weight", 1, h, 1, false);
    snprintf(name, sizeof(name), "%sln_f.bias", im->prefix);
    if (!st && gpt2)
        st = take(im, "final norm bias", name, 1, h, 1, false);
    if (!st && md->untied)
        st = take(im, "output layer weight", "lm_head.weight", 2, hf_vocab, h, false);
    return st;
}

/* loader_llama_mistral: true_vocab_size is the --tokenizer-model's size (with added tokens). */
static mc_status tokenizer_vocab(const struct mc_cv_options *o, int64_t *out)
{
    struct mc_tokenizer_args ta = {.tokenizer_type = "HuggingFaceTokenizer",
                                   .tokenizer_model = o->tokenizer_model};
    mc_tokenizer *t;
    mc_status st = mc_tok_init(&ta, &t);
    if (st)
        return mc_error(st, "--tokenizer-model %s: %s", o->tokenizer_model, mc_last_error());
    *out = mc_tok_vocab_size(t);
    mc_tok_free(t);
    return MC_OK;
}

/* --bf16 / --fp16: the weights are rounded to the Megatron model's dtype (round to nearest
 * even, as torch's .to()). */
static void cast_model(struct mc_cv_model *m, enum mc_dtype dt)
{
    for (int64_t i = 0; i < m->n; i++) {
        struct mc_cv_tensor *t = &m->t[i];
        struct mc_tensor v = mc_cv_view(t);
        int64_t n = mc_tensor_numel(&v);
        const float *f = (const float *)t->data;
        uint16_t *h = (uint16_t *)t->data; /* element j is read before anything overwrites it */
        for (int64_t j = 0; j < n; j++)
            h[j] = dt == MC_DTYPE_BF16 ? mc_f32_to_bf16(f[j]) : mc_f32_to_f16(f[j]);
        t->dtype = dt;
    }
    m->md.params_dtype = dt;
}

mc_status mc_cv_load_hf(struct mc_cv_model *m, const struct mc_cv_options *o)
{
    struct importer im = {.m = m, .o = o};
    struct stat sb;
    if (stat(o->load_dir, &sb) || !S_ISDIR(sb.st_mode))
        return mc_error(MC_ERR_IO, "--load-dir %s: no such directory", o->load_dir);
    int64_t hf_vocab = 0;
    mc_status st = read_config(&im, &hf_vocab);
    struct mc_cv_meta *md = &m->md;
    if (!st) {
        if (md->num_attention_heads <= 0 || md->num_query_groups <= 0 ||
            md->num_attention_heads % md->num_query_groups)
            return mc_error(MC_ERR_FORMAT, "--load-dir %s: bad head counts in config.json", o->load_dir);
        if (!md->kv_channels)
            md->kv_channels = md->hidden_size / md->num_attention_heads;
        /* llama_mistral fixes seq_length 4096 (validate_args then needs max positions >= it) */
        md->seq_length = im.arch == ARCH_LLAMA && md->max_position_embeddings > 4096
                             ? 4096 : md->max_position_embeddings;
        md->iteration = 1; /* as loader_llama_mistral: '0' and 'release' do not load */
        md->make_vocab_size_divisible_by =
            o->make_vocab_size_divisible_by > 0 ? o->make_vocab_size_divisible_by : 128;
        st = mc_cv_true_vocab(o, &md->true_vocab_size);
        if (!st && md->true_vocab_size < 0 && o->tokenizer_model)
            st = tokenizer_vocab(o, &md->true_vocab_size);
        if (!st && md->true_vocab_size < 0)
            md->true_vocab_size = hf_vocab;
    }
    st = st ? st : open_weights(&im);
    st = st ? st : import_weights(&im, hf_vocab);
    for (int k = 0; k < im.nfiles; k++)
        mc_st_close(&im.files[k]);
    for (int k = 0; k < im.nbin_docs; k++)
        mc_pk_doc_free(im.bin_docs[k]);
    if (!st && (o->hf_params_dtype == MC_DTYPE_BF16 || o->hf_params_dtype == MC_DTYPE_F16))
        cast_model(m, o->hf_params_dtype);
    st = st ? st : mc_pk_doc_init(&md->doc);
    st = st ? st : mc_cv_hf_source_args(md->doc, md, o->load_dir, hf_vocab, &md->checkpoint_args);
    if (!st && o->log)
        fprintf(o->log, "loaded %s: %s, %lld layers, hidden %lld, heads %lld/%lld, vocab %lld\n",
                o->load_dir, im.arch == ARCH_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM",
                (long long)md->num_layers, (long long)md->hidden_size,
                (long long)md->num_attention_heads, (long long)md->num_query_groups,
                (long long)hf_vocab);
    return st ? st : mc_cv_check(m, o->load_dir);
}
