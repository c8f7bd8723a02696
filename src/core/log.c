/* Rank-tagged log lines on stderr ("[rank 3] message"). */
#include "megatron.h"

#include <stdarg.h>
#include <stdio.h>

static int log_rank = -1;
static enum mc_log_level log_level = MC_LOG_INFO;

void mc_log_set_rank(int rank) { log_rank = rank; }
void mc_log_set_level(enum mc_log_level lvl) { log_level = lvl; }

void mc_log(enum mc_log_level lvl, const char *fmt, ...)
{
    if (lvl > log_level)
        return;
    static const char *names[] = {"error", "warning", "info", "debug"};
    char line[2048];
    int n = log_rank >= 0 ? snprintf(line, sizeof(line), "[rank %d] %s: ", log_rank, names[lvl])
                          : snprintf(line, sizeof(line), "megatron.c %s: ", names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line); /* one write per line so ranks do not interleave mid-line */
}
