/* Block scoring for the Placer's fused profile, vectorized (see _placer.pyx, Placer._scan).
 *
 * The profile NodeResourcesFit (LeastAllocated or MostAllocated) and/or
 * BalancedAllocation on (cpu, memory), scored for blocks of ESCHED_FB_BLOCK contiguous
 * nodes from structure-of-arrays double columns: one pass per requested resource for
 * the fit check, one pass for the scores, no branch that depends on the data, so the
 * compiler turns each pass into AVX2 / AVX-512 code. The same C body is compiled for
 * x86-64 baseline, AVX2 and AVX-512 (target attributes) and picked once at import by
 * CPU feature (esched_fblock_init), so the build needs no -march flag and runs on any
 * x86-64; other architectures get the baseline body. The bounded walk's floored pass
 * (esched_fbound_body) has AVX2 and AVX-512 bodies written with intrinsics instead
 * (_fbound_lanes.h): GCC does not vectorize its pre-check and bound as one loop. The
 * inter-pod and topology spread filters' check over a block (esched_topology: a gather
 * per node and check) is compiled per body alike.
 *
 * Feasibility here is _feasibility.pxd's alive / cordon / resource rule in vector form
 * (labels and taints are left to the caller, constraints_ok); the scores are the
 * LeastAllocated / MostAllocated / BalancedAllocation kernels of core/scoring/ in
 * double arithmetic, exact as below (tests/core/test_placer.py compares them).
 *
 * Exactness (kube-scheduler's integer scores, bit for bit). The caller uses this only
 * when every capacity is below 2**46 (and the class's requests too); then, in doubles:
 *   - every integer operand below 2**53 is exact, and so are sums and the products
 *     q * cap (q <= 100) compared below;
 *   - Fit: score = floor(x / cap) with x = (cap - req) * 100 (LeastAllocated) or
 *     min(req, cap) * 100 (MostAllocated). q = trunc(x * (1 / cap)) is within one of
 *     it (relative error ~2**-52, q <= 100), and one exact multiply-compare each way
 *     makes it exact. A request above 2**53 is rounded, but stays above cap.
 *   - the weighted mean floor(ns / ws) likewise, with ns, ws small integers;
 *   - BalancedAllocation: the fractions are the IEEE quotients used / cap (a true
 *     division, as kube's float64(requested) / float64(allocatable)), clamped at 1,
 *     std = |f0 - f1| / 2 and the score trunc((1 - std) * 100): the same operations
 *     in the same order, so the same doubles. No FMA contraction (the whole
 *     extension builds with -ffp-contract=off, and the AVX2 body has no FMA target).
 *   - a zero capacity makes kube skip that resource; those nodes (rare) are left to the
 *     caller's scalar path (ESCHED_FB_SPECIAL).
 */
#ifndef ESCHED_FUSED_BLOCK_H
#define ESCHED_FUSED_BLOCK_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>   /* the bounded walk's lanes (_fbound_lanes.h) */
#endif

#define ESCHED_FB_BLOCK 128       /* nodes per block (== 1 << BLOCK_SHIFT, _placer.pxd) */
#define ESCHED_FB_MAX_NEED 16     /* requested columns checked here */
#define ESCHED_FB_DEAD (-2)       /* node not alive */
#define ESCHED_FB_INFEASIBLE (-1) /* does not fit */
#define ESCHED_FB_SPECIAL (-3)    /* alive, fits, a zero cpu or memory capacity: score it in C */

typedef struct {
    /* Per node, double columns of one [row, stride] array (row pointers). */
    const double *u0, *u1;        /* used (requests) cpu, memory: BalancedAllocation */
    const double *z0, *z1;        /* used non-zero cpu, memory: Fit */
    const double *a0, *a1;        /* allocatable cpu, memory */
    const double *i0, *i1;        /* 1 / allocatable (0 when 0) */
    const double *pen;            /* 0 schedulable, 1 unschedulable (cordoned), 2 dead */
    const double *need_used[ESCHED_FB_MAX_NEED];   /* used column of each requested resource */
    const double *need_alloc[ESCHED_FB_MAX_NEED];  /* its allocatable column */
    double need_val[ESCHED_FB_MAX_NEED];           /* the class's request */
    int n_need;
    double pen_ok;                /* pen <= pen_ok fits: 0, or 1 if it tolerates cordons */
    /* Per node, the compact float rows the bounded form walks (esched_fbound_body):
     * each requested resource's free amount (allocatable - used, rounded down), the
     * free non-zero fractions (a - z) / a, the used fractions u / a, the reciprocals
     * 1 / a (cpu, memory) and pen. */
    const float *cfree[ESCHED_FB_MAX_NEED];
    float cneed_lo[ESCHED_FB_MAX_NEED], cneed_hi[ESCHED_FB_MAX_NEED];  /* need_val rounded down, up */
    const float *cg0, *cg1, *ch0, *ch1, *ci0, *ci1, *cpen;
    /* The class and the profile. */
    double fr0, fr1;              /* Fit: the pod's non-zero cpu, memory */
    double br0, br1;              /* BalancedAllocation: the pod's cpu, memory requests */
    double rw0, rw1;              /* Fit: resource weights */
    double ws, inv_ws;            /* Fit: rw0 + rw1, and 1 / that */
    double w_fit, w_bal;          /* plugin weights */
    int do_fit, least, do_bal;
    int floors;                   /* the bound may floor its scores (small weights: exact
                                   * integer sums in float, esched_fbound_body) */
} esched_fblock;

