// vt-cpu-kernels.h - the CPU backend's kernels: the row operations (a GEMM's epilogue, the
// softmax, LayerNorm) and the GEMM micro-kernel once per instruction set (AVX-512, AVX2 + FMA,
// NEON, plain C++), the table that picks one set per CPU, the f32 GEMM's packing and blocking,
// and the bf16 GEMMs on AMX tiles or AVX512-BF16. vt-cpu.h's backend runs them.
// An internal header, not a source file: an embedder compiles two files, vt.cpp and
// whisper-audio.cpp, with the headers beside them (README, "Embedding"); vt-cpu.h includes this
// one, and vt.cpp includes vt-cpu.h, once.
#pragma once

#include "vt.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif
#if defined(__linux__)
#include <cerrno>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {

// ---- per-instruction-set kernels --------------------------------------------------
// The hot loops exist once per instruction set (AVX-512, AVX2 + FMA, plain C++) in one
// binary built for the baseline CPU: the GEMM micro-kernels are intrinsics under a target
// attribute, the row operations are one always-inlined source compiled inside each
// target's function (VT_CPU_ROW_OPS), which the compiler vectorises for that target.
// On aarch64, where NEON is part of the baseline, the set is chosen at compile time: NEON
// intrinsics for the GEMM micro-kernel and the row operations (no target attribute, no
// run-time check), beside the plain C++ one.
// pick_cpu_kernels() chooses the set once, when a backend starts.

#if defined(__x86_64__) || defined(__i386__)
#define VT_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define VT_NEON 1
#endif
#define VT_INLINE inline __attribute__((always_inline))
#define VT_TARGET_AVX2   __attribute__((target("avx2,fma")))
#define VT_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")))

// The reductions below keep LANES partial results, added up in the same order on every
// instruction set. Written so that the compiler vectorises them (a plain reduction loop
// is not, in strict IEEE mode): sums as LANES-wide array updates, maxima in four vectors
// of four floats (a 16-wide vector type would live in memory where registers are narrower).
constexpr int LANES = 16;
typedef float f32x4 __attribute__((vector_size(4 * sizeof(float))));

// The row operations may compute both sides of a select (GCC otherwise keeps a loop with
// one scalar where the target has no mask registers: AVX2, SSE). FP exception flags are
// never read here; values are unchanged.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3", "no-trapping-math")
#endif

// (local min/max: functions from outside this region, compiled with other options, would
// not be inlined here; these keep std::max's NaN rule: max_f(a, NaN) = a)
VT_INLINE float max_f(float a, float b) { return a < b ? b : a; }
VT_INLINE float min_f(float a, float b) { return b < a ? b : a; }

// exp(x) for the softmax's x <= 0, in a form the compiler vectorises (expf does not):
// x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (truncation under
// 6e-9 relative), 2^n built in the exponent bits. Total for any float, as non-finite
// activations reach it: below -87 (e^-87 = 1.6e-38, -inf too) it returns 0, a NaN
// stays NaN, and x > 0 (only a NaN row's difference could be) is taken as 0.
VT_INLINE float exp_nonpositive(float x) {
    const bool underflow = x < -87.0f;
    x = min_f(max_f(x, -87.0f), 0.0f);                   // NaN passes both
    const float t = x * 1.44269504089f + 12582912.0f;        // 1.5 * 2^23: round(x / ln2) in t's low bits
    const float n = t - 12582912.0f;
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;   // ln2 = 0.693359375 - 2.12194440e-4
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits;                                             // unsigned: a NaN's bits wrap, no UB
    memcpy(&bits, &t, 4);
    const uint32_t e = (bits - 0x4B400000u + 127u) << 23;      // n + 127 in the exponent field
    float scale;
    memcpy(&scale, &e, 4);
    return underflow ? 0.0f : p * scale;
}

// GELU, the exact form 0.5 x (1 + erf(z)), z = x / sqrt 2, vectorisable (erff is a call):
// 1 + erf(z) is erfc(-z), and erfc(|z|) = exp(-z^2) R(t), t = 1 / (1 + |z| / 2), with R a
// degree-10 polynomial fitted here (least squares on the relative error, float64) to
// erfc(z) exp(z^2) over [0, 9.5]: 2.2e-8 relative. For z < 0 that is the result itself, so
// the negative tail keeps its relative accuracy; for z >= 0 it is 2 - erfc(z). In float32 it is
// as close to a float64 GELU as erff is, at half erff's instructions.
VT_INLINE float gelu_erf(float x) {
    const float z = x * 0.70710678118654752f;
    const float az = __builtin_fabsf(z);
    const float t = 1.0f / (1.0f + 0.5f * az);
    float r = 2.686091512e-02f;
    r = r * t - 2.057177722e-01f;
    r = r * t + 6.324386597e-01f;
    r = r * t - 9.578238726e-01f;
    r = r * t + 6.788800955e-01f;
    r = r * t - 2.504123747e-01f;
    r = r * t + 2.853813171e-01f;
    r = r * t + 2.231871933e-01f;
    r = r * t + 2.853619456e-01f;
    r = r * t + 2.818347514e-01f;
    r = r * t + 9.055000191e-06f;
    const float erfc_az = exp_nonpositive(-az * az) * r;
    return 0.5f * x * (z < 0.0f ? erfc_az : 2.0f - erfc_az);
}

