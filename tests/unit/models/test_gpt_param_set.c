/* GPTModel's parameter set (mc_gpt_param_set) is the model's parameters as the optimizer and
 * DDP see them: every view equal to mc_gpt_param's, packed at its offset in the model's
 * blocks, the grad-norm group of the config, no hooks installed, and Megatron's
 * shared_embedding attribute exactly where GPTModel sets it (megatron/core/models/common/
 * language_module/language_module.py, setup_embeddings_and_output_layer): with tied
 * embeddings split across pipeline stages, the first (virtual) stage's word embedding and
 * the last stage's output_layer copy; never with pp = 1 or untied embeddings. */
#include "megatron/gpt.h"
#include "test.h"

#include <string.h>

static mc_gpt_model *stage(bool untie, int pp, int rank, int vp, int vrank)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 4;
    c.hidden_size = 8;
    c.num_attention_heads = 2;
    c.vocab_size = 10;
    c.make_vocab_size_divisible_by = 4;
    c.max_position_embeddings = c.seq_length = 4;
    c.micro_batch_size = 1;
    c.untie_embeddings_and_output_weights = untie;
    c.pipeline_model_parallel_size = pp;
    c.pipeline_model_parallel_rank = rank;
    c.virtual_pipeline_model_parallel_size = vp;
    c.virtual_pipeline_model_parallel_rank = vrank;
    mc_gpt_model *m = NULL;
    if (mc_gpt_model_init(&c, &m) != MC_OK)
        fprintf(stderr, "init: %s\n", mc_last_error());
    return m;
}

/* Checks the set against the model; returns the names flagged shared_embedding, joined. */
static void check_set(mc_gpt_model *m, int pp, char *shared, size_t cap)
{
    const struct mc_param_set *s = mc_gpt_param_set(m);
    shared[0] = '\0';
    CHECK(s->n_params == mc_gpt_num_params(m) && s->n_elements == mc_gpt_num_elements(m));
    CHECK(s->be != NULL && s->tp_size == 1 && s->tp_rank == 0 && s->pp_size == pp);
    CHECK(s->tp_comm == NULL && s->mp_comm == NULL);
    CHECK(s->hooks.grad_ready == NULL && s->hooks.param_use == NULL);
    CHECK(strcmp(s->mp_comm_setter, "mc_gpt_set_mp_comm") == 0);
    int64_t at = 0;
    for (int64_t i = 0; i < s->n_params; i++) {
        const struct mc_param *p = &s->params[i];
        struct mc_param_view v = mc_gpt_param(m, i);
        CHECK(strcmp(p->view.name, v.name) == 0 && p->view.numel == v.numel);
        CHECK(p->view.ndim == v.ndim && p->view.shape[0] == v.shape[0] &&
              p->view.shape[1] == v.shape[1]);
        CHECK(p->view.no_weight_decay == v.no_weight_decay &&
              p->view.tensor_parallel == v.tensor_parallel &&
              p->view.partition_dim == v.partition_dim && p->view.shared == v.shared &&
              p->view.sequence_parallel == v.sequence_parallel);
        CHECK(p->offset == at && p->view.data == s->param_block + at &&
              p->view.grad == s->grad_block + at && v.data == p->view.data);
        at += p->view.numel;
        if (p->shared_embedding) {
            strncat(shared, p->view.name, cap - strlen(shared) - 2);
            strcat(shared, " ");
        }
    }
    CHECK(at == s->n_elements);
}

static void expect(const char *label, bool untie, int pp, int rank, int vp, int vrank,
                   const char *want)
{
    mc_gpt_model *m = stage(untie, pp, rank, vp, vrank);
    CHECK(m != NULL);
    if (!m)
        return;
    char got[256];
    check_set(m, pp, got, sizeof got);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "%s: shared_embedding on '%s', want '%s'\n", label, got, want);
        CHECK(false);
    }
    mc_gpt_model_free(m);
}

int main(void)
{
    expect("pp=1 tied", false, 1, 0, 0, 0, "");
    expect("pp=2 tied, first", false, 2, 0, 0, 0, "embedding.word_embeddings.weight ");
    expect("pp=2 tied, last", false, 2, 1, 0, 0, "output_layer.weight ");
    expect("pp=2 untied, first", true, 2, 0, 0, 0, "");
    expect("pp=2 untied, last", true, 2, 1, 0, 0, "");
    /* interleaved: only the first virtual stage holds the embedding, only the last the head */
    expect("pp=2 vp=2 tied, rank 0 chunk 0", false, 2, 0, 2, 0,
           "embedding.word_embeddings.weight ");
    expect("pp=2 vp=2 tied, rank 0 chunk 1", false, 2, 0, 2, 1, "");
    expect("pp=2 vp=2 tied, rank 1 chunk 0", false, 2, 1, 2, 0, "");
    expect("pp=2 vp=2 tied, rank 1 chunk 1", false, 2, 1, 2, 1, "output_layer.weight ");
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("gpt_param_set");
}
