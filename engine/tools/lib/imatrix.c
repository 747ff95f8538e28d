/*
 * Importance matrix files (see imatrix.h).  Both readers compute the
 * values exactly as llama-quantize's load_imatrix does (float divisions,
 * in the same order), since the quantizers' output depends on every bit.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/gguf.h"
#include "imatrix.h"
#include "readfile.h"

typedef struct {
    char      *name;
    float     *v;
    uint64_t   n;
} im_entry_t;

struct llm_imatrix_s {
    im_entry_t  *e;
    uint32_t     n, cap;
    uint32_t     chunks;
    char        *dataset;
    int          legacy;
};


void
llm_imatrix_free(llm_imatrix_t *im)
{
    if (im == NULL) {
        return;
    }
    for (uint32_t i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].v);
    }
    free(im->e);
    free(im->dataset);
    free(im);
}


/* A new entry named name (len bytes) with n zeroed values; NULL: ENOMEM. */
static im_entry_t *
im_add(llm_imatrix_t *im, const char *name, size_t len, uint64_t n)
{
    im_entry_t  *e;

    if (im->n == im->cap) {
        uint32_t  cap = im->cap ? im->cap * 2 : 64;
        void     *p = realloc(im->e, cap * sizeof(*im->e));

        if (p == NULL) {
            return NULL;
        }
        im->e = p;
        im->cap = cap;
    }
    e = &im->e[im->n];
    e->name = strndup(name, len);
    e->v = calloc(n ? n : 1, sizeof(float));
    e->n = n;
    if (e->name == NULL || e->v == NULL) {
        free(e->name);
        free(e->v);
        return NULL;
    }
    im->n++;
    return e;
}


/* Little-endian i32 at *p if 4 bytes remain before end. */
static int
im_i32(const char **p, const char *end, int32_t *v)
{
    if (end - *p < 4) {
        return -1;
    }
    memcpy(v, *p, 4);
    *p += 4;
    return 0;
}


static int
im_load_legacy(llm_imatrix_t *im, const char *path, const char *buf,
    size_t len, char *err, size_t errlen)
{
    const char  *p = buf, *end = buf + len;
    int32_t      n_entries, nlen, ncall, nval, chunks, dlen;

    if (im_i32(&p, end, &n_entries) != 0 || n_entries < 1) {
        llm_err(err, errlen, "%s: no entries in legacy imatrix file", path);
        return -EINVAL;
    }
    for (int32_t i = 0; i < n_entries; i++) {
        im_entry_t  *e;

        if (im_i32(&p, end, &nlen) != 0 || nlen < 1 || end - p < nlen) {
            llm_err(err, errlen, "%s: entry %d: bad name", path, i);
            return -EINVAL;
        }
        const char  *name = p;
        p += nlen;
        if (im_i32(&p, end, &ncall) != 0 || im_i32(&p, end, &nval) != 0
            || nval < 1 || (uint64_t) (end - p) < (uint64_t) nval * 4)
        {
            llm_err(err, errlen, "%s: entry %d ('%.*s'): truncated", path, i,
                    (int) nlen, name);
            return -EINVAL;
        }
        e = im_add(im, name, (size_t) nlen, (uint64_t) nval);
        if (e == NULL) {
            llm_err(err, errlen, "%s: out of memory", path);
            return -ENOMEM;
        }
        memcpy(e->v, p, (size_t) nval * 4);
        p += (size_t) nval * 4;
        if (ncall > 0) {
            for (int32_t j = 0; j < nval; j++) {
                e->v[j] /= ncall;
            }
        }
    }

    /* newer legacy files end with the chunk count and the dataset name */
    if (im_i32(&p, end, &chunks) == 0) {
        im->chunks = chunks > 0 ? (uint32_t) chunks : 0;
        if (im_i32(&p, end, &dlen) == 0 && dlen > 0 && end - p >= dlen) {
            im->dataset = strndup(p, (size_t) dlen);
        }
    }
    im->legacy = 1;
    return 0;
}


/* The entry name of a "<name>.in_sum2" / "<name>.counts" tensor. */
static size_t
im_base(const char *tname, const char *suffix)
{
    size_t  n = strlen(tname), s = strlen(suffix);

    if (n > s && strcmp(tname + n - s, suffix) == 0) {
        return n - s;
    }
    return 0;
}