// A linear's or conv's epilogue on one row: c = act(c + bias) + add, where add is a
// residual row or a positional-embedding row (bias and add optional).
VT_INLINE void epilogue_row_impl(float * c, int n, const float * bias, bool gelu, const float * add) {
    if (bias) for (int i = 0; i < n; i++) c[i] += bias[i];
    if (gelu) for (int i = 0; i < n; i++) c[i] = gelu_erf(c[i]);
    if (add) for (int i = 0; i < n; i++) c[i] += add[i];
}

// The softmax's numerators in place, s = exp(s - max s) over [0, n); returns 1 / their
// sum (summed in double: it scales the whole row). A NaN is not the max (as std::max).
VT_INLINE float softmax_row_impl(float * s, int n) {
    f32x4 lane_max[4];
    for (int v = 0; v < 4; v++) lane_max[v] = f32x4{} - INFINITY;
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 4; v++) {
            f32x4 x;
            memcpy(&x, s + i + 4 * v, sizeof(x));
            lane_max[v] = x > lane_max[v] ? x : lane_max[v];
        }
    }
    float mx = -INFINITY, maxima[LANES];
    for (; i < n; i++) mx = max_f(mx, s[i]);
    memcpy(maxima, lane_max, sizeof(maxima));
    for (int l = 0; l < LANES; l++) mx = max_f(mx, maxima[l]);
    for (i = 0; i < n; i++) s[i] = exp_nonpositive(s[i] - mx);
    double lane_sum[LANES] = {};
    for (i = 0; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) lane_sum[l] += s[i + l];
    double sum = 0.0;
    for (; i < n; i++) sum += s[i];
    for (int l = 0; l < LANES; l++) sum += lane_sum[l];
    return (float)(1.0 / sum);
}

// LayerNorm of one row of C values, statistics in double.
VT_INLINE void layer_norm_row_impl(const float * in, float * out, int C, const float * w, const float * b, float eps) {
    double lane[LANES] = {};
    int i = 0;
    for (; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += in[i + l];
    double sum = 0.0;
    for (; i < C; i++) sum += in[i];
    for (int l = 0; l < LANES; l++) { sum += lane[l]; lane[l] = 0.0; }
    const double mean = sum / C;
    for (i = 0; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += (in[i + l] - mean) * (in[i + l] - mean);
    double var = 0.0;
    for (; i < C; i++) var += (in[i] - mean) * (in[i] - mean);
    for (int l = 0; l < LANES; l++) var += lane[l];
    const float rstd = (float)(1.0 / __builtin_sqrt(var / C + eps));
    for (i = 0; i < C; i++) out[i] = (float)(in[i] - mean) * rstd * w[i] + b[i];
}

#define VT_CPU_ROW_OPS(ISA, TARGET)                                                                        \
    TARGET void epilogue_row_##ISA(float * c, int n, const float * bias, bool gelu, const float * add) {   \
        epilogue_row_impl(c, n, bias, gelu, add);                                                          \
    }                                                                                                      \
    TARGET float softmax_row_##ISA(float * s, int n) { return softmax_row_impl(s, n); }                    \
    TARGET void layer_norm_row_##ISA(const float * in, float * out, int C, const float * w, const float * b, float eps) { \
        layer_norm_row_impl(in, out, C, w, b, eps);                                                        \
    }
VT_CPU_ROW_OPS(plain, )
#ifdef VT_X86
VT_CPU_ROW_OPS(avx2, VT_TARGET_AVX2)
VT_CPU_ROW_OPS(avx512, VT_TARGET_AVX512)
#endif

#ifdef VT_NEON
// ---- NEON row operations (aarch64) ----
// exp_nonpositive, gelu_erf and the row operations above, four floats at a time: the same
// constants, steps and reductions (16 partial sums or maxima, added up in the same order), the
// multiply-adds fused (FMA is baseline on aarch64, and GCC fuses the plain C++ there too). Tails
// shorter than a vector go through the scalar functions.

