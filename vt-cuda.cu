// vt-cuda.cu - the CUDA backend of vt: f16/bf16 compute with f32 accumulation (and FP8 GEMMs).
//
// What runs where (one stream per backend; the whole forward captured once per graph as a
// CUDA graph and replayed by later vt_backend_compute calls):
//
//   linear      cuBLASLt GEMM (f32 compute), bias in its BIAS epilogue, residual as
//               beta = 1 with C = residual, fc1's bias and GELU (tanh form) in its epilogue;
//               the algorithm timed among the heuristic's best 8 at alloc_graph (tune_gemm;
//               VT_GEMM_TUNE=0 keeps the heuristic's first). FP8 mode
//               (vt_backend_params.fp8, weights flagged vt_set_fp8): e4m3 operands, the
//               input quantized per row by quantize_rows_kernel, or by the LayerNorm or fc1's
//               GELU (tanh form) before it (plan_fp8), per-channel x per-token scales in cuBLASLt
//   conv1d_k3   im2col_k3_kernel (on device, any input strides and type) + cuBLASLt GEMM,
//               then epilogue_kernel: bias + exact GELU + the positional add, in f32
//   layer_norm  layer_norm_vec_kernel: a warp per row (per 4 rows for many rows), 16-byte loads,
//               the rows in registers, two-pass f32 statistics (layer_norm_kernel for the odd shapes)
//   attention   on compute capability 9.0 (H100/H200): attention_wgmma_kernel, FlashAttention-3
//               style: a TMA producer warpgroup fills a 3-stage K/V ring (mbarriers), two or
//               three consumer warpgroups of 64 query rows (by the last wave's fill) run
//               S = Q K^T and O += P V on wgmma (P from registers), the softmax of one key
//               tile beside the P V of the last.
//               Elsewhere (and with VT_ATTENTION=fa2): attention_kernel, FlashAttention-2
//               style, mma.sync m16n8k16, K/V tiles double-buffered with cp.async. Both: head_dim
//               64, online softmax in f32, exact key count (the tail of the last tile masked)
//
// Biases live in f32 (as the model file has them); for the GEMM's BIAS epilogue, which
// wants the output's type, alloc_weights keeps a compute-type shadow of every f32 weight,
// filled by set_tensor.
//
// Limits (checked at alloc_graph, which fails with a message): attention needs head_dim
// 64 and 16-byte aligned rows (row strides and view offsets multiples of 16 bytes; the wgmma
// kernel's TMA maps need the same, and a view whose strides TMA still refuses runs on
// attention_kernel); GEMM operands must share one type (f16 or bf16; the conv input may be
// anything). cuBLASLt takes any M, N, K (odd sizes run on its slower, less aligned kernels).
//
// Environment: VT_ATTENTION=fa2 runs attention_kernel on every device (to compare, or as a
// fallback); VT_ATTENTION=wgmma insists on attention_wgmma_kernel (the backend does not start
// off cc 9.0), wgmma-nopp the same without its ping-pong between consumers, wgmma-1tile with
// a block per work tile instead of persistent blocks, wgmma-128 / wgmma-192 with 2 / 3
// consumers (128 / 192 query rows a tile) whatever the shape (all to measure what they bring);
// unset: wgmma on cc 9.0 when the build has sm_90a code (the Makefile's and CMake's do),
// fa2 elsewhere. Read when a backend starts. WHISPER_AUDIO_CUBLASLT and
// WHISPER_AUDIO_NVIDIA_LIB_DIRS: where cuBLASLt is looked for ("the CUDA libraries, found at run
// time", vt-cuda-gemm.cuh).
//
// Sections: utilities; the NVIDIA-only parts, a header each (vt-cuda-ptx.cuh: inline PTX;
// vt-cuda-gemm.cuh: cuBLASLt, opened at run time, and the FP8 quantization; vt-cuda-attention.cuh
// and vt-cuda-attention-wgmma.cuh: the two attention kernels); the portable kernels; their
// launchers; the backend (its state, then its methods by section); the entry points of vt.h.
//
// attention versions (H200, T 1500, 20 heads, B 32, f16; bf16 the same within 1%;
// VT_CUDA_BENCH in tests/test-cuda.cpp, tests/gpu/attention.py beside torch):
//   v1  attention_kernel, FA2 as above, 128 query rows per block:        249 TFLOP/s
//       (64 rows per block: 204, 221 with v2's changes: half the reuse of each K/V fragment)
//   v2  per-lane ldmatrix offsets precomputed (the swizzle term depends on lane % 8
//       only), ex2.approx.ftz instead of exp2f:                            280 TFLOP/s
//   v3  attention_wgmma_kernel (sm_90a): persistent blocks, TMA + mbarrier ring of 3 K/V
//       stages, 128 x 128 tiles, wgmma with P from registers, intra-warpgroup overlap and
//       ping-pong between the two consumer warpgroups, setmaxnreg 24/240:  398-401 TFLOP/s
//       (B 1: 274-281; no ping-pong: 404-405 at B 32, 245 at B 1; torch's cuDNN attention in
//       the same run 367 at B 32; docs/BENCHMARKS.md, issue 12)

#define VT_BACKEND_IMPL
#include "vt.h"

#include <cublasLt.h>
#include <cuda.h>   // CUtensorMap and its enums (types only: the driver call is found at run time)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

// =====================================================================================
// utilities
// =====================================================================================

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

// Every device allocation of the backend goes through here. VT_CUDA_MEMORY_LIMIT (bytes; for
// tests) fails those past that total since the process started, as a full GPU fails them, so
// that running out of memory mid-run can be tested on a GPU of any size.
static std::atomic<size_t> g_device_allocated{0};
static cudaError_t device_malloc_bytes(void ** p, size_t bytes) {
    const char * limit = getenv("VT_CUDA_MEMORY_LIMIT");
    if (limit && *limit && g_device_allocated + bytes > (size_t)strtoull(limit, nullptr, 10)) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    const cudaError_t err = cudaMalloc(p, bytes);
    if (err == cudaSuccess) g_device_allocated += bytes;
    return err;
}
template <typename T> static cudaError_t device_malloc(T ** p, size_t bytes) {
    return device_malloc_bytes((void **)p, bytes);
}

size_t vt_cuda_bytes_allocated(void) { return g_device_allocated; }

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
// loads (large-v3's fc1 rows, 5 a thread, took 80 registers in the 8 instance; issue 29).
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

static const size_t IM2COL_CAP_BYTES   = 96u << 20;    // conv GEMMs run in chunks of windows

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
// through a reference into global memory, nvcc issued eight 2-byte loads instead (SASS), and the
// FP8 forward of large-v3 ran 1.3-1.5% slower for it (issue 29).
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
// erff's two branches of minimax fits (both run in a warp whose x straddle |x| = 1): the GELU
// pass after fc1 was issue-bound at large-v3's batch 32 (ncu: SM 77%, DRAM 40%; issue 29).
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

// =====================================================================================
// NVIDIA-only parts, a family a header: inline PTX, cuBLASLt and the FP8 quantization, the two
// attention kernels (FlashAttention-2 on mma.sync, FlashAttention-3 on wgmma). Each holds its
// kernels and launchers; everything after them in this file is portable CUDA C++.
// =====================================================================================

#include "vt-cuda-ptx.cuh"
#include "vt-cuda-gemm.cuh"
#include "vt-cuda-attention.cuh"
#include "vt-cuda-attention-wgmma.cuh"

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
template <typename Tin, typename T>
__global__ void im2col_k3_kernel(T * __restrict__ cols, const Tin * __restrict__ x, int64_t b0, int64_t n_rows,
                                 int64_t T_out, int64_t T_in, int64_t C_in, int stride, int64_t chunk,
                                 const float * __restrict__ x_len, int64_t sx0, int64_t sx1, int64_t sx2) {
    const int64_t n = n_rows * C_in;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / C_in, i = idx % C_in;
        const int64_t b = b0 + r / T_out, t = r % T_out;
        const int64_t c0 = t * stride / chunk * chunk;                                   // this row's chunk
        const int64_t end = min(c0 + chunk, x_len ? (int64_t)x_len[b] : T_in);           // its rows [c0, end)
        const Tin * xb = x + b * sx2 + i * sx0;
        T * dst = cols + r * 3 * C_in + i * 3;
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

// The input x[b, ti, fi, i] of a conv2d_k3s2 tap, 0 outside the row's chunk [c0, min(c0 + chunk,
// T_in, x_len[b])) or the frequencies [0, F_in). CPU twin: the im2col in vt.cpp's cpu_backend::conv2d_k3s2.
template <typename Tin>
__device__ __forceinline__ float conv2d_tap(const Tin * __restrict__ x, const conv2d_geom & g, int64_t b, int64_t to,
                                            int64_t fo, int64_t i, int kf, int kt, const float * __restrict__ x_len) {
    const int64_t c0 = to / g.chunk_out * g.chunk, lt = to % g.chunk_out;
    const int64_t end = min(min(c0 + g.chunk, g.T_in), x_len ? (int64_t)x_len[b] : g.T_in);
    const int64_t ti = c0 + 2 * lt + kt - 1, fi = 2 * fo + kf - 1;
    return ti >= c0 && ti < end && fi >= 0 && fi < g.F_in ? to_f32(x[b * g.sb + ti * g.st + fi * g.sf + i * g.si]) : 0.0f;
}

// im2col_conv2d_kernel: the GEMM operand of conv2d_k3s2 for windows [b0, b0 + n_rows / (T_out F_out)).
//   cols[r, i*9 + kf*3 + kt] = conv2d_tap(b, to, fo, i, kf, kt), r = ((b - b0) T_out + to) F_out + fo
//   (the column order of PyTorch's [C_out, C_in, 3, 3] weight). One thread per (r, i) in [0, n_rows)
//   x [0, C_in), grid-stride: it writes its nine neighbouring columns.
template <typename Tin, typename T>
__global__ void im2col_conv2d_kernel(T * __restrict__ cols, const Tin * __restrict__ x, conv2d_geom g, int64_t b0,
                                     int64_t n_rows, const float * __restrict__ x_len) {
    const int64_t n = n_rows * g.C_in;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / g.C_in, i = idx % g.C_in;
        const int64_t fo = r % g.F_out, to = r / g.F_out % g.T_out, b = b0 + r / g.F_out / g.T_out;
        T * dst = cols + r * 9 * g.C_in + i * 9;
#pragma unroll
        for (int kf = 0; kf < 3; kf++)
#pragma unroll
            for (int kt = 0; kt < 3; kt++) dst[kf * 3 + kt] = from_f32<T>(conv2d_tap(x, g, b, to, fo, i, kf, kt, x_len));
    }
}

