// vt-cuda-attention-wgmma.cuh - attention_wgmma_kernel, FlashAttention-3 style on Hopper
// (sm_90a: TMA, mbarriers, wgmma), with its TMA maps and launcher. Same op and CPU twin as
// attention_kernel (vt-cuda-attention.cuh).
#pragma once

#include "vt-cuda-common.cuh"
#include "vt-cuda-ptx.cuh"

#include <cuda.h>

// attention_wgmma_kernel: the same op as attention_kernel, for Hopper (sm_90a): wgmma, TMA and
// mbarriers in FlashAttention-3's structure. NC consumer warpgroups of 64 query rows each (2 or 3:
// see the launcher for which). Work tile: (64 NC queries, head, window), n_work =
// ceil(n_ctx / 64 NC) * n_head * B of them, numbered query tile fastest (neighbouring blocks
// share a head's K/V in L2). Persistent: grid = min(n_work, SMs) blocks of 128 (NC + 1) threads
// = NC + 1 warpgroups, one block per SM; block i takes work tiles i, i + grid, ... (a grid of
// n_work gives one tile a block: dev/cuda/attention.cu measures the difference).
//   Roles (warp-specialised):
//     warpgroup 0, the producer: gives its registers away (setmaxnreg.dec 24); one thread
//       issues TMA copies: per work tile the Q tile (once the consumers released the last),
//       then K and V tiles of 128 keys into a ring of ATT_WG_STAGES stages that runs on
//       across work tiles, each stage refilled once every consumer released it.
//     warpgroups 1 .. NC, the consumers (setmaxnreg.inc: the registers left, below): consumer c
//       owns query rows [64c, 64c + 64) of the tile. Per key tile j:
//         S = Q K^T     wgmma m64n128k16 x 4 (k = 64 dims), A = Q and B = K from shared memory
//         softmax       online, f32 in registers: S is 64 x 128, each thread 2 rows x 32 keys
//                       (the wgmma accumulator layout), row max/sum over the 4 lanes of a quad
//         O += P V      wgmma m64n64k16 x 8 (k = 128 keys), A = P from registers (the S
//                       accumulator converted to 16-bit pairs is exactly wgmma's register-A
//                       fragment), B = V from shared memory, transposed (MN-major)
//       pipelined inside the warpgroup (FA3's intra-warpgroup overlap): S of tile j is issued
//       before P V of tile j - 1, and the softmax of tile j runs while P V of tile j - 1 is
//       still on the tensor cores; O is rescaled and P rewritten only after that P V is done.
//       PP (FA3's ping-pong; false leaves it out, an instance only dev/cuda/attention.cu makes,
//       to measure what it brings): the consumers take
//       turns issuing their GEMMs, in a ring (named barrier 3 + c is consumer c's turn), so
//       one's softmax runs while another's GEMMs hold the tensor cores.
//       O goes from registers straight to global memory (normalised, 4-byte pairs), so the
//       next work tile's Q may land while this one finishes.
//   Why 3 consumers: at head_dim 64 a key tile's softmax (an exp2 per score) costs about what
//   its two GEMMs cost, so with 2 consumers the tensor cores wait whenever both are in their
//   softmax; a third keeps them busier (FlashAttention-3 runs head_dim 64 with 192-row tiles).
//   It costs registers (160 a consumer thread instead of 240) and wider tiles, which leave more
//   of the last wave idle when there are few (attention_wgmma_consumers weighs the two;
//   docs/BENCHMARKS.md has the measurements).
//   Barriers (mbarrier, one phase per use, waited on by parity): q_full (TMA bytes of Q),
//   q_empty (4 NC arrivals: one per consumer warp once its last S of the work tile is done),
//   k_full[s], v_full[s] (TMA bytes of a stage's K, V: S needs only K, so it starts before V
//   lands), kv_empty[s] (4 NC arrivals: one per consumer warp after its P V of that stage).
//   Shared memory (1024-byte aligned; a K or V tile is 128 rows x 128 bytes = 16 KB, the Q tile
//   64 NC rows, as TMA's SWIZZLE_128B writes them: 16-byte chunk c of row r at chunk c ^ (r % 8)):
//     sQ [64 NC rows]  |  sK [STAGES][128 keys]  |  sV [STAGES][128 keys]  |  mbarriers
//   Masking: Q and K/V rows past n_ctx arrive from TMA as zeros (its bounds are the view's
//   n_ctx rows of window b); keys from n_kv on (n_ctx, or kv_len[b]) are set to -inf in S on
//   the last tile, and tiles wholly past n_kv are never loaded. block (vt_attention_blocks; 0:
//   none): a work tile reads the key tiles from its first row's block start to its last row's
//   block end (below n_kv; at least one), each score outside its row's [lo, lo + block) below
//   n_kv is -inf, and a row with no key (its block past n_kv) comes out 0 (attention_kernel's rule).
//   block < 0 (vt_attention_block_causal): blocks of -block rows, each row's keys from 0 (its own
//   block and every earlier one), the work tile's from key 0.
//   Registers: ptxas gives each thread 65536 / (128 (NC + 1)) at launch (168 for NC 2, 128 for
//   NC 3); the producer drops to 24 and the consumers take the rest (240 or 160).
//   q/k/v: TMA maps over [B][n_ctx][n_head * 64] with the views' strides (made at launch).
//   CPU twin: cpu_backend::attention in vt.cpp.
static const int ATT_WG_BC = 128, ATT_WG_STAGES = 3;
static const int ATT_WG_TILE = 128 * 128;       // bytes of one K or V tile: 128 rows x 64 16-bit elements

