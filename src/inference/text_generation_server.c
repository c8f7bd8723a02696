/* The request handler of Megatron's text-generation server: MegatronGenerate.put of
 * megatron/inference/text_generation_server.py with run_mcore_engine
 * (megatron/inference/text_generation/mcore_engine_server.py), core_v0.12.1. The HTTP side is
 * tools/run_text_generation_server.c.
 *
 * A PUT /api body is validated in Megatron's order with Megatron's messages (the body a client
 * reads: the message as a JSON string, flask_restful's output_json); the answer is what
 * Flask's jsonify writes: sorted keys, no spaces, ASCII escapes, a newline:
 *   {"logprobs":[[...]],"segments":[["tok", ...]],"text":["prompt + generation"]}
 * What differs from Megatron (each a Megatron bug or a missing piece, COMPATIBILITY.md): every
 * refused request is a 400 (Megatron answers most of them with status 200), random_seed and
 * add_BOS are honoured and stop_on_eol / stop_on_double_eol stop a row (Megatron's engine path
 * ignores them), "text" ends where the row stopped (Megatron's includes the end-of-document
 * token and the batch's padding after it), beam search is refused. */
#include "inference/text_generation_server.h"

#include <string.h>

#include "core/json.h"

static const struct mc_json *get(const struct mc_json *root, const char *key)
{
    return root && root->type == MC_JSON_OBJECT ? mc_json_get(root, key) : NULL;
}

/* Python's isinstance(v, int): JSON integers and true / false (bool is an int). */
static bool is_int(const struct mc_json *v)
{
    return (v->type == MC_JSON_NUMBER && v->is_int) || v->type == MC_JSON_TRUE ||
           v->type == MC_JSON_FALSE;
}
static int64_t int_of(const struct mc_json *v)
{
    return v->type == MC_JSON_NUMBER ? v->inum : v->type == MC_JSON_TRUE;
}
static bool is_float(const struct mc_json *v) { return v->type == MC_JSON_NUMBER && !v->is_int; }
static bool is_number(const struct mc_json *v) { return is_int(v) || is_float(v); }
static double num_of(const struct mc_json *v) { return is_float(v) ? v->num : (double)int_of(v); }
static bool is_bool(const struct mc_json *v)
{
    return v->type == MC_JSON_TRUE || v->type == MC_JSON_FALSE;
}

struct req {
    const struct mc_json *prompts;
    int64_t tokens_to_generate, top_k, random_seed;
    bool logprobs, add_bos, stop_on_eol, stop_on_double_eol, no_log;
    double temperature, top_p;
};

