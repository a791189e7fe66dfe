/* Matmul forward and backward on the CPU: every product is one cblas_sgemm (OpenBLAS), the
 * transposes passed to BLAS as CblasTrans, never materialised.
 *
 * Who owns the cores. zoe links the pthreads build of OpenBLAS, whose pool never nests with
 * OpenMP on its own, so zoe keeps the two apart by construction:
 *  - fp32 storage: one cblas_sgemm per product, called from the calling thread outside any
 *    OpenMP region; the OpenBLAS pool (openblas_get_num_threads(), from OPENBLAS_NUM_THREADS
 *    or the core count) owns the cores for that call. The bias is copied into y before it
 *    (serially), the column sums of db run as an OpenMP region after it.
 *  - bf16 storage: OpenMP owns the cores. Each thread takes whole output tiles
 *    (up to TILE_MAX square), converts the operand tiles [.., TILE_K] it needs to fp32 in its own
 *    slice of the workspace, and runs sgemm on them single-threaded: the region is bracketed
 *    by zoe_cpu_blas_serial_begin/end, which set the OpenBLAS pool to 1 thread and back.
 *    Nothing is converted as a whole tensor, and outputs (or the += of gradients) are
 *    written back tile by tile.
 * Attention uses the same bracket for its per-block products. Idle OpenBLAS workers spin with
 * sched_yield for a while after a call, so they give way to the OpenMP threads that follow.
 * The switch is process-wide: two threads must not run zoe ops on different contexts at once
 * (the layers above issue ops from one thread per rank).
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#include <cblas.h>
#include <omp.h>
#include "kernels/cpu/cpu_util.h"

/* bf16 output tiles are at most TILE_MAX x TILE_MAX over TILE_K-deep slices: the three fp32
 * tiles total 768 KiB, about one L2. Every operand tile is converted once per output tile that
 * needs it, so conversions cost ~1/TILE_MAX of the flops each side: tiles stay large, shrunk
 * (down to TILE_MIN) only to give every thread at least two output tiles. */
enum { TILE_MAX = 256, TILE_MIN = 64, TILE_K = 256 };
/* Columns per task of the db column sums (a stack accumulator). */
enum { DB_COLUMNS = 128 };

size_t zoe_cpu_matmul_thread_floats(const zoe_kernel_plan *plan) {
    (void)plan;
    return (size_t)TILE_MAX * TILE_MAX + 2 * (size_t)TILE_MAX * TILE_K;
}

static CBLAS_TRANSPOSE blas_op(int trans) {
    return trans ? CblasTrans : CblasNoTrans;
}
static int64_t tiles_of(int64_t n, int64_t tile) {
    return (n + tile - 1) / tile;
}

/* Output tile sizes for an m x n product on `threads` threads (see TILE_MAX). */
static void pick_tiles(int64_t m, int64_t n, int threads, int64_t *tm, int64_t *tn) {
    *tm = zoe_cpu_min64(m, TILE_MAX);
    *tn = zoe_cpu_min64(n, TILE_MAX);
    while (tiles_of(m, *tm) * tiles_of(n, *tn) < 2 * (int64_t)threads) {
        int64_t *wider = *tn >= *tm ? tn : tm;
        if (*wider <= TILE_MIN) break;
        *wider = (*wider / 2 + 15) / 16 * 16;
    }
}

/* One stored operand: op(X) is X (trans 0) or X^T (trans 1); ld is the stored row stride. */
typedef struct operand {
    const void *data;
    int64_t ld;
    int trans;
} operand;

/* Rows [r0, r0 + rows) and columns [c0, c0 + cols) of op(X) as an fp32 tile laid out as the
 * matching block of the stored X (so the transpose stays with BLAS); returns its row stride. */
static int64_t load_operand_tile(float *tile, operand x, zoe_dtype dt, int64_t r0, int64_t c0,
                                 int64_t rows, int64_t cols) {
    if (!x.trans) {
        zoe_cpu_load_tile(tile, x.data, dt, x.ld, r0, c0, rows, cols);
        return cols;
    }
    zoe_cpu_load_tile(tile, x.data, dt, x.ld, c0, r0, cols, rows);
    return rows;
}

/* c[m, n] (row stride ldc) = op(a)[m, k] . op(b)[k, n], plus c itself when accumulate, plus
 * bias[n] on every row when bias is not NULL: fp32 storage, one sgemm on the BLAS pool. */
static void gemm_f32(operand a, operand b, float *c, int64_t ldc, int64_t m, int64_t n, int64_t k,
                     int accumulate, const float *bias) {
    if (bias) {
        /* A serial copy: memory-bound, and no OpenMP team left spinning while the BLAS pool
         * starts on the same cores. */
        for (int64_t i = 0; i < m; i++) {
            float *row = c + i * ldc;
            if (accumulate) {
#pragma omp simd
                for (int64_t j = 0; j < n; j++) row[j] += bias[j];
            } else {
                memcpy(row, bias, (size_t)n * sizeof(float));
            }
        }
    }
    const float beta = accumulate || bias ? 1.0f : 0.0f;
    if (k > 0) {
        cblas_sgemm(CblasRowMajor, blas_op(a.trans), blas_op(b.trans), (int)m, (int)n, (int)k, 1.0f,
                    a.data, (int)a.ld, b.data, (int)b.ld, beta, c, (int)ldc);
    } else if (beta == 0.0f) {
        for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
    }
}