template <int NC> struct att_wg_shape {
    static constexpr int BR = 64 * NC;                                    // query rows of a work tile
    static constexpr int THREADS = 128 * (NC + 1);
    static constexpr int PRODUCER_REGS = 24;
    static constexpr int CONSUMER_REGS = (65536 / 128 - PRODUCER_REGS) / NC / 8 * 8;   // 240, 160
};

static size_t attention_wgmma_smem_bytes(int nc) {
    return 1024 + (size_t)nc * 64 * 128 + (size_t)ATT_WG_TILE * 2 * ATT_WG_STAGES + 8 * (2 + 3 * ATT_WG_STAGES);
}

template <typename T, bool PP, int NC>
__global__ void __launch_bounds__(att_wg_shape<NC>::THREADS, 1)
attention_wgmma_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, T * __restrict__ out, int n_ctx, int n_head, int B,
                       float scale_log2, const float * __restrict__ kv_len, int block) {
#if VT_SM90A
    constexpr int BR = att_wg_shape<NC>::BR, BC = ATT_WG_BC, ST = ATT_WG_STAGES, TILE = ATT_WG_TILE;
    const bool causal = block < 0;           // vt_attention_block_causal: keys from 0 to the block's end
    if (causal) block = -block;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;     // shared-space addresses (bytes)
    const uint32_t sK = sQ + BR * 128;
    const uint32_t sV = sK + ST * TILE;
    const uint32_t bars = sV + ST * TILE;
    const uint32_t q_full = bars, q_empty = bars + 8;
    auto k_full = [&](int s) { return bars + 8 * (2 + s); };
    auto v_full = [&](int s) { return bars + 8 * (2 + ST + s); };
    auto kv_empty = [&](int s) { return bars + 8 * (2 + 2 * ST + s); };

    const int tid = threadIdx.x, wg = tid / 128;
    const int n_qt = (n_ctx + BR - 1) / BR, n_work = n_qt * n_head * B;
    // work tile w: query tile, head, window, and the number of key tiles it reads
    struct work { int q0, h, b, n_kv, j0, n_tiles; };   // key tiles [j0, j0 + n_tiles)
    auto decode = [&](int w) {
        work t;
        t.q0 = (w % n_qt) * BR;
        t.h = (w / n_qt) % n_head;
        t.b = w / (n_qt * n_head);
        t.n_kv = kv_len ? max(1, min(n_ctx, (int)kv_len[t.b])) : n_ctx;   // keys this window attends to
        int k_lo = 0, k_hi = t.n_kv;
        if (block) {
            k_lo = causal ? 0 : t.q0 / block * block;
            k_hi = min(t.n_kv, ((min(t.q0 + BR, n_ctx) - 1) / block + 1) * block);
        }
        t.j0 = k_lo / BC;
        t.n_tiles = max(1, (k_hi + BC - 1) / BC - t.j0);
        return t;
    };

    if (tid == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, 4 * NC);
        for (int s = 0; s < ST; s++) {
            mbar_init(k_full(s), 1);
            mbar_init(v_full(s), 1);
            mbar_init(kv_empty(s), 4 * NC);
        }
        mbar_fence_init();
    }
    __syncthreads();

    // ---- producer ----
    if (wg == 0) {
        setmaxnreg_dec<att_wg_shape<NC>::PRODUCER_REGS>();
        if (tid == 0) {
            int it = 0;                                 // K/V tiles loaded so far: stage it % ST, round it / ST
            int wi = 0;                                 // work tiles so far: Q's round
            for (int w = blockIdx.x; w < n_work; w += gridDim.x, wi++) {
                const work t = decode(w);
                mbar_wait(q_empty, (wi & 1) ^ 1);       // the last Q released (passes at once the first time)
                mbar_arrive_expect_tx(q_full, BR * 128);
                tma_load_3d(sQ, &tm_q, q_full, t.h * 64, t.q0, t.b);
                for (int j = 0; j < t.n_tiles; j++, it++) {
                    const int s = it % ST;
                    mbar_wait(kv_empty(s), ((it / ST) & 1) ^ 1);
                    mbar_arrive_expect_tx(k_full(s), TILE);
                    tma_load_3d(sK + s * TILE, &tm_k, k_full(s), t.h * 64, (t.j0 + j) * BC, t.b);
                    mbar_arrive_expect_tx(v_full(s), TILE);
                    tma_load_3d(sV + s * TILE, &tm_v, v_full(s), t.h * 64, (t.j0 + j) * BC, t.b);
                }
            }
        }
        return;
    }

    // ---- consumers ----
    setmaxnreg_inc<att_wg_shape<NC>::CONSUMER_REGS>();
    const int cw = wg - 1;                              // rows [64 cw, 64 cw + 64) of the tile
    const int warp = (tid % 128) / 32, lane = tid % 32, t4 = lane % 4;
    const uint64_t dq = sw128_desc(sQ + cw * 64 * 128);
    const uint64_t dk = sw128_desc(sK), dv = sw128_desc(sV);
    // descriptor + bytes: the start address field counts 16-byte units in the low bits
    auto at = [](uint64_t d, uint32_t bytes) { return d + (bytes >> 4); };

    float s[64];            // S accumulator: s[4j + e], key column 8j + 2 t4 + (e & 1), row +8 if e >= 2
    float o[32];            // O accumulator, the same layout over 64 dims
    uint32_t p[32];         // P as register-A fragments: p[4kk .. 4kk + 3] for keys [16kk, 16kk + 16)
    float m_run[2], l_run[2];                           // rows l/4, l/4 + 8 of this warp's 16

    // S = Q K^T for the tile in stage st (issued, not waited on)
    auto issue_s = [&](int st) {
#pragma unroll
        for (int ks = 0; ks < 4; ks++) wgmma_m64n128k16_ss<T>(s, at(dq, ks * 32), at(dk, st * TILE + ks * 32), ks > 0);
        wgmma_commit();
    };
    // O += P V for the tile in stage st (issued, not waited on)
    auto issue_pv = [&](int st) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) wgmma_m64n64k16_rs<T>(o, &p[4 * kk], at(dv, st * TILE + kk * 16 * 128));
        wgmma_commit();
    };
    // Masks key tile j past n_kv (with blocks: outside each row's block, q0 the work tile's first
    // query), updates the running max and sum, turns S into exp values in place; alpha: what O's
    // rows must be scaled by.
    auto softmax = [&](int j, int n_kv, int q0, float (&alpha)[2]) {
        if (!block && (j + 1) * BC > n_kv) {
#pragma unroll
            for (int i = 0; i < 64; i++)
                if (j * BC + (i / 4) * 8 + 2 * t4 + (i & 1) >= n_kv) s[i] = -INFINITY;
        }
        if (block) {
#pragma unroll
            for (int i = 0; i < 64; i++) {
                const int qi = q0 + cw * 64 + warp * 16 + lane / 4 + ((i & 2) ? 8 : 0);
                const int key = j * BC + (i / 4) * 8 + 2 * t4 + (i & 1);
                const int start = qi / block * block, lo = causal ? 0 : start, hi = min(start + block, n_kv);
                if (key < lo || key >= hi) s[i] = -INFINITY;
            }
        }
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float mx = -INFINITY;
#pragma unroll
            for (int jn = 0; jn < 16; jn++) mx = fmaxf(mx, fmaxf(s[4 * jn + 2 * hf], s[4 * jn + 2 * hf + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // finite but with blocks, where a row may have had no key yet: then 0 (alpha 0, P 0)
            const float m_new = fmaxf(m_run[hf], mx), m_use = m_new == -INFINITY ? 0.0f : m_new;
            alpha[hf] = exp2_ftz((m_run[hf] - m_use) * scale_log2); // 0 on the first tile
            const float ms = m_use * scale_log2;
            m_run[hf] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int jn = 0; jn < 16; jn++)
#pragma unroll
                for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                    const float pv = exp2_ftz(fmaf(s[4 * jn + e], scale_log2, -ms));
                    s[4 * jn + e] = pv;
                    sum += pv;
                }
            l_run[hf] = l_run[hf] * alpha[hf] + sum;
        }
    };
    // O *= alpha (per row), P = S in T, packed as register-A fragments
    auto rescale_and_pack = [&](const float (&alpha)[2]) {
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] *= alpha[(i >> 1) & 1];
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            p[4 * kk + 0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);   // row r,     keys 16kk + 2t4 (+1)
            p[4 * kk + 1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);   // row r + 8, the same keys
            p[4 * kk + 2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);   // row r,     keys + 8
            p[4 * kk + 3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);   // row r + 8, keys + 8
        }
    };
    // a stage's K and V (or the Q tile) may be overwritten: one arrival per warp, after the
    // wgmma wait that covers its last reader
    auto release = [&](uint32_t bar) {
        if (lane == 0) mbar_arrive(bar);
    };
    // ping-pong: before issuing GEMMs a consumer waits for its turn (barrier 3 + cw: its own
    // 128 threads and the previous consumer's 128 arrivals), after them it passes the turn to
    // the next in the ring. All take the same turns (n_tiles + 1 a work tile); the last
    // consumer hands consumer 0 the first turn and keeps its very last pass (consumer 0 takes
    // no turn after it): every phase is matched.
    auto turn_wait = [&]() {
        if (PP) named_barrier_sync(3 + cw, 256);
    };
    auto turn_pass = [&](bool last) {
        if (PP && !(last && cw == NC - 1)) named_barrier_arrive(3 + (cw + 1) % NC, 256);
    };
    if (PP && cw == NC - 1) named_barrier_arrive(3, 256);

    int it = 0;                                         // K/V tiles consumed so far (as the producer counts)
    int wi = 0;                                         // work tiles so far
    for (int w = blockIdx.x; w < n_work; w += gridDim.x, wi++) {
        const work t = decode(w);
        const bool last_work = w >= n_work - (int)gridDim.x;
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = 0.0f;
        m_run[0] = m_run[1] = -INFINITY;
        l_run[0] = l_run[1] = 0.0f;

        // key tile 0: S, softmax, P
        mbar_wait(q_full, wi & 1);
        mbar_wait(k_full(it % ST), (it / ST) & 1);
        turn_wait();
        wgmma_fence();
        issue_s(it % ST);
        turn_pass(false);
        wgmma_wait<0>();
        reg_fence(s);
        if (t.n_tiles == 1) release(q_empty);
        {
            float alpha[2];
            softmax(t.j0, t.n_kv, t.q0, alpha);
            rescale_and_pack(alpha);
        }
        // key tile j: S of j and P V of j - 1 on the tensor cores, then softmax of j beside P V
        for (int j = 1; j < t.n_tiles; j++) {
            const int ic = it + j, ip = it + j - 1;     // ring positions of tiles j and j - 1
            mbar_wait(k_full(ic % ST), (ic / ST) & 1);
            turn_wait();
            wgmma_fence();                              // p and o were written since the last wgmma
            issue_s(ic % ST);
            mbar_wait(v_full(ip % ST), (ip / ST) & 1);
            wgmma_fence();
            issue_pv(ip % ST);
            turn_pass(false);
            wgmma_wait<1>();                            // S of tile j is ready
            reg_fence(s);
            if (j == t.n_tiles - 1) release(q_empty);   // Q's last reader is done
            float alpha[2];
            softmax(t.j0 + j, t.n_kv, t.q0, alpha);
            wgmma_wait<0>();                            // P V of tile j - 1 is done
            reg_fence(o);
            reg_fence(p);
            release(kv_empty(ip % ST));
            rescale_and_pack(alpha);
        }
        {
            const int il = it + t.n_tiles - 1;
            mbar_wait(v_full(il % ST), (il / ST) & 1);
            turn_wait();
            wgmma_fence();
            issue_pv(il % ST);
            turn_pass(last_work);
            wgmma_wait<0>();
            reg_fence(o);
            reg_fence(p);
            release(kv_empty(il % ST));
        }
        it += t.n_tiles;

        // normalise; rows warp*16 + l/4 (+8) of this consumer's 64, dims 8dn + 2 t4 (+1)
        const int64_t o_row = (int64_t)n_head * 64;
        T * og = out + (int64_t)t.b * n_ctx * o_row + t.h * 64 + 2 * t4;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float l = l_run[hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;   // l 0: a row with no key (blocks)
            const int qi = t.q0 + cw * 64 + warp * 16 + lane / 4 + hf * 8;
            if (qi < n_ctx) {
#pragma unroll
                for (int dn = 0; dn < 8; dn++)
                    *reinterpret_cast<uint32_t *>(og + (int64_t)qi * o_row + dn * 8) =
                        pack2<T>(o[4 * dn + 2 * hf] * inv, o[4 * dn + 2 * hf + 1] * inv);
            }
        }
    }