static int
im_load_gguf(llm_imatrix_t *im, const char *path, char *err, size_t errlen)
{
    llm_gguf_t           *g = NULL;
    uint64_t              nd = 0;
    const llm_gguf_str_t *ds = NULL;
    int                   rc;

    rc = llm_gguf_open(&g, path, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (llm_gguf_get_str_arr(g, "imatrix.datasets", &nd, &ds, NULL, 0) != 0
        || llm_gguf_get_u32(g, "imatrix.chunk_count", &im->chunks, NULL, 0)
           != 0
        || llm_gguf_find_kv(g, "imatrix.chunk_size") == NULL)
    {
        llm_err(err, errlen, "%s: missing imatrix metadata (imatrix.datasets,"
                " imatrix.chunk_count, imatrix.chunk_size)", path);
        rc = -EINVAL;
        goto done;
    }
    if (nd > 0) {
        im->dataset = strndup(ds[0].ptr, ds[0].len);
    }

    for (uint64_t i = 0; i < llm_gguf_n_tensors(g); i++) {
        const llm_gguf_tensor_t  *s = llm_gguf_tensor_at(g, i), *c;
        size_t                    bl = im_base(s->name, ".in_sum2");
        char                      cname[128];
        int64_t                   ne0 = s->ne[0], ne1 = s->ne[1];
        im_entry_t               *e;

        if (bl == 0) {
            if (im_base(s->name, ".counts") == 0) {
                continue;       /* neither: other tensors are ignored */
            }
            snprintf(cname, sizeof(cname), "%.*s.in_sum2",
                     (int) im_base(s->name, ".counts"), s->name);
            if (llm_gguf_find_tensor(g, cname) == NULL) {
                llm_err(err, errlen, "%s: '%s' has no in_sum2", path,
                        s->name);
                rc = -EINVAL;
                goto done;
            }
            continue;
        }
        snprintf(cname, sizeof(cname), "%.*s.counts", (int) bl, s->name);
        c = llm_gguf_find_tensor(g, cname);
        if (c == NULL) {
            llm_err(err, errlen, "%s: '%s' has no counts", path, s->name);
            rc = -EINVAL;
            goto done;
        }
        if (s->type != 0 || c->type != 0 || s->n_dims > 2 || c->ne[0] != 1
            || c->ne[1] * c->ne[2] * c->ne[3] != ne1 || s->ne[2] != 1)
        {
            llm_err(err, errlen, "%s: '%.*s': in_sum2 [%lld, %lld] and "
                    "counts do not pair up (F32 [ne0, n] and [1, n])", path,
                    (int) bl, s->name, (long long) ne0, (long long) ne1);
            rc = -EINVAL;
            goto done;
        }
        e = im_add(im, s->name, bl, (uint64_t) (ne0 * ne1));
        if (e == NULL) {
            llm_err(err, errlen, "%s: out of memory", path);
            rc = -ENOMEM;
            goto done;
        }
        for (int64_t j = 0; j < ne1; j++) {
            float  count, sum;

            memcpy(&count, (const char *) c->data + 4 * j, 4);
            for (int64_t k = 0; k < ne0; k++) {
                memcpy(&sum, (const char *) s->data + 4 * (j * ne0 + k), 4);
                e->v[j * ne0 + k] = count > 0.0f ? sum / count : 1;
            }
        }
    }
    if (im->n == 0) {
        llm_err(err, errlen, "%s: no imatrix entries", path);
        rc = -EINVAL;
    }

done:
    llm_gguf_close(g);
    return rc;
}


int
llm_imatrix_load(llm_imatrix_t **out, const char *path, char *err,
    size_t errlen)
{
    llm_imatrix_t  *im;
    char           *buf = NULL;
    size_t          len = 0;
    int             rc;

    *out = NULL;
    im = calloc(1, sizeof(*im));
    if (im == NULL) {
        llm_err(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    buf = llm_read_file(path, &len);
    if (buf == NULL) {
        rc = errno ? -errno : -EIO;
        llm_err(err, errlen, "%s: %s", path, strerror(-rc));
        goto fail;
    }
    if (len >= 4 && memcmp(buf, "GGUF", 4) == 0) {
        free(buf);
        buf = NULL;
        rc = im_load_gguf(im, path, err, errlen);
    } else {
        rc = im_load_legacy(im, path, buf, len, err, errlen);
    }
    if (rc != 0) {
        goto fail;
    }

    /* llama-quantize refuses these: the fits would turn them into NaNs */
    for (uint32_t i = 0; i < im->n; i++) {
        for (uint64_t j = 0; j < im->e[i].n; j++) {
            if (!isfinite(im->e[i].v[j])) {
                llm_err(err, errlen, "%s: '%s': value %llu is not finite",
                        path, im->e[i].name, (unsigned long long) j);
                rc = -EINVAL;
                goto fail;
            }
        }
    }
    free(buf);
    *out = im;
    return 0;

fail:
    free(buf);
    llm_imatrix_free(im);
    return rc;
}


const float *
llm_imatrix_find(const llm_imatrix_t *im, const char *name, uint64_t *n)
{
    for (uint32_t i = 0; i < im->n; i++) {
        if (strcmp(im->e[i].name, name) == 0) {
            *n = im->e[i].n;
            return im->e[i].v;
        }
    }
    *n = 0;
    return NULL;
}


uint32_t
llm_imatrix_n_entries(const llm_imatrix_t *im)
{
    return im->n;
}


uint32_t
llm_imatrix_chunks(const llm_imatrix_t *im)
{
    return im->chunks;
}


const char *
llm_imatrix_dataset(const llm_imatrix_t *im)
{
    return im->dataset;
}


int
llm_imatrix_is_legacy(const llm_imatrix_t *im)
{
    return im->legacy;
}
