/* The CUDA attention choices (kernels/attention_plan.h), on the CPU: every head size the
 * configuration accepts for CUDA (1 ... 256) has flash tiles on V100 (96 KiB), A100 (163 KiB)
 * and H100 (227 KiB), each the largest that fits; the dk/dv grid of llama-3-70b's shapes holds
 * at least 2 blocks per multiprocessor; the GEMM path's passes fit its scratch at any length;
 * the path per dtype and architecture; and the work the plan prices, against counts made
 * independently here. */
#include <math.h>
#include <string.h>
#include "kernels/attention_plan.h"
#include "testing.h"
#include "zoe/model.h"

typedef struct arch {
    const char *name;
    zoe_attention_gpu gpu;
} arch;

static const arch archs[] = {
    {"V100", {.cc = 70, .sms = 80, .smem_optin = ZOE_SMEM_OPTIN_SM70}},
    {"A100", {.cc = 80, .sms = 108, .smem_optin = ZOE_SMEM_OPTIN_SM80}},
    {"H100", {.cc = 90, .sms = 132, .smem_optin = ZOE_SMEM_OPTIN_SM90}},
};
enum { ARCHS = sizeof archs / sizeof archs[0] };

static void test_tiles(void) {
    const zoe_attention_pass passes[] = {ZOE_ATTN_FORWARD, ZOE_ATTN_BACKWARD};
    for (int a = 0; a < ARCHS; a++)
        for (int p = 0; p < 2; p++)
            for (int64_t hs = 1; hs <= ZOE_ATTN_MAX_HEAD_DIM; hs++) {
                const int64_t limit = archs[a].gpu.smem_optin;
                const int rows = zoe_attention_flash_rows(passes[p], hs, limit);
                CHECK(rows == 32 || rows == 16 || rows == 8, "%s HS=%lld pass %d: no tile (%d)",
                      archs[a].name, (long long)hs, p, rows);
                if (!rows) continue;
                CHECK(zoe_attention_flash_smem(passes[p], hs, rows) <= limit,
                      "%s HS=%lld: %d rows take more than %lld bytes", archs[a].name, (long long)hs,
                      rows, (long long)limit);
                CHECK(rows == 32 || zoe_attention_flash_smem(passes[p], hs, 2 * rows) > limit,
                      "%s HS=%lld: %d rows chosen where %d fit", archs[a].name, (long long)hs, rows,
                      2 * rows);
            }
    /* The kernels' layout, counted here: forward q [rows, HS], k and v [32, HS + 1];
     * backward two own tiles, the two partner tiles and 32 lse and 32 delta. */
    CHECK(zoe_attention_flash_smem(ZOE_ATTN_FORWARD, 256, 32) == 4 * (32 * 256 + 2 * 32 * 257),
          "forward bytes");
    CHECK(zoe_attention_flash_smem(ZOE_ATTN_BACKWARD, 192, 32) ==
              4 * (2 * 32 * 192 + 2 * 32 * 193 + 64),
          "backward bytes");
    /* The cases the issue names: over 96 KiB with 32-row tiles, so V100 takes smaller ones. */
    CHECK(zoe_attention_flash_smem(ZOE_ATTN_FORWARD, 256, 32) > ZOE_SMEM_OPTIN_SM70, "fwd 256");
    CHECK(zoe_attention_flash_smem(ZOE_ATTN_BACKWARD, 192, 32) > ZOE_SMEM_OPTIN_SM70, "bwd 192");
    const struct {
        int64_t smem, hs;
        int fwd, bwd;
    } want[] = {{ZOE_SMEM_OPTIN_SM70, 256, 16, 8},  {ZOE_SMEM_OPTIN_SM70, 192, 32, 16},
                {ZOE_SMEM_OPTIN_SM70, 128, 32, 32}, {ZOE_SMEM_OPTIN_SM80, 256, 32, 32},
                {ZOE_SMEM_OPTIN_SM90, 256, 32, 32}, {ZOE_SMEM_OPTIN_SM70, 144, 32, 32}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const int f = zoe_attention_flash_rows(ZOE_ATTN_FORWARD, want[i].hs, want[i].smem);
        const int b = zoe_attention_flash_rows(ZOE_ATTN_BACKWARD, want[i].hs, want[i].smem);
        CHECK(f == want[i].fwd && b == want[i].bwd, "HS=%lld at %lld bytes: %d/%d rows, want %d/%d",
              (long long)want[i].hs, (long long)want[i].smem, f, b, want[i].fwd, want[i].bwd);
    }
    /* Above the kernels' registers, and on a GPU too small for any tile (sm_75: 64 KiB). */
    CHECK(zoe_attention_flash_rows(ZOE_ATTN_FORWARD, 257, ZOE_SMEM_OPTIN_SM90) == 0, "HS 257");
    CHECK(zoe_attention_flash_rows(ZOE_ATTN_BACKWARD, 256, 64 * 1024) == 0, "64 KiB, HS 256");
    /* 8-row backward tiles: 4 (80 HS + 128) bytes <= 65536 up to HS = 203 */
    CHECK(zoe_attention_flash_max_head_dim(64 * 1024) == 203, "64 KiB: max HS %lld",
          (long long)zoe_attention_flash_max_head_dim(64 * 1024));
    CHECK(zoe_attention_flash_max_head_dim(ZOE_SMEM_OPTIN_SM70) == 256, "V100 max HS");
}

