/*
 * Unicode NFC, for the vocabularies whose tokenizer.json normalizes text
 * to NFC before pre-tokenization (Qwen2 / Qwen2.5 / Qwen3).
 *
 * Most text is NFC already, so the work is done only around characters
 * that NFC may change (LLM_UCD_NFC: combining marks, characters NFC
 * replaces, second halves of compositions, Hangul vowel and trailing
 * jamo; not precomposed letters that are NFC already).  Such a run, together with the starter before it, is
 * decomposed (full canonical decompositions from the generated table,
 * Hangul syllables by arithmetic), put in canonical order (stable sort by
 * combining class) and recomposed (UAX #15: a character joins the last
 * starter unless a character of class 0 or of a class not lower than its
 * own stands between them).  Invalid UTF-8 bytes are copied through and
 * compose with nothing.  test_tokenizer checks it against Python's
 * unicodedata.normalize on generated cases.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_int.h"

extern const uint32_t llm_nfc_ccc[][2];
extern const uint32_t llm_nfc_n_ccc;
extern const uint32_t llm_nfc_decomp[][3];
extern const uint32_t llm_nfc_n_decomp;
extern const uint32_t llm_nfc_pool[];
extern const uint32_t llm_nfc_comp[][3];
extern const uint32_t llm_nfc_n_comp;

#define RAW_BYTE   0x80000000u      /* an invalid byte kept as it is */

#define S_BASE     0xAC00
#define L_BASE     0x1100
#define V_BASE     0x1161
#define T_BASE     0x11A7
#define L_COUNT    19
#define V_COUNT    21
#define T_COUNT    28
#define N_COUNT    (V_COUNT * T_COUNT)
#define S_COUNT    (L_COUNT * N_COUNT)

static uint32_t
ccc(uint32_t cp)
{
    uint32_t  lo = 0, hi = llm_nfc_n_ccc, mid;

    if (cp < 0x300 || (cp & RAW_BYTE)) {
        return 0;
    }
    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (llm_nfc_ccc[mid][0] == cp) {
            return llm_nfc_ccc[mid][1];
        }
        if (llm_nfc_ccc[mid][0] < cp) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return 0;
}

