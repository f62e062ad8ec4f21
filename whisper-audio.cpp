// whisper-audio.cpp - the Whisper audio encoder, in data-flow order, one banner a part:
// errors; log-mel; the model file (GGUF, read into memory we own); the encoder graph (with the
// audio LLMs' towers); encoders; the pipeline (16 kHz PCM in, rows out); the C API's remaining
// calls. Each part uses only the parts above it. The tensor work is vt's (vt.h); the public API
// is whisper-audio.h, each call defined in the part it belongs to.
//
// This file and vt.cpp are the whole library for a project that has PCM and a GGUF. Audio files
// (whisper-audio-input.cpp) and foreign model files (whisper-audio-formats.cpp) are an optional
// second set, compiled in with -DWHISPER_AUDIO_INPUT and -DWHISPER_AUDIO_FORMATS; without them
// their calls fail with a message that says what to add.
#include "whisper-audio-impl.h"

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>


// =====================================================================================
// errors
// =====================================================================================

static thread_local char g_wa_error[1024];

const char * whisper_audio_last_error(void) { return g_wa_error; }

const char * whisper_audio_version(void) { return WHISPER_AUDIO_VERSION; }

void wa_set_error(const char * fmt, ...) {
    char buf[sizeof(g_wa_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    memcpy(g_wa_error, buf, sizeof(buf));
}

// The vt backend that WHISPER_AUDIO_DEVICE_GPU (alias _CUDA) runs on: the one GPU backend there is.
static const char * const WA_GPU_BACKEND = "cuda";

// =====================================================================================
// log-mel spectrogram (transformers WhisperFeatureExtractor, openai whisper/audio.py)
// =====================================================================================
//
// One 30 s window -> [n_mels, 3000], step by step as the reference:
//   pad/truncate to 480000 samples -> reflect-pad 200 each side (torch.stft center=True,
//   pad_mode="reflect") -> frames of 400 every 160 -> periodic Hann window -> |rfft|^2, 201
//   bins -> drop the last of the 3001 frames -> filters x power -> log10(max(mel, 1e-10))
//   -> max(x, max - 8) -> (x + 4) / 4.
// The FFT is our own, in double: the 400-point real transform is one 200-point complex
// transform (200 = 4 * 2 * 5 * 5, recursive mixed-radix Cooley-Tukey) plus a split step.
// Thread-safe: the only static state is the constant tables, built once on first use.
// Needs nothing beyond whisper-audio.cpp's includes (<cmath>, <vector>, <algorithm>).

static const int WA_MEL_N_FFT   = 400;      // WHISPER_AUDIO_N_FFT
static const int WA_MEL_N_HALF  = 200;      // complex points of the packed real FFT
static const int WA_MEL_N_BINS  = 201;      // n_fft / 2 + 1
static const int WA_MEL_HOP     = 160;
static const int WA_MEL_N_SAMP  = 480000;   // 30 s at 16 kHz
static const int WA_MEL_N_FRAME = 3000;     // 1 + 480000 / 160 = 3001 frames, the last dropped
// A window's row as the log-mel reads it (log_mel_row, vt_log_mel): its 480000 samples and the
// 200 that the centred frames reach past each edge (torch.stft center=True pads n_fft / 2).
static const int WA_MEL_CONTEXT = WA_MEL_N_FFT / 2;
static const int WA_MEL_ROW     = WA_MEL_N_SAMP + 2 * WA_MEL_CONTEXT;
static const vt_mel_shape WA_MEL_SHAPE = {WA_MEL_N_FFT, WA_MEL_HOP, WA_MEL_N_FRAME};   // vt_log_mel's sizes

// The slaney mel bank [n_mels, 201], 0-8000 Hz at 16 kHz: transformers' audio_utils
// mel_filter_bank(norm="slaney", mel_scale="slaney") as WhisperFeatureExtractor calls it (librosa's
// filters.mel the same), in float64; the converter's mel_filters() writes the same values.
void wa_mel_filters_slaney(int n_mels, float * out) {
    // linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per factor 6.4)
    auto hz_to_mel = [](double f) { return f < 1000.0 ? 3.0 * f / 200.0 : 15.0 + std::log(f / 1000.0) * (27.0 / std::log(6.4)); };
    auto mel_to_hz = [](double m) { return m < 15.0 ? 200.0 * m / 3.0 : 1000.0 * std::exp((std::log(6.4) / 27.0) * (m - 15.0)); };
    // numpy.linspace: a + i * step, the last point exactly b
    auto linspace = [](double a, double b, int n, int i) { return i == n - 1 ? b : i * ((b - a) / (n - 1)) + a; };
    // n_mels + 2 points equally spaced in mel, back in Hz: filter i rises from point i to
    // i + 1 and falls to i + 2; bin k's frequency is linspace(0, 8000, 201)[k]
    std::vector<double> hz(n_mels + 2);
    for (int i = 0; i < n_mels + 2; i++) hz[i] = mel_to_hz(linspace(hz_to_mel(0.0), hz_to_mel(8000.0), n_mels + 2, i));
    for (int i = 0; i < n_mels; i++) {
        const double lo = hz[i], mid = hz[i + 1], hi = hz[i + 2], enorm = 2.0 / (hi - lo);   // unit area in Hz
        for (int k = 0; k < WHISPER_AUDIO_N_BINS; k++) {
            const double f = linspace(0.0, 8000.0, WHISPER_AUDIO_N_BINS, k);
            const double down = -(lo - f) / (mid - lo), up = (hi - f) / (hi - mid);
            out[(size_t)i * WHISPER_AUDIO_N_BINS + k] = (float)(std::max(0.0, std::min(down, up)) * enorm);
        }
    }
}

struct wa_cplx {
    double re, im;
};

static inline wa_cplx wa_cmul(wa_cplx a, wa_cplx b) {
    return { a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re };
}

struct wa_mel_tables {
    double  window[WA_MEL_N_FFT];               // periodic Hann: 0.5 - 0.5 cos(2 pi i / 400)
    wa_cplx tw200[WA_MEL_N_HALF];               // exp(-2 pi i k / 200)
    wa_cplx tw400[WA_MEL_N_BINS];               // exp(-2 pi i k / 400), k <= 200 (split step)
};

static const wa_mel_tables & wa_mel_get_tables() {
    // C++11 guarantees a function-local static is initialised once, thread-safely
    static const wa_mel_tables tables = [] {
        wa_mel_tables t;
        const double two_pi = 6.283185307179586476925286766559;
        for (int i = 0; i < WA_MEL_N_FFT; i++) {
            // torch.hann_window(400) (periodic=True) = numpy.hanning(401)[:-1]
            t.window[i] = 0.5 - 0.5 * std::cos(two_pi * i / WA_MEL_N_FFT);
        }
        for (int k = 0; k < WA_MEL_N_HALF; k++) {
            t.tw200[k] = { std::cos(two_pi * k / WA_MEL_N_HALF), -std::sin(two_pi * k / WA_MEL_N_HALF) };
        }
        for (int k = 0; k < WA_MEL_N_BINS; k++) {
            t.tw400[k] = { std::cos(two_pi * k / WA_MEL_N_FFT), -std::sin(two_pi * k / WA_MEL_N_FFT) };
        }
        return t;
    }();
    return tables;
}

// one radix-P pass: out[q*m + k] holds S_q[k], the DFT_m of sub-sequence q; it becomes
// X[k + r*m] = sum_q (W_n^{q k} S_q[k]) W_P^{q r}, for k in [0, m), r in [0, P).
// W_n^j = tw[j * s] (n * s = 200; q * k * s < n * s, so no wrap-around)
template <int P>
WA_SIMD_CLONES static void wa_fft_pass(wa_cplx * out, int m, int s, const wa_cplx * tw) {
    for (int k = 0; k < m; k++) {
        wa_cplx t[P];
        t[0] = out[k];
        for (int q = 1; q < P; q++) {
            t[q] = wa_cmul(out[q * m + k], tw[q * k * s]);
        }
        if (P == 2) {
            out[k]     = { t[0].re + t[1].re, t[0].im + t[1].im };
            out[k + m] = { t[0].re - t[1].re, t[0].im - t[1].im };
        } else if (P == 4) {
            // W_4 = -i
            const wa_cplx a = { t[0].re + t[2].re, t[0].im + t[2].im };
            const wa_cplx b = { t[0].re - t[2].re, t[0].im - t[2].im };
            const wa_cplx c = { t[1].re + t[3].re, t[1].im + t[3].im };
            const wa_cplx d = { t[1].re - t[3].re, t[1].im - t[3].im };   // -i d = (d.im, -d.re)
            out[k]         = { a.re + c.re, a.im + c.im };
            out[k + m]     = { b.re + d.im, b.im - d.re };
            out[k + 2 * m] = { a.re - c.re, a.im - c.im };
            out[k + 3 * m] = { b.re - d.im, b.im + d.re };
        } else if (P == 5) {
            const double c1 =  0.30901699437494742410;  // cos(2 pi / 5)
            const double c2 = -0.80901699437494742410;  // cos(4 pi / 5)
            const double s1 =  0.95105651629515357212;  // sin(2 pi / 5)
            const double s2 =  0.58778525229247312917;  // sin(4 pi / 5)
            const wa_cplx a1 = { t[1].re + t[4].re, t[1].im + t[4].im };
            const wa_cplx b1 = { t[1].re - t[4].re, t[1].im - t[4].im };
            const wa_cplx a2 = { t[2].re + t[3].re, t[2].im + t[3].im };
            const wa_cplx b2 = { t[2].re - t[3].re, t[2].im - t[3].im };
            const wa_cplx r1 = { t[0].re + c1 * a1.re + c2 * a2.re, t[0].im + c1 * a1.im + c2 * a2.im };
            const wa_cplx r2 = { t[0].re + c2 * a1.re + c1 * a2.re, t[0].im + c2 * a1.im + c1 * a2.im };
            const wa_cplx i1 = { s1 * b1.re + s2 * b2.re, s1 * b1.im + s2 * b2.im };
            const wa_cplx i2 = { s2 * b1.re - s1 * b2.re, s2 * b1.im - s1 * b2.im };
            out[k]         = { t[0].re + a1.re + a2.re, t[0].im + a1.im + a2.im };
            out[k + m]     = { r1.re + i1.im, r1.im - i1.re };          // r1 - i i1
            out[k + 4 * m] = { r1.re - i1.im, r1.im + i1.re };          // r1 + i i1
            out[k + 2 * m] = { r2.re + i2.im, r2.im - i2.re };          // r2 - i i2
            out[k + 3 * m] = { r2.re - i2.im, r2.im + i2.re };          // r2 + i i2
        }
    }
}

// out[0..n) = DFT_n of in[0], in[s], in[2s], ... (n * s = 200), by decimation in time:
// the radices of n are factors[0..), outermost first (200 = 4 * 2 * 5 * 5)
WA_SIMD_CLONES static void wa_fft200_rec(wa_cplx * out, const wa_cplx * in, int s, int n, const int * factors,
                          const wa_cplx * tw) {
    const int p = factors[0];
    const int m = n / p;
    if (m == 1) {
        for (int q = 0; q < p; q++) {
            out[q] = in[q * s];
        }
    } else {
        // p interleaved sub-sequences in[q*s + j*p*s] -> out[q*m .. q*m + m)
        for (int q = 0; q < p; q++) {
            wa_fft200_rec(out + q * m, in + q * s, s * p, m, factors + 1, tw);
        }
    }
    switch (p) {
        case 2: wa_fft_pass<2>(out, m, s, tw); break;
        case 4: wa_fft_pass<4>(out, m, s, tw); break;
        case 5: wa_fft_pass<5>(out, m, s, tw); break;
        default: break;     // not reached: the plan has only 2, 4 and 5
    }
}

// power[k] = |X[k]|^2, k in [0, 201), X = DFT_400 of the real frame x[0..400)
WA_SIMD_CLONES static void wa_mel_power(const double * x, double * power, const wa_mel_tables & tb) {
    static const int factors[] = { 4, 2, 5, 5 };

    // pack: z[j] = x[2j] + i x[2j+1]; Z = DFT_200(z)
    wa_cplx z[WA_MEL_N_HALF];
    wa_cplx Z[WA_MEL_N_HALF];
    for (int j = 0; j < WA_MEL_N_HALF; j++) {
        z[j] = { x[2 * j], x[2 * j + 1] };
    }
    wa_fft200_rec(Z, z, 1, WA_MEL_N_HALF, factors, tb.tw200);

    // split: E[k] = (Z[k] + conj Z[-k]) / 2 (evens), O[k] = (Z[k] - conj Z[-k]) / 2i (odds),
    // X[k] = E[k] + exp(-2 pi i k / 400) O[k], for k in [0, 200] (Z is 200-periodic)
    for (int k = 0; k < WA_MEL_N_BINS; k++) {
        const wa_cplx a = Z[k % WA_MEL_N_HALF];
        const wa_cplx b = Z[(WA_MEL_N_HALF - k) % WA_MEL_N_HALF];
        const wa_cplx e = { 0.5 * (a.re + b.re), 0.5 * (a.im - b.im) };
        const wa_cplx o = { 0.5 * (a.im + b.im), -0.5 * (a.re - b.re) };
        const wa_cplx w = wa_cmul(o, tb.tw400[k]);
        const double re = e.re + w.re;
        const double im = e.im + w.im;
        power[k] = re * re + im * im;
    }
}

// Checks the samples that the log-mel reads, as the decoders check theirs: a NaN or an
// infinity makes the whole window NaN, and a magnitude past AUDIO_FLOAT_MAX is not audio (and
// from about 1e18 on, its power overflows the float mel sum). Names the first bad sample,
// counting from first.
static bool wa_mel_check_pcm(const char * func, const float * pcm, size_t n, size_t first) {
    for (size_t i0 = 0; i0 < n; i0 += 4096) {     // a block without branches (it vectorises), then a search
        const size_t i1 = std::min(n, i0 + 4096);
        int bad = 0;
        for (size_t i = i0; i < i1; i++) bad |= !(fabsf(pcm[i]) <= (float) AUDIO_FLOAT_MAX);   // (true for NaN too)
        for (size_t i = i0; bad && i < i1; i++) {
            if (!(fabsf(pcm[i]) <= (float) AUDIO_FLOAT_MAX)) {
                wa_set_error("%s: sample %zu is %g; PCM samples must be finite and within +-%g (audio is in [-1, 1])",
                    func, first + i, (double) pcm[i], AUDIO_FLOAT_MAX);
                return false;
            }
        }
    }
    return true;
}

// The row the log-mel reads for a window that starts at sample `start` of a signal of sig_len
// samples, the first min(n, sig_len) from pcm (already checked), the rest zero: row[i] =
// signal[start - 200 + i], mirrored at the signal's two ends without repeating the edge sample
// (torch.stft center=True, pad_mode="reflect"), 0 where even the mirror falls outside or more
// than 200 samples past the signal's end (only frames past the signal read those). A 30 s
// window is a signal of its own (start 0, sig_len 480000); Voxtral's and Ultravox's processors
// take one signal of the whole input instead, so their windows' edges hold their neighbours'
// samples.
static void log_mel_row(const float * pcm, size_t n, int64_t sig_len, int64_t start, float * row) {
    const int64_t n_sig = std::min<int64_t>((int64_t)n, sig_len), first = start - WA_MEL_CONTEXT;
    auto at = [&](int64_t j) {
        if (j < 0) j = -j;
        if (j >= sig_len) j = 2 * (sig_len - 1) - j;
        return j >= 0 && j < n_sig ? pcm[j] : 0.0f;
    };
    // [lo, hi): the signal itself, unmirrored; the mirrored edges around it
    const int64_t lo = std::min<int64_t>(WA_MEL_ROW, std::max<int64_t>(0, -first));
    const int64_t hi = std::min<int64_t>(WA_MEL_ROW, std::max<int64_t>(lo, sig_len - first));
    for (int64_t i = 0; i < lo; i++) row[i] = at(first + i);
    const int64_t n_copy = std::min<int64_t>(hi - lo, std::max<int64_t>(0, n_sig - (first + lo)));
    if (n_copy > 0) memcpy(row + lo, pcm + first + lo, (size_t)n_copy * sizeof(float));
    std::fill(row + lo + n_copy, row + hi, 0.0f);
    // past the signal: its mirror for the 200 samples the frames that hold it may read (the
    // last reads 40 past its end), zeros beyond (read only by frames past the signal)
    const int64_t mirror_end = std::min<int64_t>(WA_MEL_ROW, hi + WA_MEL_CONTEXT);
    for (int64_t i = hi; i < mirror_end; i++) row[i] = at(first + i);
    std::fill(row + mirror_end, row + WA_MEL_ROW, 0.0f);
}

// The log10 mel of frames [0, n_frames) of a window's row (log_mel_row): out[m * ld + t], before
// the dynamic-range clamp. Frame t reads row[160 t, 160 t + 400). Returns the largest value.
WA_SIMD_CLONES static float log_mel_frames(const float * filters, int n_mels, const float * row, int n_frames, float * out,
                                           size_t ld) {
    const wa_mel_tables & tb = wa_mel_get_tables();

    // the filters are triangles: keep each row's non-zero range [k0, k1) (exact: the
    // skipped products are 0 * finite)
    std::vector<int> k0(n_mels), k1(n_mels);
    for (int m = 0; m < n_mels; m++) {
        const float * fr = filters + (size_t) m * WA_MEL_N_BINS;
        int a = 0, b = WA_MEL_N_BINS;
        while (a < b && fr[a] == 0.0f) a++;
        while (b > a && fr[b - 1] == 0.0f) b--;
        k0[m] = a;
        k1[m] = b;
    }

    double frame[WA_MEL_N_FFT];
    double power[WA_MEL_N_BINS];
    float  mx = -INFINITY;
    for (int t = 0; t < n_frames; t++) {
        const float * x = row + (size_t) t * WA_MEL_HOP;
        for (int i = 0; i < WA_MEL_N_FFT; i++) {
            frame[i] = tb.window[i] * x[i];
        }

        // |rfft|^2 of the windowed frame, 201 bins (stft(...).abs() ** 2)
        wa_mel_power(frame, power, tb);

        // mel = filters @ power, then log10(clamp(mel, min=1e-10))
        for (int m = 0; m < n_mels; m++) {
            const float * fr = filters + (size_t) m * WA_MEL_N_BINS;
            double sum = 0.0;
            for (int k = k0[m]; k < k1[m]; k++) {
                sum += (double) fr[k] * power[k];
            }
            // (log2 * log10(2): one libm call instead of log10f's two; within 1e-6 of it)
            const float v = std::log2(std::max((float) sum, 1e-10f)) * 0.30102999566398119521f;
            out[(size_t) m * ld + t] = v;
            mx = std::max(mx, v);
        }
    }
    return mx;
}

// dynamic range: max(x, mx - 8) with mx the largest value of the whole log-mel, then (x + 4) / 4
static void log_mel_clamp(float * out, int n_mels, int n_frames, size_t ld, float mx) {
    const float floor_v = mx - 8.0f;
    for (int m = 0; m < n_mels; m++) {
        for (int t = 0; t < n_frames; t++) {
            float & x = out[(size_t) m * ld + t];
            x = (std::max(x, floor_v) + 4.0f) / 4.0f;
        }
    }
}

// A window's log-mel from its row, as vt_log_mel computes it: out [n_mels, 3000], frames
// [0, valid) clamped with clamp_max (NaN: their own max), frames past them 0. Returns their max
// before the clamp.
static float log_mel_from_row(const float * filters, int n_mels, const float * row, int valid, float clamp_max, float * out) {
    const float mx = log_mel_frames(filters, n_mels, row, valid, out, WA_MEL_N_FRAME);
    for (int m = 0; m < n_mels; m++) std::fill(out + (size_t)m * WA_MEL_N_FRAME + valid, out + (size_t)(m + 1) * WA_MEL_N_FRAME, 0.0f);
    log_mel_clamp(out, n_mels, valid, WA_MEL_N_FRAME, std::isnan(clamp_max) ? mx : clamp_max);
    return mx;
}

// One 30 s window of its own, its samples already checked: out [n_mels, 3000].
static void log_mel_window(const float * filters, int n_mels, const float * pcm, size_t n, float * out) {
    std::vector<float> row(WA_MEL_ROW);
    log_mel_row(pcm, n, WA_MEL_N_SAMP, 0, row.data());
    log_mel_from_row(filters, n_mels, row.data(), WA_MEL_N_FRAME, NAN, out);
}

// The checks and the window of log_mel and log_mel_filters, their messages named by func.
static bool log_mel_checked(const char * func, const float * filters, int n_mels, const float * pcm, size_t n, float * out) {
    if (filters == nullptr || out == nullptr || (pcm == nullptr && n > 0)) {
        wa_set_error("%s: NULL %s", func, filters == nullptr ? "filters" : out == nullptr ? "out" : "pcm");
        return false;
    }
    if (n_mels <= 0) {
        wa_set_error("%s: n_mels is %d (expected > 0, e.g. 80 or 128)", func, n_mels);
        return false;
    }
    if (!wa_mel_check_pcm(func, pcm, std::min(n, (size_t) WA_MEL_N_SAMP), 0)) return false;
    log_mel_window(filters, n_mels, pcm, n, out);
    return true;
}

bool whisper_audio_log_mel_filters(const float * filters, int n_mels, const float * pcm, size_t n, float * out) {
    return log_mel_checked(__func__, filters, n_mels, pcm, n, out);
}

// The windows on up to n_threads threads; if the system refuses a thread, fewer do the work.
// The samples are checked first, in one pass; first is the index of pcm[0] in the caller's
// input (for the message).
static bool log_mel_windows(const float * filters, int n_mels, const float * pcm, size_t n, int n_windows,
                            float * out, int n_threads, size_t first = 0) {
    if (!wa_mel_check_pcm("log-mel", pcm, std::min(n, (size_t)n_windows * WHISPER_AUDIO_N_SAMPLES), first)) return false;
    const size_t mel_win = (size_t)n_mels * WHISPER_AUDIO_N_FRAMES;
    wa_parallel(n_windows, n_threads, [&](int i) {
        const size_t start = std::min(n, (size_t)i * WHISPER_AUDIO_N_SAMPLES);
        log_mel_window(filters, n_mels, pcm ? pcm + start : nullptr, n - start, out + i * mel_win);
    });
    return true;
}

// =====================================================================================
// model file: GGUF v3 (ggml's docs/gguf.md), validated, then read into memory we own
// =====================================================================================


// Checks one tensor against the shape the hyperparameters imply (ne innermost first) and the
// type rule: matrices F32/F16/BF16 or a block type, the rest F32.
bool check_tensor(const whisper_audio_model * m, const char * name, int n_dims, const int64_t * ne, bool matrix) {
    const gguf_tensor_info * t = m->find(name);
    const std::string file_name = wa_file_name(m, name);
    name = file_name.c_str();
    if (!t) {
        wa_set_error("%s: tensor '%s' is missing from the model file", m->path.c_str(), name);
        return false;
    }
    bool same = t->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->ne[i] == ne[i];
    if (!same) {
        std::string got, want;
        for (int i = 0; i < t->n_dims; i++) got += (i ? ", " : "") + std::to_string(t->ne[i]);
        for (int i = 0; i < n_dims; i++) want += (i ? ", " : "") + std::to_string(ne[i]);
        wa_set_error("%s: tensor '%s' has dims [%s], the hyperparameters need [%s] (innermost first)",
                     m->path.c_str(), name, got.c_str(), want.c_str());
        return false;
    }
    if (!matrix && t->type != VT_TYPE_F32) {
        wa_set_error("%s: tensor '%s' is %s, expected f32", m->path.c_str(), name, wa_type_name(t->type));
        return false;
    }
    return true;
}

static bool gguf_read_kv(whisper_audio_model * m, gguf_reader & r, uint64_t n_kv, gguf_kv & kv) {
    const char * path = m->path.c_str();
    auto is_ours = [](const std::string & k) {
        return k.rfind("whisper.encoder.", 0) == 0 || k.rfind("whisper.projector.", 0) == 0 || k.rfind("clip.audio.", 0) == 0;
    };
    auto is_eps = [](const std::string & k) {
        return k == GGUF_OURS.eps || k == GGUF_MMPROJ.eps || k == "whisper.projector.layer_norm_epsilon" ||
               k == "whisper.encoder.rope.freq_base" || k == "whisper.projector.time_rope.freq_base" ||
               k == "whisper.projector.time_rope.step";
    };
    for (uint64_t i = 0; i < n_kv && r.ok; i++) {
        const std::string key = r.get_string(GGUF_MAX_KEY);
        const uint32_t type = r.get<uint32_t>();
        if (!r.ok) break;
        // an mmproj of both towers (vision and audio: Qwen3-Omni) names the audio one's type clip.audio.projector_type
        const bool audio_type = key == "clip.audio.projector_type";
        const bool is_projector = key == GGUF_OURS.projector || key == GGUF_MMPROJ.projector || audio_type;
        if (key == "general.architecture" && type == GGUF_STRING) { kv.arch = r.get_string(); kv.has_arch = true; }
        else if (key == "general.name" && type == GGUF_STRING) m->name = r.get_string();
        else if (key == "general.description" && type == GGUF_STRING) m->description = r.get_string();
        else if (key == "general.alignment" && type == GGUF_UINT32) kv.alignment = r.get<uint32_t>();
        else if (is_projector && type == GGUF_STRING) {
            std::string v = r.get_string();
            if (audio_type || !kv.audio_proj_type) kv.proj_type = v;     // the audio tower's first
            kv.audio_proj_type = kv.audio_proj_type || audio_type;
            kv.has_proj_type = true;
        }
        else if (is_eps(key) && type == GGUF_FLOAT32) kv.f32[key] = r.get<float>();
        else if (is_eps(key)) { wa_set_error("%s: %s has GGUF type %u, not float32 (6)", path, key.c_str(), type); return false; }
        else if (is_ours(key) && type == GGUF_UINT32) kv.u32[key] = r.get<uint32_t>();
        else {
            if (key == "general.architecture" || is_projector || is_ours(key) || key == "general.alignment")
                kv.wrong_type[key] = type;
            r.skip(type);
        }
    }
    if (!r.ok) { wa_set_error("%s: truncated or corrupt GGUF key/value section", path); return false; }
    return true;
}

// Which dialect the file speaks, from general.architecture; false (error set) when neither.
static bool gguf_arch(whisper_audio_model * m, const gguf_kv & kv, uint64_t n_kv) {
    const char * path = m->path.c_str();
    if (!kv.has_arch) {
        if (kv.wrong_type.count("general.architecture")) return kv.missing(path, "general.architecture", "string (8)");
        wa_set_error("%s: no general.architecture key (%llu key%s): not a whisper-audio or llama.cpp mmproj model", path,
                     (unsigned long long)n_kv, n_kv == 1 ? "" : "s");
        return false;
    }
    m->mmproj = kv.arch == "clip";
    if (kv.arch.find('\0') != std::string::npos || kv.proj_type.find('\0') != std::string::npos) {
        wa_set_error("%s: %s holds a NUL byte", path, kv.arch.find('\0') != std::string::npos ? "general.architecture"
                     : m->mmproj ? GGUF_MMPROJ.projector : GGUF_OURS.projector);
        return false;
    }
    if (kv.arch != "whisper" && !m->mmproj) {
        wa_set_error("%s: general.architecture is '%s', expected 'whisper' (or 'clip': a llama.cpp mmproj file)", path,
                     kv.arch.c_str());
        return false;
    }
    if (m->mmproj && !kv.u32.count(GGUF_MMPROJ.n_state)) {
        wa_set_error("%s: a llama.cpp mmproj file without an audio encoder (no clip.audio.embedding_length)", path);
        return false;
    }
    if (kv.alignment == 0 || (kv.alignment & (kv.alignment - 1)) || kv.alignment > 65536 || kv.alignment % 4) {
        wa_set_error("%s: general.alignment %u is not a supported power of two", path, kv.alignment);
        return false;
    }
    return true;
}

// The encoder's hyperparameters from the dialect's keys, each in its range.
static bool gguf_hparams(whisper_audio_model * m, gguf_kv & kv, const gguf_dialect & d) {
    const char * path = m->path.c_str();
    whisper_audio_hparams & hp = m->hparams;
    if (m->mmproj) kv.u32[d.n_ctx] = 1500;   // not stored: the positional embedding's rows
    struct { const char * key; int * dst; int lo, hi; } keys[] = {
        {d.n_mels, &hp.n_mels, 1, 512},      {d.n_ctx, &hp.n_ctx, 1500, 1500},  {d.n_state, &hp.n_state, 1, 16384},
        {d.n_head, &hp.n_head, 1, 256},      {d.n_layer, &hp.n_layer, 1, 256},  {d.n_ff, &hp.n_ff, 1, 65536},
    };
    for (auto & k : keys) {
        auto it = kv.u32.find(k.key);
        if (it == kv.u32.end()) return kv.missing(path, k.key, "uint32 (4)");
        if (it->second < (uint32_t)k.lo || it->second > (uint32_t)k.hi) {
            wa_set_error("%s: %s = %u is outside [%d, %d]", path, k.key, it->second, k.lo, k.hi);
            return false;
        }
        *k.dst = (int)it->second;
    }
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: embedding_length %d is not a multiple of head_count %d", path, hp.n_state, hp.n_head);
        return false;
    }
    // the converter always writes eps; without it, Whisper's own (PyTorch's LayerNorm default)
    auto e = kv.f32.find(d.eps);
    if (e != kv.f32.end() && !(std::isfinite(e->second) && e->second > 0.0f)) {
        wa_set_error("%s: %s is %g; it must be a positive finite number (Whisper's is 1e-05)", path, d.eps, e->second);
        return false;
    }
    hp.eps = e != kv.f32.end() ? e->second : 1e-5f;

    // Voxtral Realtime's attention (our GGUF alone): its heads' width and its sliding window, both keys or neither
    auto kl = kv.u32.find("whisper.encoder.attention.key_length");
    auto sw = kv.u32.find("whisper.encoder.attention.sliding_window");
    hp.head_dim = 0;
    hp.n_window = 0;
    if (!m->mmproj && (kl != kv.u32.end() || sw != kv.u32.end())) {
        if (kl == kv.u32.end()) return kv.missing(path, "whisper.encoder.attention.key_length", "uint32 (4)");
        if (sw == kv.u32.end()) return kv.missing(path, "whisper.encoder.attention.sliding_window", "uint32 (4)");
        if (kl->second < 2 || kl->second % 2 || kl->second > 256) {
            wa_set_error("%s: whisper.encoder.attention.key_length = %u; it must be even, in [2, 256]", path, kl->second);
            return false;
        }
        if (sw->second < 1 || sw->second > 65536) {
            wa_set_error("%s: whisper.encoder.attention.sliding_window = %u is outside [1, 65536]", path, sw->second);
            return false;
        }
        hp.head_dim = (int)kl->second;
        hp.n_window = (int)sw->second;
    }
    // RoPE in place of the positional embedding (GLM-ASR, Voxtral Realtime; our GGUF alone): both keys or neither
    auto rd = kv.u32.find("whisper.encoder.rope.dimension_count");
    auto rf = kv.f32.find("whisper.encoder.rope.freq_base");
    hp.n_rot = 0;
    hp.rope_theta = 0.0f;
    if (!m->mmproj && (rd != kv.u32.end() || rf != kv.f32.end())) {
        if (rd == kv.u32.end()) return kv.missing(path, "whisper.encoder.rope.dimension_count", "uint32 (4)");
        if (rf == kv.f32.end()) return kv.missing(path, "whisper.encoder.rope.freq_base", "float32 (6)");
        const uint32_t head_dim = (uint32_t)wa_head_dim(hp);
        if (rd->second < 2 || rd->second % 2 || rd->second > head_dim) {
            wa_set_error("%s: whisper.encoder.rope.dimension_count = %u; it must be even, in [2, head_dim %u]", path,
                         rd->second, head_dim);
            return false;
        }
        if (!(std::isfinite(rf->second) && rf->second > 0.0f)) {
            wa_set_error("%s: whisper.encoder.rope.freq_base is %g; it must be a positive finite number", path, rf->second);
            return false;
        }
        hp.n_rot = (int)rd->second;
        hp.rope_theta = rf->second;
    }
    // chunks (Qwen2.5-Omni): our GGUF's key; llama.cpp's qwen2.5o mmproj does not store it (set
    // with the projector: its config's n_window 100, 200 frames)
    auto ck = kv.u32.find("whisper.encoder.chunk_length");
    hp.n_chunk = 0;
    if (!m->mmproj && ck != kv.u32.end()) {
        if (ck->second < 2 || ck->second % 2 || WHISPER_AUDIO_N_FRAMES % ck->second) {
            wa_set_error("%s: whisper.encoder.chunk_length = %u; it must be even and divide %d frames", path, ck->second,
                         WHISPER_AUDIO_N_FRAMES);
            return false;
        }
        hp.n_chunk = (int)ck->second;
    }
    // block-causal attention (MiniCPM-o): our GGUF's key, the positions of a block
    auto causal = kv.u32.find("whisper.encoder.attention.causal_chunk");
    hp.n_causal = 0;
    if (!m->mmproj && causal != kv.u32.end()) {
        if (causal->second < 1 || (int)causal->second > hp.n_ctx) {
            wa_set_error("%s: whisper.encoder.attention.causal_chunk = %u; it must be in [1, %d positions]", path, causal->second, hp.n_ctx);
            return false;
        }
        hp.n_causal = (int)causal->second;
    }
    // Qwen3-Omni's AuT encoder (our GGUF's keys): the Conv2d stem's channels, the attention window
    auto cc = kv.u32.find("whisper.encoder.conv2d.channels");
    auto aw = kv.u32.find("whisper.encoder.attention.window_length");
    hp.n_conv = 0;
    hp.n_attn_window = 0;
    if (!m->mmproj && cc != kv.u32.end()) {
        if (cc->second < 1 || cc->second > 4096) {
            wa_set_error("%s: whisper.encoder.conv2d.channels = %u is outside [1, 4096]", path, cc->second);
            return false;
        }
        hp.n_conv = (int)cc->second;
    }
    if (!m->mmproj && aw != kv.u32.end()) {
        if (!hp.n_chunk || aw->second < (uint32_t)hp.n_chunk || aw->second % hp.n_chunk || aw->second > WHISPER_AUDIO_N_FRAMES) {
            wa_set_error("%s: whisper.encoder.attention.window_length = %u; it must be a multiple of "
                         "whisper.encoder.chunk_length (%d) of at most %d frames", path, aw->second, hp.n_chunk, WHISPER_AUDIO_N_FRAMES);
            return false;
        }
        hp.n_attn_window = (int)aw->second;
    }
    return true;
}

// A tower's checks of its keys and of what its tensors say: whisper-audio-towers.h
static bool wa_tower_hparams(whisper_audio_model * m, const gguf_kv & kv, const gguf_dialect & d);
static bool wa_tower_tensor_hparams(whisper_audio_model * m);

// The projector: its type names the processing; an mmproj file always has one.
static bool gguf_projector(whisper_audio_model * m, const gguf_kv & kv, const gguf_dialect & d) {
    const char * path = m->path.c_str();
    whisper_audio_hparams & hp = m->hparams;
    hp.projector = WHISPER_AUDIO_PROJECTOR_NONE;
    hp.stack_factor = 1;
    if (!kv.has_proj_type && (m->mmproj || kv.wrong_type.count(d.projector))) return kv.missing(path, d.projector, "string (8)");
    if (!kv.has_proj_type) return true;
    const wa_projector_name * row = nullptr;
    for (const wa_projector_name & p : WA_PROJECTORS)
        if (kv.proj_type == p.gguf) row = &p;
    if (!row) {
        wa_set_error("%s: %s is '%s', not a projector this library runs (%s)", path, d.projector, kv.proj_type.c_str(),
                     wa_projector_list(&wa_projector_name::gguf).c_str());
        return false;
    }
    hp.projector = row->type;
    auto it = kv.u32.find(d.n_llm);
    if (it == kv.u32.end()) return kv.missing(path, d.n_llm, "uint32 (4)");
    if (it->second < 1 || it->second > 65536) { wa_set_error("%s: %s = %u is outside [1, 65536]", path, d.n_llm, it->second); return false; }
    hp.n_llm = (int)it->second;
    if (row->stacks) {                    // (llama.cpp writes no stack factor for the others)
        it = kv.u32.find(d.stack_factor);
        if (it == kv.u32.end()) return kv.missing(path, d.stack_factor, "uint32 (4)");
        if (it->second < 1 || it->second > 64) { wa_set_error("%s: %s = %u is outside [1, 64]", path, d.stack_factor, it->second); return false; }
        hp.stack_factor = (int)it->second;
    }
    return wa_tower_hparams(m, kv, d);
}

static bool gguf_read_tensor_infos(whisper_audio_model * m, gguf_reader & r, uint64_t n_tensors) {
    const char * path = m->path.c_str();
    for (uint64_t i = 0; i < n_tensors && r.ok; i++) {
        gguf_tensor_info t;
        t.name = r.get_string(GGUF_MAX_NAME);
        if (!r.ok && !r.past_end) {
            wa_set_error("%s: tensor %llu: name longer than %llu bytes (GGUF's limit)", path, (unsigned long long)i,
                         (unsigned long long)GGUF_MAX_NAME);
            return false;
        }
        t.n_dims = (int)r.get<uint32_t>();
        if (!r.ok) break;                                   // the file ends here: said below
        if (t.n_dims < 1 || t.n_dims > 4) {
            wa_set_error("%s: tensor %llu ('%s'): bad dimension count %d", path, (unsigned long long)i, t.name.c_str(), t.n_dims);
            return false;
        }
        for (int d = 0; d < t.n_dims && r.ok; d++) {
            const uint64_t ne = r.get<uint64_t>();
            if (!r.ok) break;
            if (ne == 0 || ne > (1u << 24)) { wa_set_error("%s: tensor '%s': bad dimension %llu", path, t.name.c_str(), (unsigned long long)ne); return false; }
            t.ne[d] = (int64_t)ne;
        }
        t.type = (int)r.get<uint32_t>();
        t.offset = r.get<uint64_t>();
        if (!r.ok) break;
        if (!vt_type_valid(t.type) && !wa_block(t.type)) {
            wa_set_error("%s: tensor '%s' has ggml type %d; supported: F32 (0), F16 (1), BF16 (30), Q4_0 (2), Q4_1 (3), "
                         "Q5_0 (6), Q5_1 (7), Q8_0 (8)", path, t.name.c_str(), t.type);
            return false;
        }
        if (wa_block(t.type) && t.ne[0] % QK != 0) {
            wa_set_error("%s: tensor '%s' is %s with rows of %lld: not whole blocks of %d", path, t.name.c_str(),
                         wa_type_name(t.type), (long long)t.ne[0], QK);
            return false;
        }
        if (!m->index.emplace(t.name, m->tensors.size()).second) {
            wa_set_error("%s: duplicate tensor name '%s'", path, t.name.c_str());
            return false;
        }
        m->tensors.push_back(t);
    }
    if (!r.ok) { wa_set_error("%s: truncated or corrupt GGUF tensor-info section", path); return false; }
    return true;
}

// llama.cpp's names to ours (WA_MMPROJ_NAMES, and MERaLiON-2's WA_MMPROJ_MERALION_NAMES); its conv
// biases are [1, d], ours [d] (the same bytes).
static bool mmproj_rename_tensors(whisper_audio_model * m) {
    m->index.clear();
    for (size_t i = 0; i < m->tensors.size(); i++) {
        gguf_tensor_info & t = m->tensors[i];
        std::string ours;
        if (wa_mmproj_rename(m, true, t.name, ours)) t.name = ours;
        if ((ours == "encoder.conv1.bias" || ours == "encoder.conv2.bias") && t.n_dims == 2 && t.ne[0] == 1) {
            t.n_dims = 1;
            t.ne[0] = t.ne[1];
            t.ne[1] = 1;
        }
        if (ours.rfind("encoder.conv2d", 0) == 0 && ours.size() > 5 && ours.compare(ours.size() - 5, 5, ".bias") == 0 &&
            t.n_dims == 3 && t.ne[0] == 1 && t.ne[1] == 1) {     // Qwen3-Omni's conv2d biases: [1, 1, c]
            t.n_dims = 1;
            t.ne[0] = t.ne[2];
            t.ne[1] = t.ne[2] = 1;
        }
        if (m->hparams.projector == WHISPER_AUDIO_PROJECTOR_QWEN3A && ours.rfind("multi_modal_projector.linear_", 0) == 0)
            t.name = "audio_tower.proj" + ours.substr(strlen("multi_modal_projector.linear_"));   // mm.a.mlp.N: its projN
        if (!m->index.emplace(t.name, i).second) {
            wa_set_error("%s: duplicate tensor name '%s'", m->path.c_str(), t.name.c_str());
            return false;
        }
    }
    return true;
}

// Each tensor's data aligned, inside the file, and no two sharing bytes; data starts at the first
// aligned offset after the header (header_end).
static bool gguf_check_data(whisper_audio_model * m, size_t header_end, uint32_t alignment) {
    const char * path = m->path.c_str();
    m->data_start = (header_end + alignment - 1) / alignment * alignment;
    const uint64_t data_size = m->file_size - std::min<uint64_t>(m->data_start, m->file_size);
    for (gguf_tensor_info & t : m->tensors) {
        if (t.offset % alignment != 0) {
            wa_set_error("%s: tensor '%s' is at offset %llu, which is not a multiple of the alignment (%u)", path,
                         t.name.c_str(), (unsigned long long)t.offset, alignment);
            return false;
        }
        uint64_t bytes = 0;
        if (!wa_tensor_bytes(t.type, t.ne, data_size, &bytes)) {
            wa_set_error("%s: tensor '%s' has dims [%lld, %lld, %lld, %lld] (%s): more bytes than the file's %llu bytes of data hold: truncated?",
                         path, t.name.c_str(), (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2], (long long)t.ne[3],
                         wa_type_name(t.type), (unsigned long long)data_size);
            return false;
        }
        if (t.offset > data_size - bytes) {
            wa_set_error("%s: tensor '%s' (%llu bytes at offset %llu) lies outside the file (%zu bytes): truncated?",
                         path, t.name.c_str(), (unsigned long long)bytes, (unsigned long long)t.offset, m->file_size);
            return false;
        }
        t.bytes = bytes;
    }
    std::vector<const gguf_tensor_info *> by_offset;
    for (const gguf_tensor_info & t : m->tensors) by_offset.push_back(&t);
    std::stable_sort(by_offset.begin(), by_offset.end(), [](auto a, auto b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); i++) {
        const gguf_tensor_info * a = by_offset[i - 1], * b = by_offset[i];
        if (a->offset + a->bytes > b->offset) {
            wa_set_error("%s: tensors '%s' and '%s' overlap (data bytes [%llu, %llu) and [%llu, %llu))", path,
                         a->name.c_str(), b->name.c_str(), (unsigned long long)a->offset,
                         (unsigned long long)(a->offset + a->bytes), (unsigned long long)b->offset,
                         (unsigned long long)(b->offset + b->bytes));
            return false;
        }
    }
    return true;
}

// Stages, as whisper.cpp's loader: header -> key/values (hparams) -> tensor infos -> data
// offsets, from r, the file's first bytes. Any mismatch names what and where.
static bool model_parse(whisper_audio_model * m, gguf_reader & r) {
    const char * path = m->path.c_str();
    if (m->file_size < 24) { wa_set_error("%s: file too small to be a GGUF model (%zu bytes)", path, m->file_size); return false; }
    if (memcmp(r.data, "GGUF", 4) != 0) {
        wa_set_error("%s: not a GGUF model file (bad magic)\n---> HINT: convert a Hugging Face Whisper checkpoint with "
                     "convert/convert-hf-to-gguf.py", path);
        return false;
    }
    r.pos = 4;
    const uint32_t version = r.get<uint32_t>();
    if (version != 3) { wa_set_error("%s: GGUF version %u, this reader reads version 3", path, version); return false; }
    const uint64_t n_tensors = r.get<uint64_t>(), n_kv = r.get<uint64_t>();
    if (n_tensors > GGUF_MAX_TENSORS || n_kv > GGUF_MAX_KV) {
        wa_set_error("%s: implausible counts in GGUF header (%llu tensors, %llu keys; at most %llu and %llu)", path,
                     (unsigned long long)n_tensors, (unsigned long long)n_kv, (unsigned long long)GGUF_MAX_TENSORS,
                     (unsigned long long)GGUF_MAX_KV);
        return false;
    }
    gguf_kv kv;
    if (!gguf_read_kv(m, r, n_kv, kv) || !gguf_arch(m, kv, n_kv)) return false;
    const gguf_dialect & dialect = m->mmproj ? GGUF_MMPROJ : GGUF_OURS;
    if (!gguf_hparams(m, kv, dialect) || !gguf_projector(m, kv, dialect)) return false;
    if (!gguf_read_tensor_infos(m, r, n_tensors)) return false;
    if (m->mmproj && !mmproj_rename_tensors(m)) return false;
    if (!wa_tower_tensor_hparams(m)) return false;
    return gguf_check_data(m, r.pos, kv.alignment);
}

// The tensors the encoder uses: shapes checked against the hyperparameters, then read into
// the model's own memory (wa_read_tensors).
bool model_read_weights(whisper_audio_model * m, int fd) {
    for (const gguf_tensor_info & t : m->tensors)
        if (!wa_check_layers(m, t.name, "encoder.layers.", wa_file_name(m, t.name.c_str()).c_str(),
                             m->mmproj ? "clip.audio.block_count" : "whisper.encoder.block_count"))
            return false;
    std::vector<gguf_tensor_info *> used;
    if (!wa_for_each_tensor(m->hparams, [&](const wa_tensor_desc & t, int, const char * name) {
            if (m->mmproj && !t.top && !t.layer) return true;   // the mel bank: computed below
            int64_t ne[4];
            const int n_dims = wa_shape(m->hparams, t, ne);
            if (!check_tensor(m, name, n_dims, ne, t.matrix)) return false;
            used.push_back(&m->tensors[m->index.at(name)]);
            return true;
        })) {
        return false;
    }
    // the projector's tensors: those of its type; of an "either" pair exactly one
    const whisper_audio_hparams & hp = m->hparams;
    int n_either = 0;
    for (const wa_proj_desc & t : WA_PROJ_TENSORS) {
        if (t.type != hp.projector || (t.either && !m->find(t.name))) continue;
        n_either += t.either;
        int64_t ne[3];
        const int n_dims = wa_proj_shape(hp, t, ne);
        if (!check_tensor(m, t.name, n_dims, ne, t.matrix)) return false;
        used.push_back(&m->tensors[m->index.at(t.name)]);
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_ULTRAVOX && n_either != 1) {
        wa_set_error("%s: Ultravox's projector needs one of the tensors '%s' and 'multi_modal_projector.ln_post.weight'; "
                     "the file has %s", m->path.c_str(), wa_file_name(m, "multi_modal_projector.ln_mid.weight").c_str(),
                     n_either ? "both" : "neither");
        return false;
    }
    // a block type's tensor takes its f32 size (4 bytes a weight)
    std::vector<uint64_t> sizes;
    for (const gguf_tensor_info * t : used) {
        const wa_block_type * b = wa_block(t->type);
        sizes.push_back(b ? t->bytes / b->bytes * QK * 4 : t->bytes);
    }
    const bool read = wa_read_tensors(m, used, sizes, [&](size_t i, uint8_t * d) {
        gguf_tensor_info * t = used[i];
        if (const wa_block_type * b = wa_block(t->type)) {   // dequantised, then checked as any f32 tensor
            std::vector<uint8_t> blocks(t->bytes);
            if (!read_at(m, fd, blocks.data(), t->bytes, m->data_start + t->offset)) return std::string(whisper_audio_last_error());
            wa_dequantize(t->type, blocks.data(), (float *)d, t->bytes / b->bytes);
            t->block_type = t->type;
            t->block_bytes = t->bytes;
            t->bytes = sizes[i];
            t->type = VT_TYPE_F32;
        } else if (!read_at(m, fd, d, t->bytes, m->data_start + t->offset)) {
            return std::string(whisper_audio_last_error());
        }
        return wa_nonfinite(m->path, t->name, *t, d);
    });
    if (!read) return false;
    m->hparams.weight_type = wa_weight_type((vt_type)m->find("encoder.layers.0.fc2.weight")->type);
    if (m->mmproj) {   // as the feature extractor computes it (llama.cpp's files do not store it)
        m->mel_computed.resize((size_t)m->hparams.n_mels * WHISPER_AUDIO_N_BINS);
        wa_mel_filters_slaney(m->hparams.n_mels, m->mel_computed.data());
        m->mel_filters = m->mel_computed.data();
    } else {
        m->mel_filters = (const float *)m->find("mel_filters")->data;
    }
    return true;
}


// The metadata from a prefix of the file, grown until parse fits in it (a read past the prefix's
// end asks for a longer one), then the weights.
bool wa_read_prefix(whisper_audio_model * m, int fd, bool (*parse)(whisper_audio_model *, gguf_reader &, int)) {
    std::vector<uint8_t> head;
    for (size_t have = std::min<size_t>(m->file_size, 1u << 20);; have = std::min<size_t>(m->file_size, have * 4)) {
        head.resize(have);
        if (!read_at(m, fd, head.data(), have, 0)) return false;
        gguf_reader r{head.data(), have};
        m->tensors.clear();
        m->index.clear();
        if (parse(m, r, fd)) break;
        if (!r.past_end || have == m->file_size) return false;
    }
    return model_read_weights(m, fd);
}

static bool model_read(whisper_audio_model * m, int fd) {
#ifdef WHISPER_AUDIO_FORMATS
    bool taken = false;                                   // whisper.cpp's ggml, CTranslate2, safetensors
    const bool ok = wa_formats_read_file(m, fd, &taken);
    if (taken) return ok;
#else
    char magic[4];
    if (m->file_size >= sizeof(magic) && read_at(m, fd, magic, sizeof(magic), 0) && memcmp(magic, "GGUF", 4) != 0) {
        wa_set_error("%s: not a GGUF file; this build reads GGUF alone: whisper.cpp ggml, CTranslate2 and Hugging Face "
                     "models need whisper-audio-formats.cpp (with -DWHISPER_AUDIO_FORMATS)", m->path.c_str());
        return false;
    }
#endif
    return wa_read_prefix(m, fd, [](whisper_audio_model * m, gguf_reader & r, int) { return model_parse(m, r); });
}

static whisper_audio_model * model_load(const char * path) {
    if (!path) { wa_set_error("no model path given"); return nullptr; }
    std::unique_ptr<whisper_audio_model> m(new whisper_audio_model);
    struct stat dir;
    const bool exists = stat(path, &dir) == 0;
    const bool missing = !exists && errno == ENOENT;
    const bool is_dir = exists && S_ISDIR(dir.st_mode);
#ifdef WHISPER_AUDIO_FORMATS
    // a Hugging Face repo id (its snapshot in the cache) or a Hugging Face directory
    bool taken = false;
    const bool read = wa_formats_read_path(m.get(), path, missing, is_dir, &taken);
    if (taken) return read ? m.release() : nullptr;
#else
    if (is_dir) {
        wa_set_error("%s: a directory; this build reads GGUF files alone: Hugging Face and CTranslate2 directories need "
                     "whisper-audio-formats.cpp (with -DWHISPER_AUDIO_FORMATS)", path);
        return nullptr;
    }
    (void)missing;
#endif
    // a file, or a CTranslate2 / faster-whisper directory's model.bin (recognised by content)
    const std::string file = is_dir ? std::string(path) + "/model.bin" : path;
    path = file.c_str();
    // O_NONBLOCK: opening a FIFO would wait for a writer forever; it is refused below instead
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        wa_set_error("%s: cannot open model file: %s%s", path, strerror(errno),
                     is_dir ? " (a model directory is a Hugging Face one, config.json + model.safetensors, or a CTranslate2 / "
                              "faster-whisper one, model.bin + config.json)" : "");
        return nullptr;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        wa_set_error("%s: not a regular file (a model is a file, or a Hugging Face or CTranslate2 directory)", path);
        close(fd);
        return nullptr;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (st.st_size == 0) {
        wa_set_error("%s: the model file is empty", path);
        close(fd);
        return nullptr;
    }
    m->path = path;
    m->file_size = (size_t)st.st_size;
    bool ok = false;
    try {
        ok = model_read(m.get(), fd);
    } catch (...) {
        close(fd);
        throw;
    }
    close(fd);
    return ok ? m.release() : nullptr;
}

whisper_audio_model * whisper_audio_model_load(const char * path) {
    return wa_catch(__func__, (whisper_audio_model *)nullptr, [&] { return model_load(path); });
}

void whisper_audio_model_free(whisper_audio_model * model) { delete model; }

const whisper_audio_hparams * whisper_audio_model_hparams(const whisper_audio_model * model) {
    if (!model) { wa_set_error("%s: no model", __func__); return nullptr; }
    return &model->hparams;
}

const char * whisper_audio_weight_type_name(enum whisper_audio_weight_type type) {
    static const char * names[] = {"f32", "f16", "bf16"};
    static_assert(sizeof(names) / sizeof(names[0]) == WHISPER_AUDIO_WEIGHT_COUNT, "a weight type without a name");
    static_assert(sizeof(type) == sizeof(int), "enums as int");
    int t;                                    // as encoder_init reads the enums: a C caller may pass any int
    memcpy(&t, &type, sizeof(int));
    if (t < 0 || t >= WHISPER_AUDIO_WEIGHT_COUNT) { wa_set_error("%s: %d is not a weight type", __func__, t); return nullptr; }
    return names[t];
}

const float * whisper_audio_model_mel_filters(const whisper_audio_model * model) {
    if (!model) { wa_set_error("%s: no model", __func__); return nullptr; }
    return model->mel_filters;
}

// ---- the log-mel with a model's own filters ----------------------------------------------

bool whisper_audio_log_mel(const whisper_audio_model * model, const float * pcm, size_t n, float * out) {
    if (!model) { wa_set_error("%s: NULL model", __func__); return false; }
    return log_mel_checked(__func__, model->mel_filters, model->hparams.n_mels, pcm, n, out);
}

bool whisper_audio_log_mel_windows(const whisper_audio_model * model, const float * pcm, size_t n, int n_windows,
                                   float * out, int n_threads) {
    if (!model || !out || (!pcm && n > 0)) {
        wa_set_error("%s: NULL %s", __func__, !model ? "model" : !out ? "out" : "pcm");
        return false;
    }
    if (n_windows < 1) { wa_set_error("%s: %d windows (at least 1)", __func__, n_windows); return false; }
    return wa_catch(__func__, false, [&] {
        return log_mel_windows(model->mel_filters, model->hparams.n_mels, pcm, n, n_windows, out, n_threads);
    });
}

// =====================================================================================
// the encoder graph
// =====================================================================================

struct wa_graph {                        // one batch shape, built once and replayed
    vt_context * ctx = nullptr;
    vt_graph * graph = nullptr;
    vt_tensor * in = nullptr;            // f32 input: mel [B, n_mels, F], or PCM rows [B, WA_MEL_ROW]
    vt_tensor * mel_params = nullptr;    // [B, 2] f32 input with PCM: vt_log_mel's frames and clamp per window
    vt_tensor * kv_len = nullptr;        // [B] f32 input: the positions holding audio (a masked tower's graphs)
    vt_tensor * frames = nullptr;        // [B] f32 input: the mel frames holding audio (a chunked tower's: Qwen2.5-Omni)
    vt_tensor * window = nullptr;        // [B] f32 input: each window's index in its input (a time_rope tower's: Music Flamingo)
    vt_tensor * out = nullptr;           // [B, F/2, d], a tower's [B, rows, width], or the mel maxima [B]
    std::vector<vt_tensor *> states;     // WA_GRAPH_STATES: the n_layer + 1 hidden states, each [B, F/2, d]
};

// A causal tower's step (Voxtral Realtime: wa_causal in whisper-audio-towers.h), built once per
// (batch, mel frames) and replayed: the step's frames and what it carries from the steps before.
struct wa_step_graph {
    vt_context * ctx = nullptr;
    vt_graph * graph = nullptr;
    vt_tensor * mel = nullptr;           // [B, F, n_mels] f32 input: the step's frames, frame-major
    vt_tensor * tail1 = nullptr;         // [B, 2, n_mels] input: the two frames before them (conv1's left padding)
    vt_tensor * tail2 = nullptr;         // [B, 1, d] input: conv1's row before its first (conv2's)
    vt_tensor * pos0 = nullptr;          // [B] input: the positions before the step (RoPE's)
    vt_tensor * kv_start = nullptr;      // [B] input: the first row of the caches that holds a position
    std::vector<vt_tensor *> k_cache, v_cache;   // per layer [B, W, a] inputs: the rotated keys and the values of
                                                 // the W positions before the step
    vt_tensor * conv1 = nullptr;         // [B, F, d] output: its last row the next step's tail2
    std::vector<vt_tensor *> k_all, v_all;       // per layer [B, W + F/2, a] outputs: their last W rows the next caches
    vt_tensor * out = nullptr;           // [B, F/8, n_llm] tokens, or [B, F/2, d] the tower's rows
    wa_causal * holder = nullptr;        // the input whose caches k_all and v_all hold now (its next step reads them there)
};

// It keeps copies of what it needs from the model, so the model may be freed before it.
struct whisper_audio_encoder {
    whisper_audio_hparams hparams;
    std::vector<float> mel_filters;      // [n_mels, 201]
    whisper_audio_encoder_params params; // n_threads resolved (wa_n_threads)
    std::atomic<bool> busy{false};       // a call is running (wa_encoder_lock)
    vt_backend * backend = nullptr;
    vt_context * wctx = nullptr;         // the weights' tensors
    wa_weights w{};                      // made and filled by walking WA_TENSORS
    bool mel_in_graph = false;           // the backend makes the log-mel (CUDA): PCM goes in
    vt_tensor * mel_filters_t = nullptr; // ... with this copy of the mel bank
    wa_projector proj{};                 // the projector's, by WA_PROJ_TENSORS (those of hparams.projector)
    // by (batch size, mel frames, PCM in, what it computes: wa_graph_kind)
    std::map<std::tuple<int, int, bool, int>, wa_graph> graphs;
    std::map<std::pair<int, int>, wa_step_graph> step_graphs;   // a causal tower's, by (batch size, mel frames)
    whisper_audio_timings timings{};     // since init or the last reset
};

// ---- the audio LLMs' towers: whisper-audio-towers.h ------------------------------------------

#include "whisper-audio-towers.h"


// Builds the forward for a batch of mel windows: mel [B, n_mels, F] -> [B, (F + 1) / 2, d]; F
// is 3000 for a padded 30 s window, or fewer for an unpadded one. kv_len [B] (or NULL):
// window b attends to its first kv_len[b] positions. frames [B] (hparams.n_chunk, Qwen2.5-Omni):
// its mel frames holding audio; the conv stem runs per chunk of n_chunk frames, the frames from
// frames[b] on read as zero, each chunk's positions get the positional embedding's first rows,
// and attention stays within a chunk's positions. tower: its builder follows the last layer (window
// [B]: each window's index in its input, for a time_rope tower).
// states (or NULL; the encoder's output_layer -1, final_ln): gets every hidden state as
// transformers' WhisperEncoder hands them out (output_hidden_states): the input of layer 0,
// each layer's output but the last's, then the output (the last layer through the final LayerNorm).
static vt_tensor * whisper_audio_build_encoder(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * mel,
                                               vt_tensor * kv_len, vt_tensor * frames, const wa_tower * tower,
                                               vt_tensor * window, std::vector<vt_tensor *> * states = nullptr) {
    const whisper_audio_hparams & hp = enc->hparams;
    VT_ASSERT(hp.n_window == 0);                       // Voxtral Realtime's is build_realtime_step (its callers refuse windows)
    const wa_weights & w = enc->w;
    const int n_state = hp.n_state, n_head = hp.n_head;
    int n_ctx = ((int)mel->ne[0] - 1) / 2 + 1;         // positions (conv2's stride 2): 1500 for a 30 s window
    const int n_batch = (int)mel->ne[2];
    const float kq_scale = 1.0f / sqrtf((float)(n_state / n_head));
    const int out_layer = enc->params.output_layer;

    // conv stem: conv1 + GELU, conv2 (stride 2) + GELU + positional embedding
    const bool aut = hp.n_conv > 0;        // Qwen3-Omni's AuT: its own stem below
    const int n_chunk = tower && !aut ? hp.n_chunk : 0, chunk_pos = n_chunk / 2;   // Qwen2.5-Omni's tokens: per chunk
    VT_ASSERT(!n_chunk || (frames && (int)mel->ne[0] % n_chunk == 0));
    vt_tensor * cur = nullptr;
    int block = chunk_pos;                 // attention's blocks (vt_attention_blocks), 0: none
    if (aut) {
        // Qwen3OmniMoeAudioEncoder.forward: chunks of n_chunk mel frames (a window shorter than one is
        // its own chunk), the last one's frames past the audio zero; conv2d1-3 (3x3, stride 2, GELU) per
        // chunk; (c, f) flattened by conv_out (the backend's copy frequency-major); the first rows of the
        // sinusoids added to each chunk's positions; attention within windows of n_attn_window frames
        const int F = (int)mel->ne[0], ch1 = std::min(hp.n_chunk, F), ch2 = (ch1 - 1) / 2 + 1, ch3 = (ch2 - 1) / 2 + 1;
        const int per_chunk = (ch3 - 1) / 2 + 1;
        VT_ASSERT(F % ch1 == 0);
        cur = vt_conv2d_k3s2_pair(ctx, mel, w.conv2d1_w, w.conv2d1_b, ch1, frames, w.conv2d2_w, w.conv2d2_b, ch2, VT_ACT_GELU);
        cur = vt_conv2d_k3s2(ctx, cur, w.conv2d3_w, w.conv2d3_b, VT_ACT_GELU, ch3, nullptr);
        n_ctx = (int)cur->ne[2];
        const int64_t row_in = cur->ne[0] * cur->ne[1];   // c f3
        const size_t es = vt_type_size(cur->type);
        cur = vt_view_3d(ctx, cur, row_in, n_ctx, n_batch, row_in * es, (size_t)row_in * n_ctx * es, 0);
        cur = vt_linear(ctx, cur, w.conv_out_w, nullptr, VT_ACT_NONE, nullptr);
        cur = vt_add_rows(ctx, cur, w.pos, per_chunk);
        block = hp.n_attn_window / hp.n_chunk * per_chunk;  // its cu_seqlens: n_window_infer / (2 n_window) chunks
    } else if (tower && tower->tail_by_frames) {   // MiniCPM-o: the mel frames past the audio zero (pad_sequence), conv2 plain
        VT_ASSERT(frames);
        vt_tensor * pos = n_ctx == hp.n_ctx ? w.pos                   // the first n_ctx rows, as its forward slices them
                                            : vt_view_3d(ctx, w.pos, n_state, n_ctx, 1, n_state * sizeof(float),
                                                         (size_t)n_ctx * n_state * sizeof(float), 0);
        cur = vt_conv1d_k3_chunks(ctx, vt_transpose(ctx, mel), w.conv1_w, w.conv1_b, 1, VT_ACT_GELU, nullptr,
                                  (int)mel->ne[0], frames);
        cur = vt_conv1d_k3(ctx, cur, w.conv2_w, w.conv2_b, 2, VT_ACT_GELU, pos);
    } else if (n_chunk) {                   // its padded_mask zeroes conv1's output past the audio too
        vt_tensor * pos = vt_view_3d(ctx, w.pos, n_state, chunk_pos, 1, n_state * sizeof(float),
                                     (size_t)chunk_pos * n_state * sizeof(float), 0);
        cur = vt_conv1d_k3_chunks(ctx, vt_transpose(ctx, mel), w.conv1_w, w.conv1_b, 1, VT_ACT_GELU, nullptr, n_chunk, frames);
        cur = vt_conv1d_k3_chunks(ctx, cur, w.conv2_w, w.conv2_b, 2, VT_ACT_GELU, pos, n_chunk, frames);
    } else {
        cur = vt_conv1d_k3(ctx, vt_transpose(ctx, mel), w.conv1_w, w.conv1_b, 1, VT_ACT_GELU, nullptr);
        vt_tensor * pos = n_ctx == hp.n_ctx ? w.pos                   // the first n_ctx rows, as Ultravox slices them
                                            : vt_view_3d(ctx, w.pos, n_state, n_ctx, 1, n_state * sizeof(float),
                                                         (size_t)n_ctx * n_state * sizeof(float), 0);
        cur = vt_conv1d_k3(ctx, cur, w.conv2_w, w.conv2_b, 2, VT_ACT_GELU, hp.n_rot ? nullptr : pos);   // RoPE: no embedding
    }
    vt_set_name(cur, "post_conv");
    if (out_layer == WHISPER_AUDIO_POST_CONV) return cur;
    VT_ASSERT(!states || (out_layer == -1 && enc->params.final_ln && !tower));
    if (states) states->push_back(cur);

    const size_t es = vt_type_size(cur->type);
    for (int il = 0; il < hp.n_layer; il++) {
        const wa_layer & layer = w.layers[il];
        vt_tensor * inpL = cur;

        // norm
        cur = vt_layer_norm(ctx, inpL, layer.attn_ln_w, layer.attn_ln_b, hp.eps);

        // self-attention: one GEMM for q, k, v, then views of its [B, T, 3d] output
        {
            vt_tensor * qkv = vt_linear(ctx, cur, layer.qkv_w, layer.qkv_b, VT_ACT_NONE, nullptr);
            if (hp.n_rot) qkv = vt_rope_qk(ctx, qkv, n_head, hp.n_rot, hp.rope_theta);   // GLM-ASR: q and k turned by position
            const size_t row = 3 * n_state * es, win = row * n_ctx;
            vt_tensor * q = vt_view_3d(ctx, qkv, n_state, n_ctx, n_batch, row, win, 0);
            vt_tensor * k = vt_view_3d(ctx, qkv, n_state, n_ctx, n_batch, row, win, n_state * es);
            vt_tensor * v = vt_view_3d(ctx, qkv, n_state, n_ctx, n_batch, row, win, 2 * n_state * es);
            cur = block   ? vt_attention_blocks(ctx, q, k, v, n_head, kq_scale, kv_len, block)   // per chunk or window
                : tower && hp.n_causal ? vt_attention_block_causal(ctx, q, k, v, n_head, kq_scale, kv_len, hp.n_causal)
                : kv_len  ? vt_attention_masked(ctx, q, k, v, n_head, kq_scale, kv_len)
                          : vt_attention(ctx, q, k, v, n_head, kq_scale);
        }

        // projection + residual
        vt_tensor * inpFF = vt_linear(ctx, cur, layer.out_w, layer.out_b, VT_ACT_NONE, inpL);

        // feed-forward network + residual
        cur = vt_layer_norm(ctx, inpFF, layer.ffn_ln_w, layer.ffn_ln_b, hp.eps);
        cur = vt_linear(ctx, cur, layer.fc1_w, layer.fc1_b, VT_ACT_GELU, nullptr);
        cur = vt_linear(ctx, cur, layer.fc2_w, layer.fc2_b, VT_ACT_NONE, inpFF);
        vt_set_name(cur, "layer%d", il);
        if (il == out_layer) return cur;
        if (states && il < hp.n_layer - 1) states->push_back(cur);
    }
    if (tower) return vt_set_name(tower->build(enc, ctx, cur, window), "tokens");

    // final norm
    if (enc->params.final_ln) {
        cur = vt_layer_norm(ctx, cur, w.ln_post_w, w.ln_post_b, hp.eps);
        vt_set_name(cur, "output");
    }
    if (states) states->push_back(cur);
    return cur;
}

// =====================================================================================
// encoders: weights uploaded, graphs per batch shape, encoding, timings, the
// rules that turn audio into rows
// =====================================================================================

whisper_audio_encoder_params whisper_audio_encoder_default_params(void) {
    whisper_audio_encoder_params p;
    p.device = WHISPER_AUDIO_DEVICE_AUTO;
    p.dtype = WHISPER_AUDIO_DTYPE_F16;
    p.n_threads = (int)std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
    p.gpu_device = 0;
    p.max_batch = 1;
    p.output_layer = -1;
    p.final_ln = true;
    p.projector = true;
    return p;
}

// Copies the encoder's tensors from the model to the backend, converting the type. The parts
// of a fused tensor are gathered in f32 and copied once the last is in.
static bool upload_weights(whisper_audio_encoder * enc, const whisper_audio_model * model) {
    // a tensor fused from parts (QKV) is joined in the parts' own type where they share one
    // (the f16 bytes as they are: no host conversion, half the bytes up), else in f32
    std::vector<uint8_t> fused;
    vt_type fused_type = VT_TYPE_F32;
    return wa_for_each_tensor(enc->hparams, [&](const wa_tensor_desc & t, int il, const char * name) {
        vt_tensor ** dst = wa_dst(enc->w, t, il);
        if (!dst) return true;
        const gguf_tensor_info * src = model->find(name);
        const void * data = src->data;
        vt_type type = (vt_type)src->type;
        if (t.n_parts > 1) {
            const size_t n = src->bytes / vt_type_size(type), total = n * t.n_parts;
            VT_ASSERT(total == (size_t)vt_nelements(*dst));
            if (t.part == 0) {
                fused_type = type;
                fused.assign(total * vt_type_size(type), 0);             // a part with no row stays zero
            } else if (type != fused_type && fused_type != VT_TYPE_F32) {   // mixed types: the parts so far in f32
                std::vector<uint8_t> f32(total * sizeof(float));
                vt_convert(f32.data(), VT_TYPE_F32, fused.data(), fused_type, total);
                fused.swap(f32);
                fused_type = VT_TYPE_F32;
            }
            const size_t es = vt_type_size(fused_type);
            if (type == fused_type) memcpy(fused.data() + t.part * n * es, src->data, n * es);
            else vt_convert(fused.data() + t.part * n * es, fused_type, src->data, type, n);
            if (t.part < t.n_parts - 1) return true;
            data = fused.data();
            type = fused_type;
        }
        std::vector<float> cols;
        if (dst == &enc->w.conv_out_w) {       // [d, c f3] -> [d, f3 c]: the Conv2d stem's output is frequency-major
            const int64_t d = src->ne[1], c = enc->hparams.n_conv, f3 = src->ne[0] / c;
            std::vector<float> w((size_t)(d * c * f3));
            vt_convert(w.data(), VT_TYPE_F32, src->data, type, w.size());
            cols.resize(w.size());
            for (int64_t o = 0; o < d; o++)
                for (int64_t ci = 0; ci < c; ci++)
                    for (int64_t f = 0; f < f3; f++) cols[(size_t)((o * f3 + f) * c + ci)] = w[(size_t)((o * c + ci) * f3 + f)];
            data = cols.data();
            type = VT_TYPE_F32;
        }
        if (!vt_backend_set_tensor(enc->backend, *dst, data, type)) {
            wa_set_error("uploading %s: %s", name, vt_last_error());
            return false;
        }
        return true;
    });
}

// The encoder parameters a caller can get wrong, each refused with its allowed range.
static bool encoder_check_params(const whisper_audio_hparams & hp, const whisper_audio_encoder_params & params) {
    // a C caller may store any int in the enum fields, which C++ may not load as the enum: read the bytes
    static_assert(sizeof(params.device) == sizeof(int) && sizeof(params.dtype) == sizeof(int), "enums as int");
    int device, dtype;
    memcpy(&device, &params.device, sizeof(int));
    memcpy(&dtype, &params.dtype, sizeof(int));
    if (device != WHISPER_AUDIO_DEVICE_AUTO && device != WHISPER_AUDIO_DEVICE_CPU && device != WHISPER_AUDIO_DEVICE_CUDA) {
        wa_set_error("device %d is not WHISPER_AUDIO_DEVICE_AUTO, _CPU or _CUDA", device);
        return false;
    }
    if (dtype != WHISPER_AUDIO_DTYPE_F16 && dtype != WHISPER_AUDIO_DTYPE_BF16 && dtype != WHISPER_AUDIO_DTYPE_FP8) {
        wa_set_error("dtype %d is not WHISPER_AUDIO_DTYPE_F16, _BF16 or _FP8", dtype);
        return false;
    }
    if (params.gpu_device < 0) { wa_set_error("gpu_device %d is negative", params.gpu_device); return false; }
    if (params.max_batch < 1 || params.max_batch > WHISPER_AUDIO_MAX_BATCH) {
        wa_set_error("batch size %d is outside [1, %d]", params.max_batch, WHISPER_AUDIO_MAX_BATCH);
        return false;
    }
    if (params.output_layer < WHISPER_AUDIO_POST_CONV || params.output_layer >= hp.n_layer) {
        wa_set_error("output layer %d is outside [0, %d] (-1: the last layer)", params.output_layer, hp.n_layer - 1);
        return false;
    }
    return true;
}

// The encoder's backend: the GPU when asked for (or, for auto, when one is there), else the CPU.
static bool encoder_backend_init(whisper_audio_encoder * enc) {
    const whisper_audio_encoder_params & params = enc->params;
    const vt_type cuda_type = params.dtype == WHISPER_AUDIO_DTYPE_F16 ? VT_TYPE_F16 : VT_TYPE_BF16;
    // auto tries the GPU only where a device is there (so that a CPU machine does not open cuBLASLt)
    if (params.device == WHISPER_AUDIO_DEVICE_CUDA || (params.device == WHISPER_AUDIO_DEVICE_AUTO && vt_backend_device_count(WA_GPU_BACKEND) > 0)) {
        const vt_backend_params gpu = {cuda_type, 0, params.dtype == WHISPER_AUDIO_DTYPE_FP8};
        enc->backend = vt_backend_init(WA_GPU_BACKEND, params.gpu_device, &gpu);
        // auto falls back to the CPU when there is no GPU, but not when an FP8 GPU was asked
        // for and the GPU present cannot do it (the CPU would not compute FP8 either)
        const bool fp8_refused = params.dtype == WHISPER_AUDIO_DTYPE_FP8 && vt_backend_device_count(WA_GPU_BACKEND) > 0;
        if (!enc->backend && (params.device == WHISPER_AUDIO_DEVICE_CUDA || fp8_refused)) {
            wa_set_error("CUDA backend unavailable: %s", vt_last_error());
            return false;
        }
    }
    const bool on_gpu = enc->backend != nullptr;
    // the CPU: --dtype bf16 its bf16 mode (bf16 GEMMs on AMX where the CPU has them, f32 where
    // not); f16 and fp8 compute in f32 there, as before
    if (!enc->backend) {
        const vt_backend_params cpu = {params.dtype == WHISPER_AUDIO_DTYPE_BF16 ? VT_TYPE_BF16 : VT_TYPE_F32,
                                       enc->params.n_threads, false};
        enc->backend = vt_backend_init("cpu", 0, &cpu);
    }
    if (!enc->backend) { wa_set_error("%s", vt_last_error()); return false; }
    enc->mel_in_graph = on_gpu;
    return true;
}

// The weights' tensors: a tensor per row of WA_TENSORS (one for a fused tensor's rows), the mel
// bank where the backend makes the log-mel, and the projector's, each paired in proj with the
// model's tensor it is uploaded from.
static void encoder_make_weights(whisper_audio_encoder * enc, const whisper_audio_model * model,
                                 std::vector<std::pair<vt_tensor *, const gguf_tensor_info *>> & proj) {
    const whisper_audio_hparams & hp = enc->hparams;
    // matrices in the compute type, the rest in f32, named as in the model file (a fused one as its first part)
    const vt_type mt = vt_backend_compute_type(enc->backend);
    const int n_proj_rows = (int)(sizeof(WA_PROJ_TENSORS) / sizeof(WA_PROJ_TENSORS[0]));
    vt_context * ctx = enc->wctx = vt_init(wa_n_made(false) + wa_n_made(true) * hp.n_layer + n_proj_rows + 1);
    enc->w.layers.resize(hp.n_layer);
    wa_for_each_tensor(hp, [&](const wa_tensor_desc & t, int il, const char * name) {
        vt_tensor ** dst = wa_dst(enc->w, t, il);
        if (!dst || t.part > 0) return true;
        int64_t ne[4];
        const int n_dims = wa_shape(hp, t, ne);
        ne[n_dims - 1] *= t.n_parts;                                    // PyTorch's first dimension
        *dst = vt_new_tensor(ctx, t.matrix ? mt : VT_TYPE_F32, n_dims, ne);
        vt_set_weight(*dst);
        vt_set_name(*dst, "%s", name);
        // --dtype fp8: the linear layers of every block but the first and the last in e4m3. The
        // first and last blocks carry most of FP8's error into the output (docs/BENCHMARKS.md,
        // tests/gpu/fp8-layers.py); a model of two blocks keeps its second in FP8, else the mode
        // would be bf16's.
        const bool bf16_block = il == 0 || (il == hp.n_layer - 1 && hp.n_layer > 2);
        if (t.matrix && !bf16_block && n_dims == 2) vt_set_fp8(*dst);
        return true;
    });
    // the GPU makes the log-mel in the graph (vt_log_mel, PCM in); the CPU keeps the host path
    // (log_mel_frames: its FFT is faster there than vt's reference DFT, and is the reference's
    // bits, which the committed outputs hold)
    if (enc->mel_in_graph) {
        enc->mel_filters_t = vt_new_tensor_2d(ctx, VT_TYPE_F32, WHISPER_AUDIO_N_BINS, hp.n_mels);
        vt_set_weight(enc->mel_filters_t);
        vt_set_name(enc->mel_filters_t, "mel_filters");
    }
    // the projector's: the rows of its type that the model has (load checked which)
    for (const wa_proj_desc & t : WA_PROJ_TENSORS) {
        const gguf_tensor_info * src = t.type == hp.projector ? model->find(t.name) : nullptr;
        if (!src) continue;
        int64_t ne[3];
        vt_tensor * dst = enc->proj.*t.dst = vt_new_tensor(ctx, t.matrix ? mt : VT_TYPE_F32, wa_proj_shape(hp, t, ne), ne);
        vt_set_weight(dst);
        vt_set_name(dst, "%s", t.name);
        proj.emplace_back(dst, src);
    }
}

static whisper_audio_encoder * encoder_init(const whisper_audio_model * model, whisper_audio_encoder_params params) {
    if (!model) { wa_set_error("whisper_audio_encoder_init: no model"); return nullptr; }
    const whisper_audio_hparams & hp = model->hparams;
    if (!encoder_check_params(hp, params)) return nullptr;

    std::unique_ptr<whisper_audio_encoder, void (*)(whisper_audio_encoder *)> owner(new whisper_audio_encoder,
                                                                                  whisper_audio_encoder_free);
    whisper_audio_encoder * enc = owner.get();
    enc->hparams = hp;
    enc->mel_filters.assign(model->mel_filters, model->mel_filters + (size_t)hp.n_mels * WHISPER_AUDIO_N_BINS);
    enc->params = params;
    enc->params.n_threads = wa_n_threads(params.n_threads);
    if (!encoder_backend_init(enc)) return nullptr;
    std::vector<std::pair<vt_tensor *, const gguf_tensor_info *>> proj;
    encoder_make_weights(enc, model, proj);
    if (!vt_backend_alloc_weights(enc->backend, enc->wctx)) {
        wa_set_error("allocating weights on %s: %s", vt_backend_name(enc->backend), vt_last_error());
        return nullptr;
    }
    if (!upload_weights(enc, model)) return nullptr;
    if (enc->mel_in_graph && !vt_backend_set_tensor(enc->backend, enc->mel_filters_t, enc->mel_filters.data(), VT_TYPE_F32)) {
        wa_set_error("uploading mel_filters: %s", vt_last_error());
        return nullptr;
    }
    for (auto & t : proj) {
        if (!vt_backend_set_tensor(enc->backend, t.first, t.second->data, (vt_type)t.second->type)) {
            wa_set_error("uploading %s: %s", t.first->name, vt_last_error());
            return nullptr;
        }
    }
    return owner.release();
}

whisper_audio_encoder * whisper_audio_encoder_init(const whisper_audio_model * model, whisper_audio_encoder_params params) {
    return wa_catch(__func__, (whisper_audio_encoder *)nullptr, [&] { return encoder_init(model, params); });
}

void whisper_audio_encoder_free(whisper_audio_encoder * enc) {
    if (!enc) return;
    if (enc->busy) {       // a pipeline owns it, or a call runs: freeing it would pull the backend from under them
        wa_set_error("whisper_audio_encoder_free: the encoder is in use (by a pipeline, or a call running on another "
                     "thread); free the pipeline first: the encoder was not freed");
        return;
    }
    for (auto & kv : enc->graphs) {
        vt_graph_free(kv.second.graph);
        vt_free(kv.second.ctx);
    }
    for (auto & kv : enc->step_graphs) {
        vt_graph_free(kv.second.graph);
        vt_free(kv.second.ctx);
    }
    vt_backend_free(enc->backend);
    vt_free(enc->wctx);
    delete enc;
}

const char * whisper_audio_encoder_backend(const whisper_audio_encoder * enc) {
    if (!enc) { wa_set_error("%s: no encoder", __func__); return nullptr; }
    return vt_backend_name(enc->backend);
}

const char * whisper_audio_encoder_dtype(const whisper_audio_encoder * enc) {
    if (!enc) { wa_set_error("%s: no encoder", __func__); return nullptr; }
    if (strcmp(vt_backend_name(enc->backend), "cpu") == 0) return vt_type_name(vt_backend_gemm_type(enc->backend));
    return enc->params.dtype == WHISPER_AUDIO_DTYPE_FP8 ? "fp8" : vt_type_name(vt_backend_compute_type(enc->backend));
}

const char * whisper_audio_cpu_bf16_isa(void) {
    const char * isa = vt_cpu_bf16_isa();
    if (!isa) wa_set_error("%s", vt_last_error());
    return isa;
}

int whisper_audio_encoder_n_threads(const whisper_audio_encoder * enc) {
    if (!enc) { wa_set_error("%s: no encoder", __func__); return 0; }
    return enc->params.n_threads;
}

size_t whisper_audio_encoder_memory(const whisper_audio_encoder * enc) {
    if (!enc) { wa_set_error("%s: no encoder", __func__); return 0; }
    return vt_backend_allocated_bytes(enc->backend);
}

whisper_audio_timings whisper_audio_encoder_timings(const whisper_audio_encoder * enc) {
    if (!enc) { wa_set_error("%s: no encoder", __func__); return whisper_audio_timings{}; }
    return enc->timings;
}

void whisper_audio_encoder_reset_timings(whisper_audio_encoder * enc) {
    if (!enc) { wa_set_error("%s: no encoder", __func__); return; }
    enc->timings = whisper_audio_timings{};
}

size_t whisper_audio_n_windows(size_t n_samples) {   // ceil without n + 479999, which wraps near SIZE_MAX
    return std::max<size_t>(1, n_samples / WHISPER_AUDIO_N_SAMPLES + (n_samples % WHISPER_AUDIO_N_SAMPLES != 0));
}

// conv2 has stride 2 over frames of 160 samples: a position covers 320 samples, and the
// last, partly covered one counts (transformers' attention mask rounds the same way).
int whisper_audio_n_positions(size_t n_samples) {
    const size_t n = std::min<size_t>(n_samples, WHISPER_AUDIO_N_SAMPLES);
    return (int)(n / 320 + (n % 320 != 0));
}

size_t whisper_audio_n_positions_total(size_t n_samples) {
    const size_t full = n_samples / WHISPER_AUDIO_N_SAMPLES;
    return full * (WHISPER_AUDIO_N_SAMPLES / 320) + (size_t)whisper_audio_n_positions(n_samples % WHISPER_AUDIO_N_SAMPLES);
}

bool whisper_audio_pool_mean(const float * emb, int n_pos, int n_state, size_t n_samples, float * out) {
    if (!emb || !out || n_pos < 1 || n_state < 1) {
        wa_set_error("%s: %s", __func__, !emb || !out ? "NULL emb or out" : "n_pos and n_state must be positive");
        return false;
    }
    const int n = std::max(1, std::min(n_pos, whisper_audio_n_positions(n_samples)));
    std::fill(out, out + n_state, 0.0f);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < n_state; c++) out[c] += emb[(size_t)t * n_state + c];
    for (int c = 0; c < n_state; c++) out[c] /= n;
    return true;
}

