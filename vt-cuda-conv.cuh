// vt-cuda-conv.cuh - the conv stems: conv1d_k3 and conv2d_k3s2 as im2col on the device + a
// cuBLASLt GEMM (the GEMM and its plan live in the backend, vt-cuda.cu), and conv2d_k3s2's direct
// kernel for a stage too narrow for a GEMM. The bias, GELU and positional add after the GEMM are
// epilogue_kernel's (vt-cuda-elementwise.cuh).
#pragma once

#include "vt-cuda-common.cuh"

static const size_t IM2COL_CAP_BYTES   = 96u << 20;    // conv GEMMs run in chunks of windows

// =====================================================================================
// kernels
// =====================================================================================

// im2col_k3_kernel: the GEMM operand of conv1d_k3 for windows [b0, b0 + n_rows / T_out).
//   cols[r, i*3 + k] = x[b0 + r / T_out, (r % T_out) * stride + k - 1, i], 0 outside [0, T_in)
//   (the column order of PyTorch's [C_out, C_in, 3] weight, so W needs no reshuffle).
//   One thread per (r, i) in [0, n_rows) x [0, C_in), grid-stride: it reads x's three taps
//   (strides sx* in elements: any layout, e.g. the transposed f32 mel) and writes three
//   neighbouring columns. CPU twin: the col[] gather in vt.cpp's cpu_backend::conv1d_k3.
//   vt_conv1d_k3_chunks: chunk input rows a chunk (T_in itself otherwise), each padded on its
//   own: the taps of output row t read [c0, c0 + chunk) only, c0 = t * stride rounded down to a
//   chunk, and below x_len[b] where x_len is given.
//   vt_conv1d_k3_causal (causal): the taps of output row t are rows t * stride + k - (3 - stride) of
//   the tail's 3 - stride f32 rows [B, 3 - stride, C_in] (zeros without one) followed by x's.
template <typename Tin, typename T>
__global__ void im2col_k3_kernel(T * __restrict__ cols, const Tin * __restrict__ x, int64_t b0, int64_t n_rows,
                                 int64_t T_out, int64_t T_in, int64_t C_in, int stride, int64_t chunk,
                                 const float * __restrict__ x_len, int64_t sx0, int64_t sx1, int64_t sx2,
                                 bool causal, const float * __restrict__ tail) {
    const int64_t n = n_rows * C_in;
    const int n_tail = 3 - stride;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / C_in, i = idx % C_in;
        const int64_t b = b0 + r / T_out, t = r % T_out;
        const Tin * xb = x + b * sx2 + i * sx0;
        T * dst = cols + r * 3 * C_in + i * 3;
        if (causal) {
#pragma unroll
            for (int k = 0; k < 3; k++) {
                const int64_t ti = t * stride + k - n_tail;
                dst[k] = from_f32<T>(ti >= 0 ? to_f32(xb[ti * sx1]) : tail ? tail[(b * n_tail + n_tail + ti) * C_in + i] : 0.0f);
            }
            continue;
        }
        const int64_t c0 = t * stride / chunk * chunk;                                   // this row's chunk
        const int64_t end = min(c0 + chunk, x_len ? (int64_t)x_len[b] : T_in);           // its rows [c0, end)
#pragma unroll
        for (int k = 0; k < 3; k++) {
            const int64_t ti = t * stride + k - 1;
            dst[k] = from_f32<T>(ti >= c0 && ti < end ? to_f32(xb[ti * sx1]) : 0.0f);
        }
    }
}

// conv2d_k3s2's geometry (vt_conv2d_k3s2): the input's element strides (b, t, f, i) and sizes.
struct conv2d_geom {
    int64_t sb, st, sf, si;                // x's element (b, t, f, i) at b sb + t st + f sf + i si
    int64_t T_in, F_in, C_in, T_out, F_out, chunk, chunk_out;
};

// Where one output position r (over [B, T_out, F_out], frequency fastest) of a conv2d_k3s2 reads:
// its window's offset in x, its taps' first input frame and frequency, and the input frames
// [lo, hi) its taps may read (its chunk's, cut at the input's end and at x_len[b]). Computed once
// a position: the divisions are what a tap would otherwise pay nine times.
struct conv2d_at {
    int64_t xb;
    int64_t ti0, fi0, lo, hi;
};

