// test-audio-input.cpp - the input side: the streaming decoder (whisper_audio_stream_*),
// standard input, Ogg Vorbis, FLAC, MP3, Opus, format detection by content, absurd headers through the
// stream, bounded memory on long audio, and the fuzzers' regressions (tests/fuzz).
#include <doctest/doctest.h>
#include <whisper-audio.h>

#include "test-util.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef WHISPER_AUDIO_FLAC
#include <FLAC/metadata.h>
#include <FLAC/stream_encoder.h>
#endif

// ---- helpers -----------------------------------------------------------------------

// The whole stream, read in blocks of block samples (cycling through odd sizes when 0).
static decoded_audio ai_stream(const std::string & path, size_t block) {
    decoded_audio a;
    whisper_audio_stream * s = whisper_audio_stream_open(path.c_str(), &a.info);
    if (!s) {
        a.error = whisper_audio_last_error();
        return a;
    }
    static const size_t ODD[] = { 1, 7, 160, 4093, 31, 65536, 2 };
    std::vector<float> buf(std::max<size_t>(block, 65536));
    for (size_t i = 0;; i++) {
        const size_t want = block ? block : ODD[i % 7];
        const int64_t got = whisper_audio_stream_read(s, buf.data(), want);
        if (got < 0) {
            a.error = whisper_audio_last_error();
            whisper_audio_stream_close(s);
            return a;
        }
        if (got == 0) break;
        REQUIRE((size_t) got <= want);
        a.pcm.insert(a.pcm.end(), buf.begin(), buf.begin() + got);
    }
    CHECK(whisper_audio_stream_read(s, buf.data(), 100) == 0);   // the end stays the end
    whisper_audio_stream_close(s);
    a.ok = true;
    return a;
}

// Runs fn with standard input reading bytes from a pipe (fed by a thread), then restores it.
template <typename F>
static void ai_with_stdin(const std::vector<uint8_t> & bytes, F fn) {
    const int saved = dup(0);
    REQUIRE(saved >= 0);
    int p[2];
    REQUIRE(pipe(p) == 0);
    std::thread writer([&] {
        size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t k = write(p[1], bytes.data() + done, bytes.size() - done);
            if (k <= 0) break;     // the reader stopped early (EPIPE)
            done += (size_t) k;
        }
        close(p[1]);
    });
    REQUIRE(dup2(p[0], 0) == 0);
    close(p[0]);
    clearerr(stdin);
    bool threw = false;
    try {
        fn();
    } catch (...) {
        threw = true;   // a failed REQUIRE: clean up first, then fail
    }
    // drain what the reader left, so that the writer ends, then put stdin back
    static char sink[65536];
    while (fread(sink, 1, sizeof(sink), stdin) > 0) {}
    writer.join();
    dup2(saved, 0);
    close(saved);
    clearerr(stdin);
    REQUIRE_FALSE(threw);
}

static std::vector<uint8_t> ai_prefix(const std::vector<uint8_t> & b, size_t n) {
    return std::vector<uint8_t>(b.begin(), b.begin() + (ptrdiff_t) std::min(n, b.size()));
}

// ---- the stream gives decode_file's samples ---------------------------------------------

TEST_CASE("stream: the same samples as decode_file, bit for bit, in any block size") {
    const char * files[] = { "speech_16k.wav", "speech_44k1_stereo_s16.wav", "speech_22k05_mono_f32.wav",
                             "speech_48k_mono_s24.wav", "speech_8k_mono_u8.wav" };
    for (const char * file : files) {
        CAPTURE(file);
        const decoded_audio whole = decode_file(test_data(std::string("audio/") + file));
        REQUIRE_MESSAGE(whole.ok, whole.error);
        for (size_t block : { (size_t) 0, (size_t) 1, (size_t) 4096, (size_t) 1 << 20 }) {
            CAPTURE(block);
            const decoded_audio s = ai_stream(test_data(std::string("audio/") + file), block);
            REQUIRE_MESSAGE(s.ok, s.error);
            REQUIRE(s.pcm.size() == whole.pcm.size());
            CHECK(memcmp(s.pcm.data(), whole.pcm.data(), s.pcm.size() * sizeof(float)) == 0);
            CHECK(s.info.frames == whole.info.frames);        // a file: known ahead
            CHECK(s.info.sample_rate == whole.info.sample_rate);
            CHECK(s.info.channels == whole.info.channels);
            CHECK(std::string(s.info.format) == whole.info.format);
        }
        // and decode_memory on the same bytes
        const std::vector<uint8_t> bytes = read_bytes(test_data(std::string("audio/") + file));
        float * pcm = nullptr;
        size_t n = 0;
        REQUIRE(whisper_audio_decode_memory(bytes.data(), bytes.size(), &pcm, &n, nullptr));
        REQUIRE(n == whole.pcm.size());
        CHECK(memcmp(pcm, whole.pcm.data(), n * sizeof(float)) == 0);
        whisper_audio_pcm_free(pcm);
    }
}

TEST_CASE("stream: the resampler in blocks equals whisper_audio_resample at every rate") {
    // a WAV file per rate, streamed in odd blocks, against the one-shot resampler
    uint32_t rng = 7;
    std::vector<int16_t> x(30011);
    for (int16_t & v : x) { rng = rng * 1664525u + 1013904223u; v = (int16_t) (rng >> 16); }
    std::vector<uint8_t> data(x.size() * 2);
    memcpy(data.data(), x.data(), data.size());
    std::vector<float> xf(x.size());
    for (size_t i = 0; i < x.size(); i++) xf[i] = (float) x[i] * (1.0f / 32768.0f);

    const std::string path = test_tmp("rates.wav");
    for (int rate : { 1000, 8000, 11025, 16001, 22050, 44100, 48000, 96000, 999999 }) {
        CAPTURE(rate);
        write_bytes(path, wav_file(1, 1, (uint32_t) rate, 16, data, 2));
        float * y = nullptr;
        size_t n = 0;
        REQUIRE(whisper_audio_resample(xf.data(), xf.size(), rate, 16000, &y, &n));
        const decoded_audio s = ai_stream(path, 0);
        REQUIRE_MESSAGE(s.ok, s.error);
        REQUIRE(s.pcm.size() == n);
        CHECK(memcmp(s.pcm.data(), y, n * sizeof(float)) == 0);
        whisper_audio_pcm_free(y);
    }
    remove(path.c_str());
}

// ---- the reader: many inputs decoded ahead by workers -------------------------------------

// Input k of r read to its end in odd blocks: its samples, or its error.
static decoded_audio ai_reader_input(whisper_audio_reader * r, size_t k) {
    decoded_audio a;
    static const size_t ODD[] = { 1, 7, 160, 4093, 31, 65536, 2, 300000 };
    std::vector<float> buf(300000);
    for (size_t i = 0;; i++) {
        const int64_t got = whisper_audio_reader_read(r, k, buf.data(), ODD[i % 8]);
        if (got < 0) {
            a.error = whisper_audio_last_error();
            return a;
        }
        if (got == 0) break;
        REQUIRE((size_t) got <= ODD[i % 8]);
        a.pcm.insert(a.pcm.end(), buf.begin(), buf.begin() + got);
    }
    CHECK(whisper_audio_reader_read(r, k, buf.data(), 100) == 0);   // the end stays the end
    a.ok = true;
    return a;
}

TEST_CASE("reader: every input the stream's samples bit for bit, errors in place, whatever the workers") {
    // a WAV cut inside its data (a warning, its samples), a file that is not there, and
    // formats of every rate; 30 inputs, so that the workers run ahead and wait for room
    const std::vector<uint8_t> wav44 = read_bytes(test_data("audio/speech_44k1_stereo_s16.wav"));
    const std::string cut = test_tmp("reader-cut.wav"), missing = test_tmp("reader-missing.wav");
    write_bytes(cut, ai_prefix(wav44, wav44.size() / 2));
    remove(missing.c_str());
    const std::string base[] = { test_data("audio/speech_16k.wav"), test_data("audio/speech_44k1_stereo_s16.wav"), cut,
                                 test_data("audio/speech_22k05_mono_f32.wav"), missing,
                                 test_data("audio/speech_48k_mono_s24.wav"), test_data("audio/speech_8k_mono_u8.wav") };
    std::vector<std::string> names;
    for (int i = 0; i < 30; i++) names.push_back(base[i % 7]);
    std::vector<const char *> paths;
    for (const std::string & n : names) paths.push_back(n.c_str());
    std::vector<decoded_audio> want;
    for (const std::string & n : base) want.push_back(ai_stream(n, 0));
    REQUIRE_FALSE(want[4].ok);

    for (int workers : { 1, 2, 5 }) {
        CAPTURE(workers);
        whisper_audio_reader_params rp = whisper_audio_reader_default_params();
        rp.n_workers = workers;
        rp.max_buffered = 1;   // the least: one chunk ahead in all
        whisper_audio_reader * r = whisper_audio_reader_init(paths.data(), paths.size(), rp);
        REQUIRE_MESSAGE(r, whisper_audio_last_error());
        for (size_t k = 0; k < paths.size(); k++) {
            CAPTURE(k);
            const decoded_audio & w = want[k % 7];
            whisper_audio_info info;
            CHECK(whisper_audio_reader_info(r, k, &info) == w.ok);
            const decoded_audio got = ai_reader_input(r, k);
            REQUIRE(got.ok == w.ok);
            if (!w.ok) {
                CHECK(got.error == w.error);   // the stream's own message, naming the file
                CHECK(got.error.find(missing) != std::string::npos);
                continue;
            }
            CHECK(info.sample_rate == w.info.sample_rate);
            CHECK(info.frames == w.info.frames);
            REQUIRE(got.pcm.size() == w.pcm.size());
            CHECK(memcmp(got.pcm.data(), w.pcm.data(), got.pcm.size() * sizeof(float)) == 0);
            const char * warning = whisper_audio_reader_warning(r, k);
            CHECK((warning != nullptr) == (k % 7 == 2));   // the cut one says so
        }
        CHECK(whisper_audio_reader_busy_ms(r) > 0.0);
        whisper_audio_reader_free(r);
    }
    remove(cut.c_str());
}

