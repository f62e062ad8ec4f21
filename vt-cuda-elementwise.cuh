// vt-cuda-elementwise.cuh - the elementwise passes: the GEMM epilogue (bias, exact GELU,
// residual, positional add) where cuBLASLt's own epilogue does not take it, add_rows, and type
// conversion (graph outputs to f32, weights after their upload, submit's download).
#pragma once

#include "vt-cuda-common.cuh"

// =====================================================================================
// kernels
// =====================================================================================

// epilogue_kernel: in place on y [rows, N] (row-major), in f32:
//   y[r, n] = act(y[r, n] + bias[n]) + res[r, n] + add[r % add_rows, n]
//   (bias, res, add each optional; the order of vt.cpp's apply_epilogue, its CPU twin).
//   VEC = 8: each thread owns 8 consecutive elements of one row (16-byte loads/stores;
//   needs N % 8 == 0 and 16-byte aligned y/res); VEC = 1 for the rest. Grid-stride over
//   rows * N / VEC.
template <typename T, int VEC>
__global__ void epilogue_kernel(T * __restrict__ y, const float * __restrict__ bias, const T * __restrict__ res,
                                const float * __restrict__ add, int64_t add_rows, int64_t rows, int64_t N, int act) {
    const int64_t nv = N / VEC, n = rows * nv;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / nv, c0 = (idx % nv) * VEC;
        float v[VEC], rv[VEC];
        if constexpr (VEC == 8) {
            unpack8<T>(*reinterpret_cast<const uint4 *>(y + r * N + c0), v);
            if (res) unpack8<T>(*reinterpret_cast<const uint4 *>(res + r * N + c0), rv);
        } else {
            v[0] = to_f32(y[r * N + c0]);
            if (res) rv[0] = to_f32(res[r * N + c0]);
        }
        const float * a = add ? add + (r % add_rows) * N + c0 : nullptr;
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            float x = v[e];
            if (bias) x += bias[c0 + e];
            if (act == VT_ACT_GELU) x = gelu_erf(x);
            if (res) x += rv[e];
            if (a) x += a[e];
            v[e] = x;
        }
        if constexpr (VEC == 8) {
            *reinterpret_cast<uint4 *>(y + r * N + c0) = pack8<T>(v);
        } else {
            y[r * N + c0] = from_f32<T>(v[0]);
        }
    }
}

// epilogue_vec8_kernel: the same epilogue with no index division in the loop (the conv stem's
//   bias + GELU + positions, and the GELU linears cuBLASLt's epilogue does not take: plan_linear). Thread x owns
//   the 8 columns [c0, c0 + 8), c0 = 8 * (blockIdx.x * blockDim.x + threadIdx.x) < N, and
//   keeps their bias in registers; blocks in y walk the rows (grid-stride), one row a step: 4 rows
//   a step with their loads in flight doubled the registers, halved the warps an SM and made the
//   (issue-bound) GELU pass after fc1 slower. Needs N % 8 == 0 and 16-byte aligned y/res.
template <typename T>
__global__ void epilogue_vec8_kernel(T * __restrict__ y, const float * __restrict__ bias, const T * __restrict__ res,
                                     const float * __restrict__ add, int add_rows, int rows, int N, int act) {
    const int c0 = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c0 >= N) return;
    float bv[8];
#pragma unroll
    for (int e = 0; e < 8; e++) bv[e] = bias ? bias[c0 + e] : 0.0f;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const size_t off = (size_t)r * N + c0;
        float v[8], rv[8];
        unpack8<T>(*reinterpret_cast<const uint4 *>(y + off), v);
        if (res) unpack8<T>(*reinterpret_cast<const uint4 *>(res + off), rv);
        const float * a = add ? add + (size_t)(r % add_rows) * N + c0 : nullptr;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float x = v[e] + bv[e];
            if (act == VT_ACT_GELU) x = gelu_erf(x);
            if (res) x += rv[e];
            if (a) x += a[e];
            v[e] = x;
        }
        *reinterpret_cast<uint4 *>(y + off) = pack8<T>(v);
    }
}

// convert_kernel: y[i] = x[i] in y's type, through f32 (round to nearest even), for i in
// [0, n); a grid-stride loop. The f32 copy of a graph output (inside the captured graph, so
// the download is one plain copy), the f16 download of a bf16 forward, weights converted
// after their upload. CPU twin: vt_convert.
template <typename Tin, typename Tout>
__global__ void convert_kernel(Tout * __restrict__ y, const Tin * __restrict__ x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = from_f32<Tout>(to_f32(x[i]));
}

// =====================================================================================
// launchers
// =====================================================================================

template <typename T>
static bool launch_epilogue_t(const launch_ctx & lc, T * y, const float * bias, const T * res, const float * add,
                              int64_t add_rows, int64_t rows, int64_t N, int act) {
    const bool vec = N % 8 == 0 && (uintptr_t)y % 16 == 0 && (!res || (uintptr_t)res % 16 == 0);
    const int threads = 256;
    if (vec && rows < INT32_MAX && N < INT32_MAX) {
        const int nv = (int)(N / 8);
        // the fewest blocks across a row, each as narrow as they allow (N 5120: 3 x 224 threads for
        // 640 vectors, where 3 x 256 left a sixth of the threads idle)
        const int gx = (nv + 255) / 256;
        const int tx = ((nv + gx - 1) / gx + 31) / 32 * 32;
        const int gy = (int)std::min<int64_t>(rows, std::max(1, lc.n_sm * 16 / gx));
        epilogue_vec8_kernel<T><<<dim3(gx, gy), tx, 0, lc.stream>>>(y, bias, res, add, (int)std::max<int64_t>(add_rows, 1),
                                                              (int)rows, (int)N, act);
    } else if (vec) {
        epilogue_kernel<T, 8><<<grid_for(lc, rows * N / 8, threads), threads, 0, lc.stream>>>(y, bias, res, add, add_rows, rows, N, act);
    } else {
        epilogue_kernel<T, 1><<<grid_for(lc, rows * N, threads), threads, 0, lc.stream>>>(y, bias, res, add, add_rows, rows, N, act);
    }
    LAUNCH_CHECK("epilogue_kernel");
    return true;
}