// conv2d_direct_kernel: conv2d_k3s2 without a GEMM, for a stage whose K = 9 C_in is too narrow for
//   one (the stem's first, C_in 1: K 9). y[((b T_out + to) F_out + fo) N + o] = act(bias[o] + sum
//   w[o, i, kf, kt] tap); one thread per output element, grid-stride over B T_out F_out N.
template <typename Tin, typename T>
__global__ void conv2d_direct_kernel(T * __restrict__ y, const Tin * __restrict__ x, const T * __restrict__ w,
                                     const float * __restrict__ bias, conv2d_geom g, int64_t N, int64_t n,
                                     const float * __restrict__ x_len, int act) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = idx % N, r = idx / N;
        const int64_t fo = r % g.F_out, to = r / g.F_out % g.T_out, b = r / g.F_out / g.T_out;
        float acc = bias[o];
        for (int64_t i = 0; i < g.C_in; i++) {
            const T * wo = w + (o * g.C_in + i) * 9;
#pragma unroll
            for (int kf = 0; kf < 3; kf++)
#pragma unroll
                for (int kt = 0; kt < 3; kt++) acc += to_f32(wo[kf * 3 + kt]) * conv2d_tap(x, g, b, to, fo, i, kf, kt, x_len);
        }
        y[idx] = from_f32<T>(act == VT_ACT_GELU ? gelu_erf(acc) : acc);
    }
}

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
//   a step with their loads in flight took 96 registers, half the warps, and the GELU pass after
//   large-v3's fc1 went from 13.7 to 14.9 ms at batch 32 (it is issue-bound, SM 77% busy; issue
//   29). Needs N % 8 == 0 and 16-byte aligned y/res.
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

// layer_norm_vec_kernel: y = (x - mean) / sqrt(var + eps) * w + b over each row of C.
//   A warp owns ROWS consecutive rows (of n_rows; blockDim.x / 32 warps per block); lane l holds
//   the 8-element vectors l, l + 32, ..., (VPL of them, C / 8 in all) of each row in registers,
//   packed as read: one read of x, one write of y, f32 statistics in two passes over the
//   registers. ROWS > 1 for many rows: each lane's w and b (f32, 4x the row's own bytes) are read
//   once for ROWS rows, where with one row a warp they were most of the L1 traffic (ncu: L1 93%
//   busy, DRAM 45%, at large-v3's batch 32; 4 rows: 91 -> 88 us). Needs C % 8 == 0, C <= 256 * VPL and 16-byte
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

// The projector's kernels: a handful of rows per window, so plain grid-stride loops.

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

// rope_qk: row r (position r % T of its window) of a q|k|v tensor, element j of its 3d: in q
// and k (j < 2d), the first n_rot of each head's hd dimensions turn in pairs (i, i + n_rot/2) by
// the float32 angle (r % T) * inv_freq[i]; the rest, and v, are copied. One element per thread
// per step. CPU twin: cpu_backend::rope_qk (the same float32 inv_freq and angle, cos/sin in double).
template <typename T>
__global__ void rope_qk_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t d, int64_t hd, int n_rot,
                               float theta, int64_t T_pos, int64_t n) {
    const int half = n_rot / 2;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / (3 * d), j = idx % (3 * d), c = j % hd;
        if (j >= 2 * d || c >= n_rot) { y[idx] = x[idx]; continue; }
        const int i = (int)(c % half);
        const float inv_freq = 1.0f / (float)pow((double)theta, (double)((float)(2 * i) / (float)n_rot));
        const float ang = (float)(r % T_pos) * inv_freq;
        double sn, cs;
        sincos((double)ang, &sn, &cs);
        const float xc = to_f32(x[idx]);
        const float xp = c < half ? to_f32(x[idx + half]) : to_f32(x[idx - half]);
        y[idx] = from_f32<T>(c < half ? xc * (float)cs - xp * (float)sn : xc * (float)cs + xp * (float)sn);
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

// convert_kernel: y[i] = x[i] in y's type, through f32 (round to nearest even), for i in
// [0, n); a grid-stride loop. The f32 copy of a graph output (inside the captured graph, so
// the download is one plain copy), the f16 download of a bf16 forward, weights converted
// after their upload. CPU twin: vt_convert.
template <typename Tin, typename Tout>
__global__ void convert_kernel(Tout * __restrict__ y, const Tin * __restrict__ x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = from_f32<Tout>(to_f32(x[i]));
}

// ---- log-mel: vt_log_mel on the GPU (CPU twin: cpu_backend::log_mel in vt.cpp) ----
//
// A window's n_frames frames of 400 samples every hop (the op's vt_mel_shape), read from its
// row of the pcm input (the caller put the padding, reflection or neighbours' samples in the
// row's context); per frame the power spectrum |DFT_400(hann * frame)|^2 in double, then the
// mel sums in double, log10 in float, and over the whole window max(x, max - 8) then (x + 4) / 4.
// The 400-point DFT splits as 20 x 20 (n = 20 n1 + n2, k = k1 + 20 k2):
//   X[k1 + 20 k2] = sum_n2 W20^(n2 k2) [ W400^(n2 k1) sum_n1 x[20 n1 + n2] W20^(n1 k1) ]
// two passes of 20-point sums (32k double FMAs a frame against 160k for the plain DFT);
// only k <= 200 is needed. Tables are made on the host in double, as the CPU's. The split is
// the kernel's one fixed size: alloc_graph refuses another n_fft.
static const int MEL_N_FFT = 400;             // the DFT this kernel computes (20 x 20)
static const int MEL_N_BINS = MEL_N_FFT / 2 + 1;
static const int MEL_FPB = 8;                 // frames a block
static const int MEL_THREADS = 256;

// frame blocks a window: the last one may hold fewer than MEL_FPB frames
static int log_mel_blocks(int n_frames) { return (int)ceil_div(n_frames, MEL_FPB); }

struct mel_tables {                           // made by each backend at init, in its device memory
    double window[MEL_N_FFT];                 // periodic Hann
    double2 tw20[20];                         // exp(-2 pi i j / 20)
    double2 tw400[MEL_N_FFT];                 // exp(-2 pi i j / 400)
};

static size_t log_mel_smem_bytes() {
    return sizeof(double2) * (MEL_FPB * MEL_N_FFT + 20 + MEL_N_FFT) + sizeof(double) * MEL_FPB * MEL_N_FFT;
}

// mel_ranges_kernel: each mel row's non-zero bins [k0, k1) (the filters are triangles; the
// skipped products are 0 * finite, so the sums are exact as the CPU's).
__global__ void mel_ranges_kernel(int2 * __restrict__ ranges, const float * __restrict__ filters, int n_mels) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= n_mels) return;
    const float * row = filters + (size_t)m * MEL_N_BINS;
    int a = 0, b = MEL_N_BINS;
    while (a < b && row[a] == 0.0f) a++;
    while (b > a && row[b - 1] == 0.0f) b--;
    ranges[m] = make_int2(a, b);
}

// log_mel_frames_kernel: grid (log_mel_blocks(n_frames), B); block (x, b) makes frames
// [8x, min(8x + 8, n_frames)) of window b, whose row starts at pcm + b * row_len: out[b, m, t] =
// log10(max(mel, 1e-10)) for the frames t < valid that hold the signal (0 past them), and the
// block's max over those in block_max[b, x]. out NULL: the max alone (vt_log_mel_max).
// params[b] = {valid, clamp max} (NULL: all n_frames valid).
__global__ void __launch_bounds__(MEL_THREADS) log_mel_frames_kernel(float * __restrict__ out, float * __restrict__ block_max,
        const float * __restrict__ pcm, const float * __restrict__ filters, const int2 * __restrict__ ranges, int n_mels,
        const float * __restrict__ params, const mel_tables * __restrict__ tables, int64_t row_len, int hop, int n_frames) {
    extern __shared__ double2 mel_smem[];
    double2 * y     = mel_smem;                            // [MEL_FPB][n2 20][k1 20] after pass 1
    double2 * tw20  = y + MEL_FPB * MEL_N_FFT;
    double2 * tw400 = tw20 + 20;
    double  * xw    = (double *)(tw400 + MEL_N_FFT);       // [MEL_FPB][400] windowed frames
    double  * power = xw;                                  // [MEL_FPB][201], once xw is spent
    __shared__ float red[MEL_THREADS / 32];

    const int b = blockIdx.y, t0 = blockIdx.x * MEL_FPB, tid = threadIdx.x;
    const int valid = min(params ? (int)params[2 * b] : n_frames, n_frames);
    const float * x = pcm + (size_t)b * row_len;           // frame t: x[hop t, hop t + 400)
    for (int i = tid; i < 20; i += MEL_THREADS) tw20[i] = tables->tw20[i];
    for (int i = tid; i < MEL_N_FFT; i += MEL_THREADS) tw400[i] = tables->tw400[i];
    for (int i = tid; i < MEL_FPB * MEL_N_FFT; i += MEL_THREADS) {
        const int f = i / MEL_N_FFT, n = i % MEL_N_FFT;    // (frames past n_frames: zeros, never stored)
        xw[i] = t0 + f < n_frames ? tables->window[n] * (double)x[(int64_t)(t0 + f) * hop + n] : 0.0;
    }
    __syncthreads();

    // pass 1: y[f][n2][k1] = W400^(n2 k1) sum_n1 xw[f][20 n1 + n2] W20^(n1 k1)
    for (int i = tid; i < MEL_FPB * MEL_N_FFT; i += MEL_THREADS) {
        const int f = i / MEL_N_FFT, n2 = (i % MEL_N_FFT) / 20, k1 = i % 20;
        const double * xf = xw + f * MEL_N_FFT + n2;
        double re = 0.0, im = 0.0;
        for (int n1 = 0, e = 0; n1 < 20; n1++) {
            re = fma(xf[20 * n1], tw20[e].x, re);
            im = fma(xf[20 * n1], tw20[e].y, im);
            e += k1;
            if (e >= 20) e -= 20;
        }
        const double2 w = tw400[n2 * k1];
        y[i] = make_double2(re * w.x - im * w.y, re * w.y + im * w.x);
    }
    __syncthreads();

    // pass 2: power[f][k] = |sum_n2 y[f][n2][k1] W20^(n2 k2)|^2, k = k1 + 20 k2 <= 200
    for (int i = tid; i < MEL_FPB * MEL_N_BINS; i += MEL_THREADS) {
        const int f = i / MEL_N_BINS, k = i % MEL_N_BINS, k1 = k % 20, k2 = k / 20;
        const double2 * yf = y + f * MEL_N_FFT + k1;
        double re = 0.0, im = 0.0;
        for (int n2 = 0, e = 0; n2 < 20; n2++) {
            const double2 a = yf[20 * n2], w = tw20[e];
            re = fma(a.x, w.x, fma(-a.y, w.y, re));
            im = fma(a.x, w.y, fma(a.y, w.x, im));
            e += k2;
            if (e >= 20) e -= 20;
        }
        power[i] = re * re + im * im;
    }
    __syncthreads();

    // mel sums, log10; frames fastest so that the stores are coalesced
    float mx = -INFINITY;
    for (int i = tid; i < MEL_FPB * n_mels; i += MEL_THREADS) {
        const int f = i % MEL_FPB, m = i / MEL_FPB;
        const int2 r = ranges[m];
        const float * row = filters + (size_t)m * MEL_N_BINS;
        const double * pf = power + f * MEL_N_BINS;
        double sum = 0.0;
        for (int k = r.x; k < r.y; k++) sum += (double)row[k] * pf[k];
        const float v = log2f(fmaxf((float)sum, 1e-10f)) * 0.30102999566398119521f;
        const bool in_signal = t0 + f < valid;
        if (out && t0 + f < n_frames) out[((size_t)b * n_mels + m) * n_frames + t0 + f] = in_signal ? v : 0.0f;
        if (in_signal) mx = fmaxf(mx, v);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (tid % 32 == 0) red[tid / 32] = mx;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < MEL_THREADS / 32; w++) mx = fmaxf(mx, red[w]);
        block_max[(size_t)b * gridDim.x + blockIdx.x] = mx;
    }
}