TEST_CASE("reader: skipping ahead, max_samples, order, free before the end") {
    const std::string wav = test_data("audio/speech_44k1_stereo_s16.wav"), wav16 = test_data("audio/speech_16k.wav");
    const decoded_audio a = ai_stream(wav, 0), b = ai_stream(wav16, 0);
    REQUIRE(a.ok);
    REQUIRE(b.ok);
    const char * paths[] = { wav.c_str(), wav.c_str(), wav16.c_str(), wav.c_str() };
    whisper_audio_reader_params rp = whisper_audio_reader_default_params();
    rp.n_workers = 2;
    rp.max_samples = 12345;
    whisper_audio_reader * r = whisper_audio_reader_init(paths, 4, rp);
    REQUIRE(r);
    std::vector<float> buf(100);
    REQUIRE(whisper_audio_reader_read(r, 0, buf.data(), 100) == 100);   // part of input 0, then on to 2
    const decoded_audio got = ai_reader_input(r, 2);
    REQUIRE(got.ok);
    REQUIRE(got.pcm.size() == 12345);                                   // max_samples of it
    CHECK(memcmp(got.pcm.data(), b.pcm.data(), 12345 * sizeof(float)) == 0);
    CHECK(whisper_audio_reader_read(r, 1, buf.data(), 100) == -1);      // passed: an error, not samples
    CHECK(std::string(whisper_audio_last_error()).find("read already") != std::string::npos);
    CHECK(whisper_audio_reader_read(r, 4, buf.data(), 100) == -1);      // no such input
    whisper_audio_reader_free(r);                                       // input 3 not read: its worker stops

    rp.max_samples = 0;
    r = whisper_audio_reader_init(paths, 4, rp);
    REQUIRE(r);
    const decoded_audio last = ai_reader_input(r, 3);
    REQUIRE(last.ok);
    REQUIRE(last.pcm.size() == a.pcm.size());
    CHECK(memcmp(last.pcm.data(), a.pcm.data(), a.pcm.size() * sizeof(float)) == 0);
    whisper_audio_reader_free(r);
    whisper_audio_reader_free(nullptr);
    CHECK(whisper_audio_reader_init(nullptr, 1, rp) == nullptr);
}

TEST_CASE("reader: a long input alone starts the other workers, and free stops them wherever they are") {
    // 140 s at 8 kHz (three segments of the 16 kHz output, resampled: a 16 kHz WAV is a copy,
    // which stays on one worker; short enough for TSan, which runs this case): the first
    // worker grows the pool when it cuts the input into segments
    uint32_t rng = 3;
    std::vector<uint8_t> data((size_t) 8000 * 140 * 2);
    for (size_t i = 0; i + 1 < data.size(); i += 2) {
        rng = rng * 1664525u + 1013904223u;
        const int16_t v = (int16_t) ((int32_t) (rng >> 16) / 4);
        memcpy(&data[i], &v, 2);
    }
    const std::string path = test_tmp("reader-alone.wav");
    write_bytes(path, wav_file(1, 1, 8000, 16, data, 2));
    const decoded_audio want = ai_stream(path, 0);
    REQUIRE_MESSAGE(want.ok, want.error);
    const char * paths[] = { path.c_str() };
    whisper_audio_reader_params rp = whisper_audio_reader_default_params();
    rp.n_workers = 4;
    for (int round = 0; round < 4; round++) {
        CAPTURE(round);
        whisper_audio_reader * r = whisper_audio_reader_init(paths, 1, rp);
        REQUIRE(r);
        const decoded_audio got = ai_reader_input(r, 0);
        REQUIRE_MESSAGE(got.ok, got.error);
        REQUIRE(got.pcm.size() == want.pcm.size());
        CHECK(memcmp(got.pcm.data(), want.pcm.data(), want.pcm.size() * sizeof(float)) == 0);
        whisper_audio_reader_free(r);
        // freed at once: the pool may be growing, its workers starting or decoding
        r = whisper_audio_reader_init(paths, 1, rp);
        REQUIRE(r);
        if (round % 2) {
            float buf[1000];
            CHECK(whisper_audio_reader_read(r, 0, buf, 1000) == 1000);
        }
        whisper_audio_reader_free(r);
    }
    remove(path.c_str());
}

TEST_CASE("reader: a long WAV in segments on several workers, the stream's samples bit for bit") {
    // 300 s: more than two segments of 65 s; at 22.05 kHz (resampled, its table mode), at
    // 16 kHz (copied) and at 44.1 kHz stereo (280 s)
    uint32_t rng = 11;
    struct { uint32_t rate, channels, seconds; } cases[] = { { 22050, 1, 300 }, { 16000, 1, 300 }, { 44100, 2, 280 } };
    for (const auto & c : cases) {
        CAPTURE(c.rate);
        std::vector<uint8_t> data((size_t) c.rate * c.channels * c.seconds * 2);
        for (size_t i = 0; i + 1 < data.size(); i += 2) {
            rng = rng * 1664525u + 1013904223u;
            const int16_t v = (int16_t) ((int32_t) (rng >> 16) / 4);
            memcpy(&data[i], &v, 2);
        }
        const std::string path = test_tmp("reader-long.wav");
        write_bytes(path, wav_file(1, c.channels, c.rate, 16, data, 2 * c.channels));
        const decoded_audio want = ai_stream(path, 0);
        REQUIRE_MESSAGE(want.ok, want.error);
        const char * paths[] = { path.c_str(), path.c_str() };
        // (one input alone: its segments bring the workers past the first)
        for (size_t n_paths : { (size_t) 1, (size_t) 2 })
        for (int workers : { 1, 4 }) {
            for (size_t max_samples : { (size_t) 0, (size_t) 4500000 }) {   // (the latter ends inside a later segment)
                CAPTURE(n_paths);
                CAPTURE(workers);
                CAPTURE(max_samples);
                whisper_audio_reader_params rp = whisper_audio_reader_default_params();
                rp.n_workers = workers;
                rp.max_samples = max_samples;
                whisper_audio_reader * r = whisper_audio_reader_init(paths, n_paths, rp);
                REQUIRE(r);
                for (size_t k = 0; k < n_paths; k++) {
                    const decoded_audio got = ai_reader_input(r, k);
                    REQUIRE_MESSAGE(got.ok, got.error);
                    const size_t n = max_samples ? std::min(max_samples, want.pcm.size()) : want.pcm.size();
                    REQUIRE(got.pcm.size() == n);
                    CHECK(memcmp(got.pcm.data(), want.pcm.data(), n * sizeof(float)) == 0);
                    CHECK(whisper_audio_reader_warning(r, k) == nullptr);
                }
                whisper_audio_reader_free(r);
            }
        }
        remove(path.c_str());
    }
}

// ---- standard input ----------------------------------------------------------------------

TEST_CASE("stream: \"-\" reads standard input, with the data size of a pipe writer") {
    const std::vector<uint8_t> bytes = read_bytes(test_data("audio/speech_44k1_stereo_s16.wav"));
    REQUIRE(bytes.size() > 44);
    const decoded_audio ref = decode_file(test_data("audio/speech_44k1_stereo_s16.wav"));
    REQUIRE(ref.ok);

    // find the data chunk's size field, to write what a streaming writer writes there
    size_t data_field = 0;
    for (size_t i = 12; i + 8 <= bytes.size(); i++) {
        if (memcmp(&bytes[i], "data", 4) == 0) { data_field = i + 4; break; }
    }
    REQUIRE(data_field > 0);
    for (uint32_t size_field : { 0u, 0xFFFFFFFFu, 1u /* kept: the real size */ }) {
        CAPTURE(size_field);
        std::vector<uint8_t> piped = bytes;
        if (size_field != 1) {
            memcpy(&piped[data_field], &size_field, 4);   // little-endian host
            memset(&piped[4], 0xFF, 4);                    // and a bogus RIFF size
        }
        ai_with_stdin(piped, [&] {
            const decoded_audio s = ai_stream("-", 0);
            REQUIRE_MESSAGE(s.ok, s.error);
            CHECK(s.info.frames == (size_field == 1 ? 309414 : -1));   // unknown ahead from a pipe
            CHECK(s.info.sample_rate == 44100);
            REQUIRE(s.pcm.size() == ref.pcm.size());
            CHECK(memcmp(s.pcm.data(), ref.pcm.data(), s.pcm.size() * sizeof(float)) == 0);
        });
    }

    // decode_file("-") too
    ai_with_stdin(bytes, [&] {
        const decoded_audio a = decode_file("-");
        REQUIRE_MESSAGE(a.ok, a.error);
        CHECK(a.pcm == ref.pcm);
        CHECK(a.info.frames == 309414);   // what was decoded
    });

    // empty, not audio, and a data chunk before fmt (a pipe cannot seek back)
    ai_with_stdin({}, [&] {
        const decoded_audio a = decode_file("-");
        CHECK_FALSE(a.ok);
        CHECK(a.error.find("<stdin>") != std::string::npos);
        CHECK(a.error.find("empty") != std::string::npos);
    });
    const std::string text = "hello, this is not audio at all";
    ai_with_stdin(std::vector<uint8_t>(text.begin(), text.end()), [&] {
        CHECK(whisper_audio_stream_open("-", nullptr) == nullptr);
        const std::string msg = whisper_audio_last_error();
        CHECK(msg.find("not a WAV file") != std::string::npos);
        CHECK(msg.find("ffmpeg -i input -ar 16000 -ac 1 -c:a pcm_s16le output.wav") != std::string::npos);
    });
    {
        std::vector<uint8_t> b = { 'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E', 'd', 'a', 't', 'a', 4, 0, 0, 0, 1, 2, 3, 4,
                                   'f', 'm', 't', ' ', 16, 0, 0, 0, 1, 0, 1, 0, 0x80, 0x3E, 0, 0, 0, 0x7D, 0, 0, 2, 0, 16, 0 };
        ai_with_stdin(b, [&] {
            CHECK(whisper_audio_stream_open("-", nullptr) == nullptr);
            CHECK(std::string(whisper_audio_last_error()).find("before the fmt chunk") != std::string::npos);
        });
        // from a file, the same bytes decode (the reader seeks back)
        const std::string path = test_tmp("data-first.wav");
        write_bytes(path, b);
        const decoded_audio a = ai_stream(path, 0);
        REQUIRE_MESSAGE(a.ok, a.error);
        CHECK(a.pcm.size() == 2);
        remove(path.c_str());
    }
}