#else
    __trap();   // never launched: the host picks attention_kernel off sm_90a
#endif
}

// ---- launching it: TMA maps, then the persistent grid ----

// cuTensorMapEncodeTiled, found in the driver through the runtime (no -lcuda); null when the
// driver has none (then attention_kernel runs).
typedef CUresult (*tensor_map_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                         const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                         CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// Looked up once per process (a function-local static: its initialisation is thread-safe, so
// backends started from several threads at once find the same address).
static tensor_map_encode_fn tensor_map_encode() {
    static const tensor_map_encode_fn encode = [] {
        void * fn = nullptr;
        cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr);
#else
        const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &qr);
#endif
        if (err != cudaSuccess || qr != cudaDriverEntryPointSuccess || !fn) {
            cudaGetLastError();
            return (tensor_map_encode_fn) nullptr;
        }
        return (tensor_map_encode_fn)fn;
    }();
    return encode;
}

// A TMA map over one of q, k, v: [B windows][n_ctx rows][n_head * 64 columns] with the view's
// strides; boxes of 64 columns (one head) x box_rows rows, 128-byte swizzle, out of bounds -> 0.
static bool make_attention_map(CUtensorMap * map, const vt_tensor * x, int n_ctx, int B, int box_rows) {
    const cuuint64_t row = x->nb[1];
    const cuuint64_t win = B > 1 ? (cuuint64_t)x->nb[2] : row * (cuuint64_t)n_ctx;   // unused when B = 1
    const cuuint64_t dims[3] = {(cuuint64_t)x->ne[0], (cuuint64_t)n_ctx, (cuuint64_t)B};
    const cuuint64_t strides[2] = {row, win};
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1}, elem_strides[3] = {1, 1, 1};
    const CUtensorMapDataType dt = x->type == VT_TYPE_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    return tensor_map_encode()(map, dt, 3, x->data, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// 3 consumers (192-row tiles) unless the last wave makes them slower than 2: a tiling's time is
// the query rows of its busiest block, ceil(tiles / SMs) tiles of 64 NC rows, over its speed a
// row. ATT_WG_192_SPEEDUP: how much faster a row 192-row tiles run where both fill the machine,
// measured on an H100 at large-v3's batch 32 (TFLOP/s ratio times the busiest block's row
// ratio; docs/BENCHMARKS.md). On 132 SMs this keeps 2 consumers for large-v3 at batches 1 and 2
// and takes 3 from batch 3 on.
static const double ATT_WG_192_SPEEDUP = 1.11;   // 477 / 424 TFLOP/s x 7488 / 7552 rows

static int attention_wgmma_consumers(int n_ctx, int n_head, int B, int n_sm) {
    auto busiest_rows = [&](int nc) { return ceil_div(ceil_div(n_ctx, 64 * nc) * n_head * B, n_sm) * 64 * nc; };
    return busiest_rows(3) <= ATT_WG_192_SPEEDUP * busiest_rows(2) ? 3 : 2;
}

// One instance of the kernel on node t. PP false and one_tile (a grid of n_work blocks rather
// than persistent ones) are measurement variants: only dev/cuda/attention.cu asks for them.
template <typename T, bool PP, int NC>
static bool launch_attention_wgmma_nc(const launch_ctx & lc, vt_tensor * t, bool one_tile, bool * launched) {
    const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
    const int n_head = t->iparams[0];
    const int n_ctx = (int)q->ne[1], B = (int)q->ne[2];
    alignas(64) CUtensorMap mq, mk, mv;
    if (!make_attention_map(&mq, q, n_ctx, B, att_wg_shape<NC>::BR) || !make_attention_map(&mk, k, n_ctx, B, ATT_WG_BC) ||
        !make_attention_map(&mv, v, n_ctx, B, ATT_WG_BC)) return true;
    const int64_t n_work = ceil_div(n_ctx, att_wg_shape<NC>::BR) * n_head * B;
    if (n_work > INT32_MAX / 2) return true;          // (w += grid must not overflow an int)
    const float scale_log2 = t->fparams[0] * 1.4426950408889634f;
    const int grid = one_tile ? (int)n_work : (int)std::min<int64_t>(n_work, lc.n_sm);
    attention_wgmma_kernel<T, PP, NC><<<grid, att_wg_shape<NC>::THREADS, attention_wgmma_smem_bytes(NC), lc.stream>>>(
        mq, mk, mv, (T *)t->data, n_ctx, n_head, B, scale_log2, t->src[3] ? (const float *)t->src[3]->data : nullptr,
        t->iparams[2] ? -t->iparams[1] : t->iparams[1]);
    LAUNCH_CHECK("attention_wgmma_kernel");
    *launched = true;
    return true;
}

// false (nothing launched, no error) when a view's strides do not fit TMA's rules: the caller
// then runs attention_kernel.
// The library's launch: persistent blocks with ping-pong, the tile height by
// attention_wgmma_consumers.
template <typename T>
static bool launch_attention_wgmma(const launch_ctx & lc, vt_tensor * t, bool * launched) {
    *launched = false;
    const int nc = attention_wgmma_consumers((int)t->src[0]->ne[1], t->iparams[0], (int)t->src[0]->ne[2], lc.n_sm);
    if (nc == 3) return launch_attention_wgmma_nc<T, true, 3>(lc, t, false, launched);
    return launch_attention_wgmma_nc<T, true, 2>(lc, t, false, launched);
}

// An instance takes more shared memory than the default 48 KB: allowed once, before its launch.
template <typename T, bool PP, int NC>
static bool allow_attention_wgmma_smem_nc() {
    CUDA_CHECK(cudaFuncSetAttribute(attention_wgmma_kernel<T, PP, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)attention_wgmma_smem_bytes(NC)));
    return true;
}

// ... for the library's instances (launch_attention_wgmma), at init.
template <typename T>
static bool allow_attention_wgmma_smem() {
    return allow_attention_wgmma_smem_nc<T, true, 2>() && allow_attention_wgmma_smem_nc<T, true, 3>();
}
