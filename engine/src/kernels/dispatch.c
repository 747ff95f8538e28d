/*
 * Run-time kernel dispatch: picks the best SIMD level this CPU runs (cpuid,
 * or the auxiliary vector's HWCAP bits on aarch64; LLM_SIMD overrides),
 * fills the kernel table from the scalar one (quant.c) and the ISA files
 * (kernels_avx2.c, kernels_avx512.c, kernels_neon.c), and serves the entry
 * points of quant.h that go through it.
 */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#include <asm/hwcap.h>
#endif

#include "quant.h"
#include "kernels_common.h"


/* ---- dispatch ------------------------------------------------------- */

static llm_kernels_t    llm_ref;        /* scalar */
static llm_kernels_t    llm_k;          /* in use */
static llm_simd_t       llm_level;
static llm_simd_t       llm_best;
static pthread_once_t   llm_once = PTHREAD_ONCE_INIT;
static int              llm_ready;      /* tables filled (acquire/release) */
static char             llm_note[128];  /* LLM_SIMD not honoured: why */


/* The hot entry points check this flag instead of calling pthread_once. */
static inline void
llm_ensure(void)
{
    if (!__atomic_load_n(&llm_ready, __ATOMIC_ACQUIRE)) {
        llm_simd_init();
    }
}


static void
llm_kernels_for(llm_kernels_t *k, llm_simd_t s)
{
    llm_kernels_init_scalar(k);
#if defined(__x86_64__)
    if (s == LLM_SIMD_AVX2 || s == LLM_SIMD_AVX512) {
        llm_kernels_init_avx2(k);
    }
    if (s == LLM_SIMD_AVX512) {
        llm_kernels_init_avx512(k);
    }
#elif defined(__aarch64__)
    if (s == LLM_SIMD_NEON) {
        llm_kernels_init_neon(k);
    }
#else
    (void) s;
#endif
}


/* The best level this CPU runs (the build has every level of its ISA). */
static llm_simd_t
llm_simd_detect(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
          && __builtin_cpu_supports("f16c")
          && __builtin_cpu_supports("bmi2")))
    {
        return LLM_SIMD_SCALAR;
    }
    /* F, BW, VL, DQ and VNNI: Cascade Lake, Ice Lake, Sapphire Rapids,
     * Zen 4 and later (AVX-512 BF16 was required here too, though no
     * kernel uses it: Ice Lake and Cascade Lake servers ran AVX2) */
    if (__builtin_cpu_supports("avx512f")
        && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("avx512dq")
        && __builtin_cpu_supports("avx512vnni"))
    {
        return LLM_SIMD_AVX512;
    }
    return LLM_SIMD_AVX2;
#elif defined(__aarch64__)
    /* Advanced SIMD is architectural; the kernels also use SDOT (ARMv8.2
     * dot product: Neoverse N1 / Graviton2 and later) and fp16 vector
     * conversions */
    unsigned long  hw = getauxval(AT_HWCAP);

    if ((hw & HWCAP_ASIMD) && (hw & HWCAP_ASIMDDP) && (hw & HWCAP_FP)) {
        return LLM_SIMD_NEON;
    }
    return LLM_SIMD_SCALAR;
#else
    return LLM_SIMD_SCALAR;
#endif
}


int
llm_simd_supported(llm_simd_t s)
{
    llm_simd_init();
    switch (s) {
    case LLM_SIMD_SCALAR:
        return 1;
    case LLM_SIMD_AVX2:
        return llm_best == LLM_SIMD_AVX2 || llm_best == LLM_SIMD_AVX512;
    case LLM_SIMD_AVX512:
    case LLM_SIMD_NEON:
        return llm_best == s;
    default:
        return 0;
    }
}