// ---- Ogg Vorbis -------------------------------------------------------------------------------

#ifdef WHISPER_AUDIO_OGG

TEST_CASE("ogg: speech_16k.ogg decodes close to speech_16k.wav, from a file, a stream, stdin and memory") {
    const decoded_audio wav = decode_file(test_data("audio/speech_16k.wav"));
    REQUIRE(wav.ok);
    const decoded_audio ogg = decode_file(test_data("audio/speech_16k.ogg"));
    REQUIRE_MESSAGE(ogg.ok, ogg.error);
    CHECK(ogg.pcm.size() == 112259);
    CHECK(ogg.info.sample_rate == 16000);
    CHECK(ogg.info.channels == 1);
    CHECK(ogg.info.bits_per_sample == 0);
    CHECK(ogg.info.frames == 112259);
    CHECK(std::string(ogg.info.format) == "ogg vorbis");
    // Vorbis is lossy: measured 0.0707 relative L2 error against the WAV it was encoded from
    const double err = rel_l2(ogg.pcm, wav.pcm);
    MESSAGE("speech_16k.ogg: relative L2 error vs speech_16k.wav " << err);
    CHECK(err < 0.1);

    const decoded_audio s = ai_stream(test_data("audio/speech_16k.ogg"), 0);
    REQUIRE_MESSAGE(s.ok, s.error);
    CHECK(s.info.frames == -1);   // Ogg is always read as a stream
    CHECK(s.pcm == ogg.pcm);

    const std::vector<uint8_t> bytes = read_bytes(test_data("audio/speech_16k.ogg"));
    ai_with_stdin(bytes, [&] {
        const decoded_audio a = ai_stream("-", 4096);
        REQUIRE_MESSAGE(a.ok, a.error);
        CHECK(a.pcm == ogg.pcm);
    });
    float * pcm = nullptr;
    size_t n = 0;
    REQUIRE(whisper_audio_decode_memory(bytes.data(), bytes.size(), &pcm, &n, nullptr));
    CHECK(std::vector<float>(pcm, pcm + n) == ogg.pcm);
    whisper_audio_pcm_free(pcm);

    // the format comes from the content: Ogg data in a file named .wav is Ogg
    const std::string renamed = test_tmp("really-ogg.wav");
    write_bytes(renamed, bytes);
    const decoded_audio r = decode_file(renamed);
    REQUIRE_MESSAGE(r.ok, r.error);
    CHECK(std::string(r.info.format) == "ogg vorbis");
    CHECK(r.pcm == ogg.pcm);
    remove(renamed.c_str());

    // and a WAV in a file named .ogg is WAV
    const std::string renamed2 = test_tmp("really-wav.ogg");
    write_bytes(renamed2, read_bytes(test_data("audio/speech_16k.wav")));
    const decoded_audio r2 = decode_file(renamed2);
    REQUIRE(r2.ok);
    CHECK(r2.pcm == wav.pcm);
    remove(renamed2.c_str());
}

TEST_CASE("ogg: broken and foreign Ogg streams fail with a clear message") {
    const std::vector<uint8_t> good = read_bytes(test_data("audio/speech_16k.ogg"));
    REQUIRE(good.size() > 4096);
    auto fails_with = [](const std::vector<uint8_t> & b, std::vector<const char *> needles) {
        float * pcm = nullptr;
        size_t n = 0;
        const bool ok = whisper_audio_decode_memory(b.data(), b.size(), &pcm, &n, nullptr);
        if (ok) whisper_audio_pcm_free(pcm);
        CHECK_FALSE(ok);
        const std::string msg = whisper_audio_last_error();
        CAPTURE(msg);
        for (const char * needle : needles) CHECK(msg.find(needle) != std::string::npos);
    };
    // an Opus header page
    std::vector<uint8_t> opus(good.begin(), good.begin() + 27 + 1 + 19);
    opus[26] = 1;
    opus[27] = 19;
    memcpy(&opus[28], "OpusHead\x01\x01\x38\x01\x80\xbb\0\0\0\0\0", 19);
    fails_with(opus, { "Opus", "ffmpeg" });   // (opusfile's, or the one that says how to get it)
    // headers only: cut before the audio (no samples: nothing to decode)
    fails_with(std::vector<uint8_t>(good.begin(), good.begin() + 3735), { "contains no audio samples" });
    // cut inside the headers
    fails_with(std::vector<uint8_t>(good.begin(), good.begin() + 200), { "Ogg Vorbis", "truncated", "ffmpeg" });
    // "OggS" and garbage
    fails_with({ 'O', 'g', 'g', 'S', 0, 2, 0, 0 }, { "Ogg", "ffmpeg" });

    // every proper prefix is cut short (the whole decodes: above): the headers cut, an error; the
    // audio cut, what is there with the warning, as every codec; random corruptions: an error or
    // audio, never a crash
    for (size_t len = 397; len < good.size(); len += 397) {
        CAPTURE(len);
        const std::vector<uint8_t> prefix(good.begin(), good.begin() + len);
        float * pcm = nullptr;
        size_t n = 0;
        if (whisper_audio_decode_memory(prefix.data(), prefix.size(), &pcm, &n, nullptr)) {
            whisper_audio_pcm_free(pcm);
            const char * w = whisper_audio_decode_warning();
            CHECK((w && std::string(w).find("without the stream's last page") != std::string::npos));
        } else {
            const std::string msg = whisper_audio_last_error();
            CAPTURE(msg);
            CHECK((msg.find("truncated") != std::string::npos || msg.find("contains no audio samples") != std::string::npos));
        }
    }
    uint32_t rng = 99;
    auto next = [&rng]() { rng = rng * 1664525u + 1013904223u; return rng >> 8; };
    for (int iter = 0; iter < 200; iter++) {
        std::vector<uint8_t> bad(good.begin(), good.begin() + 12000);
        for (int k = 0; k < 4; k++) bad[next() % bad.size()] = (uint8_t) next();
        float * pcm = nullptr;
        size_t n = 0;
        if (whisper_audio_decode_memory(bad.data(), bad.size(), &pcm, &n, nullptr)) whisper_audio_pcm_free(pcm);
    }
}

// fuzz-ogg's first finding: libvorbisfile's seekable open (ov_open_callbacks with a seek
// callback, as ov_fopen) leaks memory when a later link of a chained file has a broken setup
// header (xiph/vorbis issue 125). We open every Ogg input as a stream: the first link
// decodes, the second fails with a clear error, nothing leaks (the sanitizer build checks).
TEST_CASE("ogg: chained streams; a broken second link is an error after the first link's audio") {
    const std::string dir = "tests/fuzz/corpus/ogg/";
    const decoded_audio one = decode_file(dir + "speech_short.ogg");
    REQUIRE_MESSAGE(one.ok, one.error);
    const decoded_audio two = decode_file(dir + "chained.ogg");   // speech_short.ogg twice
    REQUIRE_MESSAGE(two.ok, two.error);
    REQUIRE(two.pcm.size() == 2 * one.pcm.size());
    // the second link loses nothing to the hole that vorbisfile reports as it starts
    CHECK(std::vector<float>(two.pcm.begin() + (ptrdiff_t) one.pcm.size(), two.pcm.end()) == one.pcm);

    whisper_audio_stream * s = whisper_audio_stream_open((dir + "chained_bad_link2.ogg").c_str(), nullptr);
    REQUIRE(s);
    std::vector<float> buf(4096);
    int64_t total = 0, got;
    while ((got = whisper_audio_stream_read(s, buf.data(), buf.size())) > 0) total += got;
    CHECK(got == -1);
    CHECK(std::string(whisper_audio_last_error()).find("invalid Vorbis header") != std::string::npos);
    CHECK(total >= (int64_t) one.pcm.size() - 4096);
    CHECK(whisper_audio_stream_read(s, buf.data(), buf.size()) == -1);   // failed stays failed
    whisper_audio_stream_close(s);
    CHECK_FALSE(decode_file(dir + "chained_bad_link2.ogg").ok);
}

// Issue 7, finding 15: a file cut inside its headers said "not Vorbis data".
TEST_CASE("ogg: a file cut inside its headers says its headers are truncated") {
    const std::vector<uint8_t> good = read_bytes(test_data("audio/speech_16k.ogg"));
    REQUIRE(good.size() > 3735);
    // 40: inside the first page; 200 and 3734: inside the second (the comment and setup headers)
    for (size_t len : { (size_t) 40, (size_t) 200, (size_t) 3734 }) {
        CAPTURE(len);
        const std::string path = test_tmp("cut-headers.ogg");
        write_bytes(path, ai_prefix(good, len));
        const decoded_audio a = decode_file(path);
        CHECK_FALSE(a.ok);
        CHECK(a.error.rfind(path + ": not a valid Ogg Vorbis stream: the input ends after " + std::to_string(len) +
                            " bytes, before its Vorbis headers are complete (truncated or corrupt headers; "
                            "libvorbisfile -", 0) == 0);
        remove(path.c_str());
    }
}