// One call at a time on an encoder: a second thread's call fails instead of racing it.
struct wa_encoder_lock {
    whisper_audio_encoder * enc;
    bool held;
    wa_encoder_lock(whisper_audio_encoder * e, const char * func) : enc(e), held(!e->busy.exchange(true)) {
        if (!held) wa_set_error("%s: the encoder is busy with a call from another thread (one call at a time)", func);
    }
    ~wa_encoder_lock() { if (held) enc->busy = false; }
};

// What a graph computes: the encoder's rows (windows), a tower's tokens, (from PCM) the
// log-mel's maxima alone (the first pass over an input that a tower takes one log-mel of), or
// (from mel) every hidden state (whisper_audio_encode_mel_hidden_states).
enum wa_graph_kind { WA_GRAPH_ROWS, WA_GRAPH_TOKENS, WA_GRAPH_MEL_MAX, WA_GRAPH_STATES };

// The batch a pipeline's short batch of n padded windows runs as where the backend replays
// captured graphs: the next power of two (at most cap), so that a lone window does not pay for
// a whole batch and at most log2(max_batch) more graphs are kept.
static int wa_graph_batch(int n, int cap) {
    int g = 1;
    while (g < n) g *= 2;
    return std::min(g, cap);
}

// The graph for a batch of n windows of n_frames each, built and allocated on first use:
// from mel, or with from_pcm (where the backend makes the log-mel) from PCM rows. Only the
// batches of padded windows (full, or from PCM of wa_graph_batch's sizes) and one other shape
// are kept, so memory stays bounded.
static wa_graph * graph_for_batch(whisper_audio_encoder * enc, int n, int n_frames, bool from_pcm = false,
                                  wa_graph_kind kind = WA_GRAPH_ROWS) {
    const std::tuple<int, int, bool, int> key(n, n_frames, from_pcm, kind);
    auto it = enc->graphs.find(key);
    if (it != enc->graphs.end()) return &it->second;
    const int full = wa_full_frames(wa_tower_of(enc->hparams), enc->hparams);   // a whole window's (Step-Audio 2: 2502)
    for (auto i = enc->graphs.begin(); i != enc->graphs.end();) {
        const int gn = std::get<0>(i->first), gf = std::get<1>(i->first);
        const bool ladder = std::get<2>(i->first) && (gn & (gn - 1)) == 0;
        if ((gn != enc->params.max_batch && !ladder) || (gf != WHISPER_AUDIO_N_FRAMES && gf != full)) {
            vt_graph_free(i->second.graph);
            vt_free(i->second.ctx);
            i = enc->graphs.erase(i);
        } else {
            ++i;
        }
    }
    // owned by these until the map holds them, so that nothing leaks if something throws
    const whisper_audio_hparams & hp = enc->hparams;
    const wa_tower * tower = kind == WA_GRAPH_TOKENS ? wa_tower_of(hp) : nullptr;
    VT_ASSERT(kind != WA_GRAPH_TOKENS || tower);
    VT_ASSERT(kind != WA_GRAPH_MEL_MAX || from_pcm);
    VT_ASSERT(kind != WA_GRAPH_STATES || !from_pcm);
    std::unique_ptr<vt_context, void (*)(vt_context *)> ctx(vt_init(48 + 16 * hp.n_layer), vt_free);
    wa_graph g;
    vt_tensor * mel = nullptr, * out = nullptr;
    if (from_pcm) {     // the windows' log-mel, the first n_frames frames kept
        g.in = vt_new_tensor_2d(ctx.get(), VT_TYPE_F32, WA_MEL_ROW, n);
        vt_set_name(g.in, "pcm");
        vt_set_input(g.in);
        g.mel_params = vt_new_tensor_2d(ctx.get(), VT_TYPE_F32, 2, n);
        vt_set_name(g.mel_params, "mel_params");
        vt_set_input(g.mel_params);
        if (kind == WA_GRAPH_MEL_MAX) {
            out = vt_log_mel_max(ctx.get(), g.in, enc->mel_filters_t, g.mel_params, &WA_MEL_SHAPE);
        } else {
            mel = vt_log_mel(ctx.get(), g.in, enc->mel_filters_t, g.mel_params, &WA_MEL_SHAPE);
            vt_set_name(mel, "mel");
            if (n_frames < WHISPER_AUDIO_N_FRAMES)
                mel = vt_view_3d(ctx.get(), mel, n_frames, hp.n_mels, n, mel->nb[1], mel->nb[2], 0);
        }
    } else {
        g.in = mel = vt_new_tensor_3d(ctx.get(), VT_TYPE_F32, n_frames, hp.n_mels, n);
        vt_set_name(g.in, "mel");
        vt_set_input(g.in);
    }
    if (tower && tower->masked) {
        g.kv_len = vt_new_tensor_1d(ctx.get(), VT_TYPE_F32, n);
        vt_set_name(g.kv_len, "kv_len");
        vt_set_input(g.kv_len);
    }
    if (tower && (hp.n_chunk || tower->tail_by_frames) && !out) {
        g.frames = vt_new_tensor_1d(ctx.get(), VT_TYPE_F32, n);
        vt_set_name(g.frames, "frames");
        vt_set_input(g.frames);
    }
    if (tower && tower->time_rope && enc->params.projector && !out) {   // the rotation is the projector's side
        g.window = vt_new_tensor_1d(ctx.get(), VT_TYPE_F32, n);
        vt_set_name(g.window, "window");
        vt_set_input(g.window);
    }
    if (!out) out = whisper_audio_build_encoder(enc, ctx.get(), mel, g.kv_len, g.frames, tower, g.window,
                                                kind == WA_GRAPH_STATES ? &g.states : nullptr);
    std::unique_ptr<vt_graph, void (*)(vt_graph *)> graph(
        g.states.empty() ? vt_graph_build(ctx.get(), &out, 1) : vt_graph_build(ctx.get(), g.states.data(), (int)g.states.size()),
        vt_graph_free);
    // the full batches of padded windows run again and again: worth timing their GEMMs; another
    // shape (an unpadded length, a short batch) may run once, and timing costs more than it saves
    vt_graph_set_tune(graph.get(), n == enc->params.max_batch && (n_frames == WHISPER_AUDIO_N_FRAMES || n_frames == full));
    if (!vt_backend_alloc_graph(enc->backend, graph.get())) {
        wa_set_error("allocating the encoder graph (batch %d, %d frames, %.1f MiB) on %s: %s", n, n_frames,
                     vt_graph_arena_size(graph.get()) / 1048576.0, vt_backend_name(enc->backend), vt_last_error());
        return nullptr;
    }
    g.out = out;
    g.ctx = ctx.release();
    g.graph = graph.release();
    return &(enc->graphs[key] = g);
}