VT_INLINE float32x4_t exp_nonpositive_neon(float32x4_t x) {
    const uint32x4_t underflow = vcltq_f32(x, vdupq_n_f32(-87.0f));          // false for NaN
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(0.0f));    // FMAX, FMIN: a NaN stays NaN
    const float32x4_t t = vfmaq_f32(vdupq_n_f32(12582912.0f), x, vdupq_n_f32(1.44269504089f));
    const float32x4_t n = vsubq_f32(t, vdupq_n_f32(12582912.0f));
    const float32x4_t r = vfmaq_f32(vfmsq_f32(x, n, vdupq_n_f32(0.693359375f)), n, vdupq_n_f32(2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const uint32x4_t e = vshlq_n_u32(vaddq_u32(vsubq_u32(vreinterpretq_u32_f32(t), vdupq_n_u32(0x4B400000u)), vdupq_n_u32(127u)), 23);
    return vbslq_f32(underflow, vdupq_n_f32(0.0f), vmulq_f32(p, vreinterpretq_f32_u32(e)));
}

VT_INLINE float32x4_t gelu_erf_neon(float32x4_t x) {
    const float32x4_t z = vmulq_f32(x, vdupq_n_f32(0.70710678118654752f));
    const float32x4_t az = vabsq_f32(z);
    const float32x4_t t = vdivq_f32(vdupq_n_f32(1.0f), vfmaq_f32(vdupq_n_f32(1.0f), az, vdupq_n_f32(0.5f)));
    float32x4_t r = vdupq_n_f32(2.686091512e-02f);
    r = vfmaq_f32(vdupq_n_f32(-2.057177722e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(6.324386597e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(-9.578238726e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(6.788800955e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(-2.504123747e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.853813171e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.231871933e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.853619456e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.818347514e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(9.055000191e-06f), r, t);
    const float32x4_t erfc_az = vmulq_f32(exp_nonpositive_neon(vnegq_f32(vmulq_f32(az, az))), r);
    const float32x4_t one_plus_erf = vbslq_f32(vcltq_f32(z, vdupq_n_f32(0.0f)), erfc_az, vsubq_f32(vdupq_n_f32(2.0f), erfc_az));
    return vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), x), one_plus_erf);
}

void epilogue_row_neon(float * c, int n, const float * bias, bool gelu, const float * add) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(c + i);
        if (bias) v = vaddq_f32(v, vld1q_f32(bias + i));
        if (gelu) v = gelu_erf_neon(v);
        if (add) v = vaddq_f32(v, vld1q_f32(add + i));
        vst1q_f32(c + i, v);
    }
    for (; i < n; i++) {
        float v = c[i];
        if (bias) v += bias[i];
        if (gelu) v = gelu_erf(v);
        if (add) v += add[i];
        c[i] = v;
    }
}

// 16 floats' partial sums in double: lane l of a 16-float block goes to acc[l / 2], half l % 2.
VT_INLINE void add_16_f64(float64x2_t acc[8], const float32x4_t v[4]) {
    for (int q = 0; q < 4; q++) {
        acc[2 * q] = vaddq_f64(acc[2 * q], vcvt_f64_f32(vget_low_f32(v[q])));
        acc[2 * q + 1] = vaddq_f64(acc[2 * q + 1], vcvt_high_f64_f32(v[q]));
    }
}

// sum + the 16 lanes, in lane order (as the plain loops add them)
VT_INLINE double add_lanes_f64(double sum, const float64x2_t acc[8]) {
    double lanes[LANES];
    for (int q = 0; q < 8; q++) vst1q_f64(lanes + 2 * q, acc[q]);
    for (int l = 0; l < LANES; l++) sum += lanes[l];
    return sum;
}

float softmax_row_neon(float * s, int n) {
    // the max: FMAXNM takes the number over a NaN (a NaN is not the max, as in max_f)
    float32x4_t lane_max[4];
    for (int q = 0; q < 4; q++) lane_max[q] = vdupq_n_f32(-INFINITY);
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int q = 0; q < 4; q++) lane_max[q] = vmaxnmq_f32(lane_max[q], vld1q_f32(s + i + 4 * q));
    float mx = -INFINITY;
    for (; i < n; i++) mx = max_f(mx, s[i]);
    mx = max_f(mx, vmaxnmvq_f32(vmaxnmq_f32(vmaxnmq_f32(lane_max[0], lane_max[1]), vmaxnmq_f32(lane_max[2], lane_max[3]))));
    // the numerators, and their sum in double
    const float32x4_t vmx = vdupq_n_f32(mx);
    float64x2_t acc[8];
    for (int q = 0; q < 8; q++) acc[q] = vdupq_n_f64(0.0);
    for (i = 0; i + LANES <= n; i += LANES) {
        float32x4_t e[4];
        for (int q = 0; q < 4; q++) {
            e[q] = exp_nonpositive_neon(vsubq_f32(vld1q_f32(s + i + 4 * q), vmx));
            vst1q_f32(s + i + 4 * q, e[q]);
        }
        add_16_f64(acc, e);
    }
    double sum = 0.0;
    for (; i < n; i++) sum += (s[i] = exp_nonpositive(s[i] - mx));
    return (float)(1.0 / add_lanes_f64(sum, acc));
}

