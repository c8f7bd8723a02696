/* run_text_generation_server: Megatron-LM's tools/run_text_generation_server.py (core_v0.12.1)
 * in C: loads a checkpoint and answers Megatron's `PUT /api` protocol over HTTP, so Megatron's
 * client (tools/text_generation_cli.py), curl and any client written for Megatron's server work
 * against it. The request handling is src/inference/text_generation_server.c; this file is the
 * HTTP/1.1 side: one request per connection (Connection: close), one at a time (Megatron holds
 * a lock around every generation too), bodies up to 16 MiB.
 *
 *   run_text_generation_server --load CKPT --port 5000
 *   curl -X PUT localhost:5000/api -H 'Content-Type: application/json' \
 *        -d '{"prompts": ["Hello"], "tokens_to_generate": 16}'
 *
 * It listens on 127.0.0.1 unless --host says otherwise (Megatron's binds 0.0.0.0: every
 * interface; --host 0.0.0.0 does that). SIGINT / SIGTERM stop it.
 *
 * Tensor parallel (mpirun -np N ... --tensor-model-parallel-size N), as Megatron's server: rank
 * 0 serves HTTP; the other ranks wait in mc_inf_follow for the requests rank 0 broadcasts once
 * it has checked them (a refused request, a client that goes away, never reaches them), and
 * return when rank 0 stops, so a signal ends every rank. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "inference/text_generation_server.h"
#include "parallel_state/parallel_state.h"
#include "tools/checkpoint/convert.h"

#define MAX_BODY (16u << 20)
#define MAX_HEAD 65536

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static void usage(FILE *f)
{
    fprintf(f, "usage: run_text_generation_server --load DIR [--port PORT] [--host ADDR]\n"
               "                                  [--seed N] [Megatron's model and tokenizer options]\n");
}

static void help(void)
{
    usage(stdout);
    printf(
"\nMegatron's text-generation server (tools/run_text_generation_server.py): PUT /api with a\n"
"JSON body {\"prompts\": [...], \"tokens_to_generate\": N, \"temperature\": T, \"top_k\": K,\n"
"\"top_p\": P, \"logprobs\": bool, \"random_seed\": S, \"add_BOS\": bool, \"stop_on_eol\": bool,\n"
"\"stop_on_double_eol\": bool, ...} answers {\"text\": [...], \"segments\": [...],\n"
"\"logprobs\": [...]} as Megatron's does; a bad request gets Megatron's message (status 400).\n"
"docs/generation.md lists what differs.\n"
"\nserver:\n"
"  --port PORT           TCP port (default 5000, Megatron's; 0: any free one, printed)\n"
"  --host ADDR           address to listen on (default 127.0.0.1, this machine only;\n"
"                        0.0.0.0: every interface, as Megatron's server)\n"
"  --temperature, --top_k, --top_p, --num-tokens-to-generate, --max-batch-size,\n"
"  --return-log-probs, --prompts\n"
"                        accepted for Megatron's command lines; each request says its own\n"
"                        sampling (as in Megatron, where they only serve its offline mode)\n"
"\nTensor parallel: mpirun -np N run_text_generation_server --tensor-model-parallel-size N ...:\n"
"rank 0 serves, every request runs on all N ranks (each holds its shard of the model).\n\n%s",
           mc_inf_cli_help());
}

struct opts {
    struct mc_inf_cli cli;
    int64_t port;
    const char *host;
    bool help;
};

static int bad(const char *msg)
{
    usage(stderr);
    fprintf(stderr, "run_text_generation_server.py: error: %s\n", msg);
    return 2;
}

static int parse(struct opts *o, int argc, char **argv)
{
    char msg[400];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        mc_status st;
        int used = mc_inf_cli_parse(&o->cli, argc, argv, i, &st);
        if (used < 0)
            return bad(mc_last_error());
        if (used > 0) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = true;
            return 0;
        }
        bool value = !strcmp(a, "--port") || !strcmp(a, "--host") || !strcmp(a, "--temperature") ||
                     !strcmp(a, "--top_k") || !strcmp(a, "--top_p");
        if (!strcmp(a, "--prompts")) { /* nargs='+': the offline mode's prompts, unused here */
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
                i++;
            continue;
        }
        if (!value) {
            snprintf(msg, sizeof(msg), "unrecognized arguments: %s", a);
            return bad(msg);
        }
        if (i + 1 >= argc) {
            snprintf(msg, sizeof(msg), "argument %s: expected one argument", a);
            return bad(msg);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--port")) {
            char *end;
            long p = strtol(v, &end, 10);
            if (!*v || *end || p < 0 || p > 65535) {
                snprintf(msg, sizeof(msg), "argument --port: invalid port: '%s' (0..65535)", v);
                return bad(msg);
            }
            o->port = p;
        } else if (!strcmp(a, "--host")) {
            o->host = v;
        }
    }
    if (!o->help && !o->cli.load)
        return bad("the following arguments are required: --load");
    return 0;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */
