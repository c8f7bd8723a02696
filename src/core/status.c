/* Status codes and the thread-local last-error message (house style: errors). */
#include "megatron.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *mc_version(void) { return "0.1.0"; }

const char *mc_status_str(mc_status s)
{
    switch (s) {
    case MC_OK: return "MC_OK";
    case MC_ERR_NOMEM: return "MC_ERR_NOMEM";
    case MC_ERR_IO: return "MC_ERR_IO";
    case MC_ERR_FORMAT: return "MC_ERR_FORMAT";
    case MC_ERR_CONFIG: return "MC_ERR_CONFIG";
    case MC_ERR_SHAPE: return "MC_ERR_SHAPE";
    case MC_ERR_COMM: return "MC_ERR_COMM";
    case MC_ERR_UNSUPPORTED: return "MC_ERR_UNSUPPORTED";
    case MC_ERR_INTERNAL: return "MC_ERR_INTERNAL";
    }
    return "MC_ERR_UNKNOWN";
}

const char *mc_last_error(void) { return last_error; }

void mc_clear_error(void) { last_error[0] = '\0'; }

mc_status mc_error_at(mc_status s, const char *file, int line, const char *fmt, ...)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(last_error, sizeof(last_error), "%s:%d: ", base, line);
    if (n < 0 || (size_t)n >= sizeof(last_error))
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof(last_error) - (size_t)n, fmt, ap);
    va_end(ap);
    return s;
}

void mc_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}
