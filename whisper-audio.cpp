// whisper-audio.cpp - the Whisper audio encoder, in data-flow order, one banner a part:
// errors; audio input (decoding, resampling, streaming, the reader); log-mel; model files
// (GGUF, whisper.cpp ggml, CTranslate2, Hugging Face directories, our GGUF out); the encoder
// graph (with the audio LLMs' towers); encoders; the pipeline (audio in, rows out). Each part
// uses only the parts above it. The tensor work is vt's (vt.h); the public API is
// whisper-audio.h, each call defined in the part it belongs to.
#include "whisper-audio.h"
#include "whisper-audio-arch.h"
#include "vt.h"

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

static void wa_set_error(const char * fmt, ...) {
    char buf[sizeof(g_wa_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    memcpy(g_wa_error, buf, sizeof(buf));
}

// The C API's boundary: what C++ throws inside (std::bad_alloc, std::system_error from a
// thread that cannot start) becomes an error value, as the header promises.
template <typename R, typename F> static R wa_catch(const char * func, R fail, F && f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        wa_set_error("%s: out of memory", func);
    } catch (const std::exception & e) {
        wa_set_error("%s: %s", func, e.what());
    }
    return fail;
}

// The vt backend that WHISPER_AUDIO_DEVICE_GPU (alias _CUDA) runs on: the one GPU backend there is.
static const char * const WA_GPU_BACKEND = "cuda";

// CPU threads: <= 0 means as many as the hardware runs (llama.cpp's -t convention), and
// more than that are capped to it, as vt's CPU backend does.
static int wa_n_threads(int n_threads) {
    const int hw = (int)std::max(1u, std::thread::hardware_concurrency());
    return n_threads <= 0 || n_threads > hw ? hw : n_threads;
}

// This thread's CPU time (what it computed, not the time it waited or was not scheduled).
static int64_t wa_thread_cpu_ns() {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// fn(i) for i in [0, n) on up to n_threads threads (this one among them); if the system
// refuses a thread, fewer do the work. What fn throws (out of memory) is thrown here, once
// every thread has stopped.
template <typename F> static void wa_parallel(int n, int n_threads, F && fn) {
    std::atomic<int> next{0};
    std::mutex mu;
    std::exception_ptr thrown;
    auto work = [&] {
        try {
            for (int i; (i = next.fetch_add(1)) < n;) fn(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!thrown) thrown = std::current_exception();
            next = n;                                   // the others stop too
        }
    };
    const int n_extra = std::min(n, wa_n_threads(n_threads)) - 1;
    std::vector<std::thread> threads;
    threads.reserve(std::max(0, n_extra));
    try {
        for (int t = 0; t < n_extra; t++) threads.emplace_back(work);
    } catch (const std::exception &) {}   // no more threads: this one and those started share the rest
    work();
    for (std::thread & t : threads) t.join();
    if (thrown) std::rethrow_exception(thrown);
}

// =====================================================================================
// audio input: decoding (WAV, Ogg Vorbis, FLAC, MP3, Opus), resampling, streaming
// =====================================================================================
//
// WAV rules (RIFF/WAVE, little-endian):
//   - chunks in any order; unknown chunks skipped; a pad byte follows an odd-sized chunk
//     (a writer that forgot the pad is tolerated when the unpadded offset holds a chunk id);
//   - the RIFF size field is ignored (streaming writers leave it wrong): the buffer's end
//     is the end of the file. "RF64"/"BW64" headers are read the same way: their data
//     chunk's 32-bit size is 0xFFFFFFFF, which reads to the end;
//   - a data size of 0, 0xFFFFFFFF or past the end of the input reads to the end of the
//     input; only whole frames (block_align bytes) are decoded, a trailing partial frame
//     is dropped;
//   - encodings: PCM u8 / s16 / s24 / s32, IEEE float32 / float64, and both again as
//     WAVE_FORMAT_EXTENSIBLE sub-formats. Plain PCM with 9..32 bits that are not a
//     multiple of 8 (12-bit, 20-bit) is accepted when stored MSB-aligned in a container of
//     ceil(bits / 8) bytes, as the WAVEFORMATEX spec says; it decodes as that container.
//     Packed layouts (e.g. two 12-bit samples in 3 bytes) and fewer than 8 bits are
//     rejected. block_align must equal channels * container bytes;
//   - channels 1..65535 (averaged to mono), sample rate 1000..1000000 Hz (below 1 kHz there
//     is no speech, and a 1 Hz header would turn each input byte into 16000 outputs).
// Samples scale to [-1, 1): u8 (x - 128) / 128, sN x / 2^(N-1), floats as stored.
//
// Float samples are nominally in [-1, 1]; clipped mixes go a little past 1, and those pass
// as they are. A NaN or an infinity, or a magnitude past AUDIO_FLOAT_MAX (+80 dBFS: no
// recording is that loud), means a corrupt file or another scale (floats at 16-bit integer
// scale, say). Such a file is refused, not clamped: a clamp would change the audio without
// a word, and a NaN, or a value as large as 1e30 (whose power overflows the log-mel's
// float), makes the encoder's whole window NaN.

static const uint32_t AUDIO_MIN_SAMPLE_RATE = WHISPER_AUDIO_MIN_RATE;
static const uint32_t AUDIO_MAX_SAMPLE_RATE = WHISPER_AUDIO_MAX_RATE;
static const double   AUDIO_FLOAT_MAX       = 1e4;

static const char * AUDIO_FFMPEG_HINT =
    "convert it first: ffmpeg -i input -ar 16000 -ac 1 -c:a pcm_s16le output.wav";

enum wav_encoding {
    WAV_PCM_U8,
    WAV_PCM_S16,
    WAV_PCM_S24,
    WAV_PCM_S32,
    WAV_FLOAT32,
    WAV_FLOAT64,
};

struct wav_header {
    wav_encoding enc;
    bool     extensible;
    uint32_t channels;
    uint32_t sample_rate;
    uint32_t block_align;   // bytes per frame
    uint32_t bits;          // wBitsPerSample (or wValidBitsPerSample when extensible and set)
    size_t   data_offset;   // start of the samples in the input
    size_t   data_size;     // bytes of samples (possibly a partial frame at the end)
};

// Formats the message and records it as "<name>: <message>". Always returns false.
static bool audio_fail(const char * name, const char * fmt, ...) {
    char msg[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    wa_set_error("%s: %s", name, msg);
    return false;
}

static uint16_t wav_u16(const uint8_t * p) { return (uint16_t) (p[0] | (p[1] << 8)); }
static uint32_t wav_u32(const uint8_t * p) {
    return (uint32_t) p[0] | ((uint32_t) p[1] << 8) | ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}
static bool wav_id(const uint8_t * p, const char * id) { return memcmp(p, id, 4) == 0; }

static bool wav_id_printable(const uint8_t * p) {
    for (int i = 0; i < 4; i++) {
        if (p[i] < 0x20 || p[i] > 0x7e) return false;
    }
    return true;
}

// What a non-WAV input looks like, from its magic bytes; NULL when unknown.
static const char * wav_sniff_other_format(const uint8_t * p, size_t size) {
    if (size >= 4 && wav_id(p, "OggS")) return "Ogg (Vorbis/Opus)";
    if (size >= 4 && wav_id(p, "fLaC")) return "FLAC";
    if (size >= 3 && memcmp(p, "ID3", 3) == 0) return "MP3";
    if (size >= 2 && p[0] == 0xFF && (p[1] & 0xF6) == 0xF0) return "AAC (ADTS)";
    if (size >= 2 && p[0] == 0xFF && (p[1] & 0xE0) == 0xE0) return "MP3";
    if (size >= 8 && wav_id(p + 4, "ftyp")) return "MP4/M4A";
    if (size >= 12 && wav_id(p, "FORM") && (wav_id(p + 8, "AIFF") || wav_id(p + 8, "AIFC"))) return "AIFF";
    if (size >= 4 && p[0] == 0x1A && p[1] == 0x45 && p[2] == 0xDF && p[3] == 0xA3) return "WebM/Matroska";
    if (size >= 4 && wav_id(p, "caff")) return "CAF";
    if (size >= 4 && wav_id(p, ".snd")) return "Sun AU";
    if (size >= 5 && memcmp(p, "#!AMR", 5) == 0) return "AMR";
    if (size >= 4 && wav_id(p, "wvpk")) return "WavPack";
    if (size >= 4 && wav_id(p, "MAC ")) return "Monkey's Audio";
    if (size >= 8 && p[0] == 0x30 && p[1] == 0x26 && p[2] == 0xB2 && p[3] == 0x75 &&
                     p[4] == 0x8E && p[5] == 0x66 && p[6] == 0xCF && p[7] == 0x11) return "WMA/ASF";
    return nullptr;
}

// A name for the WAVE format tags that we do not decode.
static const char * wav_tag_name(uint32_t tag) {
    switch (tag) {
        case 0x0000: return "unknown";
        case 0x0002: return "Microsoft ADPCM";
        case 0x0006: return "A-law";
        case 0x0007: return "mu-law";
        case 0x0011: return "IMA ADPCM";
        case 0x0031: return "GSM 6.10";
        case 0x0050: return "MPEG audio";
        case 0x0055: return "MP3";
        case 0x0092: return "Dolby AC-3 SPDIF";
        case 0x00FF: return "AAC";
        case 0x0161: case 0x0162: case 0x0163: return "Windows Media Audio";
        case 0x1610: return "HE-AAC";
        case 0x2000: return "Dolby AC-3";
        case 0xF1AC: return "FLAC";
        default:     return "not PCM or IEEE float";
    }
}

// Parses the fmt chunk body (size bytes) into h (encoding, channels, rate, block align).
static bool wav_parse_fmt(const char * name, const uint8_t * p, uint32_t size, wav_header * h) {
    if (size < 16) {
        return audio_fail(name, "WAV fmt chunk too small (%u bytes, need at least 16)", size);
    }
    uint32_t tag         = wav_u16(p + 0);
    uint32_t channels    = wav_u16(p + 2);
    uint32_t sample_rate = wav_u32(p + 4);
    uint32_t block_align = wav_u16(p + 12);
    uint32_t bits        = wav_u16(p + 14);
    uint32_t valid_bits  = bits;

    h->extensible = false;
    if (tag == 0xFFFE) {
        // WAVE_FORMAT_EXTENSIBLE: cbSize (22), wValidBitsPerSample, dwChannelMask, SubFormat GUID.
        // The GUID is {tag-00000-0010-8000-00AA00389B71}: the first two bytes are a plain format tag.
        static const uint8_t GUID_TAIL[14] = { 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00,
                                               0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71 };
        if (size < 40) {
            return audio_fail(name, "WAVE_FORMAT_EXTENSIBLE fmt chunk too small (%u bytes, need 40)", size);
        }
        if (wav_u16(p + 16) < 22) {
            return audio_fail(name, "malformed WAVE_FORMAT_EXTENSIBLE fmt chunk: its cbSize field says %u bytes "
                "of extension, but the extension (valid bits, channel mask, sub-format GUID) needs 22",
                wav_u16(p + 16));
        }
        const uint8_t * guid = p + 24;
        if (memcmp(guid + 2, GUID_TAIL, sizeof(GUID_TAIL)) != 0) {
            return audio_fail(name, "unsupported WAVE_FORMAT_EXTENSIBLE sub-format GUID "
                "{%08x-%04x-%04x-%02x%02x-%02x%02x%02x%02x%02x%02x}; only PCM and IEEE float are supported; %s",
                wav_u32(guid), wav_u16(guid + 4), wav_u16(guid + 6), guid[8], guid[9],
                guid[10], guid[11], guid[12], guid[13], guid[14], guid[15], AUDIO_FFMPEG_HINT);
        }
        h->extensible = true;
        tag = wav_u16(guid);
        if (wav_u16(p + 18) != 0) {
            valid_bits = wav_u16(p + 18);
        }
    }

    if (tag != 0x0001 && tag != 0x0003) {
        return audio_fail(name, "unsupported WAV encoding: format tag 0x%04x (%s)%s; "
            "only PCM and IEEE float are supported; %s",
            tag, wav_tag_name(tag), h->extensible ? " in WAVE_FORMAT_EXTENSIBLE" : "", AUDIO_FFMPEG_HINT);
    }
    if (channels == 0) {
        return audio_fail(name, "WAV header says 0 channels");
    }
    if (sample_rate < AUDIO_MIN_SAMPLE_RATE || sample_rate > AUDIO_MAX_SAMPLE_RATE) {
        return audio_fail(name, "WAV sample rate %u Hz is not supported (expected %u to %u Hz)",
            sample_rate, AUDIO_MIN_SAMPLE_RATE, AUDIO_MAX_SAMPLE_RATE);
    }

    // the container: bytes that hold one sample
    uint32_t container = 0;
    if (tag == 0x0001) {
        if (h->extensible) {
            if (bits != 8 && bits != 16 && bits != 24 && bits != 32) {
                return audio_fail(name, "WAV PCM container of %u bits per sample is not supported "
                    "(expected 8, 16, 24 or 32)", bits);
            }
            if (valid_bits > bits) {
                return audio_fail(name, "WAV valid bits per sample (%u) exceed the container (%u)",
                    valid_bits, bits);
            }
        } else if (bits < 8 || bits > 32) {
            return audio_fail(name, "WAV PCM with %u bits per sample is not supported "
                "(expected 8, 16, 24 or 32)", bits);
        }
        container = (bits + 7) / 8;   // 12-bit -> 2 bytes, MSB-aligned
        h->enc = container == 1 ? WAV_PCM_U8 : container == 2 ? WAV_PCM_S16 :
                 container == 3 ? WAV_PCM_S24 : WAV_PCM_S32;
    } else {
        if (bits != 32 && bits != 64) {
            return audio_fail(name, "WAV IEEE float with %u bits per sample is not supported "
                "(expected 32 or 64)", bits);
        }
        container = bits / 8;
        h->enc = bits == 32 ? WAV_FLOAT32 : WAV_FLOAT64;
    }

    const uint64_t frame_bytes = (uint64_t) channels * container;
    if (block_align != frame_bytes) {
        return audio_fail(name, "WAV block align %u is inconsistent with %u channel(s) of %u-byte samples "
            "(expected %llu)", block_align, channels, container, (unsigned long long) frame_bytes);
    }

    h->channels    = channels;
    h->sample_rate = sample_rate;
    h->block_align = block_align;
    h->bits        = h->extensible ? valid_bits : bits;
    return true;
}

// The message for an input that is none of the formats we read: what it looks like, and
// the command that converts it. Always returns false.
static bool wav_not_audio(const char * name, const uint8_t * p, size_t size) {
    if (size >= 4 && wav_id(p, "RIFX")) {
        return audio_fail(name, "big-endian WAV (RIFX) is not supported; %s", AUDIO_FFMPEG_HINT);
    }
    if (size >= 12 && wav_id(p, "RIFF")) {
        return audio_fail(name, "not a WAV file (a RIFF file of type '%c%c%c%c', not WAVE); %s",
            wav_id_printable(p + 8) ? p[8] : '?', wav_id_printable(p + 8) ? p[9] : '?',
            wav_id_printable(p + 8) ? p[10] : '?', wav_id_printable(p + 8) ? p[11] : '?',
            AUDIO_FFMPEG_HINT);
    }
    if (size < 12 && size >= 4 && wav_id(p, "RIFF")) {
        return audio_fail(name, "truncated WAV file (%zu bytes, the RIFF header alone needs 12)", size);
    }
    const char * other = wav_sniff_other_format(p, size);
    if (other) {
        return audio_fail(name, "not a WAV file (it looks like %s); %s", other, AUDIO_FFMPEG_HINT);
    }
    return audio_fail(name, "not a WAV file (no RIFF/WAVE header); if it is audio, %s", AUDIO_FFMPEG_HINT);
}

// Reads the little-endian sample at s and scales it to [-1, 1) (floats: as stored).
template <wav_encoding ENC>
static inline double wav_sample(const uint8_t * s) {
    switch (ENC) {
        case WAV_PCM_U8:  return ((int) s[0] - 128) * (1.0f / 128.0f);
        case WAV_PCM_S16: return (float) (int16_t) wav_u16(s) * (1.0f / 32768.0f);
        case WAV_PCM_S24: {
            int32_t v = (int32_t) (s[0] | (s[1] << 8) | (s[2] << 16));
            v = (v ^ 0x800000) - 0x800000; // sign-extend 24 -> 32 bits
            return (float) v * (1.0f / 8388608.0f);
        }
        case WAV_PCM_S32: return (float) ((double) (int32_t) wav_u32(s) * (1.0 / 2147483648.0));
        case WAV_FLOAT32: {
            uint32_t u = wav_u32(s);
            float f;
            memcpy(&f, &u, sizeof(f));
            return f;
        }
        case WAV_FLOAT64: {
            uint64_t u = (uint64_t) wav_u32(s) | ((uint64_t) wav_u32(s + 4) << 32);
            double d;
            memcpy(&d, &u, sizeof(d));
            return d;
        }
    }
    return 0.0;
}

// Decodes n_frames frames at data to mono (the average of the channels). Returns the index
// (frame * channels + channel) of the first float sample that is NaN, infinite or past
// AUDIO_FLOAT_MAX, or SIZE_MAX when there is none.
template <wav_encoding ENC>
static size_t wav_to_mono(const uint8_t * data, size_t n_frames, uint32_t channels, float * mono) {
    const bool   check = ENC == WAV_FLOAT32 || ENC == WAV_FLOAT64;   // integers are in range
    const size_t bytes = ENC == WAV_PCM_U8 ? 1 : ENC == WAV_PCM_S16 ? 2 : ENC == WAV_PCM_S24 ? 3 :
                         ENC == WAV_FLOAT64 ? 8 : 4;
    if (channels == 1) {
        for (size_t i = 0; i < n_frames; i++) {
            const double v = wav_sample<ENC>(data + i * bytes);
            if (check && !(fabs(v) <= AUDIO_FLOAT_MAX)) return i;   // (false for NaN too)
            mono[i] = (float) v;
        }
        return SIZE_MAX;
    }
    const double scale = 1.0 / channels;
    const size_t frame = bytes * channels;
    for (size_t i = 0; i < n_frames; i++) {
        const uint8_t * f = data + i * frame;
        double sum = 0.0;
        for (uint32_t c = 0; c < channels; c++) {
            const double v = wav_sample<ENC>(f + c * bytes);
            if (check && !(fabs(v) <= AUDIO_FLOAT_MAX)) return i * channels + c;
            sum += v;
        }
        mono[i] = (float) (sum * scale);
    }
    return SIZE_MAX;
}

static const char * wav_format_name(const wav_header & h) {
    switch (h.enc) {
        case WAV_PCM_U8:  return h.extensible ? "wav pcm u8 (extensible)"  : "wav pcm u8";
        case WAV_PCM_S16: return h.extensible ? "wav pcm s16 (extensible)" : "wav pcm s16";
        case WAV_PCM_S24: return h.extensible ? "wav pcm s24 (extensible)" : "wav pcm s24";
        case WAV_PCM_S32: return h.extensible ? "wav pcm s32 (extensible)" : "wav pcm s32";
        case WAV_FLOAT32: return h.extensible ? "wav float32 (extensible)" : "wav float32";
        case WAV_FLOAT64: return h.extensible ? "wav float64 (extensible)" : "wav float64";
    }
    return "wav";
}

// ----------------------------------------------------------------------------
// resampling
// ----------------------------------------------------------------------------
//
// Band-limited interpolation with a Kaiser-windowed sinc. Output sample k sits at input
// time t = k * rate_in / rate_out (sample 0 on sample 0, as sox and torchaudio align them);
// the signal is zero outside [0, n_in). With R = min(rate_in, rate_out), the filter passes
// 0 .. 0.95 * R/2 (7.6 kHz for R = 16 kHz, as sox's default bandwidth) and stops from R/2
// (8 kHz) on, so nothing aliases; designed for 90 dB with Kaiser's formulas (beta =
// 0.1102 (A - 8.7), length (A - 7.95) / (2.285 dw)): about 228 taps at the lower rate.
// Each set of coefficients is normalised to a DC gain of exactly 1.
//
// Output length: round(n_in * rate_out / rate_in), halves rounded up. (torchaudio takes the
// ceiling and sox rounds; the two differ by at most one sample.)
//
// With L / M = rate_out / rate_in in lowest terms there are L distinct sub-sample phases:
// their coefficients are precomputed as a polyphase table [L, n_taps] when it is small
// enough. Otherwise (large L, e.g. 16001 -> 16000, or 999983 -> 16000) the table holds
// P + 1 rows at the phases 0, 1/P, ..., 1, with P = RESAMPLE_FINE per zero crossing of
// the sinc, and an output between two rows is the linear interpolation of their two dot
// products (the kernel's error from that is below (pi / RESAMPLE_FINE)^2 / 8 of its peak,
// -106 dB). Its size, (P + 1) * n_taps, is about 115k floats whatever the rates, since P
// shrinks as n_taps grows; both modes cost O(taps) per output, about 230 multiply-adds per
// input sample when downsampling (twice that when interpolating).

static const double RESAMPLE_PI        = 3.14159265358979323846;
static const double RESAMPLE_PASS      = 0.95;  // passband edge, fraction of min(in, out) / 2 (sox's default)
static const double RESAMPLE_STOP      = 1.00;  // stopband edge, fraction of min(in, out) / 2
static const double RESAMPLE_ATTEN_DB  = 90.0;  // Kaiser design attenuation
static const size_t RESAMPLE_MAX_TABLE = 1u << 20; // polyphase table entries (4 MiB)
static const int    RESAMPLE_FINE      = 512;   // table rows per zero crossing (interpolated mode)
static const int    RESAMPLE_TAP_ALIGN = 8;     // taps per row rounded up to this (SIMD)

// The resampler's and the log-mel's loops again for AVX2 + FMA CPUs, picked at run time
// (GCC's target_clones): the build is for the baseline x86-64, where they ran 10-20% slower.
// Not under ThreadSanitizer: the clones' ifunc resolver is instrumented and runs before TSan starts.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define WA_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define WA_SIMD_CLONES
#endif

// Modified Bessel function of the first kind, order 0 (power series).
static double resample_bessel_i0(double x) {
    double sum = 1.0, term = 1.0;
    const double q = 0.25 * x * x;
    for (int k = 1; k < 200; k++) {
        term *= q / ((double) k * k);
        sum  += term;
        if (term < 1e-17 * sum) break;
    }
    return sum;
}

struct resample_kernel {
    double scale;     // cutoff as a fraction of the input rate, times 2: sinc(scale * tau)
    double half;      // window half-width in input samples
    double beta;      // Kaiser beta
    double i0_beta;   // I0(beta)
    int    k;         // ceil(half): taps each side of the output's input position
};

// The (unnormalised) kernel at tau input samples from its centre.
static double resample_kernel_at(const resample_kernel & kr, double tau) {
    const double r = tau / kr.half;
    if (r <= -1.0 || r >= 1.0) return 0.0;
    const double x    = kr.scale * tau;
    const double sinc = fabs(x) < 1e-12 ? 1.0 : sin(RESAMPLE_PI * x) / (RESAMPLE_PI * x);
    return kr.scale * sinc * resample_bessel_i0(kr.beta * sqrt(1.0 - r * r)) / kr.i0_beta;
}

// Eight dot products of n (a multiple of RESAMPLE_TAP_ALIGN) floats at once, y[g] = x[g] . h,
// each in 8 lanes summed in a fixed tree: they share each load of h and keep eight chains of
// multiply-adds in flight (one chain waits on its adds: 2.7x faster than one at a time on
// AVX2). Every output of the table mode goes through here, alone or not, so that it is the
// same float however the outputs were grouped (a stream's blocks, the threads' pieces).
typedef float resample_v8 __attribute__((vector_size(32)));
__attribute__((always_inline)) static inline void resample_dots8(const float * const * x, const float * h, int n, float * y) {
    resample_v8 acc[8];
    for (int g = 0; g < 8; g++) acc[g] = resample_v8{};
    for (int j = 0; j < n; j += 8) {
        resample_v8 hj, xj;                     // (memcpy: unaligned loads)
        memcpy(&hj, h + j, sizeof(hj));
        for (int g = 0; g < 8; g++) {
            memcpy(&xj, x[g] + j, sizeof(xj));
            acc[g] += xj * hj;
        }
    }
    for (int g = 0; g < 8; g++) {
        const resample_v8 a = acc[g];
        y[g] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
}

// One dot product the same way (the interpolated mode's: its outputs never take resample_dots8).
__attribute__((always_inline)) static inline float resample_dot(const float * x, const float * h, int n) {
    resample_v8 acc = {}, hj, xj;
    for (int j = 0; j < n; j += 8) {
        memcpy(&hj, h + j, sizeof(hj));
        memcpy(&xj, x + j, sizeof(xj));
        acc += xj * hj;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// One output from the taps h[0..n_taps) that start at input index first (may be out of range).
__attribute__((always_inline)) static inline float resample_tap(const float * in, int64_t n_in, int64_t first, const float * h, int n_taps) {
    if (first >= 0 && first + n_taps <= n_in) {
        return resample_dot(in + first, h, n_taps);
    }
    float acc = 0.0f; // near the edges: zeros outside the signal
    const int j0 = first < 0 ? (int) std::min<int64_t>(-first, n_taps) : 0;
    const int j1 = (int) std::max<int64_t>(std::min<int64_t>(n_in - first, n_taps), 0);
    for (int j = j0; j < j1; j++) {
        acc += in[first + j] * h[j];
    }
    return acc;
}

static int64_t resample_gcd(int64_t a, int64_t b) {
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

// The resampler's state: the filter for one pair of rates, and the position of the next
// output. whisper_audio_resample runs it once over the whole input; the stream runs it a
// block at a time (resample_run), with the same arithmetic in the same order.
struct wa_resampler {
    bool     copy = false;          // rate_in == rate_out: outputs are the inputs
    int      rate_in = 0, rate_out = 0;
    int      n_threads = 0;         // for a long run (0: every core); the reader gives each worker its share
    double   helper_cpu_ms = 0;     // CPU time of the pieces other threads ran (the reader's busy time counts it)
    resample_kernel kr = {};
    int64_t  L = 1, M = 1;          // rate_out / rate_in = L / M in lowest terms
    int64_t  step_int = 0, step_frac = 0; // M / L and M % L: input step per output
    int      n_taps = 0;            // 2 K taps rounded up to RESAMPLE_TAP_ALIGN (zeros past 2 K)
    int64_t  P = 0;                 // 0: table is [L, n_taps], row p at phase p / L; else it is
                                    // [P + 1, n_taps], row p at phase p / P, interpolated
    std::shared_ptr<const std::vector<float>> table_owner;   // shared by every resampler of these rates
    const float * table = nullptr;
    // the next output: index i, at input position n0 + phase / L
    uint64_t i = 0;
    int64_t  n0 = 0, phase = 0;
};

// round(n_in * rate_out / rate_in), halves rounded up, without overflow; false if it does not fit.
static bool resample_out_len(uint64_t n_in, int rate_in, int rate_out, uint64_t * len) {
    const uint64_t q = n_in / (uint64_t) rate_in, r = n_in % (uint64_t) rate_in;
    if (q > (UINT64_MAX / 2) / (uint64_t) rate_out) return false;
    *len = q * (uint64_t) rate_out + (r * (uint64_t) rate_out + (uint64_t) rate_in / 2) / (uint64_t) rate_in;
    return true;
}

// The table's rows, row p at phase p / L (or p / P), each normalised to sum 1.
WA_SIMD_CLONES static std::vector<float> resample_make_table(const wa_resampler & rs, int64_t rows) {
    const resample_kernel & kr = rs.kr;
    std::vector<float> table((size_t) rows * rs.n_taps, 0.0f);
    std::vector<double> row(rs.n_taps);
    for (int64_t p = 0; p < rows; p++) {
        const double frac = (double) p / (rs.P ? rs.P : rs.L);
        double sum = 0.0;
        for (int j = 0; j < 2 * kr.k; j++) {
            row[j] = resample_kernel_at(kr, frac + kr.k - 1 - j);
            sum += row[j];
        }
        for (int j = 0; j < 2 * kr.k; j++) {
            table[(size_t) p * rs.n_taps + j] = (float) (row[j] / sum);
        }
    }
    return table;
}

// The table for rs's rates, made once per process: filling it takes 4 ms at 44.1 kHz (100k
// Bessel functions), more than decoding a 5 s clip, and every input of a corpus has the same
// rate. The last RESAMPLE_CACHED pairs are kept (a resampler holds its own reference).
static const size_t RESAMPLE_CACHED = 8;
static std::shared_ptr<const std::vector<float>> resample_table_for(const wa_resampler & rs, int64_t rows) {
    typedef std::pair<std::pair<int, int>, std::shared_ptr<const std::vector<float>>> entry;
    static std::mutex mu;
    static std::deque<entry> cache;   // the most recently made last
    const std::pair<int, int> key(rs.rate_in, rs.rate_out);
    {
        std::lock_guard<std::mutex> lock(mu);
        for (const entry & e : cache) if (e.first == key) return e.second;
    }
    // made outside the lock (two threads may both make one: the same floats)
    auto table = std::make_shared<const std::vector<float>>(resample_make_table(rs, rows));
    std::lock_guard<std::mutex> lock(mu);
    for (const entry & e : cache) if (e.first == key) return e.second;
    if (cache.size() == RESAMPLE_CACHED) cache.pop_front();
    cache.emplace_back(key, table);
    return table;
}

// Designs the filter for rate_in -> rate_out (both positive) and precomputes its coefficients.
static void resample_init(wa_resampler & rs, int rate_in, int rate_out) {
    const int n_threads = rs.n_threads;
    rs = wa_resampler();
    rs.n_threads = n_threads;
    rs.rate_in  = rate_in;
    rs.rate_out = rate_out;
    rs.copy     = rate_in == rate_out;
    if (rs.copy) return;

    // the filter
    const double R = std::min(rate_in, rate_out);
    resample_kernel & kr = rs.kr;
    const double dw  = 2.0 * RESAMPLE_PI * (RESAMPLE_STOP - RESAMPLE_PASS) * 0.5 * R / rate_in; // rad / input sample
    kr.beta    = 0.1102 * (RESAMPLE_ATTEN_DB - 8.7);
    kr.i0_beta = resample_bessel_i0(kr.beta);
    kr.half    = 0.5 * (RESAMPLE_ATTEN_DB - 7.95) / (2.285 * dw);
    kr.scale   = 0.5 * (RESAMPLE_PASS + RESAMPLE_STOP) * R / rate_in;
    kr.k       = (int) ceil(kr.half);

    // output k at input position n0 + phase / L: taps from n0 - K + 1 to n0 + K
    const int64_t g = resample_gcd(rate_in, rate_out);
    rs.L         = rate_out / g;        // phases
    rs.M         = rate_in / g;         // input step per output, in 1/L
    rs.n_taps    = ((2 * kr.k + RESAMPLE_TAP_ALIGN - 1) / RESAMPLE_TAP_ALIGN) * RESAMPLE_TAP_ALIGN;
    rs.step_int  = rs.M / rs.L;
    rs.step_frac = rs.M % rs.L;

    // the table's rows: the L exact phases when they fit, else P + 1 to interpolate between
    // (a zero crossing is 1 / scale input samples)
    int64_t rows = rs.L;
    if ((uint64_t) rs.L * rs.n_taps > RESAMPLE_MAX_TABLE) {
        rs.P = (int64_t) ceil(RESAMPLE_FINE * kr.scale);
        rows = rs.P + 1;
    }
    rs.table_owner = resample_table_for(rs, rows);
    rs.table = rs.table_owner->data();
}

// The first input index that the next output (or any later one) reads.
static int64_t resample_keep(const wa_resampler & rs) {
    return rs.copy ? (int64_t) rs.i : std::max<int64_t>(0, rs.n0 - rs.kr.k + 1);
}

// Outputs [j0, j0 + n) into dst (their inputs all in in[0, n_avail), which holds [base, ...)).
// Outputs that share a phase, L apart, go through resample_dots8 RESAMPLE_GROUP at a time.
static const int RESAMPLE_GROUP = 8;

// Outputs [j0, j0 + n) into dst (their inputs all in in[0, n_avail), which holds [base, ...)).
WA_SIMD_CLONES static void resample_span(const wa_resampler & rs, const float * in, int64_t base, int64_t n_avail,
                                         uint64_t j0, size_t n, float * dst) {
    const resample_kernel & kr = rs.kr;
    const unsigned __int128 at0 = (unsigned __int128) j0 * (unsigned __int128) rs.M;
    int64_t n0 = (int64_t) (at0 / (unsigned __int128) rs.L), phase = (int64_t) (at0 % (unsigned __int128) rs.L);
    auto advance = [&] {
        n0 += rs.step_int;
        phase += rs.step_frac;
        if (phase >= rs.L) { phase -= rs.L; n0++; }
    };
    if (rs.P == 0) {
        // blocks of G L outputs: each of the first L with the G - 1 outputs L, 2 L, ... after it,
        // which have its phase and read inputs M, 2 M, ... after its own. A member past n or
        // near the signal's edges (taps outside it: resample_tap's zeros) takes no lane.
        const int    G     = RESAMPLE_GROUP;
        const size_t block = (size_t) G * (size_t) rs.L;
        for (size_t k = 0; k < n; k += block) {
            for (int64_t r = 0; r < rs.L && k + (size_t) r < n; r++) {
                const int64_t first = n0 - kr.k + 1 - base;
                const float * h = &rs.table[(size_t) phase * rs.n_taps];
                const float * x[RESAMPLE_GROUP];
                float y[RESAMPLE_GROUP];
                bool lane[RESAMPLE_GROUP], any = false;
                for (int g = 0; g < G; g++) {
                    const size_t  i = k + (size_t) r + (size_t) g * rs.L;
                    const int64_t f = first + g * rs.M;
                    lane[g] = i < n && f >= 0 && f + rs.n_taps <= n_avail;
                    x[g] = lane[g] ? in + f : h;   // (an idle lane reads the taps: any n_taps floats do)
                    any = any || lane[g];
                    if (i < n && !lane[g]) dst[i] = resample_tap(in, n_avail, f, h, rs.n_taps);
                }
                if (any) {
                    resample_dots8(x, h, rs.n_taps, y);
                    for (int g = 0; g < G; g++) if (lane[g]) dst[k + (size_t) r + (size_t) g * rs.L] = y[g];
                }
                advance();
            }
            n0 += (G - 1) * rs.M;   // the L outputs moved n0 by M (and phase back): skip the rest of the block
        }
        return;
    }
    // the interpolated mode: phase / L = (p + w) / P, between rows p and p + 1 (phase * P < 2^31 * 512)
    for (size_t k = 0; k < n; k++) {
        const int64_t first = n0 - kr.k + 1 - base;   // the first tap's input index
        const int64_t at = phase * rs.P;
        const int64_t p  = at / rs.L;
        const float   w  = (float) ((double) (at - p * rs.L) / (double) rs.L);
        const float * h0 = &rs.table[(size_t) p * rs.n_taps];
        const float   y0 = resample_tap(in, n_avail, first, h0, rs.n_taps);
        const float   y1 = resample_tap(in, n_avail, first, h0 + rs.n_taps, rs.n_taps);
        dst[k] = y0 + w * (y1 - y0);
        advance();
    }
}

// Computes up to max outputs from the next one on into y; returns how many.
// in[0, n_avail) holds the input samples [base, base + n_avail); base <= resample_keep(rs).
// final: the input ends at base + n_avail, so outputs run to its full length. Otherwise an
// output is made only once every input that its taps cover has arrived, and so it is the
// same float, bit for bit, as with the whole input at once.
static size_t resample_run(wa_resampler & rs, const float * in, int64_t base, int64_t n_avail, bool final,
                           float * y, size_t max) {
    const int64_t end = base + n_avail;
    uint64_t limit = 0;   // the output length (final), or a lower bound of it
    if (!resample_out_len((uint64_t) end, rs.rate_in, rs.rate_out, &limit)) return 0;
    if (rs.i >= limit) return 0;
    max = (size_t) std::min<uint64_t>(max, limit - rs.i);

    if (rs.copy) {
        if (max) memcpy(y, in + (rs.i - (uint64_t) base), max * sizeof(float));
        rs.i += max;
        return max;
    }

    // output j sits at input position n0 + phase / L with n0 = floor(j M / L), phase = j M mod L
    const resample_kernel & kr = rs.kr;
    typedef unsigned __int128 u128;
    size_t count = max;
    if (!final) {   // the outputs whose last tap has arrived: n0(j) - K + 1 + n_taps <= end
        const int64_t x = end + kr.k - 1 - rs.n_taps;
        if (x < rs.n0) return 0;
        const uint64_t j_max = (uint64_t) (((u128) (x + 1) * (u128) rs.L - 1) / (u128) rs.M);
        count = (size_t) std::min<uint64_t>(max, j_max - rs.i + 1);
    }
    auto run = [&](uint64_t j0, size_t n, float * dst) { resample_span(rs, in, base, n_avail, j0, n, dst); };
    // each output on its own: a long run is cut in pieces for every core (the same floats),
    // of whole blocks of resample_span's groups where they are not too long
    const size_t block = (size_t) RESAMPLE_GROUP * (size_t) rs.L;
    const size_t piece = rs.P == 0 && block <= 65536 ? (8192 + block - 1) / block * block : 8192;
    if (count >= 2 * piece) {
        const int n_pieces = (int) ((count + piece - 1) / piece);
        const std::thread::id caller = std::this_thread::get_id();
        std::atomic<int64_t> helper_ns{0};
        wa_parallel(n_pieces, rs.n_threads, [&](int c) {
            const bool helper = std::this_thread::get_id() != caller;
            const int64_t t0 = helper ? wa_thread_cpu_ns() : 0;
            const size_t k0 = (size_t) c * piece;
            run(rs.i + k0, std::min(piece, count - k0), y + k0);
            if (helper) helper_ns += wa_thread_cpu_ns() - t0;
        });
        rs.helper_cpu_ms += (double) helper_ns.load() * 1e-6;
    } else {
        run(rs.i, count, y);
    }
    rs.i += count;
    const u128 at = (u128) rs.i * (u128) rs.M;
    rs.n0 = (int64_t) (at / (u128) rs.L);
    rs.phase = (int64_t) (at % (u128) rs.L);
    return count;
}

// Whether inputs up to index end are every input that the next n outputs read.
static bool resample_covered(const wa_resampler & rs, int64_t end, size_t n) {
    const unsigned __int128 at = (unsigned __int128) (rs.i + n - 1) * (unsigned __int128) rs.M;
    return (int64_t) (at / (unsigned __int128) rs.L) - rs.kr.k + 1 + rs.n_taps <= end;
}

bool whisper_audio_resample(const float * in, size_t n_in, int rate_in, int rate_out,
                            float ** out, size_t * n_out) {
    if (out)   *out   = nullptr;
    if (n_out) *n_out = 0;
    if (!out || !n_out || (!in && n_in > 0)) {
        wa_set_error("whisper_audio_resample: invalid argument (in, out and n_out must not be NULL)");
        return false;
    }
    // the rates every decoder accepts: beyond them the filter's length (taps grow with the
    // downsampling ratio) and the phase arithmetic have no bound
    if (rate_in < (int) AUDIO_MIN_SAMPLE_RATE || rate_in > (int) AUDIO_MAX_SAMPLE_RATE ||
        rate_out < (int) AUDIO_MIN_SAMPLE_RATE || rate_out > (int) AUDIO_MAX_SAMPLE_RATE) {
        wa_set_error("whisper_audio_resample: invalid sample rates %d -> %d Hz (each must be %u to %u Hz)", rate_in, rate_out,
                     AUDIO_MIN_SAMPLE_RATE, AUDIO_MAX_SAMPLE_RATE);
        return false;
    }
    if (n_in > (size_t) INT64_MAX / 2) {
        wa_set_error("whisper_audio_resample: input too long (%zu samples)", n_in);
        return false;
    }

    uint64_t len = 0;
    if (!resample_out_len(n_in, rate_in, rate_out, &len) || len > SIZE_MAX / sizeof(float)) {
        wa_set_error("whisper_audio_resample: output too long (%zu samples at %d Hz -> %d Hz)", n_in, rate_in, rate_out);
        return false;
    }
    float * y = (float *) malloc(std::max<uint64_t>(len, 1) * sizeof(float));
    if (!y) {
        wa_set_error("whisper_audio_resample: out of memory (%llu samples)", (unsigned long long) len);
        return false;
    }
    wa_resampler rs;
    resample_init(rs, rate_in, rate_out);
    resample_run(rs, in, 0, (int64_t) n_in, true, y, (size_t) len);

    *out   = y;
    *n_out = (size_t) len;
    return true;
}

// ----------------------------------------------------------------------------
// streaming decode: WAV, Ogg Vorbis, FLAC, MP3 and Opus, a block at a time
// ----------------------------------------------------------------------------
//
// One path decodes everything: whisper_audio_decode_file and _decode_memory read a stream
// to its end. The stream reads its input through a small buffer (wa_reader: a FILE, stdin
// or a memory block), decodes a block of frames, mixes it to mono and feeds the resampler,
// which keeps only the inputs that later outputs still need. Memory is bounded by the
// block size and the filter length, not by the length of the input.
//
// The format is found from the content, never from the file name: "RIFF"/"RF64"/"BW64" +
// "WAVE" is WAV; "OggS" is Ogg, and the first packet says Vorbis, Opus or FLAC; "fLaC" is
// FLAC; an MPEG audio frame header is MP3 (or MP2); an ID3v2 tag is skipped and what follows
// decides. Each compressed format goes through its reference decoder, built in when its
// library is found (WHISPER_AUDIO_OGG: Xiph's libvorbisfile, docs/FUZZING.md says why not
// stb_vorbis; WHISPER_AUDIO_FLAC: libFLAC; WHISPER_AUDIO_MP3: libmpg123; WHISPER_AUDIO_OPUS:
// Xiph's opusfile). Each one reads through a callback that only reads, never seeks, so files,
// memory and pipes take the same path and nothing is scanned ahead (docs/FUZZING.md says why
// not libsndfile, which needs seeking). Anything else gets a message that names the format
// where it is recognisable, and the ffmpeg command.
//
// Streaming WAV: the chunks are read in order; a data chunk that comes before the fmt
// chunk is found again by seeking back, which a pipe cannot do (an error there).

#ifdef WHISPER_AUDIO_OGG
#include <vorbis/vorbisfile.h>
#endif
#ifdef WHISPER_AUDIO_FLAC
#include <FLAC/stream_decoder.h>
#endif
#ifdef WHISPER_AUDIO_MP3
#include <mpg123.h>
#endif
#ifdef WHISPER_AUDIO_OPUS
#include <opusfile.h>
#endif

static const size_t WA_READ_BUF     = (size_t) 1 << 16;  // reader buffer (grows to hold a frame)
static const size_t WA_BLOCK_BYTES  = (size_t) 1 << 16;  // WAV bytes decoded per block
static const int    WA_OGG_BLOCK    = 4096;              // Vorbis frames asked per block
static const size_t WA_DEC_BLOCK    = 16384;             // floats per MP3/Opus read (interleaved)
static const size_t WA_MP3_FEED     = 16384;             // bytes given to mpg123 at a time

// The input, read through a buffer. Memory inputs are read in place.
struct wa_reader {
    FILE *          f = nullptr;        // a file or stdin; nullptr for memory
    bool            own_f = false;      // fclose on close (not stdin)
    const uint8_t * p = nullptr;        // the bytes: the memory input itself, or buf
    size_t          pos = 0, end = 0;   // unread bytes are p[pos, end)
    std::vector<uint8_t> buf;           // a file's buffer (p == buf.data())
    uint64_t        off = 0;            // input offset of p[pos]
    bool            at_eof = false;     // nothing follows p[end)
    int             err = 0;            // errno of a failed read
    bool            seekable = false;   // memory, or a regular file
    int64_t         size = -1;          // the input's size when known
};

// Makes at least n unread bytes available where the input has them; returns how many are.
static size_t rd_fill(wa_reader & r, size_t n) {
    if (r.end - r.pos >= n || r.at_eof || !r.f) return r.end - r.pos;
    const size_t have = r.end - r.pos;
    if (r.buf.size() < n || r.buf.size() < WA_READ_BUF) {
        std::vector<uint8_t> grown(std::max(n, WA_READ_BUF));
        if (have) memcpy(grown.data(), r.p + r.pos, have);
        r.buf.swap(grown);
    } else if (have && r.pos) {
        memmove(r.buf.data(), r.buf.data() + r.pos, have);
    }
    r.p = r.buf.data();
    r.pos = 0;
    r.end = have;
    const size_t asked = r.buf.size() - r.end;
    const size_t got   = fread(r.buf.data() + r.end, 1, asked, r.f);
    r.end += got;
    if (got < asked) {   // fread stops short only at the end or on an error
        r.at_eof = true;
        if (ferror(r.f)) r.err = errno ? errno : EIO;
    }
    return r.end - r.pos;
}

// Moves to input offset to (clamped to the size of a memory input). False if it cannot.
static bool rd_seek(wa_reader & r, uint64_t to) {
    if (!r.f) {
        to = std::min<uint64_t>(to, (uint64_t) r.size);
        r.pos = (size_t) to;
        r.off = to;
        return true;
    }
    const uint64_t buf_start = r.off - r.pos;   // the input offset of p[0]
    if (to >= buf_start && to - buf_start <= r.end) {
        r.pos = (size_t) (to - buf_start);
        r.off = to;
        return true;
    }
    if (!r.seekable || to > (uint64_t) INT64_MAX || fseeko(r.f, (off_t) to, SEEK_SET) != 0) return false;
    clearerr(r.f);
    r.pos = r.end = 0;
    r.off = to;
    r.at_eof = false;
    return true;
}

// Skips n bytes (fewer at the end of the input); returns how many it skipped.
static uint64_t rd_skip(wa_reader & r, uint64_t n) {
    uint64_t done = 0;
    while (done < n) {
        size_t have = r.end - r.pos;
        if (have == 0) {
            if (r.f && r.seekable && r.size >= 0 && n - done > WA_READ_BUF) {
                // a long skip in a regular file: seek, up to its end
                const uint64_t to = std::min<uint64_t>(r.off + (n - done), (uint64_t) r.size);
                const uint64_t from = r.off;
                if (to > from && rd_seek(r, to)) {
                    done += to - from;
                    if (to == (uint64_t) r.size) break;
                    continue;
                }
            }
            have = rd_fill(r, 1);
            if (have == 0) break;
        }
        const size_t k = (size_t) std::min<uint64_t>(have, n - done);
        r.pos += k;
        r.off += k;
        done  += k;
    }
    return done;
}

#if defined(WHISPER_AUDIO_OGG) || defined(WHISPER_AUDIO_FLAC) || defined(WHISPER_AUDIO_OPUS)
// Copies up to n bytes to dst; returns how many (for the decoders' read callbacks).
static size_t rd_read(wa_reader & r, void * dst, size_t n) {
    size_t done = 0;
    while (done < n) {
        size_t have = r.end - r.pos;
        if (have == 0 && (have = rd_fill(r, std::min(n - done, WA_READ_BUF))) == 0) break;
        const size_t k = std::min(have, n - done);
        memcpy((uint8_t *) dst + done, r.p + r.pos, k);
        r.pos += k;
        r.off += k;
        done  += k;
    }
    return done;
}
#endif

enum wa_codec { WA_CODEC_WAV, WA_CODEC_VORBIS, WA_CODEC_FLAC, WA_CODEC_MP3, WA_CODEC_OPUS };

struct whisper_audio_stream {
    std::string name;               // prefixes every message: the path, "<stdin>" or "<memory>"
    wa_reader   rd;
    wa_codec    codec = WA_CODEC_WAV;
    const char * format = "";       // info->format of a compressed format ("flac", "mp3", ...)
    int         sample_rate = 0;
    int         channels = 0;
    int         bits = 0;           // FLAC's bits per sample (0 for the lossy formats)
    int64_t     frames_total = -1;  // the length the header says (FLAC, MP3 with a Xing/LAME tag), or -1
    int64_t     frames_said = -1;   // a WAV's: its data chunk's size in frames (-1: to the end)
    bool        cut = false;        // the input ends inside a frame (a FLAC of unknown length)
    std::string warning;            // at the end: the input was not the length its header says
    std::vector<float> dec;         // interleaved decoder output (MP3, Opus)

    // WAV
    wav_header  wav = {};
    uint64_t    data_left = 0;      // bytes of the data chunk not read yet (UINT64_MAX: to the end)

#ifdef WHISPER_AUDIO_OGG
    OggVorbis_File vf;
    bool        vf_open = false;
    int         vf_link = 0;        // the link (chained stream section) of the last samples
#endif
#ifdef WHISPER_AUDIO_FLAC
    FLAC__StreamDecoder * flac = nullptr;
    int         flac_status = -1;   // the first error libFLAC reported (FLAC__StreamDecoderErrorStatus)
    bool        flac_refused = false; // the write callback refused a frame (its message is set)
    bool        flac_ogg = false;   // FLAC in Ogg (read front to back only)
    uint64_t    flac_start = 0;     // the input offset where the FLAC stream begins (after an ID3 tag)
#endif
#ifdef WHISPER_AUDIO_MP3
    mpg123_handle * mp3 = nullptr;
    int         mp3_channels = 0;   // of the current frames (mpg123 may switch mono <-> stereo)
    uint64_t    mp3_fed = 0;        // bytes given to mpg123
    std::vector<uint8_t> mp3_tail;  // the last of them (MP3_TAIL), to tell a cut frame at the end
#endif
#ifdef WHISPER_AUDIO_OPUS
    OggOpusFile * opus = nullptr;
#endif

    int64_t     frames_in = 0;      // frames decoded so far
    bool        src_end = false;    // the decoder has no more frames
    bool        failed = false;     // an error: every later read fails with its message
    char        error[512] = "";

    // the resampler and its input: mono samples [hist_base, hist_base + hist.size())
    wa_resampler       rs;
    std::vector<float> hist;
    int64_t            hist_base = 0;
};

// The error for a float sample that is NaN, infinite or past AUDIO_FLOAT_MAX; frame counts
// from 0, channel from 0 (said from 1).
static void wav_bad_sample(const whisper_audio_stream * s, int64_t frame, int channel, double v) {
    char where[96];
    snprintf(where, sizeof(where), "sample %lld (channel %d of %d, at %.3f s)", (long long) frame, channel + 1,
        s->channels, (double) frame / s->sample_rate);
    if (!std::isfinite(v)) {
        audio_fail(s->name.c_str(), "%s is %s: the file is corrupt", where,
            std::isnan(v) ? "NaN" : v < 0 ? "-inf" : "+inf");
    } else {
        audio_fail(s->name.c_str(), "%s is %g, far outside the [-1, 1] of audio samples (the limit is %g): "
            "the file is corrupt or uses another scale; if it is audio, normalise it first "
            "(sox input.wav output.wav norm)", where, v, AUDIO_FLOAT_MAX);
    }
}

// ---- WAV ----------------------------------------------------------------------------

// Reads the chunks up to the samples: h, data_left, the reader at the first sample.
static bool wav_stream_open(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    wa_reader & r = s->rd;
    wav_header & h = s->wav;
    rd_skip(r, 12);     // "RIFF" <size> "WAVE", checked by the caller; the size is ignored

    bool have_fmt = false, have_data = false, data_before_fmt = false;
    uint64_t data_off = 0, data_size = 0;
    for (;;) {
        if (rd_fill(r, 8) < 8) break;
        uint8_t ck[8];
        memcpy(ck, r.p + r.pos, 8);
        rd_skip(r, 8);
        const uint32_t ck_size = wav_u32(ck + 4);

        if (wav_id(ck, "fmt ")) {
            // wav_parse_fmt reads at most the first 40 bytes
            uint8_t body[64];
            const size_t want = std::min<uint32_t>(ck_size, sizeof(body));
            const size_t got  = std::min(rd_fill(r, want), want);
            memcpy(body, r.p + r.pos, got);
            const uint64_t present = rd_skip(r, ck_size);
            if (got < want || present < ck_size) {
                return audio_fail(name, "WAV fmt chunk truncated (%u bytes declared, %llu present)",
                    ck_size, (unsigned long long) present);
            }
            if (!have_fmt) {
                if (!wav_parse_fmt(name, body, ck_size, &h)) return false;
                have_fmt = true;
            }
        } else if (wav_id(ck, "data")) {
            // a size of 0 or 0xFFFFFFFF (streaming writers, RF64): the samples run to the end
            const bool to_end = ck_size == 0 || ck_size == 0xFFFFFFFFu;
            if (have_fmt) {
                if (!have_data) {
                    data_off  = r.off;
                    data_size = to_end ? UINT64_MAX : ck_size;
                    have_data = true;
                }
                break;
            }
            if (to_end) break;  // samples to the end and no fmt before them
            if (!have_data) {
                if (!r.seekable) {
                    return audio_fail(name, "the WAV data chunk comes before the fmt chunk, and a pipe cannot "
                        "seek back to it; save it to a file first, or %s", AUDIO_FFMPEG_HINT);
                }
                data_off  = r.off;
                data_size = ck_size;
                have_data = true;
                data_before_fmt = true;
            }
            if (rd_skip(r, ck_size) < ck_size) break;
        } else if (rd_skip(r, ck_size) < ck_size) {
            break; // a truncated trailing chunk we do not need
        }

        // the pad byte after an odd size; tolerate writers that forget it: prefer the padded
        // offset unless only the unpadded one holds something that looks like a chunk id
        if (ck_size & 1) {
            const size_t got = rd_fill(r, 9);
            if (got >= 9 && !wav_id_printable(r.p + r.pos + 1) && wav_id_printable(r.p + r.pos)) {
                // no pad
            } else if (got >= 1) {
                rd_skip(r, 1);
            }
        }
    }
    if (r.err) {
        return audio_fail(name, "read error: %s", strerror(r.err));
    }
    if (!have_fmt) {
        return audio_fail(name, "WAV file has no fmt chunk");
    }
    if (!have_data) {
        return audio_fail(name, "WAV file has no data chunk");
    }
    if (data_before_fmt && !rd_seek(r, data_off)) {
        return audio_fail(name, "cannot seek back to the WAV data chunk: %s", strerror(errno));
    }

    // at least one whole frame
    const uint64_t present = std::min<uint64_t>(data_size, rd_fill(r, h.block_align));
    if (present < h.block_align) {
        return audio_fail(name, "WAV file contains no audio samples (data chunk of %llu bytes, %u bytes per frame)",
            (unsigned long long) present, h.block_align);
    }
    h.data_offset = (size_t) data_off;
    s->data_left  = data_size;
    s->frames_said = data_size == UINT64_MAX ? -1 : (int64_t) (data_size / h.block_align);
    s->sample_rate = (int) h.sample_rate;
    s->channels    = (int) h.channels;
    return true;
}

// The number of frames the stream will decode, when it is known ahead; else -1.
static int64_t wav_stream_frames(const whisper_audio_stream * s) {
    uint64_t bytes = s->data_left;
    if (s->rd.size >= 0) {
        bytes = std::min<uint64_t>(bytes, (uint64_t) s->rd.size - std::min<uint64_t>(s->rd.off, (uint64_t) s->rd.size));
    } else if (bytes == UINT64_MAX) {
        return -1;
    }
    return (int64_t) (bytes / s->wav.block_align);
}

// Decodes the next block of frames to mono at the end of s->hist; returns the count (0 at the end).
static int64_t wav_stream_block(whisper_audio_stream * s) {
    wa_reader & r = s->rd;
    const wav_header & h = s->wav;
    const uint32_t ba = h.block_align;
    uint64_t want = std::max<uint64_t>(1, WA_BLOCK_BYTES / ba);
    if (s->data_left != UINT64_MAX) want = std::min<uint64_t>(want, s->data_left / ba);
    if (want == 0) return 0;    // the data chunk is done (a trailing partial frame is dropped)

    const size_t got = rd_fill(r, (size_t) want * ba);
    const size_t n_frames = (size_t) std::min<uint64_t>(got / ba, want);
    if (r.err) {
        audio_fail(s->name.c_str(), "read error: %s", strerror(r.err));
        return -1;
    }
    if (n_frames == 0) return 0;  // the end of the input (a partial frame is dropped)

    const size_t old = s->hist.size();
    s->hist.resize(old + n_frames);
    float * mono = s->hist.data() + old;
    const uint8_t * data = r.p + r.pos;
    size_t bad = SIZE_MAX;
    switch (h.enc) {
        case WAV_PCM_U8:  bad = wav_to_mono<WAV_PCM_U8> (data, n_frames, h.channels, mono); break;
        case WAV_PCM_S16: bad = wav_to_mono<WAV_PCM_S16>(data, n_frames, h.channels, mono); break;
        case WAV_PCM_S24: bad = wav_to_mono<WAV_PCM_S24>(data, n_frames, h.channels, mono); break;
        case WAV_PCM_S32: bad = wav_to_mono<WAV_PCM_S32>(data, n_frames, h.channels, mono); break;
        case WAV_FLOAT32: bad = wav_to_mono<WAV_FLOAT32>(data, n_frames, h.channels, mono); break;
        case WAV_FLOAT64: bad = wav_to_mono<WAV_FLOAT64>(data, n_frames, h.channels, mono); break;
    }
    if (bad != SIZE_MAX) {
        const uint8_t * p = data + bad * (ba / h.channels);
        const double v = h.enc == WAV_FLOAT32 ? wav_sample<WAV_FLOAT32>(p) : wav_sample<WAV_FLOAT64>(p);
        wav_bad_sample(s, s->frames_in + (int64_t) (bad / h.channels), (int) (bad % h.channels), v);
        return -1;
    }
    rd_skip(r, (uint64_t) n_frames * ba);
    if (s->data_left != UINT64_MAX) s->data_left -= (uint64_t) n_frames * ba;
    return (int64_t) n_frames;
}

// ---- Ogg ----------------------------------------------------------------------------

// The codec of an Ogg stream, from the first packet of its first page; NULL when unknown,
// "" when the input ends before a byte of that packet. An input cut inside the packet's
// signature is taken for the codec whose signature it begins (a cut Opus file is a cut Opus
// file, not "not Vorbis").
static const char * ogg_sniff_codec(const uint8_t * p, size_t size) {
    if (size < 4 || !wav_id(p, "OggS")) return nullptr;
    if (size < 27 || size <= 27 + (size_t) p[26]) return "";
    const size_t body = 27 + (size_t) p[26];   // after the segment table
    const uint8_t * q = p + body;
    const size_t have = size - body;
    static const struct { const char * sig; size_t len; const char * codec; } SIGS[] = {
        {"\x01vorbis", 7, "Vorbis"}, {"OpusHead", 8, "Opus"}, {"\x7f" "FLAC", 5, "FLAC"}, {"Speex   ", 8, "Speex"},
        {"\x80theora", 7, "Theora (video)"},
    };
    for (const auto & k : SIGS)
        if (memcmp(q, k.sig, std::min(have, k.len)) == 0) return k.codec;
    return nullptr;
}

#ifdef WHISPER_AUDIO_OGG

// libvorbisfile's I/O callbacks over our reader. vorbisfile takes a read of 0 bytes with
// errno set as a read error, so errno is set on every return of 0.
static size_t ogg_cb_read(void * ptr, size_t size, size_t nmemb, void * src) {
    wa_reader & r = *(wa_reader *) src;
    if (size == 0 || nmemb > SIZE_MAX / size) { errno = EINVAL; return 0; }
    const size_t got = rd_read(r, ptr, size * nmemb) / size;
    errno = got == 0 && r.err ? r.err : 0;
    return got;
}

static const char * ogg_error_name(long rc) {
    switch (rc) {
        case OV_EREAD:      return "read error";
        case OV_EFAULT:     return "internal decoder error";
        case OV_EIMPL:      return "a feature the decoder does not implement";
        case OV_EINVAL:     return "invalid argument";
        case OV_ENOTVORBIS: return "not Vorbis data";
        case OV_EBADHEADER: return "invalid Vorbis header";
        case OV_EVERSION:   return "unsupported Vorbis version";
        case OV_EBADLINK:   return "invalid stream section";
        case OV_ENOSEEK:    return "not seekable";
        default:            return "corrupt data";
    }
}

static bool ogg_stream_open(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    wa_reader & r = s->rd;

    // always opened as a stream (no seek callback), files as pipes: vorbisfile's seekable open
    // scans the whole file for its length, which is more code exposed to hostile input, and
    // it leaks on some malformed chained files (xiph/vorbis issue 125). So info->frames is -1.
    const ov_callbacks cb = { ogg_cb_read, nullptr, nullptr, nullptr };
    const int rc = ov_open_callbacks(&r, &s->vf, nullptr, 0, cb);
    if (rc < 0) {   // vorbisfile has already released what it allocated
        // it says "not Vorbis data" also when the input ends inside the headers
        if (rc != OV_EREAD && rd_fill(r, 1) == 0) {
            return audio_fail(name, "not a valid Ogg Vorbis stream: the input ends after %llu bytes, before its "
                "Vorbis headers are complete (truncated or corrupt headers; libvorbisfile %d); if it is audio, %s",
                (unsigned long long) r.off, rc, AUDIO_FFMPEG_HINT);
        }
        return audio_fail(name, "not a valid Ogg Vorbis stream (%s, libvorbisfile %d); if it is audio, %s",
            ogg_error_name(rc), rc, AUDIO_FFMPEG_HINT);
    }
    s->vf_open = true;
    const vorbis_info * vi = ov_info(&s->vf, -1);
    if (!vi || vi->channels < 1) {
        return audio_fail(name, "Ogg Vorbis stream with %d channels", vi ? vi->channels : 0);
    }
    if (vi->rate < (long) AUDIO_MIN_SAMPLE_RATE || vi->rate > (long) AUDIO_MAX_SAMPLE_RATE) {
        return audio_fail(name, "Ogg Vorbis sample rate %ld Hz is not supported (expected %u to %u Hz)",
            vi->rate, AUDIO_MIN_SAMPLE_RATE, AUDIO_MAX_SAMPLE_RATE);
    }
    s->sample_rate = (int) vi->rate;
    s->channels    = vi->channels;
    s->codec       = WA_CODEC_VORBIS;
    s->format      = "ogg vorbis";
    return true;
}

// Decodes the next block of frames to mono at the end of s->hist; returns the count (0 at the end).
static int64_t ogg_stream_block(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    float ** pcm = nullptr;
    int link = 0;
    long got = ov_read_float(&s->vf, &pcm, WA_OGG_BLOCK, &link);
    if (got == OV_HOLE && s->vf.current_link != s->vf_link) {
        // vorbisfile (1.3.7), reading a chained stream without seeking, submits the last header
        // page of each new link twice, which libogg reports as a hole; nothing is lost
        s->vf_link = s->vf.current_link;
        got = ov_read_float(&s->vf, &pcm, WA_OGG_BLOCK, &link);
    }
    // Damage is an error, as a broken header is: the audio would go on with a gap (a hole:
    // pages lost or failing their checksum), so that later windows shift in time, or stop
    // early (no end-of-stream page: a writer flags the last page when it closes the stream).
    // A WAV cannot tell: a data chunk shorter than its size field is read as it is, as
    // streaming writers leave that field wrong.
    const double at = (double) s->frames_in / s->sample_rate;
    if (got == OV_HOLE) {
        audio_fail(name, "corrupt Ogg Vorbis stream: pages are missing or damaged after %.3f s of audio; "
            "to decode what is there, %s", at, AUDIO_FFMPEG_HINT);
        return -1;
    }
    if (got < 0) {
        audio_fail(name, "corrupt Ogg Vorbis stream (%s, libvorbisfile %ld)", ogg_error_name(got), got);
        return -1;
    }
    if (got == 0) {
        if (!ogg_stream_eos(&s->vf.os)) {
            audio_fail(name, "truncated Ogg Vorbis stream: the input ends after %.3f s of audio without the "
                "stream's last page (the end-of-stream flag); to decode what is there, %s", at, AUDIO_FFMPEG_HINT);
            return -1;
        }
        return 0;
    }

    // a chained stream may change the channels (mixed per block), not the rate
    const vorbis_info * vi = ov_info(&s->vf, link);
    if (!vi || vi->channels < 1 || vi->rate != s->sample_rate) {
        audio_fail(name, "a chained Ogg Vorbis stream whose sample rate changes (%d -> %ld Hz) is not supported; %s",
            s->sample_rate, vi ? vi->rate : 0L, AUDIO_FFMPEG_HINT);
        return -1;
    }
    const int channels = vi->channels;
    s->vf_link = link;
    const size_t old = s->hist.size();
    s->hist.resize(old + (size_t) got);
    float * mono = s->hist.data() + old;
    if (channels == 1) {
        memcpy(mono, pcm[0], (size_t) got * sizeof(float));
    } else {
        const double scale = 1.0 / channels;  // the average of the channels, as WAV
        for (long i = 0; i < got; i++) {
            double sum = 0.0;
            for (int c = 0; c < channels; c++) sum += pcm[c][i];
            mono[i] = (float) (sum * scale);
        }
    }
    return got;
}

#endif // WHISPER_AUDIO_OGG

// Appends n interleaved frames of x to s->hist as mono (the average of the channels, as WAV).
[[maybe_unused]] static void wa_append_mono(whisper_audio_stream * s, const float * x, size_t n, int channels) {
    const size_t old = s->hist.size();
    s->hist.resize(old + n);
    float * mono = s->hist.data() + old;
    if (channels == 1) {
        memcpy(mono, x, n * sizeof(float));
        return;
    }
    const double scale = 1.0 / channels;
    for (size_t i = 0; i < n; i++) {
        double sum = 0.0;
        for (int c = 0; c < channels; c++) sum += x[i * channels + c];
        mono[i] = (float) (sum * scale);
    }
}

// The error for a format that this build has no decoder for: what to install, or ffmpeg.
[[maybe_unused]] static bool wa_fail_unbuilt(const char * name, const char * what, const char * support, const char * macro,
                            const char * lib, const char * package) {
    return audio_fail(name, "%s file, and this build of whisper-audio has no %s support (build it with -D%s and -l%s: "
        "apt-get install %s, and make finds it); or %s", what, support, macro, lib, package, AUDIO_FFMPEG_HINT);
}

// ---- FLAC ---------------------------------------------------------------------------

#ifdef WHISPER_AUDIO_FLAC

// libFLAC's callbacks. A stream is read front to back, without seek, tell, length or eof
// callbacks (the end of the input is a read of 0 bytes); the reader's later segments of a long
// FLAC file reopen it with them (flac_stream_seek).
static FLAC__StreamDecoderReadStatus flac_cb_read(const FLAC__StreamDecoder *, FLAC__byte buf[], size_t * n, void * src) {
    wa_reader & r = ((whisper_audio_stream *) src)->rd;
    *n = rd_read(r, buf, *n);
    if (r.err) return FLAC__STREAM_DECODER_READ_STATUS_ABORT;
    return *n ? FLAC__STREAM_DECODER_READ_STATUS_CONTINUE : FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
}

static FLAC__StreamDecoderSeekStatus flac_cb_seek(const FLAC__StreamDecoder *, FLAC__uint64 to, void * src) {
    return rd_seek(((whisper_audio_stream *) src)->rd, to) ? FLAC__STREAM_DECODER_SEEK_STATUS_OK
                                                          : FLAC__STREAM_DECODER_SEEK_STATUS_ERROR;
}

static FLAC__StreamDecoderTellStatus flac_cb_tell(const FLAC__StreamDecoder *, FLAC__uint64 * at, void * src) {
    *at = ((whisper_audio_stream *) src)->rd.off;
    return FLAC__STREAM_DECODER_TELL_STATUS_OK;
}

static FLAC__StreamDecoderLengthStatus flac_cb_length(const FLAC__StreamDecoder *, FLAC__uint64 * n, void * src) {
    *n = (FLAC__uint64) ((whisper_audio_stream *) src)->rd.size;
    return FLAC__STREAM_DECODER_LENGTH_STATUS_OK;
}

static FLAC__bool flac_cb_eof(const FLAC__StreamDecoder *, void * src) {
    return rd_fill(((whisper_audio_stream *) src)->rd, 1) == 0;
}

static void flac_cb_metadata(const FLAC__StreamDecoder *, const FLAC__StreamMetadata * m, void * src) {
    whisper_audio_stream * s = (whisper_audio_stream *) src;
    if (m->type != FLAC__METADATA_TYPE_STREAMINFO) return;
    s->sample_rate  = (int) m->data.stream_info.sample_rate;
    s->channels     = (int) m->data.stream_info.channels;
    s->bits         = (int) m->data.stream_info.bits_per_sample;
    s->frames_total = m->data.stream_info.total_samples ? (int64_t) m->data.stream_info.total_samples : -1;
}

static void flac_cb_error(const FLAC__StreamDecoder *, FLAC__StreamDecoderErrorStatus status, void * src) {
    whisper_audio_stream * s = (whisper_audio_stream *) src;
    if (s->flac_status < 0) s->flac_status = (int) status;
}

// A decoded frame, to mono at the end of s->hist. Integers scale as WAV's: x / 2^(bits - 1),
// each channel rounded to float before the average, so a FLAC made from a WAV decodes to its
// samples bit for bit.
static FLAC__StreamDecoderWriteStatus flac_cb_write(const FLAC__StreamDecoder *, const FLAC__Frame * frame,
                                                    const FLAC__int32 * const buf[], void * src) {
    whisper_audio_stream * s = (whisper_audio_stream *) src;
    const FLAC__FrameHeader & h = frame->header;
    if ((int) h.sample_rate != s->sample_rate) {
        audio_fail(s->name.c_str(), "a FLAC stream whose sample rate changes (%d -> %u Hz at %.3f s) is not supported; %s",
            s->sample_rate, h.sample_rate, (double) s->frames_in / s->sample_rate, AUDIO_FFMPEG_HINT);
        s->flac_refused = true;
        return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    }
    const double k = ldexp(1.0, 1 - (int) h.bits_per_sample);
    const double scale = 1.0 / h.channels;
    const size_t old = s->hist.size();
    s->hist.resize(old + h.blocksize);
    float * mono = s->hist.data() + old;
    for (unsigned i = 0; i < h.blocksize; i++) {
        double sum = 0.0;
        for (unsigned c = 0; c < h.channels; c++) sum += (float) (buf[c][i] * k);
        mono[i] = h.channels == 1 ? (float) sum : (float) (sum * scale);
    }
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
}

// Native FLAC ("fLaC"), or FLAC in Ogg.
static bool flac_stream_open(whisper_audio_stream * s, bool ogg) {
    const char * name = s->name.c_str();
    const char * what = ogg ? "Ogg FLAC" : "FLAC";
    s->flac = FLAC__stream_decoder_new();
    if (!s->flac) return audio_fail(name, "out of memory opening the %s decoder", what);
    s->flac_ogg = ogg;
    s->flac_start = s->rd.off;
    const FLAC__StreamDecoderInitStatus st = ogg ?
        FLAC__stream_decoder_init_ogg_stream(s->flac, flac_cb_read, nullptr, nullptr, nullptr, nullptr, flac_cb_write,
                                             flac_cb_metadata, flac_cb_error, s) :
        FLAC__stream_decoder_init_stream(s->flac, flac_cb_read, nullptr, nullptr, nullptr, nullptr, flac_cb_write,
                                         flac_cb_metadata, flac_cb_error, s);
    if (st != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
        return audio_fail(name, "cannot decode %s (libFLAC: %s)", what, FLAC__StreamDecoderInitStatusString[st]);
    }
    const bool ok = FLAC__stream_decoder_process_until_end_of_metadata(s->flac);
    if (s->rd.err) return audio_fail(name, "read error: %s", strerror(s->rd.err));
    if (!ok || s->flac_status >= 0 || s->sample_rate == 0) {
        return audio_fail(name, "not a valid %s stream: %s after %llu bytes; if it is audio, %s", what,
            s->flac_status >= 0 ? FLAC__StreamDecoderErrorStatusString[s->flac_status] :
            FLAC__stream_decoder_get_state(s->flac) == FLAC__STREAM_DECODER_END_OF_STREAM ?
                "the input ends before its headers are complete (truncated)" :
            s->sample_rate == 0 ? "no STREAMINFO header" :
            FLAC__StreamDecoderStateString[FLAC__stream_decoder_get_state(s->flac)],
            (unsigned long long) s->rd.off, AUDIO_FFMPEG_HINT);
    }
    // (libFLAC checks the channels, 1..8, and the bits, 4..32)
    if (s->sample_rate < (int) AUDIO_MIN_SAMPLE_RATE || s->sample_rate > (int) AUDIO_MAX_SAMPLE_RATE) {
        return audio_fail(name, "%s sample rate %d Hz is not supported (expected %u to %u Hz)", what,
            s->sample_rate, AUDIO_MIN_SAMPLE_RATE, AUDIO_MAX_SAMPLE_RATE);
    }
    s->codec  = WA_CODEC_FLAC;
    s->format = ogg ? "ogg flac" : "flac";
    return true;
}

// Decodes the next frame(s) to mono at the end of s->hist; returns the count (0 at the end).
// Damage is an error, as a hole in Ogg is: a frame that fails its CRC, or lost sync with
// frames after it (a gap). Lost sync with nothing after it is a cut inside the last frame, and
// a stream that ends before the length its STREAMINFO says is cut too: what is there is
// decoded (the stream's warning says so), as are frames past that length; bytes that are not
// a frame after it (an ID3v1 tag) end the stream.
static int64_t flac_stream_block(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    const double at = (double) s->frames_in / s->sample_rate;
    const int lost_sync = FLAC__STREAM_DECODER_ERROR_STATUS_LOST_SYNC;
    const size_t old = s->hist.size();
    while (s->hist.size() == old) {
        if (FLAC__stream_decoder_get_state(s->flac) == FLAC__STREAM_DECODER_END_OF_STREAM) break;
        const bool ok = FLAC__stream_decoder_process_single(s->flac);
        if (s->flac_refused) return -1;
        if (s->rd.err) {
            audio_fail(name, "read error: %s", strerror(s->rd.err));
            return -1;
        }
        if (!ok) {
            audio_fail(name, "corrupt FLAC stream (libFLAC: %s) after %.3f s of audio",
                FLAC__StreamDecoderStateString[FLAC__stream_decoder_get_state(s->flac)], at);
            return -1;
        }
        if (s->flac_status >= 0 && s->flac_status != lost_sync) break;
    }
    const int64_t got = (int64_t) (s->hist.size() - old);
    if ((s->flac_status >= 0 && s->flac_status != lost_sync) || (s->flac_status == lost_sync && got > 0)) {
        audio_fail(name, "corrupt FLAC stream (%s) after %.3f s of audio; to decode what is there, %s",
            FLAC__StreamDecoderErrorStatusString[s->flac_status], at, AUDIO_FFMPEG_HINT);
        return -1;
    }
    // the end: a cut inside the last frame is noted (a length the header says is compared by
    // the stream), bytes after the length it says are not audio
    if (got == 0 && s->flac_status == lost_sync && !(s->frames_total >= 0 && s->frames_in >= s->frames_total)) s->cut = true;
    return got;
}

// Output frame `first` next: the decoder made anew with seek callbacks, its headers read again,
// then libFLAC's seek (a binary search over the frames, or the SEEKTABLE), whose write callback
// leaves the samples from `first` on in s->hist.
static bool flac_stream_seek(whisper_audio_stream * s, int64_t first) {
    const char * name = s->name.c_str();
    FLAC__stream_decoder_finish(s->flac);
    if (!rd_seek(s->rd, s->flac_start)) return audio_fail(name, "cannot seek in the FLAC file: %s", strerror(errno));
    const FLAC__StreamDecoderInitStatus st =
        FLAC__stream_decoder_init_stream(s->flac, flac_cb_read, flac_cb_seek, flac_cb_tell, flac_cb_length, flac_cb_eof,
                                         flac_cb_write, flac_cb_metadata, flac_cb_error, s);
    if (st != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
        return audio_fail(name, "cannot decode FLAC (libFLAC: %s)", FLAC__StreamDecoderInitStatusString[st]);
    }
    s->hist.clear();
    s->flac_status = -1;
    if (!FLAC__stream_decoder_process_until_end_of_metadata(s->flac) || !FLAC__stream_decoder_seek_absolute(s->flac, first) ||
        s->flac_refused || s->flac_status >= 0) {
        if (!s->flac_refused) {
            audio_fail(name, "cannot seek to %.3f s in the FLAC stream (libFLAC: %s)", (double) first / s->sample_rate,
                       FLAC__StreamDecoderStateString[FLAC__stream_decoder_get_state(s->flac)]);
        }
        return false;
    }
    s->hist_base = first;
    s->frames_in = first + (int64_t) s->hist.size();
    return true;
}

#endif // WHISPER_AUDIO_FLAC

// ---- MP3 ----------------------------------------------------------------------------

// An MPEG audio frame header: the 11-bit sync, then no reserved value in the version, layer,
// bitrate or sample rate fields (what tells it from ADTS AAC and from random bytes).
static bool mp3_frame_header(const uint8_t * p, size_t size) {
    return size >= 4 && p[0] == 0xFF && (p[1] & 0xE0) == 0xE0 && (p[1] & 0x18) != 0x08 && (p[1] & 0x06) != 0 &&
           (p[2] & 0xF0) != 0xF0 && (p[2] & 0x0C) != 0x0C;
}

#ifdef WHISPER_AUDIO_MP3

static const size_t MP3_TAIL = 8192;   // more than the largest frame (2881 bytes, MPEG 2.5 layer II at 8 kHz)

// mpg123_read, feeding mpg123 from the reader while it asks for more (mpg123's feed mode:
// no seeking, and it holds at most what it was last given). MPG123_NEED_MORE at the end.
static int mp3_read(whisper_audio_stream * s, size_t * done) {
    wa_reader & r = s->rd;
    for (;;) {
        const int rc = mpg123_read(s->mp3, s->dec.data(), s->dec.size() * sizeof(float), done);
        if (rc != MPG123_NEED_MORE || *done > 0) return rc;
        const size_t have = std::min(rd_fill(r, 1), WA_MP3_FEED);
        if (have == 0) return MPG123_NEED_MORE;
        if (mpg123_feed(s->mp3, r.p + r.pos, have) != MPG123_OK) return MPG123_ERR;
        const size_t keep = std::min(have, MP3_TAIL);
        if (s->mp3_tail.size() + keep > MP3_TAIL) s->mp3_tail.erase(s->mp3_tail.begin(), s->mp3_tail.end() - (MP3_TAIL - keep));
        s->mp3_tail.insert(s->mp3_tail.end(), r.p + r.pos + have - keep, r.p + r.pos + have);
        s->mp3_fed += have;
        rd_skip(r, have);
    }
}

// The output format after MPG123_NEW_FORMAT: the rate must stay, the channels may change.
static bool mp3_new_format(whisper_audio_stream * s) {
    long rate = 0;
    int channels = 0, enc = 0;
    if (mpg123_getformat(s->mp3, &rate, &channels, &enc) != MPG123_OK || channels < 1 || rate < 1) {
        return audio_fail(s->name.c_str(), "corrupt MP3 stream (libmpg123: %s)", mpg123_strerror(s->mp3));
    }
    if (s->sample_rate && rate != s->sample_rate) {
        return audio_fail(s->name.c_str(), "an MP3 stream whose sample rate changes (%d -> %ld Hz at %.3f s) is not "
            "supported; %s", s->sample_rate, rate, (double) s->frames_in / s->sample_rate, AUDIO_FFMPEG_HINT);
    }
    s->sample_rate  = (int) rate;
    s->mp3_channels = channels;
    return true;
}

static bool mp3_stream_open(whisper_audio_stream * s) {
    static const int init = mpg123_init();   // once (a no-op since mpg123 1.27)
    const char * name = s->name.c_str();
    int err = init;
    s->mp3 = err == MPG123_OK ? mpg123_new(nullptr, &err) : nullptr;
    if (!s->mp3) return audio_fail(name, "cannot start the MP3 decoder (libmpg123: %s)", mpg123_plain_strerror(err));
    // quiet (a library does not print), gapless (the encoder's delay and padding are cut, as
    // the LAME tag says), float at the stream's own rate and channels (no resampling in mpg123)
    mpg123_param(s->mp3, MPG123_ADD_FLAGS, MPG123_QUIET | MPG123_GAPLESS, 0.0);
    mpg123_format_none(s->mp3);
    const long * rates = nullptr;
    size_t n_rates = 0;
    mpg123_rates(&rates, &n_rates);
    for (size_t i = 0; i < n_rates; i++) mpg123_format(s->mp3, rates[i], MPG123_MONO | MPG123_STEREO, MPG123_ENC_FLOAT_32);
    if (mpg123_open_feed(s->mp3) != MPG123_OK) {
        return audio_fail(name, "cannot start the MP3 decoder (libmpg123: %s)", mpg123_strerror(s->mp3));
    }
    s->dec.resize(WA_DEC_BLOCK);

    // the first frame gives the format
    size_t done = 0;
    const int rc = mp3_read(s, &done);
    if (s->rd.err) return audio_fail(name, "read error: %s", strerror(s->rd.err));
    if (rc != MPG123_NEW_FORMAT) {
        return audio_fail(name, "not a valid MP3 stream: %s after %llu bytes; if it is audio, %s",
            rc == MPG123_NEED_MORE || rc == MPG123_DONE ? "no complete MPEG audio frame" : mpg123_strerror(s->mp3),
            (unsigned long long) s->rd.off, AUDIO_FFMPEG_HINT);
    }
    if (!mp3_new_format(s)) return false;
    mpg123_frameinfo fi;
    const bool have_fi = mpg123_info(s->mp3, &fi) == MPG123_OK;
    const off_t len = mpg123_length(s->mp3);   // from a Xing/LAME tag; unknown without one (no seeking)
    s->channels     = s->mp3_channels;
    s->frames_total = len > 0 ? (int64_t) len : -1;
    s->codec        = WA_CODEC_MP3;
    s->format       = !have_fi || fi.layer == 3 ? "mp3" : fi.layer == 2 ? "mp2" : "mp1";
    return true;
}

// Decodes the next frame(s) to mono at the end of s->hist; returns the count (0 at the end).
// mpg123 skips over damaged data (MP3 frames carry no checksum, mostly) and resyncs; a stream
// that ends before the length its Xing/LAME tag says is an error.
static int64_t mp3_stream_block(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    for (;;) {
        size_t done = 0;
        const int rc = mp3_read(s, &done);
        const size_t n = done / (sizeof(float) * (size_t) s->mp3_channels);
        if (n > 0) {
            wa_append_mono(s, s->dec.data(), n, s->mp3_channels);
            return (int64_t) n;
        }
        if (rc == MPG123_OK) continue;
        if (rc == MPG123_NEW_FORMAT) {
            if (!mp3_new_format(s)) return -1;
            continue;
        }
        if (s->rd.err) {
            audio_fail(name, "read error: %s", strerror(s->rd.err));
            return -1;
        }
        const double at = (double) s->frames_in / s->sample_rate;
        if (rc != MPG123_NEED_MORE && rc != MPG123_DONE) {
            audio_fail(name, "corrupt MP3 stream after %.3f s of audio (libmpg123: %s)", at, mpg123_strerror(s->mp3));
            return -1;
        }
        // the end; shorter than its Xing/LAME tag says: the stream's warning says so. Without
        // a tag, a file cut inside its last frame: the frame mpg123 parsed last (framesize
        // counts its header) runs past the end, or the start of a frame header follows it (an
        // ID3v1 or APE tag there starts otherwise)
        mpg123_frameinfo fi;
        if (s->frames_total < 0 && mpg123_info(s->mp3, &fi) == MPG123_OK) {
            const uint64_t end  = (uint64_t) mpg123_framepos(s->mp3) + (uint64_t) fi.framesize;
            const uint64_t tail = s->mp3_fed - s->mp3_tail.size();   // the fed offset of mp3_tail[0]
            if (end > s->mp3_fed) {
                s->cut = true;
            } else if (end >= tail && end < s->mp3_fed) {
                const uint8_t * p = s->mp3_tail.data() + (end - tail);
                const size_t    n = (size_t) (s->mp3_fed - end);
                s->cut = n >= 4 ? mp3_frame_header(p, n) : p[0] == 0xFF && (n < 2 || (p[1] & 0xE0) == 0xE0);
            }
        }
        return 0;
    }
}

#endif // WHISPER_AUDIO_MP3

// ---- Opus ---------------------------------------------------------------------------

#ifdef WHISPER_AUDIO_OPUS

// opusfile's read callback (no seek or tell: a stream, as Vorbis; so info->frames is -1).
static int opus_cb_read(void * src, unsigned char * ptr, int n) {
    wa_reader & r = *(wa_reader *) src;
    const size_t got = rd_read(r, ptr, (size_t) n);
    return got == 0 && r.err ? -1 : (int) got;
}

static const char * opus_error_name(int rc) {
    switch (rc) {
        case OP_HOLE:          return "pages missing or damaged";
        case OP_EREAD:         return "read error";
        case OP_EFAULT:        return "internal decoder error";
        case OP_EIMPL:         return "a feature the decoder does not implement";
        case OP_ENOTFORMAT:    return "not Opus data";
        case OP_EBADHEADER:    return "invalid Opus header";
        case OP_EVERSION:      return "unsupported Opus version";
        case OP_EBADPACKET:    return "invalid packet";
        case OP_EBADLINK:      return "invalid stream section";
        case OP_EBADTIMESTAMP: return "invalid timestamp";
        default:               return "corrupt data";
    }
}

static bool opus_stream_open(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    wa_reader & r = s->rd;
    const OpusFileCallbacks cb = { opus_cb_read, nullptr, nullptr, nullptr };
    int rc = 0;
    s->opus = op_open_callbacks(&r, &cb, nullptr, 0, &rc);
    if (!s->opus) {
        if (rc != OP_EREAD && rd_fill(r, 1) == 0) {
            return audio_fail(name, "not a valid Ogg Opus stream: the input ends after %llu bytes, before its Opus "
                "headers are complete (truncated or corrupt headers; opusfile %d); if it is audio, %s",
                (unsigned long long) r.off, rc, AUDIO_FFMPEG_HINT);
        }
        return audio_fail(name, "not a valid Ogg Opus stream (%s, opusfile %d); if it is audio, %s",
            opus_error_name(rc), rc, AUDIO_FFMPEG_HINT);
    }
    s->sample_rate = 48000;   // Opus always decodes at 48 kHz (the header's input rate is a note)
    s->channels    = op_channel_count(s->opus, -1);
    s->codec       = WA_CODEC_OPUS;
    s->format      = "ogg opus";
    s->dec.resize(WA_DEC_BLOCK);   // >= 255 channels x 64 frames
    return true;
}

// Decodes the next packet(s) to mono at the end of s->hist; returns the count (0 at the end).
// A hole (pages lost or failing their checksum) is an error, as in Vorbis.
static int64_t opus_stream_block(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    int link = 0;
    const int got = op_read_float(s->opus, s->dec.data(), (int) s->dec.size(), &link);
    const double at = (double) s->frames_in / s->sample_rate;
    if (got == OP_HOLE) {
        audio_fail(name, "corrupt Ogg Opus stream: pages are missing or damaged after %.3f s of audio; "
            "to decode what is there, %s", at, AUDIO_FFMPEG_HINT);
        return -1;
    }
    if (got < 0) {
        audio_fail(name, "corrupt Ogg Opus stream (%s, opusfile %d) after %.3f s of audio", opus_error_name(got), got, at);
        return -1;
    }
    // a chained stream may change the channels (mixed per block); the rate is always 48 kHz
    wa_append_mono(s, s->dec.data(), (size_t) got, op_channel_count(s->opus, link));
    return got;
}

#endif // WHISPER_AUDIO_OPUS

// ---- the stream -------------------------------------------------------------------------

static void wa_stream_free(whisper_audio_stream * s) {
    if (!s) return;
#ifdef WHISPER_AUDIO_OGG
    if (s->vf_open) ov_clear(&s->vf);  // its close callback is NULL: the FILE is ours
#endif
#ifdef WHISPER_AUDIO_FLAC
    if (s->flac) FLAC__stream_decoder_delete(s->flac);
#endif
#ifdef WHISPER_AUDIO_MP3
    if (s->mp3) mpg123_delete(s->mp3);
#endif
#ifdef WHISPER_AUDIO_OPUS
    if (s->opus) op_free(s->opus);
#endif
    if (s->rd.own_f && s->rd.f) fclose(s->rd.f);
    delete s;
}

// Ogg: the codec of the first stream picks the decoder.
static bool ogg_open(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    wa_reader & r = s->rd;
    const size_t have = rd_fill(r, 27 + 255 + 8);
    const char * codec = ogg_sniff_codec(r.p + r.pos, have);
    if (codec && !*codec) {
        return audio_fail(name, "truncated Ogg file: the input ends after %zu bytes, inside its first page; if it is audio, %s",
            have, AUDIO_FFMPEG_HINT);
    }
    if (codec && strcmp(codec, "Opus") == 0) {
#ifdef WHISPER_AUDIO_OPUS
        return opus_stream_open(s);
#else
        return wa_fail_unbuilt(name, "an Ogg Opus", "Opus", "WHISPER_AUDIO_OPUS", "opusfile", "libopusfile-dev");
#endif
    }
    if (codec && strcmp(codec, "FLAC") == 0) {
#ifdef WHISPER_AUDIO_FLAC
        return flac_stream_open(s, true);
#else
        return wa_fail_unbuilt(name, "an Ogg FLAC", "FLAC", "WHISPER_AUDIO_FLAC", "FLAC", "libflac-dev");
#endif
    }
    if (codec && strcmp(codec, "Vorbis") != 0) {
        return audio_fail(name, "an Ogg %s stream; whisper-audio decodes Ogg Vorbis, Opus and FLAC; %s", codec,
            AUDIO_FFMPEG_HINT);
    }
    // Vorbis, or nothing recognisable: vorbisfile says what is wrong
#ifdef WHISPER_AUDIO_OGG
    return ogg_stream_open(s);
#else
    return wa_fail_unbuilt(name, codec ? "an Ogg Vorbis" : "an Ogg (Vorbis/Opus)", "Ogg", "WHISPER_AUDIO_OGG",
        "vorbisfile", "libvorbis-dev");
#endif
}

// Skips ID3v2 tags: MP3's metadata, also found in front of FLAC. A tag is "ID3", version (2
// bytes), flags, its size in 4 x 7 bits, and 10 bytes more with a footer (flag 0x10).
static bool id3_skip(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    wa_reader & r = s->rd;
    while (rd_fill(r, 3) >= 3 && memcmp(r.p + r.pos, "ID3", 3) == 0) {
        const size_t have = rd_fill(r, 10);
        const uint8_t * h = r.p + r.pos;
        if (have < 10 || ((h[6] | h[7] | h[8] | h[9]) & 0x80)) {
            return audio_fail(name, "an MP3 file (ID3 tag) whose tag header is %s; if it is audio, %s",
                have < 10 ? "truncated" : "corrupt", AUDIO_FFMPEG_HINT);
        }
        const uint64_t size = 10 + ((uint64_t) h[6] << 21 | h[7] << 14 | h[8] << 7 | h[9]) + (h[5] & 0x10 ? 10 : 0);
        if (rd_skip(r, size) < size) {
            return audio_fail(name, "truncated file: the input ends inside its ID3v2 tag (%llu bytes), before the MP3 or "
                "FLAC audio after it; if it is audio, %s",
                (unsigned long long) size, AUDIO_FFMPEG_HINT);
        }
    }
    return true;
}

// FLAC or MP3, after any ID3v2 tag.
static bool flac_mp3_open(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    if (!id3_skip(s)) return false;
    wa_reader & r = s->rd;
    const size_t head = rd_fill(r, 4);
    const uint8_t * p = r.p + r.pos;
    if (head >= 4 && wav_id(p, "fLaC")) {
#ifdef WHISPER_AUDIO_FLAC
        return flac_stream_open(s, false);
#else
        return wa_fail_unbuilt(name, "a FLAC", "FLAC", "WHISPER_AUDIO_FLAC", "FLAC", "libflac-dev");
#endif
    }
    if (mp3_frame_header(p, head)) {
#ifdef WHISPER_AUDIO_MP3
        return mp3_stream_open(s);
#else
        return wa_fail_unbuilt(name, "an MP3", "MP3", "WHISPER_AUDIO_MP3", "mpg123", "libmpg123-dev");
#endif
    }
    return audio_fail(name, "an ID3 tag, but neither MP3 nor FLAC audio after it; if it is audio, %s", AUDIO_FFMPEG_HINT);
}

// Finds the format, reads the headers and fills info. Takes s; NULL on error.
static whisper_audio_stream * wa_stream_start(whisper_audio_stream * s, whisper_audio_info * info) {
    const char * name = s->name.c_str();
    wa_reader & r = s->rd;
    const size_t head = rd_fill(r, 12);
    const uint8_t * p = r.p + r.pos;
    bool ok;
    if (r.err) {
        ok = audio_fail(name, "read error: %s", strerror(r.err));
    } else if (head == 0) {
        ok = audio_fail(name, "%s is empty (0 bytes)", s->rd.f == stdin ? "standard input" : r.f ? "file" : "input");
    } else if (head >= 4 && wav_id(p, "OggS")) {
        ok = ogg_open(s);
    } else if (head >= 12 && (wav_id(p, "RIFF") || wav_id(p, "RF64") || wav_id(p, "BW64")) && wav_id(p + 8, "WAVE")) {
        ok = wav_stream_open(s);
    } else if ((head >= 3 && memcmp(p, "ID3", 3) == 0) || (head >= 4 && wav_id(p, "fLaC")) || mp3_frame_header(p, head)) {
        ok = flac_mp3_open(s);
    } else {
        ok = wav_not_audio(name, p, head);
    }
    if (!ok) {
        wa_stream_free(s);
        return nullptr;
    }

    resample_init(s->rs, s->sample_rate, WHISPER_AUDIO_SAMPLE_RATE);
    if (info) {
        memset(info, 0, sizeof(*info));
        info->sample_rate = s->sample_rate;
        info->channels    = s->channels;
        if (s->codec == WA_CODEC_WAV) {
            info->bits_per_sample = (int) s->wav.bits;
            snprintf(info->format, sizeof(info->format), "%s", wav_format_name(s->wav));
            info->frames = wav_stream_frames(s);
        } else {
            // (-1 frames for Ogg Vorbis and Opus: they are read as streams, ogg_stream_open says why)
            info->bits_per_sample = s->bits;
            snprintf(info->format, sizeof(info->format), "%s", s->format);
            info->frames = s->frames_total;
        }
    }
    return s;
}

whisper_audio_stream * whisper_audio_stream_open(const char * path, whisper_audio_info * info) {
    if (info) memset(info, 0, sizeof(*info));
    if (!path) {
        wa_set_error("whisper_audio_stream_open: invalid argument (path must not be NULL)");
        return nullptr;
    }
    try {
        whisper_audio_stream * s = new whisper_audio_stream();
        wa_reader & r = s->rd;
        if (strcmp(path, "-") == 0) {
            s->name = "<stdin>";
            r.f = stdin;
        } else {
            s->name = path;
            r.f = fopen(path, "rb");
            r.own_f = true;
            if (!r.f) {
                const int e = errno;
                audio_fail(path, "cannot open: %s", strerror(e));
                delete s;
                return nullptr;
            }
        }
        struct stat st;
        if (fstat(fileno(r.f), &st) == 0 && S_ISREG(st.st_mode)) {
            const off_t at = ftello(r.f);
            r.seekable = at >= 0;
            r.off      = at >= 0 ? (uint64_t) at : 0;
            r.size     = (int64_t) st.st_size;
        }
        return wa_stream_start(s, info);
    } catch (const std::bad_alloc &) {
        wa_set_error("%s: out of memory opening the stream", path);
        return nullptr;
    }
}

// The same over a memory block (not copied: it must outlive the stream).
static whisper_audio_stream * wa_stream_open_memory(const void * data, size_t size, whisper_audio_info * info) {
    whisper_audio_stream * s = new whisper_audio_stream();
    s->name       = "<memory>";
    s->rd.p       = (const uint8_t *) data;
    s->rd.end     = size;
    s->rd.at_eof  = true;
    s->rd.seekable = true;
    s->rd.size    = (int64_t) size;
    return wa_stream_start(s, info);
}

// At the end of a stream: when it decoded another length than its header says (a cut file, a
// FLAC whose STREAMINFO is wrong), or ended inside a frame, the one-line warning that says so.
static void wa_stream_note_length(whisper_audio_stream * s) {
    const int64_t said = s->codec == WA_CODEC_WAV ? s->frames_said : s->frames_total;
    const double rate = s->sample_rate, got = (double) s->frames_in / rate;
    char msg[512];
    if (said >= 0 && s->frames_in < said) {
        snprintf(msg, sizeof(msg), "%s: the input ends after %.3f s of audio, but its header says %.3f s (cut short?); "
                 "decoded what is there", s->name.c_str(), got, (double) said / rate);
    } else if (said >= 0 && s->frames_in > said) {
        snprintf(msg, sizeof(msg), "%s: the input holds %.3f s of audio, more than the %.3f s its header says; decoded all of it",
                 s->name.c_str(), got, (double) said / rate);
    } else if (s->cut) {
        snprintf(msg, sizeof(msg), "%s: the input ends inside a frame after %.3f s of audio (cut short?); decoded what is there",
                 s->name.c_str(), got);
    } else {
        return;
    }
    s->warning = msg;
}

int64_t whisper_audio_stream_read(whisper_audio_stream * s, float * out, size_t max) {
    if (!s || (!out && max > 0)) {
        wa_set_error("whisper_audio_stream_read: invalid argument (stream and out must not be NULL)");
        return -1;
    }
    if (s->failed) {
        wa_set_error("%s", s->error);
        return -1;
    }
    try {
        size_t k = 0;
        while (k < max) {
            // resampling: decode until the input covers every output asked for (or ends), so that
            // one resample_run makes them together, on every core
            if (s->rs.copy || s->src_end || resample_covered(s->rs, s->hist_base + (int64_t) s->hist.size(), max - k)) {
                k += resample_run(s->rs, s->hist.data(), s->hist_base, (int64_t) s->hist.size(), s->src_end,
                                  out + k, max - k);
                if (k == max || s->src_end) break;
            }

            // drop the inputs that no later output reads, then decode the next block
            const int64_t keep = std::min<int64_t>(resample_keep(s->rs), s->hist_base + (int64_t) s->hist.size());
            if (keep > s->hist_base) {
                s->hist.erase(s->hist.begin(), s->hist.begin() + (keep - s->hist_base));
                s->hist_base = keep;
            }
            int64_t got = -1;
            switch (s->codec) {
                case WA_CODEC_WAV:    got = wav_stream_block(s);  break;
#ifdef WHISPER_AUDIO_OGG
                case WA_CODEC_VORBIS: got = ogg_stream_block(s);  break;
#endif
#ifdef WHISPER_AUDIO_FLAC
                case WA_CODEC_FLAC:   got = flac_stream_block(s); break;
#endif
#ifdef WHISPER_AUDIO_MP3
                case WA_CODEC_MP3:    got = mp3_stream_block(s);  break;
#endif
#ifdef WHISPER_AUDIO_OPUS
                case WA_CODEC_OPUS:   got = opus_stream_block(s); break;
#endif
                default: VT_ASSERT(!"a codec that this build does not have");
            }
            if (got < 0) {
                // the samples made before the error are returned first (a cut file's audio
                // reaches the caller); the next read gives the error
                s->failed = true;
                snprintf(s->error, sizeof(s->error), "%s", whisper_audio_last_error());
                if (k == 0) return -1;
                break;
            }
            if (got == 0) {
                s->src_end = true;
                wa_stream_note_length(s);
            }
            s->frames_in += got;
        }
        return (int64_t) k;
    } catch (const std::bad_alloc &) {
        s->failed = true;
        wa_set_error("%s: out of memory while decoding", s->name.c_str());
        snprintf(s->error, sizeof(s->error), "%s", whisper_audio_last_error());
        return -1;
    }
}

const char * whisper_audio_stream_warning(const whisper_audio_stream * s) {
    return s && !s->warning.empty() ? s->warning.c_str() : nullptr;
}

void whisper_audio_stream_close(whisper_audio_stream * s) {
    wa_stream_free(s);
}

// ---- whole inputs ---------------------------------------------------------------------

// Reads s to its end into one malloc'ed buffer, then closes it.
static bool wa_stream_read_all(whisper_audio_stream * s, float ** pcm, size_t * n, whisper_audio_info * info) {
    if (!s) return false;
    // the expected length when the input says (one allocation), else grow by doubling
    size_t cap = (size_t) 1 << 16;
    uint64_t expect = 0;
    if (info && info->frames >= 0 &&
        resample_out_len((uint64_t) info->frames, s->sample_rate, WHISPER_AUDIO_SAMPLE_RATE, &expect) &&
        expect < SIZE_MAX / sizeof(float) - 1) {
        cap = (size_t) expect + 1;   // + 1: the read that finds the end needs no growth
    }
    float * buf = (float *) malloc(cap * sizeof(float));
    size_t size = 0;
    bool ok = buf != nullptr;
    if (!ok) audio_fail(s->name.c_str(), "out of memory (%zu samples)", cap);
    while (ok) {
        if (size == cap) {
            float * grown = cap <= SIZE_MAX / sizeof(float) / 2 ? (float *) realloc(buf, 2 * cap * sizeof(float)) : nullptr;
            if (!grown) {
                ok = audio_fail(s->name.c_str(), "out of memory (%zu samples)", 2 * cap);
                break;
            }
            buf = grown;
            cap *= 2;
        }
        const int64_t got = whisper_audio_stream_read(s, buf + size, cap - size);
        if (got < 0) ok = false;
        if (got <= 0) break;
        size += (size_t) got;
    }
    if (ok && s->frames_in == 0) {
        ok = audio_fail(s->name.c_str(), "the file contains no audio samples");
    }
    if (ok && info) {
        info->frames = s->frames_in;   // what was decoded, whatever the header said
    }
    whisper_audio_stream_close(s);
    if (!ok) {
        free(buf);
        return false;
    }
    *pcm = buf;
    *n   = size;
    return true;
}

bool whisper_audio_decode_memory(const void * data, size_t size, float ** pcm, size_t * n, whisper_audio_info * info) {
    if (pcm) *pcm = nullptr;
    if (n)   *n   = 0;
    if (!pcm || !n || (!data && size > 0)) {
        wa_set_error("whisper_audio_decode_memory: invalid argument (pcm, n and data must not be NULL)");
        return false;
    }
    if (size == 0) {
        return audio_fail("<memory>", "empty input (0 bytes)");
    }
    try {
        whisper_audio_info local;
        whisper_audio_info * inf = info ? info : &local;
        return wa_stream_read_all(wa_stream_open_memory(data, size, inf), pcm, n, inf);
    } catch (const std::bad_alloc &) {
        return audio_fail("<memory>", "out of memory");
    }
}

bool whisper_audio_decode_file(const char * path, float ** pcm, size_t * n, whisper_audio_info * info) {
    if (pcm) *pcm = nullptr;
    if (n)   *n   = 0;
    if (!path || !pcm || !n) {
        wa_set_error("whisper_audio_decode_file: invalid argument (path, pcm and n must not be NULL)");
        return false;
    }
    whisper_audio_info local;
    whisper_audio_info * inf = info ? info : &local;
    return wa_stream_read_all(whisper_audio_stream_open(path, inf), pcm, n, inf);
}

void whisper_audio_pcm_free(float * pcm) {
    free(pcm);
}

// ---- many inputs: the reader, a pool of decoding workers ahead of the caller ----------------
//
// Each input is decoded by one worker through a stream, start to end, into chunks; the
// caller takes the chunks of input 0, then input 1, ...: the same floats as one stream
// (resampling pieces included), whatever the number of workers. A long PCM WAV in a file
// (wa_stream_seek_output) is cut into segments of READER_SEGMENT samples that several workers
// decode at once, each through a stream of its own started at its first output: the same
// floats again, since an output depends on its inputs alone. Workers take the segments and
// inputs in order, and stay ahead of the caller within READER_AHEAD inputs and max_buffered
// samples: those of the input the caller reads within max_buffered of where it reads (so the
// next segments come first and the caller's own can always go on), those of later inputs
// within max_buffered in all.

static const size_t READER_CHUNK   = (size_t) 1 << 18;   // samples a worker decodes at a time (16 s)
static const size_t READER_SEGMENT = (size_t) 1 << 20;   // of a long WAV: 65 s

struct wa_reader_segment {
    uint64_t first = 0, count = UINT64_MAX;   // its outputs (UINT64_MAX: to the input's end)
    bool started = false;                     // a worker has it
    bool ended = false, failed = false;       // its worker is done with it: all of it, or an error
    bool last = false;                        // its stream ended before its count: the input ends here
    std::string error;
    std::deque<std::vector<float>> chunks;
    size_t front = 0;                         // samples of chunks.front() already read
};

struct wa_reader_input {
    std::string path;
    bool opened = false;                  // info is set (or failed: it did not open)
    bool cancelled = false;               // the caller moved past it
    whisper_audio_info info = {};
    std::string warning;
    std::deque<wa_reader_segment> segs;   // one, or a long WAV's segments (a deque: they stay put)
    size_t cur = 0;                       // the segment the caller reads
    uint64_t read_pos = 0;                // samples the caller has read
    bool done() const {
        for (const wa_reader_segment & g : segs) if (g.failed || (g.ended && g.last)) return true;
        return segs.back().ended;
    }
};

struct whisper_audio_reader {
    whisper_audio_reader_params params = {};
    std::vector<wa_reader_input> inputs;
    std::mutex mu;
    std::condition_variable changed;      // any of the state below
    size_t next = 0;                      // the next input a worker opens
    size_t current = 0;                   // the input the caller reads
    size_t buffered = 0;                  // samples in every input's chunks
    int    busy = 0;                      // workers decoding now
    bool   stop = false;
    double busy_ms = 0;                   // decoding time summed over the workers
    int    max_workers = 1;               // the pool's size: started as inputs or segments need them
    std::vector<std::thread> workers;     // (grown under mu; joined by free once stop is set)
};

static const size_t READER_AHEAD_MIN = 16;   // inputs a worker may be ahead of the caller: max(this, 4 workers)

// Whether a just-opened stream can be moved to an output j (wa_stream_seek_output), and its
// length in input frames: a PCM WAV in a file whose data chunk is all there (a cut one is read
// start to end, as its warning says), or a native FLAC file whose STREAMINFO gives its length
// (one cut short of it ends in the segment where it ends: the reader's segment `last`).
static bool wa_stream_seekable(const whisper_audio_stream * s, int64_t * frames) {
    if (!s->rd.f || !s->rd.seekable || s->rd.size < 0) return false;
    if (s->codec == WA_CODEC_WAV && s->frames_said >= 0 &&
        s->wav.data_offset + (uint64_t) s->frames_said * s->wav.block_align <= (uint64_t) s->rd.size) {
        *frames = s->frames_said;
        return true;
    }
#ifdef WHISPER_AUDIO_FLAC
    if (s->codec == WA_CODEC_FLAC && !s->flac_ogg && s->frames_total > 0) {
        *frames = s->frames_total;
        return true;
    }
#endif
    return false;
}

static bool wa_stream_seek_output(whisper_audio_stream * s, uint64_t j) {
    wa_resampler & rs = s->rs;
    int64_t n0 = (int64_t) j, phase = 0, first = (int64_t) j;   // the first input output j reads
    if (!rs.copy) {
        const unsigned __int128 at = (unsigned __int128) j * (unsigned __int128) rs.M;
        n0    = (int64_t) (at / (unsigned __int128) rs.L);
        phase = (int64_t) (at % (unsigned __int128) rs.L);
        first = std::max<int64_t>(0, n0 - rs.kr.k + 1);
    }
#ifdef WHISPER_AUDIO_FLAC
    if (s->codec == WA_CODEC_FLAC) {
        if (!flac_stream_seek(s, std::min(first, s->frames_total))) return false;
        rs.i = j;
        rs.n0 = n0;
        rs.phase = phase;
        return true;
    }
#endif
    first = std::min(first, s->frames_said);
    const uint32_t ba = s->wav.block_align;
    if (!rd_seek(s->rd, s->wav.data_offset + (uint64_t) first * ba)) {
        return audio_fail(s->name.c_str(), "cannot seek in the WAV data: %s", strerror(errno));
    }
    s->data_left = (uint64_t) (s->frames_said - first) * ba;
    s->frames_in = first;
    s->hist.clear();
    s->hist_base = first;
    rs.i = j;
    rs.n0 = n0;
    rs.phase = phase;
    return true;
}

static void reader_work(whisper_audio_reader * r);

// Starts workers, up to the pool's size, until `want` run (under r->mu): the reader starts
// one a file, and a long file's segments bring the rest (reader_decode: a resampled WAV or
// a FLAC), so that one such file is decoded on every worker while one short file costs one thread. A thread that cannot be
// started leaves fewer workers.
static void reader_grow(whisper_audio_reader * r, size_t want) {
    while (!r->stop && r->workers.size() < std::min<size_t>(want, (size_t) r->max_workers)) {
        try {
            r->workers.emplace_back(reader_work, r);
        } catch (const std::system_error &) {
            return;
        }
    }
}

// Decodes segment g of input k (or its part to max_samples) until its end, an error, the
// caller moving past it, or free. Segment 0 opens the input: a long seekable WAV or FLAC then
// gets its other segments, for the other workers.
static void reader_decode(whisper_audio_reader * r, size_t k, size_t g) {
    wa_reader_input & in = r->inputs[k];
    int64_t t = wa_thread_cpu_ns();
    whisper_audio_info info;
    whisper_audio_stream * s = whisper_audio_stream_open(in.path.c_str(), &info);
    const std::string open_error = s ? "" : whisper_audio_last_error();
    std::unique_lock<std::mutex> lock(r->mu);
    wa_reader_segment * seg = &in.segs[g];
    const size_t max_total = r->params.max_samples ? r->params.max_samples : SIZE_MAX;
    if (!s) {
        seg->failed = true;
        seg->error = open_error;
    } else if (g == 0) {
        in.info = info;
        uint64_t n_out = 0;   // a long seekable WAV or FLAC: its segments
        int64_t frames = 0;
        if (wa_stream_seekable(s, &frames) &&
            resample_out_len((uint64_t) frames, s->sample_rate, WHISPER_AUDIO_SAMPLE_RATE, &n_out)) {
            n_out = std::min<uint64_t>(n_out, max_total);
            // (the last to the stream's end: a FLAC may hold frames past the length it says)
            for (uint64_t first = READER_SEGMENT; n_out > 2 * READER_SEGMENT && first < n_out; first += READER_SEGMENT) {
                seg->count = READER_SEGMENT;
                wa_reader_segment next;
                next.first = first;
                if (first + READER_SEGMENT < n_out) next.count = READER_SEGMENT;
                in.segs.push_back(next);
            }
            // every worker on a resampled WAV or a FLAC (seg stays valid: a deque's push_back moves
            // nothing); a 16 kHz WAV is a copy, which more workers only slow (16 took 3x one's CPU
            // time on it, their chunks' page faults and start)
            if (!s->rs.copy || s->codec != WA_CODEC_WAV) reader_grow(r, in.segs.size());
        }
    } else if (!wa_stream_seek_output(s, seg->first)) {
        seg->failed = true;
        seg->error = whisper_audio_last_error();
    }
    in.opened = true;
    r->busy_ms += (double) (wa_thread_cpu_ns() - t) * 1e-6;
    r->changed.notify_all();
    // this segment's outputs: [first, first + count), the input's first max_samples at most
    const uint64_t end = std::min<uint64_t>(seg->count == UINT64_MAX ? UINT64_MAX : seg->first + seg->count, max_total);
    uint64_t done = seg->first;
    while (s && !seg->ended && !seg->failed) {
        // room for a chunk: in the input the caller reads, within max_buffered of where it reads
        // (the segments nearest it first); in a later one, within max_buffered in all
        r->changed.wait(lock, [&] {
            const bool room = k == r->current ? done + READER_CHUNK <= in.read_pos + r->params.max_buffered
                                              : r->buffered + READER_CHUNK <= r->params.max_buffered;
            return r->stop || in.cancelled || room;
        });
        if (r->stop || in.cancelled) break;
        // the stream's resampling gets this worker's share of the cores
        r->busy++;
        s->rs.n_threads = std::max(1, wa_n_threads(0) / r->busy);
        const double helpers_before = s->rs.helper_cpu_ms;
        lock.unlock();
        t = wa_thread_cpu_ns();
        std::vector<float> chunk;
        size_t got = 0;
        int64_t n = 1;
        try {
            chunk.resize((size_t) std::min<uint64_t>(READER_CHUNK, end - done));
            while (got < chunk.size() && (n = whisper_audio_stream_read(s, chunk.data() + got, chunk.size() - got)) > 0) {
                got += (size_t) n;
            }
        } catch (const std::bad_alloc &) {
            n = -1;
            wa_set_error("%s: out of memory while decoding", in.path.c_str());
        }
        const std::string error = n < 0 ? whisper_audio_last_error() : "";
        const char * warning = n == 0 ? whisper_audio_stream_warning(s) : nullptr;
        chunk.resize(got);
        done += got;
        lock.lock();
        r->busy--;
        r->busy_ms += (double) (wa_thread_cpu_ns() - t) * 1e-6 + (s->rs.helper_cpu_ms - helpers_before);
        if (got && !in.cancelled) {   // (a chunk of an input the caller has passed is dropped)
            r->buffered += got;
            seg->chunks.push_back(std::move(chunk));
        }
        if (n < 0) { seg->failed = true; seg->error = error; }
        if (n == 0 || done >= end) seg->ended = true;
        if (n == 0 && done < end && seg->count != UINT64_MAX) seg->last = true;   // a FLAC cut short of its length
        if (warning) in.warning = warning;
        r->changed.notify_all();
    }
    if (!seg->failed) seg->ended = true;   // cancelled or stopped: nothing more comes either way
    r->changed.notify_all();
    lock.unlock();
    whisper_audio_stream_close(s);
}

// The next work in order: a segment not started of an input opened, else the next input.
static void reader_work(whisper_audio_reader * r) {
    const size_t ahead = std::max(READER_AHEAD_MIN, (size_t) 4 * r->max_workers);
    for (;;) {
        std::unique_lock<std::mutex> lock(r->mu);
        size_t k = 0, g = 0;
        auto find = [&] {
            for (k = r->current; k < r->next; k++) {
                wa_reader_input & in = r->inputs[k];
                if (in.cancelled) continue;
                for (g = 1; g < in.segs.size(); g++) if (!in.segs[g].started) return true;
            }
            if (r->next < r->inputs.size() && r->next < r->current + ahead) {
                k = r->next++;
                g = 0;
                return true;
            }
            return false;
        };
        bool have = false;   // (idle workers wait: a long WAV opened later brings segments)
        r->changed.wait(lock, [&] { return r->stop || (have = find()); });
        if (!have) return;
        r->inputs[k].segs[g].started = true;
        lock.unlock();
        reader_decode(r, k, g);
    }
}

whisper_audio_reader_params whisper_audio_reader_default_params(void) {
    whisper_audio_reader_params p;
    memset(&p, 0, sizeof(p));
    p.n_workers    = 0;
    p.max_samples  = 0;
    p.max_buffered = (size_t) 1 << 24;   // 64 MiB: 17 minutes of audio
    return p;
}

whisper_audio_reader * whisper_audio_reader_init(const char * const * paths, size_t n, whisper_audio_reader_params params) {
    if (!paths && n > 0) {
        wa_set_error("whisper_audio_reader_init: invalid argument (paths must not be NULL)");
        return nullptr;
    }
    for (size_t k = 0; k < n; k++) {
        if (!paths[k]) {
            wa_set_error("whisper_audio_reader_init: invalid argument (paths[%zu] is NULL)", k);
            return nullptr;
        }
    }
    return wa_catch("whisper_audio_reader_init", (whisper_audio_reader *) nullptr, [&]() -> whisper_audio_reader * {
        std::unique_ptr<whisper_audio_reader> r(new whisper_audio_reader());
        r->params = params;
        r->params.max_buffered = std::max(params.max_buffered, READER_CHUNK);
        r->inputs.resize(n);
        for (size_t k = 0; k < n; k++) {
            r->inputs[k].path = paths[k];
            r->inputs[k].segs.resize(1);
        }
        // one worker a core (at most 8, as the CPU threads): one an input to start with, more
        // when a long input is cut into segments (reader_grow)
        r->max_workers = params.n_workers > 0 ? params.n_workers : std::min(8, wa_n_threads(0));
        r->workers.reserve(r->max_workers);   // (so that starting one allocates nothing)
        // under the lock: a worker may grow the pool (reader_grow) as soon as it runs
        std::lock_guard<std::mutex> lock(r->mu);
        r->workers.emplace_back(reader_work, r.get());   // (none at all: an error)
        reader_grow(r.get(), n);
        return r.release();
    });
}

int64_t whisper_audio_reader_read(whisper_audio_reader * r, size_t k, float * out, size_t max) {
    if (!r || (!out && max > 0) || k >= (r ? r->inputs.size() : 0)) {
        wa_set_error("whisper_audio_reader_read: invalid argument (a reader, out, and an input below its count)");
        return -1;
    }
    std::unique_lock<std::mutex> lock(r->mu);
    if (k < r->current) {
        wa_set_error("whisper_audio_reader_read: input %zu was read already (inputs are read in order; now %zu)", k, r->current);
        return -1;
    }
    // moving on: the inputs skipped are dropped (their workers stop)
    for (; r->current < k; r->current++) {
        wa_reader_input & skipped = r->inputs[r->current];
        skipped.cancelled = true;
        for (wa_reader_segment & g : skipped.segs) {
            for (const std::vector<float> & c : g.chunks) r->buffered -= c.size();
            g.chunks.clear();
            g.front = 0;
        }
    }
    r->changed.notify_all();
    wa_reader_input & in = r->inputs[k];
    size_t got = 0;
    while (got < max) {
        // the caller's segment: its samples (waited for when there are none yet), then at its
        // end the next segment's, or its error
        wa_reader_segment * seg = &in.segs[in.cur];
        if (got == 0) r->changed.wait(lock, [&] { return !seg->chunks.empty() || seg->ended || seg->failed; });
        while (got < max && !seg->chunks.empty()) {
            std::vector<float> & c = seg->chunks.front();
            const size_t n = std::min(max - got, c.size() - seg->front);
            memcpy(out + got, c.data() + seg->front, n * sizeof(float));
            got += n;
            in.read_pos += n;
            seg->front += n;
            if (seg->front == c.size()) {
                r->buffered -= c.size();
                seg->chunks.pop_front();
                seg->front = 0;
            }
        }
        r->changed.notify_all();
        if (seg->chunks.empty() && seg->ended && !seg->last && in.cur + 1 < in.segs.size()) { in.cur++; continue; }
        break;
    }
    if (got > 0 || max == 0) return (int64_t) got;
    const wa_reader_segment & seg = in.segs[in.cur];
    if (seg.failed) {
        wa_set_error("%s", seg.error.c_str());
        return -1;
    }
    return 0;
}

bool whisper_audio_reader_info(whisper_audio_reader * r, size_t k, whisper_audio_info * info) {
    if (info) memset(info, 0, sizeof(*info));
    if (!r || !info || k >= r->inputs.size()) {
        wa_set_error("whisper_audio_reader_info: invalid argument (a reader, info, and an input below its count)");
        return false;
    }
    std::unique_lock<std::mutex> lock(r->mu);
    wa_reader_input & in = r->inputs[k];
    if (k < r->current || in.cancelled) {
        wa_set_error("whisper_audio_reader_info: input %zu was read already (now %zu)", k, r->current);
        return false;
    }
    r->changed.wait(lock, [&] { return in.opened; });
    if (!in.info.sample_rate) {
        wa_set_error("%s", in.segs[0].error.c_str());
        return false;
    }
    *info = in.info;
    return true;
}

const char * whisper_audio_reader_warning(whisper_audio_reader * r, size_t k) {
    if (!r || k >= r->inputs.size()) return nullptr;
    std::lock_guard<std::mutex> lock(r->mu);
    const wa_reader_input & in = r->inputs[k];
    return in.done() && !in.warning.empty() ? in.warning.c_str() : nullptr;
}

double whisper_audio_reader_busy_ms(whisper_audio_reader * r) {
    if (!r) return 0.0;
    std::lock_guard<std::mutex> lock(r->mu);
    return r->busy_ms;
}

void whisper_audio_reader_free(whisper_audio_reader * r) {
    if (!r) return;
    {
        std::lock_guard<std::mutex> lock(r->mu);
        r->stop = true;
    }
    r->changed.notify_all();
    for (std::thread & t : r->workers) t.join();
    delete r;
}

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
static void wa_mel_filters_slaney(int n_mels, float * out) {
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

bool whisper_audio_log_mel_filters(const float * filters, int n_mels, const float * pcm, size_t n, float * out) {
    if (filters == nullptr || out == nullptr || (pcm == nullptr && n > 0)) {
        wa_set_error("whisper_audio_log_mel_filters: NULL %s", filters == nullptr ? "filters" : out == nullptr ? "out" : "pcm");
        return false;
    }
    if (n_mels <= 0) {
        wa_set_error("whisper_audio_log_mel_filters: n_mels is %d (expected > 0, e.g. 80 or 128)", n_mels);
        return false;
    }
    if (!wa_mel_check_pcm(__func__, pcm, std::min(n, (size_t) WA_MEL_N_SAMP), 0)) return false;
    log_mel_window(filters, n_mels, pcm, n, out);
    return true;
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

enum gguf_value_type {
    GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32,
    GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64, GGUF_TYPE_COUNT,
};

struct gguf_tensor_info {
    std::string name;
    int n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};   // innermost first
    int type = 0;                   // vt_type
    uint64_t offset = 0;            // from the data section's start
    uint64_t bytes = 0;
    const void * data = nullptr;    // in the model's weights, for the tensors the encoder uses
    int block_type = -1;            // a block type's tensor, dequantised to F32 at load: its type in
    uint64_t block_bytes = 0;       // the file and its bytes there (whisper_audio_model_save_gguf keeps them)
};

// Limits beyond which a file is refused before anything is allocated for it: an encoder of
// 256 layers has 3848 tensors; gguf.md caps tensor names at 64 bytes and keys at 65535.
static const uint64_t GGUF_MAX_TENSORS = 16384;
static const uint64_t GGUF_MAX_KV      = 16384;
static const uint64_t GGUF_MAX_NAME    = 64;
static const uint64_t GGUF_MAX_KEY     = 65535;
static const uint64_t GGUF_MAX_STRING  = 1u << 20;

// A bounds-checked cursor over the file's first bytes: every read checks that it stays
// inside. past_end: a read ran past them (a longer prefix of the file may hold it).
struct gguf_reader {
    const uint8_t * data;
    size_t size, pos = 0;
    bool ok = true, past_end = false;

    bool need(size_t n) {
        if (ok && n > size - pos) past_end = true;
        if (!ok || n > size - pos) { ok = false; return false; }
        return true;
    }
    template <typename T> T get() {
        T v{};
        if (need(sizeof(T))) { memcpy(&v, data + pos, sizeof(T)); pos += sizeof(T); }
        return v;
    }
    std::string get_string(uint64_t max = GGUF_MAX_STRING) {
        const uint64_t n = get<uint64_t>();
        if (n > max || !need(n)) { ok = false; return ""; }
        std::string s((const char *)data + pos, n);
        pos += n;
        return s;
    }
    // skips a value of the given type (arrays of arrays included, to a bounded depth)
    void skip(uint32_t type, int depth = 0) {
        static const size_t sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (type >= GGUF_TYPE_COUNT || depth > 2) { ok = false; return; }
        if (type == GGUF_STRING) { get_string(); return; }
        if (type == GGUF_ARRAY) {
            const uint32_t et = get<uint32_t>();
            const uint64_t n = get<uint64_t>();
            if (et >= GGUF_TYPE_COUNT) { ok = false; return; }
            if (et != GGUF_STRING && et != GGUF_ARRAY) {
                if (n > SIZE_MAX / 8 || !need(n * sizes[et])) { ok = false; return; }
                pos += n * sizes[et];
                return;
            }
            for (uint64_t i = 0; i < n && ok; i++) skip(et, depth + 1);
            return;
        }
        if (need(sizes[type])) pos += sizes[type];
    }
};

// The encoder's tensors are read into `weights` at load, not mapped: a mapping faults
// (SIGBUS) when the file is truncated under it, as `cp new.gguf model.gguf` does.
struct whisper_audio_model {
    std::string path;
    size_t file_size = 0;
    uint64_t data_start = 0;                             // the data section's offset in the file
    whisper_audio_hparams hparams{};
    std::vector<gguf_tensor_info> tensors;               // every tensor of the file
    std::unordered_map<std::string, size_t> index;       // name -> position in tensors
    std::unique_ptr<uint8_t[]> weights;                  // the encoder's tensors' bytes
    const float * mel_filters = nullptr;                 // [n_mels, 201], in weights (or mel_computed)
    bool mmproj = false;                                 // a llama.cpp mmproj file: its tensors renamed to ours
    std::vector<float> mel_computed;                     // the mel bank of a file without one (mmproj)
    enum { GGUF, GGML, CT2, HF } kind = GGUF;            // the file's format (GGUF: ours or an mmproj; HF: a directory)
    std::string name, description;                      // a GGUF's general.name and general.description
    std::vector<std::string> sources;                   // a Hugging Face directory's files read (path: the directory)

    const gguf_tensor_info * find(const std::string & name) const {
        auto it = index.find(name);
        return it == index.end() ? nullptr : &tensors[it->second];
    }
};

// A projector's GGUF name (WA_PROJECTORS), and the list of one column for messages.
static const char * wa_projector_gguf(whisper_audio_projector type) {
    for (const wa_projector_name & p : WA_PROJECTORS)
        if (p.type == type) return p.gguf;
    return "none";
}
static std::string wa_projector_list(const char * const wa_projector_name::* column) {
    std::string list;
    for (const wa_projector_name & p : WA_PROJECTORS)
        if (p.*column) list += (list.empty() ? "" : ", ") + std::string(p.*column);
    return list;
}

// Whether a model of these hyperparameters has the row (its family: Whisper's conv stem or the AuT's).
static bool wa_has_row(const whisper_audio_hparams & hp, const wa_tensor_desc & t) {
    return t.family == WA_EVERY || (t.family == WA_AUT) == (hp.n_conv > 0);
}

// Calls f(row, il, name) for each tensor of the file that the encoder uses: the rows outside
// the layers (il -1), then layer by layer; name is the row's with the layer index put in.
template <typename F> static bool wa_for_each_tensor(const whisper_audio_hparams & hp, F && f) {
    for (const wa_tensor_desc & t : WA_TENSORS)
        if (!t.layer && wa_has_row(hp, t) && !f(t, -1, t.name)) return false;
    char name[GGUF_MAX_NAME + 1];
    for (int il = 0; il < hp.n_layer; il++) {
        for (const wa_tensor_desc & t : WA_TENSORS) {
            if (!t.layer || !wa_has_row(hp, t)) continue;
            snprintf(name, sizeof(name), t.name, il);
            if (!f(t, il, name)) return false;
        }
    }
    return true;
}

// The row's shape in vt's order (innermost first); returns the dimension count.
// The mel bins left after the AuT's three stride-2 Conv2d ((F - 1) / 2 + 1 each: 128 -> 16).
static int wa_conv_bins(int n_mels) { return (((n_mels + 1) / 2 + 1) / 2 + 1) / 2; }
static int wa_shape(const whisper_audio_hparams & hp, const wa_tensor_desc & t, int64_t ne[4]) {
    int n_dims = 0;
    for (; n_dims < 4 && t.shape[n_dims] != 0; n_dims++) {
        const int s = t.shape[n_dims];
        ne[n_dims] = s == WA_D ? hp.n_state : s == WA_FF ? hp.n_ff : s == WA_MELS ? hp.n_mels : s == WA_CTX ? hp.n_ctx
                   : s == WA_CONV ? hp.n_conv : s == WA_CONV_F ? (int64_t)hp.n_conv * wa_conv_bins(hp.n_mels) : s;
    }
    std::reverse(ne, ne + n_dims);
    return n_dims;
}

// Where a row goes in w: nullptr for the host-only mel bank.
static vt_tensor ** wa_dst(wa_weights & w, const wa_tensor_desc & t, int il) {
    return t.layer ? &(w.layers[il].*t.layer) : t.top ? &(w.*t.top) : nullptr;
}

static whisper_audio_weight_type wa_weight_type(vt_type type) {
    switch (type) {
        case VT_TYPE_F32:  return WHISPER_AUDIO_WEIGHT_F32;
        case VT_TYPE_F16:  return WHISPER_AUDIO_WEIGHT_F16;
        case VT_TYPE_BF16: return WHISPER_AUDIO_WEIGHT_BF16;
    }
    VT_ASSERT(!"a type vt_type_valid accepts");
    return WHISPER_AUDIO_WEIGHT_F32;
}

// The projector's shape in vt's order (innermost first); returns the dimension count.
static int wa_proj_shape(const whisper_audio_hparams & hp, const wa_proj_desc & t, int64_t ne[3]) {
    int n_dims = 0;
    for (; n_dims < 3 && t.shape[n_dims] != 0; n_dims++) {
        const int s = t.shape[n_dims];
        ne[n_dims] = s == WA_D ? hp.n_state : s == WA_LLM ? hp.n_llm : s == WA_STACKED ? (int64_t)hp.stack_factor * hp.n_state
                   : s == WA_PFF ? hp.n_proj_ff : s == WA_PFF_HALF ? hp.n_proj_ff / 2 : s == WA_D5 ? 5 * (int64_t)hp.n_state : s;
    }
    std::reverse(ne, ne + n_dims);
    return n_dims;
}

// Is name of the pattern `from` ("%d" at most once)? Then out is `to` with the same layer.
static bool wa_rename(const char * from, const char * to, const std::string & name, std::string & out) {
    const char * d = strstr(from, "%d");
    if (!d) {
        if (name != from) return false;
        out = to;
        return true;
    }
    const size_t pre = (size_t)(d - from), post = strlen(d + 2);
    if (name.size() <= pre + post || name.compare(0, pre, from, pre) != 0 || name.compare(name.size() - post, post, d + 2) != 0)
        return false;
    const std::string digits = name.substr(pre, name.size() - pre - post);
    if (digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
    char buf[GGUF_MAX_NAME + 1];
    snprintf(buf, sizeof(buf), to, atoi(digits.c_str()));
    out = buf;
    return true;
}

// An mmproj file's name of a tensor to ours (to_ours) or back, by the model's projector's table
// first (MERaLiON-2's), then the common one; false for a name neither has.
static bool wa_mmproj_rename(const whisper_audio_model * m, bool to_ours, const std::string & name, std::string & out) {
    auto in = [&](const auto & table) {
        for (const wa_mmproj_name & n : table)
            if (to_ours ? wa_rename(n.mmproj, n.ours, name, out) : wa_rename(n.ours, n.mmproj, name, out)) return true;
        return false;
    };
    return (m->hparams.projector == WHISPER_AUDIO_PROJECTOR_MERALION && in(WA_MMPROJ_MERALION_NAMES)) || in(WA_MMPROJ_NAMES);
}

// The name a tensor of ours has in the model's file (for messages).
static std::string wa_file_name(const whisper_audio_model * m, const char * ours) {
    std::string out;
    if (m->mmproj && wa_mmproj_rename(m, false, ours, out)) return out;
    return ours;
}

// ---- ggml's block types: quantised matrices, dequantised to f32 at load ---------------------

// A quantised whisper.cpp model (and our GGUF conversion of one) stores its matrices in
// ggml's blocks of 32 weights: an f16 scale d (the _1 types add an f16 minimum m), then the
// quants (ggml-quants.c, dequantize_row_*). They become f32 at load, exactly (a quant times an
// f16 scale fits in f32's mantissa): the backends take f32 matrices as they take any other,
// and nothing computes in the block types.
static const int QK = 32;
struct wa_block_type {
    int type;                 // ggml's type number
    const char * name;
    size_t bytes;             // per block of QK weights
    uint32_t file_type;       // general.file_type of a file whose matrices have it (LLAMA_FTYPE_MOSTLY_*)
};
static const wa_block_type WA_BLOCK_TYPES[] = {
    {2, "q4_0", 18, 2}, {3, "q4_1", 20, 3}, {6, "q5_0", 22, 8}, {7, "q5_1", 24, 9}, {8, "q8_0", 34, 7},
};

static const wa_block_type * wa_block(int type) {
    for (const wa_block_type & b : WA_BLOCK_TYPES)
        if (b.type == type) return &b;
    return nullptr;
}

static const char * wa_type_name(int type) {
    const wa_block_type * b = wa_block(type);
    return b ? b->name : vt_type_valid(type) ? vt_type_name((vt_type)type) : "unknown";
}

// The bytes of a tensor of the given type (F32/F16/BF16 or a block type whose rows are whole
// blocks) and dims; false when they pass limit (step by step: the product can pass 2^64).
static bool wa_tensor_bytes(int type, const int64_t ne[4], uint64_t limit, uint64_t * bytes) {
    const wa_block_type * b = wa_block(type);
    uint64_t n = b ? b->bytes : vt_type_size((vt_type)type);
    for (int d = 0; d < 4; d++) {
        const uint64_t k = d == 0 && b ? (uint64_t)ne[0] / QK : (uint64_t)ne[d];
        if (k > limit / n) return false;
        n *= k;
    }
    *bytes = n;
    return true;
}

static float wa_f16(const uint8_t * p) {
    float v;
    vt_convert(&v, VT_TYPE_F32, p, VT_TYPE_F16, 1);
    return v;
}

// n_blocks blocks of type at x -> n_blocks * QK floats at y. Quants j and j + 16 of a block
// share byte j: the low nibble is j, the high one j + 16; q5's fifth bits are qh's bit j.
static void wa_dequantize(int type, const uint8_t * x, float * y, size_t n_blocks) {
    const size_t bytes = wa_block(type)->bytes;
    for (size_t i = 0; i < n_blocks; i++, x += bytes, y += QK) {
        const float d = wa_f16(x);
        const bool has_min = type == 3 || type == 7;
        const float m = has_min ? wa_f16(x + 2) : 0.0f;
        const uint8_t * q = x + (has_min ? 4 : 2);
        uint32_t qh = 0;
        if (type == 6 || type == 7) { memcpy(&qh, q, 4); q += 4; }
        for (int j = 0; j < QK / 2; j++) {
            int q0, q1;
            switch (type) {
                case 8:  q0 = (int8_t)q[j]; q1 = (int8_t)q[j + 16]; break;               // q8_0: q * d
                case 2:  q0 = (q[j] & 15) - 8; q1 = (q[j] >> 4) - 8; break;                // q4_0: (q - 8) * d
                case 3:  q0 = q[j] & 15; q1 = q[j] >> 4; break;                            // q4_1: q * d + m
                case 6:  q0 = ((q[j] & 15) | ((qh >> j) & 1) << 4) - 16;                   // q5_0: (q - 16) * d
                         q1 = ((q[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16; break;
                default: q0 = (q[j] & 15) | ((qh >> j) & 1) << 4;                          // q5_1: q * d + m
                         q1 = (q[j] >> 4) | ((qh >> (j + 16)) & 1) << 4; break;
            }
            y[j] = q0 * d + m;
            y[j + QK / 2] = q1 * d + m;
        }
    }
}

// Checks one tensor against the shape the hyperparameters imply (ne innermost first) and the
// type rule: matrices F32/F16/BF16 or a block type, the rest F32.
static bool check_tensor(const whisper_audio_model * m, const char * name, int n_dims, const int64_t * ne, bool matrix) {
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

// The two dialects of GGUF this reader takes: ours (whisper.*, the converter's) and llama.cpp's
// mmproj (general.architecture "clip", its audio tower under clip.audio.*). One row of keys each.
struct gguf_dialect {
    const char * n_mels, * n_ctx, * n_state, * n_head, * n_layer, * n_ff, * eps;
    const char * projector, * n_llm, * stack_factor;
};
static const gguf_dialect GGUF_OURS = {
    "whisper.encoder.mels_count", "whisper.encoder.context_length", "whisper.encoder.embedding_length",
    "whisper.encoder.attention.head_count", "whisper.encoder.block_count", "whisper.encoder.feed_forward_length",
    "whisper.encoder.attention.layer_norm_epsilon",
    "whisper.projector.type", "whisper.projector.embedding_length", "whisper.projector.stack_factor",
};
static const gguf_dialect GGUF_MMPROJ = {
    "clip.audio.num_mel_bins", "clip.audio.context_length", "clip.audio.embedding_length",
    "clip.audio.attention.head_count", "clip.audio.block_count", "clip.audio.feed_forward_length",
    "clip.audio.attention.layer_norm_epsilon",
    "clip.projector_type", "clip.audio.projection_dim", "clip.audio.projector.stack_factor",
};

// The header's key/values that this reader uses, type-checked; the rest are skipped.
struct gguf_kv {
    std::string arch, proj_type;
    bool has_arch = false, has_proj_type = false, audio_proj_type = false;
    uint32_t alignment = 32;
    std::map<std::string, uint32_t> u32;
    std::map<std::string, float> f32;
    std::map<std::string, uint32_t> wrong_type;       // keys we read, stored with another GGUF type

    // a key this reader needs that is absent, or there of another type (which says so)
    bool missing(const char * path, const char * key, const char * want) const {
        auto it = wrong_type.find(key);
        if (it != wrong_type.end()) wa_set_error("%s: key %s has GGUF type %u, not %s", path, key, it->second, want);
        else wa_set_error("%s: missing key %s (%s)", path, key, want);
        return false;
    }
};

static bool gguf_read_kv(whisper_audio_model * m, gguf_reader & r, uint64_t n_kv, gguf_kv & kv) {
    const char * path = m->path.c_str();
    auto is_ours = [](const std::string & k) {
        return k.rfind("whisper.encoder.", 0) == 0 || k.rfind("whisper.projector.", 0) == 0 || k.rfind("clip.audio.", 0) == 0;
    };
    auto is_eps = [](const std::string & k) {
        return k == GGUF_OURS.eps || k == GGUF_MMPROJ.eps || k == "whisper.projector.layer_norm_epsilon" ||
               k == "whisper.encoder.rope.freq_base";
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

    // RoPE in place of the positional embedding (GLM-ASR; our GGUF alone): both keys or neither
    auto rd = kv.u32.find("whisper.encoder.rope.dimension_count");
    auto rf = kv.f32.find("whisper.encoder.rope.freq_base");
    hp.n_rot = 0;
    hp.rope_theta = 0.0f;
    if (!m->mmproj && (rd != kv.u32.end() || rf != kv.f32.end())) {
        if (rd == kv.u32.end()) return kv.missing(path, "whisper.encoder.rope.dimension_count", "uint32 (4)");
        if (rf == kv.f32.end()) return kv.missing(path, "whisper.encoder.rope.freq_base", "float32 (6)");
        const uint32_t head_dim = (uint32_t)(hp.n_state / hp.n_head);
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
        if (hp.projector == WHISPER_AUDIO_PROJECTOR_VOXTRAL && hp.n_ctx % hp.stack_factor != 0) {
            wa_set_error("%s: %s = %u does not divide the %d positions of a window (Voxtral stacks within one)", path,
                         d.stack_factor, it->second, hp.n_ctx);
            return false;
        }
    }
    // Ultravox's RMSNorm eps (its own class's 1e-6; llama.cpp's files do not store it); MERaLiON-2's
    // ln_speech (nn.LayerNorm's default, which llama.cpp's meralion graph takes as the encoder's)
    auto e = kv.f32.find("whisper.projector.layer_norm_epsilon");
    hp.proj_eps = e != kv.f32.end() ? e->second : hp.projector == WHISPER_AUDIO_PROJECTOR_MERALION ? hp.eps : 1e-6f;
    if (!(std::isfinite(hp.proj_eps) && hp.proj_eps > 0.0f)) {
        wa_set_error("%s: whisper.projector.layer_norm_epsilon is %g; it must be a positive finite number", path, hp.proj_eps);
        return false;
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_GLMASR && hp.n_rot == 0)
        return kv.missing(path, "whisper.encoder.rope.dimension_count", "uint32 (4)");
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_QWEN25O && hp.n_chunk == 0) {
        if (!m->mmproj) return kv.missing(path, "whisper.encoder.chunk_length", "uint32 (4)");
        hp.n_chunk = 200;                 // Qwen2_5OmniAudioEncoderConfig's n_window 100, as every release has it
    }
    const bool aut = hp.projector == WHISPER_AUDIO_PROJECTOR_QWEN3A;
    if (aut && m->mmproj) {               // llama.cpp's qwen3a stores neither (its graph fixes them): the config's
        hp.n_chunk = 100;                 // n_window 50 and n_window_infer 800, as every release has them; the
        hp.n_attn_window = 800;           // channels from conv2d1's weight once the tensors are read
        hp.n_conv = 1;
    }
    if (aut && (hp.n_conv == 0 || hp.n_chunk == 0 || hp.n_attn_window == 0)) {
        return kv.missing(path, hp.n_conv == 0 ? "whisper.encoder.conv2d.channels" : hp.n_chunk == 0 ? "whisper.encoder.chunk_length"
                                : "whisper.encoder.attention.window_length", "uint32 (4)");
    }
    if (hp.n_chunk && hp.projector != WHISPER_AUDIO_PROJECTOR_QWEN25O && !aut) {
        wa_set_error("%s: whisper.encoder.chunk_length is set for a model that is not Qwen2.5-Omni's or Qwen3-Omni's tower", path);
        return false;
    }
    if ((hp.n_conv || hp.n_attn_window) && !aut) {
        wa_set_error("%s: whisper.encoder.%s is set for a model that is not Qwen3-Omni's tower", path,
                     hp.n_conv ? "conv2d.channels" : "attention.window_length");
        return false;
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_MINICPMO && hp.n_causal == 0)
        return kv.missing(path, "whisper.encoder.attention.causal_chunk", "uint32 (4)");
    if (hp.n_causal && hp.projector != WHISPER_AUDIO_PROJECTOR_MINICPMO) {
        wa_set_error("%s: whisper.encoder.attention.causal_chunk is set for a model that is not MiniCPM-o's tower", path);
        return false;
    }
    return true;
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
    whisper_audio_hparams & hp = m->hparams;
    if (m->mmproj && hp.projector == WHISPER_AUDIO_PROJECTOR_QWEN3A) {   // its Conv2d stem's channels: conv2d1 [c, 1, 3, 3]
        const gguf_tensor_info * c1 = m->find("encoder.conv2d1.weight");
        if (!c1 || c1->n_dims != 4 || c1->ne[3] < 1 || c1->ne[3] > 4096) {
            wa_set_error("%s: qwen3a: tensor '%s' is %s; the Conv2d stem's first kernel [c, 1, 3, 3] is needed", m->path.c_str(),
                         wa_file_name(m, "encoder.conv2d1.weight").c_str(), c1 ? "of another shape" : "missing");
            return false;
        }
        hp.n_conv = (int)c1->ne[3];
    }
    // Ultravox: linear_1's output width (SwiGLU halves it) comes from the tensor
    if (const gguf_tensor_info * l1 = m->find("multi_modal_projector.linear_1.weight");
        l1 && hp.projector == WHISPER_AUDIO_PROJECTOR_GLMASR && l1->n_dims == 2) {
        hp.n_proj_ff = (int)l1->ne[1];                    // GLM-ASR: 2 n_llm; checked against the rows' shapes
    }
    if (const gguf_tensor_info * l1 = m->find("adapter.linear1.weight");
        l1 && hp.projector == WHISPER_AUDIO_PROJECTOR_STEPAUDIO2 && l1->n_dims == 2) {
        hp.n_proj_ff = (int)l1->ne[1];                    // Step-Audio 2: its adapter's width (2048); checked by the rows
    }
    if (const gguf_tensor_info * l1 = m->find("multi_modal_projector.linear_1.weight");
        l1 && hp.projector == WHISPER_AUDIO_PROJECTOR_ULTRAVOX) {
        if (l1->n_dims != 2 || l1->ne[1] % 2 != 0) {
            wa_set_error("%s: tensor '%s' has %d dims, outermost %lld: Ultravox's SwiGLU needs [even, %d x %d]", path,
                         wa_file_name(m, "multi_modal_projector.linear_1.weight").c_str(), l1->n_dims,
                         (long long)l1->ne[l1->n_dims - 1], hp.stack_factor, hp.n_state);
            return false;
        }
        hp.n_proj_ff = (int)l1->ne[1];
    }
    return gguf_check_data(m, r.pos, kv.alignment);
}

// pread of n bytes at offset of the file at path (size bytes when opened); false with the
// error set when the file fails or ends early.
static bool read_at(const std::string & path, uint64_t size, int fd, void * dst, size_t n, uint64_t offset) {
    for (size_t done = 0; done < n;) {
        const ssize_t k = pread(fd, (char *)dst + done, std::min<size_t>(n - done, 1u << 30), (off_t)(offset + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) wa_set_error("%s: the file ended at byte %llu, before its %llu bytes: it changed while loading",
                                     path.c_str(), (unsigned long long)(offset + done), (unsigned long long)size);
            else wa_set_error("%s: read failed at byte %llu: %s", path.c_str(), (unsigned long long)(offset + done), strerror(errno));
            return false;
        }
        done += (size_t)k;
    }
    return true;
}

static bool read_at(const whisper_audio_model * m, int fd, void * dst, size_t n, uint64_t offset) {
    return read_at(m->path, m->file_size, fd, dst, n, offset);
}

// The layer a tensor's name places it in (prefix "encoder.layers." and "encoder.layers.7.fc1.weight"
// -> 7), or -1 when the name is not of a layer. An index too large for a long reads as LONG_MAX.
static long wa_layer_of(const std::string & name, const char * prefix) {
    const size_t n = strlen(prefix);
    if (name.compare(0, n, prefix) != 0 || !isdigit((unsigned char)name[n])) return -1;
    char * end = nullptr;
    const long il = strtol(name.c_str() + n, &end, 10);
    return *end == '.' || *end == '/' ? il : -1;
}

// A tensor of a layer past the hyperparameters' count is an error: the file holds an encoder
// other than the one they describe, and running the layers they name would truncate it.
static bool wa_check_layers(const whisper_audio_model * m, const std::string & name, const char * prefix,
                            const char * file_name, const char * count_key) {
    const long il = wa_layer_of(name, prefix);
    if (il < m->hparams.n_layer) return true;
    wa_set_error("%s: tensor '%s' is of layer %ld, but %s says %d layer%s: a file whose layer count is wrong", m->path.c_str(),
                 file_name, il, count_key, m->hparams.n_layer, m->hparams.n_layer == 1 ? "" : "s");
    return false;
}

// The first of n elements whose exponent bits are all set (NaN or +-inf), or n. A block is
// scanned without branches, which vectorises; only a block that has one is searched.
template <typename T> static size_t first_nonfinite(const uint8_t * p, size_t n, T exp_mask) {
    for (size_t i0 = 0; i0 < n; i0 += 4096) {
        const size_t i1 = std::min(n, i0 + 4096);
        unsigned bad = 0;
        for (size_t i = i0; i < i1; i++) {
            T v;
            memcpy(&v, p + i * sizeof(T), sizeof(T));
            bad |= (v & exp_mask) == exp_mask;
        }
        for (size_t i = i0; bad && i < i1; i++) {
            T v;
            memcpy(&v, p + i * sizeof(T), sizeof(T));
            if ((v & exp_mask) == exp_mask) return i;
        }
    }
    return n;
}

// Why tensor t, held at d (its type and bytes as loaded), cannot be used: a value that is not
// finite (NaN would reach every output; inf the softmax); "" when every value is.
static std::string wa_nonfinite(const std::string & path, const std::string & name, const gguf_tensor_info & t, const uint8_t * d) {
    const size_t n = t.bytes / vt_type_size((vt_type)t.type);
    const size_t bad = t.type == VT_TYPE_F32 ? first_nonfinite<uint32_t>(d, n, 0x7f800000u)
                     : first_nonfinite<uint16_t>(d, n, t.type == VT_TYPE_F16 ? 0x7c00 : 0x7f80);
    if (bad == n) return "";
    float v;
    vt_convert(&v, VT_TYPE_F32, d + bad * vt_type_size((vt_type)t.type), (vt_type)t.type, 1);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s: tensor '%s' holds %g at element %zu: a non-finite weight (a corrupt file, or a "
             "conversion that overflowed)", path.c_str(), name.c_str(), v, bad);
    return msg;
}

// The tensors `used` read into the model's own memory on every core (1.3 GB for large-v3),
// each in a slot of sizes[i] bytes: fill(i, slot) writes tensor i there as the model holds it
// (its type and bytes set) and returns why it cannot ("" when it can). The first failure in
// their order is the one reported.
template <typename F>
static bool wa_read_tensors(whisper_audio_model * m, const std::vector<gguf_tensor_info *> & used, const std::vector<uint64_t> & sizes,
                            F && fill) {
    const size_t ALIGN = 64;
    size_t total = 0;
    for (uint64_t s : sizes) total += (s + ALIGN - 1) / ALIGN * ALIGN;
    m->weights.reset(new (std::nothrow) uint8_t[total + ALIGN]);
    if (!m->weights) { wa_set_error("%s: out of memory for %zu bytes of weights", m->path.c_str(), total); return false; }
    uint8_t * dst = m->weights.get() + (ALIGN - (uintptr_t)m->weights.get() % ALIGN) % ALIGN;
    std::vector<uint8_t *> at(used.size());
    for (size_t i = 0; i < used.size(); i++) {
        at[i] = dst;
        dst += (sizes[i] + ALIGN - 1) / ALIGN * ALIGN;
    }
    std::vector<std::string> errors(used.size());
    wa_parallel((int)used.size(), 0, [&](int i) {
        errors[i] = fill((size_t)i, at[i]);
        if (errors[i].empty()) used[i]->data = at[i];
    });
    for (const std::string & e : errors) {
        if (!e.empty()) { wa_set_error("%s", e.c_str()); return false; }
    }
    return true;
}

// The tensors the encoder uses: shapes checked against the hyperparameters, then read into
// the model's own memory (wa_read_tensors).
static bool model_read_weights(whisper_audio_model * m, int fd) {
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
    m->hparams.weight_type = wa_weight_type((vt_type)m->find("encoder.layers.0.fc1.weight")->type);
    if (m->mmproj) {   // as the feature extractor computes it (llama.cpp's files do not store it)
        m->mel_computed.resize((size_t)m->hparams.n_mels * WHISPER_AUDIO_N_BINS);
        wa_mel_filters_slaney(m->hparams.n_mels, m->mel_computed.data());
        m->mel_filters = m->mel_computed.data();
    } else {
        m->mel_filters = (const float *)m->find("mel_filters")->data;
    }
    return true;
}

// ---- CTranslate2 / faster-whisper models: model.bin, read through the same table ----------
// CTranslate2's models.cc, binary version 6: uint32 version, string spec name, uint32 spec
// revision, uint32 n_vars; per variable: string name, uint8 rank, uint32 dims[rank] (outermost
// first), uint8 dtype, uint32 n_bytes, data; then uint32 n_aliases of (string alias, string
// target). A string is a uint16 length (its trailing NUL included) and the bytes. int8 weights
// keep a float scale per row in "<name>_scale", int16 ones a scalar one: w = q / scale.

enum ct2_dtype { CT2_F32, CT2_I8, CT2_I16, CT2_I32, CT2_F16, CT2_BF16, CT2_DTYPE_COUNT };
static const int      CT2_DTYPE_SIZE[CT2_DTYPE_COUNT] = {4, 1, 2, 4, 2, 2};
static const char *   CT2_DTYPE_NAME[CT2_DTYPE_COUNT] = {"float32", "int8", "int16", "int32", "float16", "bfloat16"};
static const uint32_t CT2_VERSION  = 6;
static const int      CT2_MAX_RANK = 4;
static const char     CT2_MAGIC[]  = "\x06\0\0\0\x0c\0WhisperSpec";   // version, spec name's length, spec name + NUL
// as GGUF's tensor count is (large-v3's model.bin: about 1,300 variables)
static const uint32_t CT2_MAX_VARS = 65536, CT2_MAX_ALIASES = 65536;

struct ct2_var {
    int rank = 0, dtype = 0;
    uint32_t dims[CT2_MAX_RANK] = {};
    uint64_t offset = 0, bytes = 0;     // the data's place in the file
    bool alias = false;                 // another name for a variable stored before it
};

// A bounds-checked cursor over the file through pread: model.bin interleaves the variables'
// headers with their data, and only the encoder's data is read.
struct ct2_reader {
    const whisper_audio_model * m;
    int fd;
    uint64_t pos = 0;
    bool ok = true;

    bool get(void * dst, uint64_t n) {
        if (ok && n > m->file_size - pos) ok = false;
        if (ok && !read_at(m, fd, dst, n, pos)) ok = false;
        if (ok) pos += n;
        return ok;
    }
    template <typename T> T get() { T v{}; get(&v, sizeof(T)); return v; }
    std::string get_string() {
        const uint16_t n = get<uint16_t>();
        if (n == 0) return "";                  // no NUL even: the caller says what it wanted
        std::string s(n, '\0');
        if (!get(&s[0], n) || s.back() != '\0') { ok = false; return ""; }
        s.pop_back();
        return s;
    }
};

using ct2_vars = std::unordered_map<std::string, ct2_var>;

static const ct2_var * ct2_find(const ct2_vars & vars, const std::string & name) {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : &it->second;
}

// The variables of model.bin, aliases resolved, each inside the file and of the size its dims say.
static bool ct2_parse(whisper_audio_model * m, int fd, ct2_vars & vars) {
    const char * path = m->path.c_str();
    ct2_reader r{m, fd};
    const uint32_t version = r.get<uint32_t>();
    if (r.ok && version != CT2_VERSION) {
        wa_set_error("%s: CTranslate2 binary version %u; this reader reads version %u", path, version, CT2_VERSION);
        return false;
    }
    r.pos = sizeof(CT2_MAGIC);                              // the spec name: checked by the caller
    r.get<uint32_t>();                                      // spec revision
    const uint32_t n_vars = r.get<uint32_t>();
    if (r.ok && n_vars > CT2_MAX_VARS) {
        wa_set_error("%s: %u variables (at most %u)", path, n_vars, CT2_MAX_VARS);
        return false;
    }
    for (uint32_t i = 0; i < n_vars && r.ok; i++) {         // each variable takes bytes: the file bounds the loop
        const std::string name = r.get_string();
        if (r.ok && name.empty()) {
            wa_set_error("%s: variable %u of %u (at byte %llu) has an empty name: n_vars too large, or a corrupt file", path,
                         i, n_vars, (unsigned long long)r.pos);
            return false;
        }
        ct2_var v;
        v.rank = r.get<uint8_t>();
        if (!r.ok) break;
        if (v.rank > CT2_MAX_RANK) {
            wa_set_error("%s: variable '%s' has rank %d (at most %d)", path, name.c_str(), v.rank, CT2_MAX_RANK);
            return false;
        }
        for (int d = 0; d < v.rank; d++) v.dims[d] = r.get<uint32_t>();
        v.dtype = r.get<uint8_t>();
        v.bytes = r.get<uint32_t>();
        if (!r.ok) break;
        if (v.dtype >= CT2_DTYPE_COUNT) {
            wa_set_error("%s: variable '%s' has dtype %d; known: 0-5 (float32, int8, int16, int32, float16, bfloat16)",
                         path, name.c_str(), v.dtype);
            return false;
        }
        uint64_t want = CT2_DTYPE_SIZE[v.dtype];           // capped at 2^32 before each step: no wrap
        for (int d = 0; d < v.rank; d++) want = std::min<uint64_t>(want, 1ull << 32) * v.dims[d];
        if (want != v.bytes) {
            wa_set_error("%s: variable '%s': %llu bytes, its dims and dtype (%s) need %llu", path, name.c_str(),
                         (unsigned long long)v.bytes, CT2_DTYPE_NAME[v.dtype], (unsigned long long)want);
            return false;
        }
        if (v.bytes > m->file_size - r.pos) {
            wa_set_error("%s: variable '%s' (%llu bytes at byte %llu) lies outside the file (%zu bytes): truncated?", path,
                         name.c_str(), (unsigned long long)v.bytes, (unsigned long long)r.pos, m->file_size);
            return false;
        }
        v.offset = r.pos;
        r.pos += v.bytes;
        if (!vars.emplace(name, v).second) { wa_set_error("%s: duplicate variable '%s'", path, name.c_str()); return false; }
    }
    const uint32_t n_aliases = r.get<uint32_t>();
    if (r.ok && n_aliases > CT2_MAX_ALIASES) {
        wa_set_error("%s: %u aliases (at most %u)", path, n_aliases, CT2_MAX_ALIASES);
        return false;
    }
    for (uint32_t i = 0; i < n_aliases && r.ok; i++) {
        const std::string alias = r.get_string(), target = r.get_string();
        if (!r.ok) break;
        if (alias.empty()) { wa_set_error("%s: alias %u of %u has an empty name: a corrupt file", path, i, n_aliases); return false; }
        const ct2_var * v = ct2_find(vars, target);
        if (!v) { wa_set_error("%s: alias '%s' names '%s', which is not a variable", path, alias.c_str(), target.c_str()); return false; }
        ct2_var copy = *v;
        copy.alias = true;
        if (!vars.emplace(alias, copy).second) { wa_set_error("%s: duplicate variable '%s'", path, alias.c_str()); return false; }
    }
    if (!r.ok) { wa_set_error("%s: truncated or corrupt CTranslate2 model (at byte %llu)", path, (unsigned long long)r.pos); return false; }
    return true;
}

// The hyperparameters from the variables' shapes: conv1 [d, n_mels, 3], layer_0's fc1 [ff, d],
// the layers present, the scalar encoder/num_heads.
static bool ct2_hparams(whisper_audio_model * m, int fd, const ct2_vars & vars) {
    const char * path = m->path.c_str();
    const ct2_var * conv1 = ct2_find(vars, "encoder/conv1/weight"), * fc1 = ct2_find(vars, "encoder/layer_0/ffn/linear_0/weight");
    const ct2_var * heads = ct2_find(vars, "encoder/num_heads");
    if (!conv1 || conv1->rank != 3 || !fc1 || fc1->rank != 2 || !heads || heads->rank != 0 ||
        (heads->dtype != CT2_I8 && heads->dtype != CT2_I16 && heads->dtype != CT2_I32)) {
        wa_set_error("%s: not a Whisper encoder: it needs encoder/conv1/weight [d, n_mels, 3], "
                     "encoder/layer_0/ffn/linear_0/weight [ff, d] and the integer scalar encoder/num_heads", path);
        return false;
    }
    uint8_t b[4] = {};
    if (!read_at(m, fd, b, heads->bytes, heads->offset)) return false;
    const int64_t n_head = heads->dtype == CT2_I8 ? (int8_t)b[0] : heads->dtype == CT2_I16 ? (int16_t)(b[0] | b[1] << 8)
                         : (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    int64_t n_layer = 0;
    for (char name[64]; n_layer <= 256; n_layer++) {
        snprintf(name, sizeof(name), "encoder/layer_%d/ffn/linear_0/weight", (int)n_layer);
        if (!ct2_find(vars, name)) break;
    }
    whisper_audio_hparams & hp = m->hparams;
    hp.n_layer = (int)std::min<int64_t>(n_layer, 256);
    for (const auto & kv : vars) {                          // a layer after a gap: not one of the encoder's
        const long il = wa_layer_of(kv.first, "encoder/layer_");
        if (n_layer <= 256 && il >= n_layer) {
            wa_set_error("%s: variable '%s' is of layer %ld, but the layers present end at encoder/layer_%d: a layer is "
                         "missing", path, kv.first.c_str(), il, (int)n_layer - 1);
            return false;
        }
    }
    struct { const char * what; int64_t v; int * dst; int lo, hi; } keys[] = {
        {"n_mels (encoder/conv1/weight's dims[1])", conv1->dims[1], &hp.n_mels, 1, 512},
        {"d_model (encoder/conv1/weight's dims[0])", conv1->dims[0], &hp.n_state, 1, 16384},
        {"encoder/num_heads", n_head, &hp.n_head, 1, 256},
        {"the layer count (encoder/layer_N)", n_layer, &hp.n_layer, 1, 256},
        {"the FFN width (encoder/layer_0/ffn/linear_0/weight's dims[0])", fc1->dims[0], &hp.n_ff, 1, 65536},
    };
    for (auto & k : keys) {
        if (k.v < k.lo || k.v > k.hi) { wa_set_error("%s: %s = %lld is outside [%d, %d]", path, k.what, (long long)k.v, k.lo, k.hi); return false; }
        *k.dst = (int)k.v;
    }
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: d_model %d is not a multiple of encoder/num_heads %d", path, hp.n_state, hp.n_head);
        return false;
    }
    hp.n_ctx = 1500;
    hp.eps = 1e-5f;                                         // CTranslate2's LayerNorm, as Whisper's
    return true;
}

// A variable's data as float32 (n values from element `first`), through a scratch buffer.
static bool ct2_read_f32(whisper_audio_model * m, int fd, const ct2_var & v, uint64_t first, size_t n, float * out,
                         std::vector<uint8_t> & tmp) {
    static const vt_type types[CT2_DTYPE_COUNT] = {VT_TYPE_F32, VT_TYPE_F32, VT_TYPE_F32, VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16};
    VT_ASSERT(v.dtype == CT2_F32 || v.dtype == CT2_F16 || v.dtype == CT2_BF16);
    const size_t es = CT2_DTYPE_SIZE[v.dtype];
    tmp.resize(n * es);
    if (!read_at(m, fd, tmp.data(), n * es, v.offset + first * es)) return false;
    vt_convert(out, VT_TYPE_F32, tmp.data(), types[v.dtype], n);
    return true;
}

// The encoder's tensors, row by row of WA_TENSORS, made from their CTranslate2 variables into
// the model's memory under our names, as model_read_weights leaves a GGUF file's: float16 and
// bfloat16 matrices kept, int8 ones dequantised to float32, the rest float32.
static bool ct2_read_weights(whisper_audio_model * m, int fd, const ct2_vars & vars) {
    const char * path = m->path.c_str();
    const whisper_audio_hparams & hp = m->hparams;
    struct use {
        const ct2_var * v = nullptr, * scale = nullptr;   // none: the computed mel bank
        gguf_tensor_info t;
        uint64_t first = 0;                                 // the part's first element in v
    };
    std::vector<use> uses;
    std::map<std::string, std::pair<int, unsigned>> fused; // fused variable -> n_parts, parts with a row
    const size_t ALIGN = 64;
    size_t total = 0;
    const bool found = wa_for_each_tensor(hp, [&](const wa_tensor_desc & t, int il, const char * name) {
        use u;
        u.t.name = name;
        u.t.n_dims = wa_shape(hp, t, u.t.ne);
        u.t.type = VT_TYPE_F32;
        const char * ct2 = WA_CT2_NAMES[&t - WA_TENSORS].ct2;
        char vname[128];
        if (ct2) {
            snprintf(vname, sizeof(vname), ct2, il);
            u.v = ct2_find(vars, vname);
            if (!u.v) { wa_set_error("%s: variable '%s' (%s) is missing", path, vname, name); return false; }
            // dims outermost first; a fused variable holds n_parts parts on its first
            bool same = u.v->rank == u.t.n_dims;
            for (int i = 0; same && i < u.t.n_dims; i++) same = u.v->dims[i] == u.t.ne[u.t.n_dims - 1 - i] * (i == 0 ? t.n_parts : 1);
            if (!same) {
                std::string got, want;
                for (int i = 0; i < u.v->rank; i++) got += (i ? ", " : "") + std::to_string(u.v->dims[i]);
                for (int i = 0; i < u.t.n_dims; i++) want += (i ? ", " : "") + std::to_string(u.t.ne[u.t.n_dims - 1 - i] * (i == 0 ? t.n_parts : 1));
                wa_set_error("%s: variable '%s' has dims [%s], the encoder needs [%s]", path, vname, got.c_str(), want.c_str());
                return false;
            }
            const int dt = u.v->dtype;
            if (dt != CT2_F32 && dt != CT2_F16 && dt != CT2_BF16 && !(t.matrix && (dt == CT2_I8 || dt == CT2_I16))) {
                wa_set_error("%s: variable '%s' is %s; expected float32, float16, bfloat16%s", path, vname,
                             CT2_DTYPE_NAME[dt], t.matrix ? ", int8 or int16" : "");
                return false;
            }
            if (dt == CT2_I8 || dt == CT2_I16) {                // int8: a scale per row; int16: one scale
                const std::string sname = std::string(vname) + "_scale";
                u.scale = ct2_find(vars, sname);
                if (!u.scale || u.scale->rank != (dt == CT2_I8) || (dt == CT2_I8 && u.scale->dims[0] != u.v->dims[0]) ||
                    (u.scale->dtype != CT2_F32 && u.scale->dtype != CT2_F16 && u.scale->dtype != CT2_BF16)) {
                    wa_set_error("%s: %s variable '%s' needs '%s', a float %s", path, CT2_DTYPE_NAME[dt], vname, sname.c_str(),
                                 dt == CT2_I8 ? "per row (rank 1)" : "scalar");
                    return false;
                }
            }
            if (t.matrix && dt == CT2_F16) u.t.type = VT_TYPE_F16;
            if (t.matrix && dt == CT2_BF16) u.t.type = VT_TYPE_BF16;
            u.first = (uint64_t)t.part * (u.v->dims[0] / t.n_parts) * (u.v->bytes / CT2_DTYPE_SIZE[dt] / u.v->dims[0]);
            if (t.n_parts > 1) {
                auto & f = fused[vname];
                f.first = t.n_parts;
                f.second |= 1u << t.part;
            }
        }
        u.t.bytes = vt_type_size((vt_type)u.t.type);
        for (int i = 0; i < u.t.n_dims; i++) u.t.bytes *= u.t.ne[i];
        total += (u.t.bytes + ALIGN - 1) / ALIGN * ALIGN;
        uses.push_back(u);
        return true;
    });
    if (!found) return false;
    // aliases may name one variable for many: the encoder's variables must be backed by the
    // data the file stores (256 layers aliased to one took 6.4 GB from a 7.5 MB file)
    std::set<const ct2_var *> distinct;
    uint64_t used_bytes = 0, stored = 0;
    for (const use & u : uses)
        for (const ct2_var * v : {u.v, u.scale})
            if (v && distinct.insert(v).second) used_bytes += v->bytes;
    for (const auto & kv : vars) stored += kv.second.alias ? 0 : kv.second.bytes;
    if (used_bytes > stored) {
        wa_set_error("%s: the encoder's %d layers take %llu bytes, more than the %llu bytes of data the file stores: "
                     "aliases stand in for layers the file does not hold", path, hp.n_layer, (unsigned long long)used_bytes,
                     (unsigned long long)stored);
        return false;
    }

    // the parts of a fused variable that no row takes (k's bias) must be zero: they are dropped
    std::vector<uint8_t> tmp;
    std::vector<float> vals;
    for (const auto & kv : fused) {
        const ct2_var & v = *ct2_find(vars, kv.first);
        const size_t n = v.bytes / CT2_DTYPE_SIZE[v.dtype] / kv.second.first;
        for (int p = 0; p < kv.second.first; p++) {
            if (kv.second.second >> p & 1) continue;
            vals.resize(n);
            if (!ct2_read_f32(m, fd, v, p * n, n, vals.data(), tmp)) return false;
            for (size_t i = 0; i < n; i++) {
                if (vals[i] != 0.0f) {
                    wa_set_error("%s: variable '%s': part %d of %d holds %g, but Whisper has no such weight (k_proj has no bias)",
                                 path, kv.first.c_str(), p, kv.second.first, vals[i]);
                    return false;
                }
            }
        }
    }

    m->weights.reset(new (std::nothrow) uint8_t[total + ALIGN]);
    if (!m->weights) { wa_set_error("%s: out of memory for %zu bytes of weights", path, total); return false; }
    uint8_t * dst = m->weights.get() + (ALIGN - (uintptr_t)m->weights.get() % ALIGN) % ALIGN;
    for (use & u : uses) {
        const size_t n = u.t.bytes / vt_type_size((vt_type)u.t.type);
        float * f32 = (float *)dst;
        if (!u.v) {
            wa_mel_filters_slaney(hp.n_mels, f32);
        } else if (u.scale) {                               // w = q / scale, int8's scale per row
            const bool i8 = u.v->dtype == CT2_I8;
            const size_t cols = i8 ? u.v->bytes / u.v->dims[0] : n, row0 = u.first / cols, rows = n / cols;
            tmp.resize(n * (i8 ? 1 : 2));
            vals.resize(rows);
            if (!read_at(m, fd, tmp.data(), tmp.size(), u.v->offset + u.first * (i8 ? 1 : 2))) return false;
            std::vector<uint8_t> stmp;
            if (!ct2_read_f32(m, fd, *u.scale, i8 ? row0 : 0, rows, vals.data(), stmp)) return false;
            for (size_t i = 0; i < n; i++)
                f32[i] = (float)(i8 ? (int8_t)tmp[i] : (int16_t)(tmp[2 * i] | tmp[2 * i + 1] << 8)) / vals[i / cols];
        } else if (u.t.type == VT_TYPE_F32) {
            if (!ct2_read_f32(m, fd, *u.v, u.first, n, f32, tmp)) return false;
        } else {                                            // float16 or bfloat16 kept
            if (!read_at(m, fd, dst, u.t.bytes, u.v->offset + u.first * 2)) return false;
        }
        const size_t bad = u.t.type == VT_TYPE_F32 ? first_nonfinite<uint32_t>(dst, n, 0x7f800000u)
                         : first_nonfinite<uint16_t>(dst, n, u.t.type == VT_TYPE_F16 ? 0x7c00 : 0x7f80);
        if (bad < n) {
            wa_set_error("%s: tensor '%s' has a non-finite value at element %zu (a corrupt file, or a zero int8 scale)",
                         path, u.t.name.c_str(), bad);
            return false;
        }
        u.t.data = dst;
        m->index.emplace(u.t.name, m->tensors.size());
        m->tensors.push_back(u.t);
        dst += (u.t.bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    m->hparams.weight_type = wa_weight_type((vt_type)m->find("encoder.layers.0.fc1.weight")->type);
    m->mel_filters = (const float *)m->find("mel_filters")->data;
    return true;
}

static bool ct2_model_read(whisper_audio_model * m, int fd) {
    ct2_vars vars;
    m->kind = whisper_audio_model::CT2;
    return ct2_parse(m, fd, vars) && ct2_hparams(m, fd, vars) && ct2_read_weights(m, fd, vars);
}

// ---- whisper.cpp's legacy ggml-*.bin, read through the same table ------------------------
// What whisper.cpp's models/convert-pt-to-ggml.py and convert-h5-to-ggml.py write (and its
// quantize rewrites): uint32 magic 0x67676d6c; 11 int32 hparams (n_vocab, n_audio_ctx,
// n_audio_state, n_audio_head, n_audio_layer, 4 of the decoder, n_mels, ftype); the mel bank
// (int32 n_mel, n_fft, f32 [n_mel][n_fft]); the vocabulary (int32 count, then int32 length +
// bytes each); then tensors up to the end of the file: int32 n_dims, name length, ggml type,
// dims (innermost first), name, data, unaligned. The scripts store the conv biases as [d, 1].
// The encoder's feed-forward width is not stored: fc1's shape says it.

static const uint32_t GGML_FILE_MAGIC = 0x67676d6c;   // "lmgg" on disk

// Header, hyperparameters, mel bank and vocabulary from r (the file's first bytes; past_end
// when they go beyond), then the tensor headers, walked with pread to the end of the file.
// The encoder tensors that the table names are recorded under our names, offsets from the
// file's start; the rest (the decoder's) are only stepped over.
static bool ggml_parse(whisper_audio_model * m, gguf_reader & r, int fd) {
    const char * path = m->path.c_str();
    m->kind = whisper_audio_model::GGML;
    r.pos = 4;
    int32_t h[11];
    for (int32_t & v : h) v = r.get<int32_t>();
    if (!r.ok) { wa_set_error("%s: truncated whisper.cpp ggml header", path); return false; }
    whisper_audio_hparams & hp = m->hparams;
    struct { const char * name; int32_t v; int * dst; int lo, hi; } keys[] = {
        {"n_audio_ctx", h[1], &hp.n_ctx, 1500, 1500},
        {"n_audio_state", h[2], &hp.n_state, 1, 16384},
        {"n_audio_head", h[3], &hp.n_head, 1, 256},
        {"n_audio_layer", h[4], &hp.n_layer, 1, 256},
        {"n_mels", h[9], &hp.n_mels, 1, 512},
    };
    for (auto & k : keys) {
        if (k.v < k.lo || k.v > k.hi) {
            wa_set_error("%s: whisper.cpp ggml hparam %s = %d is outside [%d, %d]", path, k.name, k.v, k.lo, k.hi);
            return false;
        }
        *k.dst = k.v;
    }
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: n_audio_state %d is not a multiple of n_audio_head %d", path, hp.n_state, hp.n_head);
        return false;
    }
    hp.eps = 1e-5f;                                            // Whisper's; the file has none

    // the mel bank, as the tensor mel_filters [n_mels, 201]
    const int32_t n_mel = r.get<int32_t>(), n_fft = r.get<int32_t>();
    if (!r.ok) { wa_set_error("%s: truncated whisper.cpp ggml mel filters", path); return false; }
    if (n_mel != hp.n_mels || n_fft != WHISPER_AUDIO_N_BINS) {
        wa_set_error("%s: the mel filters are [%d, %d], n_mels needs [%d, %d]", path, n_mel, n_fft, hp.n_mels, WHISPER_AUDIO_N_BINS);
        return false;
    }
    gguf_tensor_info mel;
    mel.name = "mel_filters";
    mel.n_dims = 2;
    mel.ne[0] = n_fft;
    mel.ne[1] = n_mel;
    mel.offset = r.pos;
    mel.bytes = (uint64_t)n_mel * n_fft * sizeof(float);
    if (!r.need(mel.bytes)) { wa_set_error("%s: truncated whisper.cpp ggml mel filters", path); return false; }
    r.pos += mel.bytes;

    // the vocabulary, stepped over
    const int32_t n_vocab = r.get<int32_t>();
    if (r.ok && (n_vocab < 0 || n_vocab > (1 << 20))) { wa_set_error("%s: implausible vocabulary size %d", path, n_vocab); return false; }
    for (int32_t i = 0; i < n_vocab && r.ok; i++) {
        const uint32_t len = r.get<uint32_t>();
        if (r.ok && len > GGUF_MAX_STRING) { wa_set_error("%s: vocabulary entry %d is %u bytes long", path, i, len); return false; }
        if (r.need(len)) r.pos += len;
    }
    if (!r.ok) { wa_set_error("%s: truncated whisper.cpp ggml vocabulary", path); return false; }

    // the tensors: ours by their whisper.cpp names (the mel bank is already ours)
    std::unordered_map<std::string, std::pair<std::string, int>> ours;   // -> our name, dimension count
    wa_for_each_tensor(hp, [&](const wa_tensor_desc & t, int il, const char * name) {
        const char * ggml = WA_GGML_NAMES[&t - WA_TENSORS].ggml;
        char buf[GGUF_MAX_NAME + 1];
        int64_t ne[4];
        if (ggml) snprintf(buf, sizeof(buf), ggml, il);
        if (ggml) ours[buf] = {name, wa_shape(hp, t, ne)};
        return true;
    });
    m->index.emplace(mel.name, 0);
    m->tensors.push_back(mel);
    uint64_t pos = r.pos;
    for (uint64_t i = 0; pos < m->file_size; i++) {
        if (i == GGUF_MAX_TENSORS) { wa_set_error("%s: more than %llu tensors", path, (unsigned long long)GGUF_MAX_TENSORS); return false; }
        int32_t th[3 + 4];                                   // n_dims, name length, type, dims
        char name[GGUF_MAX_NAME];
        if (m->file_size - pos < 12) { wa_set_error("%s: truncated tensor header at byte %llu", path, (unsigned long long)pos); return false; }
        if (!read_at(m, fd, th, 12, pos)) return false;
        const int n_dims = th[0], name_len = th[1], type = th[2];
        if (n_dims < 1 || n_dims > 4 || name_len < 1 || name_len > (int)GGUF_MAX_NAME) {
            wa_set_error("%s: tensor %llu at byte %llu: bad header (%d dims, name of %d bytes)", path, (unsigned long long)i,
                         (unsigned long long)pos, n_dims, name_len);
            return false;
        }
        const uint64_t head = 12 + 4 * n_dims + name_len;
        if (m->file_size - pos < head) { wa_set_error("%s: truncated tensor header at byte %llu", path, (unsigned long long)pos); return false; }
        if (!read_at(m, fd, th + 3, 4 * n_dims, pos + 12) || !read_at(m, fd, name, name_len, pos + 12 + 4 * n_dims)) return false;
        gguf_tensor_info t;
        t.name.assign(name, name_len);
        if (!vt_type_valid(type) && !wa_block(type)) {
            wa_set_error("%s: tensor '%s' has ggml type %d; supported: F32 (0), F16 (1), BF16 (30), Q4_0 (2), Q4_1 (3), "
                         "Q5_0 (6), Q5_1 (7), Q8_0 (8)", path, t.name.c_str(), type);
            return false;
        }
        t.type = type;
        t.n_dims = n_dims;
        for (int d = 0; d < n_dims; d++) {
            if (th[3 + d] < 1 || th[3 + d] > (1 << 24)) { wa_set_error("%s: tensor '%s': bad dimension %d", path, t.name.c_str(), th[3 + d]); return false; }
            t.ne[d] = th[3 + d];
        }
        if (wa_block(type) && t.ne[0] % QK != 0) {
            wa_set_error("%s: tensor '%s' is %s with rows of %lld: not whole blocks of %d", path, t.name.c_str(),
                         wa_type_name(type), (long long)t.ne[0], QK);
            return false;
        }
        if (!wa_tensor_bytes(type, t.ne, m->file_size - pos - head, &t.bytes)) {
            wa_set_error("%s: tensor '%s' (%s, [%lld, %lld, %lld, %lld]) runs past the end of the file: truncated?", path,
                         t.name.c_str(), wa_type_name(type), (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2], (long long)t.ne[3]);
            return false;
        }
        t.offset = pos + head;
        pos = t.offset + t.bytes;
        auto it = ours.find(t.name);
        if (it == ours.end() && !wa_check_layers(m, t.name, "encoder.blocks.", t.name.c_str(), "n_audio_layer")) return false;
        if (it == ours.end()) continue;
        t.name = it->second.first;
        for (int d = 0; d < t.n_dims && t.n_dims > it->second.second;)   // dims of 1 beyond ours: [d, 1] is [d]
            if (t.ne[d] == 1) { std::copy(t.ne + d + 1, t.ne + 4, t.ne + d); t.ne[3] = 1; t.n_dims--; } else d++;
        if (!m->index.emplace(t.name, m->tensors.size()).second) {
            wa_set_error("%s: duplicate tensor '%s'", path, it->first.c_str());
            return false;
        }
        m->tensors.push_back(t);
    }
    // the feed-forward width from fc1 [n_ff, d]; without it the table's check says what is missing
    const gguf_tensor_info * fc1 = m->find("encoder.layers.0.fc1.weight");
    hp.n_ff = fc1 && fc1->n_dims == 2 ? (int)fc1->ne[1] : 4 * hp.n_state;
    if (hp.n_ff > 65536) { wa_set_error("%s: fc1 is %d wide, more than 65536", path, hp.n_ff); return false; }
    return true;
}

// ---- JSON (RFC 8259): config.json, the shard index, safetensors headers --------------------
// The library's one JSON reader: a tree of values, as strict as the RFC (UTF-8 checked, no
// text after the value) and stricter than Python's json (a key twice in an object, which
// Python silently resolves to the last, is refused), nested at most WA_JSON_DEPTH deep. A
// number keeps its text, so that a 64-bit offset reads back exactly.

static const int WA_JSON_DEPTH = 64;

struct wa_json {
    enum kind { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT } type = NUL;
    bool b = false;
    std::string str;                                        // STRING: its text (UTF-8); NUMBER: the literal
    std::vector<wa_json> items;                             // ARRAY
    std::vector<std::pair<std::string, wa_json>> fields;    // OBJECT, in the text's order

    const wa_json * get(const char * key) const {
        for (const auto & f : fields) if (f.first == key) return &f.second;
        return nullptr;
    }
    // a non-negative integer literal (no sign, fraction or exponent) that fits in 64 bits
    bool u64(uint64_t * v) const {
        if (type != NUMBER || str.empty()) return false;
        uint64_t x = 0;
        for (const char c : str) {
            if (c < '0' || c > '9' || x > (UINT64_MAX - (uint64_t)(c - '0')) / 10) return false;
            x = x * 10 + (uint64_t)(c - '0');
        }
        *v = x;
        return true;
    }
    // the value as a message shows it: a number, true/false/null or a short string as written
    std::string shown() const {
        switch (type) {
            case NUL:    return "null";
            case BOOL:   return b ? "true" : "false";
            case NUMBER: return str;
            case STRING: return str.size() <= 48 && str.find_first_of(std::string("\"\\\0", 3)) == std::string::npos
                                ? "\"" + str + "\"" : "a string";
            case ARRAY:  return "an array";
            case OBJECT: return "an object";
        }
        return "";
    }
};

// Recursive descent over [s, end): value -> object | array | string | number | literal. Each
// function starts at its first character and leaves s just past its last.
struct wa_json_parser {
    const char * begin, * s, * end;
    std::string error;                                      // what is wrong and at which byte

    bool fail(const std::string & what) {
        if (error.empty()) error = (s >= end ? "unexpected end (" + what + ")" : what) + " at byte " + std::to_string(s - begin);
        return false;
    }
    void ws() { while (s < end && strchr(" \t\n\r", *s) && *s) s++; }
    bool at(char c) { ws(); return s < end && *s == c; }   // the next character after white space is c
    bool eat(char c) { return at(c) && ++s; }
    bool is_digit() const { return s < end && *s >= '0' && *s <= '9'; }

    bool object(wa_json & v, int depth) {
        v.type = wa_json::OBJECT;
        s++;
        if (eat('}')) return true;
        do {
            if (!at('"')) return fail("expected a key");
            std::string key;
            if (!string(key)) return false;
            if (!eat(':')) return fail("expected ':' after a key");
            v.fields.emplace_back(std::move(key), wa_json());
            if (!value(v.fields.back().second, depth + 1)) return false;
        } while (eat(','));
        if (!eat('}')) return fail("expected ',' or '}'");
        std::vector<const std::string *> keys;              // each key once
        for (const auto & f : v.fields) keys.push_back(&f.first);
        std::sort(keys.begin(), keys.end(), [](const std::string * a, const std::string * b) { return *a < *b; });
        for (size_t i = 1; i < keys.size(); i++)
            if (*keys[i] == *keys[i - 1]) { s--; return fail("the key \"" + keys[i]->substr(0, 64) + "\" twice in one object"); }
        return true;
    }
    bool array(wa_json & v, int depth) {
        v.type = wa_json::ARRAY;
        s++;
        if (eat(']')) return true;
        do {
            v.items.emplace_back();
            if (!value(v.items.back(), depth + 1)) return false;
        } while (eat(','));
        return eat(']') || fail("expected ',' or ']'");
    }
    // four hex digits of a \u escape
    bool hex4(uint32_t & cp) {
        cp = 0;
        for (int k = 0; k < 4; k++, s++) {
            if (s >= end || !isxdigit((unsigned char)*s)) return false;
            cp = cp * 16 + (uint32_t)(isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10));
        }
        return true;
    }
    // a code point of a \u escape (a surrogate pair as one), appended as UTF-8
    bool escape_u(std::string & o) {
        uint32_t cp, lo;
        if (!hex4(cp)) return fail("a bad \\u escape");
        if (cp >= 0xdc00 && cp <= 0xdfff) return fail("a lone surrogate");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (end - s < 2 || s[0] != '\\' || s[1] != 'u') return fail("a lone surrogate");
            s += 2;
            if (!hex4(lo) || lo < 0xdc00 || lo > 0xdfff) return fail("a lone surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        const int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        static const uint8_t lead[5] = {0, 0x00, 0xc0, 0xe0, 0xf0};
        for (int k = 0; k < n; k++) {                       // byte k: the lead's bits, then 6 bits each
            const int shift = 6 * (n - 1 - k);
            o += (char)(k == 0 ? lead[n] | (cp >> shift) : 0x80 | ((cp >> shift) & 0x3f));
        }
        return true;
    }
    // a UTF-8 character of 2 to 4 bytes, checked: its shortest form, no surrogate, at most U+10FFFF
    bool utf8(std::string & o) {
        const unsigned char c = (unsigned char)*s;
        const int n = c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc0 && c < 0xe0 ? 2 : 0;
        if (n == 0 || end - s < n) return fail("invalid UTF-8");
        uint32_t cp = c & (0xff >> (n + 1));
        for (int k = 1; k < n; k++) {
            const unsigned char cc = (unsigned char)s[k];
            if ((cc & 0xc0) != 0x80) return fail("invalid UTF-8");
            cp = cp << 6 | (cc & 0x3f);
        }
        static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return fail("invalid UTF-8");
        o.append(s, (size_t)n);
        s += n;
        return true;
    }
    bool string(std::string & o) {
        static const char ESC[] = "\"\\/bfnrt", CHR[] = "\"\\/\b\f\n\r\t";   // \x -> the character
        for (s++; s < end && *s != '"';) {
            const unsigned char c = (unsigned char)*s;
            if (c < 0x20) return fail("a control character in a string");
            if (c >= 0x80) {
                if (!utf8(o)) return false;
            } else if (c != '\\') {
                o += *s++;
            } else if (++s < end && *s == 'u') {
                s++;
                if (!escape_u(o)) return false;
            } else if (const char * e = s < end && *s ? strchr(ESC, *s) : nullptr) {
                o += CHR[e - ESC];
                s++;
            } else {
                return fail("a bad escape");
            }
        }
        return eat('"') || fail("an unterminated string");
    }
    // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, kept as its text
    bool number(wa_json & v) {
        const char * start = s;
        s += *s == '-';
        if (!is_digit()) return fail("unexpected character");
        if (*s++ != '0') while (is_digit()) s++;
        for (const char * part : {".", "eE"}) {
            if (s >= end || !strchr(part, *s) || !*s) continue;
            s++;
            if (*part == 'e' && s < end && (*s == '+' || *s == '-')) s++;
            if (!is_digit()) return fail("a bad number");
            while (is_digit()) s++;
        }
        v.type = wa_json::NUMBER;
        v.str.assign(start, s);
        return true;
    }
    bool literal(const char * word, wa_json & v, wa_json::kind type, bool b) {
        const size_t n = strlen(word);
        if ((size_t)(end - s) < n || strncmp(s, word, n) != 0) return fail("unexpected character");
        s += n;
        v.type = type;
        v.b = b;
        return true;
    }
    bool value(wa_json & v, int depth) {
        if (depth > WA_JSON_DEPTH) return fail("nesting deeper than " + std::to_string(WA_JSON_DEPTH));
        ws();
        if (s >= end) return fail("no value");
        switch (*s) {
            case '{': return object(v, depth);
            case '[': return array(v, depth);
            case '"': v.type = wa_json::STRING; return string(v.str);
            case 't': return literal("true", v, wa_json::BOOL, true);
            case 'f': return literal("false", v, wa_json::BOOL, false);
            case 'n': return literal("null", v, wa_json::NUL, false);
            default:  return number(v);
        }
    }
};

// text as one JSON value; false with error ("expected ':' at byte 17") when it is not one.
static bool wa_json_parse(const char * text, size_t n, wa_json & out, std::string & error) {
    wa_json_parser p{text, text, text + n, {}};
    bool ok = p.value(out, 0);
    if (ok) {
        p.ws();
        ok = p.s == p.end || p.fail("text after the value");
    }
    error = p.error;
    return ok;
}

// ---- Hugging Face directories: config.json + safetensors, read through the same table -------
// What save_pretrained writes (convert/convert-hf-to-gguf.py reads the same): config.json, and
// model.safetensors or shards that model.safetensors.index.json names ({"weight_map": {tensor:
// shard file}}). The encoder's tensors keep their stored type where the model file would hold
// it (matrices F32, F16 or BF16; F64 ones as F32); the rest become F32, the mel bank is
// computed: the weights the converter's GGUF of the directory holds, with --outtype the stored
// type, bit for bit. A safetensors file (huggingface/safetensors): uint64 LE header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}} with an optional
// "__metadata__" of strings, then the data, which the tensors tile exactly: in offset order
// each begins where the one before ended and the last ends with the file (the checks of the
// safetensors library's own reader).

// safetensors' dtypes and their widths in bits (F4 and F6 pack their elements)
static const struct { const char * name; int bits; } WA_ST_DTYPES[] = {
    {"BOOL", 8}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},
    {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},
    {"U32", 32}, {"F32", 32}, {"F64", 64}, {"I64", 64}, {"U64", 64}, {"C64", 64},
};
static const uint64_t WA_ST_MAX_HEADER = 100u << 20;     // the safetensors library's bound on N
static const uint64_t WA_HF_MAX_JSON   = 100u << 20;     // config.json, the shard index

struct wa_st_tensor {
    std::string dtype;
    std::vector<uint64_t> shape;                          // PyTorch's, outermost first
    uint64_t begin = 0, end = 0;                          // in the data section
};

struct wa_st_file {
    std::string path;
    int fd = -1;
    uint64_t size = 0, data_start = 0;
    std::unordered_map<std::string, wa_st_tensor> tensors;
    ~wa_st_file() { if (fd >= 0) close(fd); }
};

// Opens path for reading, a regular file (a FIFO would block, a directory is not one), within
// root when root is set (a model from the Hugging Face cache: its files, symlinks into blobs/,
// must stay inside its folder there). size: the file's. -1 with the error set.
static int wa_hf_open(const std::string & path, const std::string & root, uint64_t * size) {
    std::string real = path;
    if (!root.empty()) {
        if (char * r = realpath(path.c_str(), nullptr)) {
            real = r;
            free(r);
            if (real.compare(0, root.size() + 1, root + "/") != 0) {
                wa_set_error("%s: a symlink to %s, which leaves the model's folder in the Hugging Face cache (%s): refused",
                             path.c_str(), real.c_str(), root.c_str());
                return -1;
            }
        }
    }
    const int fd = open(real.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) { wa_set_error("%s: cannot open: %s", path.c_str(), strerror(errno)); return -1; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        wa_set_error("%s: not a regular file", path.c_str());
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = (uint64_t)st.st_size;
    return fd;
}

// A JSON file of the directory (config.json, the index), parsed.
static bool wa_hf_json(const std::string & path, const std::string & root, wa_json & out) {
    uint64_t size = 0;
    const int fd = wa_hf_open(path, root, &size);
    if (fd < 0) return false;
    std::string text;
    bool ok = size <= WA_HF_MAX_JSON;
    if (!ok) wa_set_error("%s: %llu bytes: more than the %llu of a JSON file this reader takes", path.c_str(),
                          (unsigned long long)size, (unsigned long long)WA_HF_MAX_JSON);
    if (ok) {
        text.resize(size);
        ok = read_at(path, size, fd, &text[0], size, 0);
    }
    close(fd);
    std::string error;
    if (ok && !wa_json_parse(text.data(), text.size(), out, error)) {
        wa_set_error("%s: not valid JSON: %s", path.c_str(), error.c_str());
        return false;
    }
    return ok;
}

// shape's elements of dtype in bytes, false when they pass limit or are not whole bytes
static bool wa_st_bytes(const std::vector<uint64_t> & shape, int bits, uint64_t limit, uint64_t * bytes) {
    uint64_t n = 1;
    for (const uint64_t d : shape) {
        if (d == 0) { *bytes = 0; return true; }
        if (n > limit * 8 / d) return false;
        n *= d;
    }
    if (n > limit * 8 / (uint64_t)bits || n * (uint64_t)bits % 8 != 0) return false;
    *bytes = n * (uint64_t)bits / 8;
    return true;
}

// The header of a safetensors file, every entry checked, and its data's tiling.
static bool wa_st_open(wa_st_file & f, const std::string & path, const std::string & root) {
    f.path = path;
    const char * p = path.c_str();
    if ((f.fd = wa_hf_open(path, root, &f.size)) < 0) return false;
    uint8_t len[8];
    if (f.size < 8) { wa_set_error("%s: %llu bytes: too short for a safetensors file", p, (unsigned long long)f.size); return false; }
    if (!read_at(path, f.size, f.fd, len, 8, 0)) return false;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
    if (n > f.size - 8 || n > WA_ST_MAX_HEADER) {
        wa_set_error("%s: a safetensors header of %llu bytes, in a file of %llu (at most %llu): not a safetensors file, or truncated",
                     p, (unsigned long long)n, (unsigned long long)f.size, (unsigned long long)WA_ST_MAX_HEADER);
        return false;
    }
    std::string text(n, '\0');
    if (!read_at(path, f.size, f.fd, &text[0], n, 8)) return false;
    wa_json h;
    std::string error;
    if (!wa_json_parse(text.data(), text.size(), h, error)) { wa_set_error("%s: bad safetensors header: %s", p, error.c_str()); return false; }
    if (h.type != wa_json::OBJECT) { wa_set_error("%s: the safetensors header is %s, not an object", p, h.shown().c_str()); return false; }
    f.data_start = 8 + n;
    const uint64_t data_size = f.size - f.data_start;
    for (const auto & kv : h.fields) {
        const std::string & name = kv.first;
        const wa_json & e = kv.second;
        if (name == "__metadata__") {
            bool strings = e.type == wa_json::OBJECT;
            for (const auto & m : e.fields) strings = strings && m.second.type == wa_json::STRING;
            if (!strings) { wa_set_error("%s: __metadata__ is not an object of strings", p); return false; }
            continue;
        }
        const char * t = name.c_str();
        if (e.type != wa_json::OBJECT) { wa_set_error("%s: tensor '%s': its entry is %s, not an object", p, t, e.shown().c_str()); return false; }
        wa_st_tensor st;
        int bits = 0;
        bool has_offsets = false, has_shape = false;
        for (const auto & fld : e.fields) {
            const wa_json & v = fld.second;
            if (fld.first == "dtype" && v.type == wa_json::STRING) {
                for (const auto & d : WA_ST_DTYPES) if (v.str == d.name) bits = d.bits;
                if (!bits) { wa_set_error("%s: tensor '%s': dtype %s is not one of safetensors'", p, t, v.shown().c_str()); return false; }
                st.dtype = v.str;
            } else if (fld.first == "shape" && v.type == wa_json::ARRAY) {
                for (const wa_json & d : v.items) {
                    uint64_t x;
                    if (!d.u64(&x)) { wa_set_error("%s: tensor '%s': shape holds %s, not a size", p, t, d.shown().c_str()); return false; }
                    st.shape.push_back(x);
                }
                has_shape = true;
            } else if (fld.first == "data_offsets" && v.type == wa_json::ARRAY && v.items.size() == 2 && v.items[0].u64(&st.begin) &&
                       v.items[1].u64(&st.end)) {
                has_offsets = true;
            } else {
                const bool known = fld.first == "dtype" || fld.first == "shape" || fld.first == "data_offsets";
                wa_set_error("%s: tensor '%s': %s%s%s", p, t, known ? fld.first.c_str() : "an unknown field \"",
                             known ? " is not what safetensors stores there" : fld.first.substr(0, 64).c_str(),
                             known ? "" : "\" (its entry holds dtype, shape and data_offsets)");
                return false;
            }
        }
        if (!bits || !has_shape || !has_offsets) {
            wa_set_error("%s: tensor '%s': no %s", p, t, !bits ? "dtype" : !has_shape ? "shape" : "data_offsets");
            return false;
        }
        if (st.begin > st.end || st.end > data_size) {
            wa_set_error("%s: tensor '%s': data_offsets [%llu, %llu] %s the %llu bytes of data: truncated?", p, t,
                         (unsigned long long)st.begin, (unsigned long long)st.end, st.begin > st.end ? "run backwards in" : "lie outside",
                         (unsigned long long)data_size);
            return false;
        }
        uint64_t bytes = 0;
        if (!wa_st_bytes(st.shape, bits, data_size, &bytes) || bytes != st.end - st.begin) {
            std::string shape;
            for (const uint64_t d : st.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
            wa_set_error("%s: tensor '%s': shape [%s] of %s does not fill its data_offsets [%llu, %llu] (%llu bytes)", p, t,
                         shape.c_str(), st.dtype.c_str(), (unsigned long long)st.begin, (unsigned long long)st.end,
                         (unsigned long long)(st.end - st.begin));
            return false;
        }
        f.tensors.emplace(name, std::move(st));
    }
    std::vector<std::pair<const std::string *, const wa_st_tensor *>> order;
    for (const auto & kv : f.tensors) order.push_back({&kv.first, &kv.second});
    std::sort(order.begin(), order.end(), [](const auto & a, const auto & b) {
        return a.second->begin != b.second->begin ? a.second->begin < b.second->begin : a.second->end < b.second->end;
    });
    uint64_t pos = 0;
    for (size_t i = 0; i < order.size(); i++) {
        const wa_st_tensor & t = *order[i].second;
        if (t.begin < pos) {
            wa_set_error("%s: tensors '%s' and '%s' overlap (data bytes [%llu, %llu) and [%llu, %llu))", p, order[i - 1].first->c_str(),
                         order[i].first->c_str(), (unsigned long long)order[i - 1].second->begin, (unsigned long long)pos,
                         (unsigned long long)t.begin, (unsigned long long)t.end);
            return false;
        }
        if (t.begin > pos) {
            wa_set_error("%s: data bytes [%llu, %llu) before tensor '%s' belong to no tensor", p, (unsigned long long)pos,
                         (unsigned long long)t.begin, order[i].first->c_str());
            return false;
        }
        pos = t.end;
    }
    if (pos != data_size) {
        wa_set_error("%s: %llu bytes after the last tensor's data belong to no tensor", p, (unsigned long long)(data_size - pos));
        return false;
    }
    return true;
}

// A checkpoint's tensors: model.safetensors, else the shards model.safetensors.index.json names.
struct wa_hf_checkpoint {
    std::string dir, index;                                 // index: the shard index's path, if there is one
    std::vector<std::unique_ptr<wa_st_file>> files;
    std::unordered_map<std::string, std::pair<const wa_st_file *, const wa_st_tensor *>> where;

    const wa_st_tensor * find(const std::string & name, const wa_st_file ** file = nullptr) const {
        auto it = where.find(name);
        if (it == where.end()) return nullptr;
        if (file) *file = it->second.first;
        return it->second.second;
    }
};

static bool wa_hf_exists(const std::string & path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
}

static bool wa_hf_checkpoint_open(wa_hf_checkpoint & c, const std::string & dir, const std::string & root) {
    c.dir = dir;
    const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
    if (wa_hf_exists(single)) {
        c.files.emplace_back(new wa_st_file);
        if (!wa_st_open(*c.files.back(), single, root)) return false;
        for (const auto & kv : c.files.back()->tensors) c.where[kv.first] = {c.files.back().get(), &kv.second};
        return true;
    }
    if (!wa_hf_exists(index)) {
        bool pickles = false;                               // what save_pretrained wrote before safetensors
        if (DIR * d = opendir(dir.c_str())) {
            while (const dirent * e = readdir(d)) {
                const std::string fn = e->d_name;
                for (const char * ext : {".bin", ".pt", ".pth", ".ckpt"})
                    pickles = pickles || (fn.size() > strlen(ext) && fn.compare(fn.size() - strlen(ext), std::string::npos, ext) == 0);
            }
            closedir(d);
        }
        if (pickles) wa_set_error("%s: no model.safetensors (PyTorch pickles are not read: save it again with "
                                  "save_pretrained(..., safe_serialization=True))", dir.c_str());
        else wa_set_error("%s: no model.safetensors or model.safetensors.index.json", dir.c_str());
        return false;
    }
    wa_json idx;
    c.index = index;
    if (!wa_hf_json(index, root, idx)) return false;
    const wa_json * map = idx.type == wa_json::OBJECT ? idx.get("weight_map") : nullptr;
    if (!map || map->type != wa_json::OBJECT) {
        wa_set_error("%s: no \"weight_map\" object of tensor name -> shard file", index.c_str());
        return false;
    }
    std::map<std::string, wa_st_file *> shards;
    for (const auto & kv : map->fields) {
        const wa_json & fn = kv.second;
        if (fn.type != wa_json::STRING || fn.str.empty() || fn.str == "." || fn.str == ".." ||
            fn.str.find_first_of(std::string("/\0", 2)) != std::string::npos) {
            wa_set_error("%s: weight_map gives tensor '%s' the shard %s: not a file name in the directory", index.c_str(),
                         kv.first.c_str(), fn.shown().c_str());
            return false;
        }
        auto it = shards.find(fn.str);
        if (it == shards.end()) {
            c.files.emplace_back(new wa_st_file);
            const std::string shard = dir + "/" + fn.str;
            if (!wa_hf_exists(shard)) {
                wa_set_error("%s: shard %s, which the index names, is missing", dir.c_str(), fn.str.c_str());
                return false;
            }
            if (!wa_st_open(*c.files.back(), shard, root)) return false;
            it = shards.emplace(fn.str, c.files.back().get()).first;
        }
        auto t = it->second->tensors.find(kv.first);
        if (t == it->second->tensors.end()) {
            wa_set_error("%s: tensor '%s' is not in shard %s, as the index says", dir.c_str(), kv.first.c_str(), fn.str.c_str());
            return false;
        }
        c.where[kv.first] = {it->second, &t->second};
    }
    for (const auto & s : shards)                           // and each shard holds what the index says it does
        for (const auto & kv : s.second->tensors) {
            auto w = c.where.find(kv.first);
            if (w == c.where.end() || w->second.first != s.second) {
                wa_set_error("%s: shard %s holds tensor '%s', which the index %s", dir.c_str(), s.first.c_str(), kv.first.c_str(),
                             w == c.where.end() ? "does not name" : "puts in another shard");
                return false;
            }
        }
    return true;
}

// What config.json says beyond the hyperparameters.
struct wa_hf_options {
    bool ln_mid = false;                // Ultravox's projector_ln_mid (v0.5+): ln_mid.weight, else ln_post.weight
    std::string audio_model_id;         // Ultravox: the model its audio tower comes from ("": none named)
};

// The hyperparameters from config.json, the projector's included, as the converter's read_config
// takes them (and within the GGUF loader's bounds).
static bool wa_hf_config(whisper_audio_model * m, const wa_json & top, wa_hf_options & opt) {
    const char * path = m->path.c_str();
    whisper_audio_hparams & hp = m->hparams;
    const wa_json * mt = top.type == wa_json::OBJECT ? top.get("model_type") : nullptr;
    const bool named = mt && mt->type == wa_json::STRING;
    hp.projector = WHISPER_AUDIO_PROJECTOR_NONE;
    for (const wa_projector_name & t : WA_PROJECTORS)
        if (named && t.hf_model_type && mt->str == t.hf_model_type) hp.projector = t.type;
    const bool tower = hp.projector != WHISPER_AUDIO_PROJECTOR_NONE;
    if (!tower && !(named && mt->str == "whisper")) {
        wa_set_error("%s: config.json: model_type is %s, not \"whisper\" or an audio LLM's (%s)", path,
                     top.type != wa_json::OBJECT ? "absent (not an object)" : mt ? mt->shown().c_str() : "absent",
                     wa_projector_list(&wa_projector_name::hf_model_type).c_str());
        return false;
    }
    const wa_json * cfg = tower ? top.get("audio_config") : &top;
    if (!cfg || cfg->type != wa_json::OBJECT) { wa_set_error("%s: config.json: %s without an audio_config", path, mt->str.c_str()); return false; }
    // an integer in [1, hi]: a JSON number without fraction or exponent, as Python's int
    auto get = [&](const wa_json & in, const char * where, const char * key, int hi, int * dst) {
        const wa_json * v = in.get(key);
        uint64_t x = 0;
        if (!v || !v->u64(&x) || x < 1 || x > (uint64_t)hi) {
            wa_set_error("%s: config.json: %s%s is %s, expected an integer in [1, %d]", path, where, key,
                         v ? v->shown().c_str() : "absent", hi);
            return false;
        }
        *dst = (int)x;
        return true;
    };
    // a setting that must be `want` when present (whisper-audio runs that one alone)
    auto must_be = [&](const char * key, const char * want) {
        const wa_json * v = top.get(key);
        if (!v || (v->type == wa_json::STRING && v->str == want)) return true;
        wa_set_error("%s: config.json: %s is %s; whisper-audio runs \"%s\"", path, key, v->shown().c_str(), want);
        return false;
    };
    const char * ac = tower ? "audio_config." : "";
    // VoxtralEncoderConfig and AudioFlamingo3EncoderConfig name them as Llama does
    const bool llama_names = hp.projector == WHISPER_AUDIO_PROJECTOR_VOXTRAL || hp.projector == WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO;
    if (!get(*cfg, ac, llama_names ? "hidden_size" : "d_model", 16384, &hp.n_state) ||
        !get(*cfg, ac, llama_names ? "num_hidden_layers" : "encoder_layers", 256, &hp.n_layer) ||
        !get(*cfg, ac, llama_names ? "num_attention_heads" : "encoder_attention_heads", 256, &hp.n_head) ||
        !get(*cfg, ac, llama_names ? "intermediate_size" : "encoder_ffn_dim", 65536, &hp.n_ff) ||
        !get(*cfg, ac, "num_mel_bins", 512, &hp.n_mels))
        return false;
    hp.n_ctx = 1500;
    hp.eps = 1e-5f;                                         // Whisper's LayerNorm; the converter writes it
    hp.stack_factor = 1;
    if (tower) {
        const wa_json * text = top.get("text_config");
        if (!text || text->type != wa_json::OBJECT) { wa_set_error("%s: config.json: %s without a text_config", path, mt->str.c_str()); return false; }
        if (!get(*text, "text_config.", "hidden_size", 65536, &hp.n_llm)) return false;
        hp.proj_eps = 1e-6f;                                // Ultravox's RMSNorm default; the converter writes it
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_VOXTRAL) {  // get_audio_features: reshape(-1, intermediate_size), linear_1, GELU, linear_2
        const int stack = hp.n_ff / hp.n_state;
        if (hp.n_ff % hp.n_state != 0 || hp.n_ctx % stack != 0 || stack > 64) {
            wa_set_error("%s: config.json: audio_config.intermediate_size %d is not the d_model %d times a divisor of %d (at most 64)",
                         path, hp.n_ff, hp.n_state, hp.n_ctx);
            return false;
        }
        hp.stack_factor = stack;
        if (!must_be("projector_hidden_act", "gelu")) return false;
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO) {      // AudioFlamingo3MultiModalProjector: linear_1, GELU, linear_2
        if (!must_be("projector_hidden_act", "gelu")) return false;
        const wa_json * bias = top.get("projector_bias");
        if (bias && !(bias->type == wa_json::BOOL && bias->b)) {
            wa_set_error("%s: config.json: projector_bias is %s; whisper-audio runs true (linear_1 and linear_2 with biases)",
                         path, bias->shown().c_str());
            return false;
        }
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_ULTRAVOX) {
        if (!get(top, "", "stack_factor", 64, &hp.stack_factor) || !get(top, "", "hidden_size", 65536, &hp.n_proj_ff) ||
            !must_be("projector_act", "swiglu"))
            return false;
        if (hp.n_proj_ff % 2 != 0) {
            wa_set_error("%s: config.json: hidden_size %d is odd; Ultravox's SwiGLU halves it", path, hp.n_proj_ff);
            return false;
        }
        const wa_json * ln_mid = top.get("projector_ln_mid");
        if (ln_mid && ln_mid->type != wa_json::BOOL && ln_mid->type != wa_json::NUL) {
            wa_set_error("%s: config.json: projector_ln_mid is %s, not true or false", path, ln_mid->shown().c_str());
            return false;
        }
        opt.ln_mid = ln_mid && ln_mid->b;
        const wa_json * id = top.get("audio_model_id");
        if (id && id->type == wa_json::STRING) opt.audio_model_id = id->str;
    }
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: config.json: %sd_model %d is not a multiple of the %d attention heads", path, ac, hp.n_state, hp.n_head);
        return false;
    }
    const wa_json * n_pos = cfg->get("max_source_positions");
    uint64_t pos = 0;
    if (n_pos && !(n_pos->u64(&pos) && pos == (uint64_t)hp.n_ctx)) {
        wa_set_error("%s: config.json: %smax_source_positions is %s; whisper-audio needs %d (30 s windows)", path, ac,
                     n_pos->shown().c_str(), hp.n_ctx);
        return false;
    }
    return true;
}

// ---- the Hugging Face cache: a repo id ("openai/whisper-base") as huggingface_hub stores it --
// In $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME (~/.cache)/huggingface/hub
// (huggingface_hub's constants): models--<namespace>--<name>/refs/main holds the commit whose
// snapshots/<commit>/ has the files, each a symlink into the folder's blobs/ (or the file
// itself where symlinks could not be made). Read as it is: the library never reaches the network.

// namespace/name of letters, digits, '-', '_', '.', each part neither starting nor ending with
// '-' or '.', without "--" or "..", at most 96 characters (huggingface_hub's validate_repo_id)
static bool wa_is_repo_id(const std::string & s) {
    const size_t slash = s.find('/');
    if (slash == std::string::npos || s.size() > 96 || s.find('/', slash + 1) != std::string::npos) return false;
    for (const std::string & part : {s.substr(0, slash), s.substr(slash + 1)}) {
        if (part.empty() || part.find("--") != std::string::npos || part.find("..") != std::string::npos) return false;
        for (const char c : part) if (!isalnum((unsigned char)c) && c != '-' && c != '_' && c != '.') return false;
        if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.') return false;
    }
    return true;
}

static std::string wa_hf_cache_dir() {
    auto env = [](const char * k) { const char * v = getenv(k); return std::string(v ? v : ""); };
    auto user = [&](std::string p) {                        // os.path.expanduser's ~/
        if ((p == "~" || p.compare(0, 2, "~/") == 0) && !env("HOME").empty()) p = env("HOME") + p.substr(1);
        return p;
    };
    if (!env("HF_HUB_CACHE").empty()) return user(env("HF_HUB_CACHE"));
    if (!env("HF_HOME").empty()) return user(env("HF_HOME")) + "/hub";
    return (env("XDG_CACHE_HOME").empty() ? user("~/.cache") : env("XDG_CACHE_HOME")) + "/huggingface/hub";
}

// The snapshot of repo id `id` that refs/main names (dir), and the repo's folder in the cache,
// its real path (root: every file read must lie inside it). false with the error set, which
// says how to download it.
static bool wa_hf_cached(const std::string & id, std::string & dir, std::string & root) {
    const size_t slash = id.find('/');
    const std::string repo = wa_hf_cache_dir() + "/models--" + id.substr(0, slash) + "--" + id.substr(slash + 1);
    const char * i = id.c_str();
    struct stat st;
    if (stat(repo.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        wa_set_error("%s: neither a local path nor a model in the Hugging Face cache (no %s): `hf download %s` fetches it "
                     "(whisper-audio itself never reaches the network)", i, repo.c_str(), i);
        return false;
    }
    const std::string ref_path = repo + "/refs/main";
    char buf[129] = {};
    const int fd = open(ref_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    const bool regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const ssize_t n = regular ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    if (fd >= 0) close(fd);
    if (fd < 0 || !regular) {
        wa_set_error("%s: the Hugging Face cache's %s has no refs/main (downloaded at another revision?): `hf download %s` "
                     "fetches the main one", i, repo.c_str(), i);
        return false;
    }
    std::string sha(buf, n > 0 ? (size_t)n : 0);
    while (!sha.empty() && isspace((unsigned char)sha.back())) sha.pop_back();
    if ((sha.size() != 40 && sha.size() != 64) || sha.find_first_not_of("0123456789abcdef") != std::string::npos) {
        wa_set_error("%s: %s holds %zd bytes that are not a commit hash", i, ref_path.c_str(), n);
        return false;
    }
    dir = repo + "/snapshots/" + sha;
    char * r = realpath(repo.c_str(), nullptr);
    char * s = realpath(dir.c_str(), nullptr);
    root = r ? r : "";
    const std::string snap = s ? s : "";
    free(r);
    free(s);
    if (snap.empty() || root.empty() || stat(snap.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        wa_set_error("%s: refs/main names commit %s, whose snapshot %s is missing: `hf download %s` fetches it again", i,
                     sha.c_str(), dir.c_str(), i);
        return false;
    }
    if (snap.compare(0, root.size() + 1, root + "/") != 0) {
        wa_set_error("%s: the snapshot %s is a symlink to %s, which leaves the model's folder in the Hugging Face cache: refused",
                     i, dir.c_str(), snap.c_str());
        return false;
    }
    return true;
}

// ---- a Hugging Face directory, read ------------------------------------------------------------

// A directory's name as the converter names a model of it (os.path.basename of its absolute path).
static std::string wa_dir_name(std::string dir) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const size_t s = dir.rfind('/');
    std::string base = s == std::string::npos ? dir : dir.substr(s + 1);
    if (base == "." || base == ".." || base.empty()) {
        if (char * real = realpath(dir.empty() ? "/" : dir.c_str(), nullptr)) {
            const std::string r = real;
            free(real);
            base = r == "/" ? "" : r.substr(r.rfind('/') + 1);
        }
    }
    return base;
}

// The checkpoint's tensor `hf` as our tensor `ours` (shape ne, innermost first): its dtype one
// the model can hold, its shape the hyperparameters'. A matrix keeps F32, F16 or BF16 (F64
// becomes F32); the rest become F32.
struct wa_hf_source { const wa_st_file * file; const wa_st_tensor * t; std::string name; };

static bool wa_hf_take(whisper_audio_model * m, const wa_hf_checkpoint & c, const std::string & hf, const char * ours, int n_dims,
                       const int64_t * ne, bool matrix, const char * what, std::vector<wa_hf_source> & sources) {
    const wa_st_file * f = nullptr;
    const wa_st_tensor * t = c.find(hf, &f);
    if (!t) { wa_set_error("%s: the checkpoint has no %s tensor '%s'", c.dir.c_str(), what, hf.c_str()); return false; }
    const std::string & dt = t->dtype;
    if (dt != "F32" && dt != "F16" && dt != "BF16" && dt != "F64") {
        wa_set_error("%s: tensor '%s' is %s (F32, F16, BF16 or F64 expected)", f->path.c_str(), hf.c_str(), dt.c_str());
        return false;
    }
    bool same = (int)t->shape.size() == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->shape[i] == (uint64_t)ne[n_dims - 1 - i];
    if (!same) {
        std::string got, want;
        for (const uint64_t d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
        for (int i = n_dims - 1; i >= 0; i--) want += (want.empty() ? "" : ", ") + std::to_string(ne[i]);
        wa_set_error("%s: tensor '%s' has shape [%s], config.json implies [%s]", f->path.c_str(), hf.c_str(), got.c_str(), want.c_str());
        return false;
    }
    gguf_tensor_info g;
    g.name = ours;
    g.n_dims = n_dims;
    std::copy(ne, ne + n_dims, g.ne);
    g.type = !matrix || dt == "F32" || dt == "F64" ? VT_TYPE_F32 : dt == "F16" ? VT_TYPE_F16 : VT_TYPE_BF16;
    g.bytes = vt_type_size((vt_type)g.type);
    for (int i = 0; i < n_dims; i++) g.bytes *= (uint64_t)ne[i];
    if (!m->index.emplace(ours, m->tensors.size()).second) { wa_set_error("%s: tensor '%s' twice", c.dir.c_str(), ours); return false; }
    m->tensors.push_back(g);
    sources.push_back({f, t, hf});
    return true;
}

// float64 to float32, rounded to nearest even; beyond the range (by more than half an ulp) an
// infinity, which the finite check then refuses
static float wa_f64_to_f32(double v) {
    if (std::fabs(v) >= 0x1.ffffffp127 && std::isfinite(v)) return v < 0 ? -INFINITY : INFINITY;
    return (float)v;
}

// A Hugging Face directory: dir; root: its folder in the Hugging Face cache ("": a local one).
static bool hf_model_read(whisper_audio_model * m, std::string dir, const std::string & root) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    m->kind = whisper_audio_model::HF;
    m->path = dir;
    const char * path = dir.c_str();
    const std::string cfg_path = dir + "/config.json";
    if (!wa_hf_exists(cfg_path)) { wa_set_error("%s: no config.json: not a Hugging Face checkpoint directory", path); return false; }
    wa_json cfg;
    wa_hf_options opt;
    if (!wa_hf_json(cfg_path, root, cfg) || !wa_hf_config(m, cfg, opt)) return false;
    const whisper_audio_hparams & hp = m->hparams;
    wa_hf_checkpoint ck, tower_ck;
    if (!wa_hf_checkpoint_open(ck, dir, root)) return false;
    m->sources.push_back(cfg_path);

    // the encoder: under the first prefix whose conv1 is there; a published Ultravox checkpoint
    // holds its projector alone, and its audio tower is the encoder of the model it names
    const wa_hf_prefix * pre = nullptr;
    for (const wa_hf_prefix & p : WA_HF_PREFIXES)
        if (!pre && ck.find(std::string(p.encoder) + "conv1.weight")) pre = &p;
    const wa_hf_checkpoint * enc = &ck;
    std::string proj_prefix = pre ? pre->projector : "";
    if (!pre && hp.projector == WHISPER_AUDIO_PROJECTOR_ULTRAVOX && !opt.audio_model_id.empty()) {
        const std::string & id = opt.audio_model_id;
        std::string tdir = id, troot;
        struct stat st;
        const bool local = stat(id.c_str(), &st) == 0;
        if (!local && !(wa_is_repo_id(id) && wa_hf_cached(id, tdir, troot))) {
            const std::string why = wa_is_repo_id(id) ? whisper_audio_last_error() : id + ": neither a directory nor a repo id";
            wa_set_error("%s: an Ultravox checkpoint of its projector alone; its audio tower is the encoder of %s (config.json's "
                         "audio_model_id): %s", path, id.c_str(), why.c_str());
            return false;
        }
        if (!wa_hf_checkpoint_open(tower_ck, tdir, troot)) return false;
        for (const wa_hf_prefix & p : WA_HF_PREFIXES)
            if (!pre && !*p.projector && tower_ck.find(std::string(p.encoder) + "conv1.weight")) pre = &p;
        if (!pre) { wa_set_error("%s (audio_model_id of %s): no Whisper encoder tensors", tdir.c_str(), path); return false; }
        enc = &tower_ck;
        proj_prefix = ck.find("model.multi_modal_projector.ln_pre.weight") ? "model." : "";
    }
    if (!pre) {
        wa_set_error("%s: no encoder tensors: none of model.encoder.conv1.weight, encoder.conv1.weight, audio_tower.conv1.weight, "
                     "model.audio_tower.conv1.weight, conv1.weight is in the checkpoint", path);
        return false;
    }
    for (const wa_hf_checkpoint * c : {&ck, &tower_ck}) {
        if (!c->index.empty()) m->sources.push_back(c->index);
        for (const auto & f : c->files) m->sources.push_back(f->path);
    }

    std::vector<wa_hf_source> sources;
    std::set<std::string> taken;
    const bool found = wa_for_each_tensor(hp, [&](const wa_tensor_desc & t, int il, const char * name) {
        const char * hf = WA_HF_NAMES[&t - WA_TENSORS].hf;
        if (!hf) return true;                               // the mel bank: computed below
        char buf[GGUF_MAX_NAME + 1];
        snprintf(buf, sizeof(buf), hf, il);
        int64_t ne[4];
        const int n_dims = wa_shape(hp, t, ne);
        taken.insert(pre->encoder + std::string(buf));
        return wa_hf_take(m, *enc, pre->encoder + std::string(buf), name, n_dims, ne, t.matrix, "encoder", sources);
    });
    if (!found) return false;
    for (const wa_proj_desc & t : WA_PROJ_TENSORS) {
        if (t.type != hp.projector) continue;
        if (t.either && (t.name == std::string("multi_modal_projector.ln_mid.weight")) != opt.ln_mid) continue;
        int64_t ne[3];
        const int n_dims = wa_proj_shape(hp, t, ne);
        taken.insert(proj_prefix + t.name);
        if (!wa_hf_take(m, ck, proj_prefix + t.name, t.name, n_dims, ne, t.matrix, "projector", sources)) return false;
    }
    // the encoder's and projector's tensors that config.json does not account for (a layer
    // beyond its count): the checkpoint holds another model than the one it describes
    auto untaken = [&](const wa_hf_checkpoint & c, const std::vector<std::string> & prefixes, const char * what) {
        std::vector<std::string> extra;
        for (const auto & kv : c.where)
            for (const std::string & p : prefixes)
                if (kv.first.compare(0, p.size(), p) == 0 && !taken.count(kv.first)) { extra.push_back(kv.first); break; }
        if (extra.empty()) return false;
        std::sort(extra.begin(), extra.end());
        wa_set_error("%s: %zu %s tensor%s that config.json does not describe, e.g. %s", c.dir.c_str(), extra.size(),
                     what, extra.size() == 1 ? "" : "s", extra[0].c_str());
        return true;
    };
    const std::vector<std::string> enc_prefixes = *pre->encoder ? std::vector<std::string>{pre->encoder}
                                                : std::vector<std::string>{"conv", "layers.", "layer_norm.", "embed_positions."};
    if (untaken(*enc, enc_prefixes, "encoder")) return false;
    if (hp.projector != WHISPER_AUDIO_PROJECTOR_NONE && untaken(ck, {proj_prefix + "multi_modal_projector."}, "projector")) return false;
    if (enc != &ck && untaken(ck, {"audio_tower.", "model.audio_tower."}, "audio-tower")) return false;   // not the tower alone: LoRA, a part

    // read on every core: a tensor stored as held goes straight to its place, the rest through a
    // buffer, widened (F16, BF16: exact) or rounded (F64)
    std::vector<gguf_tensor_info *> used;
    std::vector<uint64_t> sizes;
    for (gguf_tensor_info & t : m->tensors) { used.push_back(&t); sizes.push_back(t.bytes); }
    const bool read = wa_read_tensors(m, used, sizes, [&](size_t i, uint8_t * d) {
        const wa_hf_source & s = sources[i];
        const gguf_tensor_info & t = *used[i];
        const uint64_t stored = s.t->end - s.t->begin, at = s.file->data_start + s.t->begin;
        const std::string & dt = s.t->dtype;
        const vt_type from = dt == "F16" ? VT_TYPE_F16 : dt == "BF16" ? VT_TYPE_BF16 : VT_TYPE_F32;
        if (dt != "F64" && from == (vt_type)t.type) {
            if (!read_at(s.file->path, s.file->size, s.file->fd, d, stored, at)) return std::string(whisper_audio_last_error());
        } else {
            std::vector<uint8_t> tmp(stored);
            if (!read_at(s.file->path, s.file->size, s.file->fd, tmp.data(), stored, at)) return std::string(whisper_audio_last_error());
            const size_t n = t.bytes / sizeof(float);
            if (dt == "F64") {
                for (size_t k = 0; k < n; k++) {
                    double v;
                    memcpy(&v, tmp.data() + 8 * k, 8);
                    const float f = wa_f64_to_f32(v);
                    memcpy(d + 4 * k, &f, 4);
                }
            } else {
                vt_convert(d, VT_TYPE_F32, tmp.data(), from, n);
            }
        }
        return wa_nonfinite(s.file->path, s.name, t, d);
    });
    if (!read) return false;
    m->hparams.weight_type = wa_weight_type((vt_type)m->find("encoder.layers.0.fc1.weight")->type);
    m->mel_computed.resize((size_t)hp.n_mels * WHISPER_AUDIO_N_BINS);   // as the feature extractor computes it
    wa_mel_filters_slaney(hp.n_mels, m->mel_computed.data());
    m->mel_filters = m->mel_computed.data();
    if (m->name.empty()) m->name = wa_dir_name(dir);
    return true;
}

// CTranslate2's config.json beside model.bin (its converter writes one; a model.bin alone loads
// too): valid JSON, an object, and the encoder's LayerNorm epsilon where it says one (the
// other keys, alignment heads and token ids, are the decoder's).
static bool ct2_read_config(whisper_audio_model * m) {
    const size_t slash = m->path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : m->path.substr(0, slash);
    const std::string path = dir + "/config.json";
    if (!wa_hf_exists(path)) return true;
    wa_json cfg;
    if (!wa_hf_json(path, "", cfg)) return false;   // (no root: a cache's symlinks into blobs/ are fine here)
    if (cfg.type != wa_json::OBJECT) {
        wa_set_error("%s: CTranslate2's config.json is %s, not an object", path.c_str(), cfg.shown().c_str());
        return false;
    }
    const wa_json * eps = cfg.get("layer_norm_epsilon");
    if (eps && eps->type != wa_json::NUL) {
        char * end = nullptr;
        const double v = eps->type == wa_json::NUMBER ? strtod(eps->str.c_str(), &end) : 0.0;
        if (eps->type != wa_json::NUMBER || *end || !(v > 0.0 && v < 1.0)) {
            wa_set_error("%s: layer_norm_epsilon is %s, expected a number in (0, 1)", path.c_str(), eps->shown().c_str());
            return false;
        }
        m->hparams.eps = (float)v;
    }
    return true;
}

// The metadata from a prefix of the file, grown until the parse fits in it, then the weights.
static bool model_read(whisper_audio_model * m, int fd) {
    char magic[sizeof(CT2_MAGIC)];                        // a CTranslate2 model.bin, by content (any version)
    if (m->file_size >= sizeof(magic) && read_at(m, fd, magic, sizeof(magic), 0) && memcmp(magic + 4, CT2_MAGIC + 4, sizeof(magic) - 4) == 0)
        return ct2_model_read(m, fd) && ct2_read_config(m);
    // a safetensors file (a header length that fits, then a JSON object): the Hugging Face
    // directory that holds it
    uint8_t st[9];
    if (m->file_size >= 10 && read_at(m, fd, st, 9, 0) && st[8] == '{') {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | st[i];
        if (n <= m->file_size - 8) {
            const size_t slash = m->path.rfind('/');
            return hf_model_read(m, slash == std::string::npos ? "." : slash == 0 ? "/" : m->path.substr(0, slash), "");
        }
    }
    // another CTranslate2 spec (a translation model, a cut header): said as such, not as a bad GGUF
    uint8_t h[6 + 64] = {};
    const size_t have = std::min(m->file_size, sizeof(h));
    if (!read_at(m, fd, h, have, 0)) return false;
    const size_t base = m->path.rfind('/') == std::string::npos ? 0 : m->path.rfind('/') + 1;
    const bool named_ct2 = m->path.compare(base, std::string::npos, "model.bin") == 0;
    const uint32_t version = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    const size_t len = have >= 6 ? (size_t)(h[4] | h[5] << 8) : 0;
    if (version >= 1 && version < 100 && len >= 6 && 6 + len <= have && h[6 + len - 1] == 0) {
        const std::string spec((const char *)h + 6, len - 1);
        bool word = spec.size() > 4 && spec.compare(spec.size() - 4, 4, "Spec") == 0;
        for (char c : spec) word = word && (isalnum((unsigned char)c) || c == '_');
        if (word) {
            wa_set_error("%s: a CTranslate2 model of spec %s (binary version %u), not a Whisper one (WhisperSpec)",
                         m->path.c_str(), spec.c_str(), version);
            return false;
        }
    }
    if (named_ct2 && m->file_size < sizeof(CT2_MAGIC)) {
        wa_set_error("%s: %zu bytes: too short for a CTranslate2 model.bin (its header alone is %zu bytes)", m->path.c_str(),
                     m->file_size, sizeof(CT2_MAGIC));
        return false;
    }
    std::vector<uint8_t> head;
    for (size_t have = std::min<size_t>(m->file_size, 1u << 20);; have = std::min<size_t>(m->file_size, have * 4)) {
        head.resize(have);
        if (!read_at(m, fd, head.data(), have, 0)) return false;
        gguf_reader r{head.data(), have};
        m->tensors.clear();
        m->index.clear();
        uint32_t magic = 0;
        memcpy(&magic, head.data(), std::min<size_t>(have, 4));
        if (magic == GGML_FILE_MAGIC ? ggml_parse(m, r, fd) : model_parse(m, r)) break;
        if (!r.past_end || have == m->file_size) return false;
    }
    return model_read_weights(m, fd);
}

// A directory holds a Hugging Face checkpoint when its config.json has a model_type (CTranslate2's
// has none), or, without a model.bin, when it has a config.json or safetensors at all.
static bool wa_is_hf_dir(const std::string & dir) {
    wa_json cfg;
    if (wa_hf_exists(dir + "/config.json") && wa_hf_json(dir + "/config.json", "", cfg) && cfg.type == wa_json::OBJECT &&
        cfg.get("model_type"))
        return true;
    if (wa_hf_exists(dir + "/model.bin")) return false;
    for (const char * f : {"/config.json", "/model.safetensors", "/model.safetensors.index.json"})
        if (wa_hf_exists(dir + f)) return true;
    return false;
}

static whisper_audio_model * model_load(const char * path) {
    if (!path) { wa_set_error("no model path given"); return nullptr; }
    std::unique_ptr<whisper_audio_model> m(new whisper_audio_model);
    // a Hugging Face repo id that is not a local path, nor inside a local directory (build/x.gguf
    // is a file missing from build/): its snapshot in the Hugging Face cache
    struct stat dir;
    const bool exists = stat(path, &dir) == 0;
    if (!exists && errno == ENOENT && wa_is_repo_id(path) && !wa_hf_exists(std::string(path, strchr(path, '/')))) {
        std::string snapshot, root;
        if (!wa_hf_cached(path, snapshot, root)) return nullptr;
        m->name = strchr(path, '/') + 1;                    // as the converter names a download of it
        return hf_model_read(m.get(), snapshot, root) ? m.release() : nullptr;
    }
    // a directory: a Hugging Face checkpoint, or a CTranslate2 / faster-whisper model (its
    // model.bin, recognised by content)
    const bool is_dir = exists && S_ISDIR(dir.st_mode);
    if (is_dir && wa_is_hf_dir(path)) return hf_model_read(m.get(), path, "") ? m.release() : nullptr;
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

// ---- a GGUF of any loaded model: the file convert-hf-to-gguf.py writes -----------------------
// Our GGUF (DESIGN.md's contract) of whatever was loaded: its keys in the converter's order,
// the encoder's tensors in the converter's (WA_TENSORS' order column), the projector's, then
// the mel bank, under our names, each aligned to 32 bytes. The types are those the loader
// holds (f16 and bf16 matrices kept, CTranslate2's int8/int16 as the f32 it dequantised),
// except that a block type's matrices are written as their blocks: read again from the file
// and checked against the f32 held. So the file loads back to the same weights, bit for bit.

static const uint32_t WA_GGUF_ALIGNMENT = 32;   // the converter's general.alignment

// The header as it is built: GGUF's little-endian integers, length-prefixed strings.
struct gguf_writer {
    std::string b;
    void u32(uint32_t v) { b.append((const char *)&v, 4); }
    void u64(uint64_t v) { b.append((const char *)&v, 8); }
    void str(const std::string & s) { u64(s.size()); b += s; }
    void kv_str(const char * key, const std::string & v) { str(key); u32(GGUF_STRING); str(v); }
    void kv_u32(const char * key, uint32_t v) { str(key); u32(GGUF_UINT32); u32(v); }
    void kv_f32(const char * key, float v) { str(key); u32(GGUF_FLOAT32); b.append((const char *)&v, 4); }
};

// What the converter names a model of this file: a GGUF's own general.name; a ggml file's
// name without its extension; a CTranslate2 model's directory's name.
static std::string wa_model_name(const whisper_audio_model * m) {
    if (!m->name.empty()) return m->name;
    const size_t slash = m->path.rfind('/');
    std::string base = slash == std::string::npos ? m->path : m->path.substr(slash + 1);
    if (m->kind == whisper_audio_model::CT2)            // DIR/model.bin: DIR's last component
        return wa_dir_name(slash == std::string::npos ? "." : m->path.substr(0, slash));
    const size_t dot = base.rfind('.');                 // os.path.splitext: not a leading dot
    if (dot != std::string::npos && dot > base.find_first_not_of('.')) base.resize(dot);
    return base;
}

// The new file's mode, 0666 less the umask, as open() would make it (read without changing it).
static mode_t wa_new_file_mode() {
    mode_t mask = 022;
    if (FILE * f = fopen("/proc/self/status", "r")) {
        char line[256];
        unsigned v;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "Umask: %o", &v) == 1) { mask = (mode_t)v; break; }
        fclose(f);
    }
    return 0666 & ~mask;
}

static bool wa_write_all(int fd, const void * p, size_t n) {
    for (size_t done = 0; done < n;) {
        const ssize_t k = write(fd, (const char *)p + done, std::min<size_t>(n - done, 1u << 30));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        done += (size_t)k;
    }
    return true;
}

// A tensor of the GGUF written: its name, where its data is (block types: read again from the
// model's file), its type, bytes and offset in the data section.
struct gguf_out_tensor { std::string name; const gguf_tensor_info * t; int type; uint64_t bytes, offset; };
static uint64_t gguf_pad(uint64_t n) { return (n + WA_GGUF_ALIGNMENT - 1) / WA_GGUF_ALIGNMENT * WA_GGUF_ALIGNMENT; }

// The model's tensors in the converter's order (WA_TENSORS' order column, the projector's, the
// mel bank last: mel, the file's or the one computed at load).
static std::vector<gguf_out_tensor> gguf_out_tensors(const whisper_audio_model * m, gguf_tensor_info & mel) {
    const whisper_audio_hparams & hp = m->hparams;
    std::vector<gguf_out_tensor> out;
    auto add = [&](const std::string & name) {
        const gguf_tensor_info * t = m->find(name);
        VT_ASSERT(t && t->data);                           // model_read_weights read each of them
        out.push_back({name, t, t->block_type >= 0 ? t->block_type : t->type, t->block_type >= 0 ? t->block_bytes : t->bytes, 0});
    };
    std::vector<const wa_tensor_desc *> rows;
    for (const wa_tensor_desc & t : WA_TENSORS) if ((t.top || t.layer) && wa_has_row(hp, t)) rows.push_back(&t);
    std::stable_sort(rows.begin(), rows.end(), [](auto a, auto b) { return a->order < b->order; });
    char name[GGUF_MAX_NAME + 1];
    for (const wa_tensor_desc * t : rows) if (!t->layer && t->order < WA_AFTER_LAYERS) add(t->name);
    for (int il = 0; il < hp.n_layer; il++)
        for (const wa_tensor_desc * t : rows) if (t->layer) { snprintf(name, sizeof(name), t->name, il); add(name); }
    for (const wa_tensor_desc * t : rows) if (!t->layer && t->order >= WA_AFTER_LAYERS) add(t->name);
    for (const wa_proj_desc & t : WA_PROJ_TENSORS) if (t.type == hp.projector && m->find(t.name)) add(t.name);
    mel.n_dims = 2;
    mel.ne[0] = WHISPER_AUDIO_N_BINS;
    mel.ne[1] = hp.n_mels;
    mel.data = m->mel_filters;
    mel.bytes = (uint64_t)hp.n_mels * WHISPER_AUDIO_N_BINS * sizeof(float);
    out.push_back({"mel_filters", &mel, VT_TYPE_F32, mel.bytes, 0});
    return out;
}

// The header: the converter's keys, then the tensor infos (each tensor's offset set), padded.
static std::string gguf_header(const whisper_audio_model * m, std::vector<gguf_out_tensor> & out) {
    const whisper_audio_hparams & hp = m->hparams;
    // general.file_type: the matrices' type, as encoder.layers.0.fc1.weight has it in the file
    const gguf_tensor_info * fc1 = m->find("encoder.layers.0.fc1.weight");
    const wa_block_type * blk = wa_block(fc1->block_type);
    const uint32_t file_type = blk ? blk->file_type : fc1->type == VT_TYPE_F16 ? 1 : fc1->type == VT_TYPE_BF16 ? 32 : 0;

    gguf_writer w;
    w.b = "GGUF";
    w.u32(3);
    w.u64(out.size());
    const size_t n_kv_at = w.b.size();
    w.u64(0);                                            // the key count, once known
    uint64_t n_kv = 0;
    w.kv_str("general.architecture", "whisper"), n_kv++;
    w.kv_str("general.name", wa_model_name(m)), n_kv++;
    w.kv_u32("general.file_type", file_type), n_kv++;
    w.kv_u32("general.alignment", WA_GGUF_ALIGNMENT), n_kv++;
    if (!m->description.empty()) w.kv_str("general.description", m->description), n_kv++;
    if (hp.projector != WHISPER_AUDIO_PROJECTOR_NONE) {
        w.kv_str("whisper.projector.type", whisper_audio_projector_name(hp.projector)), n_kv++;
        w.kv_u32("whisper.projector.embedding_length", (uint32_t)hp.n_llm), n_kv++;
        w.kv_u32("whisper.projector.stack_factor", (uint32_t)hp.stack_factor), n_kv++;
        w.kv_f32("whisper.projector.layer_norm_epsilon", hp.proj_eps), n_kv++;
    }
    if (hp.n_rot) {
        w.kv_u32("whisper.encoder.rope.dimension_count", (uint32_t)hp.n_rot), n_kv++;
        w.kv_f32("whisper.encoder.rope.freq_base", hp.rope_theta), n_kv++;
    }
    if (hp.n_chunk) w.kv_u32("whisper.encoder.chunk_length", (uint32_t)hp.n_chunk), n_kv++;
    if (hp.n_causal) w.kv_u32("whisper.encoder.attention.causal_chunk", (uint32_t)hp.n_causal), n_kv++;
    if (hp.n_conv) w.kv_u32("whisper.encoder.conv2d.channels", (uint32_t)hp.n_conv), n_kv++;
    if (hp.n_attn_window) w.kv_u32("whisper.encoder.attention.window_length", (uint32_t)hp.n_attn_window), n_kv++;
    w.kv_u32("whisper.encoder.context_length", (uint32_t)hp.n_ctx), n_kv++;
    w.kv_u32("whisper.encoder.embedding_length", (uint32_t)hp.n_state), n_kv++;
    w.kv_u32("whisper.encoder.block_count", (uint32_t)hp.n_layer), n_kv++;
    w.kv_u32("whisper.encoder.mels_count", (uint32_t)hp.n_mels), n_kv++;
    w.kv_u32("whisper.encoder.attention.head_count", (uint32_t)hp.n_head), n_kv++;
    w.kv_u32("whisper.encoder.feed_forward_length", (uint32_t)hp.n_ff), n_kv++;
    w.kv_f32("whisper.encoder.attention.layer_norm_epsilon", hp.eps), n_kv++;
    memcpy(&w.b[n_kv_at], &n_kv, 8);
    uint64_t offset = 0;
    for (gguf_out_tensor & o : out) {
        w.str(o.name);
        w.u32((uint32_t)o.t->n_dims);
        for (int d = 0; d < o.t->n_dims; d++) w.u64((uint64_t)o.t->ne[d]);
        w.u32((uint32_t)o.type);
        w.u64(offset);
        o.offset = offset;
        offset += gguf_pad(o.bytes);
    }
    w.b.resize(gguf_pad(w.b.size()), '\0');
    return w.b;
}

// Where the output goes: a symlink followed; a FIFO or a device written straight through
// (*through); a regular file (or a new one) made as a temporary beside it and renamed over it
// when complete (*st its mode when it exists); never the model's own file.
static bool gguf_save_target(const whisper_audio_model * m, const char * path, std::string & target, struct stat & st,
                             bool & exists, bool & through) {
    target = path;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        char * real = realpath(path, nullptr);
        if (!real && !(stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
            wa_set_error("%s: a symlink that does not lead to a file", path);
            return false;
        }
        if (real) { target = real; free(real); }
    }
    exists = stat(target.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) { wa_set_error("%s: is a directory", path); return false; }
    struct stat in;
    for (const std::string & own : m->sources.empty() ? std::vector<std::string>{m->path} : m->sources) {
        if (exists && stat(own.c_str(), &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino) {
            wa_set_error("%s: the output is the model's own file %s; nothing was written", path, own.c_str());
            return false;
        }
    }
    through = exists && !S_ISREG(st.st_mode);
    return true;
}

static bool model_save_gguf(const whisper_audio_model * m, const char * path) {
    if (!m) { wa_set_error("whisper_audio_model_save_gguf: no model"); return false; }
    if (!path || !*path) { wa_set_error("whisper_audio_model_save_gguf: no output path"); return false; }
    gguf_tensor_info mel;
    std::vector<gguf_out_tensor> out = gguf_out_tensors(m, mel);
    const std::string header = gguf_header(m, out);
    std::string target;
    struct stat st;
    bool exists = false, through = false;
    if (!gguf_save_target(m, path, target, st, exists, through)) return false;

    // a block type's data, from the model's file: it must hold the weights loaded
    int src = -1;
    for (const gguf_out_tensor & o : out)
        if (o.t->block_type >= 0 && src < 0 && (src = open(m->path.c_str(), O_RDONLY | O_CLOEXEC)) < 0) {
            wa_set_error("%s: cannot open it again for its %s blocks: %s", m->path.c_str(), wa_type_name(o.type), strerror(errno));
            return false;
        }
    std::string tmp;                                    // ours until renamed: removed on any failure
    int fd = -1;
    struct cleanup {
        std::string & tmp;
        int & fd, & src;
        ~cleanup() {
            if (fd >= 0) close(fd);
            if (src >= 0) close(src);
            if (!tmp.empty()) unlink(tmp.c_str());
        }
    } guard{tmp, fd, src};
    if (through) {
        fd = open(target.c_str(), O_WRONLY | O_CLOEXEC);
    } else {
        tmp = target + ".XXXXXX";
        fd = mkstemp(&tmp[0]);
        if (fd >= 0 && fchmod(fd, exists ? (st.st_mode & 07777) : wa_new_file_mode()) != 0) { close(fd); unlink(tmp.c_str()); fd = -1; }
        if (fd < 0) tmp.clear();
    }
    if (fd < 0) {
        wa_set_error("%s: cannot write %s: %s", path, through ? "it" : "a temporary file beside it", strerror(errno));
        return false;
    }
    bool ok = wa_write_all(fd, header.data(), header.size());
    std::string err = ok ? "" : std::string("write failed: ") + strerror(errno);
    std::vector<uint8_t> blocks;
    std::vector<float> check;
    static const char zeros[WA_GGUF_ALIGNMENT] = {};
    for (size_t i = 0; ok && i < out.size(); i++) {
        const gguf_out_tensor & o = out[i];
        const void * data = o.t->data;
        if (o.t->block_type >= 0) {
            blocks.resize(o.bytes);
            check.resize(o.t->bytes / sizeof(float));
            if (!read_at(m, src, blocks.data(), o.bytes, m->data_start + o.t->offset)) { ok = false; err = whisper_audio_last_error(); break; }
            wa_dequantize(o.type, blocks.data(), check.data(), o.bytes / wa_block(o.type)->bytes);
            if (memcmp(check.data(), o.t->data, o.t->bytes) != 0) {
                ok = false;
                err = m->path + ": tensor '" + o.name + "' is not the one loaded: the file changed since; load it again";
                break;
            }
            data = blocks.data();
        }
        ok = wa_write_all(fd, data, o.bytes) && wa_write_all(fd, zeros, gguf_pad(o.bytes) - o.bytes);
        if (!ok) err = std::string("write failed: ") + strerror(errno);
    }
    const int closing = fd;
    fd = -1;
    if (close(closing) != 0 && ok) { ok = false; err = std::string("write failed: ") + strerror(errno); }
    if (ok && !tmp.empty()) {
        if (rename(tmp.c_str(), target.c_str()) == 0) tmp.clear();
        else { ok = false; err = std::string("rename failed: ") + strerror(errno); }
    }
    if (!ok) {
        if (err.compare(0, m->path.size(), m->path) == 0) wa_set_error("%s", err.c_str());
        else wa_set_error("%s: %s", path, err.c_str());
        return false;
    }
    return true;
}

bool whisper_audio_model_save_gguf(const whisper_audio_model * model, const char * path) {
    return wa_catch(__func__, false, [&] { return model_save_gguf(model, path); });
}

// ---- the log-mel with a model's own filters ----------------------------------------------

bool whisper_audio_log_mel(const whisper_audio_model * model, const float * pcm, size_t n, float * out) {
    if (!model) { wa_set_error("%s: NULL model", __func__); return false; }
    return whisper_audio_log_mel_filters(model->mel_filters, model->hparams.n_mels, pcm, n, out);
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
    vt_tensor * out = nullptr;           // [B, F/2, d], a tower's [B, rows, width], or the mel maxima [B]
    std::vector<vt_tensor *> states;     // WA_GRAPH_STATES: the n_layer + 1 hidden states, each [B, F/2, d]
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
    whisper_audio_timings timings{};     // since init or the last reset
};

// ---- the audio LLMs' towers: each a builder and a row of WA_TOWERS ----------------------
//
// A tower's builder follows the encoder's last layer, each step as the model's own code:
// cur [B, T, d] -> [B, tokens, n_llm] with the projector (params.projector), else the tower's
// own rows [B, rows, d].

// Qwen2AudioEncoder: avg_pooler, layer_norm; Qwen2AudioMultiModalProjector's linear
static vt_tensor * build_qwen2a(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (enc->params.projector) cur = vt_linear(ctx, cur, enc->proj.fc1_w, enc->proj.fc1_b, VT_ACT_NONE, nullptr);
    return cur;
}

// layer_norm; get_audio_features: reshape(-1, 4 d), linear_1, GELU, linear_2
static vt_tensor * build_voxtral(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_linear(ctx, cur, enc->proj.fc1_w, nullptr, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, enc->proj.fc2_w, nullptr, VT_ACT_NONE, nullptr);
}

// layer_norm; UltravoxProjector: stack (the tail zero-padded), ln_pre, linear_1, SwiGLU, ln_mid,
// linear_2, ln_post (v0.4: ln_post after linear_2 instead of ln_mid)
static vt_tensor * build_ultravox(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    const float eps = enc->hparams.proj_eps;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_rms_norm(ctx, cur, p.ln_pre_w, eps);
    cur = vt_linear(ctx, cur, p.fc1_w, nullptr, VT_ACT_NONE, nullptr);
    cur = vt_swiglu(ctx, cur);
    if (p.ln_mid_w) cur = vt_rms_norm(ctx, cur, p.ln_mid_w, eps);
    cur = vt_linear(ctx, cur, p.fc2_w, nullptr, VT_ACT_NONE, nullptr);
    if (p.ln_post_w) cur = vt_rms_norm(ctx, cur, p.ln_post_w, eps);
    return cur;
}

// AudioFlamingo3Encoder: avg_pooler, layer_norm (Qwen2-Audio's); AudioFlamingo3MultiModalProjector:
// linear_1, GELU, linear_2
static vt_tensor * build_af3(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}

// GlmAsrEncoder's norm; GlmAsrModel.get_audio_features: reshape(-1, intermediate_size) (4 positions
// stacked), GlmAsrMultiModalProjector's linear_1, GELU, linear_2
static vt_tensor * build_glmasr(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}

// Qwen2_5OmniAudioEncoder.forward after its layers: the stride-2 average pooling (its pool_indices:
// pairs of positions, the last of an odd count left out), ln_post, proj. (The chunked conv stem and
// block-diagonal attention are the encoder's, by hparams.n_chunk.)
static vt_tensor * build_qwen25o(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (enc->params.projector) cur = vt_linear(ctx, cur, enc->proj.fc1_w, enc->proj.fc1_b, VT_ACT_NONE, nullptr);
    return cur;
}

// MiniCPMO.get_audio_embedding after apm (block-causal attention is the encoder's, by
// hparams.n_causal): hidden_states[-1] (the last layer through apm's layer_norm),
// audio_projection_layer (linear1, ReLU, linear2), then audio_avg_pooler (AvgPool1d(2, 2) over
// time: pairs of positions, an odd last one left out; fewer than 2 positions give no token).
static vt_tensor * build_minicpmo(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_NONE, nullptr);
    cur = vt_relu(ctx, cur);
    cur = vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
    return cur->ne[1] >= 2 ? vt_avg_pool2(ctx, cur) : cur;
}

// Kimi-Audio: WhisperEncoder.tokenize_waveform's speech_encoder(mel).last_hidden_state (through its
// layer_norm), extract_whisper_feat's reshape to [T / 4, 4 d] (4 positions stacked), then the
// language model's VQAdaptor: layers 0 (linear), 1 (SiLU), 3 (linear), 4 (LayerNorm, rms_norm_eps).
static vt_tensor * build_kimiaudio(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_NONE, nullptr);
    cur = vt_silu(ctx, cur);
    cur = vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
    return vt_layer_norm(ctx, cur, p.norm_w, p.norm_b, enc->hparams.proj_eps);
}

// Step-Audio 2: AudioEncoder.forward after its blocks (avg_pooler: pairs of positions, an odd last
// one left out; after_norm), then its Adaptor: conv (kernel 3, stride 2, padding 1) + GELU,
// linear1, ReLU, linear2. The rows its lengths rule keeps are the first (wa_tower.rows).
static vt_tensor * build_stepaudio2(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_conv1d_k3(ctx, cur, p.conv_w, p.conv_b, 2, VT_ACT_GELU, nullptr);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_NONE, nullptr);
    cur = vt_relu(ctx, cur);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}

// MERaLiON-2 (MERaLiON2ForConditionalGeneration's speech path): speech_encoder(...).last_hidden_state
// (through its layer_norm), ln_speech, then speech_audio_adapter: reshape to [T / 15, 15 d]
// (speech_mlp_scale_factor positions stacked), mlp_adapter (linear, SiLU), act_fn(gate_proj(h)) *
// pool_proj(h), out_proj. The tower's rows are the encoder's (ln_speech is the adapter's side).
static vt_tensor * build_meralion(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_layer_norm(ctx, cur, p.norm_w, p.norm_b, enc->hparams.proj_eps);
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_NONE, nullptr);
    cur = vt_silu(ctx, cur);
    vt_tensor * gate = vt_linear(ctx, cur, p.gate_w, p.gate_b, VT_ACT_NONE, nullptr);
    vt_tensor * pool = vt_linear(ctx, cur, p.pool_w, p.pool_b, VT_ACT_NONE, nullptr);
    cur = vt_silu_mul(ctx, gate, pool);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}

// Qwen3OmniMoeAudioEncoder.forward after its layers: ln_post, then proj1, GELU, proj2 (the
// projector; the tower's rows are ln_post's).
static vt_tensor * build_qwen3a(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}

// The rows a chunk gives from its mel frames that hold audio (conv2's stride 2 makes
// ceil(frames / 2) positions).
static int positions_of(int frames) { return frames < 1 ? 0 : (frames - 1) / 2 + 1; }

// The AuT's positions (and tokens) from mel frames: transformers' _get_feat_extract_output_lengths,
// each chunk of n_chunk frames three halvings ((x - 1) // 2 + 1: 100 -> 13), the last chunk its rest's.
static int aut_positions(const whisper_audio_hparams & hp, int frames) {
    auto l3 = [](int x) { for (int i = 0; i < 3; i++) x = x < 1 ? 0 : (x - 1) / 2 + 1; return x; };
    return frames / hp.n_chunk * l3(hp.n_chunk) + l3(frames % hp.n_chunk);
}
// The positions holding audio of a window of `frames` such frames: the AuT's, or Whisper's.
static int wa_positions(const whisper_audio_hparams & hp, int frames) {
    return hp.n_conv ? aut_positions(hp, frames) : positions_of(frames);
}
// The mel frames a window of a whole-signal tower takes (and its next starts from): 3000, or for
// the AuT the most whole attention windows in 3000 (2400 for n_attn_window 800), so that windows
// cut where the model's attention windows do.
static int wa_window_frames(const whisper_audio_hparams & hp) {
    return hp.n_attn_window ? WHISPER_AUDIO_N_FRAMES / hp.n_attn_window * hp.n_attn_window : WHISPER_AUDIO_N_FRAMES;
}
static int rows_qwen3a(const whisper_audio_hparams & hp, int frames, bool) { return aut_positions(hp, frames); }
static int rows_qwen2a(const whisper_audio_hparams &, int frames, bool) { return positions_of(frames) / 2; }   // (pos - 2) // 2 + 1
static int rows_voxtral(const whisper_audio_hparams & hp, int, bool projector) {   // (MERaLiON-2's too: 1500 / 15)
    return projector ? hp.n_ctx / hp.stack_factor : hp.n_ctx;
}
static int rows_ultravox(const whisper_audio_hparams & hp, int frames, bool projector) {
    const int pos = positions_of(frames);
    return projector ? (pos + hp.stack_factor - 1) / hp.stack_factor : pos;
}

// The mel frames an input of n samples gives, as the model's processor prepares it; each
// chunk of 3000 of them is one encoder window.
static int64_t frames_qwen2a(size_t n) {       // its first 30 s, a frame per started hop
    return (int64_t)((std::min<size_t>(n, WHISPER_AUDIO_N_SAMPLES) + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP);
}
static int64_t frames_voxtral(size_t n) {      // padded to a multiple of 30 s
    return (int64_t)whisper_audio_n_windows(n) * WHISPER_AUDIO_N_FRAMES;
}
static int64_t frames_af3(size_t n) {          // its first 600 s (max_audio_len), a frame per started hop
    return (int64_t)((std::min<size_t>(n, 20 * WHISPER_AUDIO_N_SAMPLES) + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP);
}
// MERaLiON-2 (MERaLiON2Processor): number_chunk_limit = time_duration_limit 300 // whisper_chunk_size 30
static const size_t MERALION_MAX_SAMPLES = 10 * (size_t)WHISPER_AUDIO_N_SAMPLES;
static int64_t frames_meralion(size_t n) {     // its first 10 chunks of 30 s, a frame per started hop
    return (int64_t)((std::min(n, MERALION_MAX_SAMPLES) + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP);
}
static int rows_glmasr(const whisper_audio_hparams & hp, int frames, bool projector) {   // (pos - 4) // 4 + 1
    return projector ? positions_of(frames) / hp.stack_factor : positions_of(frames);
}
static int64_t frames_glmasr(size_t n) {       // its first 21 windows (max_audio_len 655 s), a frame per started hop
    return (int64_t)((std::min<size_t>(n, 21 * WHISPER_AUDIO_N_SAMPLES) + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP);
}
static int rows_minicpmo(const whisper_audio_hparams &, int frames, bool projector) {   // (pos - 2) // 2 + 1
    return projector ? positions_of(frames) / 2 : positions_of(frames);
}
static int64_t frames_all(size_t n) {          // all of it (30 s windows, no limit), a frame per started hop
    return (int64_t)((n + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP);
}
// Kimi-Audio: token_len = (L - 1) // 1280 + 1 of a window of L samples (ceil(frames / 8) for its
// ceil(L / 160) frames), each from 4 positions; the tower's rows those token_len * 4 positions
static int rows_kimiaudio(const whisper_audio_hparams & hp, int frames, bool projector) {
    const int tokens = frames < 1 ? 0 : (frames - 1) / (2 * hp.stack_factor) + 1;
    return projector ? tokens : tokens * hp.stack_factor;
}
// Step-Audio 2: of L = wav_lens frames (ceil(w / 160) of a window of w samples; the graph's own frame
// count gives its output's rows the same way) E = (L + 1) // 2 // 2 pooled positions, and the
// adapter's (E - 1) // 2 + 1 tokens (forward's feat_lens; none for E = 0)
static int rows_stepaudio2(const whisper_audio_hparams &, int frames, bool projector) {
    const int pooled = (frames + 1) / 2 / 2;
    return projector ? (pooled < 1 ? 0 : (pooled - 1) / 2 + 1) : pooled;
}
static int64_t frames_qwen3a(size_t n) {       // unpadded (padding "longest"): the STFT's 1 + n // 160 frames less its last
    return (int64_t)(n / WHISPER_AUDIO_HOP);
}
static int64_t frames_ultravox(size_t n) {     // at least 2 hops, padded to a hop
    return (int64_t)((std::max<size_t>(n, 2 * WHISPER_AUDIO_HOP) + WHISPER_AUDIO_HOP - 1) / WHISPER_AUDIO_HOP);
}

// One row per audio LLM: what its processor and code do with an input, for the pipeline, the
// token counts and the graph. A new tower is a row, a builder and its tests.
struct wa_tower {
    whisper_audio_projector type;
    size_t max_samples;          // the most of an input the processor keeps (0: all of it)
    bool whole_signal;           // one log-mel over the whole input, its clamp over all of it (else
                                 // each 30 s window its own, zero-padded)
    bool unpadded;               // an input of one chunk runs at its own length (positional embedding sliced)
    bool masked;                 // attention masked past the positions that hold audio
    int64_t (*frames)(size_t n_samples);
    int (*rows)(const whisper_audio_hparams & hp, int frames, bool projector);
    vt_tensor * (*build)(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur);
    bool tail_by_frames;        // a later window of an input (not its first) that holds less than 30 s: its mel
                                 // frames past the audio read as zero and its keys masked at its mel frame
                                 // count, not its positions (MiniCPM-o: pad_sequence's 0.0, and its padding
                                 // mask compares positions with audio_feature_lens, the mel frames)
    bool normalized = false;     // each window's samples to zero mean and unit variance over its audio before the
                                 // log-mel, its padding zero (WhisperFeatureExtractor's do_normalize: MERaLiON-2)
    // Step-Audio 2's windows: window_samples each (0: 30 s), each its own log-mel of its audio and
    // mel_pad zero samples ((w + mel_pad) / 160 frames, its clamp over those), L = ceil(w / 160) frames
    // its length (padding_mels' frames - 2) and its keys conv2's sampling of them (mask[(T + 1) % 2 :: 2]
    // of T frames run); a later window runs at a whole one's frames (padding_mels pads to the longest)
    size_t window_samples = 0;
    int mel_pad = 0;
};

static const wa_tower WA_TOWERS[] = {
    //  type                               max_samples               whole  unpad  mask  frames rows build tail_by_frames normalized
    { WHISPER_AUDIO_PROJECTOR_QWEN2A,   WHISPER_AUDIO_N_SAMPLES, false, false, true,  frames_qwen2a,   rows_qwen2a,   build_qwen2a,   false, false },
    { WHISPER_AUDIO_PROJECTOR_VOXTRAL,  0,                       true,  false, false, frames_voxtral,  rows_voxtral,  build_voxtral,  false, false },
    { WHISPER_AUDIO_PROJECTOR_ULTRAVOX, 0,                       true,  true,  true,  frames_ultravox, rows_ultravox, build_ultravox, false, false },
    // Audio Flamingo 3: each 30 s window as Qwen2-Audio's one (padded, its own log-mel, masked)
    { WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, 20 * WHISPER_AUDIO_N_SAMPLES, false, false, true,  frames_af3, rows_qwen2a, build_af3, false, false },
    // GLM-ASR: each 30 s window padded with its own log-mel, attention over all of it (no mask)
    { WHISPER_AUDIO_PROJECTOR_GLMASR,   21 * WHISPER_AUDIO_N_SAMPLES, false, false, false, frames_glmasr, rows_glmasr, build_glmasr, false, false },
    // Qwen2.5-Omni: its first 30 s as Qwen2-Audio's (Qwen2_5OmniProcessor pads to 30 s and truncates
    // there), the encoder over chunks of hparams.n_chunk frames (conv stem and attention per chunk,
    // the frames past the audio zero), then Qwen2-Audio's pooling and token rule
    { WHISPER_AUDIO_PROJECTOR_QWEN25O,  WHISPER_AUDIO_N_SAMPLES, false, false, true,  frames_qwen2a,   rows_qwen2a,   build_qwen25o,  false, false },
    // MiniCPM-o 2.6 (MiniCPMOProcessor.audio_feature_extract, MiniCPMO.get_audio_embedding): an input of
    // at most 30 s runs at its own frames (the 30 s window's log-mel cut there); a longer one in 30 s
    // windows, each its own log-mel, the last one's frames past its audio zero and masked by its rule
    // (tail_by_frames); block-causal attention over hparams.n_causal positions a block
    { WHISPER_AUDIO_PROJECTOR_MINICPMO, 0,                       false, true,  true,  frames_all, rows_minicpmo, build_minicpmo, true,  false },
    // Kimi-Audio (WhisperEncoder.tokenize_waveform): all of it in 30 s windows, each padded with its own
    // log-mel, attention over all of it (no mask), the first token_len * 4 positions kept
    { WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, 0,                      false, false, false, frames_all, rows_kimiaudio, build_kimiaudio, false, false },
    // Qwen3-Omni: all of the input (Qwen3OmniMoeProcessor: padding True, truncation False), one log-mel
    // of it, cut into windows of wa_window_frames (whole attention windows) masked past the audio; a
    // window shorter than one chunk runs at its own length (transformers pads chunks to the longest)
    { WHISPER_AUDIO_PROJECTOR_QWEN3A,   0,                       true,  false, true,  frames_qwen3a,   rows_qwen3a,   build_qwen3a,   false, false },
    // Step-Audio 2 (StepAudio2.apply_chat_template, padding_mels, AudioEncoder, Adaptor): all of it in
    // 25 s windows, an input of one at its own frames, masked by its length rule
    { WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, 0,                     false, true,  true,  frames_all, rows_stepaudio2, build_stepaudio2, false, false,
      25 * WHISPER_AUDIO_SAMPLE_RATE, 479 },
    // MERaLiON-2 (MERaLiON2Processor): its first 10 chunks of 30 s, each normalised (do_normalize) and
    // padded with its own log-mel, attention over all of it (WhisperEncoder takes no mask), 100 tokens each
    { WHISPER_AUDIO_PROJECTOR_MERALION, MERALION_MAX_SAMPLES,    false, false, false, frames_meralion, rows_voxtral, build_meralion, false, true },
};

static const wa_tower * wa_tower_of(whisper_audio_projector type) {
    for (const wa_tower & t : WA_TOWERS) if (t.type == type) return &t;
    return nullptr;
}

// A window's samples (30 s, or the tower's), and the mel frames a whole one runs at
static size_t wa_window_samples(const wa_tower * t) { return t && t->window_samples ? t->window_samples : WHISPER_AUDIO_N_SAMPLES; }
static int wa_full_frames(const wa_tower * t) {
    return t && t->window_samples ? (int)((t->window_samples + t->mel_pad) / WHISPER_AUDIO_HOP) : WHISPER_AUDIO_N_FRAMES;
}
// The mel frames of a mel_pad tower's window of n samples: its audio and the zeros after it
static int wa_padded_frames(const wa_tower & t, size_t n) {
    return (int)std::min<size_t>(WHISPER_AUDIO_N_FRAMES, (n + t.mel_pad) / WHISPER_AUDIO_HOP);
}
// Step-Audio 2's keys of a window of `frames` frames long run at n_frames: those of conv2's positions
// whose frame mask[(n_frames + 1) % 2 :: 2] holds (make_non_pad_mask of its length)
static int wa_keys_of(int frames, int n_frames) { return std::max(0, (frames - (n_frames + 1) % 2 + 1) / 2); }

// Builds the forward for a batch of mel windows: mel [B, n_mels, F] -> [B, (F + 1) / 2, d]; F
// is 3000 for a padded 30 s window, or fewer for an unpadded one. kv_len [B] (or NULL):
// window b attends to its first kv_len[b] positions. frames [B] (hparams.n_chunk, Qwen2.5-Omni):
// its mel frames holding audio; the conv stem runs per chunk of n_chunk frames, the frames from
// frames[b] on read as zero, each chunk's positions get the positional embedding's first rows,
// and attention stays within a chunk's positions. tower: its builder follows the last layer.
// states (or NULL; the encoder's output_layer -1, final_ln): gets every hidden state as
// transformers' WhisperEncoder hands them out (output_hidden_states): the input of layer 0,
// each layer's output but the last's, then the output (the last layer through the final LayerNorm).
static vt_tensor * whisper_audio_build_encoder(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * mel,
                                               vt_tensor * kv_len, vt_tensor * frames, const wa_tower * tower,
                                               std::vector<vt_tensor *> * states = nullptr) {
    const whisper_audio_hparams & hp = enc->hparams;
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
        cur = vt_conv2d_k3s2(ctx, mel, w.conv2d1_w, w.conv2d1_b, VT_ACT_GELU, ch1, frames);
        cur = vt_conv2d_k3s2(ctx, cur, w.conv2d2_w, w.conv2d2_b, VT_ACT_GELU, ch2, nullptr);
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
    if (tower) return vt_set_name(tower->build(enc, ctx, cur), "tokens");

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

static whisper_audio_encoder * encoder_init(const whisper_audio_model * model, whisper_audio_encoder_params params) {
    if (!model) { wa_set_error("whisper_audio_encoder_init: no model"); return nullptr; }
    const whisper_audio_hparams & hp = model->hparams;
    // a C caller may store any int in the enum fields, which C++ may not load as the enum: read the bytes
    static_assert(sizeof(params.device) == sizeof(int) && sizeof(params.dtype) == sizeof(int), "enums as int");
    int device, dtype;
    memcpy(&device, &params.device, sizeof(int));
    memcpy(&dtype, &params.dtype, sizeof(int));
    if (device != WHISPER_AUDIO_DEVICE_AUTO && device != WHISPER_AUDIO_DEVICE_CPU && device != WHISPER_AUDIO_DEVICE_CUDA) {
        wa_set_error("device %d is not WHISPER_AUDIO_DEVICE_AUTO, _CPU or _CUDA", device);
        return nullptr;
    }
    if (dtype != WHISPER_AUDIO_DTYPE_F16 && dtype != WHISPER_AUDIO_DTYPE_BF16 && dtype != WHISPER_AUDIO_DTYPE_FP8) {
        wa_set_error("dtype %d is not WHISPER_AUDIO_DTYPE_F16, _BF16 or _FP8", dtype);
        return nullptr;
    }
    if (params.gpu_device < 0) { wa_set_error("gpu_device %d is negative", params.gpu_device); return nullptr; }
    if (params.max_batch < 1 || params.max_batch > WHISPER_AUDIO_MAX_BATCH) {
        wa_set_error("batch size %d is outside [1, %d]", params.max_batch, WHISPER_AUDIO_MAX_BATCH);
        return nullptr;
    }
    if (params.output_layer < WHISPER_AUDIO_POST_CONV || params.output_layer >= hp.n_layer) {
        wa_set_error("output layer %d is outside [0, %d] (-1: the last layer)", params.output_layer, hp.n_layer - 1);
        return nullptr;
    }

    std::unique_ptr<whisper_audio_encoder, void (*)(whisper_audio_encoder *)> owner(new whisper_audio_encoder,
                                                                                  whisper_audio_encoder_free);
    whisper_audio_encoder * enc = owner.get();
    enc->hparams = hp;
    enc->mel_filters.assign(model->mel_filters, model->mel_filters + (size_t)hp.n_mels * WHISPER_AUDIO_N_BINS);
    enc->params = params;
    enc->params.n_threads = wa_n_threads(params.n_threads);
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
            return nullptr;
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
    if (!enc->backend) { wa_set_error("%s", vt_last_error()); return nullptr; }

    // weights: a tensor per row of WA_TENSORS (one for a fused tensor's rows), matrices in the
    // compute type, the rest in f32, named as in the model file (a fused one as its first part)
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
        // --dtype fp8: the linear layers of every block but the first and the last in e4m3.
        // On real base (tests/gpu/fp8-layers.py, relative L2 against float64) FP8 in the first
        // block too doubles the error (8.5% -> 4.1% without it) and changed a transcript; the
        // last in bf16 takes 11-12% more off (4.1-4.6% -> 3.6-4.1%), for a 31st of large-v3's
        // gain. A model of two blocks keeps its second in FP8 (else the mode would be bf16's).
        const bool bf16_block = il == 0 || (il == hp.n_layer - 1 && hp.n_layer > 2);
        if (t.matrix && !bf16_block && n_dims == 2) vt_set_fp8(*dst);
        return true;
    });
    // the GPU makes the log-mel in the graph (vt_log_mel, PCM in); the CPU keeps the host path
    // (log_mel_frames: its FFT is faster there than vt's reference DFT, and is the reference's
    // bits, which the committed outputs hold)
    enc->mel_in_graph = on_gpu;
    if (enc->mel_in_graph) {
        enc->mel_filters_t = vt_new_tensor_2d(ctx, VT_TYPE_F32, WHISPER_AUDIO_N_BINS, hp.n_mels);
        vt_set_weight(enc->mel_filters_t);
        vt_set_name(enc->mel_filters_t, "mel_filters");
    }
    // the projector's: the rows of its type that the model has (load checked which)
    std::vector<std::pair<vt_tensor *, const gguf_tensor_info *>> proj;
    for (const wa_proj_desc & t : WA_PROJ_TENSORS) {
        const gguf_tensor_info * src = t.type == hp.projector ? model->find(t.name) : nullptr;
        if (!src) continue;
        int64_t ne[3];
        vt_tensor * dst = enc->proj.*t.dst = vt_new_tensor(ctx, t.matrix ? mt : VT_TYPE_F32, wa_proj_shape(hp, t, ne), ne);
        vt_set_weight(dst);
        vt_set_name(dst, "%s", t.name);
        proj.emplace_back(dst, src);
    }
    if (!vt_backend_alloc_weights(enc->backend, ctx)) {
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
    const int full = wa_full_frames(wa_tower_of(enc->hparams.projector));   // a whole window's (Step-Audio 2: 2502)
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
    const wa_tower * tower = kind == WA_GRAPH_TOKENS ? wa_tower_of(hp.projector) : nullptr;
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
    if (!out) out = whisper_audio_build_encoder(enc, ctx.get(), mel, g.kv_len, g.frames, tower,
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

bool whisper_audio_encode_mel_frames(whisper_audio_encoder * enc, const float * mel, int n_windows, int n_frames, float * out) {
    if (!enc || !mel || !out) { wa_set_error("%s: NULL %s", __func__, !enc ? "encoder" : !mel ? "mel" : "out"); return false; }
    wa_encoder_lock lock(enc, __func__);
    if (!lock.held) return false;
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = wa_catch(__func__, false, [&] { return encode_mel_frames(enc, mel, n_windows, n_frames, out); });
    enc->timings.wall_ms += ms_since(t0);
    return ok;
}

bool whisper_audio_encode_mel(whisper_audio_encoder * enc, const float * mel, int n_windows, float * out) {
    return whisper_audio_encode_mel_frames(enc, mel, n_windows, WHISPER_AUDIO_N_FRAMES, out);
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
// (or of the evened batch when the caller knows the windows ahead: wa_even_batch), each window a row of WA_MEL_ROW samples (its 30 s and the 200 samples the log-mel's edge
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

struct whisper_audio_pipeline {
    std::vector<whisper_audio_encoder *> encs;
    whisper_audio_pipeline_params params;
    const wa_tower * tower = nullptr;    // the rows are this tower's tokens (else Whisper windows)
    bool projector = true;               // ... through its projector
    int max_batch = 1, width = 0, max_rows = 0;   // a row's floats; rows a window gives, at most
    int batch = 1;                       // windows a batch holds: max_batch, or wa_even_batch's
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

    // the caller's side
    wa_batch * cur = nullptr;            // being filled: window cur->n takes the samples
    wa_batch * cur_max = nullptr;        // the mel-max batch being filled (a held input's first pass)
    int64_t max_cut = 0;                 // chunks of the held input whose max is cut
    size_t in_window = 0;                // samples in window cur->n
    int64_t input = 0, window = 0;
    size_t input_samples = 0;            // of the current input, pushed (held or windowed or not used)
    wa_held_pcm held;                    // a whole-signal tower's current input (its capacity kept for the next)
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

// Submits batch b to the encoder's backend in slot `slot` (on the CPU: computes it).
static bool pipeline_submit(whisper_audio_pipeline * p, whisper_audio_encoder * enc, wa_batch * b, int slot,
                            std::vector<float> & mel) {
    // on CUDA a short batch of padded windows runs as the smallest captured graph that holds it
    // (zero windows after it: wa_graph_batch); the CPU's time follows the windows
    const bool from_pcm = enc->mel_in_graph;
    const bool whole = b->n_frames == WHISPER_AUDIO_N_FRAMES || b->n_frames == wa_full_frames(p->tower);
    const int n_run = from_pcm && whole ? wa_graph_batch(b->n, b->cap) : b->n;
    for (int i = b->n; i < n_run; i++) {
        std::fill(b->pcm + (size_t)i * WA_MEL_ROW, b->pcm + (size_t)(i + 1) * WA_MEL_ROW, 0.0f);
        b->mel_params[2 * i] = WHISPER_AUDIO_N_FRAMES;
        b->mel_params[2 * i + 1] = NAN;
        b->kv_len[i] = 1;
        b->frames[i] = 1;
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
    vt_tensor * in[4] = {g->in};
    const void * in_host[4] = {from_pcm ? (const void *)b->pcm : (const void *)mel.data()};
    int n_in = 1;
    if (g->mel_params) { in[n_in] = g->mel_params; in_host[n_in++] = b->mel_params; }
    if (g->kv_len) { in[n_in] = g->kv_len; in_host[n_in++] = b->kv_len; }
    if (g->frames) { in[n_in] = g->frames; in_host[n_in++] = b->frames; }
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

static void pipeline_worker(whisper_audio_pipeline * p, whisper_audio_encoder * enc) {
    std::vector<float> mel;                              // CPU: the batch's log-mel
    wa_batch * in_flight[2] = {nullptr, nullptr};        // by slot
    int slot = 0;
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
        if (idle && (in_flight[0] || in_flight[1])) {   // nothing to overlap with: finish the last one
            if (!land(in_flight[0] ? 0 : 1)) break;
            continue;
        }
        {
            std::unique_lock<std::mutex> lock(p->mu);
            p->cv.wait(lock, [&] { return !p->todo.empty() || p->closing || !p->error.empty(); });
            if (!p->error.empty() || p->todo.empty()) break;
            b = p->todo.front();
            p->todo.pop_front();
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

static bool pipeline_push(whisper_audio_pipeline * p, const float * pcm, size_t n) {
    if (!pipeline_ok(p)) return false;
    if (!wa_mel_check_pcm("whisper_audio_pipeline_push", pcm, n, p->input_samples)) return pipeline_refuse(p);
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
    const size_t W = wa_window_samples(p->tower);
    while (n > 0) {
        if (p->in_window == 0 && !pipeline_make_room(p, wa_full_frames(p->tower))) return false;
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
// hops, its end reflected where it ends).
static bool pipeline_cut_held(whisper_audio_pipeline * p) {
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
        const bool own_length = (tw.unpadded && n_windows == 1) || (hp.n_conv && valid < hp.n_chunk);   // (the AuT's: one chunk)
        const int n_frames = own_length ? valid : (int)W;
        if (!pipeline_make_room(p, n_frames)) return false;
        const size_t first = (size_t)(c * W * WHISPER_AUDIO_HOP), win_samples = (size_t)W * WHISPER_AUDIO_HOP;
        log_mel_row(x, n, sig_len, (int64_t)first, p->cur->pcm + (size_t)p->cur->n * WA_MEL_ROW);
        wa_window w{p->input, c, std::min<size_t>(win_samples, n - std::min(n, first))};
        if (c == n_windows - 1) w.samples = n - std::min(n, first);   // the last holds the input's tail past its frames
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
    if (p->tower && p->tower->whole_signal) {
        const bool ok = pipeline_cut_held(p);
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
    pipeline_dispatch(p, p->cur);
    return pipeline_emit(p, false);
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
    if (p->window > 0) p->dropped.insert(p->input);
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
    return plain ? wa_tower_of(hp.projector) : nullptr;
}

// The batch for n_windows windows known ahead, max_batch at most: as many batches as max_batch
// needs, all of one size but the last, shorter by what the rounding leaves (120 windows at 32:
// 4 x 30; 12 at 8: 2 x 6; 5 at 8: 1 x 5). A short last batch costs a whole one where a captured
// graph runs it (on the GPU: wa_graph_batch), and a batch no larger than the work keeps the host
// buffers and the graph's memory to it. Not known (0): max_batch.
static int wa_even_batch(size_t n_windows, int max_batch) {
    if (n_windows == 0) return max_batch;
    const size_t n_batches = (n_windows + max_batch - 1) / max_batch;
    return (int)((n_windows + n_batches - 1) / n_batches);
}

// windows: Whisper windows even from a tower's model (encode_pcm's contract).
static whisper_audio_pipeline * pipeline_init(whisper_audio_encoder * const * encoders, int n_encoders,
                                              whisper_audio_pipeline_params params, bool windows = false) {
    if (!encoders || n_encoders < 1) { wa_set_error("whisper_audio_pipeline_init: no encoders"); return nullptr; }
    int pool;
    memcpy(&pool, &params.pool, sizeof(int));
    if (pool != WHISPER_AUDIO_POOL_NONE && pool != WHISPER_AUDIO_POOL_MEAN) {
        wa_set_error("whisper_audio_pipeline_init: pool %d is not WHISPER_AUDIO_POOL_NONE or _MEAN", pool);
        return nullptr;
    }
    std::unique_ptr<whisper_audio_pipeline, void (*)(whisper_audio_pipeline *)> owner(new whisper_audio_pipeline,
                                                                                    whisper_audio_pipeline_free);
    whisper_audio_pipeline * p = owner.get();
    p->params = params;
    for (int i = 0; i < n_encoders; i++) {
        whisper_audio_encoder * e = encoders[i];
        if (!e) { wa_set_error("whisper_audio_pipeline_init: encoder %d is NULL", i); return nullptr; }
        const whisper_audio_encoder * e0 = p->encs.empty() ? e : p->encs[0];
        if (e->hparams.n_state != e0->hparams.n_state || e->hparams.n_mels != e0->hparams.n_mels ||
            e->hparams.projector != e0->hparams.projector || e->params.output_layer != e0->params.output_layer ||
            e->params.final_ln != e0->params.final_ln || e->params.projector != e0->params.projector ||
            e->params.max_batch != e0->params.max_batch) {
            wa_set_error("whisper_audio_pipeline_init: encoder %d differs from encoder 0 (model, output layer, "
                         "projector or batch size)", i);
            return nullptr;
        }
        if (e->busy.exchange(true)) {
            wa_set_error("whisper_audio_pipeline_init: encoder %d is busy (with another call or pipeline, or given twice)", i);
            return nullptr;
        }
        p->encs.push_back(e);
    }
    const whisper_audio_encoder * e0 = p->encs[0];
    const whisper_audio_hparams & hp = e0->hparams;
    p->max_batch = p->batch = e0->params.max_batch;   // what pipeline_free gives the encoders back
    p->tower = windows ? nullptr : pipeline_tower(hp, e0->params, params);
    if (hp.n_conv && !p->tower) {         // the AuT's positions are not Whisper's: no Whisper windows of it
        wa_set_error("whisper_audio_pipeline_init: %s's tower gives its tokens alone (or the tower's rows with the projector "
                     "off): no other output layer, no pooling, no unpadded windows, no Whisper windows",
                     wa_projector_gguf(hp.projector));
        return nullptr;
    }
    p->projector = e0->params.projector;
    p->batch = wa_even_batch(params.n_windows, p->max_batch);
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
    const size_t in_floats = (size_t)cap * (WA_MEL_ROW + 4);
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
        if (params.pool == WHISPER_AUDIO_POOL_MEAN) {
            b->pooled.resize((size_t)cap * p->width);
            if (params.f16) b->pooled_f16.resize(b->pooled.size());
        }
        p->free_list.push_back(b);
    }
    const wa_graph_kind kind = p->tower ? WA_GRAPH_TOKENS : WA_GRAPH_ROWS;
    for (whisper_audio_encoder * e : p->encs) {      // the whole batch's graphs, built (CUDA: captured) now
        if (!e->mel_in_graph) {                      // the CPU: its arena mapped now, not in the first batch
            if (!graph_for_batch(e, cap, wa_full_frames(p->tower), false, kind)) return nullptr;
            continue;
        }
        for (wa_graph_kind k : {kind, WA_GRAPH_MEL_MAX}) {
            if (k == WA_GRAPH_MEL_MAX && !(p->tower && p->tower->whole_signal)) continue;
            wa_graph * g = graph_for_batch(e, cap, WHISPER_AUDIO_N_FRAMES, true, k);
            if (!g) return nullptr;
            if (!vt_backend_prepare(e->backend, g->graph)) {
                wa_set_error("whisper_audio_pipeline_init: %s", vt_last_error());
                return nullptr;
            }
        }
    }
    for (whisper_audio_encoder * e : p->encs) p->workers.emplace_back(pipeline_worker, p, e);
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
static bool encode_one_input(whisper_audio_encoder * enc, const float * pcm, size_t n, float * out, bool tokens) {
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
        pipeline_init(&enc, 1, pp, !tokens), whisper_audio_pipeline_free);
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
    const bool ok = wa_catch(__func__, false, [&] { return encode_one_input(enc, pcm, n, out, false); });
    enc->timings.wall_ms += ms_since(t0);
    return ok;
}

// ---- audio LLMs: tokens ------------------------------------------------------------------

static bool wa_check_projector(const whisper_audio_hparams & hp, const char * func) {
    if (wa_tower_of(hp.projector)) return true;
    wa_set_error("%s: the model is a Whisper encoder without an audio-LLM projector (Qwen2-Audio, Voxtral, Ultravox, Audio Flamingo 3, "
                 "GLM-ASR, Qwen2.5-Omni, Qwen3-Omni, Step-Audio 2)", func);
    return false;
}

// The rows an input of n samples gives a tower's model: its chunks' rows, summed.
static size_t tower_rows(const whisper_audio_hparams & hp, size_t n_samples, bool projector) {
    const wa_tower & tw = *wa_tower_of(hp.projector);
    const int64_t frames = tw.frames(n_samples), F = tw.whole_signal ? wa_window_frames(hp)
                                                  : (int64_t)(wa_window_samples(&tw) / WHISPER_AUDIO_HOP);
    size_t rows = 0;
    for (int64_t c = 0; c * F < frames; c++) rows += (size_t)tw.rows(hp, (int)std::min(F, frames - c * F), projector);
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
    const wa_tower * tw = tokens ? wa_tower_of(model->hparams.projector) : nullptr;
    return tw && tw->max_samples ? tw->max_samples : SIZE_MAX;
}

bool whisper_audio_rows_are_tokens(const whisper_audio_model * model, whisper_audio_encoder_params ep,
                                   whisper_audio_pipeline_params pp) {
    if (!model) { wa_set_error("%s: no model", __func__); return false; }
    return pipeline_tower(model->hparams, ep, pp) != nullptr;
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
    const bool ok = wa_catch(__func__, false, [&] { return encode_one_input(enc, pcm, n, out, true); });
    enc->timings.wall_ms += ms_since(t0);
    return ok;
}

int whisper_audio_encode_mel_tokens(whisper_audio_encoder * enc, const float * mel, int n_frames, int n_audio_frames,
                                    float * out) {
    if (!enc || !mel || !out) { wa_set_error("%s: NULL %s", __func__, !enc ? "encoder" : !mel ? "mel" : "out"); return -1; }
    if (!wa_check_token_encoder(enc, __func__)) return -1;
    const whisper_audio_hparams & hp = enc->hparams;
    const wa_tower & tw = *wa_tower_of(hp.projector);
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
    std::vector<float> own;
    if (hp.n_conv && n_audio_frames < hp.n_chunk) {
        own.resize((size_t)hp.n_mels * n_audio_frames);
        for (int m = 0; m < hp.n_mels; m++)
            std::copy(mel + (size_t)m * n_frames, mel + (size_t)m * n_frames + n_audio_frames, own.begin() + (size_t)m * n_audio_frames);
        mel = own.data();
        n_frames = n_audio_frames;
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
