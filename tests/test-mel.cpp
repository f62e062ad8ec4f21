// test-mel.cpp - the log-mel frontend (whisper_audio_log_mel_filters) against transformers'
// WhisperFeatureExtractor (tests/data/features/*.npy, copied from shared/fixtures), with the
// mel bank read from the model files that convert/convert-hf-to-gguf.py writes
// (build/micro-{80,128}-f32.gguf, made by `make` from tests/data/micro-*). Run from the
// repository root.
#include <doctest/doctest.h>

#include "test-util.h"
#include "whisper-audio.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

static const int N_FRAMES = WHISPER_AUDIO_N_FRAMES;
static const int N_BINS   = WHISPER_AUDIO_N_BINS;

// mono PCM s16 samples of a WAV file, as int16 / 32768 (how the reference features were made)
static std::vector<float> mel_test_read_wav_s16(const std::string & path) {
    std::vector<float> out;
    const std::vector<uint8_t> b = read_bytes(path);
    auto u32 = [&](size_t p) { return (uint32_t) b[p] | (uint32_t) b[p + 1] << 8 | (uint32_t) b[p + 2] << 16 | (uint32_t) b[p + 3] << 24; };
    auto u16 = [&](size_t p) { return (uint32_t) b[p] | (uint32_t) b[p + 1] << 8; };
    if (b.size() < 12 || memcmp(&b[0], "RIFF", 4) != 0 || memcmp(&b[8], "WAVE", 4) != 0) return out;
    bool fmt_ok = false;
    for (size_t p = 12; p + 8 <= b.size();) {
        const uint32_t size = u32(p + 4);
        const size_t body = p + 8;
        if (memcmp(&b[p], "fmt ", 4) == 0 && body + 16 <= b.size()) {
            fmt_ok = u16(body) == 1 && u16(body + 2) == 1 && u16(body + 14) == 16;   // PCM, mono, 16 bit
        } else if (memcmp(&b[p], "data", 4) == 0 && fmt_ok) {
            const size_t n = std::min((size_t) size, b.size() - body) / 2;
            out.resize(n);
            for (size_t i = 0; i < n; i++) out[i] = (float) (int16_t) u16(body + 2 * i) / 32768.0f;
            return out;
        }
        p = body + size + (size & 1);
    }
    return out;
}

// the mel bank of build/micro-<n_mels>-f32.gguf
static std::vector<float> mel_test_filters(int n_mels) {
    const std::string path = "build/micro-" + std::to_string(n_mels) + "-f32.gguf";
    whisper_audio_model * model = whisper_audio_model_load(path.c_str());
    INFO("model ", path, ": ", whisper_audio_last_error(),
         " (`make` writes it with convert/convert-hf-to-gguf.py tests/data/micro-", n_mels, ")");
    REQUIRE(model != nullptr);
    REQUIRE(whisper_audio_model_hparams(model)->n_mels == n_mels);
    const float * f = whisper_audio_model_mel_filters(model);
    REQUIRE(f != nullptr);
    std::vector<float> filters(f, f + (size_t) n_mels * N_BINS);
    whisper_audio_model_free(model);
    return filters;
}

static std::vector<float> mel_test_compute(const std::vector<float> & filters, int n_mels, const float * pcm, size_t n) {
    std::vector<float> out((size_t) n_mels * N_FRAMES, NAN);
    INFO(whisper_audio_last_error());
    REQUIRE(whisper_audio_log_mel_filters(filters.data(), n_mels, pcm, n, out.data()));
    return out;
}

TEST_CASE("log-mel: matches WhisperFeatureExtractor on speech and the 70 s clip's first 30 s") {
    struct clip { const char * name; const char * wav; };   // wav: under tests/data
    const clip clips[] = {
        { "speech_16k",        "audio/speech_16k.wav" },
        { "long_70s_first30s", "audio/long_70s_16k.wav" },
    };
    for (int n_mels : { 80, 128 }) {
        const std::vector<float> filters = mel_test_filters(n_mels);
        for (const clip & c : clips) {
            CAPTURE(n_mels);
            const std::string name = c.name;
            CAPTURE(name);
            std::vector<float> pcm = mel_test_read_wav_s16(test_data(c.wav));
            REQUIRE(pcm.size() > 0);
            if (pcm.size() > WHISPER_AUDIO_N_SAMPLES) pcm.resize(WHISPER_AUDIO_N_SAMPLES);

            const std::string ref_path = test_data(std::string("features/") + c.name + ".mel" + std::to_string(n_mels) + ".npy");
            std::vector<int64_t> shape;
            const std::vector<float> ref = npy_load_f32(ref_path, &shape);
            REQUIRE(shape == std::vector<int64_t>{ n_mels, N_FRAMES });

            const std::vector<float> out = mel_test_compute(filters, n_mels, pcm.data(), pcm.size());
            double max_err = 0.0;
            for (size_t i = 0; i < out.size(); i++) max_err = std::max(max_err, (double) std::fabs(out[i] - ref[i]));
            MESSAGE(name, " mel", n_mels, ": max abs error ", max_err);
            CHECK(max_err < 1e-4);    // transformers' own numpy and torch paths differ by up to 6e-5
        }
    }
}

