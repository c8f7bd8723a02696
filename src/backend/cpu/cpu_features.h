/* CPU feature detection for the CPU backend: which SIMD instruction sets the processor has AND
 * the operating system saves across context switches (CPUID + XGETBV). Megatron has no
 * counterpart (it relies on CUDA device properties); this plays the role of
 * torch.backends.cpu.get_cpu_capability() for choosing kernels. */
#ifndef MC_CPU_FEATURES_H
#define MC_CPU_FEATURES_H

#include <stdbool.h>

struct mc_cpu_features {
    char vendor[13];   /* "GenuineIntel", "AuthenticAMD", "" when not x86 */
    char brand[49];    /* CPUID brand string, trimmed */
    bool os_avx;       /* OS saves YMM state (XCR0 bits 1,2) */
    bool os_avx512;    /* OS saves opmask + ZMM state (XCR0 bits 5,6,7) */
    bool avx2, fma;    /* usable: CPU flag and OS support */
    bool f16c;         /* VCVTPH2PS / VCVTPS2PH (fp16 <-> fp32) */
    bool avx512f, avx512bw, avx512vl, avx512dq;
    bool avx512_bf16;  /* VCVTNE2PS2BF16 / VDPBF16PS */
    bool avx512_fp16;  /* native fp16 arithmetic (Sapphire Rapids+) */
};

/* Detected once, then cached; never NULL. Every "usable" flag already includes the OS check. */
const struct mc_cpu_features *mc_cpu_features(void);

/* True when the AVX-512 kernel set (F + BW + VL + DQ, with OS support) can run. */
bool mc_cpu_has_avx512(void);

/* True when the AVX2 kernel set (AVX2 + FMA + F16C, with the OS saving YMM state) can run. */
bool mc_cpu_has_avx2(void);

/* Writes a space-separated list of usable features ("avx2 fma avx512f ...") into buf. */
void mc_cpu_features_str(char *buf, int size);

#endif /* MC_CPU_FEATURES_H */
