/*
 * Scripted weights (mkmodel_script.h).
 *
 * Shapes: E the residual width, half = E / 2; D the head width, R the
 * rotated dims of a head (pairs i and i + R/2, NEOX), KV = n_head_kv * D.
 * A chain token's slot s < min(half, KV): its embedding is 1 at s; layer
 * 0's values are the normalized residual's first KV dims (v[s] = 1 for
 * the token at s), and its output writes kv head s / D's dim s % D (read
 * by the first query head of that group) to residual dim half + s.  The
 * head's row of a token y is 1 at the slot of each token y follows and at
 * half + the slot of each token two before y: at each step of the chain
 * its successor scores 2 (times the final norm's scale), anything else at
 * most 1, which create() checks.
 *
 * Attention: queries A at the first n_pairs pairs (A, 0), keys A
 * (cos t_p, sin t_p) with t_p the pair's angle per position: after RoPE
 * q.k = A^2 sum_p cos((i - j - 1) t_p), largest at j = i - 1.  With
 * pairs of angles 1 and below that are not commensurate the next best
 * distance is far below it (gpt-oss, 2 pairs: by at least 1% of the
 * peak within 400 positions; glm4moe, 3 pairs: 5%), and the peak is made
 * large (a score of thousands) so that the softmax is one-hot.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "mkmodel_script.h"

struct llm_mk_script_s {
    const llm_mkmodel_params_t *p;
    int32_t    *slot;           /* per token id: its slot or -1 */
    uint32_t    n_slots;
    uint32_t    half;
    uint8_t    *after;          /* [n_vocab][n_slots]: y follows slot */
    uint8_t    *after2;         /* [n_vocab][n_slots]: y two after slot */
    uint32_t    n_pairs;
    float       theta[4];
    float       bias;           /* the q/k bias amplitude */
    float       qk_norm;        /* glm4moe: the q/k norm weights */
};

void
llm_mk_script_free(llm_mk_script_t *s)
{
    if (s != NULL) {
        free(s->slot);
        free(s->after);
        free(s->after2);
        free(s);
    }
}

/* Each step's successor scores 2, nothing else as much. */
static int
mk_script_check(const llm_mk_script_t *s, char *err, size_t errlen)
{
    const int32_t *id = s->p->script;
    uint32_t       ns = s->n_slots;

    for (uint32_t i = 1; i + 1 < s->p->n_script; i++) {
        uint32_t a = (uint32_t) s->slot[id[i]], b = (uint32_t) s->slot[id[i - 1]];

        for (uint32_t y = 0; y < s->p->n_vocab; y++) {
            int sc = s->after[(size_t) y * ns + a]
                     + s->after2[(size_t) y * ns + b];

            if ((int32_t) y != id[i + 1] && sc >= 2) {
                llm_err(err, errlen, "--script: step %u (tokens %d %d) "
                    "leads to %d and to %u: the chain needs another "
                    "token there", i, id[i - 1], id[i], id[i + 1], y);
                return -EINVAL;
            }
        }
    }
    return 0;
}

int
llm_mk_script_create(llm_mk_script_t **out, const llm_mkmodel_params_t *p,
    char *err, size_t errlen)
{
    llm_mk_script_t *s;
    uint32_t         kv = p->n_head_kv * p->head_dim, cap;
    int              glm = strcmp(p->arch, "glm4moe") == 0;

    *out = NULL;
    if (!glm && strcmp(p->arch, "gpt-oss") != 0) {
        llm_err(err, errlen, "--script: gpt-oss or glm4moe (their q/k "
            "biases carry the attention), not %s", p->arch);
        return -EINVAL;
    }
    if (p->n_script < 3) {
        llm_err(err, errlen, "--script: two prompt tokens and at least one "
            "answer token");
        return -EINVAL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        goto nomem;
    }
    s->p = p;
    s->half = p->n_embd / 2;
    cap = s->half < kv ? s->half : kv;
    s->slot = malloc(p->n_vocab * sizeof(*s->slot));
    if (s->slot == NULL) {
        goto nomem;
    }
    memset(s->slot, 0xff, p->n_vocab * sizeof(*s->slot));
    for (uint32_t i = 0; i < p->n_script; i++) {
        int32_t t = p->script[i];

        if (t < 0 || (uint32_t) t >= p->n_vocab) {
            llm_err(err, errlen, "--script: token %d is not in the "
                "vocabulary of %u", t, p->n_vocab);
            llm_mk_script_free(s);
            return -EINVAL;
        }
        if (s->slot[t] < 0) {
            if (s->n_slots == cap) {
                llm_err(err, errlen, "--script: more than %u distinct "
                    "tokens (embd / 2 and heads-kv * head-dim bound it)",
                    cap);
                llm_mk_script_free(s);
                return -EINVAL;
            }
            s->slot[t] = (int32_t) s->n_slots++;
        }
    }
    s->after = calloc((size_t) p->n_vocab * s->n_slots, 1);
    s->after2 = calloc((size_t) p->n_vocab * s->n_slots, 1);
    if (s->after == NULL || s->after2 == NULL) {
        goto nomem;
    }
    for (uint32_t i = 1; i + 1 < p->n_script; i++) {
        size_t y = (size_t) p->script[i + 1] * s->n_slots;

        s->after[y + (uint32_t) s->slot[p->script[i]]] = 1;
        s->after2[y + (uint32_t) s->slot[p->script[i - 1]]] = 1;
    }
    /* the pairs RoPE turns fastest; YaRN (gpt-oss) leaves those two */
    s->n_pairs = glm ? 3 : 2;
    if (s->n_pairs > p->rope_dim / 2) {
        s->n_pairs = p->rope_dim / 2;
    }
    for (uint32_t k = 0; k < s->n_pairs; k++) {
        s->theta[k] = powf(p->rope_base, -2.0f * (float) k
                                         / (float) p->rope_dim);
    }
    /* a peak score of about 3000 (gpt-oss) or 1000 (glm4moe, normed) */
    s->bias = glm ? 1.0f : sqrtf(3000.0f * sqrtf((float) p->head_dim)
                                 / (float) s->n_pairs);
    s->qk_norm = sqrtf(1000.0f / sqrtf((float) p->head_dim));
    if (mk_script_check(s, err, errlen) != 0) {
        llm_mk_script_free(s);
        return -EINVAL;
    }
    *out = s;
    return 0;

nomem:
    llm_mk_script_free(s);
    llm_err(err, errlen, "--script: out of memory");
    return -ENOMEM;
}