static void
llm_simd_once(void)
{
    const char  *env;
    llm_simd_t   want;
    long         l1;

    /* Prepared columns beyond the L1 run the tiles at half speed
     * (llm-kbench -c 8 -n 8192: 85 against 190 GMAC/s at n = 2048);
     * five sixths of it ran ahead of two thirds (docs/BENCHMARKS.md). */
    l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (l1 >= 16384 && l1 <= 1048576) {
        llm_pre_bytes = l1 / 6 * 5;
    }

    llm_best = llm_simd_detect();
    want = llm_best;
    env = getenv("LLM_SIMD");
    if (env != NULL && *env != '\0') {
        for (want = LLM_SIMD_SCALAR; want < LLM_SIMD_COUNT; want++) {
            if (strcmp(env, llm_simd_name(want)) == 0) {
                break;
            }
        }
        if (want == LLM_SIMD_COUNT) {
            snprintf(llm_note, sizeof(llm_note), "LLM_SIMD=%.32s: expected "
                     "scalar, avx2, avx512 or neon; using %s", env,
                     llm_simd_name(llm_best));
            want = llm_best;
        } else if (want != LLM_SIMD_SCALAR
                   && !(want == llm_best
                        || (want == LLM_SIMD_AVX2
                            && llm_best == LLM_SIMD_AVX512)))
        {
            snprintf(llm_note, sizeof(llm_note), "LLM_SIMD=%.32s: this CPU "
                     "or build does not run it; using %s", env,
                     llm_simd_name(llm_best));
            want = llm_best;
        }
    }

    llm_kernels_init_scalar(&llm_ref);
    llm_kernels_for(&llm_k, want);
    llm_level = want;
    __atomic_store_n(&llm_ready, 1, __ATOMIC_RELEASE);
}


void
llm_simd_init(void)
{
    pthread_once(&llm_once, llm_simd_once);
}


const char *
llm_simd_note(void)
{
    llm_simd_init();
    return llm_note[0] ? llm_note : NULL;
}


llm_simd_t
llm_simd_level(void)
{
    llm_simd_init();
    return llm_level;
}


llm_simd_t
llm_simd_best(void)
{
    llm_simd_init();
    return llm_best;
}


int
llm_simd_amx(void)
{
    llm_simd_init();
#if defined(__x86_64__)
    return llm_level == LLM_SIMD_AVX512 && llm_amx_get();
#else
    return 0;
#endif
}


int
llm_simd_amx_set(int on)
{
    llm_simd_init();
#if defined(__x86_64__)
    return llm_amx_set(on);
#else
    (void) on;
    return 0;
#endif
}


const char *
llm_simd_name(llm_simd_t s)
{
    switch (s) {
    case LLM_SIMD_SCALAR:
        return "scalar";
    case LLM_SIMD_AVX2:
        return "avx2";
    case LLM_SIMD_AVX512:
        return "avx512";
    case LLM_SIMD_NEON:
        return "neon";
    default:
        break;
    }
    return "?";
}


/* Not thread-safe against concurrent kernel calls: for tests and tools,
 * before any worker runs. */
int
llm_simd_force(llm_simd_t s)
{
    llm_simd_init();

    if ((int) s < 0 || s >= LLM_SIMD_COUNT || !llm_simd_supported(s)) {
        return -EINVAL;
    }

    llm_kernels_for(&llm_k, s);
    llm_level = s;
    return 0;
}


void
llm_quantize_act(llm_type_t act, const float *src, void *dst, int64_t n)
{
    llm_ensure();
    llm_k.quantize_act[act](src, dst, n);
}


void
llm_quantize_act_ref(llm_type_t act, const float *src, void *dst,
    int64_t n)
{
    llm_ensure();
    llm_ref.quantize_act[act](src, dst, n);
}


llm_type_t
llm_repack_type(llm_type_t t, int64_t nr)
{
    llm_ensure();
    /* only the AVX-512 kernels (and AVX2's Q2_K_R16) run ahead of the
     * file layout's kernels; the scalar one is the reference */
    if (nr <= 0 || nr % 16 != 0
        || (llm_level != LLM_SIMD_AVX512
            && !(llm_level == LLM_SIMD_AVX2 && t == LLM_TYPE_Q2_K)))
    {
        return t;
    }
    switch (t) {
    case LLM_TYPE_Q4_0:
        return LLM_TYPE_Q4_0_R16;
    case LLM_TYPE_IQ4_NL:
        return LLM_TYPE_IQ4_NL_R16;
    case LLM_TYPE_MXFP4:
        return LLM_TYPE_MXFP4_R16;
    case LLM_TYPE_IQ4_XS:
        return LLM_TYPE_IQ4_XS_R16;
    case LLM_TYPE_Q2_K:
        return LLM_TYPE_Q2_K_R16;
    case LLM_TYPE_Q3_K:
        return LLM_TYPE_Q3_K_R16;
    case LLM_TYPE_Q8_0:
        return LLM_TYPE_Q8_0_R16;
    case LLM_TYPE_Q4_K:
        return LLM_TYPE_Q4_K_R16;
    case LLM_TYPE_Q6_K:
        return LLM_TYPE_Q6_K_R16;
    default:
        return t;
    }
}


