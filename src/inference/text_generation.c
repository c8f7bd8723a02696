/* Generation for a batch of prompts: TextGenerationController.generate_all_output_tokens_static_batch
 * of megatron/core/inference (core_v0.12.1), on ragged rows (inference.h). Step 0 (prefill)
 * runs every prompt token of every row in one forward; each later step (decode) one token per
 * row still generating, against the KV cache. A row stops when it samples the end-of-document
 * token (which is not part of its output, as Megatron's generated length does not count it) or
 * after tokens_to_generate tokens.
 *
 * Log probabilities are Megatron's: log_softmax of the raw logits (before temperature and
 * filtering) over the padded vocabulary, at the token that actually came next, for every
 * prompt token after the first and for every generated token.
 *
 * With no_kv_cache every step starts each row over from its first token (the cache is cleared
 * and refilled), the check that the cache changes nothing. */
#include "inference/inference.h"

#include <math.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* log_softmax(x)[id] over x[V], in double */
static float log_prob(const float *x, int64_t V, int64_t id)
{
    double mx = x[0], sum = 0.0;
    for (int64_t i = 1; i < V; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int64_t i = 0; i < V; i++)
        sum += exp((double)x[i] - mx);
    return (float)((double)x[id] - mx - log(sum));
}

struct gen {
    mc_inf_model *m;
    mc_inf_cache *cache;
    struct mc_inf_generate_options *o;
    struct mc_inf_request *req;
    int64_t n, V;
    int64_t *tok, *row;    /* the step's packed tokens */
    bool *want;
    float *logits, *work;  /* [cap_logits, V], [vocab] */
    int64_t *iwork;
    bool *done;
};

static mc_status alloc_results(struct gen *g)
{
    for (int64_t r = 0; r < g->n; r++) {
        struct mc_inf_request *q = &g->req[r];
        q->n_generated = 0;
        q->stopped_at_eod = false;
        q->generated = mc_alloc(sizeof(int64_t) * (size_t)(g->o->tokens_to_generate + 1));
        if (!q->generated)
            return MC_ERR_NOMEM;
        if (g->o->logprobs) {
            q->prompt_logprobs = mc_alloc(sizeof(float) * (size_t)q->n_prompt);
            q->generated_logprobs =
                mc_alloc(sizeof(float) * (size_t)(g->o->tokens_to_generate + 1));
            if (!q->prompt_logprobs || !q->generated_logprobs)
                return MC_ERR_NOMEM;
        }
    }
    return MC_OK;
}

/* Row r's next token from its last logits x (step = tokens generated so far). */
static void take_next(struct gen *g, int64_t r, const float *x)
{
    struct mc_inf_request *q = &g->req[r];
    int64_t id = mc_inf_sample(&g->o->sampling, x, g->o->vocab_size, r, q->n_generated, g->work,
                               g->iwork);
    if (id == g->o->eod) {
        q->stopped_at_eod = true;
        g->done[r] = true;
        return;
    }
    if (g->o->logprobs)
        q->generated_logprobs[q->n_generated] = log_prob(x, g->V, id);
    q->generated[q->n_generated++] = id;
    g->done[r] = q->n_generated >= g->o->tokens_to_generate ||
                 (g->o->stop && g->o->stop(g->o->stop_ctx, r, q->generated, q->n_generated));
}

/* Step 0: every prompt token. Logits of every token with logprobs, else of each row's last. */
static mc_status prefill(struct gen *g)
{
    int64_t k = 0;
    for (int64_t r = 0; r < g->n; r++)
        for (int64_t i = 0; i < g->req[r].n_prompt; i++, k++) {
            g->tok[k] = g->req[r].prompt[i];
            g->row[k] = r;
            g->want[k] = g->o->logprobs || i == g->req[r].n_prompt - 1;
        }
    mc_status st = mc_inf_forward(g->m, g->cache, k, g->tok, g->row, g->want, g->logits);
    if (st)
        return st;
    const float *x = g->logits;
    for (int64_t r = 0; r < g->n; r++) {
        struct mc_inf_request *q = &g->req[r];
        if (g->o->logprobs) /* rows of every prompt token: the first n - 1 predict the next */
            for (int64_t i = 0; i + 1 < q->n_prompt; i++, x += g->V)
                q->prompt_logprobs[i] = log_prob(x, g->V, q->prompt[i + 1]);
        g->done[r] = g->o->tokens_to_generate == 0;
        if (!g->done[r])
            take_next(g, r, x);
        x += g->V;
    }
    return MC_OK;
}

/* A decode step: the last token of every row still going (with the cache), or the whole row
 * again from an empty cache (no_kv_cache). */