// The largest of window b's n_blocks frame blocks' maxima, in every thread of the block.
__device__ float log_mel_window_max(const float * __restrict__ block_max, int b, int n_blocks) {
    __shared__ float red[32];
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n_blocks; i += blockDim.x) mx = fmaxf(mx, block_max[(size_t)b * n_blocks + i]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++) mx = fmaxf(mx, red[w]);
    return mx;
}

// log_mel_norm_kernel: grid (x, B): every block of window b takes the clamp's max (params[b].y,
// or when that is NaN the window's own, from the frame blocks') and applies out = (max(out,
// max - 8) + 4) / 4 to its part of the frames that hold the signal, grid-stride.
__global__ void log_mel_norm_kernel(float * __restrict__ out, const float * __restrict__ block_max, size_t per_window,
                                    const float * __restrict__ params, int n_frames, int n_blocks) {
    const int b = blockIdx.y;
    const int valid = params ? (int)params[2 * b] : n_frames;
    const float given = params ? params[2 * b + 1] : NAN;
    const float mx = isnan(given) ? log_mel_window_max(block_max, b, n_blocks) : given;
    const float floor_v = mx - 8.0f;
    float * o = out + (size_t)b * per_window;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < per_window; i += (size_t)gridDim.x * blockDim.x)
        if ((int)(i % n_frames) < valid) o[i] = (fmaxf(o[i], floor_v) + 4.0f) / 4.0f;
}

// log_mel_max_kernel: grid B: out[b] = window b's max (vt_log_mel_max).
__global__ void log_mel_max_kernel(float * __restrict__ out, const float * __restrict__ block_max, int n_blocks) {
    const float mx = log_mel_window_max(block_max, blockIdx.x, n_blocks);
    if (threadIdx.x == 0) out[blockIdx.x] = mx;
}

// =====================================================================================
// launchers (one per op; they do the grid maths, launch on the stream and check)
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

template <typename Tin, typename T>
static bool launch_im2col_t(const launch_ctx & lc, void * cols, const vt_tensor * t, int64_t b0, int64_t n_rows) {
    const vt_tensor * x = t->src[0];
    const size_t es = sizeof(Tin);
    const int threads = 256;
    const int64_t chunk = t->iparams[2] ? t->iparams[2] : x->ne[1];   // vt_conv1d_k3_chunks
    im2col_k3_kernel<Tin, T><<<grid_for(lc, n_rows * x->ne[0], threads), threads, 0, lc.stream>>>(
        (T *)cols, (const Tin *)x->data, b0, n_rows, t->ne[1], x->ne[1], x->ne[0], t->iparams[0], chunk,
        t->src[4] ? (const float *)t->src[4]->data : nullptr,
        (int64_t)(x->nb[0] / es), (int64_t)(x->nb[1] / es), (int64_t)(x->nb[2] / es));
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

// conv2d_k3s2's geometry from its node (the mel's strides when C_in is 1, else [B, T, F, C]).
static conv2d_geom conv2d_geom_of(const vt_tensor * t) {
    const vt_tensor * x = t->src[0], * w = t->src[1];
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
    g.T_out = t->ne[2];
    g.F_out = t->ne[1];
    g.chunk = t->iparams[2];
    g.chunk_out = (g.chunk - 1) / 2 + 1;
    return g;
}

template <typename Tin, typename T>
static bool launch_conv2d_t(const launch_ctx & lc, const vt_tensor * t, void * cols, int64_t b0, int64_t n_rows) {
    const vt_tensor * x = t->src[0], * w = t->src[1];
    const conv2d_geom g = conv2d_geom_of(t);
    const float * x_len = t->src[4] ? (const float *)t->src[4]->data : nullptr;
    const int threads = 256;
    if (!cols) {                                       // direct: every output element of the node
        const int64_t N = w->ne[3], n = vt_nelements(t);
        conv2d_direct_kernel<Tin, T><<<grid_for(lc, n, threads), threads, 0, lc.stream>>>(
            (T *)t->data, (const Tin *)x->data, (const T *)w->data, (const float *)t->src[2]->data, g, N, n, x_len, t->iparams[1]);
        LAUNCH_CHECK("conv2d_direct_kernel");
        return true;
    }
    im2col_conv2d_kernel<Tin, T><<<grid_for(lc, n_rows * g.C_in, threads), threads, 0, lc.stream>>>(
        (T *)cols, (const Tin *)x->data, g, b0, n_rows, x_len);
    LAUNCH_CHECK("im2col_conv2d_kernel");
    return true;
}

// conv2d_k3s2 node t: the im2col rows [b0 T_out F_out, + n_rows) into cols, or (cols NULL) the
// whole node by the direct kernel.
static bool launch_conv2d(const launch_ctx & lc, const vt_tensor * t, void * cols, int64_t b0, int64_t n_rows) {
    const bool f16 = t->type == VT_TYPE_F16;
    switch (t->src[0]->type) {
        case VT_TYPE_F32:
            return f16 ? launch_conv2d_t<float, __half>(lc, t, cols, b0, n_rows)
                       : launch_conv2d_t<float, __nv_bfloat16>(lc, t, cols, b0, n_rows);
        case VT_TYPE_F16:
            return f16 ? launch_conv2d_t<__half, __half>(lc, t, cols, b0, n_rows)
                       : launch_conv2d_t<__half, __nv_bfloat16>(lc, t, cols, b0, n_rows);
        case VT_TYPE_BF16:
            return f16 ? launch_conv2d_t<__nv_bfloat16, __half>(lc, t, cols, b0, n_rows)
                       : launch_conv2d_t<__nv_bfloat16, __nv_bfloat16>(lc, t, cols, b0, n_rows);
    }
    vt_set_error("cuda: conv2d_k3s2: unsupported input type");
    return false;
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
            // rows); not when quantizing, whose second pass over w and b made it slower (issue 29)
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
                                                                                   t->iparams[1], t->fparams[0], t->ne[1], n);
            LAUNCH_CHECK("rope_qk_kernel");
            return true;
        default:
            break;
    }
    vt_set_error("cuda: '%s': %s is not a projector op", t->name, vt_op_name(t->op));
    return false;
}

// avg_pool2, rms_norm, swiglu, relu, silu, silu_mul, stack: the ops of the audio LLMs' projectors; rope_qk (GLM-ASR's encoder).
static bool launch_projector_op(const launch_ctx & lc, vt_tensor * t) {
    switch (t->type) {
        case VT_TYPE_F16:  return launch_projector_op_t<__half>(lc, t);
        case VT_TYPE_BF16: return launch_projector_op_t<__nv_bfloat16>(lc, t);
        case VT_TYPE_F32:  return launch_projector_op_t<float>(lc, t);
    }
    vt_set_error("cuda: '%s': unsupported type", t->name);
    return false;
}