static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "BAD REQUEST";
    case 404: return "NOT FOUND";
    case 405: return "METHOD NOT ALLOWED";
    case 411: return "LENGTH REQUIRED";
    case 413: return "REQUEST ENTITY TOO LARGE";
    case 415: return "UNSUPPORTED MEDIA TYPE";
    case 501: return "NOT IMPLEMENTED";
    default: return "INTERNAL SERVER ERROR";
    }
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return false;
        }
        p += w, n -= (size_t)w;
    }
    return true;
}

static void respond(int fd, int status, const char *body, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nServer: megatron.c\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", status, reason(status), len);
    if (send_all(fd, head, (size_t)n))
        send_all(fd, body, len);
}

/* flask_restful's error body: {"message": "..."} and a newline */
static void respond_message(int fd, int status, const char *msg)
{
    struct mc_json_buf b = {0};
    mc_json_buf_append(&b, "{\"message\": ", 12);
    mc_json_write_string(&b, msg, strlen(msg), true);
    mc_json_buf_append(&b, "}\n", 2);
    respond(fd, status, b.data ? b.data : "", b.len);
    mc_free(b.data);
}

/* The value of header `name` in the head (NUL-terminated), or NULL. */
static const char *header(const char *head, const char *name, char *val, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (!strncasecmp(line, name, nl) && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t k = strcspn(v, "\r\n");
            k = k < cap - 1 ? k : cap - 1;
            memcpy(val, v, k);
            val[k] = 0;
            return val;
        }
    }
    return NULL;
}

struct conn {
    int fd;
    char *buf;
    size_t len, cap;
};

static bool read_more(struct conn *c, size_t want)
{
    if (want > c->cap) {
        char *n = realloc(c->buf, want);
        if (!n)
            return false;
        c->buf = n, c->cap = want;
    }
    ssize_t r;
    do
        r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return false;
    c->len += (size_t)r;
    return true;
}

/* Answers one request; true when the whole request was read (an early error answer leaves
 * its body unread). */
static bool handle(struct mc_inf_server *s, int fd)
{
    struct conn c = {.fd = fd};
    bool read_all = false;
    char *end = NULL;
    while (!(end = c.len ? memmem(c.buf, c.len, "\r\n\r\n", 4) : NULL)) {
        if (c.len >= MAX_HEAD || !read_more(&c, c.len + 8192 > MAX_HEAD ? MAX_HEAD : c.len + 8192))
            goto out;
    }
    size_t head_len = (size_t)(end - c.buf) + 4;
    end[2] = 0; /* the head as a string: request line and headers */
    char method[16] = "", path[1024] = "", val[256];
    if (sscanf(c.buf, "%15s %1023s", method, path) != 2) {
        respond_message(fd, 400, "The browser (or proxy) sent a request that this server could "
                        "not understand.");
        goto out;
    }
    char *q = strchr(path, '?');
    if (q)
        *q = 0;
    if (strcmp(path, "/api") && strcmp(path, "/api/")) {
        if (!strcmp(path, "/completions"))
            respond_message(fd, 501, "/completions (MegatronCompletions) is not implemented by "
                            "megatron.c's server; use PUT /api");
        else
            respond_message(fd, 404, "The requested URL was not found on the server. If you "
                            "entered the URL manually please check your spelling and try again.");
        goto out;
    }
    if (strcmp(method, "PUT")) {
        respond_message(fd, 405, "The method is not allowed for the requested URL.");
        goto out;
    }
    if (header(c.buf, "Transfer-Encoding", val, sizeof(val)) && strcasecmp(val, "identity")) {
        respond_message(fd, 411, "A request with a body needs a Content-Length (chunked "
                        "transfer encoding is not supported)");
        goto out;
    }
    size_t body_len = header(c.buf, "Content-Length", val, sizeof(val)) ? strtoull(val, NULL, 10) : 0;
    if (body_len > MAX_BODY) {
        respond_message(fd, 413, "The data value transmitted exceeds the capacity limit.");
        goto out;
    }
    /* Flask's request.get_json(): the body must say it is JSON */
    if (!header(c.buf, "Content-Type", val, sizeof(val)) ||
        strncasecmp(val, "application/json", 16)) {
        respond_message(fd, 415, "Did not attempt to load JSON data because the request "
                        "Content-Type was not 'application/json'.");
        goto out;
    }
    if (header(c.buf, "Expect", val, sizeof(val)) && !strcasecmp(val, "100-continue"))
        send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    while (c.len < head_len + body_len)
        if (!read_more(&c, head_len + body_len))
            goto out;
    read_all = true;
    struct mc_json_buf out = {0};
    int status = 500;
    if (mc_inf_server_put(s, c.buf + head_len, body_len, &status, &out, stdout) != MC_OK) {
        fprintf(stderr, "run_text_generation_server: %s\n", mc_last_error());
        out.len = 0;
        respond_message(fd, 500, mc_last_error());
    } else {
        respond(fd, status, out.data ? out.data : "", out.len);
        if (status == 200)
            printf("generated: prefill %lld tokens in %.3f s, decode %lld tokens in %.3f s\n",
                   (long long)s->last.prefill_tokens, s->last.prefill_s,
                   (long long)s->last.decode_tokens, s->last.decode_s);
        fflush(stdout);
    }
    mc_free(out.data);
out:
    free(c.buf);
    return read_all;
}

