/*
 * The scale fitting searches of ggml's quantizers (see quantize_rows.h).
 *
 * Each function takes a group of n floats and returns the scale (and the
 * min) that its search settles on, with the levels in L.  They are the
 * float computations of ggml-quants.c step for step: every sum is a float
 * accumulated in index order, products are evaluated left to right
 * ((w * x) * l, not w * (x * l)), rounding is llm_nearest_int (ties to
 * even, as ggml's nearest_int), and nothing is fused (the build keeps
 * -ffp-contract=off where the target has FMA).
 */

#include <math.h>
#include <string.h>

#include "kernels/kernels_common.h"
#include "quantize_rows.h"

#define QF_GROUP_MAX_EPS  1e-15f

static inline int
qf_clamp(int v, int lo, int hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}


/* The weight of element i: qw[i], or x^2 when there are none. */
static inline float
qf_w(const float *qw, const float *x, int i)
{
    return qw != NULL ? qw[i] : x[i] * x[i];
}


float
llm_qf_qx(int n, int nmax, const float *x, int8_t *L, const float *qw)
{
    float  max = 0, amax = 0, iscale, sumlx, suml2, scale, best, w;
    int    i, is, l;

    for (i = 0; i < n; i++) {
        float  ax = fabsf(x[i]);

        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < QF_GROUP_MAX_EPS) {
        memset(L, 0, n);
        return 0.f;
    }

    iscale = -nmax / max;
    sumlx = suml2 = 0;
    for (i = 0; i < n; i++) {
        l = qf_clamp(llm_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t) (l + nmax);
        w = qf_w(qw, x, i);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    scale = suml2 ? sumlx / suml2 : 0.0f;
    best = scale * sumlx;

    for (is = -9; is <= 9; is++) {
        if (is == 0) {
            continue;
        }
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (i = 0; i < n; i++) {
            l = qf_clamp(llm_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            w = qf_w(qw, x, i);
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (i = 0; i < n; i++) {
                l = qf_clamp(llm_nearest_int(iscale * x[i]), -nmax,
                             nmax - 1);
                L[i] = (int8_t) (l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}


float
llm_qf_q3(int n, int nmax, const float *x, int8_t *L)
{
    float  max = 0, amax = 0, iscale, sumlx = 0, suml2 = 0, w;
    int    i, itry, l;

    for (i = 0; i < n; i++) {
        float  ax = fabsf(x[i]);

        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < QF_GROUP_MAX_EPS) {
        memset(L, 0, n);
        return 0.f;
    }

    iscale = -nmax / max;
    for (i = 0; i < n; i++) {
        l = qf_clamp(llm_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t) l;
        w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }

    /* move one level at a time while the fit improves */
    for (itry = 0; itry < 5; itry++) {
        int  n_changed = 0;

        for (i = 0; i < n; i++) {
            float  slx, sl2;
            int    new_l;

            w = x[i] * x[i];
            slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) {
                continue;
            }
            sl2 = suml2 - w * L[i] * L[i];
            new_l = qf_clamp(llm_nearest_int(x[i] * sl2 / slx), -nmax,
                             nmax - 1);
            if (new_l == L[i]) {
                continue;
            }
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t) new_l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (n_changed == 0) {
            break;
        }
    }

    for (i = 0; i < n; i++) {
        L[i] = (int8_t) (L[i] + nmax);
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}


/*
 * Common to qkx2 and qkx3: they differ in the weights (qkx3 takes NULL
 * for x^2), in the empty-range test and in how a level is clamped inside
 * the search.  v3 selects qkx3's behaviour.
 */
static float
qf_qkx(int n, int nmax, const float *x, const float *weights, uint8_t *L,
    float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
    int use_mad, int v3)
{
    float  min = x[0], max = x[0], sum_w, sum_x, iscale, scale, best;
    float  w, diff;
    int    i, is, l;

    sum_w = weights != NULL ? weights[0] : x[0] * x[0];
    sum_x = sum_w * x[0];
    for (i = 1; i < n; i++) {
        if (x[i] < min) {
            min = x[i];
        }
        if (x[i] > max) {
            max = x[i];
        }
        w = weights != NULL ? weights[i] : x[i] * x[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) {
        min = 0;
    }
    if (v3 ? max <= min : max == min) {
        memset(L, 0, n);
        *the_min = -min;
        return 0.f;
    }

    iscale = nmax / (max - min);
    scale = 1 / iscale;
    best = 0;
    for (i = 0; i < n; i++) {
        l = llm_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t) qf_clamp(l, 0, nmax);
        diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        w = weights != NULL ? weights[i] : x[i] * x[i];
        best += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }

    for (is = 0; is <= nstep; is++) {
        float  sum_l = 0, sum_l2 = 0, sum_xl = 0, D, this_scale, this_min;
        float  cur = 0;

        iscale = (rmin + rdelta * is + nmax) / (max - min);
        for (i = 0; i < n; i++) {
            if (v3) {
                /* the min found so far can sit near max: v may be huge */
                float  v = iscale * (x[i] - min);

                l = v > 0 ? llm_nearest_int(v < nmax ? v : (float) nmax)
                          : 0;
            } else {
                l = qf_clamp(llm_nearest_int(iscale * (x[i] - min)), 0,
                             nmax);
            }
            Laux[i] = (uint8_t) l;
            w = weights != NULL ? weights[i] : x[i] * x[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) {
            continue;
        }
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        for (i = 0; i < n; i++) {
            diff = this_scale * Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            w = weights != NULL ? weights[i] : x[i] * x[i];
            cur += w * diff;
        }
        if (cur < best) {
            memcpy(L, Laux, n);
            best = cur;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}


float
llm_qf_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L,
    float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
    int use_mad)
{
    return qf_qkx(n, nmax, x, w, L, the_min, Laux, rmin, rdelta, nstep,
                  use_mad, 0);
}


float
llm_qf_qkx3(int n, int nmax, const float *x, const float *w, uint8_t *L,
    float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
    int use_mad)
{
    return qf_qkx(n, nmax, x, w, L, the_min, Laux, rmin, rdelta, nstep,
                  use_mad, 1);
}


float
llm_qf_qp(int n, int nmax, const float *x, uint8_t *L, const float *qw)
{
    float  max = 0, iscale, scale, best = 0, sumlx = 0, suml2 = 0, diff, w;
    int    i, is, l, itry;

    for (i = 0; i < n; i++) {
        max = max > x[i] ? max : x[i];
    }
    if (max < QF_GROUP_MAX_EPS) {
        memset(L, 0, n);
        return 0.f;
    }

    iscale = nmax / max;
    for (i = 0; i < n; i++) {
        L[i] = (uint8_t) llm_nearest_int(iscale * x[i]);
    }
    scale = 1 / iscale;
    for (i = 0; i < n; i++) {
        diff = x[i] - scale * L[i];
        best += qw[i] * diff * diff;
    }

    /* the best of 9 scales around nmax / max, by weighted error */
    for (is = -4; is <= 4; is++) {
        float  iscale_is, scale_is, mse = 0;

        if (is == 0) {
            continue;
        }
        iscale_is = (0.1f * is + nmax) / max;
        scale_is = 1 / iscale_is;
        for (i = 0; i < n; i++) {
            l = llm_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = iscale_is;
        }
    }

    for (i = 0; i < n; i++) {
        l = llm_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t) l;
        w = qw[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }

    for (itry = 0; itry < 5; itry++) {
        int  n_changed = 0;

        for (i = 0; i < n; i++) {
            float  slx, sl2;
            int    new_l;

            w = qw[i];
            slx = sumlx - w * x[i] * L[i];
            sl2 = suml2 - w * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0)) {
                continue;
            }
            new_l = llm_nearest_int(x[i] * sl2 / slx);
            new_l = new_l < nmax ? new_l : nmax;
            if (new_l == L[i]) {
                continue;
            }
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t) new_l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (n_changed == 0) {
            break;
        }
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}


int
llm_qf_best_index_int8(int n, const int8_t *val, float x)
{
    float  x2 = x + x;
    int    idx = 0, step, j;

    /* level j wins once x reaches the midpoint of val[j-1] and val[j];
     * doubling x keeps both sides exact */
    for (step = n >> 1; step > 0; step >>= 1) {
        j = idx + step;
        idx = x2 >= (float) (val[j - 1] + val[j]) ? j : idx;
    }
    return idx;
}
