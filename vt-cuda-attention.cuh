// vt-cuda-attention.cuh - attention_kernel, FlashAttention-2 style on mma.sync (sm_80+), and
// attention_window_kernel (vt_attention_window), with
// its checks and launcher. The op is vt_attention (vt.h); its CPU twin is cpu_backend::attention
// in vt.cpp. The Hopper kernel of the same op is in vt-cuda-attention-wgmma.cuh; launch_attention
// in vt-cuda.cu picks one.
#pragma once

#include "vt-cuda-common.cuh"
#include "vt-cuda-ptx.cuh"

// attention_kernel: out[b, i, h*64 + d] = sum_j softmax_j(q_i . k_j * scale) v[j, d], over
// all n_ctx keys (non-causal), for one (query tile, head, window) per block:
//   grid (ceil(n_ctx / BR), n_head, B), 128 threads = 4 warps, BR = 64 * MT query rows;
//   warp w owns rows [w * 16 * MT, (w + 1) * 16 * MT) of the tile: MT m16 tiles whose Q
//   fragments stay in registers for the whole key loop.
//   Keys go by tiles of 64 (BC): K and V tiles double-buffered in shared memory through
//   cp.async (tile j + 1 loads while tile j computes). Per tile, per warp:
//     S = Q K^T (mma m16n8k16, f32), masked to -inf past n_ctx on the last tile,
//     online softmax in f32 (running max m and sum l per row, exp2 with the scale folded
//     into scale_log2 = scale * log2 e), P rounded to T and fed from registers as the A
//     operand of O += P V (V fragments via ldmatrix.trans).
//   Rows past n_ctx compute on zero queries and are not stored; keys past n_ctx are
//   zero-filled (so P = 0 meets finite V) and masked.
//   kv_len (vt_attention_masked; may be null): window b's keys from kv_len[b] on are masked
//   the same way, and the tiles wholly past it are skipped.
//   block (vt_attention_blocks; 0: none): query i sees only keys [lo, hi), lo = i rounded down
//   to a block, hi = min(lo + block, n_kv). The block reads the key tiles from its first row's
//   lo to its last row's hi (at least one), masks each score outside its row's range to -inf,
//   and a row with no key at all (its block past n_kv) comes out 0. block < 0
//   (vt_attention_block_causal): blocks of -block rows, and lo = 0 (a row sees its own block
//   and every earlier one); the tiles read start at key 0.
//   Shared memory rows are 64 elements = 8 chunks of 16 bytes; chunk c of row r sits at
//   slot c ^ (r & 7), so ldmatrix's 8 row reads and cp.async's row writes hit distinct banks.
//   q/k/v rows: strides in elements (row, window); head h starts at column h * 64.
//   CPU twin: cpu_backend::attention in vt.cpp.
static const int ATT_HD = 64, ATT_BC = 64, ATT_THREADS = 128;