void layer_norm_row_neon(const float * in, float * out, int C, const float * w, const float * b, float eps) {
    float64x2_t acc[8];
    for (int q = 0; q < 8; q++) acc[q] = vdupq_n_f64(0.0);
    int i = 0;
    for (; i + LANES <= C; i += LANES) {
        const float32x4_t v[4] = {vld1q_f32(in + i), vld1q_f32(in + i + 4), vld1q_f32(in + i + 8), vld1q_f32(in + i + 12)};
        add_16_f64(acc, v);
    }
    double sum = 0.0;
    for (; i < C; i++) sum += in[i];
    const double mean = add_lanes_f64(sum, acc) / C;
    const float64x2_t vmean = vdupq_n_f64(mean);
    for (int q = 0; q < 8; q++) acc[q] = vdupq_n_f64(0.0);
    for (i = 0; i + LANES <= C; i += LANES)
        for (int q = 0; q < 4; q++) {
            const float32x4_t v = vld1q_f32(in + i + 4 * q);
            const float64x2_t d0 = vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), vmean), d1 = vsubq_f64(vcvt_high_f64_f32(v), vmean);
            acc[2 * q] = vfmaq_f64(acc[2 * q], d0, d0);
            acc[2 * q + 1] = vfmaq_f64(acc[2 * q + 1], d1, d1);
        }
    double var = 0.0;
    for (; i < C; i++) var += (in[i] - mean) * (in[i] - mean);
    var = add_lanes_f64(var, acc);
    const float rstd = (float)(1.0 / __builtin_sqrt(var / C + eps));
    for (i = 0; i + 4 <= C; i += 4) {   // out = (float)(in - mean) * rstd * w + b
        const float32x4_t v = vld1q_f32(in + i);
        const float32x4_t d = vcvt_high_f32_f64(vcvt_f32_f64(vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), vmean)),
                                                vsubq_f64(vcvt_high_f64_f32(v), vmean));
        vst1q_f32(out + i, vfmaq_f32(vld1q_f32(b + i), vmulq_n_f32(d, rstd), vld1q_f32(w + i)));
    }
    for (; i < C; i++) out[i] = (float)(in[i] - mean) * rstd * w[i] + b[i];
}
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// ---- GEMM micro-kernels: C[12, 32] (+)= A[12, kc] B[kc, 32] --------------------------
// A is row-major, 12 rows lda apart, read in place (each row's cache line serves 16 k);
// B is packed row by row (bp[k * 32 + j], as pack_b writes it); C is row-major, ldc
// apart. accumulate: start from C's values (one FMA chain over all of K, whatever the
// chunking), else from zero.
constexpr int GEMM_MR = 12, GEMM_NR = 32;

void gemm_12x32_plain(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    float acc[GEMM_MR][GEMM_NR];
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++, bp += GEMM_NR)
        for (int r = 0; r < GEMM_MR; r++)
            for (int j = 0; j < GEMM_NR; j++) acc[r][j] += a[r * lda + k] * bp[j];
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) c[r * ldc + j] = acc[r][j];
}