static int listen_on(const char *host, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        fprintf(stderr, "run_text_generation_server: --host %s: not an IPv4 address (e.g. "
                "127.0.0.1 or 0.0.0.0)\n", host);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 64)) {
        fprintf(stderr, "run_text_generation_server: cannot listen on %s:%d: %s\n", host, port,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Close after the answer without losing it: a request answered before its body was read (411,
 * 413, 415, ...) leaves bytes unread, and close() on unread bytes sends a reset that can
 * discard the answer in the client's buffer. Send FIN, drain what the client still sends
 * (at most MAX_BODY bytes, one to two seconds), then close. */
static void close_gracefully(int fd)
{
    char sink[8192];
    size_t drained = 0;
    struct timeval tv = {.tv_sec = 1};
    time_t deadline = time(NULL) + 2;
    shutdown(fd, SHUT_WR);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (drained < MAX_BODY && time(NULL) < deadline) {
        ssize_t r = recv(fd, sink, sizeof(sink), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        drained += (size_t)r;
    }
    close(fd);
}

static int serve(struct mc_inf_server *s, int lfd)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: accept returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    while (!stop_requested) {
        struct sockaddr_in peer;
        socklen_t pl = sizeof(peer);
        int fd = accept(lfd, (struct sockaddr *)&peer, &pl);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            fprintf(stderr, "run_text_generation_server: accept: %s\n", strerror(errno));
            return 1;
        }
        struct timeval tv = {.tv_sec = 30}; /* a silent client does not hold the server */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        inet_ntop(AF_INET, &peer.sin_addr, s->remote_addr, sizeof(s->remote_addr));
        if (handle(s, fd))
            close(fd);
        else
            close_gracefully(fd);
    }
    printf("run_text_generation_server: stopped\n");
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.port = 5000, .host = "127.0.0.1"};
    mc_inf_cli_init(&o.cli);
    int rc = parse(&o, argc, argv);
    if (rc || o.help) {
        if (o.help)
            help();
        return rc;
    }
    struct mc_cv_model *cv = NULL;
    mc_tokenizer *tok = NULL;
    struct mc_backend *be = NULL;
    mc_inf_model *m = NULL;
    void *comm = NULL;
    int rank = 0;
    bool shard = false;
    const char *be_name = getenv("MC_BACKEND");
    mc_status st = mc_inf_start_ranks(&o.cli, &argc, &argv, &comm, &rank);
    bool started = !st;
    if (!st)
        st = mc_inf_setup(&o.cli, rank == 0 ? stdout : NULL, &cv, &tok, &shard);
    if (!st)
        st = mc_backend_create(be_name && *be_name ? be_name : NULL, &be);
    if (!st) {
        /* the longest row: --inference-max-seq-length, within the learned positions */
        int64_t max_seq = o.cli.inference_max_seq_length;
        if (!strcmp(cv->md.position_embedding_type, "learned_absolute") &&
            cv->md.max_position_embeddings < max_seq)
            max_seq = cv->md.max_position_embeddings;
        st = mc_inf_model_init_shard(cv, shard, be, max_seq, comm, &m);
    }
    mc_inf_cv_free(cv);
    if (started)
        st = mc_inf_agree(comm, st); /* every rank loaded, or all stop here */
    int lfd = -1;
    rc = 1;
    if (st) {
        if (comm)
            fprintf(stderr, "run_text_generation_server: rank %d: %s\n", rank, mc_last_error());
        else
            fprintf(stderr, "run_text_generation_server: %s\n", mc_last_error());
    } else if (rank != 0) { /* wait for rank 0's requests until it stops */
        struct sigaction sa = {.sa_handler = on_signal}; /* rank 0's stop ends this rank */
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        st = mc_inf_follow(m);
        rc = st ? 1 : 0;
        if (st)
            fprintf(stderr, "run_text_generation_server: rank %d: %s\n", rank, mc_last_error());
    } else {
        if ((lfd = listen_on(o.host, (int)o.port)) >= 0) {
            struct mc_inf_server s = {.model = m, .tok = tok, .seed = (uint64_t)o.cli.seed};
            struct sockaddr_in a;
            socklen_t al = sizeof(a);
            if (!getsockname(lfd, (struct sockaddr *)&a, &al)) /* --port 0: the system's pick */
                o.port = ntohs(a.sin_port);
            printf(" * Serving megatron.c text generation on http://%s:%lld/api (PUT; %d "
                   "threads%s)\n", o.host, (long long)o.port, be->n_threads,
                   comm ? ", tensor parallel" : "");
            fflush(stdout);
            rc = serve(&s, lfd);
            close(lfd);
        }
        if (mc_inf_follow_stop(m) != MC_OK) /* the other ranks return */
            rc = 1;
    }
    mc_inf_model_free(m);
    mc_backend_free(be);
    mc_tok_free(tok);
    fflush(stdout);
    mc_comm_finalize();
    return rc;
}