template <typename T, int MT>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_kernel(const T * __restrict__ q, const T * __restrict__ k, const T * __restrict__ v, T * __restrict__ out,
                 int n_ctx, int n_head, int64_t q_row, int64_t q_win, int64_t k_row, int64_t k_win,
                 int64_t v_row, int64_t v_win, float scale_log2, const float * __restrict__ kv_len, int block) {
    constexpr int BR = 16 * MT * 4;
    extern __shared__ uint4 smem[];
    uint4 * sQ = smem;                       // [BR][8] chunks; reused to stage the output
    uint4 * sK = smem + BR * 8;              // [2][BC][8]
    uint4 * sV = sK + 2 * ATT_BC * 8;        // [2][BC][8]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
    const T * qg = q + b * q_win + h * ATT_HD;
    const T * kg = k + b * k_win + h * ATT_HD;
    const T * vg = v + b * v_win + h * ATT_HD;
    const int n_kv = kv_len ? max(1, min(n_ctx, (int)kv_len[b])) : n_ctx;   // keys this window attends to
    const bool causal = block < 0;           // vt_attention_block_causal: keys from 0 to the block's end
    if (causal) block = -block;
    // key tiles [j0, j0 + n_tiles): all of them up to n_kv, or the blocks of this tile's rows
    int k_lo = 0, k_hi = n_kv;
    if (block) {
        k_lo = causal ? 0 : q0 / block * block;
        k_hi = min(n_kv, ((min(q0 + BR, n_ctx) - 1) / block + 1) * block);
    }
    const int j0 = k_lo / ATT_BC;
    const int n_tiles = max(1, (k_hi + ATT_BC - 1) / ATT_BC - j0);

    // Q tile (rows past n_ctx zero-filled)
#pragma unroll
    for (int c = tid; c < BR * 8; c += ATT_THREADS) {
        const int r = c / 8, ch = c % 8, qi = q0 + r;
        const bool ok = qi < n_ctx;
        cp_async16(smem_addr(&sQ[r * 8 + (ch ^ (r & 7))]), qg + (int64_t)(ok ? qi : 0) * q_row + ch * 8, ok);
    }
    auto load_kv = [&](int tile, int buf) {
        uint4 * dk = sK + buf * ATT_BC * 8;
        uint4 * dv = sV + buf * ATT_BC * 8;
#pragma unroll
        for (int c = tid; c < ATT_BC * 8; c += ATT_THREADS) {
            const int r = c / 8, ch = c % 8, kj = tile * ATT_BC + r;
            const bool ok = kj < n_kv;
            const int slot = r * 8 + (ch ^ (r & 7));
            cp_async16(smem_addr(&dk[slot]), kg + (int64_t)(ok ? kj : 0) * k_row + ch * 8, ok);
            cp_async16(smem_addr(&dv[slot]), vg + (int64_t)(ok ? kj : 0) * v_row + ch * 8, ok);
        }
    };
    load_kv(j0, 0);
    cp_async_commit();

    const int g = lane / 4, t4 = lane % 4;      // mma fragment coordinates: row group, thread in quad
    const int wr = warp * 16 * MT;              // this warp's first row in the tile

    // ldmatrix addresses: every row this lane points at is = lane (mod 8), so the swizzle
    // term is a per-lane constant; what varies in the loop is a compile-time offset.
    //   K (S = Q K^T): row jn*8 + lane%8, chunk (p*4 + lane/8) ^ (lane%8)
    //   V (O += P V):  row kk*16 + lane%8 + (lane/8 & 1)*8, chunk (dp*2 + lane/16) ^ (lane%8)
    const uint32_t sK_addr = smem_addr(sK), sV_addr = smem_addr(sV);
    uint32_t k_off[2], v_off[4];
#pragma unroll
    for (int p = 0; p < 2; p++) k_off[p] = ((lane % 8) * 8 + ((p * 4 + lane / 8) ^ (lane % 8))) * 16;
#pragma unroll
    for (int dp = 0; dp < 4; dp++)
        v_off[dp] = ((lane % 8 + ((lane / 8) & 1) * 8) * 8 + ((dp * 2 + lane / 16) ^ (lane % 8))) * 16;

    uint32_t qf[MT][4][4];                      // Q as A fragments: [m tile][k step of 16 dims]
    float o[MT][8][4];                          // O accumulators: [m tile][8-dim n tile]
    float m_run[MT][2], l_run[MT][2];           // per row (g, g + 8): running max and partial sum
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int dn = 0; dn < 8; dn++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][dn][e] = 0.0f;
        m_run[mt][0] = m_run[mt][1] = -INFINITY;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
    }

    for (int j = 0; j < n_tiles; j++) {
        const int jt = j0 + j;                  // the key tile: keys [jt * BC, jt * BC + BC)
        if (j + 1 < n_tiles) load_kv(jt + 1, (j + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();                     // everything but the newest group: tile j (and Q)
        __syncthreads();

        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int mi = lane / 8;
                    const int r = wr + mt * 16 + (lane % 8) + (mi & 1) * 8, ch = ks * 2 + (mi >> 1);
                    ldmatrix_x4(qf[mt][ks], smem_addr(&sQ[r * 8 + (ch ^ (r & 7))]));
                }
        }
        const uint32_t tK = sK_addr + (j & 1) * ATT_BC * 8 * 16;   // this tile's buffers (bytes)
        const uint32_t tV = sV_addr + (j & 1) * ATT_BC * 8 * 16;

        // S = Q K^T: s[mt][n tile of 8 keys][4]
        float s[MT][8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int jn = 0; jn < 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][jn][e] = 0.0f;
#pragma unroll
        for (int jn = 0; jn < 8; jn++) {
            uint32_t kf[2][4];                  // [pair of k steps] -> b0, b1 of k step 2p, then of 2p + 1
#pragma unroll
            for (int p = 0; p < 2; p++) ldmatrix_x4(kf[p], tK + jn * 8 * 8 * 16 + k_off[p]);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int ks = 0; ks < 4; ks++)
                    mma_16816<T>(s[mt][jn], qf[mt][ks], kf[ks / 2][(ks % 2) * 2], kf[ks / 2][(ks % 2) * 2 + 1]);
        }

        // mask keys past n_kv (last tile only)
        if (!block && (jt + 1) * ATT_BC > n_kv) {
#pragma unroll
            for (int jn = 0; jn < 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = jt * ATT_BC + jn * 8 + t4 * 2 + (e & 1);
                    if (key >= n_kv) {
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) s[mt][jn][e] = -INFINITY;
                    }
                }
        }
        // blocks: each score outside its row's [lo, hi) (rows g and g + 8 of each m tile)
        if (block) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int jn = 0; jn < 8; jn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int qi = q0 + wr + mt * 16 + g + (e >= 2 ? 8 : 0);
                        const int key = jt * ATT_BC + jn * 8 + t4 * 2 + (e & 1);
                        const int start = qi / block * block, lo = causal ? 0 : start, hi = min(start + block, n_kv);
                        if (key < lo || key >= hi) s[mt][jn][e] = -INFINITY;
                    }
        }

        // online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3) of each m tile
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                float mx = -INFINITY;
#pragma unroll
                for (int jn = 0; jn < 8; jn++) mx = fmaxf(mx, fmaxf(s[mt][jn][2 * hf], s[mt][jn][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // finite but with blocks, where a row may have had no key yet: then 0 (alpha 0, P 0)
                const float m_new = fmaxf(m_run[mt][hf], mx), m_use = m_new == -INFINITY ? 0.0f : m_new;
                const float alpha = exp2_ftz((m_run[mt][hf] - m_use) * scale_log2);
                const float ms = m_use * scale_log2;
                m_run[mt][hf] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int jn = 0; jn < 8; jn++)
#pragma unroll
                    for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                        const float p = exp2_ftz(fmaf(s[mt][jn][e], scale_log2, -ms));
                        s[mt][jn][e] = p;
                        sum += p;
                    }
                l_run[mt][hf] = l_run[mt][hf] * alpha + sum;
#pragma unroll
                for (int dn = 0; dn < 8; dn++) {
                    o[mt][dn][2 * hf] *= alpha;
                    o[mt][dn][2 * hf + 1] *= alpha;
                }
            }

        // O += P V: k steps of 16 keys; P's A fragment is two S n tiles
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < 4; dp++) {
                uint32_t vf[4];                 // b0, b1 of dim tile 2dp, then of 2dp + 1
                ldmatrix_x4_trans(vf, tV + kk * 16 * 8 * 16 + v_off[dp]);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_16816<T>(o[mt][2 * dp], pa[mt], vf[0], vf[1]);
                    mma_16816<T>(o[mt][2 * dp + 1], pa[mt], vf[2], vf[3]);
                }
            }
        }
        __syncthreads();                        // buffer j & 1 is free for tile j + 2
    }

    // normalise, stage this warp's rows in sQ (its own rows only), then 16-byte stores
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float l = l_run[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;   // l 0: a row with no key (blocks)
            const int r = wr + mt * 16 + g + hf * 8;
#pragma unroll
            for (int dn = 0; dn < 8; dn++) {
                uint32_t * dst = reinterpret_cast<uint32_t *>(&sQ[r * 8 + (dn ^ (r & 7))]) + t4;
                *dst = pack2<T>(o[mt][dn][2 * hf] * inv, o[mt][dn][2 * hf + 1] * inv);
            }
        }
    __syncwarp();
    const int64_t o_row = (int64_t)n_head * ATT_HD;
    T * og = out + (int64_t)b * n_ctx * o_row + h * ATT_HD;
