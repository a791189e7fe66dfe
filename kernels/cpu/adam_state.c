/* The host Adam over compressed state (kernels/adam_state.h): the definition, element by element,
 * the undo, and the choice of path.
 *
 * Explained in docs/offload.md, "Compressed state". */
#include <math.h>
#include "kernels/adam_state.h"
#include "kernels/cpu/adam_simd.h"
#include "kernels/cpu/adam_state_simd.h"
#include "runtime/error.h"

zoe_status zoe_adam_state_dtypes_check(const zoe_adam_state_dtypes *dt) {
    if (!dt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam state: dtypes NULL");
    const zoe_dtype d[] = {dt->master, dt->exp_avg, dt->exp_avg_sq};
    const char *names[] = {"master", "exp_avg", "exp_avg_sq"};
    for (int i = 0; i < 3; i++)
        if (d[i] != ZOE_F32 && d[i] != ZOE_BF16 && (i == 0 || d[i] != ZOE_I8))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam state: %s dtype %s is not %s", names[i],
                            zoe_dtype_name(d[i]), i == 0 ? "fp32 or bf16" : "fp32, bf16 or int8");
    return ZOE_OK;
}

static zoe_status check_call(const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                             const void *grad, zoe_dtype grad_dtype, const void *out,
                             zoe_dtype out_dtype, size_t n, const char *what) {
    ZOE_TRY(zoe_adam_state_dtypes_check(dt));
    if (!zoe_dtype_is_float(grad_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: gradient dtype %s is not fp32/bf16/fp16",
                        what, zoe_dtype_name(grad_dtype));
    if (out && !zoe_dtype_is_float(out_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: output dtype %s is not fp32/bf16/fp16", what,
                        zoe_dtype_name(out_dtype));
    if (n && (!st || !st->master || !st->exp_avg || !st->exp_avg_sq || !grad))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: NULL buffer for %zu elements", what, n);
    if (n && ((dt->exp_avg == ZOE_I8 && !st->exp_avg_scale) ||
              (dt->exp_avg_sq == ZOE_I8 && !st->exp_avg_sq_scale)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: int8 moment without its block scales", what);
    return ZOE_OK;
}

/* The scalar path over [lo, hi) of a call whose element indices share the high word (the
 * dispatcher splits calls there), with the key of that word. */
void zoe_adam_state_scalar_range(const zoe_adam_consts *c, const zoe_adam_state_keys *k,
                                 const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                                 uint32_t index_lo, const void *grad, int gdt, void *out, int odt,
                                 uint16_t *v_bits, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
        uint32_t idx = index_lo + (uint32_t)i;
        float w = adam_state_load(st->master, i, dt->master);
        float m = adam_state_load(st->exp_avg, i, dt->exp_avg);
        float v = adam_state_load(st->exp_avg_sq, i, dt->exp_avg_sq);
        float ww = adam_element(c, c->decoupled, adam_load_scalar(grad, i, gdt), w, &m, &v);
        uint32_t r = zoe_sr_random(k->key, idx);
        if (v_bits) v_bits[i] = (uint16_t)(r >> 16);
        float stored = adam_state_store(st->master, i, dt->master, ww, r & 0xffff, 0);
        adam_state_store(st->exp_avg, i, dt->exp_avg, m, 0, 1);
        adam_state_store(st->exp_avg_sq, i, dt->exp_avg_sq, v, r >> 16, 0);
        adam_store_scalar(out, i, odt, stored);
    }
}

void zoe_adam_state_path(zoe_cpu_isa isa, const zoe_adam_consts *c, const zoe_adam_state_keys *k,
                         const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                         uint32_t index_lo, const void *grad, int gdt, void *out, int odt,
                         uint16_t *v_bits, size_t n) {
    switch (isa) {
    case ZOE_CPU_ISA_AVX512_BF16:
    case ZOE_CPU_ISA_AVX512:
        zoe_adam_state_avx512(c, k, dt, st, index_lo, grad, gdt, out, odt, v_bits, n);
        break;
    case ZOE_CPU_ISA_AVX2:
        zoe_adam_state_avx2(c, k, dt, st, index_lo, grad, gdt, out, odt, v_bits, n);
        break;
    default:
        zoe_adam_state_scalar_range(c, k, dt, st, index_lo, grad, gdt, out, odt, v_bits, 0, n);
        break;
    }
}

zoe_status zoe_adam_state_host_isa(zoe_cpu_isa isa, const zoe_adam_consts *c,
                                   const zoe_adam_rounding *r, const zoe_adam_state_dtypes *dt,
                                   const zoe_adam_state *st, uint64_t index0, const void *grad,
                                   zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype, size_t n) {
    ZOE_TRY(check_call(dt, st, grad, grad_dtype, out, out_dtype, n, "adam state"));
    if (n && (!c || !r)) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam state: NULL constants");
    if (!zoe_cpu_isa_supported(isa))
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "adam state: this CPU cannot run the %s path",
                        zoe_cpu_isa_name(isa));
    if (zoe_adam_state_has_int8(dt)) {
        const zoe_adam_state_piece whole = {
            .offset = 0, .len = n, .c = c, .master = st->master, .grad = grad, .out = out};
        return zoe_adam_state_int8_pieces(isa, r, dt, st, index0, &whole, n ? 1 : 0, grad_dtype,
                                          out_dtype, n);
    }
    int odt = out ? (int)out_dtype : ADAM_OUT_NONE;
    const size_t sizes[] = {zoe_adam_state_esize(dt->master), zoe_adam_state_esize(dt->exp_avg),
                            zoe_adam_state_esize(dt->exp_avg_sq)};
    const size_t gsz = zoe_dtype_size(grad_dtype), osz = out ? zoe_dtype_size(out_dtype) : 0;
    for (size_t done = 0; done < n;) {
        /* One call per high word of the index: the key is per word. */
        uint64_t index = index0 + done;
        uint64_t to_word_end = ((uint64_t)1 << 32) - (uint32_t)index;
        size_t len = n - done < to_word_end ? n - done : (size_t)to_word_end;
        zoe_adam_state_keys k = zoe_adam_state_keys_of(r, (uint32_t)(index >> 32));
        zoe_adam_state part = {.master = (char *)st->master + done * sizes[0],
                               .exp_avg = (char *)st->exp_avg + done * sizes[1],
                               .exp_avg_sq = (char *)st->exp_avg_sq + done * sizes[2]};
        const void *g = (const char *)grad + done * gsz;
        void *o = out ? (char *)out + done * osz : NULL;
        zoe_adam_state_path(isa, c, &k, dt, &part, (uint32_t)index, g, grad_dtype, o, odt, NULL,
                            len);
        done += len;
    }
    return ZOE_OK;
}

zoe_status zoe_adam_state_host(const zoe_adam_consts *c, const zoe_adam_rounding *r,
                               const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                               uint64_t index0, const void *grad, zoe_dtype grad_dtype, void *out,
                               zoe_dtype out_dtype, size_t n) {
    return zoe_adam_state_host_isa(zoe_cpu_isa_best(), c, r, dt, st, index0, grad, grad_dtype, out,
                                   out_dtype, n);
}

zoe_status zoe_adam_state_host_pieces_isa(zoe_cpu_isa isa, const zoe_adam_rounding *r,
                                          const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                                          uint64_t index0, const zoe_adam_state_piece *pieces,
                                          int num_pieces, zoe_dtype grad_dtype, zoe_dtype out_dtype,
                                          size_t n) {
    if (num_pieces < 0 || (num_pieces && !pieces))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam state pieces: %d pieces at %p", num_pieces,
                        (const void *)pieces);
    for (int p = 0; p < num_pieces; p++) {
        const zoe_adam_state_piece *pc = &pieces[p];
        size_t after = p ? pieces[p - 1].offset + pieces[p - 1].len : 0;
        if (pc->offset < after || pc->offset > n || pc->len > n - pc->offset)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "adam state pieces: piece %d [%zu, %zu) overlaps the one before or "
                            "leaves the range of %zu",
                            p, pc->offset, pc->offset + pc->len, n);
        const zoe_adam_state at = {.master = pc->master,
                                   .exp_avg = st ? st->exp_avg : NULL,
                                   .exp_avg_sq = st ? st->exp_avg_sq : NULL,
                                   .exp_avg_scale = st ? st->exp_avg_scale : NULL,
                                   .exp_avg_sq_scale = st ? st->exp_avg_sq_scale : NULL};
        ZOE_TRY(check_call(dt, &at, pc->grad, grad_dtype, pc->out, out_dtype, pc->len,
                           "adam state pieces"));
        if (pc->len && (!pc->c || !r))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam state pieces: NULL constants");
    }
    if (!zoe_cpu_isa_supported(isa))
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "adam state: this CPU cannot run the %s path",
                        zoe_cpu_isa_name(isa));
    if (zoe_adam_state_has_int8(dt))
        return zoe_adam_state_int8_pieces(isa, r, dt, st, index0, pieces, num_pieces, grad_dtype,
                                          out_dtype, n);
    const size_t msz = zoe_adam_state_esize(dt->exp_avg),
                 vsz = zoe_adam_state_esize(dt->exp_avg_sq);
    for (int p = 0; p < num_pieces; p++) {
        const zoe_adam_state_piece *pc = &pieces[p];
        const zoe_adam_state part = {.master = pc->master,
                                     .exp_avg = (char *)st->exp_avg + pc->offset * msz,
                                     .exp_avg_sq = (char *)st->exp_avg_sq + pc->offset * vsz};
        ZOE_TRY(zoe_adam_state_host_isa(isa, pc->c, r, dt, &part, index0 + pc->offset, pc->grad,
                                        grad_dtype, pc->out, out_dtype, pc->len));
    }
    return ZOE_OK;
}