// Issue 7, finding 15: an Ogg cut mid-stream decoded to fewer windows without a word. A
// stream without its end-of-stream page, or with pages missing, is an error after the audio
// that is there (a WAV cannot tell: its data size is read as it is, see test-wav.cpp).
TEST_CASE("ogg: a stream cut short decodes what is there with a warning; pages missing are an error after its audio") {
    const std::string dir = "tests/fuzz/corpus/ogg/";
    const decoded_audio whole = decode_file(dir + "speech_short.ogg");   // 2 audio pages, the last flagged
    REQUIRE_MESSAGE(whole.ok, whole.error);
    REQUIRE(whole.pcm.size() == 21888);
    struct cut_case {
        const char * file;
        int64_t samples;       // what the stream gives before its end or error
        const char * message;  // after "<path>: "
        bool error;            // an error (else the stream's warning)
    };
    const cut_case cases[] = {
        // the same pages as speech_short.ogg, without the flag
        { "speech_cut.ogg", 21888,
          "the input ends after 1.368 s of audio without the stream's last page (the end-of-stream flag; cut "
          "short?); decoded what is there", false },
        { "truncated_mid_page.ogg", 10368,
          "the input ends after 0.648 s of audio without the stream's last page", false },
        // speech_short.ogg without its first audio page
        { "hole.ogg", 0,
          "corrupt Ogg Vorbis stream: pages are missing or damaged after 0.000 s of audio; to decode what is "
          "there, convert it first", true },
    };
    for (const cut_case & c : cases) {
        const std::string path = dir + c.file;
        CAPTURE(path);
        whisper_audio_stream * s = whisper_audio_stream_open(path.c_str(), nullptr);
        REQUIRE(s);
        std::vector<float> buf(1000), got_pcm;
        int64_t got;
        while ((got = whisper_audio_stream_read(s, buf.data(), buf.size())) > 0) {
            got_pcm.insert(got_pcm.end(), buf.begin(), buf.begin() + got);
        }
        CHECK(got == (c.error ? -1 : 0));
        const char * w = whisper_audio_stream_warning(s);
        const std::string said = c.error ? whisper_audio_last_error() : w ? w : "";
        CHECK(said.rfind(path + ": " + c.message, 0) == 0);
        CHECK((int64_t) got_pcm.size() == c.samples);
        CHECK(std::equal(got_pcm.begin(), got_pcm.end(), whole.pcm.begin()));
        whisper_audio_stream_close(s);

        const decoded_audio a = decode_file(path);
        CHECK(a.ok == !c.error);
        const char * dw = whisper_audio_decode_warning();
        CHECK((c.error ? a.error : std::string(dw ? dw : "")).rfind(path + ": " + c.message, 0) == 0);
    }
    // and from a pipe
    ai_with_stdin(read_bytes(dir + "speech_cut.ogg"), [&] {
        const decoded_audio a = decode_file("-");
        CHECK(a.ok);
        CHECK(a.pcm.size() == 21888);
        const char * w = whisper_audio_decode_warning();
        CHECK(std::string(w ? w : "").rfind("<stdin>: the input ends after 1.368 s", 0) == 0);
    });
}

#else

TEST_CASE("ogg: without WHISPER_AUDIO_OGG, Ogg input says how to get it") {
    const decoded_audio a = decode_file(test_data("audio/speech_16k.ogg"));
    CHECK_FALSE(a.ok);
    CHECK(a.error.find("no Ogg support") != std::string::npos);
    CHECK(a.error.find("libvorbis-dev") != std::string::npos);
    CHECK(a.error.find("ffmpeg") != std::string::npos);
}

#endif

// ---- FLAC, MP3 and Opus ---------------------------------------------------------------------
// (The helpers are [[maybe_unused]]: a build without the libraries runs only the tests that
// say how to get them.) The files in tests/data/audio were made from the WAVs beside them (tests/data/README.md says
// how). FLAC is lossless: it decodes to the WAV's samples bit for bit. MP3 and Opus are lossy:
// close, and aligned with the WAV (the encoder's delay is cut where the file says it).

// Random damage to the first 6000 bytes of a good file, 200 times: an error or audio,
// never a crash (the sanitizer build checks the "never").
[[maybe_unused]] static void ai_random_damage(const std::vector<uint8_t> & good, uint32_t seed) {
    auto next = [&seed]() { seed = seed * 1664525u + 1013904223u; return seed >> 8; };
    for (int iter = 0; iter < 200; iter++) {
        std::vector<uint8_t> bad = ai_prefix(good, 6000);
        for (int k = 0; k < 4; k++) bad[next() % bad.size()] = (uint8_t) next();
        decode_memory(bad);
    }
}

// The WAV's first frames: its bytes cut after them (the reader takes a data chunk that runs
// past the end as running to the end).
[[maybe_unused]] static decoded_audio ai_wav_prefix(const std::string & path, size_t frames, size_t frame_bytes) {
    const std::vector<uint8_t> b = read_bytes(path);
    size_t data = 12;
    while (data + 8 <= b.size() && memcmp(&b[data], "data", 4) != 0) data++;
    return decode_memory(ai_prefix(b, data + 8 + frames * frame_bytes));
}

// The lag (got[i + lag] ~ ref[i]) in [-max_lag, max_lag] that maximises the cross-correlation.
[[maybe_unused]] static int ai_best_lag(const std::vector<float> & got, const std::vector<float> & ref, int max_lag) {
    int best = 0;
    double best_c = -1e300;
    for (int lag = -max_lag; lag <= max_lag; lag++) {
        double c = 0.0;
        for (size_t i = 0; i < ref.size(); i++) {
            const int64_t j = (int64_t) i + lag;
            if (j >= 0 && j < (int64_t) got.size()) c += (double) got[(size_t) j] * ref[i];
        }
        if (c > best_c) { best_c = c; best = lag; }
    }
    return best;
}

// A decode that must fail with each needle in its message.
[[maybe_unused]] static void ai_fails_with(const std::vector<uint8_t> & b, std::vector<const char *> needles) {
    const decoded_audio a = decode_memory(b);
    CHECK_FALSE(a.ok);
    CAPTURE(a.error);
    for (const char * needle : needles) CHECK(a.error.find(needle) != std::string::npos);
}

// The same file from a file, in odd-sized stream reads, from standard input and from memory:
// the same samples; returns decode_file's.
[[maybe_unused]] static decoded_audio ai_decode_four_ways(const std::string & path) {
    const decoded_audio a = decode_file(path);
    REQUIRE_MESSAGE(a.ok, a.error);
    const decoded_audio s = ai_stream(path, 0);
    REQUIRE_MESSAGE(s.ok, s.error);
    CHECK(s.pcm == a.pcm);
    const std::vector<uint8_t> bytes = read_bytes(path);
    ai_with_stdin(bytes, [&] {
        const decoded_audio p = ai_stream("-", 4096);
        REQUIRE_MESSAGE(p.ok, p.error);
        CHECK(p.pcm == a.pcm);
        CHECK(std::string(p.info.format) == a.info.format);
    });
    const decoded_audio m = decode_memory(bytes);
    REQUIRE_MESSAGE(m.ok, m.error);
    CHECK(m.pcm == a.pcm);
    return a;
}

#ifdef WHISPER_AUDIO_FLAC

// A FLAC file of 16-bit samples (interleaved) by libFLAC's own encoder, with a SEEKTABLE of a
// point every 10 s or none (libFLAC's seek then searches the frames).
static void ai_write_flac(const std::string & path, const std::vector<int16_t> & x, unsigned channels, unsigned rate,
                          bool seektable) {
    FLAC__StreamEncoder * e = FLAC__stream_encoder_new();
    REQUIRE(e);
    const uint64_t frames = x.size() / channels;
    FLAC__stream_encoder_set_channels(e, channels);
    FLAC__stream_encoder_set_bits_per_sample(e, 16);
    FLAC__stream_encoder_set_sample_rate(e, rate);
    FLAC__stream_encoder_set_compression_level(e, 1);
    FLAC__stream_encoder_set_total_samples_estimate(e, frames);
    FLAC__StreamMetadata * table = nullptr;
    if (seektable) {
        table = FLAC__metadata_object_new(FLAC__METADATA_TYPE_SEEKTABLE);
        REQUIRE(FLAC__metadata_object_seektable_template_append_spaced_points_by_samples(table, 10 * rate, frames));
        REQUIRE(FLAC__metadata_object_seektable_template_sort(table, true));
        FLAC__stream_encoder_set_metadata(e, &table, 1);
    }
    REQUIRE(FLAC__stream_encoder_init_file(e, path.c_str(), nullptr, nullptr) == FLAC__STREAM_ENCODER_INIT_STATUS_OK);
    std::vector<FLAC__int32> block;
    for (size_t at = 0; at < x.size();) {
        const size_t n = std::min<size_t>(x.size() - at, (size_t) 4096 * channels);
        block.assign(x.begin() + at, x.begin() + at + n);
        REQUIRE(FLAC__stream_encoder_process_interleaved(e, block.data(), (unsigned) (n / channels)));
        at += n;
    }
    REQUIRE(FLAC__stream_encoder_finish(e));
    FLAC__stream_encoder_delete(e);
    if (table) FLAC__metadata_object_delete(table);
}

