/*
 * The memory plan (memplan.h): the cgroup's and the machine's limits, and
 * the choice between resident, streamed and unregrouped weights.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memplan.h"

#define LLM_MEM_LINE       4096
/* v1 writes PAGE_COUNTER_MAX * page size (~2^63) for "no limit" */
#define LLM_MEM_UNLIMITED  (1ull << 62)

/* ---- limits ------------------------------------------------------------- */

/* The number in path, or 0 when it is missing, "max" or unlimited. */
static uint64_t
llm_mem_read_limit(const char *path)
{
    FILE                *f = fopen(path, "r");
    unsigned long long   v = 0;

    if (f == NULL) {
        return 0;
    }
    if (fscanf(f, "%llu", &v) != 1 || v >= LLM_MEM_UNLIMITED) {
        v = 0;
    }
    fclose(f);
    return (uint64_t) v;
}

/* Undo mountinfo's octal escapes (\040 for a space) in place. */
static void
llm_mem_unescape(char *s)
{
    char  *d = s;

    while (*s) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0'
            && s[2] <= '7' && s[3] >= '0' && s[3] <= '7')
        {
            *d++ = (char) ((s[1] - '0') * 64 + (s[2] - '0') * 8
                           + (s[3] - '0'));
            s += 4;
        } else {
            *d++ = *s++;
        }
    }
    *d = '\0';
}

