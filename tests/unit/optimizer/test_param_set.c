/* The optimizer steps a parameter set, not a model: a set built here by hand (three
 * parameters in blocks of its own, no GPT model anywhere) goes through mc_opt_step, and the
 * result is checked against torch.optim.SGD's update (momentum, coupled weight decay) with
 * Megatron's rules evaluated independently here in double: the no-weight-decay attribute,
 * the grad norm and zero count without the shared copy (param_is_not_shared), clipping by
 * clip_grad / (norm + 1e-6), and the state laid out like the param block. With pp_size > 1
 * and no model-parallel communicator the step refuses, naming the set's own setter. */
#include "megatron/optimizer.h"
#include "backend/backend.h"
#include "test.h"

#include <math.h>
#include <string.h>

enum { NW = 6, NB = 3, NS = 2, N = NW + NB + NS };

static float pblock[N], gblock[N];

/* One CPU backend for the whole test (freed before the leak check). */
static struct mc_backend *test_be;
static struct mc_backend *cpu_backend(void)
{
    if (!test_be)
        MC_ASSERT(mc_backend_create("cpu", &test_be) == MC_OK);
    return test_be;
}

static struct mc_param_set hand_set(struct mc_param *p)
{
    /* w [2, 3] (decayed), b [3] (no decay), s [2] (a shared copy: stepped, not in the norm) */
    p[0] = (struct mc_param){{"w", 2, {2, 3}, NW, pblock, gblock, false, false, -1, false, false},
                             0, false};
    p[1] = (struct mc_param){{"b", 1, {NB, 0}, NB, pblock + NW, gblock + NW, true, false, -1,
                              false, false}, NW, false};
    p[2] = (struct mc_param){{"s", 1, {NS, 0}, NS, pblock + NW + NB, gblock + NW + NB, true,
                              false, -1, true, false}, NW + NB, true};
    return (struct mc_param_set){.n_params = 3, .params = p, .n_elements = N,
                                 .param_block = pblock, .grad_block = gblock, .be = cpu_backend(),
                                 .tp_size = 1, .tp_rank = 0, .pp_size = 1,
                                 .mp_comm_setter = "hand_set_mp_comm"};
}

static void test_sgd_step(void)
{
    struct mc_param p[3];
    struct mc_param_set set = hand_set(p);
    for (int i = 0; i < N; i++) {
        pblock[i] = 0.25f * (float)(i + 1) - 1.0f;
        gblock[i] = (i % 4 == 1) ? 0.0f : 0.5f * (float)((i * 7) % 5) - 0.75f;
    }
    gblock[NW + NB] = 40.0f; /* a shared grad this large would dominate the norm */
    float p0[N], g0[N];
    memcpy(p0, pblock, sizeof p0);
    memcpy(g0, gblock, sizeof g0);

    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.optimizer = MC_OPT_SGD;
    oc.clip_grad = 0.5f;
    mc_optimizer *o = NULL;
    const struct mc_param_set *sets[1] = {&set};
    CHECK(mc_opt_init_chunks(&oc, sets, 1, &o) == MC_OK);
    struct mc_opt_step_result r;
    const float lr = 0.1f, wd = 0.01f;
    CHECK(mc_opt_step(o, lr, wd, &r) == MC_OK);

    double sq = 0.0;
    int64_t zeros = 0;
    for (int i = 0; i < NW + NB; i++) {
        sq += (double)g0[i] * g0[i];
        zeros += g0[i] == 0.0f;
    }
    double norm = sqrt(sq), coeff = 0.5 / (norm + 1e-6);
    CHECK(coeff < 1.0); /* the clipping path is taken */
    CHECK_CLOSE(r.grad_norm, norm, 1e-6);
    CHECK(r.num_zeros == zeros);
    for (int i = 0; i < N; i++) {
        double d = (double)g0[i] * coeff + (i < NW ? wd * (double)p0[i] : 0.0);
        CHECK_CLOSE(pblock[i], (double)p0[i] - lr * d, 1e-6);
    }
    /* the momentum buffer of param i sits at its offset (the first step: buf = d_p) */
    for (int64_t k = 0; k < 3; k++) {
        struct mc_opt_param_state s = mc_opt_param_state(o, k);
        CHECK(s.exp_avg == NULL && s.momentum_buffer != NULL);
        int64_t at = p[k].offset;
        double d = (double)g0[at] * coeff + (k == 0 ? wd * (double)p0[at] : 0.0);
        CHECK_CLOSE(s.momentum_buffer[0], d, 1e-6);
    }
    mc_opt_free(o);
}

static void test_mp_comm_needed(void)
{
    struct mc_param p[3];
    struct mc_param_set set = hand_set(p);
    set.pp_size = 2;
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    mc_optimizer *o = NULL;
    CHECK(mc_opt_init(&oc, &set, &o) == MC_OK);
    CHECK(mc_opt_step(o, 1e-3f, 0.0f, NULL) == MC_ERR_UNSUPPORTED);
    CHECK(strstr(mc_last_error(), "hand_set_mp_comm") != NULL);
    mc_opt_free(o);
    CHECK(mc_opt_init(&oc, NULL, &o) == MC_ERR_CONFIG && o == NULL);
}

int main(void)
{
    test_sgd_step();
    test_mp_comm_needed();
    mc_backend_free(test_be);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("param_set");
}
