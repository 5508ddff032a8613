/* The bounded walk's fit pre-check and floored totals in one pass over a block's
 * compact rows (esched_fbound_body, k->floors), with explicit vectors: included by
 * _fused_block.h once per instruction set, with these defined:
 *   ESCHED_FL_NAME     the function's name, ESCHED_FL_LOOP its loop's; ESCHED_FL_ATTR
 *                      their target attribute
 *   ESCHED_FL_LANES    floats a vector; VF a vector of them, VM a lane mask
 *   VSET1 VLOAD VADD VSUB VMUL VMIN VMAX VFLOOR VABS   float vector operations
 *   VCMP(a, b, pred)   a lane mask (_CMP_* predicates); VMOR VMAND VMANDN (a and not b)
 *   VSEL(m, a, b)      a where m, else b; VSELZ(m, a) a where m, else 0; VBITS(m) the
 *                      mask as bits, lane i to bit i
 *   VSTORE_I32(p, x)   x truncated to int32 and stored
 * Each vector computes what the scalar loops of esched_fbound_body compute, the same
 * float operations in the same order (no FMA: -ffp-contract=off) and the same NaN
 * choices (max / min take the scalar ternaries' operand order), so each compact row
 * is loaded once per pod and no flag array is written and read back. */
__attribute__((ESCHED_FL_ATTR, always_inline)) static inline Py_ssize_t
ESCHED_FL_LOOP(const esched_fblock *k, Py_ssize_t n0, Py_ssize_t m, int32_t *out,
               uint64_t *bits, uint64_t *ubits, int32_t best, const int most,
               const int nn)
{
    const Py_ssize_t mv = m & ~(Py_ssize_t)(ESCHED_FL_LANES - 1);
    const float *cpen = k->cpen + n0, *g0 = k->cg0 + n0, *g1 = k->cg1 + n0,
                *h0 = k->ch0 + n0, *h1 = k->ch1 + n0, *ci0 = k->ci0 + n0,
                *ci1 = k->ci1 + n0;
    /* nn: the requested resources' count when the caller fixed it (the per-node loop
     * over them then unrolls with no branch), or -1 */
    const int n_need = nn >= 0 ? nn : k->n_need;
    const float *cf[ESCHED_FB_MAX_NEED];
    VF ref_need[ESCHED_FB_MAX_NEED], hi_need[ESCHED_FB_MAX_NEED];
    for (int j = 0; j < n_need; j++) {
        cf[j] = k->cfree[j] + n0;
        ref_need[j] = VSET1(esched_fb_refuse_below(k->cneed_lo[j]));
        hi_need[j] = VSET1(k->cneed_hi[j]);
    }
    const VF zero = VSET1(0.0f), one = VSET1(1.0f), hundred = VSET1(100.0f),
             pen_ok = VSET1((float)k->pen_ok), two = VSET1(2.0f),
             s = VSET1(ESCHED_FB_FLOOR_SLACK), eps = VSET1(1e-4f),
             f_inf = VSET1((float)ESCHED_FB_INFEASIBLE), f_dead = VSET1((float)ESCHED_FB_DEAD);
    const VF fr0 = VSET1((float)k->fr0), fr1 = VSET1((float)k->fr1),
             br0 = VSET1((float)k->br0), br1 = VSET1((float)k->br1);
    const VF w0 = VSET1(k->do_fit ? (float)(k->rw0 * k->inv_ws) : 0.0f),
             w1 = VSET1(k->do_fit ? (float)(k->rw1 * k->inv_ws) : 0.0f),
             fifty = VSET1(50.0f), wfit = VSET1(k->do_fit ? (float)k->w_fit : 0.0f),
             wbal = VSET1(k->do_bal ? (float)k->w_bal : 0.0f), bestf = VSET1((float)best),
             top100 = VSET1(100.0f);   /* (LeastAllocated's: finite rows, e <= 100) */
    /* The masks' bits stored a vector's lanes at a time (8 or 16 nodes: 1 or 2 bytes;
     * x86 is little-endian, so byte b of the words holds nodes 8b .. 8b + 7). */
    _Static_assert(ESCHED_FB_BLOCK == 128, "two words of bits a block");
    uint8_t *cbytes = (uint8_t *)bits, *ubytes = (uint8_t *)ubits;
    for (Py_ssize_t i = 0; i < mv; i += ESCHED_FL_LANES) {
        VF pen = VLOAD(cpen + i);
        VM bad = VCMP(pen, pen_ok, _CMP_GT_OQ), unsure = VCMP(zero, zero, _CMP_NEQ_OQ);
        for (int j = 0; j < n_need; j++) {
            VF fl = VLOAD(cf[j] + i);
            bad = VMOR(bad, VCMP(fl, ref_need[j], _CMP_LT_OQ));
            unsure = VMOR(unsure, VCMP(fl, hi_need[j], _CMP_LT_OQ));
        }
        VF d0 = VSUB(VLOAD(g0 + i), VMUL(fr0, VLOAD(ci0 + i)));
        VF d1 = VSUB(VLOAD(g1 + i), VMUL(fr1, VLOAD(ci1 + i)));
        VF e0 = VMUL(most ? VSUB(one, d0) : d0, hundred);
        VF e1 = VMUL(most ? VSUB(one, d1) : d1, hundred);
        VF a0 = VMAX(VSUB(e0, s), zero), b0 = VMAX(VADD(e0, s), zero);
        VF a1 = VMAX(VSUB(e1, s), zero), b1 = VMAX(VADD(e1, s), zero);
        if (most) {
            a0 = VMIN(a0, top100);
            b0 = VMIN(b0, top100);
            a1 = VMIN(a1, top100);
            b1 = VMIN(b1, top100);
        }
        a0 = VFLOOR(a0);
        b0 = VFLOOR(b0);
        a1 = VFLOOR(a1);
        b1 = VFLOOR(b1);
        VF qa = VFLOOR(VADD(VADD(VMUL(a0, w0), VMUL(a1, w1)), eps));
        VF qb = VFLOOR(VADD(VADD(VMUL(b0, w0), VMUL(b1, w1)), eps));
        VF f0 = VMIN(one, VADD(VLOAD(h0 + i), VMUL(br0, VLOAD(ci0 + i))));
        VF f1 = VMIN(one, VADD(VLOAD(h1 + i), VMUL(br1, VLOAD(ci1 + i))));
        VF y = VSUB(hundred, VMUL(VABS(VSUB(f0, f1)), fifty));
        VF ya = VFLOOR(VSUB(y, s)), yb = VFLOOR(VADD(y, s));
        VF lo = VADD(VMUL(wfit, qa), VMUL(wbal, ya)), hi = VADD(VMUL(wfit, qb), VMUL(wbal, yb));
        VM sure = VMANDN(VMANDN(VCMP(lo, hi, _CMP_EQ_OQ), bad), unsure);
        VF o = VSELZ(bad, f_inf);
        o = VSEL(sure, hi, o);
        o = VSEL(VCMP(pen, two, _CMP_GE_OQ), f_dead, o);
        VSTORE_I32(out + i, o);
        VM cand = VMANDN(VMOR(VMAND(VCMP(hi, bestf, _CMP_GE_OQ),
                                    VCMP(lo, hi, _CMP_NEQ_UQ)), unsure), bad);
        const uint32_t cm = VBITS(cand), um = VBITS(unsure);
        memcpy(cbytes + (i >> 3), &cm, ESCHED_FL_LANES / 8);
        memcpy(ubytes + (i >> 3), &um, ESCHED_FL_LANES / 8);
    }
    return mv;
}

