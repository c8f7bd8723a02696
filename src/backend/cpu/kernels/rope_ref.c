/* Reference rotary position embedding, forward and its transpose (backward): the counterpart of
 * Megatron's _apply_rotary_pos_emb_bshd (models/common/embeddings/rope_utils.py):
 * t' = t * cos + rotate_half(t) * sin on the first rot_dim channels, the rest passed through.
 * Non-interleaved rotate_half is cat(-t2, t1) on the halves; interleaved rotates the pairs
 * (t[2i], t[2i+1]) -> (-t[2i+1], t[2i]). */
#include "backend/cpu/kernels/ref.h"

/* One head vector: out = R(c, s) t, or its transpose R^T when sign == -1. */
static void rotate(float *t, const float *c, const float *s, int64_t rot_dim, bool interleaved,
                   float sign)
{
    if (interleaved) {
        for (int64_t i = 0; i < rot_dim; i += 2) {
            float a = t[i], b = t[i + 1];
            if (sign > 0) { /* a' = a c0 - b s0; b' = b c1 + a s1 */
                t[i] = a * c[i] - b * s[i];
                t[i + 1] = b * c[i + 1] + a * s[i + 1];
            } else { /* transpose: da = da' c0 + db' s1; db = db' c1 - da' s0 */
                t[i] = a * c[i] + b * s[i + 1];
                t[i + 1] = b * c[i + 1] - a * s[i];
            }
        }
        return;
    }
    int64_t half = rot_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        float a = t[i], b = t[i + half];
        if (sign > 0) { /* forward: t1' = t1 c1 - t2 s1; t2' = t2 c2 + t1 s2 */
            t[i] = a * c[i] - b * s[i];
            t[i + half] = b * c[i + half] + a * s[i + half];
        } else { /* transpose: dt1 = dt1' c1 + dt2' s2; dt2 = dt2' c2 - dt1' s1 */
            t[i] = a * c[i] + b * s[i + half];
            t[i + half] = b * c[i + half] - a * s[i];
        }
    }
}

static void rope_apply(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                       int64_t hn, int64_t rot_dim, bool interleaved, float sign)
{
    int64_t rows = s * bh;
#pragma omp parallel for schedule(static) if (rows * rot_dim > 65536)
    for (int64_t r = 0; r < rows; r++) {
        int64_t pos = r / bh;
        float *tr = t + r * hn;
        const float *c = cos + pos * rot_dim, *sn = sin + pos * rot_dim;
        rotate(tr, c, sn, rot_dim, interleaved, sign);
    }
}

void rope_fwd_ref(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                  int64_t hn, int64_t rot_dim, bool interleaved)
{
    rope_apply(t, cos, sin, s, bh, hn, rot_dim, interleaved, 1.0f);
}

void rope_bwd_ref(float *dt, const float *cos, const float *sin, int64_t s, int64_t bh,
                  int64_t hn, int64_t rot_dim, bool interleaved)
{
    rope_apply(dt, cos, sin, s, bh, hn, rot_dim, interleaved, -1.0f);
}