__device__ __forceinline__ conv2d_at conv2d_at_of(const conv2d_geom & g, int64_t r, const float * __restrict__ x_len) {
    const int64_t fo = r % g.F_out, rt = r / g.F_out, to = rt % g.T_out, b = rt / g.T_out;
    const int64_t c0 = to / g.chunk_out * g.chunk, lt = to - to / g.chunk_out * g.chunk_out;
    conv2d_at a;
    a.xb = b * g.sb;
    a.ti0 = c0 + 2 * lt - 1;
    a.fi0 = 2 * fo - 1;
    a.lo = c0;
    a.hi = min(min(c0 + g.chunk, g.T_in), x_len ? (int64_t)x_len[b] : g.T_in);
    return a;
}

// The input x[b, ti, fi, i] of tap (kf, kt) of position a, 0 outside its frames [lo, hi) or the
// frequencies [0, F_in). CPU twin: the im2col in vt-cpu.h's cpu_backend::conv2d_k3s2.
template <typename Tin>
__device__ __forceinline__ float conv2d_tap(const Tin * __restrict__ x, const conv2d_geom & g, const conv2d_at & a,
                                            int64_t i, int kf, int kt) {
    const int64_t ti = a.ti0 + kt, fi = a.fi0 + kf;
    return ti >= a.lo && ti < a.hi && fi >= 0 && fi < g.F_in ? to_f32(x[a.xb + ti * g.st + fi * g.sf + i * g.si]) : 0.0f;
}

// im2col_conv2d_kernel: the GEMM operand of conv2d_k3s2 for windows [b0, b0 + n_rows / (T_out F_out)).
//   cols[r, i*9 + kf*3 + kt] = tap (kf, kt) of channel i at position r (the column order of
//   PyTorch's [C_out, C_in, 3, 3] weight). One thread per (r, i) in [0, n_rows) x [0, C_in),
//   grid-stride: it writes its nine neighbouring columns.
template <typename Tin, typename T>
__global__ void im2col_conv2d_kernel(T * __restrict__ cols, const Tin * __restrict__ x, conv2d_geom g, int64_t b0,
                                     int64_t n_rows, const float * __restrict__ x_len) {
    const int64_t n = n_rows * g.C_in, r0 = b0 * g.T_out * g.F_out;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / g.C_in, i = idx - r * g.C_in;
        const conv2d_at a = conv2d_at_of(g, r0 + r, x_len);
        T * dst = cols + r * 9 * g.C_in + i * 9;
#pragma unroll
        for (int kf = 0; kf < 3; kf++)
#pragma unroll
            for (int kt = 0; kt < 3; kt++) dst[kf * 3 + kt] = from_f32<T>(conv2d_tap(x, g, a, i, kf, kt));
    }
}

// conv2d_direct_kernel: conv2d_k3s2 without a GEMM, for a stage whose K = 9 C_in is too narrow for
//   one (the stem's first, C_in 1: K 9). y[r N + o] = act(bias[o] + sum over k of w[o, k] tap k of
//   position r), k = i*9 + kf*3 + kt in that order. Each block holds the weight in shared memory,
//   transposed so that neighbouring threads (neighbouring o) read neighbouring words, then takes
//   CONV2D_DIRECT_P positions at a time (grid-stride): their K taps into shared memory once, then
//   every (position, o) output, written in order.
constexpr int CONV2D_DIRECT_P = 32;

static size_t conv2d_direct_smem(int64_t K, int64_t N) { return (size_t)(K * N + CONV2D_DIRECT_P * K) * sizeof(float); }