/* llama-3-70b's attention on one rank at TP = tp: its local query and KV heads. */
static void llama70b_rank(int tp, int64_t *NH, int64_t *NKV, int64_t *HS) {
    zoe_model_config m;
    CHECK_OK(zoe_model_preset("llama-3-70b", &m));
    const int64_t shards = tp < m.kv_heads ? tp : m.kv_heads; /* KV heads replicate past it */
    *NH = m.heads / tp, *NKV = m.kv_heads / shards, *HS = m.hidden / m.heads;
}

static void test_dkv_split(void) {
    int64_t NH, NKV, HS;
    llama70b_rank(8, &NH, &NKV, &HS);
    CHECK(NH == 8 && NKV == 1 && HS == 128, "llama-3-70b at TP=8: %lld/%lld heads of %lld",
          (long long)NH, (long long)NKV, (long long)HS);
    const int tps[] = {8, 16};
    const int64_t seqs[] = {4096, 8192};
    for (int a = 0; a < ARCHS; a++)
        for (int i = 0; i < 2; i++)
            for (int s = 0; s < 2; s++) {
                llama70b_rank(tps[i], &NH, &NKV, &HS);
                const int64_t B = 1, T = seqs[s], group = NH / NKV;
                const int rows =
                    zoe_attention_flash_rows(ZOE_ATTN_BACKWARD, HS, archs[a].gpu.smem_optin);
                const int64_t partial = zoe_attention_dkv_partial_bytes(B * T, NH, HS);
                const zoe_attention_dkv_split sp = zoe_attention_dkv_split_of(
                    B, T, NKV, group, HS, rows, archs[a].gpu.sms, partial);
                const int64_t blocks = zoe_attention_dkv_blocks(B, T, NKV, rows, sp);
                /* unsplit: one block per key tile and KV head */
                const int64_t unsplit = (T + rows - 1) / rows * NKV * B;
                CHECK(blocks >= 2 * archs[a].gpu.sms || sp.heads == 1,
                      "%s TP=%d T=%lld: %lld blocks (%lld unsplit) for %d SMs", archs[a].name,
                      tps[i], (long long)T, (long long)blocks, (long long)unsplit,
                      archs[a].gpu.sms);
                CHECK(sp.slices >= 1 && sp.heads >= 1 && sp.slices * sp.heads >= group &&
                          (sp.slices - 1) * sp.heads < group,
                      "%s: %lld slices of %lld heads do not partition a group of %lld",
                      archs[a].name, (long long)sp.slices, (long long)sp.heads, (long long)group);
                CHECK(sp.slices == 1 || sp.slices * B * T * NKV * 2 * HS * 4 <= partial,
                      "%s: the partial sums exceed the workspace", archs[a].name);
            }
    /* The case: H100, TP=8, seq 4096: 128 blocks unsplit, 3 slices of 3 heads now. */
    llama70b_rank(8, &NH, &NKV, &HS);
    const zoe_attention_dkv_split h100 = zoe_attention_dkv_split_of(
        1, 4096, NKV, NH / NKV, HS, 32, 132, zoe_attention_dkv_partial_bytes(4096, NH, HS));
    CHECK(h100.slices == 3 && h100.heads == 3 &&
              zoe_attention_dkv_blocks(1, 4096, NKV, 32, h100) == 384,
          "H100 TP=8: %lld slices of %lld heads", (long long)h100.slices, (long long)h100.heads);
    /* Nothing to split: MHA (group 1), and a grid already large enough. */
    const zoe_attention_dkv_split mha =
        zoe_attention_dkv_split_of(1, 1024, 12, 1, 64, 32, 132, (int64_t)32 << 20);
    CHECK(mha.slices == 1 && mha.heads == 1, "group 1 split");
    const zoe_attention_dkv_split big =
        zoe_attention_dkv_split_of(8, 4096, 8, 4, 128, 32, 132, (int64_t)32 << 20);
    CHECK(big.slices == 1 && big.heads == 4, "a full grid split");
    /* No workspace for partial sums: no split. */
    const zoe_attention_dkv_split none = zoe_attention_dkv_split_of(1, 4096, 1, 8, 128, 32, 132, 0);
    CHECK(none.slices == 1, "split without workspace");
}