// attention: attention_wgmma_kernel on Hopper (opt: its variant, from VT_ATTENTION), else
// attention_kernel (also where a view's strides do not fit TMA).
static bool launch_attention(const launch_ctx & lc, vt_tensor * t, bool wgmma, att_wgmma_opts opt) {
    if (wgmma) {
        bool launched = false;
        const bool ok = t->type == VT_TYPE_F16 ? launch_attention_wgmma<__half>(lc, t, opt, &launched)
                                               : launch_attention_wgmma<__nv_bfloat16>(lc, t, opt, &launched);
        if (!ok || launched) return ok;
    }
    if (t->type == VT_TYPE_F16) return launch_attention_mt<__half, ATT_MT>(lc, t);
    return launch_attention_mt<__nv_bfloat16, ATT_MT>(lc, t);
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

// log_mel: ranges, frames, then the normalisation over each window (or its max alone)
static bool launch_log_mel(const launch_ctx & lc, vt_tensor * t, const mel_tables * tables, float * block_max, int2 * ranges) {
    const vt_tensor * pcm = t->src[0], * filters = t->src[1];
    const float * params = t->src[2] ? (const float *)t->src[2]->data : nullptr;
    const bool max_only = t->iparams[0];
    const int hop = t->iparams[2], n_frames = t->iparams[3], n_blocks = log_mel_blocks(n_frames);   // (n_fft: MEL_N_FFT)
    const int n_mels = (int)filters->ne[1], B = (int)pcm->ne[1];
    mel_ranges_kernel<<<(unsigned)ceil_div(n_mels, 128), 128, 0, lc.stream>>>(ranges, (const float *)filters->data, n_mels);
    CUDA_CHECK(cudaGetLastError());
    log_mel_frames_kernel<<<dim3(n_blocks, B), MEL_THREADS, log_mel_smem_bytes(), lc.stream>>>(
        max_only ? nullptr : (float *)t->data, block_max, (const float *)pcm->data, (const float *)filters->data, ranges,
        n_mels, params, tables, pcm->ne[0], hop, n_frames);
    CUDA_CHECK(cudaGetLastError());
    if (max_only) {
        log_mel_max_kernel<<<B, 256, 0, lc.stream>>>((float *)t->data, block_max, n_blocks);
        CUDA_CHECK(cudaGetLastError());
        return true;
    }
    const size_t per_window = (size_t)n_mels * n_frames;
    const int bx = (int)std::max<int64_t>(1, std::min<int64_t>(ceil_div((int64_t)per_window, 256 * 4), 4 * lc.n_sm / B));
    log_mel_norm_kernel<<<dim3(bx, B), 256, 0, lc.stream>>>((float *)t->data, block_max, per_window, params, n_frames, n_blocks);
    CUDA_CHECK(cudaGetLastError());
    return true;
}

// =====================================================================================
// the backend
// =====================================================================================

namespace {

// What alloc_graph decides for one node, so that compute only launches.
struct node_plan {
    lt_gemm gemm;                // linear, conv1d_k3
    bool epilogue = false;       // run epilogue_kernel after the GEMM
    bool epi_bias = false;       // ... adding the f32 bias there (not in the GEMM)
    bool epi_res = false;        // ... adding the residual there
    int64_t chunk_windows = 0;   // conv1d_k3, conv2d_k3s2: windows per im2col chunk (conv2d: 0 runs it direct)
    bool fp8 = false;            // linear: an FP8 GEMM on the quantized input (graph_state's fp8_x)
    bool x_quantized = false;    // ... which the node before it left there (no quantize here)
    bool quantize_out = false;   // linear with GELU, layer_norm: writes gelu(y + b) / the norm quantized
                                 // into fp8_x for the next node (its one use), not y itself
};

struct graph_state {
    void * arena = nullptr;
    size_t arena_bytes = 0;
    std::vector<std::pair<const vt_tensor *, float *>> f32_outputs;   // outputs and their f32 copies
    size_t f32_bytes = 0;
    void * im2col = nullptr;
    size_t im2col_bytes = 0;
    std::vector<node_plan> plans;          // per g->nodes entry
    cudaGraphExec_t exec = nullptr;        // the captured forward
    uint64_t weights_gen = 0;              // weights generation it was captured with
    float * mel_max = nullptr;             // log_mel: per window, each frame block's max
    int2 * mel_ranges = nullptr;           // log_mel: each mel row's non-zero bins
    size_t mel_bytes = 0;
    void * fp8_x = nullptr;                // FP8 mode: the current linear's quantized input
    float * fp8_scale = nullptr;           // ... and its scale per row
    size_t fp8_bytes = 0;
};

// One of vt_backend_submit's two slots: device copies of the input and the converted output,
// and the events that order the three streams.
struct submit_slot {
    void * in = nullptr;  size_t in_bytes = 0;
    void * out = nullptr; size_t out_bytes = 0;
    cudaEvent_t uploaded = nullptr;        // in holds the host input (upload stream)
    cudaEvent_t consumed = nullptr;        // in copied into the graph (compute stream)
    cudaEvent_t computed = nullptr;        // out holds the result (compute stream)
    cudaEvent_t done = nullptr;            // out copied to the host (download stream)
};

struct cuda_backend : vt_backend {
    int device = 0;
    vt_type ctype = VT_TYPE_F16;
    char label[300] = {0};
    bool att_wgmma = false;                     // attention_wgmma_kernel on cc 9.0, else attention_kernel
    att_wgmma_opts att_opts;                    // its variant (VT_ATTENTION)
    cudaStream_t stream = nullptr;
    launch_ctx lc;                              // stream and SM count, for the launchers
    cublasLtHandle_t lt = nullptr;
    void * lt_ws = nullptr;                     // cuBLASLt workspace, allocated with the first graph
    mel_tables * mel_tab = nullptr;             // log_mel's window and twiddles, on the device

    std::vector<void *> weight_buffers;         // one per alloc_weights call
    size_t weight_bytes = 0;
    uint64_t weights_gen = 1;                   // bumped by alloc_weights: captured graphs re-capture
    std::unordered_map<const vt_tensor *, void *> shadow;   // f32 weight -> its compute-type copy

    // FP8 mode (vt_backend_params.fp8): each 2-D weight that an FP8 GEMM can take gets an
    // e4m3 copy with a scale per row (output channel), made on the device at set_tensor.
    struct fp8_weight { void * q; float * scale; };
    bool fp8 = false;
    std::unordered_map<const vt_tensor *, fp8_weight> fp8_weights;
    std::unordered_map<std::string, cublasLtMatmulAlgo_t> tuned;   // tune_gemm's choices

    std::unordered_map<const vt_tensor *, float *> f32_copies;   // graph outputs -> their f32 copies
    void * staging = nullptr;                   // pinned host memory for downloads
    size_t staging_bytes = 0;
    // set_tensor's pieces in flight: two pinned host buffers, two device ones for a piece to be
    // converted, each reused once its event says the piece before last is through
    // piece: the bytes a buffer holds, UPLOAD_PIECE or the largest weight's (alloc_weights)
    struct uploader { void * host[2] = {}; void * raw[2] = {}; cudaEvent_t done[2] = {}; int next = 0; size_t piece = 0; } up_bufs;

    std::set<vt_graph *> graphs;                // allocated here, released by the destructor
    size_t graph_bytes = 0;

    cudaStream_t up = nullptr, down = nullptr;  // submit's copies in and out
    submit_slot slots[2];

    // The methods, defined below a section each:
    // starting and stopping
    bool init(int dev, vt_type type, bool fp8_gemms);
    ~cuda_backend() override;
    const char * name() const override { return label; }
    vt_type compute_type() const override { return ctype; }

    // memory: weights (with their shadows and FP8 copies), uploads and downloads
    bool alloc_weights(vt_context * ctx) override;
    bool fp8_eligible(const vt_tensor * t) const;
    bool ensure_staging(size_t bytes);
    bool upload(void * dst, vt_type dst_type, const void * src, vt_type src_type, size_t n);
    bool ensure_uploader();
    bool finish_uploads();
    bool set_tensor(vt_tensor * t, const void * src, vt_type src_type) override;
    bool get_tensor_f32(const vt_tensor * t, float * dst) override;
    size_t allocated_bytes() const override;

    // graphs: alloc_graph places the arena and plans every node (GEMM descriptors, timed
    // algorithms, FP8 fusions, scratch), so that running only launches
    bool alloc_graph(vt_graph * g) override;
    bool plan_linear(vt_tensor * t, node_plan & p, const graph_state * s, bool tune);
    void tune_gemm(lt_gemm & gm, const std::string & key, const void * w, const void * x, const void * c, void * d,
                   const void * bias);
    bool plan_fp8(vt_graph * g, graph_state * s);
    bool plan_conv(vt_tensor * t, node_plan & p, size_t & im2col_need);
    bool plan_conv2d(vt_tensor * t, node_plan & p, size_t & im2col_need);
    void free_state(graph_state * s);
    void release_graph(vt_graph * g) override;

    // running: a node's launches, the whole forward captured once as a CUDA graph
    bool run_node(graph_state * s, size_t i, vt_tensor * t);
    bool run_all(vt_graph * g, graph_state * s);
    bool convert_outputs(graph_state * s);
    bool capture(graph_state * s, vt_graph * g);
    bool launch(graph_state * s, vt_graph * g);
    bool prepare(vt_graph * g) override;
    bool compute(vt_graph * g) override;
    bool profile(vt_graph * g, double * ms) override;

    // asynchronous runs: upload | forward | download on three streams
    void * host_alloc(size_t bytes) override;
    void host_free(void * p) override { cudaFreeHost(p); }
    bool ensure_slot_buffer(void *& buf, size_t & have, size_t bytes);
    bool submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host, const vt_tensor * out,
                void * out_host, vt_type out_type, int slot) override;
    bool wait(int slot) override;
};

// ---- the backend: starting and stopping ----

cuda_backend::~cuda_backend() {
    cudaSetDevice(device);
    if (stream) cudaStreamSynchronize(stream);
    for (cudaStream_t st : {up, down}) if (st) { cudaStreamSynchronize(st); cudaStreamDestroy(st); }
    for (submit_slot & sl : slots) {
        if (sl.in) cudaFree(sl.in);
        if (sl.out) cudaFree(sl.out);
        for (cudaEvent_t e : {sl.uploaded, sl.consumed, sl.computed, sl.done}) if (e) cudaEventDestroy(e);
    }
    std::vector<vt_graph *> gs(graphs.begin(), graphs.end());
    for (vt_graph * g : gs) {
        release_graph(g);
        g->backend = nullptr;
    }
    for (void * p : weight_buffers) cudaFree(p);
    if (lt_ws) cudaFree(lt_ws);
    if (mel_tab) cudaFree(mel_tab);
    if (staging) cudaFreeHost(staging);
    finish_uploads();
    if (lt) g_lt.cublasLtDestroy(lt);
    if (stream) cudaStreamDestroy(stream);
}

bool cuda_backend::init(int dev, vt_type type, bool fp8_gemms) {
    device = dev;
    ctype = type;
    fp8 = fp8_gemms;
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 8) {
        vt_set_error("cuda: device %d (%s) has compute capability %d.%d; vt needs 8.0 or newer",
                     device, prop.name, prop.major, prop.minor);
        return false;
    }
    if (fp8 && prop.major * 10 + prop.minor < 89) {
        vt_set_error("cuda: device %d (%s) has compute capability %d.%d; FP8 GEMMs need 8.9 or newer",
                     device, prop.name, prop.major, prop.minor);
        return false;
    }
    snprintf(label, sizeof(label), "cuda (%s)%s", prop.name, fp8 ? " fp8" : "");
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    lc.stream = stream;
    lc.n_sm = prop.multiProcessorCount;
    CUDA_CHECK(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    for (submit_slot & sl : slots)
        for (cudaEvent_t * e : {&sl.uploaded, &sl.consumed, &sl.computed, &sl.done})
            CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    CUBLAS_CHECK(g_lt.cublasLtCreate(&lt));
    mel_tables tables;                              // the CPU's tables (whisper-audio.cpp)
    const double two_pi = 6.283185307179586476925286766559;
    for (int i = 0; i < MEL_N_FFT; i++) {
        tables.window[i] = 0.5 - 0.5 * std::cos(two_pi * i / MEL_N_FFT);
        tables.tw400[i] = make_double2(std::cos(two_pi * i / MEL_N_FFT), -std::sin(two_pi * i / MEL_N_FFT));
    }
    for (int i = 0; i < 20; i++) tables.tw20[i] = make_double2(std::cos(two_pi * i / 20), -std::sin(two_pi * i / 20));
    CUDA_CHECK(device_malloc(&mel_tab, sizeof(tables)));
    CUDA_CHECK(cudaMemcpy(mel_tab, &tables, sizeof(tables), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaFuncSetAttribute(log_mel_frames_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)log_mel_smem_bytes()));
    CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<__half, ATT_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)attention_smem_bytes(ATT_MT)));
    CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, ATT_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)attention_smem_bytes(ATT_MT)));
    // the attention kernel: wgmma on cc 9.0 (its sm_90a code runs there only); VT_ATTENTION
    // = fa2 forces attention_kernel, = wgmma (or a variant) insists on the new one
    const char * env = getenv("VT_ATTENTION");
    const std::string want = env ? env : "";
    const bool hopper = prop.major == 9 && prop.minor == 0;
    const bool insist = want == "wgmma" || want == "wgmma-nopp" || want == "wgmma-1tile" || want == "wgmma-128" ||
                        want == "wgmma-192";
    if (!want.empty() && want != "fa2" && !insist) {
        vt_set_error("cuda: VT_ATTENTION=%s; fa2, wgmma, wgmma-nopp, wgmma-1tile, wgmma-128 or wgmma-192 (unset: wgmma "
                     "on compute capability 9.0, else fa2)", env);
        return false;
    }
    if (insist && !hopper) {
        vt_set_error("cuda: VT_ATTENTION=%s: %s is compute capability %d.%d; the wgmma kernel needs 9.0",
                     env, prop.name, prop.major, prop.minor);
        return false;
    }
    int built = 0;
    if (hopper) CUDA_CHECK(cudaMemcpyFromSymbol(&built, g_wgmma_built, sizeof(built)));
    if (insist && hopper && !built) {
        vt_set_error("cuda: VT_ATTENTION=%s: this build has no sm_90a code (nvcc "
                     "-gencode=arch=compute_90a,code=sm_90a, as the Makefile does)", env);
        return false;
    }
    if (hopper && built && want != "fa2" && tensor_map_encode()) {
        att_wgmma = true;
        att_opts.pp = want != "wgmma-nopp";
        att_opts.one_tile = want == "wgmma-1tile";
        att_opts.consumers = want == "wgmma-128" ? 2 : want == "wgmma-192" ? 3 : 0;
    } else if (insist) {
        vt_set_error("cuda: VT_ATTENTION=%s: the driver has no cuTensorMapEncodeTiled (TMA)", env);
        return false;
    }
    if (att_wgmma && !(allow_attention_wgmma_smem<__half>() && allow_attention_wgmma_smem<__nv_bfloat16>())) return false;
    return true;
}

// ---- the backend: memory ----

// Weights go up in pieces of at most UPLOAD_PIECE bytes, the host data as it is (converted on the
// device: a 1.3 GB model's f16 -> bf16 on one host core took about 1 s). Each piece is copied
// into pinned memory by a few threads (the model file's pages are touched there), then goes up
// and is converted while the host copies the next: the device is waited for only when a buffer
// comes round again, and once at the end (finish_uploads). The run before this (a cudaMalloc and
// a synchronous copy per tensor from one thread) spent about 0.6 s on large-v3's weights.
static const size_t UPLOAD_PIECE = (size_t)32 << 20;