/* The refusal text, or NULL when the request is good (Megatron's checks, in its order). */
static const char *validate(const struct mc_json *r, struct req *q)
{
    const struct mc_json *v;
    *q = (struct req){.tokens_to_generate = 64, .temperature = 1.0, .random_seed = -1};
    if (!get(r, "prompts"))
        return "prompts argument required";
    if (get(r, "max_len"))
        return "max_len is no longer used.  Replace with tokens_to_generate";
    if (get(r, "sentences"))
        return "sentences is no longer used.  Replace with prompts";
    q->prompts = get(r, "prompts");
    if (q->prompts->type != MC_JSON_ARRAY)
        return "prompts is not a list of strings";
    if (q->prompts->len == 0)
        return "prompts is empty";
    if (q->prompts->len > 128)
        return "Maximum number of prompts is 128";
    for (int64_t i = 0; i < q->prompts->len; i++) /* Megatron fails later, with a 500 */
        if (q->prompts->items[i].type != MC_JSON_STRING)
            return "prompts is not a list of strings";
    if ((v = get(r, "tokens_to_generate"))) {
        if (!is_int(v))
            return "tokens_to_generate must be an integer greater than 0";
        if ((q->tokens_to_generate = int_of(v)) < 0)
            return "tokens_to_generate must be an integer greater than or equal to 0";
    }
    if ((v = get(r, "logprobs"))) {
        if (!is_bool(v))
            return "logprobs must be a boolean value";
        q->logprobs = v->type == MC_JSON_TRUE;
    }
    if (q->tokens_to_generate == 0 && !q->logprobs)
        return "tokens_to_generate=0 implies logprobs should be True";
    if ((v = get(r, "temperature"))) {
        if (!is_number(v))
            return "temperature must be a positive number less than or equal to 1000.0";
        q->temperature = num_of(v);
        if (!(q->temperature > 0.0 && q->temperature <= 100.0))
            return "temperature must be a positive number less than or equal to 100.0";
    }
    if ((v = get(r, "top_k"))) {
        if (!is_int(v))
            return "top_k must be an integer equal to or greater than 0 and less than or equal to 1000";
        q->top_k = int_of(v);
        if (!(q->top_k >= 0 && q->top_k <= 1000))
            return "top_k must be equal to or greater than 0 and less than or equal to 1000";
    }
    double top_p = 0.0;
    if ((v = get(r, "top_p"))) {
        if (!is_float(v))
            return "top_p must be a positive float less than or equal to 1.0";
        top_p = q->top_p = v->num;
        if (top_p > 0.0 && q->top_k > 0)
            return "cannot set both top-k and top-p samplings.";
        if (!(top_p >= 0.0 && top_p <= 1.0))
            return "top_p must be less than or equal to 1.0";
    }
    if ((v = get(r, "top_p_decay"))) {
        if (!is_float(v))
            return "top_p_decay must be a positive float less than or equal to 1.0";
        if (top_p == 0.0)
            return "top_p_decay cannot be set without top_p";
        if (!(v->num >= 0.0 && v->num <= 1.0))
            return "top_p_decay must be less than or equal to 1.0";
    }
    if ((v = get(r, "top_p_bound"))) {
        if (!is_float(v))
            return "top_p_bound must be a positive float less than or equal to top_p";
        if (top_p == 0.0)
            return "top_p_bound cannot be set without top_p";
        if (!(v->num > 0.0 && v->num <= top_p))
            return "top_p_bound must be greater than 0 and less than top_p";
    }
    if ((v = get(r, "add_BOS"))) {
        if (!is_bool(v))
            return "add_BOS must be a boolean value";
        q->add_bos = v->type == MC_JSON_TRUE;
    }
    for (int64_t i = 0; i < q->prompts->len; i++)
        if (q->prompts->items[i].len == 0 && !q->add_bos)
            return "Empty prompts require add_BOS=true";
    static const char *const bools[] = {"stop_on_double_eol", "stop_on_eol",
                                        "prevent_newline_after_colon"};
    static const char *const bool_msgs[] = {"stop_on_double_eol must be a boolean value",
                                            "stop_on_eol must be a boolean value",
                                            "prevent_newline_after_colon must be a boolean value"};
    for (int k = 0; k < 3; k++)
        if ((v = get(r, bools[k]))) {
            if (!is_bool(v))
                return bool_msgs[k];
            if (k == 0)
                q->stop_on_double_eol = v->type == MC_JSON_TRUE;
            else if (k == 1)
                q->stop_on_eol = v->type == MC_JSON_TRUE;
        }
    if ((v = get(r, "random_seed"))) {
        if (!is_int(v))
            return "random_seed must be integer";
        if ((q->random_seed = int_of(v)) < 0)
            return "random_seed must be a positive integer";
    }
    if ((v = get(r, "no_log"))) {
        if (!is_bool(v))
            return "no_log must be a boolean value";
        q->no_log = v->type == MC_JSON_TRUE;
    }
    if ((v = get(r, "beam_width"))) {
        if (!is_int(v))
            return "beam_width must be integer";
        if (int_of(v) < 1)
            return "beam_width must be an integer > 1";
        if (q->prompts->len > 1)
            return "When doing beam_search, batch size must be 1";
        return "beam search (beam_width) is not implemented by megatron.c's server";
    }
    if ((v = get(r, "stop_token")) && !is_int(v))
        return "stop_token must be an integer";
    if ((v = get(r, "length_penalty")) && !is_float(v))
        return "length_penalty must be a float";
    return NULL;
}