/* Nonzero when the comma-separated list has item. */
static int
llm_mem_has_item(const char *list, const char *item)
{
    size_t       n = strlen(item);
    const char  *p = list;

    while (p != NULL && *p) {
        if (strncmp(p, item, n) == 0 && (p[n] == ',' || p[n] == '\0')) {
            return 1;
        }
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return 0;
}

/*
 * Find the mount of the v1 memory controller (v1 = 1) or of cgroup2
 * (v1 = 0) in mountinfo: its root within the hierarchy and its mount
 * point.  Returns 0 when found.
 */
static int
llm_mem_find_mount(const char *mountinfo, int v1, char *root, size_t rlen,
    char *mnt, size_t mlen)
{
    FILE  *f = fopen(mountinfo, "r");
    char   line[LLM_MEM_LINE], *sep, *tok, *save, *fields[6];
    char   fstype[64], super[1024];
    int    n, found = -1;

    if (f == NULL) {
        return -1;
    }
    while (found < 0 && fgets(line, sizeof(line), f)) {
        sep = strstr(line, " - ");
        if (sep == NULL) {
            continue;
        }
        *sep = '\0';
        if (sscanf(sep + 3, "%63s %*s %1023s", fstype, super) != 2) {
            continue;
        }
        if (v1 ? strcmp(fstype, "cgroup") != 0
                 || !llm_mem_has_item(super, "memory")
               : strcmp(fstype, "cgroup2") != 0)
        {
            continue;
        }
        n = 0;
        for (tok = strtok_r(line, " ", &save); tok != NULL && n < 6;
             tok = strtok_r(NULL, " ", &save))
        {
            fields[n++] = tok;
        }
        if (n < 5) {
            continue;
        }
        llm_mem_unescape(fields[3]);
        llm_mem_unescape(fields[4]);
        snprintf(root, rlen, "%s", fields[3]);
        snprintf(mnt, mlen, "%s", fields[4]);
        found = 0;
    }
    fclose(f);
    return found;
}

/*
 * The process's path in the v1 memory hierarchy (v1 = 1) or in the v2 one
 * (the "0::" line), from its cgroup file.  Returns 0 when found.
 */
static int
llm_mem_find_path(const char *cgfile, int v1, char *path, size_t plen)
{
    FILE  *f = fopen(cgfile, "r");
    char   line[LLM_MEM_LINE], *c1, *c2, *nl;
    int    found = -1;

    if (f == NULL) {
        return -1;
    }
    while (found < 0 && fgets(line, sizeof(line), f)) {
        c1 = strchr(line, ':');
        c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL) {
            continue;
        }
        *c1 = '\0';
        *c2 = '\0';
        nl = strchr(c2 + 1, '\n');
        if (nl) {
            *nl = '\0';
        }
        if (v1 ? llm_mem_has_item(c1 + 1, "memory")
               : strcmp(line, "0") == 0 && c1[1] == '\0')
        {
            snprintf(path, plen, "%s", c2 + 1);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/*
 * The smallest limit from the process's cgroup directory up to the
 * mount point, for one hierarchy; sets lim's cgroup fields when a limit
 * is found.  Returns 1 then, 0 when there is no limit, -1 when the
 * hierarchy is not mounted or the process is not in it.
 */
static int
llm_mem_cgroup(llm_mem_limits_t *lim, const llm_mem_src_t *src, int v1)
{
    char         root[1024], mnt[1024], path[1024], dir[2048], file[2304];
    const char  *rel, *name = v1 ? "memory.limit_in_bytes" : "memory.max";
    size_t       rl, ml;
    uint64_t     v, best = 0;
    char        *slash;

    if (llm_mem_find_mount(src->mountinfo, v1, root, sizeof(root), mnt,
                           sizeof(mnt)) != 0
        || llm_mem_find_path(src->cgroup, v1, path, sizeof(path)) != 0)
    {
        return -1;
    }
    /* a mount of a subtree (containers): the path is below its root */
    rel = path;
    rl = strlen(root);
    if (strcmp(root, "/") != 0) {
        rel = strncmp(path, root, rl) == 0 && (path[rl] == '/'
                                               || path[rl] == '\0')
              ? path + rl : "";
    }
    if (strstr(rel, "/..") != NULL) {
        rel = "";                   /* outside this namespace's view */
    }
    ml = strlen(mnt);
    while (ml > 1 && mnt[ml - 1] == '/') {
        mnt[--ml] = '\0';
    }
    snprintf(dir, sizeof(dir), "%s%s", mnt, rel);
    ml = strlen(dir);
    while (ml > 1 && dir[ml - 1] == '/') {
        dir[--ml] = '\0';
    }

    for ( ;; ) {
        snprintf(file, sizeof(file), "%s/%s", dir, name);
        v = llm_mem_read_limit(file);
        if (v > 0 && (best == 0 || v < best)) {
            best = v;
            snprintf(lim->cgroup_dir, sizeof(lim->cgroup_dir), "%s", dir);
        }
        if (strcmp(dir, mnt) == 0 || strlen(dir) <= strlen(mnt)) {
            break;
        }
        slash = strrchr(dir, '/');
        if (slash == NULL || slash == dir) {
            break;
        }
        *slash = '\0';
    }
    if (best > 0) {
        lim->cgroup_limit = best;
        snprintf(lim->cgroup_kind, sizeof(lim->cgroup_kind), "%s",
                 v1 ? "v1" : "v2");
    }
    return best > 0;
}

void
llm_mem_detect(llm_mem_limits_t *lim, const llm_mem_src_t *src)
{
    llm_mem_src_t        s = { "/proc/self/mountinfo", "/proc/self/cgroup",
                               "/proc/meminfo" };
    FILE                *f;
    char                 line[256];
    unsigned long long   kb;

    memset(lim, 0, sizeof(*lim));
    if (src != NULL) {
        s.mountinfo = src->mountinfo ? src->mountinfo : s.mountinfo;
        s.cgroup = src->cgroup ? src->cgroup : s.cgroup;
        s.meminfo = src->meminfo ? src->meminfo : s.meminfo;
    }
    f = fopen(s.meminfo, "r");
    if (f != NULL) {
        while (fgets(line, sizeof(line), f)) {
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
                lim->mem_total = (uint64_t) kb << 10;
            } else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                lim->mem_available = (uint64_t) kb << 10;
            }
        }
        fclose(f);
    }
    /* a controller is in one hierarchy only: v1's memory, when mounted */
    if (llm_mem_cgroup(lim, &s, 1) < 0) {
        llm_mem_cgroup(lim, &s, 0);
    }

    lim->allowed = lim->mem_available ? lim->mem_available : lim->mem_total;
    if (lim->cgroup_limit > 0
        && (lim->allowed == 0 || lim->cgroup_limit < lim->allowed))
    {
        lim->allowed = lim->cgroup_limit;
    }
}

/* ---- the plan ----------------------------------------------------------- */

const char *
llm_mem_mode_name(llm_mem_mode_t mode)
{
    switch (mode) {
    case LLM_MEM_RESIDENT: return "resident";
    case LLM_MEM_STREAMED: return "streamed experts";
    case LLM_MEM_NO_REGROUP: return "resident without regrouping";
    }
    return "?";
}

int
llm_mem_plan(const llm_mem_need_t *need, uint64_t allowed,
    llm_mem_plan_t *plan, char *err, size_t errlen)
{
    uint64_t  fixed, rest, cache, one_layer;

    memset(plan, 0, sizeof(*plan));
    fixed = need->kv_bytes + need->buffer_bytes + need->other_bytes;
    plan->budget = allowed / 10 * 9;
    plan->mode = LLM_MEM_RESIDENT;
    plan->anon_bytes = fixed + need->regroup_bytes;
    plan->total_bytes = fixed + need->file_bytes;
    if (allowed == 0 || need->file_bytes + fixed <= plan->budget) {
        return 0;
    }

    /* streamed: the rest of the file stays mapped (or regrouped) */
    rest = need->file_bytes - need->experts_bytes;
    one_layer = (uint64_t) need->n_expert * need->slot_bytes;
    if (need->n_expert > 0 && need->experts_bytes > 0 && one_layer > 0
        && rest + fixed + one_layer <= plan->budget)
    {
        cache = plan->budget - rest - fixed;
        if (cache > (uint64_t) need->n_layer * one_layer) {
            cache = (uint64_t) need->n_layer * one_layer;
        }
        plan->mode = LLM_MEM_STREAMED;
        plan->cache_mb = cache >> 20;
        plan->anon_bytes = fixed + (plan->cache_mb << 20)
                           + need->regroup_rest_bytes;
        plan->total_bytes = fixed + rest + (plan->cache_mb << 20);
        return 0;
    }

    if (fixed <= plan->budget) {
        plan->mode = LLM_MEM_NO_REGROUP;
        plan->anon_bytes = fixed;
        plan->total_bytes = fixed + need->file_bytes;
        return 0;
    }
    snprintf(err, errlen, "memory: the KV cache (%.1f MiB), buffers "
             "(%.1f MiB) and a %.1f MiB margin need %.1f MiB, over 90%% "
             "of the %.1f MiB allowed; lower --kv-mb, --ctx, --step-tokens "
             "or --max-batch, or raise the limit",
             (double) need->kv_bytes / 1048576.0,
             (double) need->buffer_bytes / 1048576.0,
             (double) need->other_bytes / 1048576.0,
             (double) fixed / 1048576.0, (double) allowed / 1048576.0);
    return -ENOMEM;
}