#ifdef VT_X86
// 24 of the 32 zmm registers hold the 12 x 32 accumulators; per k, two loads of B and
// 12 broadcasts of A feed 24 FMAs. B's strip comes from L2 (A's 12 rows stay in L1 across
// the strips), two cache lines every 12 cycles, faster than the L1 prefetcher brings them:
// B is prefetched 8 k ahead. The AVX2 kernel, which takes B at half the rate, is slower with
// the prefetch and has none.
VT_TARGET_AVX512
void gemm_12x32_avx512(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    __m512 acc[GEMM_MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < GEMM_MR; r++) {
        acc[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++, bp += GEMM_NR) {
        _mm_prefetch((const char *)(bp + 8 * GEMM_NR), _MM_HINT_T0);        // (past the strip's end: a hint, never a fault)
        _mm_prefetch((const char *)(bp + 8 * GEMM_NR + 16), _MM_HINT_T0);
        const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 12
        for (int r = 0; r < GEMM_MR; r++) {
            const __m512 ar = _mm512_set1_ps(a[r * lda + k]);
            acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < GEMM_MR; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

// AVX2 has 16 ymm registers: the 12 x 32 tile goes as four 6 x 16 blocks (12 accumulators
// each), reading the same A rows and packed B at offsets.
VT_TARGET_AVX2 VT_INLINE
void gemm_6x16_avx2(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        acc[r][0] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        acc[r][1] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kc; k++, bp += GEMM_NR) {
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + r * lda + k);
            acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

VT_TARGET_AVX2
void gemm_12x32_avx2(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    for (int r0 = 0; r0 < GEMM_MR; r0 += 6)
        for (int j0 = 0; j0 < GEMM_NR; j0 += 16)
            gemm_6x16_avx2(kc, a + r0 * lda, lda, bp + j0, c + r0 * ldc + j0, ldc, accumulate);
}
#endif

#ifdef VT_NEON
// 32 128-bit registers: the 12 x 32 tile goes as six 4 x 16 blocks, 16 accumulators each.
// Four k at a time: one load of each A row gives its four k (a[r][k..k+3]), and each of the
// four k's B vectors is multiplied by a lane of them (FMLA by element): 4 + 16 loads feed 64
// FMAs, with 16 + 4 + 4 registers live (a 6 x 16 block with A broadcast per k spilled).
VT_INLINE void gemm_4x16_neon(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) acc[r][q] = accumulate ? vld1q_f32(c + r * ldc + 4 * q) : vdupq_n_f32(0.0f);
    int k = 0;
    for (; k + 4 <= kc; k += 4, bp += 4 * GEMM_NR) {
        const float32x4_t a0 = vld1q_f32(a + k), a1 = vld1q_f32(a + lda + k), a2 = vld1q_f32(a + 2 * lda + k),
                          a3 = vld1q_f32(a + 3 * lda + k);
#define VT_NEON_K(L)                                                                                      \
        {                                                                                                 \
            const float * b = bp + (L) * GEMM_NR;                                                         \
            const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12); \
            acc[0][0] = vfmaq_laneq_f32(acc[0][0], b0, a0, L); acc[0][1] = vfmaq_laneq_f32(acc[0][1], b1, a0, L); \
            acc[0][2] = vfmaq_laneq_f32(acc[0][2], b2, a0, L); acc[0][3] = vfmaq_laneq_f32(acc[0][3], b3, a0, L); \
            acc[1][0] = vfmaq_laneq_f32(acc[1][0], b0, a1, L); acc[1][1] = vfmaq_laneq_f32(acc[1][1], b1, a1, L); \
            acc[1][2] = vfmaq_laneq_f32(acc[1][2], b2, a1, L); acc[1][3] = vfmaq_laneq_f32(acc[1][3], b3, a1, L); \
            acc[2][0] = vfmaq_laneq_f32(acc[2][0], b0, a2, L); acc[2][1] = vfmaq_laneq_f32(acc[2][1], b1, a2, L); \
            acc[2][2] = vfmaq_laneq_f32(acc[2][2], b2, a2, L); acc[2][3] = vfmaq_laneq_f32(acc[2][3], b3, a2, L); \
            acc[3][0] = vfmaq_laneq_f32(acc[3][0], b0, a3, L); acc[3][1] = vfmaq_laneq_f32(acc[3][1], b1, a3, L); \
            acc[3][2] = vfmaq_laneq_f32(acc[3][2], b2, a3, L); acc[3][3] = vfmaq_laneq_f32(acc[3][3], b3, a3, L); \
        }
        VT_NEON_K(0) VT_NEON_K(1) VT_NEON_K(2) VT_NEON_K(3)   // (the lane must be a constant)
#undef VT_NEON_K
    }
    for (; k < kc; k++, bp += GEMM_NR) {   // the last kc % 4, one k at a time
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const float ar = a[r * lda + k];
            acc[r][0] = vfmaq_n_f32(acc[r][0], b0, ar);
            acc[r][1] = vfmaq_n_f32(acc[r][1], b1, ar);
            acc[r][2] = vfmaq_n_f32(acc[r][2], b2, ar);
            acc[r][3] = vfmaq_n_f32(acc[r][3], b3, ar);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) vst1q_f32(c + r * ldc + 4 * q, acc[r][q]);
}

void gemm_12x32_neon(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    for (int r0 = 0; r0 < GEMM_MR; r0 += 4)
        for (int j0 = 0; j0 < GEMM_NR; j0 += 16)
            gemm_4x16_neon(kc, a + r0 * lda, lda, bp + j0, c + r0 * ldc + j0, ldc, accumulate);
}
#endif

// One instruction set's kernels.
struct cpu_kernels {
    const char * isa;   // "avx512", "avx2", "neon" or "plain"
    void (*gemm)(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate);
    void (*epilogue_row)(float * c, int n, const float * bias, bool gelu, const float * add);
    float (*softmax_row)(float * s, int n);
    void (*layer_norm_row)(const float * in, float * out, int C, const float * w, const float * b, float eps);
};

const cpu_kernels CPU_KERNELS[] = {
#ifdef VT_X86
    {"avx512", gemm_12x32_avx512, epilogue_row_avx512, softmax_row_avx512, layer_norm_row_avx512},
    {"avx2", gemm_12x32_avx2, epilogue_row_avx2, softmax_row_avx2, layer_norm_row_avx2},
#endif
#ifdef VT_NEON
    {"neon", gemm_12x32_neon, epilogue_row_neon, softmax_row_neon, layer_norm_row_neon},
#endif
    {"plain", gemm_12x32_plain, epilogue_row_plain, softmax_row_plain, layer_norm_row_plain},
};

bool cpu_runs(const cpu_kernels & k) {
#ifdef VT_X86
    __builtin_cpu_init();
    if (strcmp(k.isa, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(k.isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#ifdef VT_NEON
    if (strcmp(k.isa, "neon") == 0) return true;   // every aarch64 CPU
#endif
    return strcmp(k.isa, "plain") == 0;
}

// The best set this CPU runs, or the one VT_CPU_ISA names (avx512, avx2, neon, plain: to measure
// or test a lesser one on a better CPU). NULL with vt_last_error() set when VT_CPU_ISA
// names a set that is unknown or that this CPU cannot run.
const cpu_kernels * pick_cpu_kernels() {
    const char * want = getenv("VT_CPU_ISA");
    if (want && *want) {
        for (const cpu_kernels & k : CPU_KERNELS) {
            if (strcmp(k.isa, want) != 0) continue;
            if (cpu_runs(k)) return &k;
            vt_set_error("VT_CPU_ISA=%s: this CPU cannot run it", want);
            return nullptr;
        }
        std::string known;
        for (const cpu_kernels & k : CPU_KERNELS) known += std::string(known.empty() ? "" : ", ") + k.isa;
        vt_set_error("VT_CPU_ISA=%s: unknown; this build has %s", want, known.c_str());
        return nullptr;
    }
    for (const cpu_kernels & k : CPU_KERNELS) if (cpu_runs(k)) return &k;
    VT_ASSERT(!"the plain kernels always run");
}

// ---- GEMM: C[M, N] = A[M, K] W[N, K]^T, f32 -----------------------------------------
// W is packed once per op into 32-column strips (all of K each), shared by the tasks. A
// task owns up to GEMM_NC columns (a run of strips) for a range of rows: it walks K in
// chunks of GEMM_KC (the chunk of its strips stays in L1/L2) and, per chunk, runs every
// 12-row panel of its rows against every strip. A is read where it lies.
constexpr int GEMM_NC = 256, GEMM_KC = 256;

// Floats of W packed: its columns rounded up to whole strips, times K.
size_t gemm_packed_floats(int N, int K) { return (size_t)(N + GEMM_NR - 1) / GEMM_NR * GEMM_NR * K; }

// bp[k * 32 + j] = W[j][k] for rows [0, n) of W (ldw apart), k in [0, kc); columns past n zero.
// Written in order, the n rows read as n streams: writing a row of W at a time scatters the
// stores 32 floats apart and is several times slower.
void pack_b(const float * W, size_t ldw, int n, int kc, float * bp) {
    for (int k = 0; k < kc; k++, bp += GEMM_NR) {
        for (int j = 0; j < n; j++) bp[j] = W[(size_t)j * ldw + k];
        for (int j = n; j < GEMM_NR; j++) bp[j] = 0.0f;
    }
}

// The micro-kernel on a tile of rows x cols <= 12 x 32 at c (A must have 12 rows): straight
// into C when whole, through a 12 x 32 buffer at the edges.
void gemm_tile(const cpu_kernels & kern, int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc,
               int rows, int cols, bool accumulate) {
    if (rows == GEMM_MR && cols == GEMM_NR) { kern.gemm(kc, a, lda, bp, c, ldc, accumulate); return; }
    float tile[GEMM_MR * GEMM_NR];
    if (accumulate)
        for (int r = 0; r < rows; r++) memcpy(tile + r * GEMM_NR, c + r * ldc, cols * sizeof(float));
    kern.gemm(kc, a, lda, bp, tile, GEMM_NR, accumulate);
    for (int r = 0; r < rows; r++) memcpy(c + r * ldc, tile + r * GEMM_NR, cols * sizeof(float));
}

// One task: rows [0, m) of A (lda) times nb <= GEMM_NC columns of packed W (bp: their
// strips, K long), into C (ldc); then done(r0, rows) for each finished 12-row panel (the
// epilogue, while the panel is in cache). edge: 12 x K floats for a last, partial panel.
template <typename DONE>
void gemm_block(const cpu_kernels & kern, const float * A, size_t lda, int m, const float * bp, int nb, int K,
                float * C, size_t ldc, float * edge, DONE && done) {
    const int n_strips = (nb + GEMM_NR - 1) / GEMM_NR, n_panels = (m + GEMM_MR - 1) / GEMM_MR;
    const int rows_last = m - (n_panels - 1) * GEMM_MR;
    if (rows_last < GEMM_MR) {   // the kernel reads 12 rows: pad the last panel with zeros
        memset(edge, 0, (size_t)GEMM_MR * K * sizeof(float));
        for (int r = 0; r < rows_last; r++) memcpy(edge + (size_t)r * K, A + (size_t)((n_panels - 1) * GEMM_MR + r) * lda, K * sizeof(float));
    }
    for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
        const int kc = std::min(GEMM_KC, K - k0);
        for (int p = 0; p < n_panels; p++) {
            const int rows = std::min(GEMM_MR, m - p * GEMM_MR);
            const float * a = rows < GEMM_MR ? edge + k0 : A + (size_t)p * GEMM_MR * lda + k0;
            const size_t la = rows < GEMM_MR ? (size_t)K : lda;
            for (int s = 0; s < n_strips; s++)
                gemm_tile(kern, kc, a, la, bp + ((size_t)s * K + k0) * GEMM_NR, C + (size_t)p * GEMM_MR * ldc + s * GEMM_NR, ldc,
                          rows, std::min(GEMM_NR, nb - s * GEMM_NR), k0 > 0);
            if (k0 + kc == K) done(p * GEMM_MR, rows);
        }
    }
}

// ---- bf16 GEMMs on AMX tiles: C[M, N] = A[M, K] W[N, K]^T, f32 accumulation ------------
// The bf16 mode (vt_backend_init("cpu", 0, {VT_TYPE_BF16, ...})) on a CPU with AMX-BF16 and
// AVX512-BF16 whose kernel grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM; a
// hypervisor may hide it): each weight matrix is rounded to bf16 (nearest even) and packed
// once, when it is set, into the tiles' B layout; each GEMM rounds its A rows to bf16 as it
// starts and accumulates in f32 tiles; bias, GELU and the residual stay f32 (the same
// epilogue as the f32 path). AMX: 8 tile registers of 16 rows x 64 bytes; TDPBF16PS
// C[16, 16] += A[16, 32] B[32, 16], B stored as 16 rows of 16 (k, k + 1) pairs.

constexpr int AMX_KB = 32, AMX_NB = 32, AMX_MB = 32;   // a B tile's k, a strip's columns (2 tiles), a panel's rows (2 tiles)
constexpr int AMX_NC = 256;                           // columns per pass over a task's rows (their W stays in L2)

#ifdef VT_X86
#define VT_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512bf16,avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")))

struct amx_tile_config {          // ldtilecfg's 64 bytes, palette 1
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Whether this CPU has AVX512-BF16 (VDPBF16PS, VCVTNE2PS2BF16: the bf16 mode's lesser kernels
// and its rounding of rows).
static bool avx512bf16_usable() {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw");
}

// Whether this CPU has AMX-BF16 and AVX512-BF16, the OS saves the tile state (XCR0 bits 17,
// 18) and this process may use it; asked once per process (the permission is the process's).
static bool amx_usable_impl(std::string & why) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) { why = "the CPU has no AMX-BF16"; return false; }
    if (!avx512bf16_usable()) { why = "the CPU has no AVX512-BF16"; return false; }
    __get_cpuid(1, &a, &b, &c, &d);
    if (!(c & (1u << 27))) { why = "the OS does not enable XSAVE"; return false; }
    uint32_t xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) { why = "the OS does not save the AMX tile state (XCR0)"; return false; }
#if defined(__linux__)
    const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        why = std::string("the kernel refuses the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") + strerror(errno) + ")";
        return false;
    }
    return true;
#else
    why = "AMX is used on Linux only";
    return false;
#endif
}

static bool amx_usable(std::string * why_out) {
    static std::string why;
    static const bool ok = amx_usable_impl(why);
    if (why_out) *why_out = why;
    return ok;
}

VT_TARGET_AMX static void amx_configure() {
    amx_tile_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    // ldtilecfg by hand: GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, and
    // the stores of rows and colsb were dropped as dead
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

VT_TARGET_AMX static void amx_release() { _tile_release(); }

// dst[0, k_pad) = bf16(src[0, k)), zeros past k (the tiles' K padding); round to nearest even.
VT_TARGET_AMX static void row_to_bf16(const float * src, int k, int k_pad, uint16_t * dst) {
    int i = 0;
    for (; i + 32 <= k; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)v);
    }
    for (; i < k; i++) dst[i] = vt_f32_to_bf16(src[i]);
    for (; i < k_pad; i++) dst[i] = 0;
}

// The bf16 mode's softmax of one row of scores s [0, n): p[0, n_pad) = bf16(exp(s - max s)),
// zeros past n (n_pad a multiple of 32); returns 1 / the sum of the f32 numerators. exp as
// 2^(x log2 e), 2^frac by its degree-5 Taylor polynomial (2.5e-6 relative, far under bf16's
// rounding of P, 2^-9), scaled by 2^round with VSCALEFPS (0 below -87, where exp is under
// 1.7e-38). One pass over the row after the max: the f32 softmax_row's exact exp, the fill
// and the rounding would be three.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push   // GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
VT_TARGET_AMX VT_INLINE __m512 softmax_numerators_16(const float * s, int i, int n, __m512 vmax) {   // 16 from s + i, 0 past n
    const int left = n - i;
    const __mmask16 m = left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
    const __m512 x = _mm512_max_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), vmax), _mm512_set1_ps(-87.0f));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f));
    const __m512 k = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, k);
    __m512 q = _mm512_set1_ps(1.3333558e-3f);
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.6181291e-3f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.5504109e-2f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.4022651e-1f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.9314718e-1f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(m, _mm512_scalef_ps(q, k));
}