TEST_CASE("log-mel: a 1 kHz sine lights the mel band around 1 kHz") {
    const int n_mels = 80;
    const std::vector<float> filters = mel_test_filters(n_mels);
    std::vector<float> pcm(WHISPER_AUDIO_N_SAMPLES);
    for (size_t i = 0; i < pcm.size(); i++) pcm[i] = 0.5f * (float) std::sin(2.0 * 3.14159265358979323846 * 1000.0 * i / 16000.0);
    const std::vector<float> out = mel_test_compute(filters, n_mels, pcm.data(), pcm.size());

    // 1000 Hz is rfft bin 25 exactly: the band is the filter with the most weight there
    int band = 0;
    for (int m = 1; m < n_mels; m++) if (filters[m * N_BINS + 25] > filters[band * N_BINS + 25]) band = m;
    const float top = *std::max_element(out.begin(), out.end());
    for (int t : { 10, 1500, 2990 }) {
        int best = 0;
        for (int m = 1; m < n_mels; m++) if (out[m * N_FRAMES + t] > out[best * N_FRAMES + t]) best = m;
        CAPTURE(t);
        CHECK(best == band);
        CHECK(out[band * N_FRAMES + t] == doctest::Approx(top).epsilon(1e-3));
        // far bands hold only the window's leakage: clamped to max - 8, i.e. 2 below the top
        CHECK(out[(n_mels - 1) * N_FRAMES + t] == doctest::Approx(top - 2.0f).epsilon(1e-6));
    }
}