/* The kernels never trap (default MXCSR) and a NaN or inf from a zero capacity is
 * discarded: let the vectorizer select between computed values (no effect on any value;
 * with trapping math GCC refuses to if-convert the comparisons below). */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
/* Python's CFLAGS carry -fwrapv, under which GCC 12 turns the fit check's loop over a
 * column (a pointer out of need_used[]) into gathers; no index here can overflow. */
#pragma GCC optimize("no-wrapv")

/* What the walk over a block needs instead of its nodes: the best score, how many
 * nodes have it, how many were feasible and visited (alive). Exact when the block has
 * no SPECIAL entry (the caller recounts after finishing those). */
typedef struct {
    int32_t max;            /* -1 when none is feasible */
    int32_t n_max;          /* entries equal to max (0 when max is -1) */
    int32_t n_feasible;
    int32_t n_visited;
} esched_fbsum;

/* floor(x / d) for integers 0 <= x < 2**53, 0 < d < 2**46, quotient <= 2**7, given 1/d.
 * (A zero d gives garbage, replaced by the caller; int32 conversions vectorize.) */
#define ESCHED_FB_FLOORDIV(x, d, inv, q) do {                 \
        (q) = (double)(int32_t)((x) * (inv)); /* >= 0: floor */ \
        (q) -= ((q) * (d) > (x)) ? 1.0 : 0.0;                   \
        (q) += (((q) + 1.0) * (d) <= (x)) ? 1.0 : 0.0;          \
    } while (0)

/* The fit check of nodes n0 .. n0+m: bad[i] 1.0 where node n0+i is cordoned or
 * penalized past pen_ok, or a needed resource does not fit; else 0.0. The one home of
 * the exact rule (the bounded form's float pre-check only picks the nodes it is run on;
 * always inlined: each body vectorizes it). */
static inline __attribute__((always_inline)) void
esched_fblock_bad(const esched_fblock *k, Py_ssize_t n0, Py_ssize_t m, double *bad)
{
    const double pen_ok = k->pen_ok;
    const double *pen = k->pen + n0;
    for (Py_ssize_t i = 0; i < m; i++)
        bad[i] = pen[i] > pen_ok ? 1.0 : 0.0;
    for (int j = 0; j < k->n_need; j++) {
        /* (indexed from n0: with u + n0 GCC 12 vectorizes this as a gather) */
        const double *u = k->need_used[j], *a = k->need_alloc[j];
        const double need = k->need_val[j];
        for (Py_ssize_t i = n0; i < n0 + m; i++)
            bad[i - n0] = (u[i] + need > a[i]) ? 1.0 : bad[i - n0];
    }
}