/* flask_restful's output_json for a str: json.dumps(message) + "\n" */
static mc_status message(struct mc_json_buf *out, const char *msg)
{
    mc_status st = mc_json_write_string(out, msg, strlen(msg), true);
    return st ? st : mc_json_buf_append(out, "\n", 1);
}

/* stop_on_eol / stop_on_double_eol: the row stops after the token whose text has the newline
 * (or the blank line) in it. */
struct stop_ctx {
    const mc_tokenizer *tok;
    bool single, dbl;
};
static bool stop_at_eol(void *ctx, int64_t row, const int64_t *gen, int64_t n)
{
    const struct stop_ctx *s = ctx;
    char *text = NULL;
    size_t len = 0;
    int64_t from = n >= 2 ? n - 2 : 0; /* a blank line may straddle two tokens */
    if (mc_tok_decode(s->tok, gen + from, n - from, &text, &len))
        return false;
    char *last = NULL;
    size_t last_len = 0;
    bool stop = false;
    if (!mc_tok_decode(s->tok, gen + n - 1, 1, &last, &last_len)) {
        stop = (s->single && memchr(last, '\n', last_len)) ||
               (s->dbl && strstr(text, "\n\n") && (n < 2 || strchr(last, '\n')));
        mc_free(last);
    }
    mc_free(text);
    (void)row;
    return stop;
}

/* Megatron's segments: the detokenized row cut at each token's start offset (offsets(): the
 * text before token i is the detokenized first i tokens), so the pieces join to the text. The
 * offset is the common prefix of that text with the whole row, backed up to a character
 * boundary: a token that ends inside a multi-byte character gets the empty piece, the next one
 * the character (as HuggingFace's token_to_chars spans make it). */
static mc_status segments(const mc_tokenizer *tok, const int64_t *ids, int64_t n,
                          struct mc_json_buf *out)
{
    char *full = NULL;
    size_t len = 0;
    size_t *off = mc_alloc(sizeof(size_t) * (size_t)(n + 1));
    mc_status st = off ? mc_tok_decode(tok, ids, n, &full, &len) : MC_ERR_NOMEM;
    for (int64_t i = 0; i < n && !st; i++) {
        char *pre = NULL;
        size_t pl = 0, k = 0;
        if (i && (st = mc_tok_decode(tok, ids, i, &pre, &pl)))
            break;
        while (k < pl && k < len && pre[k] == full[k])
            k++;
        while (k > 0 && k < len && ((unsigned char)full[k] & 0xC0) == 0x80)
            k--; /* not inside a character */
        off[i] = i && k < off[i - 1] ? off[i - 1] : k;
        mc_free(pre);
    }
    if (!st)
        off[n] = len;
    st = st ? st : mc_json_buf_append(out, "[", 1);
    for (int64_t i = 0; i < n && !st; i++) {
        if (i)
            st = mc_json_buf_append(out, ",", 1);
        st = st ? st : mc_json_write_string(out, full + off[i], off[i + 1] - off[i], true);
    }
    mc_free(full);
    mc_free(off);
    return st ? st : mc_json_buf_append(out, "]", 1);
}