VT_TARGET_AMX static float softmax_row_bf16(const float * s, int n, int n_pad, uint16_t * p) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, s + i));
    }
    float lanes[16];   // (GCC 12's _mm512_reduce_*_ps warn of an uninitialised register under -Wall)
    _mm512_storeu_ps(lanes, mx);
    float row_max = lanes[0];
    for (int l = 1; l < 16; l++) row_max = std::max(row_max, lanes[l]);
    const __m512 vmax = _mm512_set1_ps(row_max);
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n_pad; i += 32) {
        const __m512 e0 = softmax_numerators_16(s, i, n, vmax), e1 = softmax_numerators_16(s, i + 16, n, vmax);
        sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
        _mm512_storeu_si512((void *)(p + i), (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    _mm512_storeu_ps(lanes, sum);
    float total = 0.0f;
    for (int l = 0; l < 16; l++) total += lanes[l];
    return 1.0f / total;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// 32 x 32 of C = A[32 rows, k_pad] (bf16, lda elements apart) times one packed strip (k_pad /
// 32 pairs of B tiles, 1 KiB each), into c (f32, ldc floats apart; 32 x 32 whole).
VT_TARGET_AMX static void amx_32x32(const uint16_t * a, size_t lda, const uint16_t * bp, int k_pad, float * c, size_t ldc) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int k0 = 0; k0 < k_pad; k0 += AMX_KB, bp += 2 * 512) {
        _tile_loadd(4, a + k0, lda * 2);
        _tile_loadd(5, a + 16 * lda + k0, lda * 2);
        _tile_loadd(6, bp, 64);
        _tile_loadd(7, bp + 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, ldc * 4);
    _tile_stored(1, c + 16, ldc * 4);
    _tile_stored(2, c + 16 * ldc, ldc * 4);
    _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

// amx_32x32 on AVX512-BF16 alone (VT_CPU_BF16=avx512bf16: for CPUs without AMX, Zen 4 or
// Cooper Lake, where it may pay; on Sapphire Rapids it is slower than f32):
// VDPBF16PS adds a (k, k + 1) pair of products per lane, so a row of a B tile (16 columns'
// pairs) is one zmm; 8 rows x 32 columns at a time (16 accumulators), A's pair broadcast.
VT_TARGET_AMX static void dpbf16_32x32(const uint16_t * a, size_t lda, const uint16_t * bp, int k_pad, float * c, size_t ldc) {
    for (int r0 = 0; r0 < AMX_MB; r0 += 8) {
        __m512 acc[8][2];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        const uint16_t * b = bp;
        for (int k0 = 0; k0 < k_pad; k0 += AMX_KB, b += 2 * 512) {
            for (int r = 0; r < 16; r++) {
                const __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)(b + r * 32));
                const __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + 512 + r * 32));
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) {
                    uint32_t pair;
                    memcpy(&pair, a + (size_t)(r0 + i) * lda + k0 + 2 * r, sizeof(pair));
                    const __m512bh av = (__m512bh)_mm512_set1_epi32((int)pair);
                    acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
                    acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            _mm512_storeu_ps(c + (size_t)(r0 + i) * ldc, acc[i][0]);
            _mm512_storeu_ps(c + (size_t)(r0 + i) * ldc + 16, acc[i][1]);
        }
    }
}
#endif