int
llm_repack_file_slow(llm_type_t t)
{
    llm_ensure();
    return llm_level == LLM_SIMD_AVX512
           && (t == LLM_TYPE_Q8_0 || t == LLM_TYPE_Q4_K
               || t == LLM_TYPE_Q6_K);
}


llm_type_t
llm_repack_source(llm_type_t t)
{
    switch (t) {
    case LLM_TYPE_Q4_0_R16:
        return LLM_TYPE_Q4_0;
    case LLM_TYPE_IQ4_NL_R16:
        return LLM_TYPE_IQ4_NL;
    case LLM_TYPE_MXFP4_R16:
        return LLM_TYPE_MXFP4;
    case LLM_TYPE_IQ4_XS_R16:
        return LLM_TYPE_IQ4_XS;
    case LLM_TYPE_Q2_K_R16:
        return LLM_TYPE_Q2_K;
    case LLM_TYPE_Q3_K_R16:
        return LLM_TYPE_Q3_K;
    case LLM_TYPE_Q8_0_R16:
        return LLM_TYPE_Q8_0;
    case LLM_TYPE_Q4_K_R16:
        return LLM_TYPE_Q4_K;
    case LLM_TYPE_Q6_K_R16:
        return LLM_TYPE_Q6_K;
    default:
        return t;
    }
}


/*
 * Rows g * 16 .. g * 16 + 15 of src interleaved into dst: per block, the
 * 16 rows' scales (sb bytes each, at the block's start), then their 16
 * quant bytes 4 at a time (llm_block_q4_0x16, llm_block_mxfp4x16).
 */
static void
llm_repack_group(int64_t nb, size_t rb, size_t bb, size_t sb,
    const char *src, char *dst)
{
    for (int64_t b = 0; b < nb; b++, dst += 16 * bb) {
        for (int r = 0; r < 16; r++) {
            const char  *q = src + r * rb + b * bb;

            memcpy(dst + sb * r, q, sb);
            for (int i = 0; i < 4; i++) {
                memcpy(dst + 16 * sb + 64 * i + 4 * r, q + sb + 4 * i, 4);
            }
        }
    }
}


/* The same for Q8_0 blocks (llm_block_q8_0x16): the quants + 128. */
static void
llm_repack_group_q8_0(int64_t nb, size_t rb, const char *src, char *dst)
{
    llm_block_q8_0x16  *o = (llm_block_q8_0x16 *) (void *) dst;

    for (int64_t b = 0; b < nb; b++, o++) {
        for (int r = 0; r < 16; r++) {
            const llm_block_q8_0  *q = (const llm_block_q8_0 *)
                                       (const void *) (src + r * rb) + b;

            o->d[r] = q->d;
            for (int i = 0; i < 8; i++) {
                uint32_t  v;

                /* + 128 of each byte, mod 256: its top bit flipped */
                memcpy(&v, q->qs + 4 * i, 4);
                v ^= 0x80808080u;
                memcpy(&o->qs[i][4 * r], &v, 4);
            }
        }
    }
}


/* The same for Q4_K super-blocks (llm_block_q4_Kx16), [b0, b0 + nb) of
 * rows 0 .. nrow - 1, zeros for the other rows of the 16 (the AVX-512
 * file-layout gemm regroups a slice at a time on the stack). */
