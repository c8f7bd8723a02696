/* Reference optimizer and grad-norm kernels: torch.optim.AdamW (decoupled weight decay, the
 * adam_w_mode of the apex/TE FusedAdam Megatron uses), torch.optim.SGD (coupled weight decay,
 * momentum, dampening 0), and the sum of squares / zero count of clip_grads.py. */
#include "backend/cpu/kernels/ref.h"

#include <math.h>

/* Chunk length depends on n only, so the order of the double partial sums is fixed. */
#define SUMSQ_MAX_CHUNKS 1024
/* Below this many elements the ops run on the calling thread alone: most of a GPT's tensors
 * (biases, norm weights) are this small, and a parallel region per tensor cost more than the
 * work (each waits for a thread that may be descheduled on a shared machine). Which thread
 * computes an element or a chunk never changes its value, so the results are the same bits. */
#define PAR_MIN 65536

double sumsq_ref(const float *x, int64_t n)
{
    if (n <= 0)
        return 0.0;
    int64_t chunk = 65536;
    if ((n + chunk - 1) / chunk > SUMSQ_MAX_CHUNKS)
        chunk = (n + SUMSQ_MAX_CHUNKS - 1) / SUMSQ_MAX_CHUNKS;
    int64_t nchunks = (n + chunk - 1) / chunk;
    double part[SUMSQ_MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t i1 = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        double s = 0.0;
        for (int64_t i = c * chunk; i < i1; i++)
            s += (double)x[i] * x[i];
        part[c] = s;
    }
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++)
        total += part[c];
    return total;
}

int64_t count_zeros_ref(const float *x, int64_t n)
{
    int64_t z = 0;
#pragma omp parallel for schedule(static) reduction(+ : z) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        z += x[i] == 0.0f;
    return z;
}

void scale_ref(float *x, float s, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

/* torch.optim.AdamW._single_tensor_adamw, step by step: the bias corrections and step size are
 * computed in double as Python does, then used as fp32 scalars. */
void adamw_ref(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
               float b2, float eps, float wd, int64_t t)
{
    float decay = (float)(1.0 - (double)lr * (double)wd);
    double bc1 = 1.0 - pow((double)b1, (double)t);
    double bc2 = 1.0 - pow((double)b2, (double)t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float om_b1 = (float)(1.0 - (double)b1), om_b2 = (float)(1.0 - (double)b2);
#pragma omp parallel for schedule(static) if (n > PAR_MIN / 4)
    for (int64_t i = 0; i < n; i++) {
        float pi = p[i] * decay;
        float mi = m[i] * b1 + g[i] * om_b1;
        float vi = v[i] * b2 + g[i] * g[i] * om_b2;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}

void sgd_ref(float *p, float *buf, const float *g, int64_t n, float lr, float momentum, float wd,
             bool first_step)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN / 4)
    for (int64_t i = 0; i < n; i++) {
        float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
        if (momentum != 0.0f) {
            buf[i] = first_step ? d : buf[i] * momentum + d;
            d = buf[i];
        }
        p[i] = p[i] - lr * d;
    }
}
