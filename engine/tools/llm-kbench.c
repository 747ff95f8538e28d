/*
 * llm-kbench: throughput of the weight kernels (llm_gemm) per type, SIMD
 * level, thread count and number of activation columns, on a weight
 * matrix larger than the caches.
 *
 * For each setting it times passes over the whole matrix (rows split
 * evenly across threads, one barrier per pass) and prints the best pass
 * (the least disturbed by other load on a shared machine)
 * as weight GB/s (what bounds decode at nc = 1) and GMAC/s, both against
 * wall time and against the slowest thread's CPU time (on a shared,
 * oversubscribed machine the CPU-time figure is the kernel's own speed).
 */

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "quantize_rows.h"

typedef struct {
    llm_type_t          type;
    int64_t             n, nr, nc;
    const char         *w;
    size_t              w_stride;
    const char         *x;
    size_t              x_stride;
    float              *y;
    int                 nth;
    int                 passes;
    pthread_barrier_t  *bar;
    double             *times;          /* [passes], written by thread 0 */
    double             *cpu;            /* [nth][passes] thread CPU time */
    int                 read_only;      /* just read the weight bytes */
    uint64_t           *sink;           /* [nth * 8] read sums */
} kb_job_t;

typedef struct {
    kb_job_t  *job;
    int        ith;
} kb_arg_t;


static double
kb_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


static double
kb_cpu(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


/* The bandwidth reference: sum the bytes as 64-bit words. */
static uint64_t
kb_read(const char *p, size_t n)
{
    const uint64_t  *q = (const uint64_t *) p;
    uint64_t         s0 = 0, s1 = 0, s2 = 0, s3 = 0;

    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        s0 += q[i];
        s1 += q[i + 1];
        s2 += q[i + 2];
        s3 += q[i + 3];
    }
    return s0 + s1 + s2 + s3;
}


static void *
kb_worker(void *p)
{
    kb_arg_t  *a = p;
    kb_job_t  *j = a->job;
    /* whole 16-row groups (the regrouped types take no less) */
    int64_t    per = ((j->nr + j->nth - 1) / j->nth + 15) / 16 * 16;
    int64_t    r0 = a->ith * per;
    int64_t    r1 = r0 + per < j->nr ? r0 + per : j->nr;
    double     t0 = 0, c0;

    for (int pass = 0; pass < j->passes; pass++) {
        pthread_barrier_wait(j->bar);
        if (a->ith == 0) {
            t0 = kb_now();
        }
        c0 = kb_cpu();
        if (r1 > r0 && j->read_only) {
            j->sink[a->ith * 8] += kb_read(j->w + r0 * j->w_stride,
                                           (r1 - r0) * j->w_stride);
        } else if (r1 > r0) {
            llm_gemm(j->type, j->n, r1 - r0, j->nc,
                     j->w + r0 * j->w_stride, j->w_stride, j->x,
                     j->x_stride, j->y + r0, (size_t) j->nr);
        }
        j->cpu[a->ith * j->passes + pass] = kb_cpu() - c0;
        pthread_barrier_wait(j->bar);
        if (a->ith == 0) {
            j->times[pass] = kb_now() - t0;
        }
    }
    return NULL;
}


static int
kb_cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}


static void
kb_usage(FILE *f)
{
    fprintf(f,
        "usage: llm-kbench [options]\n"
        "  -t, --types LIST     weight types (default Q4_0,Q8_0,Q4_K,Q5_K,"
        "Q6_K,F16)\n"
        "  -s, --simd LIST      scalar,avx2,avx512,neon (default: all the CPU"
        " has)\n"
        "  -j, --threads LIST   thread counts (default 1,2)\n"
        "  -c, --cols LIST      activation columns (default 1,8,64)\n"
        "  -n, --n N            row length (default 2048)\n"
        "  -m, --mbytes MB      weight matrix size at nc=1 (default 512;\n"
        "                       a fraction fits a cache)\n"
        "  -p, --passes P       timed passes, the best reported (default 15)\n"
        "  -b, --bandwidth      also time a plain read of the matrix (READ)\n"
        "  -f, --file FILE      read the weights from a mapping of FILE (its\n"
        "                       bytes as they are, from offset 0; as a model\n"
        "                       is read from the page cache), not from RAM\n"
        "  -h, --help\n"
        "Weight GB/s counts the weight bytes each pass reads; compare with\n"
        "the machine's read bandwidth (31.8 GB/s per thread here).\n");
}