static mc_status answer(struct mc_inf_server *s, const struct req *q, struct mc_inf_request *rq,
                        int64_t n, struct mc_json_buf *out)
{
    /* jsonify: keys sorted (logprobs, segments, text), separators (",", ":") */
    mc_status st = mc_json_buf_append(out, "{", 1);
    if (q->logprobs) {
        st = st ? st : mc_json_buf_append(out, "\"logprobs\":[", 12);
        for (int64_t r = 0; r < n && !st; r++) {
            st = mc_json_buf_append(out, r ? ",[" : "[", r ? 2 : 1);
            int64_t k = 0;
            for (int64_t i = 0; i + 1 < rq[r].n_prompt && !st; i++, k++) {
                if (k)
                    st = mc_json_buf_append(out, ",", 1);
                st = st ? st : mc_json_write_double(out, (double)rq[r].prompt_logprobs[i]);
            }
            for (int64_t i = 0; i < rq[r].n_generated && !st; i++, k++) {
                if (k)
                    st = mc_json_buf_append(out, ",", 1);
                st = st ? st : mc_json_write_double(out, (double)rq[r].generated_logprobs[i]);
            }
            st = st ? st : mc_json_buf_append(out, "]", 1);
        }
        st = st ? st : mc_json_buf_append(out, "],", 2);
    }
    st = st ? st : mc_json_buf_append(out, "\"segments\":[", 12);
    int64_t **all = mc_calloc((size_t)n, sizeof(*all));
    if (!all)
        return MC_ERR_NOMEM;
    for (int64_t r = 0; r < n && !st; r++) {
        int64_t k = rq[r].n_prompt + rq[r].n_generated;
        if (!(all[r] = mc_alloc(sizeof(int64_t) * (size_t)k))) {
            st = MC_ERR_NOMEM;
            break;
        }
        memcpy(all[r], rq[r].prompt, sizeof(int64_t) * (size_t)rq[r].n_prompt);
        memcpy(all[r] + rq[r].n_prompt, rq[r].generated, sizeof(int64_t) * (size_t)rq[r].n_generated);
        if (r)
            st = mc_json_buf_append(out, ",", 1);
        st = st ? st : segments(s->tok, all[r], k, out);
    }
    st = st ? st : mc_json_buf_append(out, "],\"text\":[", 10);
    for (int64_t r = 0; r < n && !st; r++) {
        char *text = NULL;
        size_t len = 0;
        if (r)
            st = mc_json_buf_append(out, ",", 1);
        st = st ? st : mc_tok_decode(s->tok, all[r], rq[r].n_prompt + rq[r].n_generated, &text, &len);
        st = st ? st : mc_json_write_string(out, text, len, true);
        mc_free(text);
    }
    for (int64_t r = 0; r < n; r++)
        mc_free(all[r]);
    mc_free(all);
    return st ? st : mc_json_buf_append(out, "]}\n", 3);
}

static mc_status tokenize(struct mc_inf_server *s, const struct req *q, struct mc_tokens *ids,
                          struct mc_inf_request *rq)
{
    int64_t eod = mc_tok_eod(s->tok);
    for (int64_t r = 0; r < q->prompts->len; r++) {
        const struct mc_json *p = &q->prompts->items[r];
        if (q->add_bos) { /* Megatron's tokenize_prompts: [eod] + tokenize(prompt) */
            if (eod < 0)
                return mc_error(MC_ERR_CONFIG, "add_BOS: the tokenizer has no end-of-document token");
            if (!(ids[r].data = mc_alloc(sizeof(int64_t) * 16)))
                return MC_ERR_NOMEM;
            ids[r].cap = 16, ids[r].len = 1, ids[r].data[0] = eod;
        }
        mc_status st = p->len ? mc_tok_encode(s->tok, p->str, (size_t)p->len, &ids[r]) : MC_OK;
        if (st)
            return st;
        rq[r].prompt = ids[r].data, rq[r].n_prompt = ids[r].len;
    }
    return MC_OK;
}

/* The longest prompt plus tokens_to_generate against the model's limit (Megatron's
 * TokenOverflowError text). */
