// whisper-audio-input.cpp - audio files to 16 kHz mono PCM: the codecs (WAV; Ogg Vorbis, FLAC,
// MP3 and Opus through their reference libraries, where the build finds them), channel mixing
// and resampling, streams a block at a time, and the reader, a pool of decoding workers ahead
// of the caller. Part of the library's optional second set: compiled in with
// -DWHISPER_AUDIO_INPUT on every file of the library; without it whisper-audio.cpp takes PCM
// and its audio-file calls say what to add.
#ifndef WHISPER_AUDIO_INPUT
#error "whisper-audio-input.cpp: compile every file of the library with -DWHISPER_AUDIO_INPUT, so that whisper-audio.cpp leaves its audio-file calls to it"
#endif
#include "whisper-audio-impl.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
// decides (WA_CODECS, a row per codec: its signature, its decoder, what a build without it
// lacks). Each compressed format goes through its reference decoder, built in when its
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
static const int    WA_FOLLOW_POLL_MS = 5;               // a followed file at its end: how often to look for more

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
    bool            live = false;       // whisper_audio_stream_open_live: read what has arrived, never a whole buffer
    int             follow_ms = 0;      // live: a file that grows; its end waits until it has not grown this long
};

// A live input's bytes (a pipe, a growing file) straight from its descriptor: a read returns what
// has arrived (waiting only for the first byte of it), where fread would wait to fill the buffer.
// A followed file's end is its end only once nothing has come for follow_ms.
static void rd_read_live(wa_reader & r, size_t n) {
    auto last_growth = std::chrono::steady_clock::now();
    while (r.end - r.pos < n && !r.at_eof) {
        const ssize_t k = read(fileno(r.f), r.buf.data() + r.end, r.buf.size() - r.end);
        if (k > 0) {
            r.end += (size_t) k;
            last_growth = std::chrono::steady_clock::now();
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0) {
            r.err = errno;
            r.at_eof = true;
        } else if (r.follow_ms > 0 &&
                   std::chrono::steady_clock::now() - last_growth < std::chrono::milliseconds(r.follow_ms)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(WA_FOLLOW_POLL_MS));
        } else {
            r.at_eof = true;
        }
    }
}

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
    if (r.live) {
        rd_read_live(r, n);
        return r.end - r.pos;
    }
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

// What the rest of the stream asks of the codec it holds (a WAV's data chunk, a FLAC's
// segments: the reader's parallel decoding); a row of WA_CODECS names it.
enum wa_codec { WA_CODEC_WAV, WA_CODEC_VORBIS, WA_CODEC_FLAC, WA_CODEC_MP3, WA_CODEC_OPUS };

struct whisper_audio_stream;

// A codec's decoder: open reads its headers from s->rd (at the codec's signature) and fills
// s's rate, channels, format and length; block decodes the next frames to mono at the end of
// s->hist and returns their count (0 at the end, -1 on an error, its message set); close
// releases what open made, also after a failed open.
struct wa_decoder {
    bool    (*open)(whisper_audio_stream * s);
    int64_t (*block)(whisper_audio_stream * s);
    void    (*close)(whisper_audio_stream * s);
};

struct wa_codec_row;

struct whisper_audio_stream {
    std::string name;               // prefixes every message: the path, "<stdin>" or "<memory>"
    wa_reader   rd;
    wa_codec    codec = WA_CODEC_WAV;
    const wa_codec_row * row = nullptr;   // the codec decoding it (WA_CODECS), once found
    const char * format = "";       // info->format of a compressed format ("flac", "mp3", ...)
    int         sample_rate = 0;
    int         channels = 0;
    int         bits = 0;           // FLAC's bits per sample (0 for the lossy formats)
    int64_t     frames_total = -1;  // the length the header says (FLAC, MP3 with a Xing/LAME tag), or -1
    int64_t     frames_said = -1;   // a WAV's: its data chunk's size in frames (-1: to the end)
    bool        cut = false;        // the input ends inside a frame (a FLAC of unknown length)
    bool        no_eos = false;     // an Ogg stream ends without its last page (the end-of-stream flag)
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
    // the Ogg pages the bytes given to opusfile hold, followed to see whether the input ends
    // with a stream's last page (opusfile does not tell): the page header being read, its bytes
    // so far, the body bytes still to come, and whether the last whole page had the EOS flag
    uint8_t     og_head[27 + 255];
    size_t      og_have = 0;
    uint64_t    og_body = 0;
    bool        og_eos = false;
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
            // (a live input's too: its writer put the sizes there before it knew them)
            const bool to_end = ck_size == 0 || ck_size == 0xFFFFFFFFu || r.live;
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