TEST_CASE("reader: a long FLAC in segments on several workers, the stream's samples bit for bit, a cut one too") {
    // 300 s at 16 kHz without a SEEKTABLE, 280 s of 44.1 kHz stereo with one; then the stereo file
    // cut at 60% of its bytes (the length STREAMINFO says is not there: it ends where it is cut)
    uint32_t rng = 5;
    struct { unsigned rate, channels, seconds; bool seektable; } cases[] = { { 16000, 1, 300, false }, { 44100, 2, 280, true } };
    for (const auto & c : cases) {
        CAPTURE(c.rate);
        std::vector<int16_t> x((size_t) c.rate * c.channels * c.seconds);
        for (size_t i = 0; i < x.size(); i++) {        // a tone under noise: frames LPC can predict
            rng = rng * 1664525u + 1013904223u;
            x[i] = (int16_t) (6000.0 * std::sin(0.01 * (double) (i / c.channels)) + (int32_t) (rng >> 16) / 64 - 512);
        }
        const std::string path = test_tmp("reader-long.flac");
        ai_write_flac(path, x, c.channels, c.rate, c.seektable);
        std::vector<std::string> files = { path };
        if (c.seektable) {                                 // the cut one
            std::vector<uint8_t> bytes = read_bytes(path);
            bytes.resize(bytes.size() * 6 / 10);
            files.push_back(test_tmp("reader-long-cut.flac"));
            write_bytes(files.back(), bytes);
        }
        for (const std::string & f : files) {
            CAPTURE(f);
            const decoded_audio want = ai_stream(f, 0);
            REQUIRE_MESSAGE(want.ok, want.error);
            REQUIRE(want.pcm.size() > 2 * 1048576);   // into the third segment at least
            std::string want_warning;
            {
                whisper_audio_stream * st = whisper_audio_stream_open(f.c_str(), nullptr);
                REQUIRE(st);
                std::vector<float> buf(1 << 16);
                while (whisper_audio_stream_read(st, buf.data(), buf.size()) > 0) {}
                if (whisper_audio_stream_warning(st)) want_warning = whisper_audio_stream_warning(st);
                whisper_audio_stream_close(st);
            }
            CHECK(want_warning.empty() == (f == path));
            const char * paths[] = { f.c_str(), f.c_str() };
            for (size_t n_paths : { (size_t) 1, (size_t) 2 })   // (one alone: its segments start the other workers)
            for (int workers : { 1, 4 }) {
                for (size_t max_samples : { (size_t) 0, (size_t) 3500000 }) {
                    CAPTURE(n_paths);
                    CAPTURE(workers);
                    CAPTURE(max_samples);
                    whisper_audio_reader_params rp = whisper_audio_reader_default_params();
                    rp.n_workers = workers;
                    rp.max_samples = max_samples;
                    whisper_audio_reader * r = whisper_audio_reader_init(paths, n_paths, rp);
                    REQUIRE(r);
                    for (size_t k = 0; k < n_paths; k++) {
                        const decoded_audio got = ai_reader_input(r, k);
                        REQUIRE_MESSAGE(got.ok, got.error);
                        const size_t n = max_samples ? std::min(max_samples, want.pcm.size()) : want.pcm.size();
                        REQUIRE(got.pcm.size() == n);
                        CHECK(memcmp(got.pcm.data(), want.pcm.data(), n * sizeof(float)) == 0);
                        const char * w = whisper_audio_reader_warning(r, k);
                        if (n == want.pcm.size()) CHECK(std::string(w ? w : "") == want_warning);
                    }
                    whisper_audio_reader_free(r);
                }
            }
        }
        for (const std::string & f : files) remove(f.c_str());
    }
}

TEST_CASE("flac: decodes to the WAV's samples bit for bit, from a file, a stream, stdin and memory") {
    // 8 kHz 8-bit mono, resampled to 16 kHz
    const decoded_audio wav = decode_file(test_data("audio/speech_8k_mono_u8.wav"));
    REQUIRE(wav.ok);
    const decoded_audio flac = ai_decode_four_ways(test_data("audio/speech_8k_u8.flac"));
    CHECK(std::string(flac.info.format) == "flac");
    CHECK(flac.info.sample_rate == 8000);
    CHECK(flac.info.channels == 1);
    CHECK(flac.info.bits_per_sample == 8);
    CHECK(flac.pcm == wav.pcm);
    const decoded_audio s = ai_stream(test_data("audio/speech_8k_u8.flac"), 4096);
    CHECK(s.info.frames == 56130);   // STREAMINFO says, ahead

    // 44.1 kHz stereo s16, the first second: mixed to mono and resampled
    const decoded_audio st = ai_decode_four_ways(test_data("audio/speech_44k1_stereo_1s.flac"));
    CHECK(st.info.channels == 2);
    CHECK(st.info.sample_rate == 44100);
    const decoded_audio st_wav = ai_wav_prefix(test_data("audio/speech_44k1_stereo_s16.wav"), 44100, 4);
    REQUIRE_MESSAGE(st_wav.ok, st_wav.error);
    CHECK(st.pcm.size() == 16000);
    CHECK(st.pcm == st_wav.pcm);

    // Ogg FLAC (the first second of the 8 kHz file)
    const decoded_audio oga = ai_decode_four_ways(test_data("audio/speech_8k_u8_1s.oga"));
    CHECK(std::string(oga.info.format) == "ogg flac");
    const decoded_audio oga_wav = ai_wav_prefix(test_data("audio/speech_8k_mono_u8.wav"), 8000, 1);
    REQUIRE(oga_wav.ok);
    CHECK(oga.pcm == oga_wav.pcm);

    // an ID3v2 tag in front (some taggers write one) is skipped; the name does not matter
    std::vector<uint8_t> tagged = { 'I', 'D', '3', 4, 0, 0, 0, 0, 0, 5, 'T', 'I', 'T', '2', 0 };
    const std::vector<uint8_t> body = read_bytes(test_data("audio/speech_8k_u8.flac"));
    tagged.insert(tagged.end(), body.begin(), body.end());
    const std::string renamed = test_tmp("really-flac.mp3");
    write_bytes(renamed, tagged);
    const decoded_audio r = decode_file(renamed);
    REQUIRE_MESSAGE(r.ok, r.error);
    CHECK(std::string(r.info.format) == "flac");
    CHECK(r.pcm == wav.pcm);
    remove(renamed.c_str());
}

TEST_CASE("flac: hostile headers, damage and truncation fail with a clear message") {
    const std::vector<uint8_t> good = read_bytes(test_data("audio/speech_8k_u8.flac"));
    REQUIRE(good.size() > 8192);
    // "fLaC" and garbage; cut inside the headers
    ai_fails_with({ 'f', 'L', 'a', 'C', 1, 2, 3, 4, 5, 6, 7, 8 }, { "not a valid FLAC stream", "ffmpeg" });
    ai_fails_with(ai_prefix(good, 30), { "not a valid FLAC stream", "truncated", "ffmpeg" });
    // STREAMINFO's sample rate (20 bits at byte 18) of 1 Hz and of 0 Hz
    for (int rate : { 1, 0 }) {
        std::vector<uint8_t> b = good;
        b[18] = 0;
        b[19] = (uint8_t) (rate >> 4);
        b[20] = (uint8_t) ((b[20] & 0x0F) | ((rate & 0x0F) << 4));
        CAPTURE(rate);
        ai_fails_with(b, { "FLAC" });
    }
    // cut inside the audio: what is there is decoded (the stream's warning says the header's
    // length: test-hardening.cpp), from memory and from a pipe alike
    {
        const decoded_audio a = decode_memory(ai_prefix(good, good.size() / 2));
        REQUIRE_MESSAGE(a.ok, a.error);
        CHECK(a.pcm.size() > 16000);
        CHECK(a.pcm.size() < 112259);
        ai_with_stdin(ai_prefix(good, good.size() / 2), [&] { CHECK(decode_file("-").pcm == a.pcm); });
    }
    // a flipped bit in a frame: its CRC fails, an error after the audio before it
    {
        std::vector<uint8_t> b = good;
        b[good.size() / 2] ^= 0x10;
        ai_fails_with(b, { "corrupt FLAC stream", "after" });
    }
    ai_random_damage(good, 7u);
}

#else

TEST_CASE("flac: without WHISPER_AUDIO_FLAC, FLAC input says how to get it") {
    const decoded_audio a = decode_file(test_data("audio/speech_8k_u8.flac"));
    CHECK_FALSE(a.ok);
    CHECK(a.error.find("a FLAC file, and this build of whisper-audio has no FLAC support") != std::string::npos);
    CHECK(a.error.find("libflac-dev") != std::string::npos);
    CHECK(a.error.find("ffmpeg") != std::string::npos);
}

#endif

#ifdef WHISPER_AUDIO_MP3

