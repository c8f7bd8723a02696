/* Checkpoint save/load throughput of our torch.save / torch.load (src/checkpointing/) on a
 * GPT-2-124M-sized state dict: the mcore model (vocab padded to 50304, 12 layers, hidden 768,
 * seq 1024, fp32) plus torch Adam state (exp_avg, exp_avg_sq, step per parameter), laid out
 * like Megatron's model_optim_rng.pt. Save = mc_torch_save (temp name, fsync, rename as the
 * writer does); load = mc_torch_load plus copying every tensor into preallocated memory, as
 * mc_ckpt_load does. Best of REPEATS each: save, save less its final flush + fsync (the writer's
 * own timer; torch.save does not fsync), that fsync alone, load.
 * Usage: bench_ckpt FILE REPEATS; prints one JSON line. Built by
 * bench/checkpoint/run.sh. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpointing/torch_pickle.h"
#include "checkpointing/torch_zip.h"

#define MAXP 256
static const char *names[MAXP];
static int64_t shapes[MAXP][2];
static int ndims[MAXP], np_;

static void add(const char *name, int nd, int64_t a, int64_t b)
{
    names[np_] = name;
    ndims[np_] = nd;
    shapes[np_][0] = a;
    shapes[np_][1] = b;
    np_++;
}

static void build_shapes(void)
{
    static char buf[12][12][64];
    const int64_t h = 768, f = 3072;
    add("embedding.word_embeddings.weight", 2, 50304, h);
    add("embedding.position_embeddings.weight", 2, 1024, h);
    static const char *sfx[12] = {
        "self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
        "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
        "self_attention.linear_proj.weight", "self_attention.linear_proj.bias",
        "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.layer_norm_bias",
        "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight", "mlp.linear_fc2.bias"};
    const int64_t sh[12][3] = {{1, h, 0}, {1, h, 0}, {2, 3 * h, h}, {1, 3 * h, 0}, {2, h, h},
                               {1, h, 0}, {1, h, 0}, {1, h, 0}, {2, f, h}, {1, f, 0}, {2, h, f},
                               {1, h, 0}};
    for (int l = 0; l < 12; l++)
        for (int k = 0; k < 12; k++) {
            snprintf(buf[l][k], sizeof(buf[l][k]), "decoder.layers.%d.%s", l, sfx[k]);
            add(buf[l][k], (int)sh[k][0], sh[k][1], sh[k][2]);
        }
    add("decoder.final_layernorm.weight", 1, h, 0);
    add("decoder.final_layernorm.bias", 1, h, 0);
}

static int64_t numel_of(int i)
{
    return ndims[i] == 2 ? shapes[i][0] * shapes[i][1] : shapes[i][0];
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct mc_pk *tensor(mc_pk_doc *d, int i, const float *data)
{
    return mc_pk_tensor(d, mc_pk_storage(d, MC_DTYPE_F32, numel_of(i), data), 0, ndims[i],
                        shapes[i], NULL);
}

static struct mc_pk *state_dict(mc_pk_doc *d, float **bufs)
{
    struct mc_pk *root = mc_pk_new(d, MC_PK_DICT), *model = mc_pk_new(d, MC_PK_ODICT);
    struct mc_pk *opt = mc_pk_new(d, MC_PK_DICT), *state = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *groups = mc_pk_new(d, MC_PK_LIST), *g = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *params = mc_pk_new(d, MC_PK_LIST);
    static float step = 10.0f;
    for (int i = 0; i < np_; i++) {
        mc_pk_set(d, model, names[i], tensor(d, i, bufs[3 * i]));
        struct mc_pk *ps = mc_pk_new(d, MC_PK_DICT);
        mc_pk_set(d, ps, "step", mc_pk_tensor(d, mc_pk_storage(d, MC_DTYPE_F32, 1, &step), 0, 0,
                                              NULL, NULL));
        mc_pk_set(d, ps, "exp_avg", tensor(d, i, bufs[3 * i + 1]));
        mc_pk_set(d, ps, "exp_avg_sq", tensor(d, i, bufs[3 * i + 2]));
        char key[16];
        snprintf(key, sizeof(key), "%d", i);
        mc_pk_set(d, state, key, ps); /* torch uses int keys; a str key costs the same */
        mc_pk_append(d, params, mc_pk_int(d, i));
    }
    mc_pk_set(d, g, "lr", mc_pk_float(d, 6e-4));
    mc_pk_set(d, g, "params", params);
    mc_pk_append(d, groups, g);
    mc_pk_set(d, opt, "state", state);
    mc_pk_set(d, opt, "param_groups", groups);
    mc_pk_set(d, root, "iteration", mc_pk_int(d, 10));
    mc_pk_set(d, root, "model", model);
    mc_pk_set(d, root, "optimizer", opt);
    return root;
}

