/* Megatron's text-generation server, the request side (text_generation_server.c). Private
 * header of src/inference/. */
#ifndef MC_INFERENCE_TEXT_GENERATION_SERVER_H
#define MC_INFERENCE_TEXT_GENERATION_SERVER_H

#include <stdio.h>
#include <time.h>

#include "core/json.h"
#include "inference/inference.h"

struct mc_inf_server {
    mc_inf_model *model;      /* borrowed */
    const mc_tokenizer *tok;  /* borrowed */
    uint64_t seed;            /* --seed: the streams of requests without random_seed */
    uint64_t requests;        /* requests served */
    char remote_addr[64];     /* the client of the request being handled (for the log) */
    struct mc_inf_generate_options last; /* the last generation's counters (timing) */
};

/* Handles the JSON body of one PUT /api: *status is the HTTP status (200, or 400 with
 * Megatron's message as a JSON string) and out gets the body. An error return is a failure of
 * the server itself (memory), answered 500 by the caller. Request lines go to log (NULL: none). */
mc_status mc_inf_server_put(struct mc_inf_server *s, const char *body, size_t len, int *status,
                            struct mc_json_buf *out, FILE *log);

#endif