// states: every hidden state (WA_GRAPH_STATES), out [n_layer + 1, n_windows, n_frames / 2, d];
// else the encoder's output, out [n_windows, n_frames / 2, d].
static bool encode_mel_frames(whisper_audio_encoder * enc, const float * mel, int n_windows, int n_frames, float * out,
                              bool states = false) {
    const whisper_audio_hparams & hp = enc->hparams;
    if (hp.n_conv) {                       // the AuT's positions are not Whisper's windows' n_frames / 2
        wa_set_error("%s's tower gives its tokens alone: whisper_audio_encode_mel_tokens (or the pipeline's tokens)",
                     wa_projector_gguf(hp.projector));
        return false;
    }
    if (hp.n_window) {                     // a causal encoder over a whole input, not 30 s windows
        wa_set_error("%s's tower gives its tokens alone: whisper_audio_encode_tokens (or the pipeline's tokens)",
                     wa_projector_gguf(hp.projector));
        return false;
    }
    if (n_frames < 2 || n_frames > WHISPER_AUDIO_N_FRAMES || n_frames % 2) {
        wa_set_error("%d mel frames: the encoder takes an even count from 2 to %d", n_frames, WHISPER_AUDIO_N_FRAMES);
        return false;
    }
    if (n_windows < 1) { wa_set_error("%d windows to encode", n_windows); return false; }
    const size_t mel_win = (size_t)hp.n_mels * n_frames;
    const size_t out_win = (size_t)(n_frames / 2) * hp.n_state;
    const size_t out_state = (size_t)n_windows * out_win;             // one hidden state of every window
    whisper_audio_timings & tm = enc->timings;                        // added to, batch by batch
    for (int w0 = 0; w0 < n_windows; w0 += enc->params.max_batch) {
        const int n = std::min(enc->params.max_batch, n_windows - w0);
        const auto t0 = std::chrono::steady_clock::now();
        wa_graph * g = graph_for_batch(enc, n, n_frames, false, states ? WA_GRAPH_STATES : WA_GRAPH_ROWS);
        if (!g) return false;
        VT_ASSERT(!states || g->states.size() == (size_t)hp.n_layer + 1);
        auto t = std::chrono::steady_clock::now();
        bool ok = vt_backend_set_tensor(enc->backend, g->in, mel + w0 * mel_win, VT_TYPE_F32);
        tm.upload_ms += ms_since(t);
        t = std::chrono::steady_clock::now();
        ok = ok && vt_backend_compute(enc->backend, g->graph);
        tm.compute_ms += ms_since(t);
        t = std::chrono::steady_clock::now();
        if (states) {
            for (size_t i = 0; ok && i < g->states.size(); i++)
                ok = vt_backend_get_tensor_f32(enc->backend, g->states[i], out + i * out_state + w0 * out_win);
        } else {
            ok = ok && vt_backend_get_tensor_f32(enc->backend, g->out, out + w0 * out_win);
        }
        tm.download_ms += ms_since(t);
        tm.encode_ms += ms_since(t0);
        if (!ok) {
            wa_set_error("encoding on %s: %s", vt_backend_name(enc->backend), vt_last_error());
            return false;
        }
        tm.n_batches++;
        tm.n_windows += n;
    }
    return true;
}