static inline __attribute__((always_inline)) void
esched_fblock_body(const esched_fblock *k, Py_ssize_t n0, Py_ssize_t m, int32_t *out,
                   esched_fbsum *sum)
{
    double bad[ESCHED_FB_BLOCK];
    const double *pen = k->pen + n0;
    esched_fblock_bad(k, n0, m, bad);
    const double *a0 = k->a0 + n0, *a1 = k->a1 + n0, *i0 = k->i0 + n0,
                 *i1 = k->i1 + n0, *u0 = k->u0 + n0, *u1 = k->u1 + n0,
                 *z0 = k->z0 + n0, *z1 = k->z1 + n0;
    const double fr0 = k->fr0, fr1 = k->fr1, br0 = k->br0, br1 = k->br1;
    const double rw0 = k->rw0, rw1 = k->rw1, ws = k->ws, inv_ws = k->inv_ws;
    const double w_fit = k->w_fit, w_bal = k->w_bal;
    const int do_fit = k->do_fit, least = k->least, do_bal = k->do_bal;
    double tot[ESCHED_FB_BLOCK];
    /* One simple loop per part: each vectorizes on its own. */
    if (do_fit && least) {
        for (Py_ssize_t i = 0; i < m; i++) {
            double c0 = a0[i], c1 = a1[i], r0 = z0[i] + fr0, r1 = z1[i] + fr1, q0, q1, q;
            double d0 = c0 - r0, d1 = c1 - r1;     /* exact; 0 when the request exceeds */
            double x0 = (d0 > 0.0 ? d0 : 0.0) * 100.0, x1 = (d1 > 0.0 ? d1 : 0.0) * 100.0;
            ESCHED_FB_FLOORDIV(x0, c0, i0[i], q0);
            ESCHED_FB_FLOORDIV(x1, c1, i1[i], q1);
            double ns = q0 * rw0 + q1 * rw1;
            ESCHED_FB_FLOORDIV(ns, ws, inv_ws, q);
            tot[i] = w_fit * q;
        }
    } else if (do_fit) {
        for (Py_ssize_t i = 0; i < m; i++) {
            double c0 = a0[i], c1 = a1[i], r0 = z0[i] + fr0, r1 = z1[i] + fr1, q0, q1, q;
            double x0 = ((r0 < c0) ? r0 : c0) * 100.0;
            double x1 = ((r1 < c1) ? r1 : c1) * 100.0;
            ESCHED_FB_FLOORDIV(x0, c0, i0[i], q0);
            ESCHED_FB_FLOORDIV(x1, c1, i1[i], q1);
            double ns = q0 * rw0 + q1 * rw1;
            ESCHED_FB_FLOORDIV(ns, ws, inv_ws, q);
            tot[i] = w_fit * q;
        }
    } else {
        for (Py_ssize_t i = 0; i < m; i++)
            tot[i] = 0.0;
    }
    if (do_bal) {
        /* The fractions by reciprocal (a multiply, not a division); it may differ from
         * the IEEE quotient in the last bit, which moves the truncated score only when
         * (1 - std) * 100 lies within ~1e-13 of an integer. Those nodes (std == 0, nice
         * ratios; rare) are redone with the true quotients, so the score is kube's. */
        double ys[ESCHED_FB_BLOCK];
        int64_t near = 0;   /* an OR, not a double sum: that would be reduced in order */
        for (Py_ssize_t i = 0; i < m; i++) {
            double f0 = (u0[i] + br0) * i0[i], f1 = (u1[i] + br1) * i1[i];
            f0 = f0 > 1.0 ? 1.0 : f0;
            f1 = f1 > 1.0 ? 1.0 : f1;
            double y = (1.0 - fabs((f0 - f1) / 2.0)) * 100.0;
            double t = (double)(int32_t)y;
            near |= (y - t < 1e-9) | (y - t > 1.0 - 1e-9);
            ys[i] = t;
        }
        if (near) {
            for (Py_ssize_t i = 0; i < m; i++) {
                double f0 = (u0[i] + br0) / a0[i], f1 = (u1[i] + br1) / a1[i];
                f0 = f0 > 1.0 ? 1.0 : f0;
                f1 = f1 > 1.0 ? 1.0 : f1;
                ys[i] = (double)(int32_t)((1.0 - fabs((f0 - f1) / 2.0)) * 100.0);
            }
        }
        for (Py_ssize_t i = 0; i < m; i++)
            tot[i] += w_bal * ys[i];
    }
    int32_t mx = -1, n_feas = 0, n_vis = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        /* NaN or inf (a zero capacity) only where the result is replaced below */
        int32_t s = (int32_t)(tot[i] < 1e9 ? tot[i] : 0.0);
        s = ((a0[i] == 0.0) | (a1[i] == 0.0)) ? ESCHED_FB_SPECIAL : s;
        s = bad[i] != 0.0 ? ESCHED_FB_INFEASIBLE : s;
        s = pen[i] >= 2.0 ? ESCHED_FB_DEAD : s;
        out[i] = s;
        mx = s > mx ? s : mx;
        n_feas += s >= 0;
        n_vis += s >= ESCHED_FB_INFEASIBLE;
    }
    int32_t n_max = 0;
    for (Py_ssize_t i = 0; i < m; i++)
        n_max += out[i] == mx;
    sum->max = mx;
    sum->n_max = mx >= 0 ? n_max : 0;
    sum->n_feasible = n_feas;
    sum->n_visited = n_vis;
}

/* The block summary of scores s[0:m] (what the kernel's last loop computes). */
static inline __attribute__((always_inline)) void
esched_summarize_body(const int32_t *s, Py_ssize_t m, esched_fbsum *sum)
{
    int32_t mx = -1, n_feas = 0, n_vis = 0, n_max = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        int32_t x = s[i];
        mx = x > mx ? x : mx;
        n_feas += x >= 0;
        n_vis += x >= ESCHED_FB_INFEASIBLE;
    }
    for (Py_ssize_t i = 0; i < m; i++)
        n_max += s[i] == mx;
    sum->max = mx;
    sum->n_max = mx >= 0 ? n_max : 0;
    sum->n_feasible = n_feas;
    sum->n_visited = n_vis;
}

/* The kernel's results for a walk that already holds a best score `best` (>= 0),
 * reading the compact float rows (7 + n_need floats a node, against the kernel's 9 +
 * 2 * n_need doubles) and the double columns only for the nodes that may matter.
 *   - The fit pre-check: a node whose rounded-down free amount f of a resource is
 *     below the request even after one float step up (f + |f| * 2**-22 > every value
 *     that rounds down to f) surely does not fit (tested as f below a threshold,
 *     esched_fb_refuse_below); one whose f covers the request surely fits; between
 *     the two (within a float's rounding) it is ambiguous.
 *   - An upper bound of each node's total in real arithmetic (the scores without their
 *     floors and truncations: w * floor(x) <= w * x) from the fractions and
 *     reciprocals, off by less than ESCHED_FB_COMPACT_SLACK (float rounding, ~3e-7
 *     of each plugin's 100).
 *   - With the profile's weights small enough (k->floors, the default profile's case):
 *     each score taken with its floor from a little below and a little above its float
 *     estimate, which brackets kube's integer total. Where the two totals agree (all
 *     but the scores within ESCHED_FB_FLOOR_SLACK of an integer step) that is the
 *     node's exact total, with no double read: a node that ties with `best` (the
 *     nodes LeastAllocated evens out, ~6% of those visited) then needs no candidate
 *     gather.
 * The candidates (not surely infeasible, and a bound that reaches `best` without an
 * exact total, or an ambiguous fit) are checked and scored exactly, by the kernel over
 * their gathered double columns. The others are dead, infeasible (-1), feasible with
 * their exact total, or feasible with a total below `best`, left as 0: they can be
 * neither the best nor tie with it, so the counts, the cut (esched_cut) and the
 * summary's max and ties with `best` are the kernel's. Same
 * preconditions as the kernel, and no zero cpu or memory capacity in the block (no
 * ESCHED_FB_SPECIAL entry). Returns how many nodes it scored exactly (m when more than
 * half were candidates: then the kernel ran over the whole block). */
