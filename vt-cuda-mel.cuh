// vt-cuda-mel.cuh - the log-mel spectrogram on the GPU (vt_log_mel, vt_log_mel_max): a
// 400-point DFT per frame in double, the mel sums, log10 and Whisper's per-window clamp and
// scale. CPU twin: cpu_backend::log_mel in vt.cpp.
#pragma once

#include "vt-cuda-common.cuh"

#include <cmath>

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

// The window and twiddles, in double on the host as the CPU's (whisper-audio.cpp); each backend
// copies them to its device at init.
static void mel_tables_fill(mel_tables & tables) {
    const double two_pi = 6.283185307179586476925286766559;
    for (int i = 0; i < MEL_N_FFT; i++) {
        tables.window[i] = 0.5 - 0.5 * std::cos(two_pi * i / MEL_N_FFT);
        tables.tw400[i] = make_double2(std::cos(two_pi * i / MEL_N_FFT), -std::sin(two_pi * i / MEL_N_FFT));
    }
    for (int i = 0; i < 20; i++) tables.tw20[i] = make_double2(std::cos(two_pi * i / 20), -std::sin(two_pi * i / 20));
}

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
// launchers
// =====================================================================================

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