static bool launch_epilogue(const launch_ctx & lc, vt_type type, void * y, const float * bias, const void * res,
                            const float * add, int64_t add_rows, int64_t rows, int64_t N, int act) {
    if (type == VT_TYPE_F16)
        return launch_epilogue_t<__half>(lc, (__half *)y, bias, (const __half *)res, add, add_rows, rows, N, act);
    return launch_epilogue_t<__nv_bfloat16>(lc, (__nv_bfloat16 *)y, bias, (const __nv_bfloat16 *)res, add, add_rows, rows, N, act);
}

// add_rows: out = x, then the epilogue adds add[r % period] to each row (a window's rows being a
// multiple of period, r % period is t % period).
static bool launch_add_rows(const launch_ctx & lc, const vt_tensor * t) {
    const vt_tensor * x = t->src[0];
    const int64_t period = t->iparams[0], rows = t->ne[1] * t->ne[2];
    if (t->ne[1] % period != 0) {
        vt_set_error("cuda: add_rows '%s': %lld rows a window, not a multiple of the period %lld", t->name,
                     (long long)t->ne[1], (long long)period);
        return false;
    }
    CUDA_CHECK(cudaMemcpyAsync(t->data, x->data, vt_nbytes(t), cudaMemcpyDeviceToDevice, lc.stream));
    return launch_epilogue(lc, t->type, t->data, nullptr, nullptr, (const float *)t->src[1]->data, period, rows, t->ne[0],
                           VT_ACT_NONE);
}

// concat_rows_kernel: out [B, Ta + Tb, C] = a's rows, then b's (each with its own row and window
// strides, in elements), one element per thread per step. CPU twin: cpu_backend::concat_rows.
template <typename T>
__global__ void concat_rows_kernel(T * __restrict__ y, const T * __restrict__ a, const T * __restrict__ b, int64_t C, int64_t Ta,
                                   int64_t T_all, int64_t a_row, int64_t a_win, int64_t b_row, int64_t b_win, int64_t n) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = idx % C, r = idx / C % T_all, w = idx / C / T_all;
        y[idx] = r < Ta ? a[w * a_win + r * a_row + c] : b[w * b_win + (r - Ta) * b_row + c];
    }
}

template <typename T>
static bool launch_concat_rows_t(const launch_ctx & lc, const vt_tensor * t) {
    const vt_tensor * a = t->src[0], * b = t->src[1];
    const int64_t n = vt_nelements(t);
    const size_t es = sizeof(T);
    concat_rows_kernel<T><<<grid_for(lc, n, 256), 256, 0, lc.stream>>>((T *)t->data, (const T *)a->data, (const T *)b->data,
        t->ne[0], a->ne[1], t->ne[1], (int64_t)(a->nb[1] / es), (int64_t)(a->nb[2] / es), (int64_t)(b->nb[1] / es),
        (int64_t)(b->nb[2] / es), n);
    LAUNCH_CHECK("concat_rows_kernel");
    return true;
}

// concat_rows: a step's keys after the cache's (vt_concat_rows)
static bool launch_concat_rows(const launch_ctx & lc, const vt_tensor * t) {
    switch (t->type) {
        case VT_TYPE_F16:  return launch_concat_rows_t<__half>(lc, t);
        case VT_TYPE_BF16: return launch_concat_rows_t<__nv_bfloat16>(lc, t);
        case VT_TYPE_F32:  return launch_concat_rows_t<float>(lc, t);
    }
    vt_set_error("cuda: '%s': unsupported type", t->name);
    return false;
}

// convert: n elements of x (type xt) into y (type yt); f32, f16 and bf16
template <typename Tin>
static void launch_convert_from(const launch_ctx & lc, void * y, vt_type yt, const Tin * x, size_t n, int blocks) {
    if (yt == VT_TYPE_F32) convert_kernel<<<blocks, 256, 0, lc.stream>>>((float *)y, x, n);
    else if (yt == VT_TYPE_F16) convert_kernel<<<blocks, 256, 0, lc.stream>>>((__half *)y, x, n);
    else convert_kernel<<<blocks, 256, 0, lc.stream>>>((__nv_bfloat16 *)y, x, n);
}

static bool launch_convert(const launch_ctx & lc, void * y, vt_type yt, const void * x, vt_type xt, size_t n) {
    if (n == 0) return true;
    const int blocks = (int)std::min<int64_t>(ceil_div((int64_t)n, 256), (int64_t)lc.n_sm * 16);
    if (xt == VT_TYPE_F32) launch_convert_from(lc, y, yt, (const float *)x, n, blocks);
    else if (xt == VT_TYPE_F16) launch_convert_from(lc, y, yt, (const __half *)x, n, blocks);
    else launch_convert_from(lc, y, yt, (const __nv_bfloat16 *)x, n, blocks);
    CUDA_CHECK(cudaGetLastError());
    return true;
}