// encode_mel and encode_mel_frames: the checks, the lock and the timing, named by func.
static bool encode_mel_call(const char * func, whisper_audio_encoder * enc, const float * mel, int n_windows, int n_frames,
                            float * out) {
    if (!enc || !mel || !out) { wa_set_error("%s: NULL %s", func, !enc ? "encoder" : !mel ? "mel" : "out"); return false; }
    wa_encoder_lock lock(enc, func);
    if (!lock.held) return false;
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = wa_catch(func, false, [&] { return encode_mel_frames(enc, mel, n_windows, n_frames, out); });
    enc->timings.wall_ms += ms_since(t0);
    return ok;
}

bool whisper_audio_encode_mel_frames(whisper_audio_encoder * enc, const float * mel, int n_windows, int n_frames, float * out) {
    return encode_mel_call(__func__, enc, mel, n_windows, n_frames, out);
}

bool whisper_audio_encode_mel(whisper_audio_encoder * enc, const float * mel, int n_windows, float * out) {
    return encode_mel_call(__func__, enc, mel, n_windows, WHISPER_AUDIO_N_FRAMES, out);
}

bool whisper_audio_encode_mel_hidden_states(whisper_audio_encoder * enc, const float * mel, int n_windows, int n_frames,
                                            float * out) {
    if (!enc || !mel || !out) { wa_set_error("%s: NULL %s", __func__, !enc ? "encoder" : !mel ? "mel" : "out"); return false; }
    if (enc->params.output_layer != -1 || !enc->params.final_ln) {
        wa_set_error("%s: the encoder was made for %s; every hidden state comes from an encoder of the last layer "
                     "(output_layer -1, final_ln true)", __func__,
                     enc->params.output_layer != -1 ? "one output layer (output_layer set)" : "no final LayerNorm (final_ln false)");
        return false;
    }
    wa_encoder_lock lock(enc, __func__);
    if (!lock.held) return false;
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = wa_catch(__func__, false, [&] { return encode_mel_frames(enc, mel, n_windows, n_frames, out, true); });
    enc->timings.wall_ms += ms_since(t0);
    return ok;
}