TEST_CASE("mp3: close to the WAV, aligned as mpg123 aligns it, from a file, a stream, stdin and memory") {
    const decoded_audio wav = decode_file(test_data("audio/speech_16k.wav"));
    REQUIRE(wav.ok);

    // with a LAME tag (44.1 kHz stereo, which lame encoded at 24 kHz): gapless, the encoder's
    // delay and padding cut, so the length is the WAV's and the best lag is 0
    const decoded_audio st = ai_decode_four_ways(test_data("audio/speech_44k1_stereo.mp3"));
    CHECK(std::string(st.info.format) == "mp3");
    CHECK(st.info.sample_rate == 24000);
    CHECK(st.info.channels == 2);
    CHECK(st.info.bits_per_sample == 0);
    CHECK(st.pcm.size() == wav.pcm.size());
    CHECK(ai_best_lag(st.pcm, wav.pcm, 1500) == 0);
    const double err_st = rel_l2(st.pcm, wav.pcm);
    MESSAGE("speech_44k1_stereo.mp3: relative L2 error vs speech_16k.wav " << err_st);
    CHECK(err_st < 0.2);
    const decoded_audio s = ai_stream(test_data("audio/speech_44k1_stereo.mp3"), 4096);
    CHECK(s.info.frames == 168388);   // from the LAME tag, ahead

    // no LAME tag (16 kHz mono 32 kbit/s CBR: its 144-byte frames have no room for one): the
    // decoder cannot know the delay, and keeps it, as mpg123 and ffmpeg do: lame's 576 + the
    // decoder's 529 samples; and the padding to whole frames (197 x 576)
    const decoded_audio m = ai_decode_four_ways(test_data("audio/speech_16k.mp3"));
    CHECK(m.info.sample_rate == 16000);
    CHECK(m.pcm.size() == 113472);
    const int lag = ai_best_lag(m.pcm, wav.pcm, 1500);
    CHECK(lag == 1105);
    const std::vector<float> aligned(m.pcm.begin() + lag, m.pcm.begin() + lag + (ptrdiff_t) wav.pcm.size());
    const double err_m = rel_l2(aligned, wav.pcm);
    MESSAGE("speech_16k.mp3 (delay 1105 cut): relative L2 error vs speech_16k.wav " << err_m);
    CHECK(err_m < 0.2);
    const decoded_audio ms = ai_stream(test_data("audio/speech_16k.mp3"), 4096);
    CHECK(ms.info.frames == -1);      // no tag: unknown ahead (no seeking)
}

TEST_CASE("mp3: hostile headers, ID3 tags and truncation fail with a clear message") {
    const std::vector<uint8_t> good = read_bytes(test_data("audio/speech_44k1_stereo.mp3"));
    // a frame header and garbage; an ID3 tag and nothing, or garbage, or a size past the end
    ai_fails_with({ 0xFF, 0xFB, 0x90, 0x64, 1, 2, 3, 4, 5, 6, 7, 8 }, { "not a valid MP3 stream", "ffmpeg" });
    ai_fails_with({ 'I', 'D', '3', 4, 0, 0, 0, 0, 0, 0 }, { "ID3", "neither MP3 nor FLAC", "ffmpeg" });
    ai_fails_with({ 'I', 'D', '3', 4, 0, 0, 0, 0, 0, 2, 0, 0, 'x', 'y', 'z', '!' }, { "neither MP3 nor FLAC" });
    ai_fails_with({ 'I', 'D', '3', 4, 0, 0, 0x7F, 0x7F, 0x7F, 0x7F, 0, 0 }, { "truncated file", "inside its ID3v2 tag" });
    ai_fails_with({ 'I', 'D', '3', 4, 0, 0, 0x80, 0, 0, 0, 0, 0 }, { "ID3", "corrupt", "ffmpeg" });
    ai_fails_with({ 'I', 'D', '3', 4 }, { "MP3", "truncated", "ffmpeg" });
    // cut inside the audio: what is there is decoded (the LAME tag's length is in the stream's
    // warning: test-hardening.cpp)
    {
        const decoded_audio a = decode_memory(ai_prefix(good, good.size() / 2));
        REQUIRE_MESSAGE(a.ok, a.error);
        CHECK(a.pcm.size() > 16000);
        CHECK(a.pcm.size() < 112259);
    }
    ai_random_damage(good, 11u);
}

// The stream's warning of the file bytes (written to a file: a stream, as main reads it).
static std::string ai_stream_warning(const std::vector<uint8_t> & bytes, const char * name) {
    const std::string path = test_tmp(name);
    write_bytes(path, bytes);
    whisper_audio_stream * s = whisper_audio_stream_open(path.c_str(), nullptr);
    REQUIRE_MESSAGE(s, whisper_audio_last_error());
    std::vector<float> buf(65536);
    int64_t got;
    while ((got = whisper_audio_stream_read(s, buf.data(), buf.size())) > 0) {}
    CHECK(got == 0);
    const char * w = whisper_audio_stream_warning(s);
    const std::string warning = w ? w : "";
    whisper_audio_stream_close(s);
    remove(path.c_str());
    return warning;
}

TEST_CASE("mp3: a file without a Xing/LAME tag cut inside a frame is decoded with a warning") {
    // speech_16k.mp3 has no tag (its length is not known ahead): MPEG-2 layer III frames of
    // 72 * bitrate / rate + padding bytes, the header included
    const std::vector<uint8_t> mp3 = read_bytes(test_data("audio/speech_16k.mp3"));
    static const int KBPS[16] = { 0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0 };
    static const int RATE[4] = { 22050, 24000, 16000, 0 };
    std::vector<size_t> starts;
    for (size_t i = 0; i + 4 <= mp3.size();) {
        REQUIRE(mp3[i] == 0xFF);
        REQUIRE((mp3[i + 1] & 0xFE) == 0xF2);   // MPEG-2, layer III
        starts.push_back(i);
        i += (size_t) (72 * 1000 * KBPS[mp3[i + 2] >> 4] / RATE[(mp3[i + 2] >> 2) & 3] + ((mp3[i + 2] >> 1) & 1));
    }
    REQUIRE(starts.size() > 100);
    const size_t mid = starts[starts.size() / 2], next = starts[starts.size() / 2 + 1];
    CHECK(ai_stream_warning(mp3, "tagless.mp3").empty());
    std::vector<uint8_t> id3v1 = mp3;               // an ID3v1 tag at the end is not a cut frame
    const char tag[128] = "TAGtitle";
    id3v1.insert(id3v1.end(), tag, tag + 128);
    CHECK(ai_stream_warning(id3v1, "tagless-id3v1.mp3").empty());
    CHECK(ai_stream_warning(ai_prefix(mp3, next), "tagless-whole-frames.mp3").empty());
    for (size_t cut : { mid + (next - mid) / 2, mid + 2, mid + 5, next - 1 }) {
        CAPTURE(cut - mid);
        const std::string w = ai_stream_warning(ai_prefix(mp3, cut), "tagless-cut.mp3");
        CHECK(w.find("ends inside a frame") != std::string::npos);
        CHECK(w.find("tagless-cut.mp3") != std::string::npos);
    }
}

#else

TEST_CASE("mp3: without WHISPER_AUDIO_MP3, MP3 input says how to get it") {
    const decoded_audio a = decode_file(test_data("audio/speech_16k.mp3"));
    CHECK_FALSE(a.ok);
    CHECK(a.error.find("an MP3 file, and this build of whisper-audio has no MP3 support") != std::string::npos);
    CHECK(a.error.find("libmpg123-dev") != std::string::npos);
    CHECK(a.error.find("ffmpeg") != std::string::npos);
}

#endif

// The CRC of an Ogg page (CRC-32, polynomial 0x04C11DB7, not reflected), whose CRC field
// (bytes 22..25) must be 0 while it is computed.
static uint32_t ai_ogg_crc(const uint8_t * p, size_t n) {
    uint32_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint32_t) p[i] << 24;
        for (int k = 0; k < 8; k++) crc = crc & 0x80000000u ? (crc << 1) ^ 0x04C11DB7u : crc << 1;
    }
    return crc;
}

#ifdef WHISPER_AUDIO_OPUS

// Both files were encoded from 16 kHz or 44.1 kHz; opusenc resamples to 48 kHz first, and its
// resampler leaves the signal about 0.6 samples (at 16 kHz) early: the best lag is -1. opusdec,
// the reference decoder, gives the same samples (measured: a relative L2 difference of 5e-4,
// its 16-bit output, at lag 0), so the pre-skip is cut as it should be.
TEST_CASE("opus: close to the WAV, pre-skip cut as opusdec does, from a file, a stream, stdin and memory") {
    const decoded_audio wav = decode_file(test_data("audio/speech_16k.wav"));
    REQUIRE(wav.ok);
    for (const char * name : { "audio/speech_16k.opus", "audio/speech_44k1_stereo.opus" }) {
        CAPTURE(name);
        const decoded_audio o = ai_decode_four_ways(test_data(name));
        CHECK(std::string(o.info.format) == "ogg opus");
        CHECK(o.info.sample_rate == 48000);   // Opus always decodes at 48 kHz
        CHECK(o.info.channels == (strstr(name, "stereo") ? 2 : 1));
        CHECK(o.pcm.size() == wav.pcm.size());   // the end granule position trims the padding
        CHECK(ai_best_lag(o.pcm, wav.pcm, 1500) == -1);
        const std::vector<float> aligned(o.pcm.begin(), o.pcm.end() - 1), ref(wav.pcm.begin() + 1, wav.pcm.end());
        const double err = rel_l2(aligned, ref);
        MESSAGE(std::string(name) << ": relative L2 error vs speech_16k.wav, one sample later: " << err);
        CHECK(err < 0.25);   // (measured 0.18)
        CHECK(ai_stream(test_data(name), 4096).info.frames == -1);   // a stream: unknown ahead
    }
}

