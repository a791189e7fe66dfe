/* The CUDA attention choices as arithmetic (kernels/attention_plan.h).
 *
 * Explained in docs/attention.md, "Which path runs where". */
#include "kernels/attention_plan.h"

static int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

zoe_attention_path zoe_attention_path_of(zoe_dtype dt, int cc, int force_flash) {
    if (force_flash) return ZOE_ATTN_PATH_FLASH;
    if (dt == ZOE_F16 && cc >= 70) return ZOE_ATTN_PATH_GEMM;
    if (dt == ZOE_BF16 && cc >= 80) return ZOE_ATTN_PATH_GEMM;
    return ZOE_ATTN_PATH_FLASH;
}

int64_t zoe_attention_flash_smem(zoe_attention_pass pass, int64_t HS, int rows) {
    const int64_t partners = 2 * (int64_t)ZOE_ATTN_PARTNER_ROWS * (HS + 1);
    const int64_t floats = pass == ZOE_ATTN_FORWARD
                               ? (int64_t)rows * HS + partners
                               : 2 * (int64_t)rows * HS + partners + 2 * ZOE_ATTN_PARTNER_ROWS;
    return floats * (int64_t)sizeof(float);
}

int zoe_attention_flash_rows(zoe_attention_pass pass, int64_t HS, int64_t smem_optin) {
    if (HS <= 0 || HS > ZOE_ATTN_MAX_HEAD_DIM) return 0;
    /* Fewer own rows share each staged partner tile among fewer rows (more shared-memory reads
     * per FLOP), so the largest tile that fits; 8 rows is one per warp, the least there is. */
    for (int rows = 32; rows >= ZOE_ATTN_WARPS; rows /= 2)
        if (zoe_attention_flash_smem(pass, HS, rows) <= smem_optin) return rows;
    return 0;
}

int64_t zoe_attention_flash_max_head_dim(int64_t smem_optin) {
    for (int64_t hs = ZOE_ATTN_MAX_HEAD_DIM; hs > 0; hs--)
        if (zoe_attention_flash_rows(ZOE_ATTN_FORWARD, hs, smem_optin) &&
            zoe_attention_flash_rows(ZOE_ATTN_BACKWARD, hs, smem_optin))
            return hs;
    return 0;
}

zoe_attention_dkv_split zoe_attention_dkv_split_of(int64_t B, int64_t T, int64_t NKV, int64_t group,
                                                   int64_t HS, int rows, int sms,
                                                   int64_t partial_bytes) {
    const zoe_attention_dkv_split whole = {.slices = 1, .heads = group};
    if (group <= 1 || rows <= 0 || sms <= 0 || B <= 0 || T <= 0 || NKV <= 0) return whole;
    const int64_t base = ceil_div(T, rows) * NKV * B, target = 2 * (int64_t)sms;
    if (base >= target) return whole;
    const int64_t per_slice = B * T * NKV * 2 * HS * (int64_t)sizeof(float);
    const int64_t most = per_slice > 0 ? min64(group, partial_bytes / per_slice) : 1;
    if (most <= 1) return whole;
    /* Slices of whole heads, as even as whole heads allow (the last holds the remainder): the
     * fewest that reach the target (fewer partial sums to add), else the most the workspace
     * holds. */
    zoe_attention_dkv_split best = whole;
    for (int64_t want = 2; want <= most; want++) {
        const int64_t heads = ceil_div(group, want);
        best = (zoe_attention_dkv_split){.slices = ceil_div(group, heads), .heads = heads};
        if (base * best.slices >= target) break;
    }
    return best;
}

int64_t zoe_attention_dkv_blocks(int64_t B, int64_t T, int64_t NKV, int rows,
                                 zoe_attention_dkv_split split) {
    return rows > 0 ? ceil_div(T, rows) * NKV * B * split.slices : 0;
}

zoe_attention_gemm_pass zoe_attention_gemm_pass_of(int64_t T, int64_t NH, int64_t group,
                                                   int64_t scratch_bytes) {
    const int64_t ld = (T + 7) / 8 * 8; /* 16-byte aligned rows of P and dS for cuBLAS */
    zoe_attention_gemm_pass p = {.heads = 0, .rows = 0, .ld = ld};
    if (T <= 0 || NH <= 0 || group <= 0) return p;
    const int64_t rows_fit = scratch_bytes / (ld * ZOE_ATTN_GEMM_BYTES);
    if (rows_fit >= T) {
        p.rows = T;
        p.heads = min64(NH, rows_fit / T);
        /* A pass of several groups takes them whole, so that each KV head's query heads sit at
         * one stride in every batched GEMM. */
        if (p.heads >= group) p.heads = p.heads / group * group;
    } else {
        p.heads = rows_fit > 0 ? 1 : 0;
        p.rows = rows_fit >= 64 ? rows_fit / 64 * 64 : rows_fit;
    }
    return p;
}

int64_t zoe_attention_gemm_scratch_bytes(int64_t max_seq, int64_t max_heads) {
    if (max_seq <= 0 || max_heads <= 0) return 0;
    const int64_t ld = (max_seq + 7) / 8 * 8;
    const int64_t per_head = max_seq * ld * ZOE_ATTN_GEMM_BYTES;
    return per_head > ZOE_ATTN_GEMM_BUDGET / max_heads ? ZOE_ATTN_GEMM_BUDGET
                                                       : per_head * max_heads;
}

