/* AVX2 rotary position embedding, forward and transpose: an 8-wide port of rope_avx512.c (same
 * contract as rope_ref.c; the counterpart of Megatron's _apply_rotary_pos_emb_bshd). Each output
 * is one product pair and one add/sub exactly as in the reference (no FMA), so results are
 * bit-identical to it. */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

/* Halves layout: t1 = t[0, half), t2 = t[half, rot_dim). fwd: t1' = t1 c1 - t2 s1,
 * t2' = t2 c2 + t1 s2; transpose: t1' = t1 c1 + t2 s2, t2' = t2 c2 - t1 s1. */
static void rotate_halves(float *t, const float *c, const float *s, int64_t half, bool fwd)
{
    for (int64_t i = 0; i < half; i += VL8) {
        __m256i m = tail_mask8(half - i);
        __m256 a = v8_loadu(t + i, m), b = v8_loadu(t + half + i, m);
        __m256 c1 = v8_loadu(c + i, m), c2 = v8_loadu(c + half + i, m);
        __m256 s1 = v8_loadu(s + i, m), s2 = v8_loadu(s + half + i, m);
        __m256 n1, n2;
        if (fwd) {
            n1 = _mm256_sub_ps(_mm256_mul_ps(a, c1), _mm256_mul_ps(b, s1));
            n2 = _mm256_add_ps(_mm256_mul_ps(b, c2), _mm256_mul_ps(a, s2));
        } else {
            n1 = _mm256_add_ps(_mm256_mul_ps(a, c1), _mm256_mul_ps(b, s2));
            n2 = _mm256_sub_ps(_mm256_mul_ps(b, c2), _mm256_mul_ps(a, s1));
        }
        v8_storeu(t + i, m, n1);
        v8_storeu(t + half + i, m, n2);
    }
}

/* Interleaved pairs (a, b) = (t[2k], t[2k+1]). fwd: a' = a c0 - b s0, b' = b c1 + a s1;
 * transpose: a' = a c0 + b s1, b' = b c1 - a s0. Lanes: x = t*c, y = swap(t)*(s or swap(s));
 * even lanes take x - y, odd lanes x + y (forward; the transpose the other way round). Pairs
 * never straddle a vector: i steps by 8 from 0 and rot_dim is even. */
static void rotate_pairs(float *t, const float *c, const float *s, int64_t rot_dim, bool fwd)
{
    for (int64_t i = 0; i < rot_dim; i += VL8) {
        __m256i m = tail_mask8(rot_dim - i);
        __m256 tv = v8_loadu(t + i, m), sv = v8_loadu(s + i, m);
        __m256 x = _mm256_mul_ps(tv, v8_loadu(c + i, m));
        __m256 sw = _mm256_permute_ps(tv, 0xB1);
        __m256 y = _mm256_mul_ps(sw, fwd ? sv : _mm256_permute_ps(sv, 0xB1));
        __m256 sub = _mm256_sub_ps(x, y), add = _mm256_add_ps(x, y);
        __m256 r = fwd ? _mm256_blend_ps(add, sub, 0x55) : _mm256_blend_ps(sub, add, 0x55);
        v8_storeu(t + i, m, r);
    }
}

static void rope_apply(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                       int64_t hn, int64_t rot_dim, bool interleaved, bool fwd)
{
    int64_t rows = s * bh;
#pragma omp parallel for schedule(static) if (rows * rot_dim > 65536)
    for (int64_t r = 0; r < rows; r++) {
        int64_t pos = r / bh;
        const float *c = cos + pos * rot_dim, *sn = sin + pos * rot_dim;
        if (interleaved)
            rotate_pairs(t + r * hn, c, sn, rot_dim, fwd);
        else
            rotate_halves(t + r * hn, c, sn, rot_dim / 2, fwd);
    }
}

void rope_fwd_avx2(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                   int64_t hn, int64_t rot_dim, bool interleaved)
{
    rope_apply(t, cos, sin, s, bh, hn, rot_dim, interleaved, true);
}

void rope_bwd_avx2(float *dt, const float *cos, const float *sin, int64_t s, int64_t bh,
                   int64_t hn, int64_t rot_dim, bool interleaved)
{
    rope_apply(dt, cos, sin, s, bh, hn, rot_dim, interleaved, false);
}
