/*
 * Whole-file reads (readfile.h).
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "readfile.h"

char *
llm_read_stream(FILE *f, size_t *len)
{
    char    *buf = NULL, *nb;
    size_t   n = 0, cap = 0, r;
    int      e;

    for ( ;; ) {
        if (cap - n < 65536) {
            if (cap > SIZE_MAX / 4) {
                errno = ENOMEM;
                goto fail;
            }
            cap = cap ? cap * 2 : 1 << 16;
            nb = realloc(buf, cap + 1);
            if (nb == NULL) {
                goto fail;
            }
            buf = nb;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            break;
        }
    }
    if (ferror(f)) {
        errno = EIO;
        goto fail;
    }
    buf[n] = '\0';
    *len = n;
    return buf;

fail:
    e = errno;
    free(buf);
    errno = e;
    return NULL;
}

char *
llm_read_file(const char *path, size_t *len)
{
    FILE  *f;
    char  *p;
    int    e;

    f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    p = llm_read_stream(f, len);
    e = errno;
    fclose(f);
    errno = e;
    return p;
}