bool cuda_backend::alloc_weights(vt_context * ctx) {
    CUDA_CHECK(cudaSetDevice(device));
    size_t total = 0;
    for (int i = 0; i < vt_n_tensors(ctx); i++) {
        const vt_tensor * t = vt_get_tensor_at(ctx, i);
        shadow.erase(t);   // an earlier context's tensor may have lived at this address
        fp8_weights.erase(t);
        if (!(t->flags & VT_FLAG_WEIGHT)) continue;
        total += align_up(vt_nbytes(t), VT_ARENA_ALIGN);
        if (t->type == VT_TYPE_F32) total += align_up((size_t)vt_nelements(t) * vt_type_size(ctype), VT_ARENA_ALIGN);
        if (fp8_eligible(t)) total += align_up((size_t)vt_nelements(t), VT_ARENA_ALIGN) + align_up(t->ne[1] * sizeof(float), VT_ARENA_ALIGN);
    }
    // the upload's pinned buffers no larger than the largest weight as f32 (pinned memory costs
    // about 0.4 ms a MiB: base's largest is 4 MiB, two 32 MiB buffers took 30 ms of its init)
    if (!up_bufs.host[0]) {
        size_t largest = 0;
        for (int i = 0; i < vt_n_tensors(ctx); i++) {
            const vt_tensor * t = vt_get_tensor_at(ctx, i);
            if (t->flags & VT_FLAG_WEIGHT) largest = std::max(largest, (size_t)vt_nelements(t) * sizeof(float));
        }
        up_bufs.piece = std::min<size_t>(UPLOAD_PIECE, align_up(std::max<size_t>(largest, 1), (size_t)1 << 20));
    }
    char * buf = nullptr;
    CUDA_CHECK(device_malloc((void **)&buf, std::max<size_t>(total, VT_ARENA_ALIGN)));
    weight_buffers.push_back(buf);
    weight_bytes += total;
    weights_gen++;
    size_t off = 0;
    for (int i = 0; i < vt_n_tensors(ctx); i++) {
        vt_tensor * t = vt_get_tensor_at(ctx, i);
        if (!(t->flags & VT_FLAG_WEIGHT)) continue;
        t->data = buf + off;
        off += align_up(vt_nbytes(t), VT_ARENA_ALIGN);
        if (t->type == VT_TYPE_F32) {
            shadow[t] = buf + off;
            off += align_up((size_t)vt_nelements(t) * vt_type_size(ctype), VT_ARENA_ALIGN);
        }
        if (fp8_eligible(t)) {
            fp8_weight & f = fp8_weights[t];
            f.q = buf + off;
            off += align_up((size_t)vt_nelements(t), VT_ARENA_ALIGN);
            f.scale = (float *)(buf + off);
            off += align_up(t->ne[1] * sizeof(float), VT_ARENA_ALIGN);
        }
    }
    return true;
}

// A weight [N, K] whose GEMMs run in FP8: flagged so (vt_set_fp8), 16-bit, 2-D, N and K
// multiples of 16 (the FP8 GEMMs' rule), rows no wider than the quantize kernel takes.
bool cuda_backend::fp8_eligible(const vt_tensor * t) const {
    return fp8 && (t->flags & VT_FLAG_FP8) && (t->type == VT_TYPE_F16 || t->type == VT_TYPE_BF16) &&
           t->ne[2] == 1 && t->ne[3] == 1 &&
           t->ne[0] % 16 == 0 && t->ne[1] % 16 == 0 && t->ne[0] <= QUANT_MAX_K;
}

bool cuda_backend::ensure_staging(size_t bytes) {
    if (bytes <= staging_bytes) return true;
    if (staging) CUDA_CHECK(cudaFreeHost(staging));
    staging = nullptr;
    staging_bytes = 0;
    CUDA_CHECK(cudaMallocHost(&staging, bytes));
    staging_bytes = bytes;
    return true;
}

bool cuda_backend::ensure_uploader() {
    if (up_bufs.piece == 0) up_bufs.piece = UPLOAD_PIECE;
    for (int b = 0; b < 2; b++) {
        if (up_bufs.host[b]) continue;
        CUDA_CHECK(cudaMallocHost(&up_bufs.host[b], up_bufs.piece));
        CUDA_CHECK(device_malloc_bytes(&up_bufs.raw[b], up_bufs.piece));
        CUDA_CHECK(cudaEventCreateWithFlags(&up_bufs.done[b], cudaEventDisableTiming));
    }
    return true;
}

// The uploads' end: their errors reported, their buffers released (a later set_tensor makes them again).
bool cuda_backend::finish_uploads() {
    if (!up_bufs.host[0]) return true;
    const cudaError_t e = cudaStreamSynchronize(stream);
    for (int b = 0; b < 2; b++) {
        if (up_bufs.host[b]) cudaFreeHost(up_bufs.host[b]);
        if (up_bufs.raw[b]) cudaFree(up_bufs.raw[b]);
        if (up_bufs.done[b]) cudaEventDestroy(up_bufs.done[b]);
    }
    up_bufs = uploader();
    if (e != cudaSuccess) { vt_set_error("cuda: uploading the weights failed: %s", cudaGetErrorString(e)); return false; }
    return true;
}

// memcpy over up to 4 threads for a large piece (pages of a mapped file fault in parallel).
static void parallel_copy(void * dst, const void * src, size_t bytes) {
    const size_t n_threads = std::min<size_t>({4, std::max(1u, std::thread::hardware_concurrency()), bytes >> 22});
    if (n_threads <= 1) { memcpy(dst, src, bytes); return; }
    const size_t part = (bytes / n_threads + 63) & ~(size_t)63;
    std::vector<std::thread> th;
    for (size_t i = 1; i < n_threads; i++) {
        const size_t off = i * part;
        if (off < bytes) th.emplace_back([=] { memcpy((char *)dst + off, (const char *)src + off, std::min(part, bytes - off)); });
    }
    memcpy(dst, src, std::min(part, bytes));
    for (std::thread & t : th) t.join();
}

bool cuda_backend::upload(void * dst, vt_type dst_type, const void * src, vt_type src_type, size_t n) {
    if (!ensure_uploader()) return false;
    const size_t es = vt_type_size(src_type), ds = vt_type_size(dst_type), chunk = up_bufs.piece / es;
    for (size_t i = 0; i < n; i += chunk) {
        const size_t k = std::min(chunk, n - i);
        const int b = up_bufs.next;
        up_bufs.next ^= 1;
        CUDA_CHECK(cudaEventSynchronize(up_bufs.done[b]));          // its last piece is through
        parallel_copy(up_bufs.host[b], (const char *)src + i * es, k * es);
        char * out = (char *)dst + i * ds;
        if (src_type == dst_type) {
            CUDA_CHECK(cudaMemcpyAsync(out, up_bufs.host[b], k * es, cudaMemcpyHostToDevice, stream));
        } else {
            CUDA_CHECK(cudaMemcpyAsync(up_bufs.raw[b], up_bufs.host[b], k * es, cudaMemcpyHostToDevice, stream));
            if (!launch_convert(lc, out, dst_type, up_bufs.raw[b], src_type, k)) return false;
        }
        CUDA_CHECK(cudaEventRecord(up_bufs.done[b], stream));
    }
    return true;
}