// =====================================================================================
// pipeline: audio in as it comes, rows out in input order
// =====================================================================================
//
// The caller's thread cuts the audio into windows and the windows into batches of max_batch
// (or of the evened batch when the caller knows the windows ahead: whisper_audio_batch_for_windows), each window a row of WA_MEL_ROW samples (its 30 s and the 200 samples the log-mel's edge
// frames read on each side). A Whisper model's windows (and Qwen2-Audio's one) are 30 s each,
// filled as the audio comes; a tower that takes one log-mel over its whole input (Voxtral,
// Ultravox) holds the input until it ends, then cuts its chunks; when there are several, a
// first pass on the device finds the log-mel's max over all of them (the dynamic-range clamp
// is the input's). A batch holds windows of one length (an unpadded window: its own length).
//
// One worker thread per encoder takes batches in turn. On CUDA it submits the PCM: upload,
// log-mel and forward, download (as f32 or f16) overlap on the device's streams, two batches in
// flight. On the CPU it makes the log-mel on the encoder's threads, then runs the forward. Then
// it pools. The caller's thread hands the rows to on_rows in input order whenever it is inside
// push, end_input or finish. Batches are cut the same way however many encoders there are, so
// every encoder count gives the same rows.
//
// Streaming (params.stream) is the same path with batches of one window: a window goes to the
// workers when its last sample is pushed, and its rows come out in the next push or poll. A
// window's log-mel reads its own samples alone (its edges mirrored within it: log_mel_row over a
// signal that starts at the window), and a CPU window's rows do not depend on the batch it runs in,
// so they are the whole input's, bit for bit. Towers that hold their input (whole_signal) are
// refused: pipeline_can_stream.

struct wa_window {
    int64_t input, window;
    size_t samples;                      // of audio in it
    int valid = WHISPER_AUDIO_N_FRAMES;  // mel frames that hold the signal (vt_log_mel's params)
    float clamp = NAN;                   // the log-mel clamp's max: NaN, the window's own
    int positions = 0;                   // that hold audio (the mask of a masked tower)
    int audio_frames = 0;                // the mel frames that hold audio (a chunked tower's conv stem)
    int attend = 0;                      // the keys attended when not `positions` (tail_by_frames: the mel frames)
    int rows = 0;                        // a tower's rows from it
};

struct wa_batch {
    int64_t id = 0;                      // in the order the batches were cut; -1 for a mel-max batch
    int n = 0;                           // windows
    int n_frames = WHISPER_AUDIO_N_FRAMES;
    int cap = 0;                         // windows the buffers hold: max_batch, or fewer for less work
    bool mel_max = false;                // the first pass over a held input: out holds each window's mel max
    std::vector<wa_window> wins;
    float * pcm = nullptr;               // [cap, WA_MEL_ROW], then mel_params [cap, 2] and kv_len [cap]:
    float * mel_params = nullptr;        // one block of host memory of the first encoder's backend
    float * kv_len = nullptr;
    float * frames = nullptr;            // [cap] after kv_len: the mel frames holding audio (a chunked tower's)
    float * window = nullptr;            // [cap] after frames: each window's index in its input (a time_rope tower's)
    void * out = nullptr;                // [cap, out_win]: f32, or f16 when rows are f16 and not pooled
    std::vector<float> pooled;           // pool: [cap, d]
    std::vector<uint16_t> pooled_f16;
};

// A whole-signal tower's input as it comes: grown with realloc, which glibc does for large
// blocks by remapping pages, not copying them (a std::vector's doubling copied and faulted in
// twice the bytes: an hour took 250-550 ms against realloc's 110, Xeon, 2 cores).
struct wa_held_pcm {
    float * data = nullptr;
    size_t size = 0, cap = 0;
    void append(const float * x, size_t n) {
        if (size + n > cap) {
            const size_t want = std::max(size + n, std::max<size_t>(cap * 2, (size_t)1 << 20));
            float * grown = (float *)realloc(data, want * sizeof(float));
            if (!grown) throw std::bad_alloc();
            data = grown;
            cap = want;
        }
        memcpy(data + size, x, n * sizeof(float));
        size += n;
    }
    ~wa_held_pcm() { free(data); }
};

// What an encoder of a pipeline runs, for a caller that hands short batches over only when an
// encoder is about to run out of work (a server: whisper_audio_pipeline_busy_ms). Under the
// pipeline's mutex.
struct wa_encoder_load {
    using clock = std::chrono::steady_clock;
    struct run {
        clock::time_point submitted;
        double expected_ms;
        std::pair<int, int> shape;       // (windows run, mel frames)
    };
    std::deque<run> running;             // submitted and not yet landed, oldest first
    clock::time_point last_landed;       // when the last batch landed (the next one starts then at the earliest)
    std::map<std::pair<int, int>, double> ms;   // a batch's time by shape: a moving average
    double ms_per_frame = 0;             // a window-frame's time, the latest batch's: for a shape not yet run

    double expect(std::pair<int, int> shape) const {
        auto it = ms.find(shape);
        return it != ms.end() ? it->second : ms_per_frame * shape.first * shape.second;
    }
    void landed(clock::time_point t) {
        const run r = running.front();
        running.pop_front();
        const clock::time_point start = std::max(r.submitted, last_landed);
        last_landed = t;
        const double took = std::chrono::duration<double, std::milli>(t - start).count();
        auto it = ms.find(r.shape);
        if (it == ms.end()) ms[r.shape] = took;
        else it->second += 0.25 * (took - it->second);
        if (r.shape.second > 0) ms_per_frame = took / ((double)r.shape.first * r.shape.second);
    }
    // milliseconds until every batch submitted has landed, as expected
    double busy_ms(clock::time_point now) const {
        double left = 0;
        clock::time_point start = last_landed;
        for (const run & r : running) {
            if (&r == &running.front()) {
                start = std::max(r.submitted, start);
                left = std::max(0.0, r.expected_ms - std::chrono::duration<double, std::milli>(now - start).count());
            } else {
                left += r.expected_ms;
            }
        }
        return left;
    }
};

struct whisper_audio_pipeline {
    std::vector<whisper_audio_encoder *> encs;
    whisper_audio_pipeline_params params;
    const wa_tower * tower = nullptr;    // the rows are this tower's tokens (else Whisper windows)
    bool projector = true;               // ... through its projector
    int max_batch = 1, width = 0, max_rows = 0;   // a row's floats; rows a window gives, at most
    int batch = 1;                       // windows a batch holds: max_batch, or whisper_audio_batch_for_windows's
    bool out_f16 = false;                // the download's type (f16 rows, not pooled)
    vt_backend * host = nullptr;         // allocates the batches' host buffers (pinned on CUDA)
    std::vector<std::unique_ptr<wa_batch>> batches;   // two per encoder (in flight) and one being filled

    std::mutex mu;
    std::condition_variable cv;
    std::deque<wa_batch *> free_list;    // ready to be filled
    std::deque<wa_batch *> todo;         // cut, waiting for a worker (mel-max batches first)
    std::map<int64_t, wa_batch *> done;  // encoded, waiting for on_rows
    std::deque<wa_batch *> maxima;       // mel-max batches done, waiting to be read
    int64_t n_cut = 0, n_emitted = 0;
    int n_max_pending = 0;               // mel-max batches cut and not yet read
    float held_max = -INFINITY;          // their largest value
    bool closing = false;                // workers leave once todo is empty
    std::string error;                   // the first failure; every later call fails with it
    bool refused = false;                // the current call was refused (a caller's mistake): the pipeline goes on
    bool in_on_rows = false;             // the caller's thread is inside on_rows
    std::vector<std::thread> workers;
    std::vector<wa_encoder_load> load;   // by encoder: its batches on the device and their times
    int idle_workers = 0;                // waiting for a batch with none in flight (the next one is theirs)

    // the caller's side
    wa_batch * cur = nullptr;            // being filled: window cur->n takes the samples
    wa_batch * cur_max = nullptr;        // the mel-max batch being filled (a held input's first pass)
    int64_t max_cut = 0;                 // chunks of the held input whose max is cut
    size_t in_window = 0;                // samples in window cur->n
    int64_t input = 0, window = 0;
    size_t input_samples = 0;            // of the current input, pushed (held or windowed or not used)
    wa_held_pcm held;                    // a whole-signal tower's current input (its capacity kept for the next)
    wa_causal * causal = nullptr;        // a causal tower's current input (Voxtral Realtime), run on encs[0] as it comes
    int causal_step = RT_MAX_STEP;       // the mel frames its steps wait for
    std::vector<float> causal_rows;      // the rows its last call completed
    size_t causal_samples = 0;           // the input's samples pushed since its last rows went (their record's)
    struct causal_held { wa_causal * s; int64_t input; size_t samples; };
    std::vector<causal_held> causal_batch;   // ended inputs of one step each, of causal_frames frames, to run as one batch
    int causal_frames = 0;
    std::set<int64_t> dropped;           // inputs dropped after some of their windows were cut
    std::map<int64_t, int64_t> open;     // per input, its windows cut and not yet handed out (or skipped)
};

// The most samples of an input a whole-signal tower holds: 4 hours (922 MB of f32).
static const size_t WA_MAX_HELD_SAMPLES = (size_t)4 * 3600 * WHISPER_AUDIO_SAMPLE_RATE;

static void pipeline_fail(whisper_audio_pipeline * p, const std::string & msg) {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->error.empty()) p->error = msg;
    p->cv.notify_all();
}

// Pools (and converts) an encoded batch on the encoder's threads.
static void pipeline_finish_rows(whisper_audio_pipeline * p, whisper_audio_encoder * enc, wa_batch * b) {
    if (p->params.pool != WHISPER_AUDIO_POOL_MEAN || b->mel_max) return;
    const int n_pos = b->n_frames / 2, d = p->width;
    wa_parallel(b->n, enc->params.n_threads, [&](int i) {
        whisper_audio_pool_mean((const float *)b->out + (size_t)i * n_pos * d, n_pos, d, b->wins[i].samples,
                                b->pooled.data() + (size_t)i * d);
    });
    if (p->params.f16) vt_convert(b->pooled_f16.data(), VT_TYPE_F16, b->pooled.data(), VT_TYPE_F32, (size_t)b->n * d);
}

// The CPU's log-mel of a batch on the encoder's threads: mel [n, n_mels, n_frames], or with
// mel_max each window's max into b->out.
static void pipeline_cpu_mel(whisper_audio_encoder * enc, wa_batch * b, std::vector<float> & mel) {
    const whisper_audio_hparams & hp = enc->hparams;
    const size_t mel_win = (size_t)hp.n_mels * WHISPER_AUDIO_N_FRAMES;
    mel.resize((size_t)b->n * mel_win);
    wa_parallel(b->n, enc->params.n_threads, [&](int i) {
        const wa_window & w = b->wins[i];
        const float * row = b->pcm + (size_t)i * WA_MEL_ROW;
        float * o = mel.data() + i * mel_win;
        if (b->mel_max) ((float *)b->out)[i] = log_mel_frames(enc->mel_filters.data(), hp.n_mels, row, w.valid, o, WHISPER_AUDIO_N_FRAMES);
        else log_mel_from_row(enc->mel_filters.data(), hp.n_mels, row, w.valid, w.clamp, o);
    });
    for (int i = 0; !b->mel_max && b->n_frames < WHISPER_AUDIO_N_FRAMES && i < b->n; i++)   // the first frames, packed
        for (int m = 0; m < hp.n_mels; m++)
            memmove(mel.data() + ((size_t)i * hp.n_mels + m) * b->n_frames, mel.data() + i * mel_win + (size_t)m * WHISPER_AUDIO_N_FRAMES,
                    b->n_frames * sizeof(float));
}

// The windows batch b runs as: on CUDA a short batch of padded windows runs as the smallest
// captured graph that holds it (zero windows after it: wa_graph_batch); the CPU's time follows
// the windows.
static int pipeline_run_windows(const whisper_audio_pipeline * p, const whisper_audio_encoder * enc, const wa_batch * b) {
    const bool whole = b->n_frames == WHISPER_AUDIO_N_FRAMES || b->n_frames == wa_full_frames(p->tower, enc->hparams);
    return enc->mel_in_graph && whole ? wa_graph_batch(b->n, b->cap) : b->n;
}

// What a batch's time depends on: the windows it runs, and their mel frames (0 for the first
// pass over a held input, which computes the log-mel alone).
static std::pair<int, int> pipeline_batch_shape(const whisper_audio_pipeline * p, const whisper_audio_encoder * enc,
                                                const wa_batch * b) {
    return {pipeline_run_windows(p, enc, b), b->mel_max ? 0 : b->n_frames};
}

// Submits batch b to the encoder's backend in slot `slot` (on the CPU: computes it).
static bool pipeline_submit(whisper_audio_pipeline * p, whisper_audio_encoder * enc, wa_batch * b, int slot,
                            std::vector<float> & mel) {
    const bool from_pcm = enc->mel_in_graph;
    const int n_run = pipeline_run_windows(p, enc, b);
    for (int i = b->n; i < n_run; i++) {
        std::fill(b->pcm + (size_t)i * WA_MEL_ROW, b->pcm + (size_t)(i + 1) * WA_MEL_ROW, 0.0f);
        b->mel_params[2 * i] = WHISPER_AUDIO_N_FRAMES;
        b->mel_params[2 * i + 1] = NAN;
        b->kv_len[i] = 1;
        b->frames[i] = 1;
        b->window[i] = 0;
    }
    if (!from_pcm) {
        const auto t = std::chrono::steady_clock::now();
        pipeline_cpu_mel(enc, b, mel);
        enc->timings.mel_ms += ms_since(t);
        if (b->mel_max) return true;
    }
    const wa_graph_kind kind = b->mel_max ? WA_GRAPH_MEL_MAX : p->tower ? WA_GRAPH_TOKENS : WA_GRAPH_ROWS;
    wa_graph * g = graph_for_batch(enc, n_run, b->n_frames, from_pcm, kind);
    if (!g) { pipeline_fail(p, whisper_audio_last_error()); return false; }
    vt_tensor * in[VT_MAX_SUBMIT_INPUTS] = {g->in};   // the input, mel_params, kv_len, frames, window
    const void * in_host[VT_MAX_SUBMIT_INPUTS] = {from_pcm ? (const void *)b->pcm : (const void *)mel.data()};
    int n_in = 1;
    if (g->mel_params) { in[n_in] = g->mel_params; in_host[n_in++] = b->mel_params; }
    if (g->kv_len) { in[n_in] = g->kv_len; in_host[n_in++] = b->kv_len; }
    if (g->frames) { in[n_in] = g->frames; in_host[n_in++] = b->frames; }
    if (g->window) { in[n_in] = g->window; in_host[n_in++] = b->window; }
    const vt_type out_type = p->out_f16 && !b->mel_max ? VT_TYPE_F16 : VT_TYPE_F32;
    const auto t = std::chrono::steady_clock::now();
    const bool ok = vt_backend_submit(enc->backend, g->graph, n_in, in, in_host, g->out, b->out, out_type, slot);
    enc->timings.encode_ms += ms_since(t);
    if (!ok) {
        pipeline_fail(p, std::string("encoding on ") + vt_backend_name(enc->backend) + ": " + vt_last_error());
        return false;
    }
    return true;
}