void
llm_repack_group_q4_K(int64_t b0, int64_t nb, size_t rb, int nrow,
    const char *src, char *dst)
{
    llm_block_q4_Kx16  *o = (llm_block_q4_Kx16 *) (void *) dst;

    if (nrow < 16) {
        memset(dst, 0, (size_t) nb * sizeof(*o));
    }
    for (int64_t b = 0; b < nb; b++, o++) {
        for (int r = 0; r < nrow; r++) {
            const llm_block_q4_K  *q = (const llm_block_q4_K *)
                                       (const void *) (src + r * rb) + b0
                                       + b;

            for (int i = 0; i < 3; i++) {
                memcpy(&o->sc[i][4 * r], q->scales + 4 * i, 4);
            }
            for (int i = 0; i < 32; i++) {
                memcpy(&o->qs[i][4 * r], q->qs + 4 * i, 4);
            }
            o->d[r] = q->d;
            o->dmin[r] = q->dmin;
        }
    }
}


/* The same for Q6_K super-blocks (llm_block_q6_Kx16). */
void
llm_repack_group_q6_K(int64_t b0, int64_t nb, size_t rb, int nrow,
    const char *src, char *dst)
{
    llm_block_q6_Kx16  *o = (llm_block_q6_Kx16 *) (void *) dst;

    if (nrow < 16) {
        memset(dst, 0, (size_t) nb * sizeof(*o));
    }
    for (int64_t b = 0; b < nb; b++, o++) {
        for (int r = 0; r < nrow; r++) {
            const llm_block_q6_K  *q = (const llm_block_q6_K *)
                                       (const void *) (src + r * rb) + b0
                                       + b;

            o->d[r] = q->d;
            for (int i = 0; i < 4; i++) {
                memcpy(&o->sc[i][4 * r], q->scales + 4 * i, 4);
            }
            for (int h = 0; h < 2; h++) {
                for (int u = 0; u < 2; u++) {
                    for (int k = 0; k < 4; k++) {
                        memcpy(&o->g[2 * h + u].qh[k][4 * r],
                               q->qh + 32 * h + 16 * u + 4 * k, 4);
                        for (int a = 0; a < 2; a++) {
                            memcpy(&o->g[2 * h + u].ql[4 * a + k][4 * r],
                                   q->ql + 64 * h + 32 * a + 16 * u + 4 * k,
                                   4);
                        }
                    }
                }
            }
        }
    }
}


/* The same for IQ4_XS super-blocks (llm_block_iq4_xsx16). */
static void
llm_repack_group_iq4_xs(int64_t nb, size_t rb, const char *src, char *dst)
{
    llm_block_iq4_xsx16  *o = (llm_block_iq4_xsx16 *) (void *) dst;

    for (int64_t b = 0; b < nb; b++, o++) {
        for (int r = 0; r < 16; r++) {
            const llm_block_iq4_xs  *q = (const llm_block_iq4_xs *)
                                         (const void *) (src + r * rb) + b;

            o->d[r] = q->d;
            o->scales_h[r] = q->scales_h;
            memcpy(o->scales_l[r], q->scales_l, 4);
            for (int j = 0; j < 8; j++) {
                for (int i = 0; i < 4; i++) {
                    memcpy(&o->qs[j][i][4 * r], q->qs + 16 * j + 4 * i, 4);
                }
            }
        }
    }
}


/* The same for Q2_K super-blocks (llm_block_q2_Kx16). */
static void
llm_repack_group_q2_K(int64_t nb, size_t rb, const char *src, char *dst)
{
    llm_block_q2_Kx16  *o = (llm_block_q2_Kx16 *) (void *) dst;

    for (int64_t b = 0; b < nb; b++, o++) {
        for (int r = 0; r < 16; r++) {
            const llm_block_q2_K  *q = (const llm_block_q2_K *)
                                       (const void *) (src + r * rb) + b;

            for (int j = 0; j < 4; j++) {
                memcpy(&o->sc[j][4 * r], q->scales + 4 * j, 4);
            }
            for (int i = 0; i < 16; i++) {
                memcpy(&o->qs[i][4 * r], q->qs + 4 * i, 4);
            }
            o->d[r] = q->d;
            o->dmin[r] = q->dmin;
        }
    }
}


/* The same for Q3_K super-blocks (llm_block_q3_Kx16): the third bit of
 * element 16 s + l is bit 4 h + k of hmask[16 u + l], s = 8 h + 2 k + u. */