bool cuda_backend::set_tensor(vt_tensor * t, const void * src, vt_type src_type) {
    CUDA_CHECK(cudaSetDevice(device));
    const size_t n = (size_t)vt_nelements(t);
    auto it = shadow.find(t);
    if (src_type == t->type && it == shadow.end() && n * vt_type_size(src_type) < ((size_t)1 << 20)) {
        // small and as is (a bias, a graph's input): one copy, no pieces
        CUDA_CHECK(cudaMemcpyAsync(t->data, src, n * vt_type_size(src_type), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return true;
    }
    if (!upload(t->data, t->type, src, src_type, n)) return false;
    if (it != shadow.end() && !upload(it->second, ctype, src, src_type, n)) return false;
    auto f = fp8_weights.find(t);   // the e4m3 copy, from the 16-bit one just written
    if (f != fp8_weights.end()) {
        if (!launch_quantize(lc, t->type, f->second.q, f->second.scale, t->data, false, nullptr, t->ne[1], t->ne[0])) return false;
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return true;
}

bool cuda_backend::get_tensor_f32(const vt_tensor * t, float * dst) {
    CUDA_CHECK(cudaSetDevice(device));
    auto copy = f32_copies.find(t);
    if (t->type == VT_TYPE_F32 || copy != f32_copies.end()) {   // f32 on the device: one copy
        const void * src = t->type == VT_TYPE_F32 ? t->data : copy->second;
        CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)vt_nelements(t) * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return true;
    }
    const size_t bytes = vt_nbytes(t);
    if (!ensure_staging(bytes)) return false;
    CUDA_CHECK(cudaMemcpyAsync(staging, t->data, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    vt_convert(dst, VT_TYPE_F32, staging, t->type, (size_t)vt_nelements(t));
    return true;
}

size_t cuda_backend::allocated_bytes() const {
    return weight_bytes + graph_bytes + (lt_ws ? LT_WORKSPACE_BYTES : 0);
}

// ---- the backend: graphs ----

bool cuda_backend::plan_linear(vt_tensor * t, node_plan & p, const graph_state * s, bool tune) {
    const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
    const int act = t->iparams[1];
    if (w->type != VT_TYPE_F16 && w->type != VT_TYPE_BF16) {
        vt_set_error("cuda: linear '%s': weight type %s; f16 or bf16 only", t->name, vt_type_name(w->type));
        return false;
    }
    const int64_t K = x->ne[0], N = w->ne[1], rows = x->ne[1] * x->ne[2] * x->ne[3];
    // Act NONE: bias (its shadow) in the GEMM's epilogue, residual as beta = 1: one kernel.
    // GELU (fc1) in f16/bf16: bias and GELU in the GEMM's epilogue too, cuBLASLt's tanh form of
    // GELU. It saves the pass over fc1's output (10% of large-v3's forward) and measured closer to
    // float64's exact-GELU model than the pass (H100, tests/gpu/parity.py, issue 29: base and
    // large-v3 0.81-0.96x transformers' own error, the exact pass 0.84-0.97x); likely because the
    // epilogue applies GELU to the f32 accumulator where the pass read back the product rounded to
    // f16/bf16, a rounding larger than tanh's departure from erf (at most 4.7e-4, at x = -2.7).
    // FP8's fc1 is a plain GEMM whose bias and GELU (the same tanh form) fc2's quantization
    // applies (quantize_rows_kernel); the rest (a GELU linear with a residual, an FP8 fc1 whose
    // output is also read elsewhere) a plain GEMM, then epilogue_kernel (f32 bias, exact GELU, residual).
    const bool lt_gelu = act == VT_ACT_GELU && !res && !p.fp8 && !p.quantize_out && (!b || shadow.count(b));
    const void * lt_bias = nullptr;
    if ((act == VT_ACT_NONE || lt_gelu) && b) {
        auto it = shadow.find(b);
        if (it != shadow.end()) lt_bias = it->second;
    }
    const bool lt_res = act == VT_ACT_NONE && res;
    p.epi_bias = b && !lt_bias;
    p.epi_res = res && !lt_res;
    p.epilogue = p.epi_bias || p.epi_res || (act != VT_ACT_NONE && !lt_gelu);
    uint32_t align_cd = alignment_of((uintptr_t)t->data);
    if (lt_res) align_cd = std::min(align_cd, alignment_of((uintptr_t)res->data));
    const void * wq = p.fp8 ? fp8_weights.at(w).q : w->data, * xq = p.fp8 ? s->fp8_x : x->data;
    const uint32_t align_a = alignment_of((uintptr_t)wq), align_b = alignment_of((uintptr_t)xq);
    if (!lt_gemm_plan(lt, p.gemm, t->type, rows, N, K, lt_bias, lt_res, align_a, align_b, align_cd, t->name,
                      p.fp8 ? fp8_weights.at(w).scale : nullptr, p.fp8 ? s->fp8_scale : nullptr, lt_gelu)) {
        return false;
    }
    char key[160];
    snprintf(key, sizeof(key), "%d %d %lld %lld %lld %d %d %u %u %u %d", (int)t->type, (int)p.fp8, (long long)rows,
             (long long)N, (long long)K, (int)(lt_bias != nullptr), (int)lt_res, align_a, align_b, align_cd, (int)lt_gelu);
    if (tune) {
        tune_gemm(p.gemm, key, wq, xq, lt_res ? res->data : nullptr, t->data, lt_bias);
    } else {                                          // a shape timed before keeps its choice
        auto it = tuned.find(key);
        if (it != tuned.end()) p.gemm.algo = it->second;
    }
    return true;
}

// The graph nodes one cuBLASLt call of this algorithm adds (captured, not run): some
// algorithms put a small memset before their kernel. 0 when it cannot be told.
static size_t lt_gemm_nodes(cublasLtHandle_t lt, cudaStream_t stream, const lt_gemm & gm, const void * w, const void * x,
                            const void * c, void * d, const void * bias, void * ws) {
    cudaGraph_t g = nullptr;
    size_t n = 0;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) { cudaGetLastError(); return 0; }
    const bool ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, ws);
    if (cudaStreamEndCapture(stream, &g) == cudaSuccess && ok) cudaGraphGetNodes(g, nullptr, &n);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    return ok ? n : 0;
}

// In a replayed graph each node after the first costs a dependency's latency that timing
// the calls back to back does not see: the H200's timeline of large-v3 at batch 1 had 5.6 us
// more gap per qkv GEMM with cuBLASLt's memset before it (0.206 ms against 0.028 over 32).
static const float LT_EXTRA_NODE_MS = 0.0056f;

// Picks the fastest of the heuristic's candidate algorithms for a GEMM by timing each on
// the graph's own buffers (3 runs after a warm one; a call's extra graph nodes charged
// LT_EXTRA_NODE_MS each), once per shape and setting; the heuristic's first choice is kept
// when VT_GEMM_TUNE=0; VT_GEMM_TUNE=log prints each candidate's time and nodes to stderr.
// Writes only the node's output.
void cuda_backend::tune_gemm(lt_gemm & gm, const std::string & key, const void * w, const void * x, const void * c, void * d,
                             const void * bias) {
    auto it = tuned.find(key);
    if (it != tuned.end()) { gm.algo = it->second; return; }
    const char * env = getenv("VT_GEMM_TUNE");
    if (gm.candidates.size() > 1 && !(env && strcmp(env, "0") == 0)) {
        cudaEvent_t e0 = nullptr, e1 = nullptr;
        float best = INFINITY;
        cublasLtMatmulAlgo_t best_algo = gm.algo;
        const bool log = env && strcmp(env, "log") == 0;
        int best_i = -1;
        if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
            for (size_t i = 0; i < gm.candidates.size(); i++) {
                const cublasLtMatmulAlgo_t & a = gm.candidates[i];
                gm.algo = a;
                const size_t nodes = lt_gemm_nodes(lt, stream, gm, w, x, c, d, bias, lt_ws);
                bool ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, lt_ws) && cudaEventRecord(e0, stream) == cudaSuccess;
                for (int r = 0; ok && r < 3; r++) ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, lt_ws);
                float ms = INFINITY;
                ok = ok && cudaEventRecord(e1, stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
                     cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
                const float per_call = ms / 3 + (nodes > 1 ? (float)(nodes - 1) * LT_EXTRA_NODE_MS : 0.0f);
                if (ok && per_call < best) { best = per_call; best_algo = a; best_i = (int)i; }
                if (log) fprintf(stderr, "vt: gemm tune [%s] candidate %zu: %.4f ms a call, %zu graph nodes%s\n", key.c_str(), i,
                                 ok ? ms / 3 : -1.0f, nodes, ok ? "" : " (failed)");
            }
        }
        if (log) fprintf(stderr, "vt: gemm tune [%s] chose candidate %d\n", key.c_str(), best_i);
        cudaStreamSynchronize(stream);
        cudaGetLastError();   // a candidate that failed to run is simply not chosen
        if (e0) cudaEventDestroy(e0);
        if (e1) cudaEventDestroy(e1);
        gm.algo = best_algo;
    }
    tuned[key] = gm.algo;
}

// FP8 mode: which linear nodes run FP8 GEMMs, which GELU epilogues quantize for the node
// after them, and the scratch for the quantized inputs (sized for the largest).
bool cuda_backend::plan_fp8(vt_graph * g, graph_state * s) {
    std::unordered_map<const vt_tensor *, int> uses;
    for (const vt_tensor * t : g->nodes) for (const vt_tensor * src : t->src) if (src) uses[src]++;
    for (const vt_tensor * t : g->views) uses[t->src[0]]++;
    size_t x_bytes = 0, rows_max = 0;
    for (size_t i = 0; i < g->nodes.size(); i++) {
        const vt_tensor * t = g->nodes[i];
        if (t->op != VT_OP_LINEAR || fp8_weights.find(t->src[1]) == fp8_weights.end()) continue;
        const vt_tensor * x = t->src[0];
        const int64_t K = x->ne[0], rows = x->ne[1] * x->ne[2] * x->ne[3];
        s->plans[i].fp8 = true;
        x_bytes = std::max(x_bytes, (size_t)(rows * K));
        rows_max = std::max(rows_max, (size_t)rows);
        // x made by the node just before and used only here, a GELU linear (fc1) or a
        // LayerNorm: that node writes x quantized (x never exists in f16/bf16)
        const vt_tensor * b = x->src[2];
        const bool gelu = x->op == VT_OP_LINEAR && x->iparams[1] == VT_ACT_GELU && !x->src[3] && (!b || b->type == VT_TYPE_F32);
        const bool norm = x->op == VT_OP_LAYER_NORM && layer_norm_vec_ok(x);
        if (i > 0 && g->nodes[i - 1] == x && (gelu || norm) && uses[x] == 1 && !(x->flags & VT_FLAG_OUTPUT)) {
            s->plans[i - 1].quantize_out = true;
            s->plans[i].x_quantized = true;
        }
    }
    if (x_bytes == 0) return true;
    cudaError_t err = device_malloc(&s->fp8_x, x_bytes);
    if (err == cudaSuccess) err = device_malloc((void **)&s->fp8_scale, rows_max * sizeof(float));
    if (err != cudaSuccess) {
        vt_set_error("cuda: cudaMalloc of the %zu-byte FP8 input scratch failed: %s", x_bytes, cudaGetErrorString(err));
        return false;
    }
    s->fp8_bytes = x_bytes + rows_max * sizeof(float);
    graph_bytes += s->fp8_bytes;
    return true;
}

bool cuda_backend::plan_conv(vt_tensor * t, node_plan & p, size_t & im2col_need) {
    const vt_tensor * x = t->src[0], * w = t->src[1];
    if (w->type != VT_TYPE_F16 && w->type != VT_TYPE_BF16) {
        vt_set_error("cuda: conv1d_k3 '%s': weight type %s; f16 or bf16 only", t->name, vt_type_name(w->type));
        return false;
    }
    for (int d = 0; d < 3; d++) {
        if (x->nb[d] % vt_type_size(x->type) != 0) {
            vt_set_error("cuda: conv1d_k3 '%s': input strides must be whole elements", t->name);
            return false;
        }
    }
    const int64_t C_in = x->ne[0], K = 3 * C_in, N = w->ne[2], T_out = t->ne[1], B = t->ne[2];
    const size_t es = vt_type_size(t->type);
    const size_t per_window = (size_t)T_out * K * es;
    int64_t cw = 1;                                    // the largest divisor of B that fits the cap
    for (int64_t d = B; d >= 1; d--) {
        if (B % d == 0 && (d == 1 || (size_t)d * per_window <= IM2COL_CAP_BYTES)) { cw = d; break; }
    }
    p.chunk_windows = cw;
    im2col_need = std::max(im2col_need, align_up((size_t)cw * per_window, VT_ARENA_ALIGN));
    p.epilogue = p.epi_bias = true;
    // D of chunk c starts at out + c * cw * T_out * N elements
    const uint32_t align_d = std::min(alignment_of((uintptr_t)t->data), alignment_of((uintptr_t)(cw * T_out * N * es)));
    return lt_gemm_plan(lt, p.gemm, t->type, cw * T_out, N, K, nullptr, false, alignment_of((uintptr_t)w->data),
                        256, align_d, t->name);
}

// conv2d_k3s2: im2col + GEMM as conv1d_k3 (K = 9 C_in), or the direct kernel where K is no multiple
// of 8 (the stem's first stage: C_in 1).
bool cuda_backend::plan_conv2d(vt_tensor * t, node_plan & p, size_t & im2col_need) {
    const vt_tensor * x = t->src[0], * w = t->src[1];
    if (w->type != VT_TYPE_F16 && w->type != VT_TYPE_BF16) {
        vt_set_error("cuda: conv2d_k3s2 '%s': weight type %s; f16 or bf16 only", t->name, vt_type_name(w->type));
        return false;
    }
    for (int d = 0; d < 4; d++) {
        if (x->nb[d] % vt_type_size(x->type) != 0) {
            vt_set_error("cuda: conv2d_k3s2 '%s': input strides must be whole elements", t->name);
            return false;
        }
    }
    const int64_t K = 9 * w->ne[2], N = w->ne[3], rows_w = t->ne[1] * t->ne[2], B = t->ne[3];
    p.chunk_windows = 0;
    if (K % 8 != 0) return true;                       // direct: bias and GELU in the kernel
    const size_t es = vt_type_size(t->type);
    const size_t per_window = (size_t)rows_w * K * es;
    int64_t cw = 1;                                    // the largest divisor of B that fits the cap
    for (int64_t d = B; d >= 1; d--) {
        if (B % d == 0 && (d == 1 || (size_t)d * per_window <= IM2COL_CAP_BYTES)) { cw = d; break; }
    }
    p.chunk_windows = cw;
    im2col_need = std::max(im2col_need, align_up((size_t)cw * per_window, VT_ARENA_ALIGN));
    p.epilogue = p.epi_bias = true;
    const uint32_t align_d = std::min(alignment_of((uintptr_t)t->data), alignment_of((uintptr_t)(cw * rows_w * N * es)));
    return lt_gemm_plan(lt, p.gemm, t->type, cw * rows_w, N, K, nullptr, false, alignment_of((uintptr_t)w->data),
                        256, align_d, t->name);
}

