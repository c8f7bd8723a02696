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
 * and refilled), the check that the cache changes nothing.
 *
 * Tensor parallel: every rank runs the same steps (each forward is collective); rank 0 alone
 * samples and decides which rows stop, then broadcasts each row's new token and state (as
 * Megatron's controller broadcasts the sampled tokens from the last stage), so the ranks never
 * disagree on what comes next, whatever their floating-point sums. */
#include "inference/inference.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "parallel_state/parallel_state.h"

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
    bool leader;           /* samples (rank 0 of the tp group) */
    int64_t *sync;         /* [4 n]: the step's broadcast */
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

/* After a step's sampling on rank 0: each row's generated count, last token, done and eod flags
 * to every rank (the others did not sample). */
static mc_status sync_step(struct gen *g)
{
    if (mc_inf_model_tp_size(g->m) == 1)
        return MC_OK;
    for (int64_t r = 0; g->leader && r < g->n; r++) {
        const struct mc_inf_request *q = &g->req[r];
        int64_t *e = g->sync + 4 * r;
        e[0] = q->n_generated, e[1] = q->n_generated ? q->generated[q->n_generated - 1] : 0;
        e[2] = g->done[r], e[3] = q->stopped_at_eod;
    }
    mc_status st = mc_inf_broadcast(g->m, g->sync, 4 * g->n, MC_DTYPE_I64);
    for (int64_t r = 0; !st && !g->leader && r < g->n; r++) {
        struct mc_inf_request *q = &g->req[r];
        const int64_t *e = g->sync + 4 * r;
        if (e[0] < q->n_generated || e[0] > g->o->tokens_to_generate)
            return mc_error(MC_ERR_FORMAT, "generation broadcast: row %lld has %lld tokens",
                            (long long)r, (long long)e[0]);
        q->n_generated = e[0];
        if (e[0])
            q->generated[e[0] - 1] = e[1];
        g->done[r] = e[2] != 0, q->stopped_at_eod = e[3] != 0;
    }
    return st;
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
    for (int64_t r = 0; g->leader && r < g->n; r++) {
        struct mc_inf_request *q = &g->req[r];
        if (g->o->logprobs) /* rows of every prompt token: the first n - 1 predict the next */
            for (int64_t i = 0; i + 1 < q->n_prompt; i++, x += g->V)
                q->prompt_logprobs[i] = log_prob(x, g->V, q->prompt[i + 1]);
        g->done[r] = g->o->tokens_to_generate == 0;
        if (!g->done[r])
            take_next(g, r, x);
        x += g->V;
    }
    return sync_step(g);
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
    for (int64_t r = 0; g->leader && r < g->n; r++)
        if (!g->done[r]) {
            take_next(g, r, x);
            x += g->V;
        }
    g->o->decode_tokens += k; /* with no_kv_cache, the recomputed tokens too */
    return sync_step(g);
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
    struct gen g = {.m = m, .o = o, .req = req, .n = n, .V = mc_inf_model_config(m)->padded_vocab_size,
                    .leader = mc_inf_model_tp_rank(m) == 0};
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
    g.sync = mc_alloc(sizeof(int64_t) * (size_t)(4 * n));
    o->prefill_s = o->decode_s = 0.0;
    o->prefill_tokens = o->decode_tokens = 0;
    if (!g.tok || !g.row || !g.want || !g.logits || !g.work || !g.iwork || !g.done || !g.sync) {
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
    mc_free(g.sync);
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

/* ---- the server's ranks (mc_inf_generate_lead / mc_inf_follow) ---------------------------- */
/* The broadcast request: a header, then the prompt lengths, then every prompt token. */
enum { H_GO, H_N, H_TOKENS, H_LOGPROBS, H_NO_KV, H_TOTAL, H_VOCAB, N_HEADER };

mc_status mc_inf_generate_lead(mc_inf_model *m, struct mc_inf_generate_options *o,
                               struct mc_inf_request *req, int64_t n)
{
    if (mc_inf_model_tp_size(m) == 1)
        return mc_inf_generate(m, o, req, n);
    mc_status st = check(m, o, req, n); /* a refused request never reaches the other ranks */
    if (st)
        return st;
    int64_t h[N_HEADER] = {[H_GO] = 1, [H_N] = n, [H_TOKENS] = o->tokens_to_generate,
                           [H_LOGPROBS] = o->logprobs, [H_NO_KV] = o->no_kv_cache,
                           [H_VOCAB] = o->vocab_size};
    for (int64_t r = 0; r < n; r++)
        h[H_TOTAL] += req[r].n_prompt;
    int64_t *buf = mc_alloc(sizeof(int64_t) * (size_t)(n + h[H_TOTAL]));
    if (!buf)
        return MC_ERR_NOMEM; /* before the header: the others keep waiting for a request */
    int64_t k = n;
    for (int64_t r = 0; r < n; r++) {
        buf[r] = req[r].n_prompt;
        memcpy(buf + k, req[r].prompt, sizeof(int64_t) * (size_t)req[r].n_prompt);
        k += req[r].n_prompt;
    }
    if (!(st = mc_inf_broadcast(m, h, N_HEADER, MC_DTYPE_I64)) &&
        !(st = mc_inf_broadcast(m, buf, k, MC_DTYPE_I64)))
        st = mc_inf_generate(m, o, req, n);
    mc_free(buf);
    if (st) { /* the other ranks may be anywhere in this generation: none may wait forever */
        fprintf(stderr, "generation failed on rank 0 after its request went to every rank: %s; "
                "ending every rank\n", mc_last_error());
        fflush(stderr);
        mc_comm_abort(1);
    }
    return st;
}

mc_status mc_inf_follow_stop(mc_inf_model *m)
{
    int64_t h[N_HEADER] = {0}; /* H_GO 0: return */
    return mc_inf_broadcast(m, h, N_HEADER, MC_DTYPE_I64);
}

/* One broadcast request on a rank other than 0: the same generation, the results dropped. */
static mc_status follow_one(mc_inf_model *m, const int64_t *h)
{
    int64_t n = h[H_N], total = h[H_TOTAL];
    if (n < 1 || total < n || h[H_TOKENS] < 0)
        return mc_error(MC_ERR_FORMAT, "generation broadcast: %lld prompts, %lld tokens",
                        (long long)n, (long long)total);
    int64_t *buf = mc_alloc(sizeof(int64_t) * (size_t)(n + total));
    struct mc_inf_request *req = mc_calloc((size_t)n, sizeof(*req));
    mc_status st = !buf || !req ? MC_ERR_NOMEM : mc_inf_broadcast(m, buf, n + total, MC_DTYPE_I64);
    for (int64_t r = 0, k = n; !st && r < n; k += buf[r], r++)
        req[r].prompt = buf + k, req[r].n_prompt = buf[r];
    /* rank 0 samples: greedy here only satisfies the checks, its tokens are not used */
    struct mc_inf_generate_options o = {.sampling = {.greedy = true, .temperature = 1.0f},
                                        .tokens_to_generate = h[H_TOKENS], .eod = -1,
                                        .vocab_size = h[H_VOCAB], .logprobs = h[H_LOGPROBS] != 0,
                                        .no_kv_cache = h[H_NO_KV] != 0};
    if (!st)
        st = mc_inf_generate(m, &o, req, n);
    mc_inf_requests_free(req, n);
    mc_free(req);
    mc_free(buf);
    return st;
}

mc_status mc_inf_follow(mc_inf_model *m)
{
    for (;;) {
        int64_t h[N_HEADER];
        mc_status st = mc_inf_broadcast(m, h, N_HEADER, MC_DTYPE_I64);
        if (st)
            return st;
        if (!h[H_GO])
            return MC_OK;
        if ((st = follow_one(m, h))) /* rank 0 failed the same way and answered it: go on */
            fprintf(stderr, "rank %d: generation failed: %s\n", mc_inf_model_tp_rank(m),
                    mc_last_error());
    }
}
