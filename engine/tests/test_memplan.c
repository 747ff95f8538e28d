/*
 * The memory plan (memplan.h): cgroup v1 and v2 limits read from the
 * process's own cgroup up to the mount's root, with fake /proc files and
 * cgroup trees in a temp dir; and the choice between resident, streamed
 * and unregrouped weights at the edges of each rule.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve/memplan.h"
#include "testkit.h"

static const char  *dir;      /* the fake /proc and cgroup files */

#define MIB  (1ull << 20)

/* Write text to dir/rel, making the directories on the way. */
static void
put(const char *rel, const char *text)
{
    char   p[1024], *s;
    FILE  *f;

    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    for (s = p + strlen(dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    f = fopen(p, "w");
    if (f == NULL) {
        tk_fatal("%s: %s", p, strerror(errno));
    }
    fputs(text, f);
    fclose(f);
}

static void
detect(llm_mem_limits_t *lim)
{
    char           mi[512], cg[512], me[512];
    llm_mem_src_t  src;

    snprintf(mi, sizeof(mi), "%s/mountinfo", dir);
    snprintf(cg, sizeof(cg), "%s/cgroup", dir);
    snprintf(me, sizeof(me), "%s/meminfo", dir);
    src.mountinfo = mi;
    src.cgroup = cg;
    src.meminfo = me;
    llm_mem_detect(lim, &src);
}

static void
test_v1(void)
{
    llm_mem_limits_t  lim;
    char              buf[2048], want[512];

    /* the parent's limit is smaller than the leaf's: the smallest counts */
    snprintf(buf, sizeof(buf),
             "22 1 0:20 / /sys rw - sysfs sysfs rw\n"
             "30 22 0:26 / %s/v1/cpu rw,relatime shared:9 - cgroup cgroup "
             "rw,cpu\n"
             "31 22 0:27 / %s/v1/memory rw,relatime shared:10 - cgroup "
             "cgroup rw,memory\n"
             "32 22 0:28 / %s/unified rw - cgroup2 cgroup2 rw\n",
             dir, dir, dir);
    put("mountinfo", buf);
    put("cgroup", "5:cpu:/\n4:memory:/svc/eng\n0::/\n");
    put("meminfo", "MemTotal:       24000000 kB\nMemFree: 1 kB\n"
        "MemAvailable:   20000000 kB\n");
    put("v1/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("v1/memory/svc/memory.limit_in_bytes", "1153433600\n");
    put("v1/memory/svc/eng/memory.limit_in_bytes", "2153433600\n");
    put("unified/memory.max", "1000\n");    /* not the memory hierarchy */
    detect(&lim);
    REQUIRE(strcmp(lim.cgroup_kind, "v1") == 0);
    REQUIRE(lim.cgroup_limit == 1153433600ull);
    snprintf(want, sizeof(want), "%s/v1/memory/svc", dir);
    REQUIRE(strcmp(lim.cgroup_dir, want) == 0);
    REQUIRE(lim.mem_total == 24000000ull * 1024);
    REQUIRE(lim.mem_available == 20000000ull * 1024);
    REQUIRE(lim.allowed == 1153433600ull);

    /* no limit anywhere ("unlimited"): MemAvailable */
    put("v1/memory/svc/memory.limit_in_bytes", "9223372036854771712\n");
    put("v1/memory/svc/eng/memory.limit_in_bytes", "9223372036854771712\n");
    detect(&lim);
    REQUIRE(lim.cgroup_limit == 0 && lim.cgroup_kind[0] == '\0');
    REQUIRE(lim.allowed == 20000000ull * 1024);
}

static void
test_v2(void)
{
    llm_mem_limits_t  lim;
    char              buf[2048], want[512];

    /* a container: the mount's root is the container's cgroup */
    snprintf(buf, sizeof(buf),
             "40 1 0:30 /kubepods/pod1 %s/v2\\040dir rw,nosuid - cgroup2 "
             "cgroup2 rw,nsdelegate\n", dir);
    put("mountinfo", buf);
    put("cgroup", "0::/kubepods/pod1/engine\n");
    put("meminfo", "MemTotal:       8000000 kB\n");
    put("v2 dir/memory.max", "max\n");
    put("v2 dir/engine/memory.max", "536870912\n");
    detect(&lim);
    REQUIRE(strcmp(lim.cgroup_kind, "v2") == 0);
    REQUIRE(lim.cgroup_limit == 512 * MIB);
    snprintf(want, sizeof(want), "%s/v2 dir/engine", dir);
    REQUIRE(strcmp(lim.cgroup_dir, want) == 0);
    REQUIRE(lim.mem_available == 0);
    REQUIRE(lim.allowed == 512 * MIB);     /* under MemTotal */

    /* the limit above the machine: the machine's memory */
    put("v2 dir/engine/memory.max", "81920000000\n");
    detect(&lim);
    REQUIRE(lim.cgroup_limit == 81920000000ull);
    REQUIRE(lim.allowed == 8000000ull * 1024);

    /* a path outside the namespace's view: the mount's own root */
    put("cgroup", "0::/../other\n");
    put("v2 dir/memory.max", "268435456\n");
    detect(&lim);
    REQUIRE(lim.cgroup_limit == 256 * MIB);

    /* nothing readable: zeros, no crash */
    put("mountinfo", "");
    put("cgroup", "");
    put("meminfo", "");
    detect(&lim);
    REQUIRE(lim.allowed == 0 && lim.cgroup_limit == 0);
}

/* The bench model's shape: 2690 MiB, 2592 of it 16 x 64 experts. */
static void
bench_need(llm_mem_need_t *n)
{
    memset(n, 0, sizeof(*n));
    n->file_bytes = 2690 * MIB;
    n->experts_bytes = 2592 * MIB;
    n->slot_bytes = 2662400;            /* 2.54 MiB */
    n->n_expert = 64;
    n->n_expert_used = 8;
    n->n_layer = 16;
    n->regroup_bytes = 2677 * MIB;
    n->regroup_rest_bytes = 85 * MIB;
    n->kv_bytes = 256 * MIB;
    n->buffer_bytes = 33 * MIB;
    n->other_bytes = 64 * MIB;
}

static void
test_plan(void)
{
    llm_mem_need_t  n;
    llm_mem_plan_t  p;
    char            err[256];
    uint64_t        fixed = (256 + 33 + 64) * MIB, rest = 98 * MIB;
    uint64_t        layer = 64ull * 2662400;

    bench_need(&n);
    REQUIRE(llm_mem_plan(&n, 0, &p, err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_RESIDENT);          /* unknown */
    REQUIRE(llm_mem_plan(&n, 24000 * MIB, &p, err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_RESIDENT);
    REQUIRE(p.anon_bytes == fixed + n.regroup_bytes);

    /* the case: 1.1 GB for a 2.8 GB file */
    REQUIRE(llm_mem_plan(&n, 1100 * MIB, &p, err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_STREAMED);
    REQUIRE(p.budget == 1100 * MIB / 10 * 9);
    REQUIRE(p.cache_mb == (p.budget - rest - fixed) >> 20);
    REQUIRE(p.total_bytes <= p.budget);
    REQUIRE(p.anon_bytes == fixed + (p.cache_mb << 20) + 85 * MIB);

    /* exactly the file: resident; a byte less: streamed */
    REQUIRE(llm_mem_plan(&n, (n.file_bytes + fixed) / 9 * 10 + 10, &p,
                         err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_RESIDENT);
    REQUIRE(llm_mem_plan(&n, (n.file_bytes + fixed) / 9 * 10 - 20, &p,
                         err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_STREAMED);
    /* the cache never exceeds every expert */
    REQUIRE(p.cache_mb << 20 <= 16 * layer);

    /* one layer of slots is the least worth streaming */
    REQUIRE(llm_mem_plan(&n, (rest + fixed + layer) / 9 * 10 + 10, &p,
                         err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_STREAMED);
    REQUIRE((p.cache_mb << 20) + MIB > layer);
    REQUIRE(llm_mem_plan(&n, (rest + fixed + layer) / 9 * 10 - 20, &p,
                         err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_NO_REGROUP);
    REQUIRE(p.anon_bytes == fixed);

    /* a dense model over the limit: no regrouping */
    n.n_expert = 0;
    n.experts_bytes = 0;
    REQUIRE(llm_mem_plan(&n, 1100 * MIB, &p, err, sizeof(err)) == 0);
    REQUIRE(p.mode == LLM_MEM_NO_REGROUP);

    /* not even the KV cache fits: an error naming what to lower */
    REQUIRE(llm_mem_plan(&n, 300 * MIB, &p, err, sizeof(err))
            == -ENOMEM);
    REQUIRE(strstr(err, "KV cache (256.0 MiB)") != NULL);
    REQUIRE(strstr(err, "--kv-mb") != NULL);
}

int
main(void)
{
    dir = tk_tmpdir("test_memplan");
    tk_begin("v1");
    test_v1();
    tk_begin("v2");
    test_v2();
    tk_begin("plan");
    test_plan();
    return tk_done();
}