template <typename Tin, typename T>
__global__ void conv2d_direct_kernel(T * __restrict__ y, const Tin * __restrict__ x, const T * __restrict__ w,
                                     const float * __restrict__ bias, conv2d_geom g, int64_t N, int64_t n_pos,
                                     const float * __restrict__ x_len, int act) {
    extern __shared__ float conv_smem[];
    const int64_t K = 9 * g.C_in;
    float * ws = conv_smem;                 // [K][N]
    float * taps = conv_smem + K * N;       // [P][K]
    for (int64_t k = threadIdx.x; k < K * N; k += blockDim.x) {
        const int64_t o = k / K, j = k - o * K;
        ws[j * N + o] = to_f32(w[k]);
    }
    for (int64_t p0 = blockIdx.x * (int64_t)CONV2D_DIRECT_P; p0 < n_pos; p0 += (int64_t)gridDim.x * CONV2D_DIRECT_P) {
        const int64_t n_p = min((int64_t)CONV2D_DIRECT_P, n_pos - p0);
        __syncthreads();                    // the weight stored, or the last positions' taps read
        for (int64_t k = threadIdx.x; k < n_p * K; k += blockDim.x) {
            const int64_t p = k / K, j = k - p * K, i = j / 9, kf = j % 9 / 3, kt = j % 3;
            taps[k] = conv2d_tap(x, g, conv2d_at_of(g, p0 + p, x_len), i, (int)kf, (int)kt);
        }
        __syncthreads();
        for (int64_t k = threadIdx.x; k < n_p * N; k += blockDim.x) {
            const int64_t p = k / N, o = k - p * N;
            const float * tp = taps + p * K;
            float acc = bias[o];
            for (int64_t j = 0; j < K; j++) acc += ws[j * N + o] * tp[j];
            y[(p0 + p) * N + o] = from_f32<T>(act == VT_ACT_GELU ? gelu_erf(acc) : acc);
        }
    }
}

// =====================================================================================
// launchers
// =====================================================================================

template <typename Tin, typename T>
static bool launch_im2col_t(const launch_ctx & lc, void * cols, const vt_tensor * t, int64_t b0, int64_t n_rows) {
    const vt_tensor * x = t->src[0];
    const size_t es = sizeof(Tin);
    const int threads = 256;
    const int64_t chunk = t->iparams[2] ? t->iparams[2] : x->ne[1];   // vt_conv1d_k3_chunks
    const bool causal = t->iparams[3] != 0;                             // vt_conv1d_k3_causal: src[4] its tail
    const float * src4 = t->src[4] ? (const float *)t->src[4]->data : nullptr;
    im2col_k3_kernel<Tin, T><<<grid_for(lc, n_rows * x->ne[0], threads), threads, 0, lc.stream>>>(
        (T *)cols, (const Tin *)x->data, b0, n_rows, t->ne[1], x->ne[1], x->ne[0], t->iparams[0], chunk,
        causal ? nullptr : src4, (int64_t)(x->nb[0] / es), (int64_t)(x->nb[1] / es), (int64_t)(x->nb[2] / es),
        causal, causal ? src4 : nullptr);
    LAUNCH_CHECK("im2col_k3_kernel");
    return true;
}

// the im2col rows [b0 T_out, b0 T_out + n_rows) of conv node t
static bool launch_im2col(const launch_ctx & lc, vt_type out_type, void * cols, const vt_tensor * t, int64_t b0,
                          int64_t n_rows) {
    const bool f16 = out_type == VT_TYPE_F16;
    switch (t->src[0]->type) {
        case VT_TYPE_F32:
            return f16 ? launch_im2col_t<float, __half>(lc, cols, t, b0, n_rows)
                       : launch_im2col_t<float, __nv_bfloat16>(lc, cols, t, b0, n_rows);
        case VT_TYPE_F16:
            return f16 ? launch_im2col_t<__half, __half>(lc, cols, t, b0, n_rows)
                       : launch_im2col_t<__half, __nv_bfloat16>(lc, cols, t, b0, n_rows);
        case VT_TYPE_BF16:
            return f16 ? launch_im2col_t<__nv_bfloat16, __half>(lc, cols, t, b0, n_rows)
                       : launch_im2col_t<__nv_bfloat16, __nv_bfloat16>(lc, cols, t, b0, n_rows);
    }
    vt_set_error("cuda: conv1d_k3: unsupported input type");
    return false;
}