#pragma unroll
    for (int c = lane; c < 16 * MT * 8; c += 32) {
        const int r = wr + c / 8, ch = c % 8, qi = q0 + r;
        if (qi < n_ctx) *reinterpret_cast<uint4 *>(og + qi * o_row + ch * 8) = sQ[r * 8 + (ch ^ (r & 7))];
    }
}

static size_t attention_smem_bytes(int mt) { return (size_t)(64 * mt) * 128 + 4 * ATT_BC * 128; }

// The checks attention_kernel and attention_wgmma_kernel rely on; alloc_graph runs them so
// compute cannot fail. TMA (the wgmma kernel) wants the same 16-byte aligned base and strides;
// a map it still refuses (make_attention_map) sends that launch to attention_kernel.
static bool attention_supported(const vt_tensor * t) {
    const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
    const int n_head = t->iparams[0];
    if (q->type != VT_TYPE_F16 && q->type != VT_TYPE_BF16) {
        vt_set_error("cuda: attention '%s': type %s; f16 or bf16 only", t->name, vt_type_name(q->type));
        return false;
    }
    if (q->ne[0] != (int64_t)n_head * ATT_HD) {
        vt_set_error("cuda: attention '%s': head_dim %lld; the CUDA kernel needs 64",
                     t->name, (long long)(q->ne[0] / n_head));
        return false;
    }
    if (q->ne[1] > INT32_MAX || k->ne[1] > INT32_MAX || q->ne[2] > 65535 || n_head > 65535) {
        vt_set_error("cuda: attention '%s': too large (T %lld, B %lld)", t->name, (long long)q->ne[1], (long long)q->ne[2]);
        return false;
    }
    for (const vt_tensor * s : {q, k, v}) {
        if (s->nb[0] != vt_type_size(s->type) || s->nb[1] % 16 != 0 || s->nb[2] % 16 != 0 || (uintptr_t)s->data % 16 != 0) {
            vt_set_error("cuda: attention '%s': rows of '%s' must be 16-byte aligned (row stride %zu bytes)",
                         t->name, s->name, s->nb[1]);
            return false;
        }
    }
    if (!vt_is_contiguous(t)) {
        vt_set_error("cuda: attention '%s': output must be contiguous", t->name);
        return false;
    }
    return true;
}