static void pipeline_worker(whisper_audio_pipeline * p, int k) {
    whisper_audio_encoder * enc = p->encs[k];
    wa_encoder_load & load = p->load[k];
    std::vector<float> mel;                              // CPU: the batch's log-mel
    wa_batch * in_flight[2] = {nullptr, nullptr};        // by slot
    int slot = 0;
    // the CPU backend computes a batch inside submit: its rows are landed at once rather than
    // after the next batch's compute
    const bool runs_at_once = !enc->mel_in_graph;
    // waits for the batch in slot s, pools it and hands it back
    auto land = [&](int s) {
        wa_batch * b = in_flight[s];
        if (!b) return true;
        in_flight[s] = nullptr;
        const auto t = std::chrono::steady_clock::now();
        if (!vt_backend_wait(enc->backend, s)) {
            pipeline_fail(p, std::string("encoding on ") + vt_backend_name(enc->backend) + ": " + vt_last_error());
            return false;
        }
        {
            std::lock_guard<std::mutex> lock(p->mu);
            load.landed(std::chrono::steady_clock::now());
        }
        pipeline_finish_rows(p, enc, b);
        enc->timings.encode_ms += ms_since(t);
        if (!b->mel_max) {
            enc->timings.n_batches++;
            enc->timings.n_windows += b->n;
        }
        std::lock_guard<std::mutex> lock(p->mu);
        if (b->mel_max) p->maxima.push_back(b);
        else p->done[b->id] = b;
        p->cv.notify_all();
        return true;
    };
    for (;;) {
        wa_batch * b = nullptr;
        bool idle;
        {
            std::lock_guard<std::mutex> lock(p->mu);
            idle = p->todo.empty() && p->error.empty();
        }
        if (idle && (in_flight[0] || in_flight[1])) {
            // nothing queued behind the running batch: land it once it finishes, unless a batch
            // comes first that no idle encoder takes, which is submitted to run after it (its
            // upload overlapping this one)
            const int s = in_flight[0] ? 0 : 1;
            bool came = false;
            while (!came && !vt_backend_ready(enc->backend, s)) {
                std::unique_lock<std::mutex> lock(p->mu);
                came = p->cv.wait_for(lock, std::chrono::microseconds(200),
                                      [&] { return (!p->todo.empty() && p->idle_workers == 0) || !p->error.empty(); });
            }
            if (!came && !land(s)) break;
            continue;
        }
        {
            std::unique_lock<std::mutex> lock(p->mu);
            const bool none_in_flight = !in_flight[0] && !in_flight[1];
            p->idle_workers += none_in_flight;
            p->cv.wait(lock, [&] { return !p->todo.empty() || p->closing || !p->error.empty(); });
            p->idle_workers -= none_in_flight;
            if (!p->error.empty() || p->todo.empty()) break;
            b = p->todo.front();
            p->todo.pop_front();
            const std::pair<int, int> shape = pipeline_batch_shape(p, enc, b);
            load.running.push_back({std::chrono::steady_clock::now(), load.expect(shape), shape});
        }
        bool ok;
        try {
            ok = pipeline_submit(p, enc, b, slot, mel);
        } catch (const std::exception & e) {
            pipeline_fail(p, std::string("pipeline worker: ") + e.what());
            ok = false;
        }
        if (!ok) break;
        in_flight[slot] = b;
        if (runs_at_once && !land(slot)) break;
        slot ^= 1;
        if (!land(slot)) break;          // the older batch, while this one runs
    }
    // the device may still read or write the host buffers: wait for what was submitted
    for (int k = 0; k < 2; k++, slot ^= 1) {
        if (!in_flight[slot]) continue;
        bool failed;
        {
            std::lock_guard<std::mutex> lock(p->mu);
            failed = !p->error.empty();
        }
        if (!failed) { land(slot); continue; }
        vt_backend_wait(enc->backend, slot);
        in_flight[slot] = nullptr;
    }
}

static void pipeline_stop(whisper_audio_pipeline * p) {
    {
        std::lock_guard<std::mutex> lock(p->mu);
        p->closing = true;
        for (wa_batch * b : p->todo) p->free_list.push_back(b);   // nobody will take their rows
        p->todo.clear();
        p->cv.notify_all();
    }
    for (std::thread & t : p->workers) t.join();
    p->workers.clear();
}

// Hands every batch that is next in order to on_rows (and takes in the mel maxima that came
// back); with wait, blocks until one of them comes (or a failure). False once the pipeline has
// failed (the error set).
static bool pipeline_emit(whisper_audio_pipeline * p, bool wait) {
    for (;;) {
        wa_batch * b = nullptr;
        {
            std::unique_lock<std::mutex> lock(p->mu);
            if (wait) p->cv.wait(lock, [&] { return !p->error.empty() || p->done.count(p->n_emitted) || !p->maxima.empty(); });
            if (!p->error.empty()) { wa_set_error("%s", p->error.c_str()); return false; }
            for (; !p->maxima.empty(); p->maxima.pop_front(), p->n_max_pending--) {
                wa_batch * m = p->maxima.front();
                for (int i = 0; i < m->n; i++) p->held_max = std::max(p->held_max, ((const float *)m->out)[i]);
                p->free_list.push_back(m);
                wait = false;
            }
            auto it = p->done.find(p->n_emitted);
            if (it == p->done.end()) {
                if (wait) continue;
                return true;
            }
            b = it->second;
            p->done.erase(it);
        }
        const int n_pos = b->n_frames / 2, d = p->width;
        const bool pool = p->params.pool == WHISPER_AUDIO_POOL_MEAN;
        const size_t es = p->out_f16 || (pool && p->params.f16) ? 2 : 4;
        // rows a window's output holds
        const size_t win_rows = p->tower ? (size_t)p->tower->rows(p->encs[0]->hparams, b->n_frames, p->projector) : (size_t)n_pos;
        for (int i = 0; i < b->n; i++) {
            const wa_window & w = b->wins[i];
            if (--p->open[w.input] == 0) p->open.erase(w.input);
            if (!p->dropped.empty() && p->dropped.count(w.input)) continue;
            whisper_audio_rows r;
            r.input = w.input;
            r.window = w.window;
            r.samples = w.samples;
            r.audio_positions = p->tower ? w.positions : std::min(n_pos, whisper_audio_n_positions(r.samples));
            r.n_rows = p->tower ? w.rows : pool ? 1 : n_pos;
            r.n_state = d;
            r.f16 = p->params.f16;
            r.data = pool ? (r.f16 ? (const void *)(b->pooled_f16.data() + (size_t)i * d) : (const void *)(b->pooled.data() + (size_t)i * d))
                          : (const void *)((const char *)b->out + (size_t)i * win_rows * d * es);
            p->in_on_rows = true;
            const bool go_on = !p->params.on_rows || p->params.on_rows(&r, p->params.user);
            p->in_on_rows = false;
            if (!go_on) {
                pipeline_fail(p, "stopped by the rows callback");
                wa_set_error("stopped by the rows callback");
                return false;
            }
        }
        std::lock_guard<std::mutex> lock(p->mu);
        p->n_emitted++;
        p->free_list.push_back(b);
        wait = false;
    }
}

// A batch to fill; while none is free, the caller's thread hands out rows.
static wa_batch * pipeline_acquire(whisper_audio_pipeline * p) {
    for (;;) {
        if (!pipeline_emit(p, false)) return nullptr;
        {
            std::lock_guard<std::mutex> lock(p->mu);
            if (!p->free_list.empty()) {
                wa_batch * b = p->free_list.front();
                p->free_list.pop_front();
                b->n = 0;
                b->n_frames = WHISPER_AUDIO_N_FRAMES;
                b->mel_max = false;
                return b;
            }
        }
        if (!pipeline_emit(p, true)) return nullptr;
    }
}

// Hands a batch being filled (p->cur or p->cur_max) to the workers, a mel-max batch ahead of the others.
static void pipeline_dispatch(whisper_audio_pipeline * p, wa_batch *& slot) {
    wa_batch * b = slot;
    slot = nullptr;
    if (!b) return;
    std::lock_guard<std::mutex> lock(p->mu);
    if (b->n == 0) { p->free_list.push_back(b); return; }
    if (b->mel_max) {
        b->id = -1;
        p->n_max_pending++;
        p->todo.push_front(b);
    } else {
        b->id = p->n_cut++;
        p->todo.push_back(b);
    }
    p->cv.notify_all();
}

static bool pipeline_ok(whisper_audio_pipeline * p) {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->error.empty()) return true;
    wa_set_error("%s", p->error.c_str());
    return false;
}

// Makes the batch being filled one that takes a window of n_frames (frames) and has room: the
// one there, or, when it holds windows of another length, a new one (the other goes to the
// workers). A window being streamed into slot cur->n moves along.
static bool pipeline_make_room(whisper_audio_pipeline * p, int n_frames) {
    wa_batch * b = p->cur;
    if (b && (b->n == 0 || b->n_frames == n_frames)) {
        b->n_frames = n_frames;
        return true;
    }
    p->cur = nullptr;
    wa_batch * next = pipeline_acquire(p);
    if (!next) { p->cur = b; return false; }
    if (b && p->in_window > 0)
        memcpy(next->pcm + WA_MEL_CONTEXT, b->pcm + (size_t)b->n * WA_MEL_ROW + WA_MEL_CONTEXT, p->in_window * sizeof(float));
    p->cur = b;
    pipeline_dispatch(p, p->cur);
    p->cur = next;
    next->n_frames = n_frames;
    return true;
}

// Closes window b->n of the batch in slot (p->cur or p->cur_max), whose row is filled; a full batch goes.
static void pipeline_close_window(whisper_audio_pipeline * p, wa_batch *& slot, const wa_window & w) {
    wa_batch * b = slot;
    b->mel_params[2 * b->n] = (float)w.valid;
    b->mel_params[2 * b->n + 1] = w.clamp;
    b->kv_len[b->n] = (float)std::max(1, w.attend ? w.attend : w.positions);
    b->frames[b->n] = (float)std::max(1, w.audio_frames);
    b->window[b->n] = (float)w.window;
    b->wins[b->n++] = w;
    if (!b->mel_max) p->open[w.input]++;
    p->in_window = 0;
    if (b->n == b->cap) pipeline_dispatch(p, slot);
}

// WhisperFeatureExtractor.zero_mean_unit_var_norm of one clip's n samples: (x - mean) /
// sqrt(var + 1e-7), the mean and (population) variance over them (in double; numpy's in float32).
static void normalize_samples(float * x, size_t n) {
    double sum = 0.0, sum2 = 0.0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    const double mean = n ? sum / (double)n : 0.0;
    for (size_t i = 0; i < n; i++) sum2 += ((double)x[i] - mean) * ((double)x[i] - mean);
    const double scale = 1.0 / sqrt((n ? sum2 / (double)n : 0.0) + 1e-7);
    for (size_t i = 0; i < n; i++) x[i] = (float)(((double)x[i] - mean) * scale);
}

// A 30 s window of its own, its first `samples` in its row (normalised first for a tower that
// normalises): the zero padding, then the row's edges mirrored (log_mel_row for a signal of
// 480000 samples starting at 0).
static void pipeline_close_own_window(whisper_audio_pipeline * p, size_t samples) {
    float * row = p->cur->pcm + (size_t)p->cur->n * WA_MEL_ROW, * x = row + WA_MEL_CONTEXT;
    const int64_t N = WHISPER_AUDIO_N_SAMPLES;
    if (p->tower && p->tower->normalized) normalize_samples(x, samples);
    std::fill(x + samples, x + N, 0.0f);
    for (int i = 1; i <= WA_MEL_CONTEXT; i++) row[WA_MEL_CONTEXT - i] = x[i];            // x[-i] = x[i]
    for (int k = 0; k < WA_MEL_CONTEXT; k++) x[N + k] = x[N - 2 - k];                    // x[N + k] = x[2 (N - 1) - (N + k)]
    wa_window w{p->input, p->window++, samples};
    if (p->tower) {                       // a tower's window (Qwen2-Audio, Audio Flamingo 3, GLM-ASR): a frame per started hop holds audio
        const int frames = (int)((samples + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP);
        w.positions = wa_positions(p->encs[0]->hparams, frames);
        w.audio_frames = frames;
        w.rows = p->tower->rows(p->encs[0]->hparams, frames, p->projector);
        if (p->tower->tail_by_frames && w.window > 0) w.attend = std::min(frames, p->encs[0]->hparams.n_ctx);
        if (p->tower->mel_pad) {          // Step-Audio 2: its own frames (audio and zeros), keys by its rule
            w.valid = wa_padded_frames(*p->tower, samples);
            w.attend = wa_keys_of(frames, p->cur->n_frames);
        }
    }
    pipeline_close_window(p, p->cur, w);
}

// The first pass over a held input: chunk c's row (of a signal of sig_len samples, the first
// held.size() held) into the mel-max batch, its frames holding the signal `valid`.
static bool pipeline_cut_max(whisper_audio_pipeline * p, int64_t c, int valid, int64_t sig_len) {
    if (!p->cur_max) {
        if (!(p->cur_max = pipeline_acquire(p))) return false;
        p->cur_max->mel_max = true;
    }
    log_mel_row(p->held.data, p->held.size, sig_len, c * WHISPER_AUDIO_N_SAMPLES,
                p->cur_max->pcm + (size_t)p->cur_max->n * WA_MEL_ROW);
    wa_window w{p->input, c, 0};
    w.valid = valid;
    pipeline_close_window(p, p->cur_max, w);
    p->max_cut = c + 1;
    return true;
}

// A caller's mistake: refused with a message, the pipeline unchanged and usable.
static bool pipeline_refuse(whisper_audio_pipeline * p) {
    p->refused = true;
    return false;
}

// Rows of a causal tower's input (its steps in order: windows 0, 1, ...) to on_rows, on the caller's thread.
static bool pipeline_rows_causal(whisper_audio_pipeline * p, int64_t input, int64_t window, size_t samples, const std::vector<float> & rows) {
    std::vector<uint16_t> f16;
    whisper_audio_rows r;
    r.input = input;
    r.window = window;
    r.samples = samples;
    r.n_rows = (int)(rows.size() / p->width);
    r.audio_positions = p->projector ? r.n_rows * p->encs[0]->hparams.stack_factor : r.n_rows;
    r.n_state = p->width;
    r.f16 = p->params.f16;
    r.data = rows.data();
    if (r.f16) {
        f16.resize(rows.size());
        vt_convert(f16.data(), VT_TYPE_F16, rows.data(), VT_TYPE_F32, f16.size());
        r.data = f16.data();
    }
    p->in_on_rows = true;
    const bool go_on = !p->params.on_rows || p->params.on_rows(&r, p->params.user);
    p->in_on_rows = false;
    if (!go_on) {
        pipeline_fail(p, "stopped by the rows callback");
        wa_set_error("stopped by the rows callback");
        return false;
    }
    return true;
}

// The ended inputs held for a batch run as one (wa_causal_run_batch), their rows handed out in input order.
static bool pipeline_run_causal_batch(whisper_audio_pipeline * p) {
    if (p->causal_batch.empty()) return true;
    std::vector<wa_causal *> states;
    for (const auto & h : p->causal_batch) states.push_back(h.s);
    std::vector<std::vector<float>> rows(states.size());
    const bool ok = wa_causal_run_batch(states.data(), (int)states.size(), rows.data());
    if (!ok) pipeline_fail(p, whisper_audio_last_error());
    bool go_on = ok;
    for (size_t i = 0; i < states.size(); i++) {
        const auto & h = p->causal_batch[i];
        p->open.erase(h.input);
        if (go_on) go_on = pipeline_rows_causal(p, h.input, 0, h.samples, rows[i]);
        wa_causal_free(h.s);
    }
    p->causal_batch.clear();
    return go_on;
}

// A causal tower's rows that its input's last steps completed, to on_rows as one window of the
// input. The inputs held for a batch are earlier: theirs go first. Such a pipeline cuts no batches.
static bool pipeline_emit_causal(whisper_audio_pipeline * p) {
    if (p->causal_rows.empty()) return true;
    if (!pipeline_run_causal_batch(p)) return false;
    const size_t samples = p->causal_samples;
    p->causal_samples = 0;
    const bool ok = pipeline_rows_causal(p, p->input, p->window++, samples, p->causal_rows);
    p->causal_rows.clear();
    return ok;
}

// A causal tower's input: its steps run as its samples come (wa_causal), its rows handed out at once.
static bool pipeline_push_causal(whisper_audio_pipeline * p, const float * pcm, size_t n) {
    if (!p->causal) p->causal = wa_causal_begin(p->encs[0], p->causal_step);
    p->input_samples += n;
    p->causal_samples += n;
    if (!wa_causal_feed(p->causal, pcm, n, p->causal_rows)) {
        pipeline_fail(p, whisper_audio_last_error());
        return false;
    }
    return pipeline_emit_causal(p);
}

// An input of one step (at most 30 s, none run yet) is held to run with the next ones of its frames, as
// many as a batch holds; a longer one runs its last steps now.
static bool pipeline_end_causal(whisper_audio_pipeline * p) {
    const int F = p->batch > 1 ? wa_causal_close(p->causal) : 0;
    if (F > 0) {
        if (!p->causal_batch.empty() && F != p->causal_frames && !pipeline_run_causal_batch(p)) return false;
        p->causal_frames = F;
        p->causal_batch.push_back({p->causal, p->input, p->causal_samples});
        p->open[p->input] = 1;
        p->causal = nullptr;
        p->causal_samples = 0;
        return (int)p->causal_batch.size() < p->batch || pipeline_run_causal_batch(p);
    }
    const bool ok = wa_causal_end(p->causal, p->causal_rows);
    wa_causal_free(p->causal);
    p->causal = nullptr;
    if (!ok) { pipeline_fail(p, whisper_audio_last_error()); return false; }
    if (p->causal_rows.empty()) return pipeline_run_causal_batch(p);
    return pipeline_emit_causal(p);
}

static bool pipeline_push(whisper_audio_pipeline * p, const float * pcm, size_t n) {
    if (!pipeline_ok(p)) return false;
    if (!wa_mel_check_pcm("whisper_audio_pipeline_push", pcm, n, p->input_samples)) return pipeline_refuse(p);
    if (p->tower && p->tower->causal) return pipeline_push_causal(p, pcm, n);
    if (p->tower && p->tower->whole_signal) {       // held until the input ends
        if (n > WA_MAX_HELD_SAMPLES - p->held.size) {
            wa_set_error("whisper_audio_pipeline_push: input %lld is longer than %.0f hours; %s takes one log-mel over "
                         "a whole input, and the pipeline holds at most that much of one: split it",
                         (long long)p->input, WA_MAX_HELD_SAMPLES / 3600.0 / WHISPER_AUDIO_SAMPLE_RATE, wa_projector_gguf(p->tower->type));
            return pipeline_refuse(p);
        }
        p->held.append(pcm, n);
        p->input_samples += n;
        // an input of more than one chunk: the first pass over each chunk whose samples are
        // all here (and the 200 after it), while the rest comes (its frames all hold audio)
        const size_t N = WHISPER_AUDIO_N_SAMPLES;
        while ((size_t)(p->max_cut + 1) * N + WA_MEL_CONTEXT <= p->held.size)
            if (!pipeline_cut_max(p, p->max_cut, WHISPER_AUDIO_N_FRAMES, (int64_t)p->held.size)) return false;
        return pipeline_emit(p, false);
    }
    if (p->tower && p->tower->max_samples) {        // the processor keeps the first max_samples
        const size_t used = p->input_samples >= p->tower->max_samples ? 0 : std::min(n, p->tower->max_samples - p->input_samples);
        p->input_samples += n - used;
        n = used;
    }
    // The windowed models close a window (with stream, a batch of its own) as its last sample comes.
    const size_t W = wa_window_samples(p->tower);
    while (n > 0) {
        if (p->in_window == 0 && !pipeline_make_room(p, wa_full_frames(p->tower, p->encs[0]->hparams))) return false;
        const size_t k = std::min(n, W - p->in_window);
        memcpy(p->cur->pcm + (size_t)p->cur->n * WA_MEL_ROW + WA_MEL_CONTEXT + p->in_window, pcm, k * sizeof(float));
        p->in_window += k;
        p->input_samples += k;
        pcm += k;
        n -= k;
        // a full window goes (a tower's too: Audio Flamingo 3 keeps up to 20; Qwen2-Audio's one ends with the input)
        if (p->in_window == W) pipeline_close_own_window(p, W);
    }
    return pipeline_emit(p, false);
}

// A whole-signal tower's input, once it has ended: its log-mel frames cut into windows of
// wa_window_frames (3000; the AuT's 2400) (an input of one chunk unpadded where the tower runs it
// so), with the clamp of the input's max (its first pass over chunks of 3000). The signal is the
// input padded to its frames (Voxtral, Ultravox), or the input itself (the AuT: fewer frames than
// hops, its end reflected where it ends). n_audio: the input's own samples (the held signal may be
// longer: a tower's min_samples of zeros), which the windows' records count.
static bool pipeline_cut_held(whisper_audio_pipeline * p, size_t n_audio) {
    const wa_tower & tw = *p->tower;
    const whisper_audio_hparams & hp = p->encs[0]->hparams;
    const float * x = p->held.data;
    const size_t n = p->held.size;
    const int64_t frames = tw.frames(n), sig_len = std::max<int64_t>((int64_t)n, frames * WHISPER_AUDIO_HOP);
    const int64_t F = WHISPER_AUDIO_N_FRAMES, n_chunks = (frames + F - 1) / F;
    const int64_t W = wa_window_frames(hp), n_windows = (frames + W - 1) / W;
    auto valid_of = [&](int64_t c) { return (int)std::min<int64_t>(F, frames - c * F); };
    float clamp = NAN;                                // one window: its own max
    if (n_windows > 1) {                              // the first pass's last chunks, then its max
        for (int64_t c = p->max_cut; c < n_chunks; c++)
            if (!pipeline_cut_max(p, c, valid_of(c), sig_len)) return false;
        pipeline_dispatch(p, p->cur_max);
        for (;;) {
            {
                std::lock_guard<std::mutex> lock(p->mu);
                if (p->n_max_pending == 0) break;
            }
            if (!pipeline_emit(p, true)) return false;
        }
        clamp = p->held_max;
    }
    for (int64_t c = 0; c < n_windows; c++) {
        const int valid = (int)std::min<int64_t>(W, frames - c * W);
        // The AuT's window shorter than W runs at its own chunks: one chunk at its frames (Qwen3-ASR's
        // a whole chunk), more rounded up to whole chunks (its last chunk zero-padded, as the model
        // pads it), or at the open batch's longer frames (zero frames past the audio change none of
        // its rows).
        const bool own_length = (tw.unpadded && n_windows == 1) || (hp.n_conv && valid < hp.n_chunk && !tw.pad_chunks);
        int n_frames = own_length ? valid : (int)W;
        if (hp.n_conv && !own_length) {
            n_frames = (int)std::min<int64_t>(W, (valid + hp.n_chunk - 1) / hp.n_chunk * hp.n_chunk);
            if (p->cur && p->cur->n > 0 && p->cur->n_frames > n_frames) n_frames = p->cur->n_frames;
        }
        if (!pipeline_make_room(p, n_frames)) return false;
        const size_t first = (size_t)(c * W * WHISPER_AUDIO_HOP), win_samples = (size_t)W * WHISPER_AUDIO_HOP;
        log_mel_row(x, n, sig_len, (int64_t)first, p->cur->pcm + (size_t)p->cur->n * WA_MEL_ROW);
        wa_window w{p->input, c, std::min<size_t>(win_samples, n_audio - std::min(n_audio, first))};
        if (c == n_windows - 1) w.samples = n_audio - std::min(n_audio, first);   // the last holds the input's tail past its frames
        w.valid = valid;
        w.clamp = clamp;
        w.positions = wa_positions(hp, valid);
        w.audio_frames = valid;
        w.rows = tw.rows(hp, valid, p->projector);
        pipeline_close_window(p, p->cur, w);
    }
    return true;
}

static bool pipeline_end_input(whisper_audio_pipeline * p) {
    if (!pipeline_ok(p)) return false;
    if (p->input_samples == 0) {
        wa_set_error("whisper_audio_pipeline_end_input: input %lld has no audio samples", (long long)p->input);
        return pipeline_refuse(p);
    }
    if (p->tower && p->tower->causal) {
        if (!pipeline_end_causal(p)) return false;
    } else if (p->tower && p->tower->whole_signal) {
        const size_t n_audio = p->held.size;
        if (p->held.size < p->tower->min_samples) {   // Qwen3-ASR's min_length: zeros after the input
            const std::vector<float> zeros(p->tower->min_samples - p->held.size, 0.0f);
            p->held.append(zeros.data(), zeros.size());
        }
        const bool ok = pipeline_cut_held(p, n_audio);
        p->held.size = 0;
        p->max_cut = 0;
        p->held_max = -INFINITY;
        if (!ok) return false;
    } else if (p->in_window > 0) {
        const size_t samples = p->in_window;
        // with no_pad, the short last window unpadded: its positions' frames, in a batch of that length;
        // an unpadded tower's input of one window (MiniCPM-o's of at most 30 s): its own frames
        if (p->params.no_pad && !pipeline_make_room(p, 2 * whisper_audio_n_positions(samples))) return false;
        if (p->tower && p->tower->unpadded && p->window == 0 &&
            !pipeline_make_room(p, p->tower->mel_pad ? wa_padded_frames(*p->tower, samples)
                                                     : (int)((samples + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP))) return false;
        pipeline_close_own_window(p, samples);
    }
    p->input++;
    p->window = 0;
    p->input_samples = 0;
    return pipeline_emit(p, false);
}

// Takes input k's windows out of the batch being filled (the others move up, in order).
static void pipeline_forget_queued(whisper_audio_pipeline * p, int64_t k) {
    wa_batch * b = p->cur;
    if (!b) return;
    int kept = 0;
    for (int i = 0; i < b->n; i++) {
        if (b->wins[i].input == k) continue;
        if (kept != i) {
            memcpy(b->pcm + (size_t)kept * WA_MEL_ROW, b->pcm + (size_t)i * WA_MEL_ROW, WA_MEL_ROW * sizeof(float));
            b->mel_params[2 * kept] = b->mel_params[2 * i];
            b->mel_params[2 * kept + 1] = b->mel_params[2 * i + 1];
            b->kv_len[kept] = b->kv_len[i];
            b->frames[kept] = b->frames[i];
            b->window[kept] = b->window[i];
            b->wins[kept] = b->wins[i];
        }
        kept++;
    }
    if (kept < b->n && (p->open[k] -= b->n - kept) == 0) p->open.erase(k);
    b->n = kept;
}

// Inputs from the first whose every window has been handed out (or skipped): those before the
// first with a window still open, and never the current one (it may get more).
static int64_t pipeline_inputs_done(const whisper_audio_pipeline * p) {
    return p->open.empty() ? p->input : std::min(p->open.begin()->first, p->input);
}

// Between inputs: the batch being filled goes to the encoders now, short as it is.
static bool pipeline_flush(whisper_audio_pipeline * p) {
    if (!pipeline_ok(p)) return false;
    if (p->input_samples > 0) {
        wa_set_error("whisper_audio_pipeline_flush: input %lld was not ended (whisper_audio_pipeline_end_input)", (long long)p->input);
        p->refused = true;               // the input goes on
        return false;
    }
    if (!pipeline_run_causal_batch(p)) return false;
    pipeline_dispatch(p, p->cur);
    return pipeline_emit(p, false);
}

// Milliseconds until an encoder is expected to run out of batches: each encoder's batches on
// the device, then those waiting for a worker, each given to the encoder that frees first.
static double pipeline_busy_ms(whisper_audio_pipeline * p) {
    std::lock_guard<std::mutex> lock(p->mu);
    const auto now = std::chrono::steady_clock::now();
    std::vector<double> left;
    for (const wa_encoder_load & l : p->load) left.push_back(l.busy_ms(now));
    if (left.empty()) return 0;
    for (const wa_batch * b : p->todo) {
        auto first_free = std::min_element(left.begin(), left.end());
        const size_t k = (size_t)(first_free - left.begin());
        *first_free += p->load[k].expect(pipeline_batch_shape(p, p->encs[k], b));
    }
    return *std::min_element(left.begin(), left.end());
}

// Rows ready go to on_rows; with none ready, waits up to timeout_ms for the next batch's.
static int64_t pipeline_poll(whisper_audio_pipeline * p, int timeout_ms) {
    if (!pipeline_ok(p)) return -1;
    if (timeout_ms > 0) {
        std::unique_lock<std::mutex> lock(p->mu);
        p->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                       [&] { return !p->error.empty() || p->done.count(p->n_emitted) || !p->maxima.empty(); });
    }
    if (!pipeline_emit(p, false)) return -1;
    return pipeline_inputs_done(p);
}

// An ended input that the caller no longer wants: its windows still queued go, the rest are
// encoded and their rows skipped.
static bool pipeline_cancel_input(whisper_audio_pipeline * p, int64_t k) {
    if (!pipeline_ok(p)) return false;
    if (k < 0 || k >= p->input) {
        wa_set_error("whisper_audio_pipeline_cancel_input: input %lld has not ended (%lld have; the current one: "
                     "whisper_audio_pipeline_drop_input)", (long long)k, (long long)p->input);
        p->refused = true;
        return false;
    }
    if (!p->open.count(k)) return true;           // every row of it has gone already
    for (auto it = p->causal_batch.begin(); it != p->causal_batch.end(); ++it) {
        if (it->input != k) continue;             // a causal input held for a batch: it goes unrun
        wa_causal_free(it->s);
        p->causal_batch.erase(it);
        p->open.erase(k);
        return true;
    }
    p->dropped.insert(k);
    pipeline_forget_queued(p, k);
    return pipeline_emit(p, false);
}

// The current input's windows still in the batch being filled go; those already handed to the
// workers are encoded, and their rows skipped (p->dropped). A held input's first pass is
// waited for, so that its maxima do not reach the next input's clamp.
static bool pipeline_drop_input(whisper_audio_pipeline * p) {
    if (!pipeline_ok(p)) return false;
    pipeline_forget_queued(p, p->input);
    if (p->cur_max) {
        std::lock_guard<std::mutex> lock(p->mu);
        p->free_list.push_back(p->cur_max);
        p->cur_max = nullptr;
    }
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(p->mu);
            if (p->n_max_pending == 0) break;
        }
        if (!pipeline_emit(p, true)) return false;
    }
    if (p->window > 0 && !p->causal) p->dropped.insert(p->input);   // (a causal input's rows have all gone)
    wa_causal_free(p->causal);
    p->causal = nullptr;
    p->causal_samples = 0;
    p->held.size = 0;
    p->max_cut = 0;
    p->held_max = -INFINITY;
    p->in_window = 0;
    p->input++;
    p->window = 0;
    p->input_samples = 0;
    return pipeline_emit(p, false);
}