static int
kb_list(const char *s, char out[][16], int max)
{
    int  n = 0;

    while (*s && n < max) {
        size_t  l = strcspn(s, ",");

        if (l == 0 || l >= 16) {
            return -1;
        }
        memcpy(out[n], s, l);
        out[n][l] = '\0';
        n++;
        s += l;
        if (*s == ',') {
            s++;
        }
    }
    return n;
}


/*
 * One row of weights in type t: the engine's own quantizer for the types
 * it has one for, llm-quantize's (ggml's algorithms) for the rest it
 * writes; the I-quants llm-quantize does not write stay zero blocks (all
 * scales 0: the kernels' work does not depend on the values, and no
 * subnormal scale slows the float steps, as an all-zero MXFP4 block's
 * exponent 0 did).
 */
static void
kb_quantize_row(llm_type_t t, const float *x, void *dst, int64_t n)
{
    switch (t) {
    case LLM_TYPE_F32:
    case LLM_TYPE_F16:
    case LLM_TYPE_BF16:
    case LLM_TYPE_Q4_0:
    case LLM_TYPE_Q8_0:
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K:
    case LLM_TYPE_Q6_K:
        llm_quantize_row(t, x, dst, n);
        return;
    default:
        if (!llm_qz_can_write(t) || llm_qz_row(t, x, dst, n, NULL) != 0) {
            memset(dst, 0, llm_row_bytes(t, n));
        }
        return;
    }
}


static int
kb_type(const char *name, llm_type_t *t)
{
    for (uint32_t i = 0; i < LLM_TYPE_COUNT; i++) {
        const llm_type_info_t  *ti = llm_type_info(i);

        /* Q4_0_R16 ...: the layouts the engine regroups types into at load */
        if (ti && (ti->supported || llm_repack_source(i) != i)
            && strcasecmp(ti->name, name) == 0)
        {
            *t = (llm_type_t) i;
            return 0;
        }
    }
    return -1;
}