#ifdef VT_X86
// Elements (bf16) of W [N, K] packed for the tiles: N and K rounded up to 32.
static size_t amx_packed_elems(int N, int K) {
    return (size_t)(N + 31) / 32 * 32 * ((size_t)(K + 31) / 32 * 32);
}

// W [N, K] (f32, row-major; C = A W^T) into strips of 32 columns, each K / 32 pairs of B
// tiles: element (n, k) of strip s = n / 32, k-block kb = k / 32, tile h = n % 32 / 16 at row
// (k % 32) / 2, column n % 16, pair slot k % 2. Padding is zero. A row of W at a time: rounded
// to bf16, its (k, k + 1) pairs go 32 elements apart.
static void amx_pack_w(const float * W, int N, int K, uint16_t * out) {
    const int k_pad = (K + 31) / 32 * 32, kbs = k_pad / 32;
    memset(out, 0, amx_packed_elems(N, K) * sizeof(uint16_t));
    std::vector<uint16_t> row(k_pad);
    for (int n = 0; n < N; n++) {
        row_to_bf16(W + (size_t)n * K, K, k_pad, row.data());
        uint16_t * dst = out + (size_t)(n / 32) * kbs * 1024 + (n % 32) / 16 * 512 + (n % 16) * 2;
        for (int k = 0; k < k_pad; k += 2) memcpy(dst + (size_t)(k / 32) * 1024 + (k % 32) / 2 * 32, row.data() + k, 2 * sizeof(uint16_t));
    }
}
#endif

} // namespace
