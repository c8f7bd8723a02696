/* CPU feature detection (CPUID + XGETBV). A CPUID flag alone is not enough: a kernel that uses
 * ZMM registers also needs the OS to save them on context switches, which XCR0 reports
 * (bits 5-7 for the AVX-512 opmask and upper ZMM state). Hypervisors do mask these bits, so we
 * check both. No Megatron counterpart (CUDA capability checks play this role there). */
#include "backend/cpu/cpu_features.h"

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static void cpuid(unsigned leaf, unsigned sub, unsigned r[4])
{
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}

/* XGETBV without needing -mxsave on this translation unit. */
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(struct mc_cpu_features *f)
{
    unsigned r[4], max_leaf, max_ext;
    cpuid(0, 0, r);
    max_leaf = r[0];
    memcpy(f->vendor, &r[1], 4);
    memcpy(f->vendor + 4, &r[3], 4);
    memcpy(f->vendor + 8, &r[2], 4);
    f->vendor[12] = 0;

    cpuid(0x80000000u, 0, r);
    max_ext = r[0];
    if (max_ext >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++) {
            cpuid(0x80000002u + i, 0, r);
            memcpy(f->brand + 16 * i, r, 16);
        }
        f->brand[48] = 0;
        size_t n = strlen(f->brand);
        while (n > 0 && f->brand[n - 1] == ' ') f->brand[--n] = 0;
    }
    if (max_leaf < 1) return;
    cpuid(1, 0, r);
    bool osxsave = (r[2] >> 27) & 1, fma = (r[2] >> 12) & 1, avx = (r[2] >> 28) & 1;
    if (!osxsave || !avx) return; /* XGETBV itself would fault without OSXSAVE */
    uint64_t xcr0 = xgetbv0();
    f->os_avx = (xcr0 & 0x6) == 0x6;
    f->os_avx512 = f->os_avx && (xcr0 & 0xE0) == 0xE0;
    f->fma = f->os_avx && fma;
    f->f16c = f->os_avx && ((r[2] >> 29) & 1);
    if (max_leaf < 7) return;
    cpuid(7, 0, r);
    unsigned ebx = r[1], edx = r[3], max_sub7 = r[0];
    f->avx2 = f->os_avx && ((ebx >> 5) & 1);
    f->avx512f = f->os_avx512 && ((ebx >> 16) & 1);
    f->avx512dq = f->avx512f && ((ebx >> 17) & 1);
    f->avx512bw = f->avx512f && ((ebx >> 30) & 1);
    f->avx512vl = f->avx512f && ((ebx >> 31) & 1);
    f->avx512_fp16 = f->avx512bw && ((edx >> 23) & 1);
    if (max_sub7 >= 1) {
        cpuid(7, 1, r);
        f->avx512_bf16 = f->avx512bw && ((r[0] >> 5) & 1);
    }
}
#else
static void detect(struct mc_cpu_features *f) { (void)f; }
#endif

static struct mc_cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void detect_once(void) { detect(&features); }

const struct mc_cpu_features *mc_cpu_features(void)
{
    pthread_once(&features_once, detect_once);
    return &features;
}

bool mc_cpu_has_avx512(void)
{
    const struct mc_cpu_features *f = mc_cpu_features();
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->fma;
}

/* f->avx2, fma and f16c already require XCR0 bits 1 and 2 (the OS saves XMM and YMM state). */
bool mc_cpu_has_avx2(void)
{
    const struct mc_cpu_features *f = mc_cpu_features();
    return f->os_avx && f->avx2 && f->fma && f->f16c;
}

void mc_cpu_features_str(char *buf, int size)
{
    const struct mc_cpu_features *f = mc_cpu_features();
    const struct { bool on; const char *name; } list[] = {
        {f->avx2, "avx2"},         {f->fma, "fma"},           {f->f16c, "f16c"},
        {f->avx512f, "avx512f"},   {f->avx512bw, "avx512bw"}, {f->avx512vl, "avx512vl"},
        {f->avx512dq, "avx512dq"},
        {f->avx512_bf16, "avx512_bf16"}, {f->avx512_fp16, "avx512_fp16"},
    };
    int used = 0;
    if (size <= 0) return;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        if (!list[i].on || used >= size) continue;
        /* snprintf truncates safely; `used` may pass size, which stops further appends */
        used += snprintf(buf + used, (size_t)(size - used), "%s%s", used ? " " : "", list[i].name);
    }
    if (!used) snprintf(buf, (size_t)size, "none");
}