/* Layer 0's attention tensors (suffix after "blk.0."); 1 when set. */
static int
mk_script_attn0(const llm_mk_script_t *s, const char *sfx, int64_t row,
    int64_t ne0, float *x)
{
    const llm_mkmodel_params_t *p = s->p;
    uint32_t D = p->head_dim, R2 = p->rope_dim / 2;

    if (strncmp(sfx, "attn_", 5) != 0 || strcmp(sfx, "attn_norm.weight") == 0
        || strcmp(sfx, "attn_sinks.weight") == 0)
    {
        return 0;
    }
    memset(x, 0, (size_t) ne0 * sizeof(float));
    if (strcmp(sfx, "attn_q.weight") == 0 || strcmp(sfx, "attn_k.weight") == 0
        || strcmp(sfx, "attn_v.bias") == 0
        || strcmp(sfx, "attn_output.bias") == 0)
    {
        return 1;
    }
    if (strcmp(sfx, "attn_q.bias") == 0) {
        for (uint32_t h = 0; h < p->n_head; h++) {
            for (uint32_t k = 0; k < s->n_pairs; k++) {
                x[h * D + k] = s->bias;
            }
        }
        return 1;
    }
    if (strcmp(sfx, "attn_k.bias") == 0) {
        for (uint32_t g = 0; g < p->n_head_kv; g++) {
            for (uint32_t k = 0; k < s->n_pairs; k++) {
                x[g * D + k] = s->bias * cosf(s->theta[k]);
                x[g * D + k + R2] = s->bias * sinf(s->theta[k]);
            }
        }
        return 1;
    }
    if (strcmp(sfx, "attn_q_norm.weight") == 0
        || strcmp(sfx, "attn_k_norm.weight") == 0)
    {
        for (int64_t i = 0; i < ne0; i++) {
            x[i] = s->qk_norm;
        }
        return 1;
    }
    if (strcmp(sfx, "attn_v.weight") == 0) {
        /* the attention norm scales a one-hot residual by sqrt(E) */
        if (row < s->n_slots) {
            x[row] = 1.0f / sqrtf((float) p->n_embd);
        }
        return 1;
    }
    if (strcmp(sfx, "attn_output.weight") == 0) {
        if (row >= s->half && row - s->half < s->n_slots) {
            uint32_t sl = (uint32_t) (row - s->half);
            uint32_t head = sl / D * (p->n_head / p->n_head_kv);

            x[head * D + sl % D] = 1.0f;
        }
        return 1;
    }
    return 0;       /* x was overwritten: the caller fills it */
}

int
llm_mk_script_row(const llm_mk_script_t *s, const char *name, int64_t row,
    int64_t ne0, float *x)
{
    const char  *sfx;
    char        *end;
    unsigned long layer;

    if (strcmp(name, "token_embd.weight") == 0) {
        memset(x, 0, (size_t) ne0 * sizeof(float));
        if (s->slot[row] >= 0) {
            x[s->slot[row]] = 1.0f;
        }
        return 1;
    }
    if (strcmp(name, "output.weight") == 0) {
        memset(x, 0, (size_t) ne0 * sizeof(float));
        for (uint32_t k = 0; k < s->n_slots; k++) {
            x[k] = s->after[(size_t) row * s->n_slots + k];
            x[s->half + k] = s->after2[(size_t) row * s->n_slots + k];
        }
        return 1;
    }
    if (strcmp(name, "output_norm.weight") == 0) {
        for (int64_t i = 0; i < ne0; i++) {
            x[i] = 1.0f;
        }
        return 1;
    }
    if (strncmp(name, "blk.", 4) != 0) {
        return 0;
    }
    layer = strtoul(name + 4, &end, 10);
    if (*end != '.' || layer >= s->p->n_layer) {
        return 0;               /* NextN blocks are not run */
    }
    sfx = end + 1;
    if (strcmp(sfx, "attn_norm.weight") == 0) {
        for (int64_t i = 0; i < ne0; i++) {
            x[i] = 1.0f;
        }
        return 1;
    }
    if (layer == 0 && mk_script_attn0(s, sfx, row, ne0, x)) {
        return 1;
    }
    /* nothing else writes to the residual */
    if (strcmp(sfx, "attn_output.weight") == 0
        || strcmp(sfx, "attn_output.bias") == 0
        || strcmp(sfx, "ffn_down.weight") == 0
        || strcmp(sfx, "ffn_down_exps.weight") == 0
        || strcmp(sfx, "ffn_down_exps.bias") == 0
        || strcmp(sfx, "ffn_down_shexp.weight") == 0)
    {
        memset(x, 0, (size_t) ne0 * sizeof(float));
        return 1;
    }
    return 0;
}