// 128 query rows a block (MT = 2 tiles of 64): each K/V fragment loaded to registers serves
// twice the rows of 64, which measured faster at large-v3's shape (docs/BENCHMARKS.md)
static const int ATT_MT = 2;

template <typename T, int MT>
static bool launch_attention_mt(const launch_ctx & lc, vt_tensor * t) {
    const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
    const int n_head = t->iparams[0];
    const int n_ctx = (int)q->ne[1], B = (int)q->ne[2];
    const float scale_log2 = t->fparams[0] * 1.4426950408889634f;
    const size_t es = sizeof(T);
    const dim3 grid((unsigned)ceil_div(n_ctx, 64 * MT), (unsigned)n_head, (unsigned)B);
    attention_kernel<T, MT><<<grid, ATT_THREADS, attention_smem_bytes(MT), lc.stream>>>(
        (const T *)q->data, (const T *)k->data, (const T *)v->data, (T *)t->data, n_ctx, n_head,
        (int64_t)(q->nb[1] / es), (int64_t)(q->nb[2] / es), (int64_t)(k->nb[1] / es), (int64_t)(k->nb[2] / es),
        (int64_t)(v->nb[1] / es), (int64_t)(v->nb[2] / es), scale_log2,
        t->src[3] ? (const float *)t->src[3]->data : nullptr, t->iparams[2] ? -t->iparams[1] : t->iparams[1]);
    LAUNCH_CHECK("attention_kernel");
    return true;
}

// =====================================================================================
// attention_window_kernel: vt_attention_window
// =====================================================================================

// attention_window_kernel: vt_attention_window (Voxtral Realtime's causal sliding window over a
// cache and a step's rows). Query i of window b (row i of q, at key position T - P + i) attends
// to keys [max(kv_start[b], T - P + i - window + 1), T - P + i], head_dim 64:
//   grid (ceil(P / 8), n_head, B), 256 threads = 8 warps, warp w owns query i0 + w. The block
//   reads the keys its 8 queries span in tiles of 32 (K and V rows as f32 in shared memory, a
//   row padded to 65 floats against bank conflicts); per tile lane j scores key j (its dot over
//   the 64 dimensions, -inf outside the warp's range), the warp keeps an online softmax (running
//   max and sum in f32) and lane l the output dimensions l and l + 32 (each tile's P V by shuffles
//   of the 32 weights). A query without a key comes out 0. CPU twin: cpu_backend::attention_window.
static const int ATTW_QUERIES = 8, ATTW_KEYS = 32, ATTW_ROW = ATT_HD + 1;