zoe_status zoe_adam_state_host_pieces(const zoe_adam_rounding *r, const zoe_adam_state_dtypes *dt,
                                      const zoe_adam_state *st, uint64_t index0,
                                      const zoe_adam_state_piece *pieces, int num_pieces,
                                      zoe_dtype grad_dtype, zoe_dtype out_dtype, size_t n) {
    return zoe_adam_state_host_pieces_isa(zoe_cpu_isa_best(), r, dt, st, index0, pieces, num_pieces,
                                          grad_dtype, out_dtype, n);
}

/* A value solved back in float64, stored in its dtype with round-to-nearest-even. */
static void store_nearest(void *p, size_t i, zoe_dtype dt, double x) {
    if (dt == ZOE_BF16)
        ((zoe_bf16 *)p)[i] = zoe_f32_to_bf16((float)x);
    else
        ((float *)p)[i] = (float)x;
}

zoe_status zoe_adam_state_undo_host(const zoe_adam_consts *c, const zoe_adam_state_dtypes *dt,
                                    const zoe_adam_state *st, const void *grad,
                                    zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype,
                                    size_t n) {
    ZOE_TRY(check_call(dt, st, grad, grad_dtype, out, out_dtype, n, "adam state undo"));
    if (n && !c) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam state undo: NULL constants");
    if (!(c->beta1 > 0) || !(c->beta2 > 0) || !(c->decay > 0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "undo: beta1 %g, beta2 %g and decay %g must be > 0 to solve the step back",
                        (double)c->beta1, (double)c->beta2, (double)c->decay);
    /* A block at a time (int8 moments: each block read back and requantised once). */
    float m[ZOE_ADAM_INT8_BLOCK], v[ZOE_ADAM_INT8_BLOCK];
    for (size_t b0 = 0; b0 < n; b0 += ZOE_ADAM_INT8_BLOCK) {
        size_t len = n - b0 < ZOE_ADAM_INT8_BLOCK ? n - b0 : ZOE_ADAM_INT8_BLOCK;
        ZOE_TRY(zoe_adam_moment_to_f32(dt->exp_avg, 0, st->exp_avg, st->exp_avg_scale, b0, len, m));
        ZOE_TRY(zoe_adam_moment_to_f32(dt->exp_avg_sq, 1, st->exp_avg_sq, st->exp_avg_sq_scale, b0,
                                       len, v));
        for (size_t j = 0; j < len; j++) {
            size_t i = b0 + j;
            /* As zoe_adam_undo_host: the step's shift is known again from the moments it left. */
            double w = adam_state_load(st->master, i, dt->master);
            double mi = m[j], vi = v[j];
            double w0 = w + (double)c->step_size * (mi / (sqrt(vi) * c->inv_sqrt_bc2 + c->eps));
            if (c->decoupled) w0 /= c->decay;
            float gf = adam_load_scalar(grad, i, grad_dtype) * c->grad_scale;
            if (!c->decoupled) gf = gf + c->l2 * (float)w0;
            double g = gf;
            double m0 = (mi - (double)c->one_minus_beta1 * g) / c->beta1;
            double v0 = (vi - (double)c->one_minus_beta2 * (g * g)) / c->beta2;
            store_nearest(st->master, i, dt->master, w0);
            m[j] = (float)m0, v[j] = (float)(v0 > 0 ? v0 : 0);
            if (out)
                adam_store_scalar(out, i, out_dtype, adam_state_load(st->master, i, dt->master));
        }
        ZOE_TRY(
            zoe_adam_moment_from_f32(dt->exp_avg, 0, m, b0, len, st->exp_avg, st->exp_avg_scale));
        ZOE_TRY(zoe_adam_moment_from_f32(dt->exp_avg_sq, 1, v, b0, len, st->exp_avg_sq,
                                         st->exp_avg_sq_scale));
    }
    return ZOE_OK;
}