TEST_CASE("log-mel: short, empty and overlong input") {
    const int n_mels = 128;
    const std::vector<float> filters = mel_test_filters(n_mels);

    // n < 480000 is the same as zero-padding it to 480000
    std::vector<float> noise(WHISPER_AUDIO_N_SAMPLES + 20000, 0.0f);
    uint32_t s = 12345;
    for (size_t i = 0; i < 1000; i++) {
        s = s * 1664525u + 1013904223u;
        noise[i] = ((s >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    const std::vector<float> padded = mel_test_compute(filters, n_mels, noise.data(), WHISPER_AUDIO_N_SAMPLES);
    const std::vector<float> shortin = mel_test_compute(filters, n_mels, noise.data(), 1000);
    CHECK(shortin == padded);
    // frames past the signal are silent: at the floor max - 8, i.e. 2 below the top
    const float top = *std::max_element(shortin.begin(), shortin.end());
    CHECK(shortin[5 * N_FRAMES + 20] == doctest::Approx(top - 2.0f).epsilon(1e-6));
    CHECK(shortin[5 * N_FRAMES + 2999] == doctest::Approx(top - 2.0f).epsilon(1e-6));
    CHECK(shortin[5 * N_FRAMES + 0] > top - 2.0f);

    // a few samples only: frame 0 reflects them (x[-k] = x[k])
    const std::vector<float> tiny = mel_test_compute(filters, n_mels, noise.data(), 3);
    CHECK(*std::max_element(tiny.begin(), tiny.end()) > tiny[(n_mels - 1) * N_FRAMES + 100]);

    // n = 0 (pcm may be NULL): silence, log10(1e-10) = -10 everywhere -> (-10 + 4) / 4
    const std::vector<float> empty = mel_test_compute(filters, n_mels, nullptr, 0);
    CHECK(std::all_of(empty.begin(), empty.end(), [](float v) { return v == -1.5f; }));

    // n > 480000: only the first 480000 samples count
    for (size_t i = WHISPER_AUDIO_N_SAMPLES; i < noise.size(); i++) noise[i] = 0.3f;
    const std::vector<float> longer = mel_test_compute(filters, n_mels, noise.data(), noise.size());
    CHECK(longer == padded);
}

TEST_CASE("log-mel: concurrent calls agree") {
    const int n_mels = 80;
    const std::vector<float> filters = mel_test_filters(n_mels);
    std::vector<float> pcm(200000);
    for (size_t i = 0; i < pcm.size(); i++) pcm[i] = 0.3f * (float) std::sin(0.001 * i * i / 1000.0);
    const std::vector<float> ref = mel_test_compute(filters, n_mels, pcm.data(), pcm.size());
    std::vector<std::vector<float>> outs(4, std::vector<float>(ref.size()));
    std::vector<int> ok(4, 0);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; i++) {
        threads.emplace_back([&, i] { ok[i] = whisper_audio_log_mel_filters(filters.data(), n_mels, pcm.data(), pcm.size(), outs[i].data()); });
    }
    for (auto & t : threads) t.join();
    for (int i = 0; i < 4; i++) {
        CHECK(ok[i]);
        CHECK(outs[i] == ref);
    }
}

TEST_CASE("log-mel: bad arguments are errors") {
    std::vector<float> filters(80 * N_BINS, 0.01f), pcm(1000, 0.1f), out(80 * N_FRAMES);
    CHECK_FALSE(whisper_audio_log_mel_filters(filters.data(), 0, pcm.data(), pcm.size(), out.data()));
    CHECK(std::string(whisper_audio_last_error()).find("n_mels") != std::string::npos);
    CHECK_FALSE(whisper_audio_log_mel_filters(filters.data(), -3, pcm.data(), pcm.size(), out.data()));
    CHECK_FALSE(whisper_audio_log_mel_filters(nullptr, 80, pcm.data(), pcm.size(), out.data()));
    CHECK(std::string(whisper_audio_last_error()).find("filters") != std::string::npos);
    CHECK_FALSE(whisper_audio_log_mel_filters(filters.data(), 80, nullptr, pcm.size(), out.data()));
    CHECK_FALSE(whisper_audio_log_mel_filters(filters.data(), 80, pcm.data(), pcm.size(), nullptr));
}

// PCM passed straight to the log-mel (or to whisper_audio_encode_pcm) skips the decoders'
// sample check; a NaN would make the window NaN, and from about 1e18 on the power overflows
// the float mel sum. The log-mel refuses them, as the WAV reader does, naming the sample.
TEST_CASE("log-mel: non-finite or absurd samples are refused, naming the sample") {
    std::vector<float> filters(80 * N_BINS, 0.01f), out(80 * N_FRAMES);
    const float bad[] = { NAN, INFINITY, -INFINITY, 1e30f, -2e4f };
    for (float v : bad) {
        std::vector<float> pcm(1000, 0.1f);
        pcm[777] = v;
        CAPTURE(v);
        CHECK_FALSE(whisper_audio_log_mel_filters(filters.data(), 80, pcm.data(), pcm.size(), out.data()));
        CHECK(std::string(whisper_audio_last_error()).find("sample 777 is") != std::string::npos);
    }
    // the limit is the WAV reader's (1e4: +80 dBFS); loud but plausible samples pass
    std::vector<float> pcm(1000, 0.1f);
    pcm[5] = 9999.0f;
    pcm[6] = -1.5f;
    CHECK(whisper_audio_log_mel_filters(filters.data(), 80, pcm.data(), pcm.size(), out.data()));
    // only the 30 s that the window reads are checked
    std::vector<float> longer(WHISPER_AUDIO_N_SAMPLES + 10, 0.0f);
    longer.back() = NAN;
    CHECK(whisper_audio_log_mel_filters(filters.data(), 80, longer.data(), longer.size(), out.data()));

    // several windows: the index counts from the start of the input
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE_MESSAGE(model != nullptr, whisper_audio_last_error());
    std::vector<float> two(WHISPER_AUDIO_N_SAMPLES + 5000, 0.0f), mels(2 * 80 * N_FRAMES);
    two[WHISPER_AUDIO_N_SAMPLES + 1234] = -INFINITY;
    CHECK_FALSE(whisper_audio_log_mel_windows(model, two.data(), two.size(), 2, mels.data(), 2));
    CHECK(std::string(whisper_audio_last_error()).find("sample 481234 is -inf") != std::string::npos);
    // a window past what is asked for is not read
    CHECK(whisper_audio_log_mel_windows(model, two.data(), two.size(), 1, mels.data(), 2));
    whisper_audio_model_free(model);
}

// ---- the log-mel op (vt_log_mel) on the CPU backend: the reference of the CUDA kernel ----

// Windows that reach the op's corners: speech with its zero-padded tail (a short window),
// clicks on the first and last samples (the edge frames read their mirror), a loud second
// then near silence (the dynamic-range clamp holds most values), silence (all clamped), and
// 1000 samples alone.
static std::vector<std::vector<float>> mel_op_windows() {
    std::vector<std::vector<float>> w;
    std::vector<float> speech = mel_test_read_wav_s16(test_data("audio/speech_16k.wav"));
    REQUIRE(!speech.empty());
    if (speech.size() > WHISPER_AUDIO_N_SAMPLES) speech.resize(WHISPER_AUDIO_N_SAMPLES);
    w.push_back(speech);
    std::vector<float> clicks(WHISPER_AUDIO_N_SAMPLES, 0.0f);
    for (size_t i = 0; i < clicks.size(); i++) clicks[i] = 1e-3f * (float) std::sin(0.37 * (double) i);
    clicks[0] = 0.9f;
    clicks[1] = -0.5f;
    clicks[WHISPER_AUDIO_N_SAMPLES - 1] = 0.7f;
    w.push_back(clicks);
    std::vector<float> loud_quiet(WHISPER_AUDIO_N_SAMPLES);
    for (size_t i = 0; i < loud_quiet.size(); i++)
        loud_quiet[i] = (i < 16000 ? 0.8f : 1e-6f) * (float) std::sin(2.0 * 3.14159265358979323846 * 440.0 * (double) i / 16000.0);
    w.push_back(loud_quiet);
    w.push_back(std::vector<float>(WHISPER_AUDIO_N_SAMPLES, 0.0f));
    std::vector<float> short_clip(1000);
    for (size_t i = 0; i < short_clip.size(); i++) short_clip[i] = 0.3f * (float) std::cos(0.05 * (double) i);
    w.push_back(short_clip);
    return w;
}

TEST_CASE("log-mel op on the CPU: the host log-mel's values at the window edges, for short windows and the clamp") {
    for (int n_mels : { 80, 128 }) {
        CAPTURE(n_mels);
        const std::vector<float> filters = mel_test_filters(n_mels);
        const std::vector<std::vector<float>> windows = mel_op_windows();
        const int B = (int) windows.size();
        std::vector<float> rows;
        for (const std::vector<float> & x : windows) {
            const std::vector<float> r = test_mel_row(x.data(), x.size());
            rows.insert(rows.end(), r.begin(), r.end());
        }
        vt_backend * be = test_cpu_backend(2);
        REQUIRE_MESSAGE(be, vt_last_error());
        std::vector<float> got, mx;
        REQUIRE_MESSAGE(test_run_log_mel(be, rows, B, filters.data(), n_mels, {}, TEST_MEL_SHAPE, false, got), vt_last_error());
        REQUIRE_MESSAGE(test_run_log_mel(be, rows, B, filters.data(), n_mels, {}, TEST_MEL_SHAPE, true, mx), vt_last_error());
        vt_backend_free(be);
        const size_t per = (size_t) n_mels * N_FRAMES;
        for (int b = 0; b < B; b++) {
            CAPTURE(b);
            const std::vector<float> ref = mel_test_compute(filters, n_mels, windows[b].data(), windows[b].size());
            double worst = 0.0, worst_edge = 0.0;
            size_t same = 0, clamped = 0;
            const float lowest = *std::min_element(ref.begin(), ref.end());
            for (size_t i = 0; i < per; i++) {
                const double d = std::fabs((double) got[b * per + i] - ref[i]);
                worst = std::max(worst, d);
                const int t = (int) (i % N_FRAMES);
                if (t < 3 || t >= N_FRAMES - 3) worst_edge = std::max(worst_edge, d);   // frames that read the mirror
                same += got[b * per + i] == ref[i];
                clamped += ref[i] == lowest;
            }
            MESSAGE("mel", n_mels, " window ", b, ": max abs difference ", worst, " (edge frames ", worst_edge, "), ",
                    same, " of ", per, " bit for bit, ", clamped, " at the clamp");
            CHECK(worst <= 1e-6);
            // the max alone: the largest value before the clamp, (max + 4) / 4 after it
            CHECK((mx[b] + 4.0f) / 4.0f == *std::max_element(got.begin() + b * per, got.begin() + (b + 1) * per));
        }
    }
}

TEST_CASE("log-mel op on the CPU: per-window frames and clamp max (params)") {
    const int n_mels = 80;
    const std::vector<float> filters = mel_test_filters(n_mels);
    const std::vector<float> speech = mel_op_windows()[0];
    const std::vector<float> one = test_mel_row(speech.data(), speech.size());
    std::vector<float> rows = one;
    rows.insert(rows.end(), one.begin(), one.end());
    rows.insert(rows.end(), one.begin(), one.end());
    vt_backend * be = test_cpu_backend(2);
    REQUIRE_MESSAGE(be, vt_last_error());
    std::vector<float> base, mx;
    REQUIRE(test_run_log_mel(be, rows, 3, filters.data(), n_mels, {}, TEST_MEL_SHAPE, false, base));
    REQUIRE(test_run_log_mel(be, rows, 3, filters.data(), n_mels, {}, TEST_MEL_SHAPE, true, mx));
    // window 0: its first 1234 frames, clamped with its own max (given); window 1: all frames,
    // clamped 2 above it; window 2: the first 5 frames and its own max (NaN: theirs)
    const std::vector<float> params = { 1234.0f, mx[0], (float) N_FRAMES, mx[1] + 2.0f, 5.0f, NAN };
    std::vector<float> got, got_max;
    REQUIRE(test_run_log_mel(be, rows, 3, filters.data(), n_mels, params, TEST_MEL_SHAPE, false, got));
    REQUIRE(test_run_log_mel(be, rows, 3, filters.data(), n_mels, params, TEST_MEL_SHAPE, true, got_max));
    vt_backend_free(be);
    const size_t per = (size_t) n_mels * N_FRAMES;
    bool w0 = true, w1 = true, w2_zero = true;
    float w2_max = -INFINITY;
    for (size_t i = 0; i < per; i++) {
        const int t = (int) (i % N_FRAMES);
        w0 = w0 && got[i] == (t < 1234 ? base[i] : 0.0f);
        const float floor1 = (mx[1] + 2.0f - 8.0f + 4.0f) / 4.0f;
        w1 = w1 && got[per + i] >= base[per + i] && (base[per + i] <= floor1 || got[per + i] == base[per + i]);
        if (t < 5) w2_max = std::max(w2_max, got[2 * per + i]);
        else w2_zero = w2_zero && got[2 * per + i] == 0.0f;
    }
    CHECK(w0);
    CHECK(w1);
    CHECK(w2_zero);
    CHECK(got_max[0] <= mx[0]);
    CHECK(got_max[1] == mx[1]);
    CHECK((got_max[2] + 4.0f) / 4.0f == w2_max);   // the first 5 frames' own max
}

TEST_CASE("log-mel op on the CPU: its sizes are parameters (n_fft 64, hop 24, 37 frames) against a plain DFT") {
    const vt_mel_shape shape = { 64, 24, 37 };
    const int n_bins = 33, n_mels = 6, B = 2, row_len = 24 * 36 + 64 + 7;
    std::vector<float> rows((size_t) B * row_len), filters((size_t) n_mels * n_bins, 0.0f);
    for (size_t i = 0; i < rows.size(); i++) rows[i] = (float) std::sin(0.11 * (double) i) * (i % 7 == 0 ? 2.0f : 0.3f);
    for (int m = 0; m < n_mels; m++)
        for (int k = 2 + 4 * m; k < 2 + 4 * m + 9 && k < n_bins; k++) filters[(size_t) m * n_bins + k] = 0.01f * (float) (1 + k % 5);
    vt_backend * be = test_cpu_backend(1);
    REQUIRE_MESSAGE(be, vt_last_error());
    std::vector<float> got;
    REQUIRE_MESSAGE(test_run_log_mel(be, rows, B, filters.data(), n_mels, {}, shape, false, got), vt_last_error());
    vt_backend_free(be);
    const double pi = 3.14159265358979323846;
    for (int b = 0; b < B; b++) {
        std::vector<float> ref((size_t) n_mels * shape.n_frames);
        for (int t = 0; t < shape.n_frames; t++) {
            std::vector<double> power(n_bins);
            for (int k = 0; k < n_bins; k++) {
                double re = 0.0, im = 0.0;
                for (int n = 0; n < shape.n_fft; n++) {
                    const double x = (0.5 - 0.5 * std::cos(2 * pi * n / shape.n_fft)) * rows[(size_t) b * row_len + t * shape.hop + n];
                    re += x * std::cos(2 * pi * n * k / shape.n_fft);
                    im -= x * std::sin(2 * pi * n * k / shape.n_fft);
                }
                power[k] = re * re + im * im;
            }
            for (int m = 0; m < n_mels; m++) {
                double sum = 0.0;
                for (int k = 0; k < n_bins; k++) sum += (double) filters[(size_t) m * n_bins + k] * power[k];
                ref[(size_t) m * shape.n_frames + t] = (float) std::log10(std::max(sum, 1e-10));
            }
        }
        const float top = *std::max_element(ref.begin(), ref.end());
        double worst = 0.0;
        for (size_t i = 0; i < ref.size(); i++)
            worst = std::max(worst, std::fabs((std::max(ref[i], top - 8.0f) + 4.0f) / 4.0f - (double) got[b * ref.size() + i]));
        CAPTURE(b);
        CHECK(worst <= 1e-6);
    }
}