#define ESCHED_FB_COMPACT_SLACK 1e-5   /* relative to the bound's scale, >> its error */
#define ESCHED_FB_FLOAT_STEP (1.0f / 1048576.0f)  /* 2**-20: > 4 float steps, rounded */
#define ESCHED_FB_FLOOR_SLACK 1e-3f   /* on a score's 100 scale, >> its float error */
#define ESCHED_FB_FLOOR_WEIGHT 10000   /* plugin weights up to this: integer sums exact in float */
#define ESCHED_FB_PAD 8
  /* doubles in an AVX-512 vector; a multiple of AVX2's 4 */

/* The pre-check's refusal in one compare: fl < esched_fb_refuse_below(lo) implies
 * lo > fl + |fl| * ESCHED_FB_FLOAT_STEP in float (the test above), for the rounded-down
 * request lo and any rounded-down free amount fl: the threshold is lo scaled 2**-18
 * towards -inf (2**-19 would cover the step and its rounding; a positive lo is at least
 * 1, a request's integer amount, so no subnormal's absolute error matters). A node
 * between the two tests is not refused but is an unsure fit (fl < lo <= the rounded-up
 * request), checked exactly: the results are the same, one compare a node and resource
 * instead of four operations. */
static inline float esched_fb_refuse_below(float lo)
{
    const double r = 1.0 + 1.0 / 262144.0;
    return (float)(lo > 0.0f ? (double)lo / r : (double)lo * r);
}

/* The floored pass over whole vectors of a block (esched_fbound_body's floors loop and
 * its pre-check in one sweep, _fbound_lanes.h): returns how many nodes it did (a multiple
 * of its lanes), their results in out, their candidates' and unsure fits' bits set. */
typedef Py_ssize_t (*esched_fbound_lanes_fn)(const esched_fblock *k, Py_ssize_t n0,
                                             Py_ssize_t m, int32_t *out, uint64_t *bits,
                                             uint64_t *ubits, int32_t best);

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ESCHED_FL_NAME esched_fbound_lanes_avx2
#define ESCHED_FL_LOOP esched_fbound_lanes_loop_avx2
#define ESCHED_FL_ATTR target("avx2")
#define ESCHED_FL_LANES 8
#define VF __m256
#define VM __m256
#define VSET1 _mm256_set1_ps
#define VLOAD _mm256_loadu_ps
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VMIN _mm256_min_ps
#define VMAX _mm256_max_ps
#define VFLOOR _mm256_floor_ps
#define VABS(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (x))
#define VCMP _mm256_cmp_ps
#define VMOR _mm256_or_ps
#define VMAND _mm256_and_ps
#define VMANDN(a, b) _mm256_andnot_ps((b), (a))
#define VSEL(msk, a, b) _mm256_blendv_ps((b), (a), (msk))
#define VSELZ(msk, a) _mm256_and_ps((msk), (a))
#define VBITS(msk) ((uint32_t)_mm256_movemask_ps(msk))
#define VSTORE_I32(p, x) _mm256_storeu_si256((__m256i *)(p), _mm256_cvttps_epi32(x))
#include "_fbound_lanes.h"
#define ESCHED_FL_NAME esched_fbound_lanes_avx512
#define ESCHED_FL_LOOP esched_fbound_lanes_loop_avx512
#define ESCHED_FL_ATTR target("avx512f,avx512dq,avx512vl,avx512bw")
#define ESCHED_FL_LANES 16
#define VF __m512
#define VM __mmask16
#define VSET1 _mm512_set1_ps
#define VLOAD _mm512_loadu_ps
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VMIN _mm512_min_ps
#define VMAX _mm512_max_ps
#define VFLOOR(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define VABS _mm512_abs_ps
#define VCMP _mm512_cmp_ps_mask
#define VMOR(a, b) ((__mmask16)((a) | (b)))
#define VMAND(a, b) ((__mmask16)((a) & (b)))
#define VMANDN(a, b) ((__mmask16)((a) & ~(b)))
#define VSEL(msk, a, b) _mm512_mask_blend_ps((msk), (b), (a))
#define VSELZ(msk, a) _mm512_maskz_mov_ps((msk), (a))
#define VBITS(msk) ((uint32_t)(msk))
#define VSTORE_I32(p, x) _mm512_storeu_si512((void *)(p), _mm512_cvttps_epi32(x))
#include "_fbound_lanes.h"
#endif