static const char *overflow(struct mc_inf_server *s, const struct req *q,
                            const struct mc_inf_request *rq, int64_t n, char *buf, size_t cap)
{
    int64_t longest = 0;
    for (int64_t r = 0; r < n; r++)
        longest = rq[r].n_prompt > longest ? rq[r].n_prompt : longest;
    int64_t need = longest + q->tokens_to_generate, max = mc_inf_model_max_seq(s->model);
    if (need <= max && longest > 0)
        return NULL;
    if (longest == 0)
        return "Empty prompts require add_BOS=true";
    snprintf(buf, cap, "Maximum allowed sequence length was set to %lld tokens but requested "
             "generation of %lld tokens", (long long)max, (long long)need);
    return buf;
}

mc_status mc_inf_server_put(struct mc_inf_server *s, const char *body, size_t len, int *status,
                            struct mc_json_buf *out, FILE *log)
{
    mc_json_doc *doc = NULL;
    mc_status st = mc_json_doc_init(&doc);
    if (st)
        return st;
    if (mc_json_doc_parse(doc, body, len, "request body", 1)) {
        /* Flask's BadRequest through flask_restful: {"message": ...} */
        char msg[700];
        snprintf(msg, sizeof(msg), "Failed to decode JSON object: %s", mc_last_error());
        *status = 400;
        st = mc_json_buf_append(out, "{\"message\": ", 12);
        st = st ? st : mc_json_write_string(out, msg, strlen(msg), true);
        st = st ? st : mc_json_buf_append(out, "}\n", 2);
        mc_json_doc_free(doc);
        return st;
    }
    struct req q;
    const char *bad = validate(mc_json_doc_root(doc), &q);
    if (bad) {
        *status = 400;
        st = message(out, bad);
        mc_json_doc_free(doc);
        return st;
    }
    if (!q.no_log && log) { /* Megatron's three lines (the body as it came) */
        fprintf(log, "request IP: %s\n%.*s\n", s->remote_addr, (int)len, body);
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        char when[64];
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
        fprintf(log, "start time:  %s\n", when);
        fflush(log);
    }
    int64_t n = q.prompts->len;
    struct mc_tokens *ids = mc_calloc((size_t)n, sizeof(*ids));
    struct mc_inf_request *rq = mc_calloc((size_t)n, sizeof(*rq));
    char buf[256];
    st = !ids || !rq ? MC_ERR_NOMEM : tokenize(s, &q, ids, rq);
    if (!st && (bad = overflow(s, &q, rq, n, buf, sizeof(buf)))) {
        *status = 400;
        st = message(out, bad);
        goto out;
    }
    struct stop_ctx sc = {s->tok, q.stop_on_eol, q.stop_on_double_eol};
    /* no random_seed: a new stream for every request (Megatron's draws differ each time) */
    uint64_t seed = q.random_seed >= 0 ? (uint64_t)q.random_seed : s->seed + 1000003u * ++s->requests;
    struct mc_inf_generate_options g = {
        .sampling = {.greedy = q.top_k == 1, .temperature = (float)q.temperature,
                     .top_k = q.top_k, .top_p = (float)q.top_p, .seed = seed},
        .tokens_to_generate = q.tokens_to_generate,
        .eod = mc_tok_eod(s->tok),
        .vocab_size = mc_tok_vocab_size(s->tok),
        .logprobs = q.logprobs,
        .stop = q.stop_on_eol || q.stop_on_double_eol ? stop_at_eol : NULL,
        .stop_ctx = &sc,
    };
    if (!st && mc_inf_sampling_check(&g.sampling, g.vocab_size)) {
        *status = 400;
        st = message(out, mc_last_error());
        goto out;
    }
    if (!st)
        st = mc_inf_generate_lead(s->model, &g, rq, n); /* with the other tp ranks */
    if (!st) {
        *status = 200;
        st = answer(s, &q, rq, n, out);
        s->last = g;
    }
out:
    mc_inf_requests_free(rq, n);
    for (int64_t r = 0; ids && r < n; r++)
        mc_free(ids[r].data);
    mc_free(ids);
    mc_free(rq);
    mc_json_doc_free(doc);
    return st;
}