TEST_CASE("opus: hostile headers fail with a clear message; a cut stream decodes what is there") {
    const std::vector<uint8_t> good = read_bytes(test_data("audio/speech_16k.opus"));
    const decoded_audio whole = decode_memory(good);
    REQUIRE(whole.ok);
    // the first page holds OpusHead: channel count at byte 28 + 9, mapping family at 28 + 18
    REQUIRE(memcmp(&good[28], "OpusHead", 8) == 0);
    auto with_head = [&](size_t at, uint8_t v) {
        std::vector<uint8_t> b = good;
        b[28 + at] = v;
        memset(&b[22], 0, 4);
        const uint32_t crc = ai_ogg_crc(b.data(), 28 + good[27]);
        for (int k = 0; k < 4; k++) b[22 + k] = (uint8_t) (crc >> (8 * k));
        return b;
    };
    ai_fails_with(with_head(9, 0), { "not a valid Ogg Opus stream", "invalid Opus header", "ffmpeg" });     // 0 channels
    ai_fails_with(with_head(9, 255), { "not a valid Ogg Opus stream", "invalid Opus header", "ffmpeg" });   // 255, family 0
    ai_fails_with(with_head(8, 16), { "not a valid Ogg Opus stream", "unsupported Opus version", "ffmpeg" }); // 16
    // cut inside the headers
    ai_fails_with(ai_prefix(good, 100), { "not a valid Ogg Opus stream", "truncated", "ffmpeg" });
    // cut inside the audio: opusfile, reading a stream, cannot tell a missing last page from
    // the end; what is there decodes (the last few samples differ: the resampler's edge)
    const decoded_audio cut = decode_memory(ai_prefix(good, good.size() / 2));
    REQUIRE_MESSAGE(cut.ok, cut.error);
    REQUIRE(cut.pcm.size() > 200);
    CHECK(cut.pcm.size() < whole.pcm.size());
    CHECK(std::equal(cut.pcm.begin(), cut.pcm.end() - 200, whole.pcm.begin()));
    ai_random_damage(good, 13u);
}

#else

TEST_CASE("opus: without WHISPER_AUDIO_OPUS, Opus input says how to get it") {
    const decoded_audio a = decode_file(test_data("audio/speech_16k.opus"));
    CHECK_FALSE(a.ok);
    CHECK(a.error.find("an Ogg Opus file, and this build of whisper-audio has no Opus support") != std::string::npos);
    CHECK(a.error.find("libopusfile-dev") != std::string::npos);
    CHECK(a.error.find("ffmpeg") != std::string::npos);
}

#endif

// ---- absurd headers, through the stream ------------------------------------------------------

TEST_CASE("stream: absurd headers give a clear error or a correct decode") {
    const std::vector<uint8_t> d = { 1, 0, 2, 0, 3, 0, 4, 0 };
    struct bad {
        const char * what;
        std::vector<uint8_t> bytes;
        const char * needle;
    };
    const std::vector<bad> cases = {
        { "65535 channels s16",   wav_file(1, 65535, 16000, 16, d, 65535u * 2 & 0xFFFF), "block align" },
        { "65535 channels, 1 B",  wav_file(1, 65535, 16000, 8, { 1, 2 }, 65535),       "no audio samples" },
        { "rate 2^31",            wav_file(1, 1, 0x80000000u, 16, d, 2),               "sample rate 2147483648 Hz" },
        { "rate 0",               wav_file(1, 1, 0, 16, d, 2),                         "sample rate 0 Hz" },
        { "rate 1",               wav_file(1, 1, 1, 16, d, 2),                         "sample rate 1 Hz" },
        { "7 bits",               wav_file(1, 1, 16000, 7, d, 1),                      "7 bits" },
        { "truncated header",     ai_prefix(wav_file(1, 1, 16000, 16, d, 2), 30),     "truncated" },
        { "RIFF only",            { 'R', 'I', 'F', 'F' },                            "truncated" },
        { "zero length",          {},                                                "empty" },
        { "not audio (png)",      { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 0 }, "not a WAV file" },
        { "flac",                 { 'f', 'L', 'a', 'C', 0, 0, 0, 0x22 },             "FLAC" },
        { "mp3",                  { 'I', 'D', '3', 4, 0, 0, 0, 0, 0, 0 },            "MP3" },
    };
    const std::string path = test_tmp("absurd.wav");
    for (const bad & b : cases) {
        const std::string what = b.what;
        CAPTURE(what);
        write_bytes(path, b.bytes);
        whisper_audio_info info;
        whisper_audio_stream * s = whisper_audio_stream_open(path.c_str(), &info);
        CHECK(s == nullptr);
        if (s) whisper_audio_stream_close(s);
        const std::string msg = whisper_audio_last_error();
        CAPTURE(msg);
        CHECK(msg.rfind(path, 0) == 0);   // the path first
        CHECK(msg.find(b.needle) != std::string::npos);
        // a WAV error, or (FLAC, MP3) the other format's, with the ffmpeg command
        if (!b.bytes.empty()) CHECK((msg.find("WAV") != std::string::npos || msg.find("ffmpeg") != std::string::npos));
    }

    // 65535 channels of u8 with one whole frame and a partial one: one sample
    std::vector<uint8_t> frame(65535 + 100, 128);
    frame[0] = 255;
    write_bytes(path, wav_file(1, 65535, 16000, 8, frame, 65535));
    const decoded_audio a = ai_stream(path, 0);
    REQUIRE_MESSAGE(a.ok, a.error);
    REQUIRE(a.pcm.size() == 1);
    CHECK(a.pcm[0] == doctest::Approx(127.0 / 128 / 65535).epsilon(1e-4));
    CHECK(a.info.channels == 65535);
    CHECK(a.info.frames == 1);

    // a data size far past the end reads what is there
    write_bytes(path, wav_file(1, 1, 16000, 16, d, 2, 0x7FFFFFF0));
    const decoded_audio big = ai_stream(path, 0);
    REQUIRE_MESSAGE(big.ok, big.error);
    CHECK(big.pcm.size() == 4);
    CHECK(big.info.frames == 4);

    // invalid arguments
    CHECK(whisper_audio_stream_open(nullptr, nullptr) == nullptr);
    CHECK(whisper_audio_stream_read(nullptr, nullptr, 1) == -1);
    CHECK(whisper_audio_stream_open("no/such/dir/x.wav", nullptr) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("cannot open") != std::string::npos);
    whisper_audio_stream_close(nullptr);
    remove(path.c_str());
}

// ---- bounded memory on long audio -------------------------------------------------------------

static long ai_status_kb(const char * key) {
    FILE * f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    const size_t klen = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, klen) == 0) { v = atol(line + klen + 1); break; }
    }
    fclose(f);
    return v;
}