/* The same product for bf16 storage: OpenMP over output tiles, each thread converting the
 * operand tiles it needs and running sgemm on them single-threaded. */
static void gemm_tiled(const zoe_cpu_kernels *ck, zoe_dtype dt, operand a, operand b, void *c,
                       int64_t ldc, int64_t m, int64_t n, int64_t k, int accumulate,
                       const void *bias) {
    int64_t tm, tn;
    pick_tiles(m, n, ck->threads, &tm, &tn);
    const int64_t tiles_n = tiles_of(n, tn), tiles = tiles_of(m, tm) * tiles_n;
    int saved = zoe_cpu_blas_serial_begin();
#pragma omp parallel for num_threads(ck->threads) schedule(dynamic, 1)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t i0 = t / tiles_n * tm, j0 = t % tiles_n * tn;
        const int64_t mb = zoe_cpu_min64(tm, m - i0), nb = zoe_cpu_min64(tn, n - j0);
        float *ct = zoe_cpu_thread_scratch(ck, omp_get_thread_num());
        float *at = ct + TILE_MAX * TILE_MAX, *bt = at + TILE_MAX * TILE_K;
        if (accumulate)
            zoe_cpu_load_tile(ct, c, dt, ldc, i0, j0, mb, nb);
        else
            memset(ct, 0, (size_t)(mb * nb) * sizeof(float));
        if (bias) {
            zoe_cpu_load_tile(bt, bias, dt, 0, 0, j0, 1, nb);
            for (int64_t i = 0; i < mb; i++) {
#pragma omp simd
                for (int64_t j = 0; j < nb; j++) ct[i * nb + j] += bt[j];
            }
        }
        for (int64_t p0 = 0; p0 < k; p0 += TILE_K) {
            const int64_t kb = zoe_cpu_min64(TILE_K, k - p0);
            int64_t lda = load_operand_tile(at, a, dt, i0, p0, mb, kb);
            int64_t ldb = load_operand_tile(bt, b, dt, p0, j0, kb, nb);
            cblas_sgemm(CblasRowMajor, blas_op(a.trans), blas_op(b.trans), (int)mb, (int)nb,
                        (int)kb, 1.0f, at, (int)lda, bt, (int)ldb, 1.0f, ct, (int)nb);
        }
        zoe_cpu_store_tile(ck, c, dt, ldc, i0, j0, ct, mb, nb, 0);
    }
    zoe_cpu_blas_serial_end(saved);
}

static void gemm(const zoe_cpu_kernels *ck, zoe_dtype dt, operand a, operand b, void *c,
                 int64_t ldc, int64_t m, int64_t n, int64_t k, int accumulate, const void *bias) {
    if (m == 0 || n == 0) return;
    if (dt == ZOE_F32)
        gemm_f32(a, b, c, ldc, m, n, k, accumulate, bias);
    else
        gemm_tiled(ck, dt, a, b, c, ldc, m, n, k, accumulate, bias);
}

/* db[n] += sum over the m rows of dy[m, n]: each task owns DB_COLUMNS columns and sums the
 * rows in order, so the result does not depend on the thread count. */
static void column_sums_into(const zoe_cpu_kernels *ck, zoe_dtype dt, void *db, const void *dy,
                             int64_t m, int64_t n) {
    const int64_t tasks = (n + DB_COLUMNS - 1) / DB_COLUMNS;
#pragma omp parallel for num_threads(ck->threads) schedule(static) if (m * n > 65536)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t c0 = t * DB_COLUMNS, nc = zoe_cpu_min64(DB_COLUMNS, n - c0);
        float acc[DB_COLUMNS] = {0}, buf[DB_COLUMNS];
        for (int64_t r = 0; r < m; r++) {
            zoe_cpu_accumulate(ck->isa, acc, zoe_cpu_load(dy, dt, r * n + c0, nc, buf), nc);
        }
        zoe_cpu_add_into(ck, dt, db, c0, acc, nc, buf);
    }
}

zoe_status zoe_cpu_matmul_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x,
                                  const void *w, const void *b, int64_t M, int64_t K, int64_t N) {
    /* y[M,N] = x[M,K] . w[N,K]^T + b */
    gemm(ck, dt, (operand){x, K, 0}, (operand){w, K, 1}, y, N, M, N, K, 0, b);
    return ZOE_OK;
}

zoe_status zoe_cpu_matmul_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, void *dw, void *db,
                                   const void *dy, const void *x, const void *w, int64_t M,
                                   int64_t K, int64_t N) {
    /* dx[M,K] += dy[M,N] . w[N,K] */
    if (dx) gemm(ck, dt, (operand){dy, N, 0}, (operand){w, K, 0}, dx, K, M, K, N, 1, NULL);
    /* dw[N,K] += dy[M,N]^T . x[M,K] */
    if (dw) gemm(ck, dt, (operand){dy, N, 1}, (operand){x, K, 0}, dw, K, N, K, M, 1, NULL);
    if (db) column_sums_into(ck, dt, db, dy, M, N);
    return ZOE_OK;
}