static int copy_tensor(const struct mc_pk *t, float *dst)
{
    if (!t || t->kind != MC_PK_TENSOR)
        return 0;
    memcpy(dst, (const float *)t->storage->data + t->offset,
           (size_t)mc_pk_tensor_numel(t) * sizeof(float));
    return 1;
}

/* Copies the model and Adam tensors into dst (3 per parameter), as loading into params does. */
static int copy_out(const struct mc_pk *v, float **dst)
{
    const struct mc_pk *model = mc_pk_get(v, "model");
    const struct mc_pk *state = mc_pk_get(mc_pk_get(v, "optimizer"), "state");
    int k = 0;
    for (int i = 0; model && state && i < np_ && 2 * i + 1 < model->n && 2 * i + 1 < state->n;
         i++) {
        const struct mc_pk *ps = state->items[2 * i + 1];
        k += copy_tensor(model->items[2 * i + 1], dst[3 * i]);
        k += copy_tensor(mc_pk_get(ps, "exp_avg"), dst[3 * i + 1]);
        k += copy_tensor(mc_pk_get(ps, "exp_avg_sq"), dst[3 * i + 2]);
    }
    return k;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: bench_ckpt FILE REPEATS\n"), 2;
    int reps = atoi(argv[2]);
    build_shapes();
    float *bufs[3 * MAXP], *dst[3 * MAXP];
    double bytes = 0;
    for (int i = 0; i < 3 * np_; i++) {
        size_t n = (size_t)numel_of(i / 3);
        bufs[i] = malloc(n * sizeof(float));
        dst[i] = malloc(n * sizeof(float));
        if (!bufs[i] || !dst[i])
            return fprintf(stderr, "bench_ckpt: out of memory\n"), 1;
        for (size_t j = 0; j < n; j++) { /* dst touched too: the model's buffers exist */
            bufs[i][j] = (float)(j % 1000) * 1e-3f;
            dst[i][j] = -1.0f;
        }
        bytes += (double)n * sizeof(float);
    }
    double best_save = 1e30, best_load = 1e30, best_nosync = 1e30, best_sync = 1e30;
    for (int r = 0; r < reps; r++) {
        mc_pk_doc *d;
        if (mc_pk_doc_init(&d))
            return 1;
        remove(argv[1]); /* a new file, as in a new iter_* directory (torch's bench does too) */
        double t0 = now();
        mc_status st = mc_torch_save(d, state_dict(d, bufs), argv[1]);
        double t1 = now(), sync_s = mc_zip_last_sync_seconds();
        mc_pk_doc_free(d);
        if (st)
            return fprintf(stderr, "bench_ckpt: save: %s\n", mc_last_error()), 1;
        struct mc_pk *v;
        if (mc_pk_doc_init(&d))
            return 1;
        double t2 = now();
        st = mc_torch_load(d, argv[1], &v);
        int k = st ? 0 : copy_out(v, dst);
        double t3 = now();
        mc_pk_doc_free(d);
        if (st || k != 3 * np_)
            return fprintf(stderr, "bench_ckpt: load: %s (%d tensors)\n", mc_last_error(), k), 1;
        best_save = t1 - t0 < best_save ? t1 - t0 : best_save;
        best_load = t3 - t2 < best_load ? t3 - t2 : best_load;
        best_nosync = t1 - t0 - sync_s < best_nosync ? t1 - t0 - sync_s : best_nosync;
        best_sync = sync_s < best_sync ? sync_s : best_sync;
    }
    for (int i = 0; i < 3 * np_; i++)
        if (memcmp(bufs[i], dst[i], (size_t)numel_of(i / 3) * sizeof(float)))
            return fprintf(stderr, "bench_ckpt: tensor %d differs after load\n", i), 1;
    for (int i = 0; i < 3 * np_; i++) {
        free(bufs[i]);
        free(dst[i]);
    }
    printf("{\"tensors\": %d, \"gb\": %.4f, \"save_s\": %.4f, \"save_nosync_s\": %.4f, "
           "\"sync_s\": %.4f, \"load_s\": %.4f}\n",
           3 * np_, bytes / 1e9, best_save, best_nosync, best_sync, best_load);
    return 0;
}
