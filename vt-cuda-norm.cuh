// vt-cuda-norm.cuh - LayerNorm (vectorised rows in registers, optionally quantizing its output
// to e4m3 for an FP8 GEMM, and a generic kernel for the other shapes) and RMSNorm (the audio
// LLMs' projectors; launched with the other projector ops, vt-cuda-projector.cuh).
#pragma once

#include "vt-cuda-common.cuh"

// =====================================================================================
// kernels
// =====================================================================================

// layer_norm_vec_kernel: y = (x - mean) / sqrt(var + eps) * w + b over each row of C.
//   A warp owns ROWS consecutive rows (of n_rows; blockDim.x / 32 warps per block); lane l holds
//   the 8-element vectors l, l + 32, ..., (VPL of them, C / 8 in all) of each row in registers,
//   packed as read: one read of x, one write of y, f32 statistics in two passes over the
//   registers. ROWS > 1 for many rows: each lane's w and b (f32, 4x the row's own bytes) are read
//   once for ROWS rows, where with one row a warp they were most of the L1 traffic (ncu: L1 the
//   busiest unit, DRAM half busy). Needs C % 8 == 0, C <= 256 * VPL and 16-byte
//   aligned rows. CPU twin: cpu_backend::layer_norm (double stats).
//   q non-null (FP8 mode, the norm's one use an FP8 GEMM): each row is written quantized to
//   e4m3 into q with its scale in qscale (quantize_rows_kernel's rule) instead of into y.
template <typename T, int VPL, int ROWS>
__global__ void layer_norm_vec_kernel(T * __restrict__ y, const T * __restrict__ x, const float * __restrict__ w,
                                      const float * __restrict__ b, int64_t n_rows, int C, float eps,
                                      __nv_fp8_storage_t * __restrict__ q, float * __restrict__ qscale) {
    const int64_t row0 = (blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32) * ROWS;
    const int lane = threadIdx.x % 32;
    if (row0 >= n_rows) return;
    const int nv = C / 8, n_here = (int)min((int64_t)ROWS, n_rows - row0);
    uint4 xs[ROWS][VPL];
    float mean[ROWS], rstd[ROWS], amax[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        if (r >= n_here) break;
        const uint4 * xr = reinterpret_cast<const uint4 *>(x + (row0 + r) * C);
#pragma unroll
        for (int j = 0; j < VPL; j++)
            if (lane + 32 * j < nv) xs[r][j] = xr[lane + 32 * j];
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        if (r >= n_here) break;
        float sum = 0.0f, v[8];
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            if (lane + 32 * j < nv) {
                unpack8<T>(xs[r][j], v);
#pragma unroll
                for (int e = 0; e < 8; e++) sum += v[e];
            }
        }
        mean[r] = warp_sum(sum) / C;
        float sq = 0.0f;
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            if (lane + 32 * j < nv) {
                unpack8<T>(xs[r][j], v);
#pragma unroll
                for (int e = 0; e < 8; e++) { const float d = v[e] - mean[r]; sq += d * d; }
            }
        }
        rstd[r] = rsqrtf(warp_sum(sq) / C + eps);
        amax[r] = 0.0f;
    }
    // the normalized rows: written out, or (q) their absolute maxima first, then quantized
    for (int pass = 0; pass < (q ? 2 : 1); pass++) {
        float inv[ROWS];
        if (q && pass == 1) {
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r >= n_here) break;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], o));
                const float s = amax[r] > 0.0f ? amax[r] / E4M3_MAX : 1.0f;
                inv[r] = 1.0f / s;
                if (lane == 0) qscale[row0 + r] = s;
            }
        }
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            const int c = lane + 32 * j;
            if (c >= nv) continue;
            const float4 w0 = reinterpret_cast<const float4 *>(w)[2 * c], w1 = reinterpret_cast<const float4 *>(w)[2 * c + 1];
            const float4 b0 = reinterpret_cast<const float4 *>(b)[2 * c], b1 = reinterpret_cast<const float4 *>(b)[2 * c + 1];
            const float ww[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
            const float bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r >= n_here) break;
                float v[8];
                unpack8<T>(xs[r][j], v);
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    v[e] = (v[e] - mean[r]) * rstd[r] * ww[e] + bb[e];
                    amax[r] = fmaxf(amax[r], fabsf(v[e]));
                }
                if (!q) reinterpret_cast<uint4 *>(y + (row0 + r) * C)[c] = pack8<T>(v);
                else if (pass == 1) reinterpret_cast<uint2 *>(q + (row0 + r) * C)[c] = e4m3x8(v, inv[r]);
            }
        }
    }
}