static inline __attribute__((always_inline)) Py_ssize_t
esched_fbound_body(const esched_fblock *k, Py_ssize_t n0, Py_ssize_t m, int32_t *out,
                   esched_fbsum *sum, int32_t best, esched_fbound_lanes_fn lanes)
{
    /* The candidates' and the unsure fits' bits, one a node. */
    uint64_t bits[ESCHED_FB_BLOCK / 64] = {0}, ubits[ESCHED_FB_BLOCK / 64] = {0};
    /* The whole vectors of the floored form in one pass (lanes); the rest (the block's
     * remainder, the bound without floors, the baseline body) by the loops below. */
    const Py_ssize_t i0 = (lanes && k->floors) ? lanes(k, n0, m, out, bits, ubits, best) : 0;
    /* In float, 8 nodes to an AVX2 vector (the errors are well inside the slack). */
    float bad[ESCHED_FB_BLOCK], unsure[ESCHED_FB_BLOCK];
    uint8_t cand[ESCHED_FB_BLOCK];
    int32_t pick[ESCHED_FB_BLOCK];
    const float *cpen = k->cpen + n0;
    const float pen_ok = (float)k->pen_ok;
    for (Py_ssize_t i = i0; i < m; i++) {
        bad[i] = cpen[i] > pen_ok ? 1.0f : 0.0f;
        unsure[i] = 0.0f;
    }
    for (int j = 0; j < k->n_need; j++) {
        /* (indexed from n0, as in esched_fblock_bad: no gathers) */
        const float *f = k->cfree[j];
        const float ref = esched_fb_refuse_below(k->cneed_lo[j]), hi = k->cneed_hi[j];
        for (Py_ssize_t i = n0 + i0; i < n0 + m; i++) {
            float fl = f[i];
            bad[i - n0] = (fl < ref) ? 1.0f : bad[i - n0];
            unsure[i - n0] = (hi > fl) ? 1.0f : unsure[i - n0];
        }
    }
    const float *g0 = k->cg0 + n0, *g1 = k->cg1 + n0, *h0 = k->ch0 + n0,
                *h1 = k->ch1 + n0, *ci0 = k->ci0 + n0, *ci1 = k->ci1 + n0;
    const float fr0 = (float)k->fr0, fr1 = (float)k->fr1, br0 = (float)k->br0,
                br1 = (float)k->br1;
    const double fit0d = k->do_fit ? k->w_fit * k->rw0 * k->inv_ws * 100.0 : 0.0;
    const double fit1d = k->do_fit ? k->w_fit * k->rw1 * k->inv_ws * 100.0 : 0.0;
    const double bald = k->do_bal ? k->w_bal * 100.0 : 0.0;
    const float fit0 = (float)fit0d, fit1 = (float)fit1d, bal = (float)bald;
    const float lim = (float)((double)best
                              - ESCHED_FB_COMPACT_SLACK * (1.0 + fit0d + fit1d + bald));
    const float most = k->least ? 0.0f : 1.0f;
    const float top = k->least ? 3.0e38f : 1.0f;   /* MostAllocated counts at most all */
    if (k->floors) {
        /* Each score from above and below with its floor: q = floor(100 x) lies in
         * [floor(100 x' - s), floor(100 x' + s)] when the float estimate x' is within
         * s / 100 of x (s = ESCHED_FB_FLOOR_SLACK, ~30x the float error; the clamps
         * are monotone, so they go after the slack), and the mean and the weighted sum
         * of such integers are exact in float (resource weights <= 100, plugin weights
         * <= ESCHED_FB_FLOOR_WEIGHT). A node whose two totals agree has that exact
         * total, kube's; only one whose upper total reaches `best` while they differ
         * (a score within s of a step: rare) or whose fit is unsure is a candidate. */
        const float s = ESCHED_FB_FLOOR_SLACK;
        /* the resource weights over their sum, each rounded once */
        const float w0 = k->do_fit ? (float)(k->rw0 * k->inv_ws) : 0.0f;
        const float w1 = k->do_fit ? (float)(k->rw1 * k->inv_ws) : 0.0f;
        const float wfit = k->do_fit ? (float)k->w_fit : 0.0f;
        const float wbal = k->do_bal ? (float)k->w_bal : 0.0f;
        const float bestf = (float)best;
        const float top100 = k->least ? 3.0e38f : 100.0f;
        for (Py_ssize_t i = i0; i < m; i++) {
            float d0 = g0[i] - fr0 * ci0[i], d1 = g1[i] - fr1 * ci1[i];
            float e0 = (most != 0.0f ? 1.0f - d0 : d0) * 100.0f;
            float e1 = (most != 0.0f ? 1.0f - d1 : d1) * 100.0f;
            float a0 = e0 - s, b0 = e0 + s, a1 = e1 - s, b1 = e1 + s;
            a0 = a0 > 0.0f ? a0 : 0.0f;
            b0 = b0 > 0.0f ? b0 : 0.0f;
            a1 = a1 > 0.0f ? a1 : 0.0f;
            b1 = b1 > 0.0f ? b1 : 0.0f;
            a0 = floorf(a0 < top100 ? a0 : top100);
            b0 = floorf(b0 < top100 ? b0 : top100);
            a1 = floorf(a1 < top100 ? a1 : top100);
            b1 = floorf(b1 < top100 ? b1 : top100);
            /* (q0 rw0 + q1 rw1) / ws: a rational with denominator ws <= 200, and
             * q0 w0 + q1 w1 within 3e-5 of it (q <= 100, w rounded twice): 1e-4
             * above that floors to its floor (a next integer is >= 1 / 200 away) */
            float qa = floorf(a0 * w0 + a1 * w1 + 1e-4f);
            float qb = floorf(b0 * w0 + b1 * w1 + 1e-4f);
            float f0 = h0[i] + br0 * ci0[i], f1 = h1[i] + br1 * ci1[i];
            f0 = f0 > 1.0f ? 1.0f : f0;
            f1 = f1 > 1.0f ? 1.0f : f1;
            float y = 100.0f - fabsf(f0 - f1) * 50.0f;
            float ya = floorf(y - s), yb = floorf(y + s);
            float lo = wfit * qa + wbal * ya, hi = wfit * qb + wbal * yb;
            int32_t sure = (bad[i] == 0.0f) & (unsure[i] == 0.0f) & (lo == hi);
            float o = bad[i] != 0.0f ? (float)ESCHED_FB_INFEASIBLE : 0.0f;
            o = sure ? hi : o;
            o = cpen[i] >= 2.0f ? (float)ESCHED_FB_DEAD : o;
            out[i] = (int32_t)o;
            cand[i] = (uint8_t)((bad[i] == 0.0f) & (((hi >= bestf) & (lo != hi))
                                                    | (unsure[i] != 0.0f)));
        }
    } else
    /* One loop: LeastAllocated's free fractions after the pod, or MostAllocated's
     * used ones (1 - free, at most 1), BalancedAllocation's from the used fractions. */
    for (Py_ssize_t i = 0; i < m; i++) {
        float d0 = g0[i] - fr0 * ci0[i], d1 = g1[i] - fr1 * ci1[i];
        float e0 = most != 0.0f ? 1.0f - d0 : d0, e1 = most != 0.0f ? 1.0f - d1 : d1;
        e0 = e0 > 0.0f ? e0 : 0.0f;
        e1 = e1 > 0.0f ? e1 : 0.0f;
        e0 = e0 < top ? e0 : top;
        e1 = e1 < top ? e1 : top;
        float f0 = h0[i] + br0 * ci0[i], f1 = h1[i] + br1 * ci1[i];
        f0 = f0 > 1.0f ? 1.0f : f0;
        f1 = f1 > 1.0f ? 1.0f : f1;
        float ub = fit0 * e0 + fit1 * e1 + bal * (1.0f - fabsf(f0 - f1) * 0.5f);
        float o = bad[i] != 0.0f ? (float)ESCHED_FB_INFEASIBLE : 0.0f;
        o = cpen[i] >= 2.0f ? (float)ESCHED_FB_DEAD : o;
        out[i] = (int32_t)o;
        cand[i] = (uint8_t)((bad[i] == 0.0f) & ((ub >= lim) | (unsure[i] != 0.0f)));
    }
    /* The candidates' indices: the flags packed to one bit a node (a multiply packs 8
     * 0/1 bytes, byte i to bit i), then the set bits in order. No branch per group of
     * flags: whether a group holds a candidate is close to a coin toss here. */
    Py_ssize_t n_pick = 0, i8 = i0;   /* (i0 a multiple of 8) */
    for (; i8 + 8 <= m; i8 += 8) {
        uint64_t w;
        memcpy(&w, cand + i8, 8);
        bits[i8 >> 6] |= ((w * 0x0102040810204080ULL) >> 56) << (i8 & 63);
    }
    for (Py_ssize_t i = i8; i < m; i++)
        bits[i >> 6] |= (uint64_t)cand[i] << (i & 63);
    for (Py_ssize_t i = i0; i < m; i++)
        ubits[i >> 6] |= (uint64_t)(unsure[i] != 0.0f) << (i & 63);
    for (int w = 0; w < ESCHED_FB_BLOCK / 64; w++) {
        for (uint64_t b = bits[w]; b; b &= b - 1)
            pick[n_pick++] = 64 * w + __builtin_ctzll(b);
    }
    if (n_pick * 2 > m) {
        esched_fblock_body(k, n0, m, out, sum);
        return m;
    }
    if (n_pick > 0) {
        /* the candidates' columns side by side, scored by the kernel as nodes 0..: a
         * candidate's lines are not in cache (the walk read only the compact rows),
         * so only those the score needs are gathered; the reciprocals are recomputed
         * (the same IEEE division as the placer's), pen is 0 (a candidate is alive and
         * passes its cordon check), and the needed resources' columns only when a
         * candidate's fit was left unsure by the pre-check. */
        double g[9 + 2 * ESCHED_FB_MAX_NEED][ESCHED_FB_BLOCK];
        int32_t gs[ESCHED_FB_BLOCK];
        esched_fbsum gsum;
        const double *u0 = k->u0 + n0, *u1 = k->u1 + n0, *z0 = k->z0 + n0,
                     *z1 = k->z1 + n0, *a0 = k->a0 + n0, *a1 = k->a1 + n0;
        int any_unsure = 0;
        for (int w = 0; w < ESCHED_FB_BLOCK / 64; w++)
            any_unsure |= (bits[w] & ubits[w]) != 0;
        /* Padded with copies of the first candidate to whole vectors of doubles (their
         * results are dropped): the kernel then runs no scalar remainder loops, which
         * for a few candidates would be most of its work. */
        Py_ssize_t n_pad = (n_pick + ESCHED_FB_PAD - 1) & ~(Py_ssize_t)(ESCHED_FB_PAD - 1);
        for (Py_ssize_t j = n_pick; j < n_pad; j++)
            pick[j] = pick[0];
        for (Py_ssize_t j = 0; j < n_pad; j++) {
            Py_ssize_t i = pick[j];
            g[0][j] = u0[i]; g[1][j] = u1[i]; g[2][j] = z0[i]; g[3][j] = z1[i];
            g[4][j] = a0[i]; g[5][j] = a1[i];
            g[6][j] = 1.0 / a0[i]; g[7][j] = 1.0 / a1[i];
            g[8][j] = 0.0;
        }
        esched_fblock gk = *k;
        gk.u0 = g[0]; gk.u1 = g[1]; gk.z0 = g[2]; gk.z1 = g[3];
        gk.a0 = g[4]; gk.a1 = g[5]; gk.i0 = g[6]; gk.i1 = g[7]; gk.pen = g[8];
        gk.n_need = any_unsure ? k->n_need : 0;
        for (int r = 0; r < gk.n_need; r++) {
            const double *nu = k->need_used[r] + n0, *na = k->need_alloc[r] + n0;
            double *gu = g[9 + 2 * r], *ga = g[10 + 2 * r];
            for (Py_ssize_t j = 0; j < n_pad; j++) {
                gu[j] = nu[pick[j]];
                ga[j] = na[pick[j]];
            }
            gk.need_used[r] = gu;
            gk.need_alloc[r] = ga;
        }
        esched_fblock_body(&gk, 0, n_pad, gs, &gsum);
        for (Py_ssize_t j = 0; j < n_pick; j++)
            out[pick[j]] = gs[j];
    }
    esched_summarize_body(out, m, sum);
    return n_pick;
}

