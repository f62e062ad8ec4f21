// vt-cuda-projector.cuh - the ops of the audio LLMs' projectors (avg_pool2, rms_norm, swiglu,
// relu, silu, silu_mul, stack), rope_qk (GLM-ASR's encoder) and rope_time (Music Flamingo's): a handful of rows per window,
// so plain grid-stride loops and one launcher for all of them. rms_norm's kernel is
// vt-cuda-norm.cuh's.
#pragma once

#include "vt-cuda-common.cuh"
#include "vt-cuda-norm.cuh"

// =====================================================================================
// kernels
// =====================================================================================

// avg_pool2: y[b, t, c] = (x[b, 2t, c] + x[b, 2t + 1, c]) / 2 for t < T (x has T_in rows a
// window); one element per thread per step. CPU twin: cpu_backend::avg_pool2.
template <typename T>
__global__ void avg_pool2_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t C, int64_t T_out,
                                 int64_t T_in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C, t = (i / C) % T_out, b = i / (C * T_out);
        const T * a = x + (b * T_in + 2 * t) * C + c;
        y[i] = from_f32<T>((to_f32(a[0]) + to_f32(a[C])) * 0.5f);
    }
}

// relu: y[i] = max(x[i], 0); one element per thread per step. CPU twin: cpu_backend::relu.
template <typename T>
__global__ void relu_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = from_f32<T>(fmaxf(to_f32(x[i]), 0.0f));
}

// silu: y[i] = x[i] / (1 + exp(-x[i])); one element per thread per step. CPU twin: cpu_backend::silu.
template <typename T>
__global__ void silu_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = to_f32(x[i]);
        y[i] = from_f32<T>(v / (1.0f + __expf(-v)));
    }
}

// silu_mul: y[i] = x[i] * silu(g[i]); one element per thread per step. CPU twin: cpu_backend::silu_mul.
template <typename T>
__global__ void silu_mul_kernel(T * __restrict__ y, const T * __restrict__ x, const T * __restrict__ g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = to_f32(g[i]);
        y[i] = from_f32<T>(to_f32(x[i]) * (v / (1.0f + __expf(-v))));
    }
}

// swiglu: y[r, i] = x[r, i] * silu(x[r, N + i]) for i < N; one element per thread per step.
// CPU twin: cpu_backend::swiglu.
template <typename T>
__global__ void swiglu_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t N, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / N, c = i % N;
        const float g = to_f32(x[r * 2 * N + N + c]);
        y[i] = from_f32<T>(to_f32(x[r * 2 * N + c]) * (g / (1.0f + __expf(-g))));
    }
}

// rope_qk: row r (position r % T of its window, after pos0[r / T] where given: vt_rope_qk_at) of a
// q|k|v tensor, element j of its 3d: in q and k (j < 2d), the first n_rot of each head's hd
// dimensions turn in pairs (i, i + n_rot/2) by the float32 angle position * inv_freq[i]; the rest,
// and v, are copied. One element per thread per step. CPU twin: cpu_backend::rope_qk (the same
// float32 inv_freq and angle, cos/sin in double).
template <typename T>
__global__ void rope_qk_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t d, int64_t hd, int n_rot,
                               float theta, int64_t T_pos, int64_t n, const float * __restrict__ pos0) {
    const int half = n_rot / 2;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / (3 * d), j = idx % (3 * d), c = j % hd;
        if (j >= 2 * d || c >= n_rot) { y[idx] = x[idx]; continue; }
        const int i = (int)(c % half);
        const float inv_freq = 1.0f / (float)pow((double)theta, (double)((float)(2 * i) / (float)n_rot));
        const float ang = (float)((pos0 ? (int64_t)pos0[r / T_pos] : 0) + r % T_pos) * inv_freq;
        double sn, cs;
        sincos((double)ang, &sn, &cs);
        const float xc = to_f32(x[idx]);
        const float xp = c < half ? to_f32(x[idx + half]) : to_f32(x[idx - half]);
        y[idx] = from_f32<T>(c < half ? xc * (float)cs - xp * (float)sn : xc * (float)cs + xp * (float)sn);
    }
}