int
main(int argc, char **argv)
{
    static const struct option  opts[] = {
        { "types", required_argument, NULL, 't' },
        { "simd", required_argument, NULL, 's' },
        { "threads", required_argument, NULL, 'j' },
        { "cols", required_argument, NULL, 'c' },
        { "n", required_argument, NULL, 'n' },
        { "mbytes", required_argument, NULL, 'm' },
        { "passes", required_argument, NULL, 'p' },
        { "bandwidth", no_argument, NULL, 'b' },
        { "file", required_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    char   types[16][16], simds[4][16], threads[8][16], cols[8][16];
    int    nt, ns, nj, ncs, opt, passes = 15, bw = 0;
    uint64_t  sink[64 * 8];
    const char  *file = NULL;
    long   n = 2048;
    double mbytes = 512;

    nt = kb_list("Q4_0,Q8_0,Q4_K,Q5_K,Q6_K,F16", types, 16);
    ns = 0;
    nj = kb_list("1,2", threads, 8);
    ncs = kb_list("1,8,64", cols, 8);

    while ((opt = getopt_long(argc, argv, "t:s:j:c:n:m:p:bf:h", opts, NULL))
           != -1)
    {
        switch (opt) {
        case 't': nt = kb_list(optarg, types, 16); break;
        case 's': ns = kb_list(optarg, simds, 4); break;
        case 'j': nj = kb_list(optarg, threads, 8); break;
        case 'c': ncs = kb_list(optarg, cols, 8); break;
        case 'n': n = strtol(optarg, NULL, 10); break;
        case 'm': mbytes = strtod(optarg, NULL); break;
        case 'p': passes = atoi(optarg); break;
        case 'b': bw = 1; break;
        case 'f': file = optarg; break;
        case 'h': kb_usage(stdout); return 0;
        default: kb_usage(stderr); return 2;
        }
    }
    if (nt <= 0 || ns < 0 || nj <= 0 || ncs <= 0 || n <= 0 || n % 256
        || mbytes <= 0 || passes <= 0)
    {
        fprintf(stderr, "llm-kbench: bad arguments (n must be a multiple"
                " of 256)\n");
        kb_usage(stderr);
        return 2;
    }

    llm_simd_init();
    if (llm_simd_note() != NULL) {
        fprintf(stderr, "llm-kbench: %s\n", llm_simd_note());
    }
    if (ns == 0) {
        for (int l = 0; l < LLM_SIMD_COUNT; l++) {
            if (llm_simd_supported((llm_simd_t) l)) {
                snprintf(simds[ns++], 16, "%s", llm_simd_name(l));
            }
        }
    }

    printf("llm-kbench: n=%ld, weights %g MB, best of %d passes, best"
           " simd %s%s\n", n, mbytes, passes, llm_simd_name(llm_simd_best()),
           llm_simd_amx() ? ", the _R16 gemms on AMX-INT8 tiles from"
           " 12 columns (LLM_AMX=0: not)" : "");
    printf("| type | simd | threads | cols | weight GB/s (wall) |"
           " weight GB/s (cpu) | GMAC/s (cpu) | ms/pass (wall) |\n"
           "| --- | --- | --- | --- | --- | --- | --- | --- |\n");

    for (int it = 0; it < nt; it++) {
        llm_type_t  t;

        if (kb_type(types[it], &t) != 0) {
            fprintf(stderr, "llm-kbench: unknown type %s\n", types[it]);
            return 1;
        }

        llm_type_t  at = llm_type_vec_dot_type(t);
        size_t      rb = llm_row_bytes(t, n), xb = llm_row_bytes(at, n);
        int64_t     nr = (int64_t) (mbytes * 1048576.0) / (int64_t) rb;
        /* the source type of a regrouped one, which takes 64-row runs */
        llm_type_t  qt = llm_repack_source(t);

        if (qt != t) {
            nr = nr < 64 ? 64 : nr / 64 * 64;
        }
        char       *w = NULL;
        char       *map = NULL;
        size_t      map_len = 0;

        if (file != NULL) {
            struct stat  st;
            int          fd = open(file, O_RDONLY);

            if (fd < 0 || fstat(fd, &st) != 0) {
                fprintf(stderr, "llm-kbench: %s: %s\n", file,
                        strerror(errno));
                return 1;
            }
            map_len = (size_t) st.st_size;
            if ((int64_t) (map_len / rb) < nr) {
                nr = (int64_t) (map_len / rb);
            }
            map = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
            if (map == MAP_FAILED || nr < 1) {
                fprintf(stderr, "llm-kbench: %s: cannot map %zu bytes\n",
                        file, rb);
                return 1;
            }
            /* as the engine maps a model (llm_model_prefault) */
            madvise(map, map_len, MADV_HUGEPAGE);
            madvise(map, map_len, MADV_POPULATE_READ);
            w = map;
        } else {
            /* 2 MB pages, as the engine's model mapping has: with 4 KB
             * pages a matrix beyond the TLB's reach reads slower (READ
             * with 2 threads: 61 GB/s at 256 MB, 38 at 1 GB) */
            map_len = rb * nr;
            map = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (map == MAP_FAILED) {
                fprintf(stderr, "llm-kbench: out of memory\n");
                return 1;
            }
            madvise(map, map_len, MADV_HUGEPAGE);
            w = map;
        }
        float      *f = malloc(n * sizeof(float) * 64);
        int64_t     maxc = 1;

        for (int k = 0; k < ncs; k++) {
            maxc = atol(cols[k]) > maxc ? atol(cols[k]) : maxc;
        }
        char   *x = malloc(xb * maxc);
        float  *y = malloc(sizeof(float) * nr * maxc);

        if (w == NULL || f == NULL || x == NULL || y == NULL) {
            fprintf(stderr, "llm-kbench: out of memory\n");
            return 1;
        }

        /* 64 distinct quantized rows, repeated over the matrix */
        srand(1);
        for (int64_t i = 0; i < n * 64; i++) {
            f[i] = (rand() / (float) RAND_MAX - 0.5f) * 0.1f;
        }
        for (int64_t r = 0; file == NULL && r < 64 && r < nr; r++) {
            kb_quantize_row(qt, f + r * n, w + r * rb, n);
        }
        if (file == NULL && qt != t) {
            char  *tmp = malloc(64 * rb);

            if (tmp == NULL) {
                fprintf(stderr, "llm-kbench: out of memory\n");
                return 1;
            }
            llm_repack_rows(qt, n, 64, w, tmp);
            memcpy(w, tmp, 64 * rb);
            free(tmp);
        }
        for (int64_t r = 64; file == NULL && r < nr; r++) {
            memcpy(w + r * rb, w + (r % 64) * rb, rb);
        }
        for (int64_t c = 0; c < maxc; c++) {
            llm_quantize_act(at, f + (c % 64) * n, x + c * xb, n);
        }

        for (int is = bw && it == 0 ? -1 : 0; is < ns; is++) {
            llm_simd_t  lv = LLM_SIMD_SCALAR;

            if (is == -1) {         /* READ reference, once */
                for (int ij = 0; ij < nj; ij++) {
                    int        nth = atoi(threads[ij]);
                    double     times[64], cpu[64 * 64];
                    pthread_t  tid[64];
                    kb_arg_t   args[64];
                    pthread_barrier_t  bar;

                    if (nth < 1 || nth > 64) {
                        continue;
                    }
                    kb_job_t  job = { t, n, nr, 1, w, rb, x, xb, y, nth,
                                      passes < 64 ? passes : 64, &bar,
                                      times, cpu, 1, sink };

                    pthread_barrier_init(&bar, NULL, nth);
                    for (int k = 0; k < nth; k++) {
                        args[k].job = &job;
                        args[k].ith = k;
                        if (k > 0) {
                            pthread_create(&tid[k], NULL, kb_worker,
                                           &args[k]);
                        }
                    }
                    kb_worker(&args[0]);
                    for (int k = 1; k < nth; k++) {
                        pthread_join(tid[k], NULL);
                    }
                    pthread_barrier_destroy(&bar);
                    double  cm = 1e30;
                    for (int ps = 0; ps < job.passes; ps++) {
                        double  v = 0;
                        for (int k = 0; k < nth; k++) {
                            v = cpu[k * job.passes + ps] > v
                                ? cpu[k * job.passes + ps] : v;
                        }
                        cm = v < cm ? v : cm;
                    }
                    qsort(times, job.passes, sizeof(double), kb_cmp);
                    printf("| READ | - | %d | - | %.1f | %.1f | - | %.2f |\n",
                           nth, rb * nr / times[0] / 1e9, rb * nr / cm / 1e9,
                           times[0] * 1e3);
                }
                continue;
            }

            while (strcmp(llm_simd_name(lv), simds[is]) != 0
                   && lv + 1 < LLM_SIMD_COUNT)
            {
                lv++;
            }
            if (strcmp(llm_simd_name(lv), simds[is]) != 0
                || llm_simd_force(lv) != 0)
            {
                fprintf(stderr, "llm-kbench: simd %s not available\n",
                        simds[is]);
                continue;
            }

            for (int ij = 0; ij < nj; ij++) {
                for (int ic = 0; ic < ncs; ic++) {
                    int        nth = atoi(threads[ij]);
                    int64_t    nc = atol(cols[ic]);
                    int64_t    rows = nr;
                    double     times[64], cpu[64 * 64], cmax[64];
                    pthread_t  tid[64];
                    kb_arg_t   args[64];
                    pthread_barrier_t  bar;

                    if (nth < 1 || nth > 64 || nc < 1) {
                        continue;
                    }
                    /* fewer rows for slow settings: ~<= 8 GMAC a pass */
                    while (rows > 256 && (double) rows * n * nc
                           * (lv == LLM_SIMD_SCALAR ? 8 : 1) > 8e9)
                    {
                        rows /= 2;
                    }

                    kb_job_t  job = { t, n, rows, nc, w, rb, x, xb, y, nth,
                                      passes < 64 ? passes : 64, &bar,
                                      times, cpu, 0, sink };

                    pthread_barrier_init(&bar, NULL, nth);
                    for (int k = 0; k < nth; k++) {
                        args[k].job = &job;
                        args[k].ith = k;
                        if (k > 0) {
                            pthread_create(&tid[k], NULL, kb_worker,
                                           &args[k]);
                        }
                    }
                    kb_worker(&args[0]);
                    for (int k = 1; k < nth; k++) {
                        pthread_join(tid[k], NULL);
                    }
                    pthread_barrier_destroy(&bar);

                    for (int ps = 0; ps < job.passes; ps++) {
                        cmax[ps] = 0;
                        for (int k = 0; k < nth; k++) {
                            double  v = cpu[k * job.passes + ps];
                            cmax[ps] = v > cmax[ps] ? v : cmax[ps];
                        }
                    }
                    qsort(times, job.passes, sizeof(double), kb_cmp);
                    qsort(cmax, job.passes, sizeof(double), kb_cmp);
                    double  med = times[0];      /* best pass */
                    double  cmed = cmax[0];

                    printf("| %s | %s | %d | %ld | %.1f | %.1f | %.1f |"
                           " %.2f |\n", llm_type_name(t), llm_simd_name(lv),
                           nth, (long) nc, rb * rows / med / 1e9,
                           rb * rows / cmed / 1e9,
                           (double) rows * n * nc / cmed / 1e9, med * 1e3);
                    fflush(stdout);
                }
            }
        }
        munmap(map, map_len);
        free(f);
        free(x);
        free(y);
    }
    llm_simd_force(llm_simd_best());
    return 0;
}