/* How many cache entries of m nodes are stale: stamp != (version | epoch). */
static inline __attribute__((always_inline)) Py_ssize_t
esched_stale_body(const int64_t *stamp, const long long *ver, int64_t epoch, Py_ssize_t m)
{
    int64_t n = 0;
    for (Py_ssize_t i = 0; i < m; i++)
        n += stamp[i] != ((int64_t)ver[i] | epoch);
    return (Py_ssize_t)n;
}

/* Index of the r-th (from 0) entry of s[0:m] equal to x; m if there is none. Counts
 * 32 entries at a time (a vector compare and sum) to skip to the right chunk. */
static inline Py_ssize_t esched_nth_equal(const int32_t *s, Py_ssize_t m, int32_t x,
                                          Py_ssize_t r)
{
    Py_ssize_t i = 0;
    for (; i + 32 <= m; i += 32) {
        int32_t c = 0;
        for (int j = 0; j < 32; j++)
            c += s[i + j] == x;
        if (r < c)
            break;
        r -= c;
    }
    for (; i < m; i++) {
        if (s[i] == x) {
            if (r == 0)
                return i;
            r--;
        }
    }
    return m;
}

/* Length of the prefix of s[0:m] that holds its first `need` (>= 1) feasible entries
 * (s >= 0); m if it holds fewer. Chunks of 32 are counted as vectors. */
