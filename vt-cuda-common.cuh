// vt-cuda-common.cuh - what the CUDA backend's kernel headers share: the CUDA-call and launch
// checks (a failure becomes an error value, never an abort), grid maths (ceil_div, grid_for,
// with_vpl), where a launcher runs (launch_ctx), and the device helpers every kernel family uses:
// element conversion, 16-byte packing, the exact GELU, warp sums, e4m3 packing.
//
// Each vt-cuda-*.cuh includes what it uses and compiles on its own (make check-cuda-headers);
// vt-cuda.cu includes them all. The translation unit that wants vt.h's backend section
// (VT_BACKEND_IMPL) defines it and includes vt.h before any of these headers.
#pragma once

#include "vt.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

// A failed CUDA call becomes an error value: the call, the error string, file:line.
#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        const cudaError_t err_ = (call);                                                   \
        if (err_ != cudaSuccess) {                                                         \
            vt_set_error("cuda: %s failed: %s (%s:%d)", #call, cudaGetErrorString(err_),   \
                         __FILE__, __LINE__);                                              \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

// After a kernel launch: a bad configuration shows up here.
#define LAUNCH_CHECK(name)                                                                 \
    do {                                                                                   \
        const cudaError_t err_ = cudaGetLastError();                                       \
        if (err_ != cudaSuccess) {                                                         \
            vt_set_error("cuda: launch of %s failed: %s (%s:%d)", name,                    \
                         cudaGetErrorString(err_), __FILE__, __LINE__);                    \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Row kernels keep a row's 8-element vectors in registers, so their count a thread (VPL) is a
// template argument: launch(std::integral_constant<int, V>()) with V = vpl, from 1 to 8 (more
// take 8). An instance for every count, since a wider one keeps registers for vectors it never
// loads (large-v3's fc1 rows, 5 vectors a thread, would hold the 8 instance's registers and
// fewer blocks an SM).
template <typename Launch> static void with_vpl(int vpl, Launch && launch) {
    switch (vpl) {
        case 1: launch(std::integral_constant<int, 1>()); break;
        case 2: launch(std::integral_constant<int, 2>()); break;
        case 3: launch(std::integral_constant<int, 3>()); break;
        case 4: launch(std::integral_constant<int, 4>()); break;
        case 5: launch(std::integral_constant<int, 5>()); break;
        case 6: launch(std::integral_constant<int, 6>()); break;
        case 7: launch(std::integral_constant<int, 7>()); break;
        default: launch(std::integral_constant<int, 8>()); break;
    }
}

// Where a launcher runs: the backend's stream and its device's count of SMs, which sizes the
// grid-stride launches. The backend's own (backends on different GPUs, started from several
// threads, each keep theirs), passed to every launcher.
struct launch_ctx {
    cudaStream_t stream = nullptr;
    int n_sm = 0;
};

// Blocks for a grid-stride loop over n elements: one per `threads` of them, at most 32 an SM.
static int grid_for(const launch_ctx & lc, int64_t n, int threads) {
    return (int)std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, threads), (int64_t)lc.n_sm * 32));
}

// The largest power of two (at most 256) that divides an address or a byte count.
static inline uint32_t alignment_of(uintptr_t x) {
    uint32_t a = 256;
    while (a > 1 && (x % a) != 0) a /= 2;
    return a;
}

// Element conversion on the device; T is float, __half or __nv_bfloat16.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two f32 into one register of two 16-bit elements, the first in the low half, and back.
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <typename T> __device__ __forceinline__ float2 unpack2(uint32_t w);
template <> __device__ __forceinline__ float2 unpack2<__half>(uint32_t w) {
    __half2 h;
    memcpy(&h, &w, sizeof(h));
    return __half22float2(h);
}
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));   // bf16 is f32's top half
}

// Eight 16-bit elements in one 16-byte word, to and from f32. The word is taken by value and
// split into its four 32-bit words, so that the caller's load stays one 16-byte load: unpacked
// through a reference into global memory, nvcc issued eight 2-byte loads instead (SASS).
template <typename T> __device__ __forceinline__ void unpack8(uint4 u, float (&f)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 p = unpack2<T>(w[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}
template <typename T> __device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    return make_uint4(pack2<T>(f[0], f[1]), pack2<T>(f[2], f[3]), pack2<T>(f[4], f[5]), pack2<T>(f[6], f[7]));
}

// The exact (erf) GELU, x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), as Whisper's. CPU twin: vt.cpp's
// gelu_erf. Phi(-|x|) = 0.5 erfc(z), z = |x| / sqrt 2, from the Chebyshev fit of erfc in Numerical
// Recipes (erfcc: t = 1 / (1 + z / 2), erfc = t exp(-z^2 + P(t)), P of degree 9), relative error
// below 1.2e-7 for every z, so the tails keep f32 accuracy too. It is half the instructions of
// erff's two branches of minimax fits (both run in a warp whose x straddle |x| = 1), and the GELU
// pass after fc1 is bound by instruction issue, not memory (ncu).
__device__ __forceinline__ float gelu_erf(float x) {
    const float z = fabsf(x) * 0.70710678118654752f;
    const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));
    float p = fmaf(t, 0.17087277f, -0.82215223f);
    p = fmaf(t, p, 1.48851587f);
    p = fmaf(t, p, -1.13520398f);
    p = fmaf(t, p, 0.27886807f);
    p = fmaf(t, p, -0.18628806f);
    p = fmaf(t, p, 0.09678418f);
    p = fmaf(t, p, 0.37409196f);
    p = fmaf(t, p, 1.00002368f);
    p = fmaf(t, p, -1.26551223f);
    const float lo = 0.5f * t * __expf(fmaf(-z, z, p));   // Phi(-|x|)
    return x * (x >= 0.0f ? 1.0f - lo : lo);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Eight f32 times inv as eight e4m3 bytes (round to nearest even, saturated), in order.
__device__ __forceinline__ uint2 e4m3x8(const float (&f)[8], float inv) {
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(f[4 * h] * inv, f[4 * h + 1] * inv), __NV_SATFINITE, __NV_E4M3);
        const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(f[4 * h + 2] * inv, f[4 * h + 3] * inv), __NV_SATFINITE, __NV_E4M3);
        w[h] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    return make_uint2(w[0], w[1]);
}

static const float E4M3_MAX = 448.0f;   // e4m3's largest finite value