void cuda_backend::free_state(graph_state * s) {
    for (node_plan & p : s->plans) p.gemm.destroy();
    if (s->exec) cudaGraphExecDestroy(s->exec);
    if (s->arena) cudaFree(s->arena);
    if (s->im2col) cudaFree(s->im2col);
    if (s->mel_max) cudaFree(s->mel_max);
    if (s->mel_ranges) cudaFree(s->mel_ranges);
    if (s->fp8_x) cudaFree(s->fp8_x);
    if (s->fp8_scale) cudaFree(s->fp8_scale);
    for (auto & o : s->f32_outputs) {
        cudaFree(o.second);
        f32_copies.erase(o.first);
    }
    graph_bytes -= s->arena_bytes + s->im2col_bytes + s->f32_bytes + s->mel_bytes + s->fp8_bytes;
    delete s;
}

bool cuda_backend::alloc_graph(vt_graph * g) {
    CUDA_CHECK(cudaSetDevice(device));
    if (!finish_uploads()) return false;
    for (vt_tensor * t : g->leaves) {
        if ((t->flags & VT_FLAG_WEIGHT) && !(t->flags & VT_FLAG_INPUT) && !t->data) {
            vt_set_error("cuda: weight '%s' has no storage: call vt_backend_alloc_weights first", t->name);
            return false;
        }
    }
    for (vt_tensor * t : g->nodes) {
        if (t->type == VT_TYPE_F32 && t->op != VT_OP_LAYER_NORM && t->op != VT_OP_LOG_MEL) {
            vt_set_error("cuda: '%s' (%s) is f32; the CUDA backend computes in f16/bf16", t->name, vt_op_name(t->op));
            return false;
        }
    }
    graph_state * s = new graph_state;
    s->arena_bytes = std::max<size_t>(g->arena_size, VT_ARENA_ALIGN);
    cudaError_t err = device_malloc(&s->arena, s->arena_bytes);
    if (err != cudaSuccess) {
        vt_set_error("cuda: cudaMalloc of the %zu-byte arena failed: %s", s->arena_bytes, cudaGetErrorString(err));
        s->arena_bytes = 0;
        delete s;
        return false;
    }
    graph_bytes += s->arena_bytes;
    for (vt_tensor * t : g->leaves) if (t->flags & VT_FLAG_INPUT) t->data = (char *)s->arena + t->arena_offset;
    for (vt_tensor * t : g->nodes) t->data = (char *)s->arena + t->arena_offset;
    vt_graph_resolve_views(g);

    if (!lt_ws) {
        err = device_malloc(&lt_ws, LT_WORKSPACE_BYTES);
        if (err != cudaSuccess) {
            lt_ws = nullptr;
            vt_set_error("cuda: cudaMalloc of the cuBLASLt workspace failed: %s", cudaGetErrorString(err));
            free_state(s);
            return false;
        }
    }

    s->plans.resize(g->nodes.size());
    size_t im2col_need = 0, mel_blocks = 0, mel_rows = 0;
    bool ok = !fp8 || plan_fp8(g, s);
    for (size_t i = 0; ok && i < g->nodes.size(); i++) {
        vt_tensor * t = g->nodes[i];
        switch (t->op) {
            case VT_OP_LINEAR:     ok = plan_linear(t, s->plans[i], s, g->tune); break;
            case VT_OP_CONV1D_K3:  ok = plan_conv(t, s->plans[i], im2col_need); break;
            case VT_OP_CONV2D_K3S2: ok = plan_conv2d(t, s->plans[i], im2col_need); break;
            case VT_OP_ADD_ROWS:   break;
            case VT_OP_ATTENTION:  ok = attention_supported(t); break;
            case VT_OP_LAYER_NORM: break;
            case VT_OP_LOG_MEL:
                if (t->iparams[1] != MEL_N_FFT) {
                    vt_set_error("cuda: log_mel '%s': n_fft %d; the CUDA kernel's DFT has %d points (20 x 20)",
                                 t->name, t->iparams[1], MEL_N_FFT);
                    ok = false;
                    break;
                }
                mel_blocks = std::max(mel_blocks, (size_t)t->src[0]->ne[1] * log_mel_blocks(t->iparams[3]));
                mel_rows = std::max(mel_rows, (size_t)t->src[1]->ne[1]);
                break;
            case VT_OP_AVG_POOL2: case VT_OP_RMS_NORM: case VT_OP_SWIGLU: case VT_OP_STACK: case VT_OP_ROPE_QK: case VT_OP_RELU: case VT_OP_SILU: case VT_OP_SILU_MUL: break;
            default:
                vt_set_error("cuda: op %s ('%s') has no CUDA kernel", vt_op_name(t->op), t->name);
                ok = false;
        }
    }
    if (ok && im2col_need > 0) {
        err = device_malloc(&s->im2col, im2col_need);
        if (err != cudaSuccess) {
            s->im2col = nullptr;
            vt_set_error("cuda: cudaMalloc of the %zu-byte im2col buffer failed: %s", im2col_need, cudaGetErrorString(err));
            ok = false;
        } else {
            s->im2col_bytes = im2col_need;
            graph_bytes += im2col_need;
        }
    }
    if (ok && mel_blocks > 0) {                 // log_mel's scratch, shared by its nodes (one after another)
        err = device_malloc(&s->mel_max, mel_blocks * sizeof(float));
        if (err == cudaSuccess) err = device_malloc(&s->mel_ranges, mel_rows * sizeof(int2));
        if (err != cudaSuccess) {
            vt_set_error("cuda: cudaMalloc of the log-mel scratch failed: %s", cudaGetErrorString(err));
            ok = false;
        } else {
            s->mel_bytes = mel_blocks * sizeof(float) + mel_rows * sizeof(int2);
            graph_bytes += s->mel_bytes;
        }
    }
    // each output that is not f32 gets an f32 copy, made at the end of the forward
    for (vt_tensor * t : g->nodes) {
        if (!ok || !(t->flags & VT_FLAG_OUTPUT) || t->type == VT_TYPE_F32) continue;
        float * copy = nullptr;
        const size_t bytes = (size_t)vt_nelements(t) * sizeof(float);
        err = device_malloc(&copy, bytes);
        if (err != cudaSuccess) {
            vt_set_error("cuda: cudaMalloc of the %zu-byte f32 output copy failed: %s", bytes, cudaGetErrorString(err));
            ok = false;
            break;
        }
        s->f32_outputs.push_back({t, copy});
        s->f32_bytes += bytes;
        graph_bytes += bytes;
        f32_copies[t] = copy;
    }
    if (!ok) {
        free_state(s);
        return false;
    }
    g->backend_state = s;
    graphs.insert(g);
    return true;
}

void cuda_backend::release_graph(vt_graph * g) {
    graph_state * s = (graph_state *)g->backend_state;
    graphs.erase(g);
    if (!s) return;
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    free_state(s);
    g->backend_state = nullptr;
}

// ---- the backend: running ----

bool cuda_backend::run_node(graph_state * s, size_t i, vt_tensor * t) {
    node_plan & p = s->plans[i];
    switch (t->op) {
        case VT_OP_LINEAR: {
            const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
            const int64_t N = w->ne[1], rows = x->ne[1] * x->ne[2] * x->ne[3];
            const void * lt_bias = p.gemm.bias ? shadow[b] : nullptr;
            if (p.fp8) {
                const int64_t K = x->ne[0];
                if (!p.x_quantized && !launch_quantize(lc, x->type, s->fp8_x, s->fp8_scale, x->data, false, nullptr, rows, K))
                    return false;
                if (!lt_gemm_run(lt, stream, p.gemm, fp8_weights.at(w).q, s->fp8_x, res ? res->data : nullptr, t->data, lt_bias, lt_ws))
                    return false;
            } else if (!lt_gemm_run(lt, stream, p.gemm, w->data, x->data, res ? res->data : nullptr, t->data, lt_bias, lt_ws)) {
                return false;
            }
            if (p.quantize_out) {   // gelu(y + b), quantized for the next node (plan_fp8)
                return launch_quantize(lc, t->type, s->fp8_x, s->fp8_scale, t->data, true,
                                       b ? (const float *)b->data : nullptr, rows, N);
            }
            if (p.epilogue) {
                return launch_epilogue(lc, t->type, t->data, p.epi_bias ? (const float *)b->data : nullptr,
                                       p.epi_res ? res->data : nullptr, nullptr, 1, rows, N, t->iparams[1]);
            }
            return true;
        }
        case VT_OP_CONV1D_K3: {
            const vt_tensor * w = t->src[1], * b = t->src[2], * add = t->src[3];
            const int64_t N = w->ne[2], T_out = t->ne[1], B = t->ne[2];
            const int64_t cw = p.chunk_windows, chunk_rows = cw * T_out;
            const size_t es = vt_type_size(t->type);
            for (int64_t b0 = 0; b0 < B; b0 += cw) {
                if (!launch_im2col(lc, t->type, s->im2col, t, b0, chunk_rows)) return false;
                void * d = (char *)t->data + (size_t)(b0 * T_out * N) * es;
                if (!lt_gemm_run(lt, stream, p.gemm, w->data, s->im2col, nullptr, d, nullptr, lt_ws)) return false;
            }
            const int64_t add_rows = t->iparams[2] ? t->iparams[2] / t->iparams[0] : T_out;   // vt_conv1d_k3_chunks: per chunk
            return launch_epilogue(lc, t->type, t->data, (const float *)b->data, nullptr,
                                   add ? (const float *)add->data : nullptr, add_rows, B * T_out, N, t->iparams[1]);
        }
        case VT_OP_CONV2D_K3S2: {
            if (p.chunk_windows == 0) return launch_conv2d(lc, t, nullptr, 0, 0);
            const vt_tensor * w = t->src[1], * b = t->src[2];
            const int64_t N = w->ne[3], rows_w = t->ne[1] * t->ne[2], B = t->ne[3];
            const int64_t cw = p.chunk_windows, chunk_rows = cw * rows_w;
            const size_t es = vt_type_size(t->type);
            for (int64_t b0 = 0; b0 < B; b0 += cw) {
                if (!launch_conv2d(lc, t, s->im2col, b0, chunk_rows)) return false;
                void * d = (char *)t->data + (size_t)(b0 * rows_w * N) * es;
                if (!lt_gemm_run(lt, stream, p.gemm, w->data, s->im2col, nullptr, d, nullptr, lt_ws)) return false;
            }
            return launch_epilogue(lc, t->type, t->data, (const float *)b->data, nullptr, nullptr, 1, B * rows_w, N, t->iparams[1]);
        }
        case VT_OP_ADD_ROWS:   return launch_add_rows(lc, t);
        case VT_OP_LAYER_NORM:
            return p.quantize_out ? launch_layer_norm(lc, t, s->fp8_x, s->fp8_scale) : launch_layer_norm(lc, t);
        case VT_OP_ATTENTION:  return launch_attention(lc, t, att_wgmma, att_opts);
        case VT_OP_LOG_MEL:    return launch_log_mel(lc, t, mel_tab, s->mel_max, s->mel_ranges);
        case VT_OP_AVG_POOL2: case VT_OP_RMS_NORM: case VT_OP_SWIGLU: case VT_OP_STACK: case VT_OP_ROPE_QK: case VT_OP_RELU: case VT_OP_SILU: case VT_OP_SILU_MUL:
            return launch_projector_op(lc, t);
        default:
            vt_set_error("cuda: op %s ('%s') has no CUDA kernel", vt_op_name(t->op), t->name);
            return false;
    }
}