static inline Py_ssize_t esched_cut(const int32_t *s, Py_ssize_t m, long long need)
{
    Py_ssize_t i = 0;
    for (; i + 32 <= m; i += 32) {
        int32_t c = 0;
        for (int j = 0; j < 32; j++)
            c += s[i + j] >= 0;
        if (need <= c)
            break;
        need -= c;
    }
    for (; i < m; i++)
        if (s[i] >= 0 && --need == 0)
            return i + 1;
    return m;
}

/* One topology filter check over a step (kube's InterPodAffinity and PodTopologySpread
 * filters; _placer.pyx _topology_pass builds them from the class view): node n0 + i
 * keeps passing when its domain d = dom[n0 + i] holds a count cnt[1 + d] in [lo, hi],
 * or, lacking the key (d < 0), when key_optional. */
typedef struct {
    const int32_t *dom;   /* [node] domain of the check's key, -1: no such label */
    const int32_t *cnt;   /* [1 + domain]; cnt[0] the total, read (and discarded) for d = -1 */
    int32_t lo, hi;
    int32_t key_optional;
} esched_tcheck;

/* pass[i] &= check j passes node n0 + i, for the n_c checks. No branch on the data:
 * which nodes pass is close to random (an anti-affinity's taken hosts, a spread's
 * full ones), so a branch per node would mispredict about as often as not; the
 * count is a gather, vectorized in the AVX2 / AVX-512 bodies. */
