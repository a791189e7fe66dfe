/* bench_cpu_adam's probe loop over one tile (bench/cpu_adam.c), written once and instantiated
 * per vector width, as kernels/cpu/adam_simd.h instantiates the step. The including file defines:
 *   PV, PW                  the vector type and its lane count
 *   P_SET1(x) P_ADD(a,b) P_MUL(a,b) P_LOAD(p) P_STORE(p,x)
 *   P_LOAD_BF16(p)          PW bf16 values widened to fp32
 *   P_STREAM2_BF16(p,a,b)   two vectors truncated to 2 PW bf16 values, one non-temporal store
 *                           (p aligned to PW * 4 bytes)
 *   P_STORE_BF16(p,x)       one vector truncated to PW bf16 values (the 2-byte state)
 *   P_TARGET                the function attribute that compiles the loop for the width
 *   PROBE_FN(name)          the name of the instantiated function
 * Two vectors per iteration, as in the step. */
P_TARGET static void PROBE_FN(probe_tile)(float *w, float *m, float *v, float *g, uint16_t *half,
                                          mode md, int prefetch, size_t len) {
    const PV c = P_SET1(1e-7f), a = P_SET1(0.999999f), b = P_SET1(1e-9f);
    size_t i = 0;
    if (md == INT8_STATE) { /* 1-byte moments: the compiler's loop at the file's baseline */
        probe_scalar(w, m, v, g, half, md, 0, len);
        return;
    }
    if (md == BF16_STATE) { /* 2-byte state: bf16 loads and truncating stores, no prefetch */
        uint16_t *w16 = (uint16_t *)w, *m16 = (uint16_t *)m, *v16 = (uint16_t *)v;
        for (; i + 2 * PW <= len; i += 2 * PW) {
            PV x[2];
            for (int k = 0; k < 2; k++) {
                size_t j = i + PW * (size_t)k;
                PV gj = P_LOAD(g + j);
                x[k] = P_ADD(P_LOAD_BF16(w16 + j), P_MUL(c, gj));
                P_STORE_BF16(w16 + j, x[k]);
                P_STORE_BF16(m16 + j, P_ADD(P_LOAD_BF16(m16 + j), P_MUL(c, gj)));
                P_STORE_BF16(v16 + j, P_ADD(P_MUL(P_LOAD_BF16(v16 + j), a), b));
            }
            P_STREAM2_BF16(half + i, x[0], x[1]);
        }
        _mm_sfence();
        probe_scalar(w, m, v, g, half, md, i, len);
        return;
    }
    for (; i + 2 * PW <= len; i += 2 * PW) {
        if (prefetch) probe_prefetch(w, m, v, g, half, md, i, 2 * PW);
        PV x[2];
        for (int k = 0; k < 2; k++) {
            size_t j = i + PW * (size_t)k;
            PV gj = md == BF16_DPU ? P_LOAD_BF16(half + j) : P_LOAD(g + j);
            x[k] = P_ADD(P_LOAD(w + j), P_MUL(c, gj));
            P_STORE(md == FP32_DPU ? g + j : w + j, x[k]);
            P_STORE(m + j, P_ADD(P_LOAD(m + j), P_MUL(c, gj)));
            P_STORE(v + j, P_ADD(P_MUL(P_LOAD(v + j), a), b));
        }
        if (md == BF16_WEIGHTS || md == BF16_DPU) P_STREAM2_BF16(half + i, x[0], x[1]);
    }
    _mm_sfence();
    probe_scalar(w, m, v, g, half, md, i, len);
}

#undef PV
#undef PW
#undef P_SET1
#undef P_ADD
#undef P_MUL
#undef P_LOAD
#undef P_STORE
#undef P_LOAD_BF16
#undef P_STREAM2_BF16
#undef P_STORE_BF16
#undef P_TARGET
#undef PROBE_FN