__attribute__((ESCHED_FL_ATTR)) static Py_ssize_t
ESCHED_FL_NAME(const esched_fblock *k, Py_ssize_t n0, Py_ssize_t m, int32_t *out,
               uint64_t *bits, uint64_t *ubits, int32_t best)
{
    /* one loop per strategy (MostAllocated's caps, LeastAllocated's none) and per count
     * of requested resources up to three: a loop over a count known only at run time
     * costs a compare and branch a resource and vector, about as much as its compares */
#define ESCHED_FL_NEEDS(most)                                                        \
    switch (k->n_need) {                                                             \
    case 0: return ESCHED_FL_LOOP(k, n0, m, out, bits, ubits, best, most, 0);        \
    case 1: return ESCHED_FL_LOOP(k, n0, m, out, bits, ubits, best, most, 1);        \
    case 2: return ESCHED_FL_LOOP(k, n0, m, out, bits, ubits, best, most, 2);        \
    case 3: return ESCHED_FL_LOOP(k, n0, m, out, bits, ubits, best, most, 3);        \
    default: return ESCHED_FL_LOOP(k, n0, m, out, bits, ubits, best, most, -1);      \
    }
    if (k->least)
        ESCHED_FL_NEEDS(0)
    ESCHED_FL_NEEDS(1)
#undef ESCHED_FL_NEEDS
}

/* (each includer defines these anew) */
#undef ESCHED_FL_NAME
#undef ESCHED_FL_LOOP
#undef ESCHED_FL_ATTR
#undef ESCHED_FL_LANES
#undef VF
#undef VM
#undef VSET1
#undef VLOAD
#undef VADD
#undef VSUB
#undef VMUL
#undef VMIN
#undef VMAX
#undef VFLOOR
#undef VABS
#undef VCMP
#undef VMOR
#undef VMAND
#undef VMANDN
#undef VSEL
#undef VSELZ
#undef VBITS
#undef VSTORE_I32