    // (a live input: what has arrived, a frame at least)
    const size_t got = rd_fill(r, r.live ? (size_t) ba : (size_t) want * ba);
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

static const wa_decoder WAV_DECODER_ = {wav_stream_open, wav_stream_block, nullptr};
static const wa_decoder * const WAV_DECODER = &WAV_DECODER_;

// ---- Ogg ----------------------------------------------------------------------------

// The first packet of an Ogg stream's first page: its offset in p, or 0 when the input
// (size bytes at p, "OggS" first) ends before a byte of that packet.
static size_t ogg_first_packet(const uint8_t * p, size_t size) {
    if (size < 27 || size <= 27 + (size_t) p[26]) return 0;
    return 27 + (size_t) p[26];   // after the segment table
}

// Whether the first packet (have bytes at q) begins with a codec's signature. An input cut
// inside the signature is taken for the codec whose signature it begins (a cut Opus file is a
// cut Opus file, not "not Vorbis").
static bool ogg_signature(const uint8_t * q, size_t have, const char * sig, size_t len) {
    return memcmp(q, sig, std::min(have, len)) == 0;
}
static bool ogg_is_vorbis(const uint8_t * q, size_t have) { return ogg_signature(q, have, "\x01vorbis", 7); }
static bool ogg_is_opus(const uint8_t * q, size_t have) { return ogg_signature(q, have, "OpusHead", 8); }
static bool ogg_is_flac(const uint8_t * q, size_t have) { return ogg_signature(q, have, "\x7f" "FLAC", 5); }

// Ogg codecs that whisper-audio does not decode, named in the message.
static const char * ogg_other_codec(const uint8_t * q, size_t have) {
    if (ogg_signature(q, have, "Speex   ", 8)) return "Speex";
    if (ogg_signature(q, have, "\x80theora", 7)) return "Theora (video)";
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
    // it leaks on some malformed chained files (a bug reported to xiph/vorbis). So info->frames is -1.
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
    // pages lost or failing their checksum), so that later windows shift in time. An input
    // that stops early (no end-of-stream page: a writer flags the last page when it closes the
    // stream) is cut short, as every codec's is: decoded, with a warning.
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
        // the input ends without the stream's last page: cut short, as a WAV, FLAC or MP3 that
        // ends early; what is there is decoded, and the stream's warning says so
        if (!ogg_stream_eos(&s->vf.os)) s->no_eos = true;
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

static void ogg_stream_close(whisper_audio_stream * s) {
    if (s->vf_open) ov_clear(&s->vf);  // its close callback is NULL: the FILE is ours
    s->vf_open = false;
}

static const wa_decoder VORBIS_DECODER_ = {ogg_stream_open, ogg_stream_block, ogg_stream_close};
static const wa_decoder * const VORBIS_DECODER = &VORBIS_DECODER_;
#else
static const wa_decoder * const VORBIS_DECODER = nullptr;   // not in this build
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
static bool wa_fail_unbuilt(const char * name, const char * what, const char * support, const char * macro,
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

static bool flac_native_open(whisper_audio_stream * s) { return flac_stream_open(s, false); }
static bool flac_ogg_open(whisper_audio_stream * s) { return flac_stream_open(s, true); }
static void flac_stream_close(whisper_audio_stream * s) {
    if (s->flac) FLAC__stream_decoder_delete(s->flac);
    s->flac = nullptr;
}

static const wa_decoder FLAC_DECODER_ = {flac_native_open, flac_stream_block, flac_stream_close};
static const wa_decoder OGG_FLAC_DECODER_ = {flac_ogg_open, flac_stream_block, flac_stream_close};
static const wa_decoder * const FLAC_DECODER = &FLAC_DECODER_;
static const wa_decoder * const OGG_FLAC_DECODER = &OGG_FLAC_DECODER_;
#else
static const wa_decoder * const FLAC_DECODER = nullptr;       // not in this build
static const wa_decoder * const OGG_FLAC_DECODER = nullptr;
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

static void mp3_stream_close(whisper_audio_stream * s) {
    if (s->mp3) mpg123_delete(s->mp3);
    s->mp3 = nullptr;
}

static const wa_decoder MP3_DECODER_ = {mp3_stream_open, mp3_stream_block, mp3_stream_close};
static const wa_decoder * const MP3_DECODER = &MP3_DECODER_;
#else
static const wa_decoder * const MP3_DECODER = nullptr;   // not in this build
#endif // WHISPER_AUDIO_MP3

// ---- Opus ---------------------------------------------------------------------------

#ifdef WHISPER_AUDIO_OPUS

// Follows the Ogg pages in n bytes given to opusfile: og_eos is the last whole page's EOS flag
// (header byte 5, bit 2), og_have > 0 or og_body > 0 an input that stops inside a page.
static void opus_follow_pages(whisper_audio_stream * s, const uint8_t * p, size_t n) {
    while (n > 0) {
        if (s->og_body > 0) {                        // inside a page's body
            const size_t k = (size_t) std::min<uint64_t>(s->og_body, n);
            s->og_body -= k;
            p += k;
            n -= k;
            continue;
        }
        // the header: 27 bytes, then as many lacing values as byte 26 says
        const size_t want = s->og_have < 27 ? 27 : 27 + (size_t) s->og_head[26];
        const size_t k = std::min(want - s->og_have, n);
        memcpy(s->og_head + s->og_have, p, k);
        s->og_have += k;
        p += k;
        n -= k;
        if (s->og_have < 27 || s->og_have < 27 + (size_t) s->og_head[26]) continue;
        if (memcmp(s->og_head, "OggS", 4) != 0) {    // not a page where one should start: damage, opusfile's to report
            s->og_have = 0;
            s->og_eos = true;                        // (nothing said about a cut)
            return;
        }
        uint64_t body = 0;
        for (size_t i = 0; i < s->og_head[26]; i++) body += s->og_head[27 + i];
        s->og_eos = (s->og_head[5] & 4) != 0;
        s->og_body = body;
        s->og_have = 0;
    }
}

// opusfile's read callback (no seek or tell: a stream, as Vorbis; so info->frames is -1).
static int opus_cb_read(void * src, unsigned char * ptr, int n) {
    whisper_audio_stream * s = (whisper_audio_stream *) src;
    wa_reader & r = s->rd;
    const size_t got = rd_read(r, ptr, (size_t) n);
    if (got == 0 && r.err) return -1;
    opus_follow_pages(s, ptr, got);
    return (int) got;
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
    s->opus = op_open_callbacks(s, &cb, nullptr, 0, &rc);
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
    if (got == 0) {   // the end: without the last page (or inside a page), cut short, as Vorbis
        if (!s->og_eos || s->og_have > 0 || s->og_body > 0) s->no_eos = true;
        return 0;
    }
    // a chained stream may change the channels (mixed per block); the rate is always 48 kHz
    wa_append_mono(s, s->dec.data(), (size_t) got, op_channel_count(s->opus, link));
    return got;
}

static void opus_stream_close(whisper_audio_stream * s) {
    if (s->opus) op_free(s->opus);
    s->opus = nullptr;
}

static const wa_decoder OPUS_DECODER_ = {opus_stream_open, opus_stream_block, opus_stream_close};
static const wa_decoder * const OPUS_DECODER = &OPUS_DECODER_;
#else
static const wa_decoder * const OPUS_DECODER = nullptr;   // not in this build
#endif // WHISPER_AUDIO_OPUS

// ---- the codecs -------------------------------------------------------------------------

// Where a codec's signature sits: at the input's start, after any ID3v2 tags there (MP3's
// metadata, also found in front of FLAC), or in the first packet of an Ogg stream.
enum wa_codec_layer { WA_AT_START, WA_AFTER_ID3, WA_IN_OGG };

// "RIFF"/"RF64"/"BW64" + "WAVE"; "fLaC".
static bool wav_sniff(const uint8_t * p, size_t have) {
    return have >= 12 && (wav_id(p, "RIFF") || wav_id(p, "RF64") || wav_id(p, "BW64")) && wav_id(p + 8, "WAVE");
}
static bool flac_sniff(const uint8_t * p, size_t have) { return have >= 4 && wav_id(p, "fLaC"); }

// The codecs whisper-audio decodes, one row each: the format found by the first row whose
// signature matches, in its layer. A codec this build lacks keeps its row with no decoder, so
// that its files get a message that says what to install. A new codec: its row, its decoder
// (open, block, close) and, if the stream must know it, a wa_codec.
struct wa_codec_row {
    wa_codec         codec;
    wa_codec_layer   layer;
    bool (*sniff)(const uint8_t * p, size_t have);   // its signature at p (have bytes there)
    const wa_decoder * decoder;                      // NULL: not in this build
    const char *     what;                           // the file, as messages name it
    // what a build without it lacks: the support, the -D flag, the library and Debian's package
    const char * support, * macro, * lib, * package;
};
static const wa_codec_row WA_CODECS[] = {
    {WA_CODEC_WAV,    WA_AT_START,  wav_sniff,        WAV_DECODER,      "a WAV",         "", "", "", ""},
    {WA_CODEC_VORBIS, WA_IN_OGG,    ogg_is_vorbis,    VORBIS_DECODER,   "an Ogg Vorbis", "Ogg",  "WHISPER_AUDIO_OGG",  "vorbisfile", "libvorbis-dev"},
    {WA_CODEC_OPUS,   WA_IN_OGG,    ogg_is_opus,      OPUS_DECODER,     "an Ogg Opus",   "Opus", "WHISPER_AUDIO_OPUS", "opusfile",   "libopusfile-dev"},
    {WA_CODEC_FLAC,   WA_IN_OGG,    ogg_is_flac,      OGG_FLAC_DECODER, "an Ogg FLAC",   "FLAC", "WHISPER_AUDIO_FLAC", "FLAC",       "libflac-dev"},
    {WA_CODEC_FLAC,   WA_AFTER_ID3, flac_sniff,       FLAC_DECODER,     "a FLAC",        "FLAC", "WHISPER_AUDIO_FLAC", "FLAC",       "libflac-dev"},
    {WA_CODEC_MP3,    WA_AFTER_ID3, mp3_frame_header, MP3_DECODER,      "an MP3",        "MP3",  "WHISPER_AUDIO_MP3",  "mpg123",     "libmpg123-dev"},
};

// The first row of this layer whose signature is at p; NULL for none.
static const wa_codec_row * wa_codec_sniff(wa_codec_layer layer, const uint8_t * p, size_t have) {
    for (const wa_codec_row & c : WA_CODECS)
        if (c.layer == layer && c.sniff(p, have)) return &c;
    return nullptr;
}

// Opens s with the codec of row c; a codec this build lacks is an error that says what to add
// (what: the file as the message names it, c->what by default).
static bool wa_codec_open(whisper_audio_stream * s, const wa_codec_row * c, const char * what = nullptr) {
    if (!c->decoder) return wa_fail_unbuilt(s->name.c_str(), what ? what : c->what, c->support, c->macro, c->lib, c->package);
    s->row   = c;
    s->codec = c->codec;
    return c->decoder->open(s);
}

// ---- the stream -------------------------------------------------------------------------

static void wa_stream_free(whisper_audio_stream * s) {
    if (!s) return;
    if (s->row && s->row->decoder->close) s->row->decoder->close(s);
    if (s->rd.own_f && s->rd.f) fclose(s->rd.f);
    delete s;
}

// Ogg: the codec of the first stream picks the decoder.
static bool ogg_open(whisper_audio_stream * s) {
    const char * name = s->name.c_str();
    wa_reader & r = s->rd;
    const size_t have = rd_fill(r, 27 + 255 + 8);
    const size_t body = ogg_first_packet(r.p + r.pos, have);
    if (body == 0) {
        return audio_fail(name, "truncated Ogg file: the input ends after %zu bytes, inside its first page; if it is audio, %s",
            have, AUDIO_FFMPEG_HINT);
    }
    const uint8_t * q = r.p + r.pos + body;
    const wa_codec_row * c = wa_codec_sniff(WA_IN_OGG, q, have - body);
    if (c) return wa_codec_open(s, c);
    if (const char * other = ogg_other_codec(q, have - body)) {
        return audio_fail(name, "an Ogg %s stream; whisper-audio decodes Ogg Vorbis, Opus and FLAC; %s", other,
            AUDIO_FFMPEG_HINT);
    }
    // nothing recognisable: vorbisfile says what is wrong
    for (const wa_codec_row & v : WA_CODECS)
        if (v.codec == WA_CODEC_VORBIS) return wa_codec_open(s, &v, "an Ogg (Vorbis/Opus)");
    return false;
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

// A codec that may follow ID3v2 tags (FLAC, MP3), after them.
static bool id3_open(whisper_audio_stream * s) {
    if (!id3_skip(s)) return false;
    wa_reader & r = s->rd;
    const size_t head = rd_fill(r, 4);
    const wa_codec_row * c = wa_codec_sniff(WA_AFTER_ID3, r.p + r.pos, head);
    if (c) return wa_codec_open(s, c);
    return audio_fail(s->name.c_str(), "an ID3 tag, but neither MP3 nor FLAC audio after it; if it is audio, %s",
        AUDIO_FFMPEG_HINT);
}

// Finds the format, reads the headers and fills info. Takes s; NULL on error.
static whisper_audio_stream * wa_stream_ready(whisper_audio_stream * s, whisper_audio_info * info);

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
    } else if (const wa_codec_row * c = wa_codec_sniff(WA_AT_START, p, head)) {
        ok = wa_codec_open(s, c);
    } else if ((head >= 3 && memcmp(p, "ID3", 3) == 0) || wa_codec_sniff(WA_AFTER_ID3, p, head)) {
        ok = id3_open(s);
    } else {
        ok = wav_not_audio(name, p, head);
    }
    if (!ok) {
        wa_stream_free(s);
        return nullptr;
    }
    return wa_stream_ready(s, info);
}

// A stream whose codec is open: its resampler, and info from its header.
static whisper_audio_stream * wa_stream_ready(whisper_audio_stream * s, whisper_audio_info * info) {
    resample_init(s->rs, s->sample_rate, WHISPER_AUDIO_SAMPLE_RATE);
    if (info) {
        memset(info, 0, sizeof(*info));
        info->sample_rate = s->sample_rate;
        info->channels    = s->channels;
        if (s->codec == WA_CODEC_WAV) {
            info->bits_per_sample = (int) s->wav.bits;
            snprintf(info->format, sizeof(info->format), "%s", *s->format ? s->format : wav_format_name(s->wav));
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

// Headerless PCM (raw: ffmpeg's -f name) through the WAV decoder: a header made from the
// parameters, the samples running to the input's end.
static whisper_audio_stream * wa_stream_start_raw(whisper_audio_stream * s, const whisper_audio_live_params & lp,
                                                  whisper_audio_info * info) {
    const bool f32 = strcmp(lp.raw, "f32le") == 0;
    wav_header & h = s->wav;
    h.enc         = f32 ? WAV_FLOAT32 : WAV_PCM_S16;
    h.extensible  = false;
    h.channels    = (uint32_t) (lp.raw_channels ? lp.raw_channels : 1);
    h.sample_rate = (uint32_t) (lp.raw_rate ? lp.raw_rate : WHISPER_AUDIO_SAMPLE_RATE);
    h.bits        = f32 ? 32 : 16;
    h.block_align = h.channels * h.bits / 8;
    h.data_offset = 0;
    h.data_size   = 0;
    s->row        = &WA_CODECS[0];
    s->codec      = WA_CODEC_WAV;
    s->format     = f32 ? "raw f32le" : "raw s16le";
    s->data_left  = UINT64_MAX;
    s->sample_rate = (int) h.sample_rate;
    s->channels    = (int) h.channels;
    return wa_stream_ready(s, info);
}

whisper_audio_live_params whisper_audio_live_default_params(void) {
    whisper_audio_live_params p;
    p.raw = nullptr;
    p.raw_rate = 0;
    p.raw_channels = 0;
    p.follow_ms = 0;
    return p;
}

whisper_audio_stream * whisper_audio_stream_open_live(const char * path, whisper_audio_live_params params,
                                                      whisper_audio_info * info) {
    if (info) memset(info, 0, sizeof(*info));
    const char * func = "whisper_audio_stream_open_live";
    if (!path) { wa_set_error("%s: invalid argument (path must not be NULL)", func); return nullptr; }
    if (params.raw && strcmp(params.raw, "s16le") != 0 && strcmp(params.raw, "f32le") != 0) {
        wa_set_error("%s: raw format '%s' is not s16le or f32le", func, params.raw);
        return nullptr;
    }
    if (params.raw && ((params.raw_rate && (params.raw_rate < WHISPER_AUDIO_MIN_RATE || params.raw_rate > WHISPER_AUDIO_MAX_RATE)) ||
                       params.raw_channels < 0 || params.raw_channels > 64)) {
        wa_set_error("%s: raw PCM of %d Hz and %d channels: the rate must be %d to %d Hz (0: 16000), the channels 1 to 64 "
                     "(0: 1)", func, params.raw_rate, params.raw_channels, WHISPER_AUDIO_MIN_RATE, WHISPER_AUDIO_MAX_RATE);
        return nullptr;
    }
    if (params.follow_ms < 0) { wa_set_error("%s: follow_ms is %d; it must be 0 or more", func, params.follow_ms); return nullptr; }
    const bool is_stdin = strcmp(path, "-") == 0;
    if (params.follow_ms > 0 && is_stdin) {
        wa_set_error("%s: follow_ms follows a file that grows; standard input ends when its writer closes it", func);
        return nullptr;
    }
    try {
        whisper_audio_stream * s = new whisper_audio_stream();
        wa_reader & r = s->rd;
        s->name = is_stdin ? "<stdin>" : path;
        r.f = is_stdin ? stdin : fopen(path, "rb");
        r.own_f = !is_stdin;
        if (!r.f) {
            const int e = errno;
            audio_fail(path, "cannot open: %s", strerror(e));
            delete s;
            return nullptr;
        }
        r.live = true;                     // neither its size nor a seek: it is read front to back as it comes
        r.follow_ms = params.follow_ms;
        r.buf.resize(WA_READ_BUF);
        r.p = r.buf.data();
        if (!params.raw) return wa_stream_start(s, info);
        return wa_stream_start_raw(s, params, info);
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

whisper_audio_stream * whisper_audio_stream_open_memory(const void * data, size_t size, whisper_audio_info * info) {
    if (!data || size == 0) {
        if (!data && size > 0) wa_set_error("whisper_audio_stream_open_memory: invalid argument (data must not be NULL)");
        else audio_fail("<memory>", "empty input (0 bytes)");
        return nullptr;
    }
    try {
        return wa_stream_open_memory(data, size, info);
    } catch (const std::bad_alloc &) {
        audio_fail("<memory>", "out of memory");
        return nullptr;
    }
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
    } else if (s->no_eos) {
        snprintf(msg, sizeof(msg), "%s: the input ends after %.3f s of audio without the stream's last page (the "
                 "end-of-stream flag; cut short?); decoded what is there", s->name.c_str(), got);
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
            // (a live input: the outputs that what has arrived covers, returned at once)
            if (s->rs.copy || s->src_end || s->rd.live ||
                resample_covered(s->rs, s->hist_base + (int64_t) s->hist.size(), max - k)) {
                k += resample_run(s->rs, s->hist.data(), s->hist_base, (int64_t) s->hist.size(), s->src_end,
                                  out + k, max - k);
                if (k == max || s->src_end || (s->rd.live && k > 0)) break;
            }

            // drop the inputs that no later output reads, then decode the next block
            const int64_t keep = std::min<int64_t>(resample_keep(s->rs), s->hist_base + (int64_t) s->hist.size());
            if (keep > s->hist_base) {
                s->hist.erase(s->hist.begin(), s->hist.begin() + (keep - s->hist_base));
                s->hist_base = keep;
            }
            const int64_t got = s->row->decoder->block(s);
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

// The warning of the last whole decode on this thread (whisper_audio_decode_warning).
static thread_local std::string wa_decode_warning;

// The most samples a header's length may reserve ahead (16 MiB of floats: 4.4 minutes); past
// it the buffer grows as samples arrive, so that a header that lies (a 3 s FLAC that says
// 2^36 samples) costs what the file holds, not what it claims.
static const size_t WA_RESERVE_MAX = (size_t) 1 << 22;

// Reads s to its end into one malloc'ed buffer, then closes it.
static bool wa_stream_read_all(whisper_audio_stream * s, float ** pcm, size_t * n, whisper_audio_info * info) {
    wa_decode_warning.clear();
    if (!s) return false;
    // the expected length when the input says (one allocation, up to WA_RESERVE_MAX), else
    // grow by doubling
    size_t cap = (size_t) 1 << 16;
    uint64_t expect = 0;
    if (info && info->frames >= 0 &&
        resample_out_len((uint64_t) info->frames, s->sample_rate, WHISPER_AUDIO_SAMPLE_RATE, &expect)) {
        cap = expect < WA_RESERVE_MAX ? (size_t) expect + 1 : WA_RESERVE_MAX;   // + 1: the read that finds the end needs no growth
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
    if (ok && !s->warning.empty()) wa_decode_warning = s->warning;
    whisper_audio_stream_close(s);
    if (!ok) {
        free(buf);
        return false;
    }
    *pcm = buf;
    *n   = size;
    return true;
}

const char * whisper_audio_decode_warning(void) {
    return wa_decode_warning.empty() ? nullptr : wa_decode_warning.c_str();
}

bool whisper_audio_decode_memory(const void * data, size_t size, float ** pcm, size_t * n, whisper_audio_info * info) {
    wa_decode_warning.clear();
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
    wa_decode_warning.clear();
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