static void test_gemm_pass(void) {
    const int64_t seqs[] = {1, 7, 64, 1024, 2048, 4096, 4728, 4729, 8192, 32768, 131072};
    const int64_t groups[] = {1, 4, 8};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++)
        for (int g = 0; g < 3; g++) {
            const int64_t T = seqs[i], NH = 8, group = groups[g];
            const int64_t scratch = zoe_attention_gemm_scratch_bytes(T, NH);
            const zoe_attention_gemm_pass p = zoe_attention_gemm_pass_of(T, NH, group, scratch);
            CHECK(p.heads >= 1 && p.rows >= 1 && p.rows <= T && p.heads <= NH,
                  "T=%lld: pass of %lld heads x %lld rows", (long long)T, (long long)p.heads,
                  (long long)p.rows);
            CHECK(p.ld >= T && p.ld % 8 == 0, "T=%lld: ld %lld", (long long)T, (long long)p.ld);
            CHECK(p.heads * p.rows * p.ld * ZOE_ATTN_GEMM_BYTES <= scratch &&
                      scratch <= ZOE_ATTN_GEMM_BUDGET,
                  "T=%lld: the pass exceeds its scratch", (long long)T);
            CHECK(p.rows == T || p.heads == 1, "T=%lld: row blocks of several heads", (long long)T);
            CHECK(p.heads < group ? group % 1 == 0 : p.heads % group == 0,
                  "T=%lld group %lld: %lld heads cut a group", (long long)T, (long long)group,
                  (long long)p.heads);
            /* a head's whole T x T scores fit 256 MiB up to T = 4728 */
            CHECK((p.rows == T) == (T <= 4728), "T=%lld: rows %lld", (long long)T,
                  (long long)p.rows);
            /* docs/attention.md's figure: at T = 8192, 256 MiB / (8192 x 12 bytes) = 2730 rows,
             * 2688 in multiples of 64: 4 passes per head (3 x 2688 + 128) */
            if (T == 8192)
                CHECK(p.rows == 2688 && (T + p.rows - 1) / p.rows == 4,
                      "T=8192: passes of %lld rows", (long long)p.rows);
        }
}

static void test_path(void) {
    CHECK(zoe_attention_path_of(ZOE_F16, 70, 0) == ZOE_ATTN_PATH_GEMM, "fp16 on V100");
    CHECK(zoe_attention_path_of(ZOE_BF16, 70, 0) == ZOE_ATTN_PATH_FLASH, "bf16 on V100");
    CHECK(zoe_attention_path_of(ZOE_BF16, 80, 0) == ZOE_ATTN_PATH_GEMM, "bf16 on A100");
    CHECK(zoe_attention_path_of(ZOE_BF16, 90, 0) == ZOE_ATTN_PATH_GEMM, "bf16 on H100");
    CHECK(zoe_attention_path_of(ZOE_F32, 90, 0) == ZOE_ATTN_PATH_FLASH, "fp32");
    CHECK(zoe_attention_path_of(ZOE_BF16, 90, 1) == ZOE_ATTN_PATH_FLASH, "forced flash");
}