// rope_time: element c of row r (position t = r % T of window b = r / T, its index k =
// window[b] in its input): the first 2 n_rot elements turn in pairs (2p, 2p + 1) by the angle of
// Music Flamingo's rotary time embedding, the rest are copied. The float32 factors rounded from
// exact double products and sums (the float32 operations' results, free of FMA contraction), the
// angle, sincos and turn in double. One element per thread per step. CPU twin: cpu_backend::rope_time.
template <typename T>
__global__ void rope_time_kernel(T * __restrict__ y, const T * __restrict__ x, const float * __restrict__ window, int64_t C,
                                 int64_t T_pos, int n_rot, double theta, double step, int64_t n) {
    const double pi = 3.14159265358979323846;
    const int half = n_rot / 2;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = idx % C, r = idx / C;
        if (c >= 2 * n_rot) { y[idx] = x[idx]; continue; }
        const int p = (int)(c / 2), i = p % half;
        const double k = window[r / T_pos], pos = (double)(r % T_pos);
        const float inv_freq = (float)(1.0 / (double)(float)pow(theta, (double)((float)(2 * i) / (float)n_rot)));
        const float start = (float)((double)(float)(k * T_pos) * step), offset = (float)(pos * step);
        const float ts = (float)((double)start + (double)offset);
        const float angle = (float)(-2.0 * (double)ts * (double)(float)pi);
        const float pos_angle = (float)((double)(float)(pos / theta) * (double)(float)(2.0 * pi));
        const double f = p < half ? k / theta * (double)inv_freq : (double)(float)((double)pos_angle * (double)inv_freq);
        double sn, cs;
        sincos(f * (double)angle, &sn, &cs);
        const double x0 = to_f32(x[idx - (c & 1)]), x1 = to_f32(x[idx - (c & 1) + 1]);
        y[idx] = from_f32<T>((float)((c & 1) ? x1 * cs + x0 * sn : x0 * cs - x1 * sn));
    }
}

// stack: window b's rows laid end to end and cut into rows of `row` elements, the tail past
// the window's n_in elements zero. One element per thread per step. CPU twin: cpu_backend::stack.
template <typename T>
__global__ void stack_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t row, int64_t rows_out,
                             int64_t n_in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / (row * rows_out), j = i % (row * rows_out);
        y[i] = j < n_in ? x[b * n_in + j] : from_f32<T>(0.0f);
    }
}

// =====================================================================================
// launchers
// =====================================================================================

template <typename T>
static bool launch_projector_op_t(const launch_ctx & lc, vt_tensor * t) {
    const vt_tensor * x = t->src[0];
    T * y = (T *)t->data;
    const T * xp = (const T *)x->data;
    const int64_t n = vt_nelements(t), rows = t->ne[1] * t->ne[2] * t->ne[3];
    const int threads = 256;
    switch (t->op) {
        case VT_OP_AVG_POOL2:
            avg_pool2_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, t->ne[0], t->ne[1], x->ne[1], n);
            LAUNCH_CHECK("avg_pool2_kernel");
            return true;
        case VT_OP_RMS_NORM:
            rms_norm_kernel<T><<<(unsigned)ceil_div(rows, 4), 128, 0, lc.stream>>>(y, xp, (const float *)t->src[1]->data, rows,
                                                                            (int)t->ne[0], t->fparams[0]);
            LAUNCH_CHECK("rms_norm_kernel");
            return true;
        case VT_OP_SWIGLU:
            swiglu_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, t->ne[0], n);
            LAUNCH_CHECK("swiglu_kernel");
            return true;
        case VT_OP_RELU:
            relu_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, n);
            LAUNCH_CHECK("relu_kernel");
            return true;
        case VT_OP_SILU:
            silu_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, n);
            LAUNCH_CHECK("silu_kernel");
            return true;
        case VT_OP_SILU_MUL:
            silu_mul_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, (const T *)t->src[1]->data, n);
            LAUNCH_CHECK("silu_mul_kernel");
            return true;
        case VT_OP_STACK:
            stack_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, t->ne[0], t->ne[1], x->ne[0] * x->ne[1], n);
            LAUNCH_CHECK("stack_kernel");
            return true;
        case VT_OP_ROPE_QK:
            rope_qk_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, t->ne[0] / 3, t->ne[0] / 3 / t->iparams[0],
                                                                                   t->iparams[1], t->fparams[0], t->ne[1], n,
                                                                                   t->src[1] ? (const float *)t->src[1]->data : nullptr);
            LAUNCH_CHECK("rope_qk_kernel");
            return true;
        case VT_OP_ROPE_TIME:
            rope_time_kernel<T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(y, xp, (const float *)t->src[1]->data, t->ne[0],
                                                                                     t->ne[1], t->iparams[0], t->fparams[0],
                                                                                     t->fparams[1], n);
            LAUNCH_CHECK("rope_time_kernel");
            return true;
        default:
            break;
    }
    vt_set_error("cuda: '%s': %s is not a projector op", t->name, vt_op_name(t->op));
    return false;
}

// avg_pool2, rms_norm, swiglu, relu, silu, silu_mul, stack: the ops of the audio LLMs' projectors; rope_qk (GLM-ASR's
// encoder); rope_time (Music Flamingo's).
static bool launch_projector_op(const launch_ctx & lc, vt_tensor * t) {
    switch (t->type) {
        case VT_TYPE_F16:  return launch_projector_op_t<__half>(lc, t);
        case VT_TYPE_BF16: return launch_projector_op_t<__nv_bfloat16>(lc, t);
        case VT_TYPE_F32:  return launch_projector_op_t<float>(lc, t);
    }
    vt_set_error("cuda: '%s': unsupported type", t->name);
    return false;
}