// Resets VmHWM to the current RSS (Linux >= 4.0: "5" > /proc/self/clear_refs).
static bool ai_reset_hwm() {
    FILE * f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

// Writes a 16-bit mono WAV of seconds at rate (a chirp plus noise), block by block.
static void ai_write_long_wav(const std::string & path, int rate, int64_t seconds) {
    FILE * f = fopen(path.c_str(), "wb");
    REQUIRE(f);
    const int64_t n = (int64_t) rate * seconds;
    std::vector<uint8_t> h = wav_file(1, 1, (uint32_t) rate, 16, {}, 2, (int64_t) (n * 2));
    fwrite(h.data(), 1, h.size(), f);
    std::vector<int16_t> block(1 << 16);
    uint32_t rng = 1;
    for (int64_t i = 0; i < n;) {
        const size_t k = (size_t) std::min<int64_t>(block.size(), n - i);
        for (size_t j = 0; j < k; j++, i++) {
            rng = rng * 1664525u + 1013904223u;
            block[j] = (int16_t) (8000.0 * sin(0.001 * (double) (i % 1000000)) + (int) (rng >> 24) - 128);
        }
        REQUIRE(fwrite(block.data(), 2, k, f) == k);
    }
    fclose(f);
}

// Heap bytes in use (glibc), or 0.
static size_t ai_heap_in_use() {
#ifdef __GLIBC__
    const struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

struct ai_peak {
    int64_t samples = -1;
    long    rss_kb = -1;    // peak RSS growth over the RSS at open (VmHWM, reset first)
    long    heap_kb = -1;   // peak heap in use over the heap at open, sampled after each read
};

// Streams path to its end and measures its memory.
static ai_peak ai_stream_peak(const std::string & path) {
    ai_peak p;
    if (!ai_reset_hwm()) return p;
    const long rss0 = ai_status_kb("VmRSS:");
    const size_t heap0 = ai_heap_in_use();
    size_t heap_max = heap0;
    whisper_audio_stream * s = whisper_audio_stream_open(path.c_str(), nullptr);
    REQUIRE(s);
    std::vector<float> buf(16000);   // 1 s at a time, as a caller would encode 30 s windows
    int64_t total = 0, got;
    while ((got = whisper_audio_stream_read(s, buf.data(), buf.size())) > 0) {
        total += got;
        heap_max = std::max(heap_max, ai_heap_in_use());
    }
    CHECK(got == 0);
    whisper_audio_stream_close(s);
    p.samples = total;
    p.rss_kb  = ai_status_kb("VmHWM:") - rss0;
    p.heap_kb = (long) ((heap_max - heap0) / 1024);
    return p;
}

TEST_CASE("stream: peak memory does not grow with the length (10 min vs 2 h)") {
    const std::string short_path = test_tmp("10min.wav"), long_path = test_tmp("2h.wav");
    ai_write_long_wav(short_path, 16000, 600);
    ai_write_long_wav(long_path, 16000, 7200);
    const ai_peak a = ai_stream_peak(short_path);
    const ai_peak b = ai_stream_peak(long_path);
    remove(short_path.c_str());
    remove(long_path.c_str());
    if (a.samples < 0) {
        MESSAGE("no /proc/self/clear_refs: peak memory not measured");
        return;
    }
    CHECK(a.samples == 600 * 16000);
    CHECK(b.samples == 7200 * 16000);
    // (in a fresh process, ru_maxrss is about 3 MiB for either file: docs/FUZZING.md)
    MESSAGE("streaming, peak growth: 10 min: RSS " << a.rss_kb << " KiB, heap " << a.heap_kb << " KiB; 2 h: RSS "
            << b.rss_kb << " KiB, heap " << b.heap_kb << " KiB (the 2 h file is " << 7200 * 16000 * 2 / 1024 << " KiB)");
    CHECK(b.rss_kb < a.rss_kb + 1024);      // no growth with the length (1 MiB slack)
    CHECK(b.rss_kb < 16 * 1024);            // and small in itself
    CHECK(b.heap_kb <= a.heap_kb + 64);
    CHECK(b.heap_kb < 4 * 1024);

    // with resampling (48 kHz): 20 s vs 3 min
    const std::string r1 = test_tmp("48k-20s.wav"), r10 = test_tmp("48k-3min.wav");
    ai_write_long_wav(r1, 48000, 20);
    ai_write_long_wav(r10, 48000, 180);
    const ai_peak c = ai_stream_peak(r1);
    const ai_peak e = ai_stream_peak(r10);
    remove(r1.c_str());
    remove(r10.c_str());
    CHECK(c.samples == 20 * 16000);
    CHECK(e.samples == 180 * 16000);
    MESSAGE("48 kHz, resampled, peak growth: 20 s: RSS " << c.rss_kb << " KiB, heap " << c.heap_kb
            << " KiB; 3 min: RSS " << e.rss_kb << " KiB, heap " << e.heap_kb << " KiB");
    CHECK(e.rss_kb < c.rss_kb + 1024);
    CHECK(e.heap_kb <= c.heap_kb + 64);
}

// The Ogg pages of b with the stream serial number serial (their CRCs made anew).
static std::vector<uint8_t> ai_ogg_reserial(std::vector<uint8_t> b, uint32_t serial) {
    for (size_t at = 0; at + 27 <= b.size();) {
        REQUIRE(memcmp(&b[at], "OggS", 4) == 0);
        const size_t head = 27 + b[at + 26];
        size_t body = 0;
        for (size_t k = 27; k < head; k++) body += b[at + k];
        REQUIRE(at + head + body <= b.size());
        for (int k = 0; k < 4; k++) b[at + 14 + k] = (uint8_t) (serial >> (8 * k));
        memset(&b[at + 22], 0, 4);
        const uint32_t crc = ai_ogg_crc(&b[at], head + body);
        for (int k = 0; k < 4; k++) b[at + 22 + k] = (uint8_t) (crc >> (8 * k));
        at += head + body;
    }
    return b;
}

// The compressed formats stream too. Long inputs without an encoder at test time: CBR MP3
// frames with no tag concatenate to a longer MP3, and Ogg Opus files with distinct serial
// numbers to a chained Ogg Opus stream. (FLAC, measured by hand: docs/FUZZING.md.)
TEST_CASE("stream: MP3 and Opus peak memory does not grow with the length (1 min vs 7 min)") {
    for (const std::string name : { "audio/speech_16k.mp3", "audio/speech_16k.opus" }) {
        CAPTURE(name);
        const std::vector<uint8_t> one = read_bytes(test_data(name));
#if !(defined(WHISPER_AUDIO_MP3) && defined(WHISPER_AUDIO_OPUS))
        if (!decode_file(test_data(name)).ok) continue;   // a build without its library
#endif
        const bool ogg = memcmp(one.data(), "OggS", 4) == 0;
        ai_peak p[2];
        for (int k = 0; k < 2; k++) {
            std::vector<uint8_t> b;
            for (uint32_t i = 0; i < (k ? 60u : 9u); i++) {
                const std::vector<uint8_t> link = ogg ? ai_ogg_reserial(one, 1000 + i) : one;
                b.insert(b.end(), link.begin(), link.end());
            }
            const std::string path = test_tmp("long-compressed");
            write_bytes(path, b);
            p[k] = ai_stream_peak(path);
            remove(path.c_str());
        }
        if (p[0].samples < 0) {
            MESSAGE("no /proc/self/clear_refs: peak memory not measured");
            return;
        }
        CHECK(p[1].samples > 6 * p[0].samples);
        MESSAGE(name << " x9 vs x60, peak growth: RSS " << p[0].rss_kb << " vs " << p[1].rss_kb << " KiB, heap "
                << p[0].heap_kb << " vs " << p[1].heap_kb << " KiB");
        CHECK(p[1].rss_kb < p[0].rss_kb + 1024);
        CHECK(p[1].heap_kb <= p[0].heap_kb + 64);
    }
}

// whisper_audio_stream_open_live over a pipe that this test writes: the samples it gives, read
// with reads of up to max_read, and how many of those reads returned before the writer had
// written all (fewer than max_read: what had arrived).
TEST_CASE("live stream: a pipe's samples as they arrive (a read returns what has come), the file's bit for bit; raw PCM; "
          "a file that grows; bad parameters refused") {
    const std::string wav_path = test_data("audio/speech_44k1_stereo_s16.wav");
    const std::vector<uint8_t> wav = read_bytes(wav_path);
    const decoded_audio ref = decode_file(wav_path);
    REQUIRE(ref.ok);
    auto live_read = [](const std::string & path, whisper_audio_live_params lp, whisper_audio_info * info, size_t max_read,
                        std::vector<float> & pcm) {
        whisper_audio_stream * s = whisper_audio_stream_open_live(path.c_str(), lp, info);
        REQUIRE_MESSAGE(s, whisper_audio_last_error());
        std::vector<float> buf(max_read);
        size_t short_reads = 0;
        int64_t n;
        while ((n = whisper_audio_stream_read(s, buf.data(), buf.size())) > 0) {
            pcm.insert(pcm.end(), buf.begin(), buf.begin() + n);
            short_reads += (size_t)n < max_read;
        }
        CHECK(n == 0);
        whisper_audio_stream_close(s);
        return short_reads;
    };
    // a WAV through a pipe, 4 KB at a time with pauses: reads of up to 10 s come back with what is there
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    std::thread writer([&] {
        for (size_t at = 0; at < wav.size(); at += 4096) {
            const size_t k = std::min<size_t>(4096, wav.size() - at);
            CHECK(write(fds[1], wav.data() + at, k) == (ssize_t)k);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        close(fds[1]);
    });
    std::vector<float> got;
    whisper_audio_info info;
    const size_t short_reads = live_read("/dev/fd/" + std::to_string(fds[0]), whisper_audio_live_default_params(), &info,
                                         160000, got);
    writer.join();
    close(fds[0]);
    CHECK(info.frames == -1);
    CHECK(info.sample_rate == 44100);
    CHECK(short_reads > 10);
    REQUIRE(got.size() == ref.pcm.size());
    CHECK(memcmp(got.data(), ref.pcm.data(), got.size() * sizeof(float)) == 0);   // resampled in pieces, the same floats

    // raw PCM: the WAV's samples without its header, s16le at its rate and channels; f32le of 16 kHz mono
    const decoded_audio mono = decode_file(test_data("audio/speech_16k.wav"));
    REQUIRE(mono.ok);
    const std::string raw = test_tmp("live-raw.f32"), raw16 = test_tmp("live-raw.s16");
    write_bytes(raw, std::vector<uint8_t>((const uint8_t *)mono.pcm.data(), (const uint8_t *)(mono.pcm.data() + mono.pcm.size())));
    write_bytes(raw16, std::vector<uint8_t>(wav.begin() + 44, wav.end()));
    whisper_audio_live_params lp = whisper_audio_live_default_params();
    lp.raw = "f32le";
    got.clear();
    live_read(raw, lp, &info, 4096, got);
    CHECK(std::string(info.format) == "raw f32le");
    CHECK(got == mono.pcm);
    lp.raw = "s16le";
    lp.raw_rate = 44100;
    lp.raw_channels = 2;
    got.clear();
    live_read(raw16, lp, &info, 4096, got);
    CHECK(std::string(info.format) == "raw s16le");
    CHECK(info.channels == 2);
    CHECK(got == ref.pcm);

    // a file that grows: read while it is written, to its end once it stops growing for follow_ms
    const std::string grow = test_tmp("live-grow.wav");
    FILE * f = fopen(grow.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(fwrite(wav.data(), 1, 64, f) == 64);
    fflush(f);
    std::thread grower([&] {
        for (size_t at = 64; at < wav.size(); at += 50000) {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            const size_t k = std::min<size_t>(50000, wav.size() - at);
            CHECK(fwrite(wav.data() + at, 1, k, f) == k);
            fflush(f);
        }
    });
    lp = whisper_audio_live_default_params();
    lp.follow_ms = 400;
    got.clear();
    const auto t0 = std::chrono::steady_clock::now();
    live_read(grow, lp, &info, 160000, got);
    grower.join();
    fclose(f);
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(400));
    REQUIRE(got.size() == ref.pcm.size());
    CHECK(memcmp(got.data(), ref.pcm.data(), got.size() * sizeof(float)) == 0);
    remove(raw.c_str());
    remove(raw16.c_str());
    remove(grow.c_str());

    // refused, with a message
    struct { const char * raw; int rate, channels, follow_ms; const char * path, * says; } bad[] = {
        {"u8", 0, 0, 0, "-", "raw format 'u8' is not s16le or f32le"},
        {"s16le", 500, 0, 0, "-", "the rate must be"},
        {"s16le", 0, 65, 0, "-", "the channels 1 to 64"},
        {nullptr, 0, 0, 100, "-", "standard input ends when its writer closes it"},
        {nullptr, 0, 0, -1, "-", "follow_ms is -1"},
        {nullptr, 0, 0, 0, "/nonexistent/x.wav", "cannot open"},
    };
    for (const auto & b : bad) {
        CAPTURE(b.says);
        lp = whisper_audio_live_default_params();
        lp.raw = b.raw;
        lp.raw_rate = b.rate;
        lp.raw_channels = b.channels;
        lp.follow_ms = b.follow_ms;
        CHECK(whisper_audio_stream_open_live(b.path, lp, &info) == nullptr);
        CHECK(std::string(whisper_audio_last_error()).find(b.says) != std::string::npos);
    }
    CHECK(whisper_audio_stream_open_live(nullptr, whisper_audio_live_default_params(), nullptr) == nullptr);
}