/* Full canonical decomposition of cp: *n code points at the result. */
static const uint32_t *
decomp(uint32_t cp, uint32_t *n)
{
    uint32_t  lo = 0, hi = llm_nfc_n_decomp, mid;

    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (llm_nfc_decomp[mid][0] == cp) {
            *n = llm_nfc_decomp[mid][2];
            return llm_nfc_pool + llm_nfc_decomp[mid][1];
        }
        if (llm_nfc_decomp[mid][0] < cp) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

/* The primary composite of (a, b), or 0. */
static uint32_t
compose(uint32_t a, uint32_t b)
{
    uint32_t  lo = 0, hi = llm_nfc_n_comp, mid;

    if (a >= L_BASE && a < L_BASE + L_COUNT
        && b >= V_BASE && b < V_BASE + V_COUNT)
    {
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    }
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0
        && b > T_BASE && b < T_BASE + T_COUNT)
    {
        return a + (b - T_BASE);
    }
    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (llm_nfc_comp[mid][0] == a && llm_nfc_comp[mid][1] == b) {
            return llm_nfc_comp[mid][2];
        }
        if (llm_nfc_comp[mid][0] < a
            || (llm_nfc_comp[mid][0] == a && llm_nfc_comp[mid][1] < b))
        {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return 0;
}

typedef struct {
    uint32_t  *cp;
    size_t     n;
    size_t     cap;
} cps_t;

static int
cps_push(cps_t *a, uint32_t c)
{
    uint32_t  *p;
    size_t     cap;

    if (a->n == a->cap) {
        cap = a->cap ? a->cap * 2 : 64;
        p = realloc(a->cp, cap * sizeof(*p));
        if (p == NULL) {
            return -ENOMEM;
        }
        a->cp = p;
        a->cap = cap;
    }
    a->cp[a->n++] = c;
    return 0;
}

static int
out_add(char **o, size_t *on, size_t *ocap, const void *p, size_t n)
{
    char    *b;
    size_t   cap;

    if (n == 0) {
        return 0;
    }
    if (*on + n > *ocap) {
        cap = *ocap ? *ocap : 256;
        while (cap < *on + n) {
            cap *= 2;
        }
        b = realloc(*o, cap);
        if (b == NULL) {
            return -ENOMEM;
        }
        *o = b;
        *ocap = cap;
    }
    memcpy(*o + *on, p, n);
    *on += n;
    return 0;
}

/* Decode one character (or one invalid byte as RAW_BYTE | byte). */
static size_t
dec1(const uint8_t *s, size_t n, uint32_t *cp)
{
    int  r = llm_utf8_check(s, n);

    if (r <= 0) {
        *cp = RAW_BYTE | s[0];
        return 1;
    }
    switch (r) {
    case 1:
        *cp = s[0];
        break;
    case 2:
        *cp = ((uint32_t) (s[0] & 0x1f) << 6) | (s[1] & 0x3f);
        break;
    case 3:
        *cp = ((uint32_t) (s[0] & 0x0f) << 12)
              | ((uint32_t) (s[1] & 0x3f) << 6) | (s[2] & 0x3f);
        break;
    default:
        *cp = ((uint32_t) (s[0] & 0x07) << 18)
              | ((uint32_t) (s[1] & 0x3f) << 12)
              | ((uint32_t) (s[2] & 0x3f) << 6) | (s[3] & 0x3f);
    }
    return (size_t) r;
}

/* NFC of s[0..n), appended to the output buffer. */
static int
nfc_segment(const uint8_t *s, size_t n, cps_t *d, char **o, size_t *on,
    size_t *ocap)
{
    const uint32_t  *dp;
    uint32_t         c, k, sidx, t, cc, last_cc, p;
    size_t           i, j, w, starter;
    char             u8[4];
    int              have_starter;

    /* decompose */
    d->n = 0;
    for (i = 0; i < n; ) {
        i += dec1(s + i, n - i, &c);
        if (c >= S_BASE && c < S_BASE + S_COUNT) {
            sidx = c - S_BASE;
            t = sidx % T_COUNT;
            if (cps_push(d, L_BASE + sidx / N_COUNT) < 0
                || cps_push(d, V_BASE + (sidx % N_COUNT) / T_COUNT) < 0
                || (t && cps_push(d, T_BASE + t) < 0))
            {
                return -ENOMEM;
            }
            continue;
        }
        dp = (c & RAW_BYTE) ? NULL : decomp(c, &k);
        if (dp == NULL) {
            if (cps_push(d, c) < 0) {
                return -ENOMEM;
            }
            continue;
        }
        for (j = 0; j < k; j++) {
            if (cps_push(d, dp[j]) < 0) {
                return -ENOMEM;
            }
        }
    }

    /* canonical order: stable insertion sort inside runs of class > 0 */
    for (i = 1; i < d->n; i++) {
        c = d->cp[i];
        cc = ccc(c);
        if (cc == 0) {
            continue;
        }
        for (j = i; j > 0 && ccc(d->cp[j - 1]) > cc; j--) {
            d->cp[j] = d->cp[j - 1];
        }
        d->cp[j] = c;
    }

    /* compose in place: w is the write position */
    have_starter = 0;
    starter = 0;
    last_cc = 0;
    w = 0;
    for (i = 0; i < d->n; i++) {
        c = d->cp[i];
        cc = ccc(c);
        if (have_starter && !(c & RAW_BYTE)
            && (w == starter + 1 || (last_cc != 0 && last_cc < cc)))
        {
            p = compose(d->cp[starter], c);
            if (p != 0) {
                d->cp[starter] = p;
                continue;
            }
        }
        if (cc == 0) {
            have_starter = !(c & RAW_BYTE);
            starter = w;
        }
        last_cc = cc;
        d->cp[w++] = c;
    }

    for (i = 0; i < w; i++) {
        c = d->cp[i];
        if (c & RAW_BYTE) {
            u8[0] = (char) (c & 0xff);
            k = 1;
        } else {
            k = (uint32_t) llm_utf8_put(u8, c);
        }
        if (out_add(o, on, ocap, u8, k) < 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

/*
 * NFC of text[0..len).  Returns 0 with *out NULL when the text is NFC as
 * it is (nothing to free), 1 with *out (malloc'd, *out_len bytes) when it
 * changed, or -ENOMEM.
 */
int
llm_nfc(const char *text, size_t len, char **out, size_t *out_len)
{
    const uint8_t  *s = (const uint8_t *) text;
    char           *o = NULL;
    size_t          on = 0, ocap = 0, i, l, last_safe, copied, q;
    uint32_t        c;
    cps_t           d = { 0 };
    int             rc = 0, any = 0;

    *out = NULL;
    *out_len = 0;
    if (llm_ucd_init() < 0) {
        return 0;
    }

    copied = 0;
    last_safe = 0;
    for (i = 0; i < len; ) {
        if (s[i] < 0x80) {
            last_safe = i++;            /* ASCII: NFC leaves it alone */
            continue;
        }
        l = dec1(s + i, len - i, &c);
        if ((c & RAW_BYTE) || !(llm_ucd_flags(c) & LLM_UCD_NFC)) {
            last_safe = i;
            i += l;
            continue;
        }
        /* a run of characters NFC may change, with the starter before */
        for (q = i + l; q < len; q += l) {
            l = dec1(s + q, len - q, &c);
            if ((c & RAW_BYTE) || !(llm_ucd_flags(c) & LLM_UCD_NFC)) {
                break;
            }
        }
        if (last_safe < copied) {
            last_safe = copied;
        }
        if (out_add(&o, &on, &ocap, s + copied, last_safe - copied) < 0
            || nfc_segment(s + last_safe, q - last_safe, &d, &o, &on,
                           &ocap) < 0)
        {
            rc = -ENOMEM;
            goto done;
        }
        any = 1;
        copied = q;
        last_safe = q;
        i = q;
    }
    if (!any) {
        goto done;
    }
    if (out_add(&o, &on, &ocap, s + copied, len - copied) < 0) {
        rc = -ENOMEM;
        goto done;
    }
    if (on == len && memcmp(o, text, len) == 0) {
        goto done;                      /* it was NFC after all */
    }
    *out = o;
    *out_len = on;
    o = NULL;
    rc = 1;

done:
    free(o);
    free(d.cp);
    return rc;
}