static bool pipeline_finish(whisper_audio_pipeline * p) {
    if (!pipeline_ok(p)) return false;
    if (p->input_samples > 0) {
        wa_set_error("whisper_audio_pipeline_finish: input %lld was not ended (whisper_audio_pipeline_end_input)", (long long)p->input);
        return pipeline_refuse(p);
    }
    if (!pipeline_run_causal_batch(p)) return false;
    pipeline_dispatch(p, p->cur);
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(p->mu);
            if (p->n_emitted == p->n_cut && p->error.empty()) return true;
        }
        if (!pipeline_emit(p, true)) return false;
    }
}

// Whether a pipeline of these encoder and pipeline parameters gives a tower's tokens: a model
// with a projector, its last layer's output as the tower takes it, no pooling, padded windows.
static const wa_tower * pipeline_tower(const whisper_audio_hparams & hp, const whisper_audio_encoder_params & ep,
                                       const whisper_audio_pipeline_params & pp) {
    const bool plain = ep.output_layer == -1 && ep.final_ln && pp.pool == WHISPER_AUDIO_POOL_NONE && !pp.no_pad;
    return plain ? wa_tower_of(hp) : nullptr;
}

// Whether a pipeline of these parameters can stream (its windows' rows known as each window's last
// sample comes); else false with the error saying why. A tower that takes one log-mel over its whole
// input clamps every window by the whole input's max: no window is final before the input ends.
static bool pipeline_can_stream(const whisper_audio_hparams & hp, const whisper_audio_encoder_params & ep,
                                const whisper_audio_pipeline_params & pp, const char * func) {
    const wa_tower * tw = pipeline_tower(hp, ep, pp);
    if (tw && tw->whole_signal) {
        wa_set_error("%s: %s's tokens cannot stream: its log-mel is one over the whole input, clamped by the whole "
                     "input's max, so no window's tokens are known before the input ends", func, wa_projector_gguf(tw->type));
        return false;
    }
    return true;
}

// The batch for n_windows windows known ahead, max_batch at most: as many batches as max_batch
// needs, all of one size but the last, shorter by what the rounding leaves (120 windows at 32:
// 4 x 30; 12 at 8: 2 x 6; 5 at 8: 1 x 5). A short last batch costs a whole one where a captured
// graph runs it (on the GPU: wa_graph_batch), and a batch no larger than the work keeps the host
// buffers and the graph's memory to it. Not known (0): max_batch.
int whisper_audio_batch_for_windows(int max_batch, size_t n_windows) {
    if (max_batch < 1) return 0;
    if (n_windows == 0) return max_batch;
    const size_t n_batches = (n_windows + max_batch - 1) / max_batch;
    return (int)((n_windows + n_batches - 1) / n_batches);
}

// windows: Whisper windows even from a tower's model (encode_pcm's contract).
// func: the public function the caller called, for the messages (encode_pcm and encode_tokens run
// one input through a pipeline of their encoder: a busy encoder is theirs to report).
static whisper_audio_pipeline * pipeline_init(whisper_audio_encoder * const * encoders, int n_encoders,
                                              whisper_audio_pipeline_params params, bool windows = false,
                                              const char * func = "whisper_audio_pipeline_init") {
    if (!encoders || n_encoders < 1) { wa_set_error("%s: no encoders", func); return nullptr; }
    int pool;
    memcpy(&pool, &params.pool, sizeof(int));
    if (pool != WHISPER_AUDIO_POOL_NONE && pool != WHISPER_AUDIO_POOL_MEAN) {
        wa_set_error("%s: pool %d is not WHISPER_AUDIO_POOL_NONE or _MEAN", func, pool);
        return nullptr;
    }
    std::unique_ptr<whisper_audio_pipeline, void (*)(whisper_audio_pipeline *)> owner(new whisper_audio_pipeline,
                                                                                    whisper_audio_pipeline_free);
    whisper_audio_pipeline * p = owner.get();
    p->params = params;
    for (int i = 0; i < n_encoders; i++) {
        whisper_audio_encoder * e = encoders[i];
        if (!e) { wa_set_error("%s: encoder %d is NULL", func, i); return nullptr; }
        const whisper_audio_encoder * e0 = p->encs.empty() ? e : p->encs[0];
        if (e->hparams.n_state != e0->hparams.n_state || e->hparams.n_mels != e0->hparams.n_mels ||
            e->hparams.projector != e0->hparams.projector || e->params.output_layer != e0->params.output_layer ||
            e->params.final_ln != e0->params.final_ln || e->params.projector != e0->params.projector ||
            e->params.max_batch != e0->params.max_batch) {
            wa_set_error("%s: encoder %d differs from encoder 0 (model, output layer, "
                         "projector or batch size)", func, i);
            return nullptr;
        }
        if (e->busy.exchange(true)) {
            if (n_encoders == 1 && strcmp(func, "whisper_audio_pipeline_init") != 0)
                wa_set_error("%s: the encoder is busy (with a call from another thread, or a pipeline holds it until "
                             "whisper_audio_pipeline_free)", func);
            else
                wa_set_error("%s: encoder %d is busy (with another call or pipeline, or given twice)", func, i);
            return nullptr;
        }
        p->encs.push_back(e);
    }
    const whisper_audio_encoder * e0 = p->encs[0];
    const whisper_audio_hparams & hp = e0->hparams;
    p->max_batch = p->batch = e0->params.max_batch;   // what pipeline_free gives the encoders back
    p->tower = windows ? nullptr : pipeline_tower(hp, e0->params, params);
    if ((hp.n_conv || hp.n_window) && !p->tower) {   // the AuT's positions are not Whisper's, nor a causal encoder's
                                                  // in windows: no Whisper windows of them
        wa_set_error("%s: %s's tower gives its tokens alone (or the tower's rows with the projector "
                     "off): no other output layer, no pooling, no unpadded windows, no Whisper windows",
                     func, wa_projector_gguf(hp.projector));
        return nullptr;
    }
    p->projector = e0->params.projector;
    if (params.stream && !pipeline_can_stream(hp, e0->params, params, func)) return nullptr;
    // streaming: each window a batch of its own, handed to the workers as it closes; a causal tower's
    // step as soon as a token's frames are in (else 30 s of frames a step, as a whole input runs)
    p->batch = params.stream ? 1 : whisper_audio_batch_for_windows(p->max_batch, params.n_windows);
    if (params.stream) p->causal_step = RT_TOKEN_FRAMES;
    // the encoders' whole batch is the pipeline's while it holds them: the graphs kept (and, on
    // the GPU, tuned) are of the batches it runs (pipeline_free gives them max_batch back)
    for (whisper_audio_encoder * e : p->encs) e->params.max_batch = p->batch;
    p->width = p->tower && p->projector ? hp.n_llm : hp.n_state;
    p->max_rows = p->tower ? p->tower->rows(hp, WHISPER_AUDIO_N_FRAMES, p->projector) : hp.n_ctx;
    p->out_f16 = params.f16 && params.pool != WHISPER_AUDIO_POOL_MEAN;
    p->host = e0->backend;
    // the host buffers, allocated once here (pinned memory is slow to allocate)
    const int cap = p->batch;
    const size_t win_out = std::max<size_t>((size_t)p->max_rows * p->width * (p->out_f16 ? 2 : 4), sizeof(float));
    const size_t in_floats = (size_t)cap * (WA_MEL_ROW + 5);
    for (size_t i = 0; i < 2 * p->encs.size() + 1; i++) {
        p->batches.emplace_back(new wa_batch);
        wa_batch * b = p->batches.back().get();
        b->cap = cap;
        b->wins.resize(cap);
        b->pcm = (float *)vt_backend_host_alloc(p->host, in_floats * sizeof(float));
        b->out = b->pcm ? vt_backend_host_alloc(p->host, (size_t)cap * win_out) : nullptr;
        if (!b->out) throw std::bad_alloc();
        b->mel_params = b->pcm + (size_t)cap * WA_MEL_ROW;
        b->kv_len = b->mel_params + 2 * cap;
        b->frames = b->kv_len + cap;
        b->window = b->frames + cap;
        if (params.pool == WHISPER_AUDIO_POOL_MEAN) {
            b->pooled.resize((size_t)cap * p->width);
            if (params.f16) b->pooled_f16.resize(b->pooled.size());
        }
        p->free_list.push_back(b);
    }
    const wa_graph_kind kind = p->tower ? WA_GRAPH_TOKENS : WA_GRAPH_ROWS;
    for (whisper_audio_encoder * e : p->encs) {      // the whole batch's graphs, built (CUDA: captured) now
        if (p->tower && p->tower->causal) break;     // (a causal tower's steps build theirs)
        if (!e->mel_in_graph) {                      // the CPU: its arena mapped now, not in the first batch
            if (!graph_for_batch(e, cap, wa_full_frames(p->tower, e->hparams), false, kind)) return nullptr;
            continue;
        }
        for (wa_graph_kind k : {kind, WA_GRAPH_MEL_MAX}) {
            if (k == WA_GRAPH_MEL_MAX && !(p->tower && p->tower->whole_signal)) continue;
            // a whole window's frames; the clamp's pass reads chunks of 30 s
            const int n_frames = k == WA_GRAPH_MEL_MAX ? WHISPER_AUDIO_N_FRAMES : wa_full_frames(p->tower, e->hparams);
            wa_graph * g = graph_for_batch(e, cap, n_frames, true, k);
            if (!g) return nullptr;
            if (!vt_backend_prepare(e->backend, g->graph)) {
                wa_set_error("%s: %s", func, vt_last_error());
                return nullptr;
            }
        }
    }
    p->load.resize(p->encs.size());
    for (size_t k = 0; k < p->encs.size(); k++) p->workers.emplace_back(pipeline_worker, p, (int)k);
    return owner.release();
}

int whisper_audio_cuda_device_count(void) { return vt_backend_device_count(WA_GPU_BACKEND); }

whisper_audio_pipeline_params whisper_audio_pipeline_default_params(void) {
    whisper_audio_pipeline_params p;
    p.pool = WHISPER_AUDIO_POOL_NONE;
    p.no_pad = false;
    p.f16 = false;
    p.on_rows = nullptr;
    p.user = nullptr;
    p.n_windows = 0;
    p.stream = false;
    return p;
}

whisper_audio_pipeline * whisper_audio_pipeline_init(whisper_audio_encoder * const * encoders, int n_encoders,
                                                     whisper_audio_pipeline_params params) {
    return wa_catch(__func__, (whisper_audio_pipeline *)nullptr, [&] { return pipeline_init(encoders, n_encoders, params); });
}

// A pipeline call; what it throws (out of memory) fails the pipeline, which may be half-way
// through cutting a window; a refused call (the caller's mistake) leaves it as it was. A call
// from inside on_rows is refused: the caller's thread is in the middle of handing out rows.
template <typename F> static bool pipeline_call(whisper_audio_pipeline * p, const char * func, F && f) {
    if (p->in_on_rows) {
        wa_set_error("%s: called from inside the rows callback (on_rows); call it after the callback returns", func);
        return false;
    }
    p->refused = false;
    const bool ok = wa_catch(func, false, f);
    if (!ok && !p->refused && pipeline_ok(p)) pipeline_fail(p, whisper_audio_last_error());
    return ok;
}

bool whisper_audio_pipeline_push(whisper_audio_pipeline * p, const float * pcm, size_t n) {
    if (!p || (!pcm && n > 0)) { wa_set_error("%s: NULL %s", __func__, !p ? "pipeline" : "pcm"); return false; }
    return pipeline_call(p, __func__, [&] { return pipeline_push(p, pcm, n); });
}

bool whisper_audio_pipeline_end_input(whisper_audio_pipeline * p) {
    if (!p) { wa_set_error("%s: NULL pipeline", __func__); return false; }
    return pipeline_call(p, __func__, [&] { return pipeline_end_input(p); });
}

bool whisper_audio_pipeline_drop_input(whisper_audio_pipeline * p) {
    if (!p) { wa_set_error("%s: NULL pipeline", __func__); return false; }
    return pipeline_call(p, __func__, [&] { return pipeline_drop_input(p); });
}

bool whisper_audio_pipeline_finish(whisper_audio_pipeline * p) {
    if (!p) { wa_set_error("%s: NULL pipeline", __func__); return false; }
    return pipeline_call(p, __func__, [&] { return pipeline_finish(p); });
}

bool whisper_audio_pipeline_flush(whisper_audio_pipeline * p) {
    if (!p) { wa_set_error("%s: NULL pipeline", __func__); return false; }
    return pipeline_call(p, __func__, [&] { return pipeline_flush(p); });
}

int64_t whisper_audio_pipeline_poll(whisper_audio_pipeline * p, int timeout_ms) {
    if (!p) { wa_set_error("%s: NULL pipeline", __func__); return -1; }
    int64_t done = -1;
    pipeline_call(p, __func__, [&] { return (done = pipeline_poll(p, timeout_ms)) >= 0; });
    return done;
}

double whisper_audio_pipeline_busy_ms(whisper_audio_pipeline * p) {
    if (!p) { wa_set_error("%s: NULL pipeline", __func__); return -1; }
    return pipeline_busy_ms(p);
}

bool whisper_audio_pipeline_cancel_input(whisper_audio_pipeline * p, int64_t input) {
    if (!p) { wa_set_error("%s: NULL pipeline", __func__); return false; }
    return pipeline_call(p, __func__, [&] { return pipeline_cancel_input(p, input); });
}