bool cuda_backend::run_all(vt_graph * g, graph_state * s) {
    for (size_t i = 0; i < g->nodes.size(); i++) {
        if (!run_node(s, i, g->nodes[i])) return false;
    }
    return convert_outputs(s);
}

bool cuda_backend::convert_outputs(graph_state * s) {
    for (auto & o : s->f32_outputs)
        if (!launch_convert(lc, o.second, VT_TYPE_F32, o.first->data, o.first->type, (size_t)vt_nelements(o.first))) return false;
    return true;
}

// Captures the whole forward as a CUDA graph, once (again after alloc_weights moved the
// weights); launch replays it.
bool cuda_backend::capture(graph_state * s, vt_graph * g) {
    if (s->exec && s->weights_gen != weights_gen) {
        CUDA_CHECK(cudaGraphExecDestroy(s->exec));
        s->exec = nullptr;
    }
    if (!s->exec) {
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        const bool ok = run_all(g, s);
        cudaGraph_t graph = nullptr;
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        if (!ok) {
            if (graph) cudaGraphDestroy(graph);
            return false;   // run_all's message stands
        }
        if (end != cudaSuccess) {
            if (graph) cudaGraphDestroy(graph);
            vt_set_error("cuda: cudaStreamEndCapture failed: %s", cudaGetErrorString(end));
            return false;
        }
        const cudaError_t inst = cudaGraphInstantiate(&s->exec, graph, 0);
        cudaGraphDestroy(graph);
        if (inst != cudaSuccess) {
            s->exec = nullptr;
            vt_set_error("cuda: cudaGraphInstantiate failed: %s", cudaGetErrorString(inst));
            return false;
        }
        s->weights_gen = weights_gen;
    }
    return true;
}

bool cuda_backend::launch(graph_state * s, vt_graph * g) {
    if (!capture(s, g)) return false;
    CUDA_CHECK(cudaGraphLaunch(s->exec, stream));
    return true;
}

bool cuda_backend::prepare(vt_graph * g) {
    graph_state * s = (graph_state *)g->backend_state;
    if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
    CUDA_CHECK(cudaSetDevice(device));
    return capture(s, g);
}

bool cuda_backend::compute(vt_graph * g) {
    graph_state * s = (graph_state *)g->backend_state;
    if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
    CUDA_CHECK(cudaSetDevice(device));
    if (!launch(s, g)) return false;
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return true;
}

// Node by node, outside any CUDA graph, with an event pair around each node.
bool cuda_backend::profile(vt_graph * g, double * ms) {
    graph_state * s = (graph_state *)g->backend_state;
    if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
    CUDA_CHECK(cudaSetDevice(device));
    const size_t n = g->nodes.size();
    std::vector<cudaEvent_t> ev(n + 1, nullptr);
    bool ok = true;
    for (size_t i = 0; i <= n && ok; i++) {
        const cudaError_t err = cudaEventCreate(&ev[i]);
        if (err != cudaSuccess) {
            ev[i] = nullptr;
            vt_set_error("cuda: cudaEventCreate failed: %s", cudaGetErrorString(err));
            ok = false;
        }
    }
    if (ok) {
        cudaError_t err = cudaEventRecord(ev[0], stream);
        for (size_t i = 0; i < n && ok && err == cudaSuccess; i++) {
            ok = run_node(s, i, g->nodes[i]);
            if (ok) err = cudaEventRecord(ev[i + 1], stream);
        }
        if (ok && err == cudaSuccess) ok = convert_outputs(s);
        if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
        for (size_t i = 0; i < n && ok && err == cudaSuccess; i++) {
            float t = 0.0f;
            err = cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
            ms[i] = t;
        }
        if (ok && err != cudaSuccess) {
            vt_set_error("cuda: profiling failed: %s", cudaGetErrorString(err));
            ok = false;
        }
    }
    for (cudaEvent_t e : ev) if (e) cudaEventDestroy(e);
    return ok;
}

// ---- the backend: asynchronous runs (upload | forward | download on three streams) ----

void * cuda_backend::host_alloc(size_t bytes) {
    void * p = nullptr;
    cudaSetDevice(device);
    // portable: pinned for every device's copies (a pipeline over several GPUs shares it)
    const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
    if (err != cudaSuccess) {
        vt_set_error("cuda: cudaHostAlloc of %zu bytes failed: %s", bytes, cudaGetErrorString(err));
        return nullptr;
    }
    return p;
}

// A slot's device buffer of at least `bytes`; growing it waits for the work in flight.
bool cuda_backend::ensure_slot_buffer(void *& buf, size_t & have, size_t bytes) {
    if (bytes <= have) return true;
    CUDA_CHECK(cudaDeviceSynchronize());
    if (buf) CUDA_CHECK(cudaFree(buf));
    buf = nullptr;
    have = 0;
    const cudaError_t err = device_malloc(&buf, bytes);
    if (err != cudaSuccess) {
        buf = nullptr;
        vt_set_error("cuda: cudaMalloc of a %zu-byte transfer buffer failed: %s", bytes, cudaGetErrorString(err));
        return false;
    }
    have = bytes;
    return true;
}

// upload stream: host -> slot.in (the inputs back to back); compute stream: slot.in -> the
// graph's inputs, the forward, its output converted into slot.out; download stream: slot.out
// -> host. The events keep each slot's buffers from being overwritten while another stream
// reads them.
bool cuda_backend::submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host, const vt_tensor * out,
                          void * out_host, vt_type out_type, int slot) {
    graph_state * s = (graph_state *)g->backend_state;
    if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
    CUDA_CHECK(cudaSetDevice(device));
    submit_slot & sl = slots[slot];
    size_t at[VT_MAX_SUBMIT_INPUTS + 1] = {0};          // each input's offset in slot.in, 256-aligned
    for (int i = 0; i < n_in; i++) at[i + 1] = at[i] + (vt_nbytes(in[i]) + 255) / 256 * 256;
    const size_t n_out = (size_t)vt_nelements(out), out_bytes = n_out * vt_type_size(out_type);
    if (!ensure_slot_buffer(sl.in, sl.in_bytes, at[n_in]) || !ensure_slot_buffer(sl.out, sl.out_bytes, out_bytes)) return false;

    CUDA_CHECK(cudaStreamWaitEvent(up, sl.consumed, 0));
    for (int i = 0; i < n_in; i++)
        CUDA_CHECK(cudaMemcpyAsync((char *)sl.in + at[i], in_host[i], vt_nbytes(in[i]), cudaMemcpyHostToDevice, up));
    CUDA_CHECK(cudaEventRecord(sl.uploaded, up));

    CUDA_CHECK(cudaStreamWaitEvent(stream, sl.uploaded, 0));
    for (int i = 0; i < n_in; i++)
        CUDA_CHECK(cudaMemcpyAsync(in[i]->data, (char *)sl.in + at[i], vt_nbytes(in[i]), cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaEventRecord(sl.consumed, stream));
    if (!launch(s, g)) return false;
    CUDA_CHECK(cudaStreamWaitEvent(stream, sl.done, 0));
    if (out->type == out_type) CUDA_CHECK(cudaMemcpyAsync(sl.out, out->data, out_bytes, cudaMemcpyDeviceToDevice, stream));
    else if (!launch_convert(lc, sl.out, out_type, out->data, out->type, n_out)) return false;
    CUDA_CHECK(cudaEventRecord(sl.computed, stream));

    CUDA_CHECK(cudaStreamWaitEvent(down, sl.computed, 0));
    CUDA_CHECK(cudaMemcpyAsync(out_host, sl.out, out_bytes, cudaMemcpyDeviceToHost, down));
    CUDA_CHECK(cudaEventRecord(sl.done, down));
    return true;
}

bool cuda_backend::wait(int slot) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaEventSynchronize(slots[slot].done));
    return true;
}


} // namespace

// =====================================================================================
// the entry points of vt.h (vt.cpp's table of backends lists them under "cuda")
// =====================================================================================

vt_backend * vt_cuda_init(int device, const vt_backend_params * params) {
    const vt_type compute_type = params->compute_type;
    const bool fp8 = params->fp8;
    if (compute_type != VT_TYPE_F16 && compute_type != VT_TYPE_BF16) {
        vt_set_error("cuda: compute type must be f16 or bf16, not %s", vt_type_name(compute_type));
        return nullptr;
    }
    if (fp8 && compute_type != VT_TYPE_BF16) {
        vt_set_error("cuda: fp8 GEMMs run beside bf16 compute, not %s", vt_type_name(compute_type));
        return nullptr;
    }
    // what is missing, all of it in one message: a driver for our CUDA major, cuBLASLt. cuBLASLt
    // is opened on a thread of its own while the driver starts and makes the device's context
    // (a large library: its dlopen and the context are both tens to hundreds of ms, issue 21)
    std::string lt_error;
    bool lt_ok = false;
    std::thread lt_open([&] { lt_ok = cublaslt_load(lt_error); });
    const int cuda_major = CUDART_VERSION / 1000;
    std::string missing;
    int driver = 0;   // CUDA version the driver supports, major * 1000 + minor * 10; 0: no driver
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    int n = 0;
    const cudaError_t count_err = driver == 0 ? cudaErrorNoDevice : cudaGetDeviceCount(&n);
    if (count_err == cudaSuccess && device >= 0 && device < n && cudaSetDevice(device) == cudaSuccess) cudaFree(nullptr);
    cudaGetLastError();   // what failed here is reported below
    lt_open.join();
    char buf[200];
    if (driver == 0) {
        snprintf(buf, sizeof(buf), "no NVIDIA driver (libcuda.so.1 not found; CUDA %d needs driver %s or newer)",
                 cuda_major, driver_needed(cuda_major));
        missing = buf;
    } else if (driver / 1000 < cuda_major) {
        snprintf(buf, sizeof(buf), "the NVIDIA driver supports CUDA %d.%d, this build needs CUDA %d (driver %s or newer)",
                 driver / 1000, driver % 1000 / 10, cuda_major, driver_needed(cuda_major));
        missing = buf;
    }
    if (!lt_ok) missing += (missing.empty() ? "" : "; ") + lt_error;
    if (!missing.empty()) {
        vt_set_error("cuda: %s", missing.c_str());
        cudaGetLastError();
        return nullptr;
    }
    if (count_err != cudaSuccess || n == 0) {
        vt_set_error("no CUDA device (%s)", count_err != cudaSuccess ? cudaGetErrorString(count_err) : "device count is 0");
        cudaGetLastError();   // clear the sticky-free error state for later calls
        return nullptr;
    }
    if (device < 0 || device >= n) {
        vt_set_error("cuda: device %d does not exist (%d present)", device, n);
        return nullptr;
    }
    cuda_backend * be = new cuda_backend;
    if (!be->init(device, compute_type, fp8)) {
        delete be;
        return nullptr;
    }
    return be;
}

int vt_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

bool vt_cuda_device_memory(int device, size_t * free_bytes, size_t * total_bytes) {
    const int n = vt_cuda_device_count();
    if (device < 0 || device >= n) {
        vt_set_error("cuda: device %d does not exist (%d present)", device, n);
        return false;
    }
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    CUDA_CHECK(cudaSetDevice(device));
    const cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
    cudaSetDevice(prev);
    if (err != cudaSuccess) {
        vt_set_error("cuda: cudaMemGetInfo failed: %s", cudaGetErrorString(err));
        return false;
    }
    return true;
}