// conv2d_k3s2's geometry from its node (the mel's strides when C_in is 1, else [B, T, F, C]); for a
// vt_conv2d_k3s2_pair node its first stage's.
static conv2d_geom conv2d_geom_of(const vt_tensor * t) {
    const vt_tensor * x = t->src[0], * w = t->src[3] ? t->src[3] : t->src[1];
    const size_t es = vt_type_size(x->type);
    conv2d_geom g;
    g.C_in = w->ne[2];
    const bool mel = g.C_in == 1;
    g.sb = (int64_t)((mel ? x->nb[2] : x->nb[3]) / es);
    g.st = (int64_t)((mel ? x->nb[0] : x->nb[2]) / es);
    g.sf = (int64_t)(x->nb[1] / es);
    g.si = (int64_t)(x->nb[0] / es);
    g.T_in = mel ? x->ne[0] : x->ne[2];
    g.F_in = x->ne[1];
    g.chunk = t->src[3] ? t->iparams[3] : t->iparams[2];
    g.chunk_out = (g.chunk - 1) / 2 + 1;
    g.T_out = g.T_in / g.chunk * g.chunk_out;
    g.F_out = (g.F_in - 1) / 2 + 1;
    return g;
}

// A vt_conv2d_k3s2_pair node's second stage, reading its first stage's output [B, T, F, C] as
// written to the backend's scratch.
static conv2d_geom conv2d_second_geom_of(const vt_tensor * t) {
    const conv2d_geom g1 = conv2d_geom_of(t);
    conv2d_geom g;
    g.C_in = t->src[1]->ne[2];
    g.si = 1;
    g.sf = g.C_in;
    g.st = g1.F_out * g.C_in;
    g.sb = g1.T_out * g.st;
    g.T_in = g1.T_out;
    g.F_in = g1.F_out;
    g.T_out = t->ne[2];
    g.F_out = t->ne[1];
    g.chunk = t->iparams[2];
    g.chunk_out = (g.chunk - 1) / 2 + 1;
    return g;
}

// One conv2d_k3s2 stage over the windows [b0, b0 + n_rows / (T_out F_out)) of an input x laid out
// as g says: its im2col rows into cols (the GEMM runs after), or, with cols NULL, every output
// into y by the direct kernel, bias and activation included (y, x and x_len already at window b0).
template <typename Tin, typename T>
static bool launch_conv2d_t(const launch_ctx & lc, const conv2d_geom & g, const void * x, const float * x_len,
                            const vt_tensor * w, const float * bias, int act, void * y, void * cols, int64_t b0, int64_t n_rows) {
    const int threads = 256;
    if (!cols) {
        const int64_t N = w->ne[3];
        const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>(ceil_div(n_rows, CONV2D_DIRECT_P), (int64_t)lc.n_sm * 8));
        conv2d_direct_kernel<Tin, T><<<blocks, threads, conv2d_direct_smem(9 * g.C_in, N), lc.stream>>>(
            (T *)y, (const Tin *)x, (const T *)w->data, bias, g, N, n_rows, x_len, act);
        LAUNCH_CHECK("conv2d_direct_kernel");
        return true;
    }
    im2col_conv2d_kernel<Tin, T><<<grid_for(lc, n_rows * g.C_in, threads), threads, 0, lc.stream>>>(
        (T *)cols, (const Tin *)x, g, b0, n_rows, x_len);
    LAUNCH_CHECK("im2col_conv2d_kernel");
    return true;
}

static bool launch_conv2d(const launch_ctx & lc, vt_type x_type, const conv2d_geom & g, const void * x, const float * x_len,
                          const vt_tensor * w, const float * bias, int act, void * y, void * cols, int64_t b0, int64_t n_rows) {
    const bool f16 = w->type == VT_TYPE_F16;
#define VT_CONV2D(Tin) (f16 ? launch_conv2d_t<Tin, __half>(lc, g, x, x_len, w, bias, act, y, cols, b0, n_rows) \
                            : launch_conv2d_t<Tin, __nv_bfloat16>(lc, g, x, x_len, w, bias, act, y, cols, b0, n_rows))
    switch (x_type) {
        case VT_TYPE_F32:  return VT_CONV2D(float);
        case VT_TYPE_F16:  return VT_CONV2D(__half);
        case VT_TYPE_BF16: return VT_CONV2D(__nv_bfloat16);
    }
#undef VT_CONV2D
    vt_set_error("cuda: conv2d_k3s2: unsupported input type");
    return false;
}