static inline __attribute__((always_inline)) void
esched_topology_body(const esched_tcheck *c, int n_c, Py_ssize_t n0, Py_ssize_t m,
                     int32_t *__restrict pass)
{
    for (int j = 0; j < n_c; j++) {
        const int32_t *__restrict dom = c[j].dom + n0;
        const int32_t *__restrict cnt = c[j].cnt + 1;
        const int32_t lo = c[j].lo, hi = c[j].hi, opt = c[j].key_optional;
        for (Py_ssize_t i = 0; i < m; i++) {
            int32_t d = dom[i];
            int32_t x = cnt[d];
            int32_t in = (x >= lo) & (x <= hi);
            pass[i] &= d >= 0 ? in : opt;
        }
    }
}

typedef void (*esched_fblock_fn)(const esched_fblock *k, Py_ssize_t n0, Py_ssize_t m,
                                 int32_t *out, esched_fbsum *sum);
typedef Py_ssize_t (*esched_fbound_fn)(const esched_fblock *k, Py_ssize_t n0, Py_ssize_t m,
                                       int32_t *out, esched_fbsum *sum, int32_t best);
typedef void (*esched_summarize_fn)(const int32_t *s, Py_ssize_t m, esched_fbsum *sum);
typedef Py_ssize_t (*esched_stale_fn)(const int64_t *stamp, const long long *ver,
                                      int64_t epoch, Py_ssize_t m);
typedef void (*esched_topology_fn)(const esched_tcheck *c, int n_c, Py_ssize_t n0,
                                   Py_ssize_t m, int32_t *pass);

/* One body per instruction set: the kernel, its bounded form, the summary, the stale count, the
 * topology checks. */
#define ESCHED_FB_VARIANT(isa, attr, lanes)                                              \
    attr static void esched_fblock_##isa(const esched_fblock *k, Py_ssize_t n0,           \
                                         Py_ssize_t m, int32_t *out, esched_fbsum *sum)   \
    { esched_fblock_body(k, n0, m, out, sum); }                                           \
    attr static Py_ssize_t esched_fbound_##isa(const esched_fblock *k, Py_ssize_t n0,     \
                                               Py_ssize_t m, int32_t *out,                \
                                               esched_fbsum *sum, int32_t best)           \
    { return esched_fbound_body(k, n0, m, out, sum, best, lanes); }                       \
    attr static void esched_summarize_##isa(const int32_t *s, Py_ssize_t m,               \
                                            esched_fbsum *sum)                            \
    { esched_summarize_body(s, m, sum); }                                                 \
    attr static Py_ssize_t esched_stale_##isa(const int64_t *stamp, const long long *ver, \
                                              int64_t epoch, Py_ssize_t m)                \
    { return esched_stale_body(stamp, ver, epoch, m); }                                   \
    attr static void esched_topology_##isa(const esched_tcheck *c, int n_c, Py_ssize_t n0, \
                                           Py_ssize_t m, int32_t *pass)                   \
    { esched_topology_body(c, n_c, n0, m, pass); }

ESCHED_FB_VARIANT(base, , 0)

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ESCHED_FB_X86 1
ESCHED_FB_VARIANT(avx2, __attribute__((target("avx2"))), esched_fbound_lanes_avx2)
ESCHED_FB_VARIANT(avx512, __attribute__((target(
    "avx512f,avx512dq,avx512vl,avx512bw,prefer-vector-width=512"))),
                  esched_fbound_lanes_avx512)
#endif

#pragma GCC pop_options

static esched_fblock_fn esched_fblock_score = esched_fblock_base;
static esched_fbound_fn esched_fbound = esched_fbound_base;
static esched_summarize_fn esched_summarize = esched_summarize_base;
static esched_stale_fn esched_stale = esched_stale_base;
static esched_topology_fn esched_topology = esched_topology_base;
static const char *esched_fblock_isa = "baseline";

/* Pick the widest bodies this CPU runs; ESCHED_SIMD=baseline|avx2|avx512 caps them. */
static void esched_fblock_init(const char *cap)
{
    esched_fblock_score = esched_fblock_base;
    esched_fbound = esched_fbound_base;
    esched_summarize = esched_summarize_base;
    esched_stale = esched_stale_base;
    esched_topology = esched_topology_base;
    esched_fblock_isa = "baseline";
#ifdef ESCHED_FB_X86
    __builtin_cpu_init();
    int any = cap == 0 || cap[0] == 0;
    int want512 = any || strcmp(cap, "avx512") == 0;
    int want2 = want512 || strcmp(cap, "avx2") == 0;
    if (want512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")
            && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")) {
        esched_fblock_score = esched_fblock_avx512;
        esched_fbound = esched_fbound_avx512;
        esched_summarize = esched_summarize_avx512;
        esched_stale = esched_stale_avx512;
        esched_topology = esched_topology_avx512;
        esched_fblock_isa = "avx512";
    } else if (want2 && __builtin_cpu_supports("avx2")) {
        esched_fblock_score = esched_fblock_avx2;
        esched_fbound = esched_fbound_avx2;
        esched_summarize = esched_summarize_avx2;
        esched_stale = esched_stale_avx2;
        esched_topology = esched_topology_avx2;
        esched_fblock_isa = "avx2";
    }
#else
    (void)cap;
#endif
}

#endif /* ESCHED_FUSED_BLOCK_H */