void whisper_audio_pipeline_free(whisper_audio_pipeline * p) {
    if (!p) return;
    if (p->in_on_rows) {
        wa_set_error("whisper_audio_pipeline_free: called from inside the rows callback (on_rows); the pipeline was "
                     "not freed: free it after the call that runs the callback returns");
        return;
    }
    pipeline_stop(p);
    wa_causal_free(p->causal);
    for (const auto & h : p->causal_batch) wa_causal_free(h.s);
    for (auto & b : p->batches) {
        vt_backend_host_free(p->host, b->pcm);
        vt_backend_host_free(p->host, b->out);
    }
    for (whisper_audio_encoder * e : p->encs) {
        if (p->batch != p->max_batch) e->params.max_batch = p->max_batch;   // where pipeline_init evened it
        e->busy = false;
    }
    delete p;
}

// ---- one input through a pipeline: encode_pcm, encode_tokens -----------------------------

// One input of n samples through a pipeline of this encoder (Whisper windows, or with tokens
// the tower's rows), every row copied to out one after another.
static bool encode_one_input(whisper_audio_encoder * enc, const float * pcm, size_t n, float * out, bool tokens,
                             const char * func) {
    float * dst = out;
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.user = &dst;
    pp.on_rows = [](const whisper_audio_rows * r, void * user) {
        float *& d = *(float **)user;
        const size_t k = (size_t)r->n_rows * r->n_state;
        if (k == 0) return true;
        memcpy(d, r->data, k * sizeof(float));
        d += k;
        return true;
    };
    pp.n_windows = tokens ? 0 : whisper_audio_n_windows(n);
    std::unique_ptr<whisper_audio_pipeline, void (*)(whisper_audio_pipeline *)> p(
        pipeline_init(&enc, 1, pp, !tokens, func), whisper_audio_pipeline_free);
    if (!p) return false;
    if (n == 0) {      // no audio: one window of silence, as whisper_audio_n_windows counts it
        const float zero = 0.0f;
        if (!pipeline_push(p.get(), &zero, 1)) return false;
        // (a single zero sample and an empty window give the same all-zero PCM window)
    } else if (!pipeline_push(p.get(), pcm, n)) {
        return false;
    }
    return pipeline_end_input(p.get()) && pipeline_finish(p.get());
}

bool whisper_audio_encode_pcm(whisper_audio_encoder * enc, const float * pcm, size_t n, float * out) {
    if (!enc || !out || (!pcm && n > 0)) {
        wa_set_error("%s: NULL %s", __func__, !enc ? "encoder" : !out ? "out" : "pcm");
        return false;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const char * func = __func__;   // (a lambda's own __func__ is "operator()")
    const bool ok = wa_catch(func, false, [&] { return encode_one_input(enc, pcm, n, out, false, func); });
    enc->timings.wall_ms += ms_since(t0);
    return ok;
}

// ---- audio LLMs: tokens ------------------------------------------------------------------

static bool wa_check_projector(const whisper_audio_hparams & hp, const char * func) {
    if (wa_tower_of(hp)) return true;
    wa_set_error("%s: the model is a Whisper encoder without an audio-LLM projector (Qwen2-Audio, Voxtral, Ultravox, Audio Flamingo 3, "
                 "Music Flamingo, GLM-ASR, Qwen2.5-Omni, Qwen3-Omni, Qwen3-ASR, Step-Audio 2, Voxtral Realtime)", func);
    return false;
}

// The rows an input of n samples gives a tower's model: its chunks' rows, summed. Every chunk but
// the last is a whole one of F frames, so the sum is closed: k whole chunks and the rest's rows.
static size_t tower_rows(const whisper_audio_hparams & hp, size_t n_samples, bool projector) {
    const wa_tower & tw = *wa_tower_of(hp);
    if (tw.causal) return rows_realtime(hp, n_samples, projector);
    const int64_t frames = tw.frames(n_samples), F = tw.whole_signal ? wa_window_frames(hp)
                                                  : (int64_t)(wa_window_samples(&tw) / WHISPER_AUDIO_HOP);
    const int64_t whole = frames / F, rest = frames % F;
    size_t rows = whole > 0 ? (size_t)whole * (size_t)tw.rows(hp, (int)F, projector) : 0;
    if (rest > 0) rows += (size_t)tw.rows(hp, (int)rest, projector);
    return rows;
}

size_t whisper_audio_n_tokens(const whisper_audio_model * model, size_t n_samples, bool projector) {
    if (!model) { wa_set_error("%s: no model", __func__); return 0; }
    if (!wa_check_projector(model->hparams, __func__)) return 0;
    return tower_rows(model->hparams, n_samples, projector);
}

int whisper_audio_token_dim(const whisper_audio_model * model, bool projector) {
    if (!model) { wa_set_error("%s: no model", __func__); return 0; }
    if (!wa_check_projector(model->hparams, __func__)) return 0;
    return projector ? model->hparams.n_llm : model->hparams.n_state;
}

const char * whisper_audio_projector_name(enum whisper_audio_projector type) {
    int t;
    memcpy(&t, &type, sizeof(int));
    if (t == WHISPER_AUDIO_PROJECTOR_NONE) return "none";
    for (const wa_projector_name & p : WA_PROJECTORS) if ((int)p.type == t) return p.gguf;
    wa_set_error("%s: %d is not a whisper_audio_projector", __func__, t);
    return nullptr;
}

size_t whisper_audio_samples_used(const whisper_audio_model * model, bool tokens) {
    if (!model) { wa_set_error("%s: no model", __func__); return 0; }
    const wa_tower * tw = tokens ? wa_tower_of(model->hparams) : nullptr;
    return tw && tw->max_samples ? tw->max_samples : SIZE_MAX;
}

bool whisper_audio_rows_are_tokens(const whisper_audio_model * model, whisper_audio_encoder_params ep,
                                   whisper_audio_pipeline_params pp) {
    if (!model) { wa_set_error("%s: no model", __func__); return false; }
    return pipeline_tower(model->hparams, ep, pp) != nullptr;
}

bool whisper_audio_can_stream(const whisper_audio_model * model, whisper_audio_encoder_params ep,
                              whisper_audio_pipeline_params pp) {
    if (!model) { wa_set_error("%s: no model", __func__); return false; }
    if (model->hparams.n_conv && !pipeline_tower(model->hparams, ep, pp)) {   // as pipeline_init refuses it
        wa_set_error("%s: %s's tower gives its tokens alone: no Whisper windows of it", __func__, wa_projector_gguf(model->hparams.projector));
        return false;
    }
    return pipeline_can_stream(model->hparams, ep, pp, __func__);
}

bool whisper_audio_pipeline_tokens(const whisper_audio_pipeline * p) { return p && p->tower; }
int  whisper_audio_pipeline_row_width(const whisper_audio_pipeline * p) { return p ? p->width : 0; }
int  whisper_audio_pipeline_batch(const whisper_audio_pipeline * p) { return p ? p->batch : 0; }

// One batch of n windows of n_frames mel frames: the rows[b] first rows of window b's output
// go to out, one after another. kv_len[b]: the positions holding audio (a masked tower's).
static bool encode_token_batch(whisper_audio_encoder * enc, const float * mel, int n, int n_frames, const float * kv_len,
                               const float * frames, const int * rows, float * out) {
    whisper_audio_timings & tm = enc->timings;
    const auto t0 = std::chrono::steady_clock::now();
    wa_graph * g = graph_for_batch(enc, n, n_frames, false, WA_GRAPH_TOKENS);
    if (!g) return false;
    const int64_t width = g->out->ne[0], per_win = g->out->ne[1];
    std::vector<float> all((size_t)vt_nelements(g->out));
    auto t = std::chrono::steady_clock::now();
    bool ok = vt_backend_set_tensor(enc->backend, g->in, mel, VT_TYPE_F32);
    if (g->kv_len) ok = ok && vt_backend_set_tensor(enc->backend, g->kv_len, kv_len, VT_TYPE_F32);
    if (g->frames) ok = ok && vt_backend_set_tensor(enc->backend, g->frames, frames, VT_TYPE_F32);
    const std::vector<float> first(n, 0.0f);     // windows given alone: each its input's first
    if (g->window) ok = ok && vt_backend_set_tensor(enc->backend, g->window, first.data(), VT_TYPE_F32);
    tm.upload_ms += ms_since(t);
    t = std::chrono::steady_clock::now();
    ok = ok && vt_backend_compute(enc->backend, g->graph);
    tm.compute_ms += ms_since(t);
    t = std::chrono::steady_clock::now();
    ok = ok && vt_backend_get_tensor_f32(enc->backend, g->out, all.data());
    tm.download_ms += ms_since(t);
    tm.encode_ms += ms_since(t0);
    if (!ok) {
        wa_set_error("encoding on %s: %s", vt_backend_name(enc->backend), vt_last_error());
        return false;
    }
    for (int b = 0; b < n; b++) {
        VT_ASSERT(rows[b] <= per_win);
        std::copy(all.begin() + (size_t)b * per_win * width, all.begin() + ((size_t)b * per_win + rows[b]) * width, out);
        out += (size_t)rows[b] * width;
    }
    tm.n_batches++;
    tm.n_windows += n;
    return true;
}

static bool wa_check_token_encoder(const whisper_audio_encoder * enc, const char * func) {
    if (!wa_check_projector(enc->hparams, func)) return false;
    if (enc->params.output_layer != -1) {
        wa_set_error("%s: the encoder was made for output layer %d; the tower follows the last layer (output_layer -1)",
                     func, enc->params.output_layer);
        return false;
    }
    if (!enc->params.final_ln) {
        wa_set_error("%s: the encoder was made without the final LayerNorm (final_ln false); the tower takes the "
                     "last layer's output as it is (final_ln true)", func);
        return false;
    }
    return true;
}

bool whisper_audio_encode_tokens(whisper_audio_encoder * enc, const float * pcm, size_t n, float * out) {
    if (!enc || !pcm) { wa_set_error("%s: NULL %s", __func__, !enc ? "encoder" : "pcm"); return false; }
    if (!wa_check_token_encoder(enc, __func__)) return false;
    if (n == 0) { wa_set_error("%s: no audio samples", __func__); return false; }
    // out may be NULL where the input gives no rows (Qwen2-Audio's 320 samples or fewer)
    if (!out && tower_rows(enc->hparams, n, enc->params.projector) > 0) {
        wa_set_error("%s: NULL out", __func__);
        return false;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const char * func = __func__;   // (a lambda's own __func__ is "operator()")
    const bool ok = wa_catch(func, false, [&] { return encode_one_input(enc, pcm, n, out, true, func); });
    enc->timings.wall_ms += ms_since(t0);
    return ok;
}

int whisper_audio_encode_mel_tokens(whisper_audio_encoder * enc, const float * mel, int n_frames, int n_audio_frames,
                                    float * out) {
    if (!enc || !mel || !out) { wa_set_error("%s: NULL %s", __func__, !enc ? "encoder" : !mel ? "mel" : "out"); return -1; }
    if (!wa_check_token_encoder(enc, __func__)) return -1;
    const whisper_audio_hparams & hp = enc->hparams;
    const wa_tower & tw = *wa_tower_of(hp);
    if (tw.causal) {                       // its log-mel and its steps are the tower's own (wa_causal)
        wa_set_error("%s: %s's tower takes PCM (its processor's padding, its causal steps): whisper_audio_encode_tokens "
                     "or the pipeline", __func__, wa_projector_gguf(hp.projector));
        return -1;
    }
    const int least = tw.mel_pad ? 3 : 2;   // Step-Audio 2: a pooled position for its adapter
    if (tw.unpadded ? n_frames < least || n_frames > WHISPER_AUDIO_N_FRAMES : n_frames != WHISPER_AUDIO_N_FRAMES) {
        wa_set_error("%s: %d mel frames; this model takes %s", __func__, n_frames,
                     !tw.unpadded ? "3000 (a padded 30 s window)" : tw.mel_pad ? "3 to 3000" : "2 to 3000");
        return -1;
    }
    if (n_audio_frames < 1 || n_audio_frames > n_frames) {
        wa_set_error("%s: %d frames holding audio, of %d", __func__, n_audio_frames, n_frames);
        return -1;
    }
    wa_encoder_lock lock(enc, __func__);
    if (!lock.held) return -1;
    // MiniCPM-o: 3000 frames are a later window (its frames past the audio zero, its keys masked at the
    // frame count); fewer, an input of at most 30 s at its own frames
    const bool later = tw.tail_by_frames && n_frames == WHISPER_AUDIO_N_FRAMES;
    // Step-Audio 2: n_audio_frames is its wav_lens (L), the keys its rule's at n_frames
    const float kv_len = (float)(later ? std::min(n_audio_frames, hp.n_ctx)
                                 : tw.mel_pad ? std::max(1, wa_keys_of(n_audio_frames, n_frames)) : wa_positions(hp, n_audio_frames));
    const float frames = (float)n_audio_frames;
    const int rows = tw.rows(hp, n_audio_frames, enc->params.projector);
    // the AuT: audio shorter than a chunk runs at its own length, as transformers pads chunks to the longest
    // (Qwen3-Omni), or as one whole chunk, its frames past the audio zero (Qwen3-ASR pads the log-mel to chunks)
    std::vector<float> own;
    if (hp.n_conv && n_audio_frames < hp.n_chunk) {
        const int keep = tw.pad_chunks ? hp.n_chunk : n_audio_frames;
        own.resize((size_t)hp.n_mels * keep);
        for (int m = 0; m < hp.n_mels; m++)
            std::copy(mel + (size_t)m * n_frames, mel + (size_t)m * n_frames + keep, own.begin() + (size_t)m * keep);
        mel = own.data();
        n_frames = keep;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = wa_catch(__func__, false, [&] { return encode_token_batch(enc, mel, 1, n_frames, &kv_len, &frames, &rows, out); });
    enc->timings.wall_ms += ms_since(t0);
    return ok ? rows : -1;
}

// ---- devices, the CPU, f16 rows: what clients ask of vt, through the public API ---------------

// a C caller may store any int in an enum argument: read it as an int
static bool wa_device_kind(enum whisper_audio_device device, const char * func, int * kind) {
    memcpy(kind, &device, sizeof(int));
    if (*kind == WHISPER_AUDIO_DEVICE_AUTO || *kind == WHISPER_AUDIO_DEVICE_CPU || *kind == WHISPER_AUDIO_DEVICE_GPU) return true;
    wa_set_error("%s: device %d is not WHISPER_AUDIO_DEVICE_AUTO, _CPU or _GPU", func, *kind);
    return false;
}

int whisper_audio_device_count(enum whisper_audio_device device) {
    int kind;
    if (!wa_device_kind(device, __func__, &kind)) return -1;
    const int n_gpu = kind == WHISPER_AUDIO_DEVICE_CPU ? 0 : vt_backend_device_count(WA_GPU_BACKEND);
    return kind == WHISPER_AUDIO_DEVICE_GPU ? n_gpu : std::max(n_gpu, 1);
}

bool whisper_audio_device_memory_used(enum whisper_audio_device device, int index, size_t * used) {
    int kind;
    if (!wa_device_kind(device, __func__, &kind)) return false;
    if (!used) { wa_set_error("%s: NULL used", __func__); return false; }
    const int n_gpu = kind == WHISPER_AUDIO_DEVICE_CPU ? 0 : vt_backend_device_count(WA_GPU_BACKEND);
    if (kind == WHISPER_AUDIO_DEVICE_CPU || (kind == WHISPER_AUDIO_DEVICE_AUTO && n_gpu == 0)) {
        wa_set_error("%s: the CPU has no device memory figure", __func__);
        return false;
    }
    if (index < 0 || index >= n_gpu) {
        wa_set_error("%s: no GPU %d (%d present%s)", __func__, index, n_gpu, vt_backend_built(WA_GPU_BACKEND) ? "" : ": a build without CUDA");
        return false;
    }
    size_t free_bytes = 0, total_bytes = 0;
    if (!vt_backend_device_memory(WA_GPU_BACKEND, index, &free_bytes, &total_bytes)) {
        wa_set_error("%s: %s", __func__, vt_last_error());
        return false;
    }
    *used = total_bytes - free_bytes;
    return true;
}

const char * whisper_audio_cpu_isa(void) {
    const char * isa = vt_cpu_isa();
    if (!isa) wa_set_error("%s", vt_last_error());
    return isa;
}

bool whisper_audio_f16_to_f32(const uint16_t * src, float * dst, size_t n) {
    if (n > 0 && (!src || !dst)) { wa_set_error("%s: NULL %s", __func__, !src ? "src" : "dst"); return false; }
    if (n > 0) vt_convert(dst, VT_TYPE_F32, src, VT_TYPE_F16, n);
    return true;
}

bool whisper_audio_f32_to_f16(const float * src, uint16_t * dst, size_t n) {
    if (n > 0 && (!src || !dst)) { wa_set_error("%s: NULL %s", __func__, !src ? "src" : "dst"); return false; }
    if (n > 0) vt_convert(dst, VT_TYPE_F16, src, VT_TYPE_F32, n);
    return true;
}

// ---- profile ------------------------------------------------------------------------------

static int encoder_profile(whisper_audio_encoder * enc, const float * mel, int n_windows, whisper_audio_op_time * times,
                           int max_times) {
    if (n_windows < 1 || n_windows > enc->params.max_batch) {
        wa_set_error("profile: %d windows, the encoder takes 1 to %d", n_windows, enc->params.max_batch);
        return -1;
    }
    if (enc->hparams.n_window) {           // a causal tower runs steps of PCM, not windows of mel
        wa_set_error("profile: %s's tower runs in causal steps over PCM (whisper_audio_encode_tokens), not in mel windows",
                     wa_projector_gguf(enc->hparams.projector));
        return -1;
    }
    wa_graph * g = graph_for_batch(enc, n_windows, WHISPER_AUDIO_N_FRAMES);
    if (!g) return -1;
    const int n_nodes = vt_graph_n_nodes(g->graph);
    std::vector<double> ms(n_nodes);
    if (!vt_backend_set_tensor(enc->backend, g->in, mel, VT_TYPE_F32) || !vt_backend_profile(enc->backend, g->graph, ms.data())) {
        wa_set_error("profile on %s: %s", vt_backend_name(enc->backend), vt_last_error());
        return -1;
    }
    // a node belongs to the layer of the next named "layerN" node at or after it
    int layer = -1, n = 0;
    for (int i = n_nodes - 1; i >= 0; i--) {
        const vt_tensor * t = vt_graph_node(g->graph, i);
        if (sscanf(t->name, "layer%d", &layer) != 1 && (strcmp(t->name, "post_conv") == 0 || strcmp(t->name, "output") == 0)) layer = -1;
        if (i < max_times) {
            snprintf(times[i].name, sizeof(times[i].name), "%s", t->name);
            snprintf(times[i].op, sizeof(times[i].op), "%s", vt_op_name(t->op));
            times[i].layer = layer;
            times[i].ms = ms[i];
            n = std::max(n, i + 1);
        }
    }
    return n;
}

int whisper_audio_encoder_profile(whisper_audio_encoder * enc, const float * mel, int n_windows,
                                  whisper_audio_op_time * times, int max_times) {
    if (!enc || !mel || (!times && max_times > 0)) {
        wa_set_error("%s: NULL %s", __func__, !enc ? "encoder" : !mel ? "mel" : "times");
        return -1;
    }
    if (max_times < 0) { wa_set_error("%s: max_times is %d (0 or more)", __func__, max_times); return -1; }
    wa_encoder_lock lock(enc, __func__);
    return lock.held ? wa_catch(__func__, -1, [&] { return encoder_profile(enc, mel, n_windows, times, max_times); }) : -1;
}

// =====================================================================================
// audio files, in a build without them
// =====================================================================================
//
// The two-file library takes 16 kHz mono PCM. Its audio-file calls are answered here, each with
// the one line that says what to add; whisper-audio-input.cpp defines them in a build with it.
#ifndef WHISPER_AUDIO_INPUT
static const char * const WA_NO_INPUT =
    "%s: audio files are not built in: add whisper-audio-input.cpp (with -DWHISPER_AUDIO_INPUT), or pass 16 kHz mono PCM";
bool whisper_audio_decode_file(const char *, float **, size_t *, whisper_audio_info *) {
    wa_set_error(WA_NO_INPUT, __func__);
    return false;
}
bool whisper_audio_decode_memory(const void *, size_t, float **, size_t *, whisper_audio_info *) {
    wa_set_error(WA_NO_INPUT, __func__);
    return false;
}
whisper_audio_stream * whisper_audio_stream_open(const char *, whisper_audio_info *) {
    wa_set_error(WA_NO_INPUT, __func__);
    return nullptr;
}
whisper_audio_stream * whisper_audio_stream_open_memory(const void *, size_t, whisper_audio_info *) {
    wa_set_error(WA_NO_INPUT, __func__);
    return nullptr;
}
const char * whisper_audio_decode_warning(void) { return nullptr; }
int64_t whisper_audio_stream_read(whisper_audio_stream *, float *, size_t) {
    wa_set_error(WA_NO_INPUT, __func__);
    return -1;
}
void whisper_audio_stream_close(whisper_audio_stream *) {}
const char * whisper_audio_stream_warning(const whisper_audio_stream *) { return nullptr; }
whisper_audio_reader_params whisper_audio_reader_default_params(void) { return whisper_audio_reader_params{}; }
whisper_audio_reader * whisper_audio_reader_init(const char * const *, size_t, whisper_audio_reader_params) {
    wa_set_error(WA_NO_INPUT, __func__);
    return nullptr;
}
int64_t whisper_audio_reader_read(whisper_audio_reader *, size_t, float *, size_t) {
    wa_set_error(WA_NO_INPUT, __func__);
    return -1;
}
bool whisper_audio_reader_info(whisper_audio_reader *, size_t, whisper_audio_info *) {
    wa_set_error(WA_NO_INPUT, __func__);
    return false;
}
const char * whisper_audio_reader_warning(whisper_audio_reader *, size_t) { return nullptr; }
double whisper_audio_reader_busy_ms(whisper_audio_reader *) { return 0.0; }
void whisper_audio_reader_free(whisper_audio_reader *) {}
bool whisper_audio_resample(const float *, size_t, int, int, float **, size_t *) {
    wa_set_error(WA_NO_INPUT, __func__);
    return false;
}
#endif

void whisper_audio_pcm_free(float * pcm) { free(pcm); }

#ifndef WHISPER_AUDIO_FORMATS
bool whisper_audio_model_save_gguf(const whisper_audio_model *, const char * path) {
    wa_set_error("%s: %s: writing a GGUF is not built in: add whisper-audio-formats.cpp (with -DWHISPER_AUDIO_FORMATS)",
                 __func__, path ? path : "(null)");
    return false;
}
#endif