// layer_norm_kernel: the same for any C and type (f32 too): a warp per row, three passes
// over the row in global memory (sum, squared deviations, write). CPU twin as above.
template <typename T>
__global__ void layer_norm_kernel(T * __restrict__ y, const T * __restrict__ x, const float * __restrict__ w,
                                  const float * __restrict__ b, int64_t n_rows, int C, float eps) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    const T * xr = x + row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_f32(xr[c]);
    const float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) { const float d = to_f32(xr[c]) - mean; sq += d * d; }
    const float rstd = rsqrtf(warp_sum(sq) / C + eps);
    T * yr = y + row * C;
    for (int c = lane; c < C; c += 32) yr[c] = from_f32<T>((to_f32(xr[c]) - mean) * rstd * w[c] + b[c]);
}

// rms_norm: a warp per row: y = x / sqrt(mean(x^2) + eps) * w, the sum in f32.
// CPU twin: cpu_backend::rms_norm.
template <typename T>
__global__ void rms_norm_kernel(T * __restrict__ y, const T * __restrict__ x, const float * __restrict__ w,
                                int64_t rows, int C, float eps) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const T * xr = x + row * C;
    T * yr = y + row * C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) { const float v = to_f32(xr[c]); sq += v * v; }
    const float rstd = rsqrtf(warp_sum(sq) / C + eps);
    for (int c = lane; c < C; c += 32) yr[c] = from_f32<T>(to_f32(xr[c]) * rstd * w[c]);
}

// =====================================================================================
// launchers
// =====================================================================================

// A norm layer_norm_vec_kernel takes (and so can quantize for an FP8 GEMM): 16-bit, C % 8 == 0,
// C <= 2048, every row 16-byte aligned.
static bool layer_norm_vec_ok(const vt_tensor * t) {
    const int64_t C = t->src[0]->ne[0];
    bool ok = t->type != VT_TYPE_F32 && C % 8 == 0 && ceil_div(C / 8, 32) <= 8;
    const vt_tensor * all[] = {t, t->src[0], t->src[1], t->src[2]};
    for (const vt_tensor * u : all) ok = ok && (uintptr_t)u->data % 16 == 0;
    return ok;
}

// q non-null: the norm's output quantized into q / qscale (layer_norm_vec_kernel), not into t
template <typename T, int ROWS>
static void launch_layer_norm_vec(const launch_ctx & lc, int vpl, T * y, const T * x, const float * w, const float * b,
                                  int64_t rows, int C, float eps, __nv_fp8_storage_t * q, float * qscale) {
    const int threads = 128;
    const unsigned grid = (unsigned)ceil_div(rows, (int64_t)(threads / 32) * ROWS);
    with_vpl(vpl, [&](auto v) {
        layer_norm_vec_kernel<T, decltype(v)::value, ROWS><<<grid, threads, 0, lc.stream>>>(y, x, w, b, rows, C, eps, q, qscale);
    });
}

template <typename T>
static bool launch_layer_norm_t(const launch_ctx & lc, vt_tensor * t, void * q, float * qscale) {
    const vt_tensor * x = t->src[0];
    const int C = (int)x->ne[0];
    const int64_t rows = x->ne[1] * x->ne[2] * x->ne[3];
    const float eps = t->fparams[0];
    T * y = (T *)t->data;
    const T * xp = (const T *)x->data;
    const float * w = (const float *)t->src[1]->data;
    const float * b = (const float *)t->src[2]->data;
    const int threads = 128, rows_per_block = threads / 32;
    const int grid = (int)ceil_div(rows, rows_per_block);
    const int vpl = (int)ceil_div(C / 8, 32);
    const bool vec = layer_norm_vec_ok(t);
    __nv_fp8_storage_t * qq = (__nv_fp8_storage_t *)q;
    VT_ASSERT(!q || (vec && sizeof(T) == 2));   // plan_fp8 fuses only such norms
    if constexpr (sizeof(T) == 2) {
        if (vec) {
            // 4 rows a warp where that still leaves every SM many warps (large-v3's batch 32 has 48000
            // rows); not when quantizing, whose second pass over w and b made it slower
            if (rows >= 16384 && !q) launch_layer_norm_vec<T, 4>(lc, vpl, y, xp, w, b, rows, C, eps, qq, qscale);
            else               launch_layer_norm_vec<T, 1>(lc, vpl, y, xp, w, b, rows, C, eps, qq, qscale);
            LAUNCH_CHECK("layer_norm_vec_kernel");
            return true;
        }
    }
    layer_norm_kernel<T><<<grid, threads, 0, lc.stream>>>(y, xp, w, b, rows, C, eps);
    LAUNCH_CHECK("layer_norm_kernel");
    return true;
}

static bool launch_layer_norm(const launch_ctx & lc, vt_tensor * t, void * q = nullptr, float * qscale = nullptr) {
    switch (t->type) {
        case VT_TYPE_F16:  return launch_layer_norm_t<__half>(lc, t, q, qscale);
        case VT_TYPE_BF16: return launch_layer_norm_t<__nv_bfloat16>(lc, t, q, qscale);
        case VT_TYPE_F32:  return launch_layer_norm_t<float>(lc, t, q, qscale);
    }
    vt_set_error("cuda: layer_norm: unsupported type");
    return false;
}
