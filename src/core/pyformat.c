/* Python's repr() of a float, shared by the arguments dump, log lines and the dataset
 * descriptions (json.dumps writes floats with the same digits). */
#include "core/pyformat.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mc_py_float_repr(char *buf, size_t n, double x)
{
    if (isnan(x)) { snprintf(buf, n, "nan"); return; }
    if (isinf(x)) { snprintf(buf, n, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { snprintf(buf, n, signbit(x) ? "-0.0" : "0.0"); return; }
    /* Shortest %.*e that reads back to the same double: the digits Python's repr uses. */
    char e[40];
    for (int p = 0; p < 17; p++) {
        snprintf(e, sizeof(e), "%.*e", p, x);
        if (strtod(e, NULL) == x)
            break;
    }
    char digits[24];
    int nd = 0, neg = (e[0] == '-');
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (isdigit((unsigned char)*q))
            digits[nd++] = *q;
    digits[nd] = '\0';
    int exp10 = atoi(q + 1);
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int k = 1; k < nd; k++)
                out[o++] = digits[k];
        }
        o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              abs(exp10));
    } else if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int k = 0; k < -exp10 - 1; k++)
            out[o++] = '0';
        for (int k = 0; k < nd; k++)
            out[o++] = digits[k];
    } else {
        for (int k = 0; k <= exp10; k++)
            out[o++] = k < nd ? digits[k] : '0';
        out[o++] = '.';
        if (nd > exp10 + 1)
            for (int k = exp10 + 1; k < nd; k++)
                out[o++] = digits[k];
        else
            out[o++] = '0';
    }
    out[o] = '\0';
    snprintf(buf, n, "%s", out);
}