int64_t zoe_attention_dkv_partial_bytes(int64_t max_rows, int64_t max_heads, int64_t max_head_dim) {
    /* At most one slice per query head: B T NH 2 HS fp32 sums. */
    const int64_t all = max_rows * max_heads * 2 * max_head_dim * (int64_t)sizeof(float);
    return all < 0 ? 0 : min64(all, ZOE_ATTN_DKV_BUDGET);
}

/* Flash work: each block does `products` R x 32 x HS multiply-adds per staged partner tile. */
static double flash_flops(zoe_attention_pass pass, const zoe_attention_shape *s, int R) {
    const int64_t P = ZOE_ATTN_PARTNER_ROWS, ptiles = ceil_div(s->T, P);
    double tiles = 0; /* own tile x partner tile pairs, weighted by products */
    for (int64_t t0 = 0; t0 < s->T; t0 += R) {
        const int64_t last = min64(s->T, t0 + R) - 1;
        if (pass == ZOE_ATTN_FORWARD) {
            tiles += 2.0 * (double)(last / P + 1); /* q.k, p.v */
        } else {
            tiles += 3.0 * (double)(last / P + 1);    /* dq: q.k, dout.v, ds.k */
            tiles += 4.0 * (double)(ptiles - t0 / P); /* dk/dv: k.q, v.dout, p.dout, ds.q */
        }
    }
    return tiles * 2.0 * R * P * (double)s->HS * (double)s->NH * (double)s->B;
}

zoe_attention_cost zoe_attention_cost_of(zoe_attention_pass pass, const zoe_attention_shape *s,
                                         const zoe_attention_gpu *gpu, int force_flash) {
    zoe_attention_cost c = {.path = zoe_attention_path_of(s->dt, gpu->cc, force_flash),
                            .split = {.slices = 1, .heads = s->NKV > 0 ? s->NH / s->NKV : 1}};
    const int64_t group = s->NKV > 0 ? s->NH / s->NKV : 1;
    if (s->B <= 0 || s->T <= 0 || s->NH <= 0) return c;
    if (c.path == ZOE_ATTN_PATH_GEMM) {
        const zoe_attention_gemm_pass p = zoe_attention_gemm_pass_of(
            s->T, s->NH, group, zoe_attention_gemm_scratch_bytes(s->T, s->NH));
        double scores = 0; /* score elements the passes compute, per head */
        for (int64_t i0 = 0; p.rows > 0 && i0 < s->T; i0 += p.rows) {
            const int64_t rows = min64(p.rows, s->T - i0), keys = min64(s->T, i0 + p.rows);
            scores += (double)rows * (double)keys;
        }
        scores *= (double)s->NH * (double)s->B;
        /* forward: S = Q K^T, O = P V; backward: S, dP = dO V^T, dV, dQ, dK. Bytes per score:
         * forward S written and read by the softmax (about 1.5 reads over the causal half),
         * P written and read; backward S and dP written and read, P and dS written, P read
         * once and dS twice. */
        const int gemms = pass == ZOE_ATTN_FORWARD ? 2 : 5;
        c.tensor_flops = gemms * 2.0 * scores * (double)s->HS;
        c.bytes = scores * (pass == ZOE_ATTN_FORWARD ? 14.0 : 26.0);
        return c;
    }
    c.rows = zoe_attention_flash_rows(pass, s->HS, gpu->smem_optin);
    if (c.rows == 0) return c;
    if (pass == ZOE_ATTN_BACKWARD)
        c.split =
            zoe_attention_dkv_split_of(s->B, s->T, s->NKV, group, s->HS, c.rows, gpu->sms,
                                       zoe_attention_dkv_partial_bytes(s->B * s->T, s->NH, s->HS));
    c.cuda_flops = flash_flops(pass, s, c.rows);
    return c;
}

double zoe_attention_flash_efficiency(int rows, int cc) {
    /* Per partner element a warp's dot products read one shared-memory word per own row and one
     * of the partner's (ROWS + 1 reads for ROWS multiply-adds), its weighted sums one read for
     * ROWS multiply-adds: half the work each, about (ROWS + 2) / (2 ROWS) shared-memory cycles
     * per warp multiply-add at one access a cycle per SM. An SM issues 2 warp multiply-adds a
     * cycle with 64 fp32 lanes (sm_70, sm_75, sm_80), 4 with 128 (sm_86 on, sm_90). Half of
     * that bound is assumed to remain after the exponentials, shuffles, barriers and the
     * unoverlapped loads of each staged tile: an estimate (the kernels have not been timed). */
    const double per_warp = rows / (double)ZOE_ATTN_WARPS;
    if (per_warp <= 0) return 0;
    const double cycles = (per_warp + 2.0) / (2.0 * per_warp);
    const double issue = cc == 70 || cc == 75 || cc == 80 ? 2.0 : 4.0;
    const double bound = 1.0 / cycles / issue;
    return 0.5 * (bound < 1.0 ? bound : 1.0);
}