static mc_status decode(struct gen *g, bool *any)
{
    int64_t k = 0;
    *any = false;
    for (int64_t r = 0; r < g->n; r++) {
        if (g->done[r])
            continue;
        const struct mc_inf_request *q = &g->req[r];
        if (g->o->no_kv_cache) {
            mc_inf_cache_reset(g->cache, r);
            for (int64_t i = 0; i < q->n_prompt; i++, k++)
                g->tok[k] = q->prompt[i], g->row[k] = r, g->want[k] = false;
            for (int64_t i = 0; i + 1 < q->n_generated; i++, k++)
                g->tok[k] = q->generated[i], g->row[k] = r, g->want[k] = false;
        }
        g->tok[k] = q->generated[q->n_generated - 1], g->row[k] = r, g->want[k] = true;
        k++;
        *any = true;
    }
    if (!*any)
        return MC_OK;
    mc_status st = mc_inf_forward(g->m, g->cache, k, g->tok, g->row, g->want, g->logits);
    if (st)
        return st;
    const float *x = g->logits;
    for (int64_t r = 0; r < g->n; r++)
        if (!g->done[r]) {
            take_next(g, r, x);
            x += g->V;
        }
    g->o->decode_tokens += k; /* with no_kv_cache, the recomputed tokens too */
    return MC_OK;
}

static mc_status check(const mc_inf_model *m, const struct mc_inf_generate_options *o,
                       const struct mc_inf_request *req, int64_t n)
{
    if (n < 1)
        return mc_error(MC_ERR_CONFIG, "no prompts to generate for");
    if (o->tokens_to_generate < 0)
        return mc_error(MC_ERR_CONFIG, "tokens to generate %lld: must be at least 0",
                        (long long)o->tokens_to_generate);
    for (int64_t r = 0; r < n; r++) {
        if (req[r].n_prompt < 1)
            return mc_error(MC_ERR_CONFIG, "prompt %lld is empty (no tokens): give it text or "
                            "a BOS token", (long long)r);
        if (req[r].n_prompt + o->tokens_to_generate > mc_inf_model_max_seq(m))
            return mc_error(MC_ERR_CONFIG, "prompt %lld: %lld tokens + %lld to generate is longer "
                            "than the %lld tokens the model was set up for", (long long)r,
                            (long long)req[r].n_prompt, (long long)o->tokens_to_generate,
                            (long long)mc_inf_model_max_seq(m));
    }
    return mc_inf_sampling_check(&o->sampling, o->vocab_size);
}

mc_status mc_inf_generate(mc_inf_model *m, struct mc_inf_generate_options *o,
                          struct mc_inf_request *req, int64_t n)
{
    mc_status st = check(m, o, req, n);
    if (st)
        return st;
    struct gen g = {.m = m, .o = o, .req = req, .n = n, .V = mc_inf_model_config(m)->padded_vocab_size};
    int64_t total = 0, longest = 0;
    for (int64_t r = 0; r < n; r++) {
        total += req[r].n_prompt + o->tokens_to_generate;
        longest = req[r].n_prompt > longest ? req[r].n_prompt : longest;
    }
    int64_t rows_out = o->logprobs ? total : n;
    g.tok = mc_alloc(sizeof(int64_t) * (size_t)total);
    g.row = mc_alloc(sizeof(int64_t) * (size_t)total);
    g.want = mc_alloc(sizeof(bool) * (size_t)total);
    g.logits = mc_alloc(sizeof(float) * (size_t)(rows_out * g.V));
    g.work = mc_alloc(sizeof(float) * (size_t)g.V);
    g.iwork = mc_alloc(sizeof(int64_t) * (size_t)g.V);
    g.done = mc_calloc((size_t)n, sizeof(bool));
    o->prefill_s = o->decode_s = 0.0;
    o->prefill_tokens = o->decode_tokens = 0;
    if (!g.tok || !g.row || !g.want || !g.logits || !g.work || !g.iwork || !g.done) {
        st = MC_ERR_NOMEM;
        goto out;
    }
    if ((st = mc_inf_cache_init(m, n, longest + o->tokens_to_generate, &g.cache)) || (st = alloc_results(&g)))
        goto out;
    double t0 = now();
    if ((st = prefill(&g)))
        goto out;
    double t1 = now();
    o->prefill_s = t1 - t0;
    for (int64_t r = 0; r < n; r++)
        o->prefill_tokens += req[r].n_prompt;
    for (bool any = true; any;)
        if ((st = decode(&g, &any)))
            goto out;
    o->decode_s = now() - t1;
out:
    mc_inf_cache_free(g.cache);
    mc_free(g.done);
    mc_free(g.iwork);
    mc_free(g.work);
    mc_free(g.logits);
    mc_free(g.want);
    mc_free(g.row);
    mc_free(g.tok);
    return st;
}

void mc_inf_requests_free(struct mc_inf_request *req, int64_t n)
{
    for (int64_t r = 0; req && r < n; r++) {
        mc_free(req[r].generated);
        mc_free(req[r].prompt_logprobs);
        mc_free(req[r].generated_logprobs);
        req[r].generated = NULL;
        req[r].prompt_logprobs = req[r].generated_logprobs = NULL;
    }
}