template <typename T>
__global__ void __launch_bounds__(256) attention_window_kernel(const T * __restrict__ q, const T * __restrict__ k,
        const T * __restrict__ v, T * __restrict__ out, int P, int T_kv, int n_head, int window, float scale,
        int64_t q_row, int64_t q_win, int64_t k_row, int64_t k_win, int64_t v_row, int64_t v_win,
        const float * __restrict__ kv_start) {
    __shared__ float ks[ATTW_KEYS * ATTW_ROW], vs[ATTW_KEYS * ATTW_ROW], qs[ATTW_QUERIES * ATT_HD];
    const int h = blockIdx.y, b = blockIdx.z, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i0 = blockIdx.x * ATTW_QUERIES, i = i0 + warp;
    const int first = kv_start ? max(0, min(T_kv, (int)kv_start[b])) : 0;
    const int lo_blk = max(first, T_kv - P + i0 - window + 1), hi_blk = T_kv - P + min(i0 + ATTW_QUERIES, P);
    const int lo = max(first, T_kv - P + i - window + 1), hi = T_kv - P + i + 1;
    const T * kb = k + b * k_win + h * ATT_HD, * vb = v + b * v_win + h * ATT_HD;
    for (int e = threadIdx.x; e < ATTW_QUERIES * ATT_HD; e += blockDim.x) {
        const int r = e / ATT_HD, d = e % ATT_HD;
        qs[e] = i0 + r < P ? scale * to_f32(q[b * q_win + (int64_t)(i0 + r) * q_row + h * ATT_HD + d]) : 0.0f;
    }
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int c = lo_blk; c < hi_blk; c += ATTW_KEYS) {
        __syncthreads();                                   // (the tile before is read; q is in)
        for (int e = threadIdx.x; e < ATTW_KEYS * ATT_HD; e += blockDim.x) {
            const int r = e / ATT_HD, d = e % ATT_HD, j = c + r;
            const bool in = j < hi_blk;
            ks[r * ATTW_ROW + d] = in ? to_f32(kb[(int64_t)j * k_row + d]) : 0.0f;
            vs[r * ATTW_ROW + d] = in ? to_f32(vb[(int64_t)j * v_row + d]) : 0.0f;
        }
        __syncthreads();
        if (i >= P) continue;
        const int j = c + lane;
        float s = -INFINITY;
        if (j >= lo && j < hi) {
            s = 0.0f;
            const float * qr = qs + warp * ATT_HD, * kr = ks + lane * ATTW_ROW;
#pragma unroll 16
            for (int d = 0; d < ATT_HD; d++) s += qr[d] * kr[d];
        }
        float mx = s;
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m, mx);
        if (m_new == -INFINITY) continue;                  // no key of this tile, none before
        const float p = s == -INFINITY ? 0.0f : __expf(s - m_new), corr = m == -INFINITY ? 0.0f : __expf(m - m_new);
        l = l * corr + warp_sum(p);
        acc0 *= corr;
        acc1 *= corr;
        for (int r = 0; r < ATTW_KEYS; r++) {
            const float pr = __shfl_sync(0xffffffffu, p, r);
            acc0 += pr * vs[r * ATTW_ROW + lane];
            acc1 += pr * vs[r * ATTW_ROW + lane + 32];
        }
        m = m_new;
    }
    if (i >= P) return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T * o = out + ((int64_t)b * P + i) * n_head * ATT_HD + h * ATT_HD;
    o[lane] = from_f32<T>(acc0 * inv);
    o[lane + 32] = from_f32<T>(acc1 * inv);
}

template <typename T>
static bool launch_attention_window(const launch_ctx & lc, vt_tensor * t) {
    const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
    const int n_head = t->iparams[0], P = (int)q->ne[1], B = (int)q->ne[2];
    const size_t es = sizeof(T);
    const dim3 grid((unsigned)ceil_div(P, ATTW_QUERIES), (unsigned)n_head, (unsigned)B);
    attention_window_kernel<T><<<grid, 32 * ATTW_QUERIES, 0, lc.stream>>>(
        (const T *)q->data, (const T *)k->data, (const T *)v->data, (T *)t->data, P, (int)k->ne[1], n_head, t->iparams[3],
        t->fparams[0], (int64_t)(q->nb[1] / es), (int64_t)(q->nb[2] / es), (int64_t)(k->nb[1] / es), (int64_t)(k->nb[2] / es),
        (int64_t)(v->nb[1] / es), (int64_t)(v->nb[2] / es), t->src[4] ? (const float *)t->src[4]->data : nullptr);
    LAUNCH_CHECK("attention_window_kernel");
    return true;
}