static void test_cost(void) {
    const zoe_attention_gpu h100 = archs[2].gpu, v100 = archs[0].gpu;
    /* GEMM path, one pass: 2 (forward) and 5 (backward) products of T x T x HS per head. */
    zoe_attention_shape s = {.dt = ZOE_BF16, .B = 2, .T = 1024, .NH = 8, .NKV = 2, .HS = 128};
    zoe_attention_cost f = zoe_attention_cost_of(ZOE_ATTN_FORWARD, &s, &h100, 0);
    zoe_attention_cost b = zoe_attention_cost_of(ZOE_ATTN_BACKWARD, &s, &h100, 0);
    const double square = 2.0 * 1024 * 1024 * 128 * 8 * 2;
    CHECK(f.path == ZOE_ATTN_PATH_GEMM && fabs(f.tensor_flops - 2 * square) < 1 &&
              f.cuda_flops == 0 && f.bytes > 0,
          "GEMM forward %g flops", f.tensor_flops);
    CHECK(fabs(b.tensor_flops - 5 * square) < 1, "GEMM backward %g flops", b.tensor_flops);
    /* Row blocks at T = 8192 (one head of 2688 rows per pass, 4 passes) skip the keys past each
     * block: each block's rows times the keys up to its last row, instead of 8192^2 per head. */
    s.T = 8192;
    f = zoe_attention_cost_of(ZOE_ATTN_FORWARD, &s, &h100, 0);
    const zoe_attention_gemm_pass p =
        zoe_attention_gemm_pass_of(8192, 8, 4, zoe_attention_gemm_scratch_bytes(8192, 8));
    double scores = 0;
    for (int64_t i0 = 0; i0 < 8192; i0 += p.rows) {
        const int64_t r = 8192 - i0 < p.rows ? 8192 - i0 : p.rows;
        scores += (double)r * (double)(i0 + r);
    }
    CHECK(fabs(f.tensor_flops - 2 * 2.0 * scores * 128 * 8 * 2) < 1 && p.rows < 8192,
          "row-blocked forward %g flops", f.tensor_flops);
    /* Flash (bf16 on V100): per own tile of `rows` queries, the 32-key tiles up to its last
     * query, 2 products (forward) of rows x 32 x HS; counted here over the rows instead. */
    s.T = 1000;
    f = zoe_attention_cost_of(ZOE_ATTN_FORWARD, &s, &v100, 0);
    CHECK(f.path == ZOE_ATTN_PATH_FLASH && f.rows == 32 && f.tensor_flops == 0, "V100 bf16 path");
    double pairs = 0; /* (query, key) pairs the tiles compute */
    for (int64_t q = 0; q < s.T; q++) {
        const int64_t tile_end = (q / 32 + 1) * 32 < s.T ? (q / 32 + 1) * 32 : s.T;
        pairs += (double)((tile_end - 1) / 32 + 1) * 32;
    }
    /* The tile past the sequence's end counts whole, as the kernel computes it. */
    pairs += (double)(1024 - s.T) * (double)((s.T - 1) / 32 + 1) * 32;
    CHECK(fabs(f.cuda_flops - 2 * 2.0 * pairs * 128 * 8 * 2) < 1, "flash forward %g vs %g",
          f.cuda_flops, 2 * 2.0 * pairs * 128 * 8 * 2);
    /* The causal work is a lower bound; the tiles add at most one tile's band. */
    const double causal = 2 * 2.0 * 128 * 8 * 2 * (double)s.T * (s.T + 1) / 2;
    CHECK(f.cuda_flops >= causal && f.cuda_flops <= causal * (1 + 2.0 * 64 / s.T),
          "flash forward against the causal count");
    b = zoe_attention_cost_of(ZOE_ATTN_BACKWARD, &s, &v100, 0);
    CHECK(b.cuda_flops > 3 * f.cuda_flops && b.cuda_flops < 4 * f.cuda_flops,
          "flash backward: 7 products of the forward's 2 (%g)", b.cuda_flops / f.cuda_flops);
    /* Efficiency: below the fp32 peak, and lower for smaller tiles and on 128-lane SMs. */
    CHECK(zoe_attention_flash_efficiency(32, 70) > zoe_attention_flash_efficiency(8, 70) &&
              zoe_attention_flash_efficiency(32, 90) < zoe_attention_flash_efficiency(32, 80) &&
              zoe_attention_flash_efficiency(32, 80) <= 1.0,
          "flash efficiency");
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_tiles();
    test_dkv_split();
    test_gemm_pass();
    test_path();
    test_cost();
    return test_finish("test_kernels_attention_plan");
}