static void
llm_repack_group_q3_K(int64_t nb, size_t rb, const char *src, char *dst)
{
    llm_block_q3_Kx16  *o = (llm_block_q3_Kx16 *) (void *) dst;

    for (int64_t b = 0; b < nb; b++, o++) {
        memset(o, 0, sizeof(*o));
        for (int r = 0; r < 16; r++) {
            const llm_block_q3_K  *q = (const llm_block_q3_K *)
                                       (const void *) (src + r * rb) + b;

            for (int s = 0; s < 16; s++) {
                int  h = s >> 3, k = (s >> 1) & 3, u = s & 1;

                for (int m = 0; m < 4; m++) {
                    uint32_t  x;
                    uint64_t  t;

                    /* bit 4 h + k of hmask[16 u + 4 m + j] to bit j: the
                     * four bits at 8 j, times 2^(28 - 7 j), meet at 28 + j
                     * (the other products fall elsewhere, no carries) */
                    memcpy(&x, q->hmask + 16 * u + 4 * m, 4);
                    t = (uint64_t) (x >> (4 * h + k) & 0x01010101u)
                        * 0x10204080u;
                    o->g[2 * h + u].hm[k][m] |= (t >> 28 & 0xf) << 4 * r;
                }
            }
            for (int i = 0; i < 16; i++) {
                memcpy(&o->g[i >> 2].qs[i & 3][4 * r], q->qs + 4 * i, 4);
            }
            for (int i = 0; i < 3; i++) {
                memcpy(&o->sc[i][4 * r], q->scales + 4 * i, 4);
            }
            o->d[r] = q->d;
        }
    }
}


void
llm_repack_rows(llm_type_t t, int64_t n, int64_t nr, const void *src,
    void *dst)
{
    const llm_type_t  rt = llm_repack_type(t, nr);
    const size_t      rb = llm_row_bytes(t, n);
    const size_t      bb = llm_type_info(t)->block_bytes;

    if (rt == t) {
        memcpy(dst, src, (size_t) nr * rb);
        return;
    }
    for (int64_t g = 0; g < nr / 16; g++) {
        const char  *sg = (const char *) src + g * 16 * rb;
        char        *dg = (char *) dst + g * 16 * rb;

        switch (t) {
        case LLM_TYPE_IQ4_XS:
            llm_repack_group_iq4_xs(n / LLM_QK_K, rb, sg, dg);
            break;
        case LLM_TYPE_Q2_K:
            llm_repack_group_q2_K(n / LLM_QK_K, rb, sg, dg);
            break;
        case LLM_TYPE_Q3_K:
            llm_repack_group_q3_K(n / LLM_QK_K, rb, sg, dg);
            break;
        case LLM_TYPE_Q8_0:
            llm_repack_group_q8_0(n / LLM_QK, rb, sg, dg);
            break;
        case LLM_TYPE_Q4_K:
            llm_repack_group_q4_K(0, n / LLM_QK_K, rb, 16, sg, dg);
            break;
        case LLM_TYPE_Q6_K:
            llm_repack_group_q6_K(0, n / LLM_QK_K, rb, 16, sg, dg);
            break;
        default:
            llm_repack_group(n / LLM_QK, rb, bb,
                             t == LLM_TYPE_MXFP4 ? 1 : 2, sg, dg);
        }
    }
}


void
llm_vec_dot(llm_type_t t, int64_t n, float *s, const void *w, const void *x)
{
    llm_ensure();
    llm_k.vec_dot[t](n, s, w, x);
}


void
llm_vec_dot_ref(llm_type_t t, int64_t n, float *s, const void *w,
    const void *x)
{
    llm_ensure();
    llm_ref.vec_dot[t](n, s, w, x);
}


void
llm_gemm(llm_type_t t, int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t w_stride, const void *x, size_t x_stride, float *y, size_t ldy)
{
    llm_vec_dot_fn  dot;

    llm_ensure();

    if (llm_k.gemm[t] != NULL) {
        llm_k.gemm[t](n, nr, nc, w, w_stride, x, x_stride, y, ldy);
        return;
    }

    /* float weights: row outer, so a weight row stays in L1 while every
     * column passes over it */
    dot = llm_k.vec_dot[t];
    for (int64_t r = 0; r < nr; r++) {
        const char  *wr = (const char *) w + r * w_stride;

        for (int64_t c = 0; c < nc; c++) {
            dot(n, &y[c * ldy + r], wr, (const char *) x + c * x_stride);
        }
    }
}
