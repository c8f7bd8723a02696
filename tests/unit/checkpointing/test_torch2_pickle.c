/* src/checkpointing/torch_pickle.c on a file written by torch 2.x with numpy 2 (Megatron's own
 * --fp16 checkpoint, tests/golden/mixed/gpt_fp16_static): the fp32_from_fp16_params tensors come
 * as torch._tensor._rebuild_from_type_v2 (they keep Megatron's tensor_model_parallel attributes)
 * and rng_state's numpy arrays as numpy._core.multiarray._reconstruct; both load, values as
 * torch 2.15 reads them. A _rebuild_from_type_v2 of anything but a plain torch.Tensor is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpointing/torch_pickle.h"
#include "test.h"

static mc_status no_storage(void *ctx, const char *key, enum mc_dtype t, int64_t numel, const void **data)
{
    (void)ctx; (void)key; (void)t; (void)numel; (void)data;
    return mc_error(MC_ERR_FORMAT, "no storage expected");
}

static void check_megatron_fp16_file(void)
{
    const char *src = getenv("MC_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/golden/mixed/gpt_fp16_static/save/iter_0000003/mp_rank_00/"
             "model_optim_rng.pt", src ? src : "..");
    mc_pk_doc *d;
    struct mc_pk *v = NULL;
    CHECK(mc_pk_doc_init(&d) == MC_OK);
    mc_status st = mc_torch_load(d, path, &v);
    CHECK(st == MC_OK);
    if (st) {
        fprintf(stderr, "%s\n", mc_last_error());
        mc_pk_doc_free(d);
        return;
    }
    struct mc_pk *groups = mc_pk_get(mc_pk_get(v, "optimizer"), "fp32_from_fp16_params");
    CHECK(groups && groups->kind == MC_PK_LIST && groups->n == 2 && groups->items[0]->n > 0);
    if (groups && groups->n == 2 && groups->items[0]->n > 0) {
        const struct mc_pk *w = groups->items[0]->items[0]; /* the word embedding's main param */
        CHECK(w->kind == MC_PK_TENSOR && w->dtype == MC_DTYPE_F32 && w->ndim == 2 &&
              w->shape[0] == 576 && w->shape[1] == 16);
        if (w->kind == MC_PK_TENSOR)
            CHECK(((const float *)w->storage->data)[w->offset + 1] == -0.021819930523633957f);
    }
    struct mc_pk *rng = mc_pk_get(v, "rng_state");
    CHECK(rng && rng->kind == MC_PK_LIST && rng->n == 1);
    if (rng && rng->n == 1) {
        struct mc_pk *np = mc_pk_get(rng->items[0], "np_rng_state");
        CHECK(np && np->kind == MC_PK_TUPLE && np->n == 5 && np->items[1]->kind == MC_PK_NDARRAY &&
              np->items[1]->shape[0] == 624); /* MT19937 state words */
    }
    mc_pk_doc_free(d);
}

static void check_refused_type(void)
{
    /* _rebuild_from_type_v2(_rebuild_tensor_v2, torch.Size, (), {}): not a plain tensor */
    static const char p[] = "\x80\x02" "ctorch._tensor\n_rebuild_from_type_v2\n"
                            "(ctorch._utils\n_rebuild_tensor_v2\nctorch\nSize\n)}tR.";
    mc_pk_doc *d;
    struct mc_pk *v = NULL;
    CHECK(mc_pk_doc_init(&d) == MC_OK);
    CHECK(mc_pk_load(d, (const uint8_t *)p, sizeof(p) - 1, "forged", no_storage, NULL, &v) == MC_ERR_FORMAT);
    CHECK(strstr(mc_last_error(), "_rebuild_from_type_v2") && strstr(mc_last_error(), "torch.Tensor"));
    mc_pk_doc_free(d);
}

int main(void)
{
    check_megatron_fp16_file();
    check_refused_type();
    return test_summary("test_torch2_pickle");
}
