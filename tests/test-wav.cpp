// test-wav.cpp - WAV decoding and resampling (whisper_audio_decode_*, whisper_audio_resample).
//
// The fixtures in tests/data/audio are copies of ../shared/fixtures/audio (see its README):
// speech_16k.wav and the same speech converted by sox to other rates and encodings.
#include <doctest/doctest.h>
#include <whisper-audio.h>

#include "test-util.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// ---- helpers -----------------------------------------------------------------------

static bool wav_test_error_has(const char * needle) {
    return strstr(whisper_audio_last_error(), needle) != nullptr;
}

static decoded_audio wav_test_decode(const std::vector<uint8_t> & bytes) {
    decoded_audio a;
    float * pcm = nullptr;
    size_t n = 0;
    a.ok = whisper_audio_decode_memory(bytes.data(), bytes.size(), &pcm, &n, &a.info);
    if (a.ok) {
        a.pcm.assign(pcm, pcm + n);
        whisper_audio_pcm_free(pcm);
    } else {
        CHECK(pcm == nullptr);
        CHECK(n == 0);
    }
    return a;
}

// WAVE_FORMAT_EXTENSIBLE fmt body (40 bytes) with the sub-format GUID of sub_tag
static std::vector<uint8_t> wav_test_fmt_ext(uint32_t sub_tag, uint32_t channels, uint32_t rate, uint32_t bits,
                                             uint32_t valid_bits, bool good_guid = true) {
    const uint32_t ba = channels * (bits / 8);
    wav_bytes w;
    w.u16(0xFFFE).u16(channels).u32(rate).u32(rate * ba).u16(ba).u16(bits);
    w.u16(22).u16(valid_bits).u32(channels == 2 ? 3 : 4);
    w.u16(sub_tag).raw({ 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B,
                         (uint8_t) (good_guid ? 0x71 : 0x72) });
    return w.b;
}

// a valid 16 kHz mono s16 file
static std::vector<uint8_t> wav_test_simple(const std::vector<int> & samples) {
    wav_bytes c;
    c.chunk("fmt ", wav_fmt(1, 1, 16000, 16)).chunk("data", wav_s16(samples));
    return wav_riff(c.b);
}

// ---- the fixtures ------------------------------------------------------------------

TEST_CASE("wav: fixtures decode with the right info and match speech_16k after resampling") {
    const decoded_audio ref = decode_file(test_data("audio/speech_16k.wav"));
    REQUIRE_MESSAGE(ref.ok, whisper_audio_last_error());
    CHECK(ref.pcm.size() == 112259);
    CHECK(ref.info.sample_rate == 16000);
    CHECK(ref.info.channels == 1);
    CHECK(ref.info.bits_per_sample == 16);
    CHECK(ref.info.frames == 112259);
    CHECK(std::string(ref.info.format) == "wav pcm s16");

    struct fixture {
        const char * file;
        int rate, channels, bits;
        int64_t frames;
        const char * format;
        size_t n_16k;           // round(frames * 16000 / rate)
        double max_err_ref;     // relative L2 error bound vs speech_16k.wav
    };
    // Measured relative L2 errors vs speech_16k.wav: 5.10e-3 (44.1k s16 stereo), 5.10e-3
    // (22.05k f32), 5.13e-3 (48k s24), 0.129 (8k u8). Below 7 kHz the error is 2.6e-4;
    // the rest is the 7.6-8 kHz band, which sox's conversion up and our conversion back
    // both cut (a filter that stops at 8 kHz must start rolling off below it). The 8 kHz
    // u8 file has lost everything above 4 kHz and carries 8-bit quantisation noise.
    const fixture fixtures[] = {
        { "speech_44k1_stereo_s16.wav", 44100, 2, 16, 309414, "wav pcm s16",              112259, 1e-2 },
        { "speech_22k05_mono_f32.wav",  22050, 1, 32, 154707, "wav float32",              112259, 1e-2 },
        { "speech_48k_mono_s24.wav",    48000, 1, 24, 336777, "wav pcm s24 (extensible)", 112259, 1e-2 },
        { "speech_8k_mono_u8.wav",       8000, 1,  8,  56130, "wav pcm u8",               112260, 0.15 },
    };
    std::vector<float> from_44k1;
    for (const fixture & fx : fixtures) {
        const std::string file = fx.file;
        CAPTURE(file);
        const decoded_audio a = decode_file(test_data("audio/" + file));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.info.sample_rate == fx.rate);
        CHECK(a.info.channels == fx.channels);
        CHECK(a.info.bits_per_sample == fx.bits);
        CHECK(a.info.frames == fx.frames);
        CHECK(std::string(a.info.format) == fx.format);
        CHECK(a.pcm.size() == fx.n_16k);
        const double err = rel_l2(a.pcm, ref.pcm);
        MESSAGE(file << ": relative L2 error vs speech_16k.wav " << err);
        CHECK(err < fx.max_err_ref);
        if (fx.rate == 44100) {
            from_44k1 = a.pcm;
        } else if (fx.rate != 8000) {
            // the wide-band files agree with each other far more closely (measured: 5.4e-5
            // for 22.05k f32, 1.0e-4 for 48k s24, against 44.1k s16)
            const double err_44k1 = rel_l2(a.pcm, from_44k1);
            MESSAGE(file << ": relative L2 error vs the 44.1 kHz file " << err_44k1);
            CHECK(err_44k1 < 3e-4);
        }
    }
}

TEST_CASE("wav: decode_file errors name the path") {
    float * pcm = nullptr;
    size_t n = 0;
    CHECK_FALSE(whisper_audio_decode_file("no/such/dir/missing.wav", &pcm, &n, nullptr));
    CHECK(wav_test_error_has("no/such/dir/missing.wav"));
    CHECK(wav_test_error_has("cannot open"));
    CHECK(pcm == nullptr);

    const std::string path = test_tmp("empty.wav");
    if (FILE * f = fopen(path.c_str(), "wb")) {
        fclose(f);
        CHECK_FALSE(whisper_audio_decode_file(path.c_str(), &pcm, &n, nullptr));
        CHECK(wav_test_error_has(path.c_str()));
        CHECK(wav_test_error_has("empty"));
        remove(path.c_str());
    }
}

// ---- hand-built files: what decodes --------------------------------------------------

TEST_CASE("wav: every encoding decodes to the right values") {
    SUBCASE("s16") {
        const decoded_audio a = wav_test_decode(wav_test_simple({ 0, 16384, -16384, 32767, -32768 }));
        REQUIRE(a.ok);
        REQUIRE(a.pcm.size() == 5);
        CHECK(a.pcm[0] == 0.0f);
        CHECK(a.pcm[1] == 0.5f);
        CHECK(a.pcm[2] == -0.5f);
        CHECK(a.pcm[3] == 32767.0f / 32768.0f);
        CHECK(a.pcm[4] == -1.0f);
        CHECK(std::string(a.info.format) == "wav pcm s16");
    }
    SUBCASE("u8") {
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 1, 16000, 8)).chunk("data", { 128, 192, 64, 0, 255 });
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE(a.ok);
        REQUIRE(a.pcm.size() == 5);
        CHECK(a.pcm[0] == 0.0f);
        CHECK(a.pcm[1] == 0.5f);
        CHECK(a.pcm[2] == -0.5f);
        CHECK(a.pcm[3] == -1.0f);
        CHECK(a.pcm[4] == 127.0f / 128.0f);
        CHECK(std::string(a.info.format) == "wav pcm u8");
    }
    SUBCASE("s24") {
        wav_bytes d;
        d.u24(0x400000).u24(0xC00000).u24(0x800000).u24(0x7FFFFF);
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 1, 16000, 24)).chunk("data", d.b);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE(a.ok);
        REQUIRE(a.pcm.size() == 4);
        CHECK(a.pcm[0] == 0.5f);
        CHECK(a.pcm[1] == -0.5f);
        CHECK(a.pcm[2] == -1.0f);
        CHECK(a.pcm[3] == doctest::Approx(1.0).epsilon(1e-6));
        CHECK(a.info.bits_per_sample == 24);
        CHECK(std::string(a.info.format) == "wav pcm s24");
    }
    SUBCASE("s32") {
        wav_bytes d;
        d.u32(0x40000000).u32(0xC0000000).u32(0x80000000);
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 1, 16000, 32)).chunk("data", d.b);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE(a.ok);
        REQUIRE(a.pcm.size() == 3);
        CHECK(a.pcm[0] == 0.5f);
        CHECK(a.pcm[1] == -0.5f);
        CHECK(a.pcm[2] == -1.0f);
        CHECK(std::string(a.info.format) == "wav pcm s32");
    }
    SUBCASE("float32 and float64") {
        wav_bytes d32, d64;
        d32.f32(0.25f).f32(-0.75f).f32(1.5f);
        d64.f64(0.25).f64(-0.75).f64(1.5);
        wav_bytes c32, c64;
        c32.chunk("fmt ", wav_fmt(3, 1, 16000, 32)).chunk("data", d32.b);
        c64.chunk("fmt ", wav_fmt(3, 1, 16000, 64)).chunk("data", d64.b);
        const decoded_audio a = wav_test_decode(wav_riff(c32.b));
        const decoded_audio b = wav_test_decode(wav_riff(c64.b));
        REQUIRE(a.ok);
        REQUIRE(b.ok);
        CHECK(a.pcm == std::vector<float>{ 0.25f, -0.75f, 1.5f });
        CHECK(b.pcm == std::vector<float>{ 0.25f, -0.75f, 1.5f });
        CHECK(std::string(a.info.format) == "wav float32");
        CHECK(std::string(b.info.format) == "wav float64");
        CHECK(b.info.bits_per_sample == 64);
    }
    SUBCASE("12-bit PCM, MSB-aligned in 16-bit containers") {
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 1, 16000, 12, 2)).chunk("data", wav_s16({ 0x4000, -0x4000 }));
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE(a.ok);
        CHECK(a.pcm == std::vector<float>{ 0.5f, -0.5f });
        CHECK(a.info.bits_per_sample == 12);
        CHECK(std::string(a.info.format) == "wav pcm s16");
    }
    SUBCASE("extensible float32 stereo is averaged") {
        wav_bytes d;
        d.f32(0.5f).f32(0.25f).f32(-1.0f).f32(0.0f);
        wav_bytes c;
        c.chunk("fmt ", wav_test_fmt_ext(3, 2, 16000, 32, 32)).chunk("data", d.b);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == std::vector<float>{ 0.375f, -0.5f });
        CHECK(a.info.channels == 2);
        CHECK(a.info.frames == 2);
        CHECK(std::string(a.info.format) == "wav float32 (extensible)");
    }
    SUBCASE("extensible PCM: 20 valid bits in 24") {
        wav_bytes d;
        d.u24(0x400000).u24(0xC00000);
        wav_bytes c;
        c.chunk("fmt ", wav_test_fmt_ext(1, 1, 16000, 24, 20)).chunk("data", d.b);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == std::vector<float>{ 0.5f, -0.5f });
        CHECK(a.info.bits_per_sample == 20);
        CHECK(std::string(a.info.format) == "wav pcm s24 (extensible)");
    }
    SUBCASE("three channels are averaged") {
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 3, 16000, 16)).chunk("data", wav_s16({ 3000, 6000, 9000, -300, 0, 0 }));
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE(a.ok);
        REQUIRE(a.pcm.size() == 2);
        CHECK(a.pcm[0] == doctest::Approx(6000.0 / 32768).epsilon(1e-6));
        CHECK(a.pcm[1] == doctest::Approx(-100.0 / 32768).epsilon(1e-6));
    }
}

TEST_CASE("wav: chunk layout") {
    const std::vector<float> expect = { 0.5f, -0.5f, 0.25f };
    const std::vector<uint8_t> data = wav_s16({ 16384, -16384, 8192 });
    const std::vector<uint8_t> fmt  = wav_fmt(1, 1, 16000, 16);

    SUBCASE("data before fmt, unknown chunks between") {
        wav_bytes c;
        c.chunk("LIST", { 'I', 'N', 'F', 'O' }).chunk("data", data).chunk("junk", std::vector<uint8_t>(10, 7)).chunk("fmt ", fmt);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == expect);
    }
    SUBCASE("odd-sized chunk followed by its pad byte") {
        wav_bytes c;
        c.chunk("fmt ", fmt).chunk("odd ", { 1, 2, 3, 4, 5 }).chunk("data", data);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == expect);
    }
    SUBCASE("odd-sized chunk whose writer forgot the pad byte") {
        wav_bytes c;
        c.chunk("fmt ", fmt).chunk("odd ", { 1, 2, 3, 4, 5 }, -1, false).chunk("data", data);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == expect);
    }
    SUBCASE("odd data size: the last partial frame is dropped, the pad skipped") {
        std::vector<uint8_t> odd = data;
        odd.push_back(0x55);
        wav_bytes c;
        c.chunk("fmt ", fmt).chunk("data", odd).chunk("LIST", { 'a', 'b' });
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == expect);
    }
    SUBCASE("18-byte fmt chunk and a fact chunk") {
        std::vector<uint8_t> fmt18 = fmt;
        fmt18.push_back(0);
        fmt18.push_back(0);
        wav_bytes c;
        c.chunk("fmt ", fmt18).chunk("fact", { 3, 0, 0, 0 }).chunk("data", data);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == expect);
    }
    SUBCASE("bogus RIFF size is ignored") {
        for (int64_t riff_size : { 0LL, 4LL, 0xFFFFFFFFLL, 12345678LL }) {
            wav_bytes c;
            c.chunk("fmt ", fmt).chunk("data", data);
            const decoded_audio a = wav_test_decode(wav_riff(c.b, riff_size));
            REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
            CHECK(a.pcm == expect);
        }
    }
    SUBCASE("data size 0, 0xFFFFFFFF or too large reads to the end, whole frames only") {
        for (int64_t size_field : { 0LL, 0xFFFFFFFFLL, 1000LL, 7LL + 2 }) {
            CAPTURE(size_field);
            wav_bytes c;
            c.chunk("fmt ", fmt).chunk("data", data, size_field);
            std::vector<uint8_t> bytes = wav_riff(c.b);
            if (size_field == 9) bytes.push_back(0x11); // 7 bytes present + 1: truncated mid-frame
            const decoded_audio a = wav_test_decode(bytes);
            REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
            CHECK(a.pcm == expect);
        }
    }
    SUBCASE("RF64 with the 0xFFFFFFFF data size") {
        wav_bytes c;
        c.chunk("ds64", std::vector<uint8_t>(28, 0)).chunk("fmt ", fmt).chunk("data", data, 0xFFFFFFFFLL);
        std::vector<uint8_t> bytes = wav_riff(c.b, 0xFFFFFFFFLL);
        memcpy(bytes.data(), "RF64", 4);
        const decoded_audio a = wav_test_decode(bytes);
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        CHECK(a.pcm == expect);
    }
    SUBCASE("65535 channels of u8: one whole frame decodes") {
        std::vector<uint8_t> frame(65535, 128);
        frame[0] = 255; // (127/128) / 65535 on average
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 65535, 16000, 8)).chunk("data", frame);
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE_MESSAGE(a.ok, whisper_audio_last_error());
        REQUIRE(a.pcm.size() == 1);
        CHECK(a.pcm[0] == doctest::Approx(127.0 / 128 / 65535).epsilon(1e-4));
        CHECK(a.info.channels == 65535);
    }
    SUBCASE("a rate other than 16 kHz is resampled") {
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 1, 8000, 16)).chunk("data", wav_s16(std::vector<int>(80, 1000)));
        const decoded_audio a = wav_test_decode(wav_riff(c.b));
        REQUIRE(a.ok);
        CHECK(a.pcm.size() == 160);
        CHECK(a.info.frames == 80);
        CHECK(a.info.sample_rate == 8000);
        CHECK(a.pcm[80] == doctest::Approx(1000.0 / 32768).epsilon(1e-4)); // DC in the middle
    }
}

// ---- hand-built files: what is rejected ------------------------------------------------

TEST_CASE("wav: clear errors") {
    const std::vector<uint8_t> data = wav_s16({ 1, 2, 3, 4 });
    struct bad {
        const char * what;
        std::vector<uint8_t> bytes;
        std::vector<const char *> needles;   // all must appear in the message
    };
    auto riff = [](const std::vector<uint8_t> & fmt, const std::vector<uint8_t> & d) {
        wav_bytes c;
        c.chunk("fmt ", fmt).chunk("data", d);
        return wav_riff(c.b);
    };
    auto magic = [](const char * s, size_t n) {
        std::vector<uint8_t> v(s, s + n);
        v.resize(64, 0);
        return v;
    };
    std::vector<bad> cases = {
        { "0 channels",        riff(wav_fmt(1, 0, 16000, 16, 2), data),        { "0 channels" } },
        { "rate 0",            riff(wav_fmt(1, 1, 0, 16), data),               { "sample rate 0 Hz" } },
        { "rate 2 MHz",        riff(wav_fmt(1, 1, 2000000, 16), data),         { "sample rate 2000000 Hz" } },
        { "7 bits",            riff(wav_fmt(1, 1, 16000, 7, 1), data),         { "7 bits" } },
        { "0 bits",            riff(wav_fmt(1, 1, 16000, 0, 2), data),         { "0 bits" } },
        { "12 bits packed",    riff(wav_fmt(1, 2, 16000, 12, 3), data),        { "block align 3" } },
        { "block align wrong", riff(wav_fmt(1, 2, 16000, 16, 2), data),        { "block align 2", "expected 4" } },
        { "65535 ch s16",      riff(wav_fmt(1, 65535, 16000, 16, 65535), data),{ "block align" } },
        { "float 16 bits",     riff(wav_fmt(3, 1, 16000, 16), data),           { "float", "16 bits" } },
        { "a-law",             riff(wav_fmt(6, 1, 8000, 8), data),             { "0x0006", "A-law", "ffmpeg" } },
        { "mu-law",            riff(wav_fmt(7, 1, 8000, 8), data),             { "0x0007", "mu-law" } },
        { "ms adpcm",          riff(wav_fmt(2, 1, 8000, 4, 256), data),        { "0x0002", "ADPCM" } },
        { "ima adpcm",         riff(wav_fmt(0x11, 1, 8000, 4, 256), data),     { "0x0011", "IMA ADPCM" } },
        { "extensible a-law",  riff(wav_test_fmt_ext(6, 1, 8000, 8, 8), data),      { "A-law", "EXTENSIBLE" } },
        { "extensible guid",   riff(wav_test_fmt_ext(1, 1, 8000, 16, 16, false), data), { "GUID" } },
        { "fmt too small",     riff({ 1, 0, 1, 0 }, data),                          { "fmt chunk too small" } },
        { "65535 ch, 1 byte",  riff(wav_fmt(1, 65535, 16000, 8), { 1, 2 }),    { "contains no audio samples" } },
        { "no samples",        riff(wav_fmt(1, 1, 16000, 16), { 9 }),          { "contains no audio samples" } },
        { "header only",       wav_riff({}),                                   { "no fmt chunk" } },
        { "RIFF, too short",   { 'R', 'I', 'F', 'F', 4, 0, 0, 0 },                  { "truncated" } },
        { "not WAVE",          magic("RIFF\x20\0\0\0AVI ", 12),                     { "not a WAV file", "AVI " } },
        { "RIFX",              magic("RIFX\x20\0\0\0WAVE", 12),                     { "big-endian" } },
        { "text",              magic("hello, world", 12),                           { "not a WAV file" } },
#ifdef WHISPER_AUDIO_OGG
        { "ogg",               magic("OggS\0\x02", 6),                              { "not a valid Ogg Vorbis stream", "ffmpeg -i input -ar 16000 -ac 1 -c:a pcm_s16le output.wav" } },
#else
        { "ogg",               magic("OggS\0\x02", 6),                              { "no Ogg support", "ffmpeg -i input -ar 16000 -ac 1 -c:a pcm_s16le output.wav" } },
#endif
        { "mp3 (id3)",         magic("ID3\x04", 4),                                 { "MP3", "ffmpeg" } },
        { "mp3 (frame)",       magic("\xFF\xFB\x90\x64", 4),                        { "MP3", "ffmpeg" } },
        { "flac",              magic("fLaC", 4),                                    { "FLAC", "ffmpeg" } },
        { "m4a",               magic("\0\0\0\x20" "ftypM4A ", 12),                  { "MP4/M4A", "ffmpeg" } },
        { "tiny",              { 'R' },                                             { "not a WAV file" } },
    };
    {
        wav_bytes c;
        c.chunk("fmt ", wav_fmt(1, 1, 16000, 16));
        cases.push_back({ "no data", wav_riff(c.b), { "no data chunk" } });
    }
    {
        wav_bytes c;
        c.chunk("LIST", { 1, 2, 3, 4 }).chunk("data", data);
        cases.push_back({ "no fmt", wav_riff(c.b), { "no fmt chunk" } });
    }
    {
        wav_bytes c;
        c.id("fmt ").u32(16).u16(1).u16(1);
        cases.push_back({ "fmt truncated", wav_riff(c.b), { "fmt chunk truncated" } });
    }

    for (const bad & b : cases) {
        const std::string what = b.what;
        CAPTURE(what);
        const decoded_audio a = wav_test_decode(b.bytes);
        CHECK_FALSE(a.ok);
        const std::string msg = whisper_audio_last_error();
        CAPTURE(msg);
        CHECK(msg.rfind("<memory>: ", 0) == 0);
        for (const char * needle : b.needles) {
            CHECK_MESSAGE(msg.find(needle) != std::string::npos, needle);
        }
    }

    float * pcm = nullptr;
    size_t n = 0;
    const uint8_t one = 0;
    CHECK_FALSE(whisper_audio_decode_memory(&one, 0, &pcm, &n, nullptr));
    CHECK(wav_test_error_has("empty"));
    CHECK_FALSE(whisper_audio_decode_memory(nullptr, 10, &pcm, &n, nullptr));
    CHECK(wav_test_error_has("invalid argument"));
    CHECK_FALSE(whisper_audio_decode_memory(&one, 1, nullptr, &n, nullptr));
}

TEST_CASE("wav: truncations and corruptions never crash") {
    wav_bytes c;
    c.chunk("fmt ", wav_test_fmt_ext(1, 2, 22050, 24, 24)).chunk("odd ", { 1, 2, 3 })
     .chunk("data", std::vector<uint8_t>(6 * 50, 0x40)).chunk("LIST", { 'x', 'y' });
    const std::vector<uint8_t> good = wav_riff(c.b);
    REQUIRE(wav_test_decode(good).ok);

    // every prefix (in a buffer of exactly that size, so a sanitizer sees any overread)
    int n_ok = 0;
    for (size_t len = 0; len <= good.size(); len++) {
        std::vector<uint8_t> cut(good.begin(), good.begin() + len);
        float * pcm = nullptr;
        size_t n = 0;
        if (whisper_audio_decode_memory(cut.data(), cut.size(), &pcm, &n, nullptr)) {
            n_ok++;
            whisper_audio_pcm_free(pcm);
        } else {
            CHECK(strlen(whisper_audio_last_error()) > 0);
        }
    }
    CHECK(n_ok > 0);

    // random byte corruptions in the header area (fixed seed)
    uint32_t rng = 12345;
    auto next = [&rng]() { rng = rng * 1664525u + 1013904223u; return rng >> 8; };
    for (int iter = 0; iter < 3000; iter++) {
        std::vector<uint8_t> bad = good;
        const int n_flips = 1 + next() % 4;
        for (int k = 0; k < n_flips; k++) {
            bad[next() % 100] = (uint8_t) next();
        }
        bad.resize(bad.size() - next() % 16);
        float * pcm = nullptr;
        size_t n = 0;
        if (whisper_audio_decode_memory(bad.data(), bad.size(), &pcm, &n, nullptr)) {
            CHECK(n > 0);
            whisper_audio_pcm_free(pcm);
        }
    }
}

// Issue 7, finding 4: one NaN, inf or 1e30 in a float WAV made the encoder's output NaN.
TEST_CASE("wav: a NaN, infinite or huge float sample is an error that says where it is") {
    // float32 mono, 40000 samples (three 64 KiB blocks), one bad value at sample `at`
    auto f32_file = [](size_t at, float bad) {
        wav_bytes d;
        for (size_t i = 0; i < 40000; i++) d.f32(i == at ? bad : 0.25f * (float) sin(0.01 * (double) i));
        return wav_file(3, 1, 16000, 32, d.b);
    };
    struct bad_case {
        const char * what;
        std::vector<uint8_t> bytes;
        const char * message;   // all after "<memory>: "
    };
    wav_bytes st, d64, d64big;
    st.f32(0.5f).f32(-0.5f).f32(0.1f).f32(-INFINITY).f32(0.0f).f32(0.0f);
    d64.f64(0.5).f64(1e30).f64(0.0);
    d64big.f64(0.5).f64(-0.5).f64(-1e300);   // past float's range: inf once converted
    const std::vector<bad_case> cases = {
        { "f32 NaN in the second block", f32_file(30001, NAN),
          "sample 30001 (channel 1 of 1, at 1.875 s) is NaN: the file is corrupt" },
        { "f32 +inf at 0", f32_file(0, INFINITY),
          "sample 0 (channel 1 of 1, at 0.000 s) is +inf: the file is corrupt" },
        { "f32 -1e5", f32_file(12345, -1e5f),
          "sample 12345 (channel 1 of 1, at 0.772 s) is -100000, far outside the [-1, 1] of audio samples "
          "(the limit is 10000): the file is corrupt or uses another scale; if it is audio, normalise it first "
          "(sox input.wav output.wav norm)" },
        { "f32 stereo, -inf in channel 2", wav_file(3, 2, 16000, 32, st.b),
          "sample 1 (channel 2 of 2, at 0.000 s) is -inf: the file is corrupt" },
        { "f64 1e30", wav_file(3, 1, 16000, 64, d64.b),
          "sample 1 (channel 1 of 1, at 0.000 s) is 1e+30, far outside" },
        { "f64 -1e300", wav_file(3, 1, 8000, 64, d64big.b),
          "sample 2 (channel 1 of 1, at 0.000 s) is -1e+300, far outside" },
    };
    for (const bad_case & b : cases) {
        const std::string what = b.what;
        CAPTURE(what);
        CHECK_FALSE(wav_test_decode(b.bytes).ok);
        const std::string msg = whisper_audio_last_error();
        CHECK(msg.rfind(std::string("<memory>: ") + b.message, 0) == 0);
    }

    // through a file: the message starts with the path, and the stream fails at that block
    const std::string path = test_tmp("nan.wav");
    write_bytes(path, f32_file(30001, NAN));
    const decoded_audio a = decode_file(path);
    CHECK_FALSE(a.ok);
    CHECK(a.error == path + ": sample 30001 (channel 1 of 1, at 1.875 s) is NaN: the file is corrupt");
    remove(path.c_str());

    // clipped mixes go past 1: up to the limit the samples pass as they are
    wav_bytes ok32, ok64;
    ok32.f32(1.5f).f32(-3.0f).f32(10000.0f).f32(-10000.0f);
    ok64.f64(1.5).f64(-3.0).f64(10000.0).f64(-10000.0);
    for (const std::vector<uint8_t> & bytes : { wav_file(3, 1, 16000, 32, ok32.b), wav_file(3, 1, 16000, 64, ok64.b) }) {
        const decoded_audio c = wav_test_decode(bytes);
        REQUIRE_MESSAGE(c.ok, whisper_audio_last_error());
        CHECK(c.pcm == std::vector<float>{ 1.5f, -3.0f, 10000.0f, -10000.0f });
    }
}

// Issue 7, finding 15: an extensible fmt chunk with cbSize 0 said "too small (40 bytes, need 40)".
TEST_CASE("wav: an extensible fmt chunk with a short cbSize says what is wrong") {
    std::vector<uint8_t> fmt = wav_test_fmt_ext(1, 1, 16000, 16, 16);
    fmt[16] = 0;   // cbSize 0, the chunk still 40 bytes
    wav_bytes c;
    c.chunk("fmt ", fmt).chunk("data", wav_s16({ 1, 2 }));
    CHECK_FALSE(wav_test_decode(wav_riff(c.b)).ok);
    CHECK(std::string(whisper_audio_last_error()) ==
          "<memory>: malformed WAVE_FORMAT_EXTENSIBLE fmt chunk: its cbSize field says 0 bytes of extension, "
          "but the extension (valid bits, channel mask, sub-format GUID) needs 22");

    // a chunk that is short in itself still says so
    wav_bytes c2;
    c2.chunk("fmt ", std::vector<uint8_t>(fmt.begin(), fmt.begin() + 24)).chunk("data", wav_s16({ 1, 2 }));
    CHECK_FALSE(wav_test_decode(wav_riff(c2.b)).ok);
    CHECK(std::string(whisper_audio_last_error()) ==
          "<memory>: WAVE_FORMAT_EXTENSIBLE fmt chunk too small (24 bytes, need 40)");
}

// ---- the resampler -------------------------------------------------------------------

static std::vector<float> wav_test_sine(double freq, int rate, size_t n, double amp = 0.5) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = (float) (amp * sin(2 * M_PI * freq * i / rate));
    return x;
}

static std::vector<float> wav_test_resample(const std::vector<float> & x, int rate_in, int rate_out) {
    float * y = nullptr;
    size_t n = 0;
    REQUIRE(whisper_audio_resample(x.data(), x.size(), rate_in, rate_out, &y, &n));
    std::vector<float> v(y, y + n);
    whisper_audio_pcm_free(y);
    return v;
}

TEST_CASE("resample: a 1 kHz sine keeps its frequency, amplitude and phase") {
    for (int rate : { 44100, 48000, 22050, 8000, 11025, 37800, 16001, 96000 }) {
        CAPTURE(rate);
        const std::vector<float> x = wav_test_sine(1000.0, rate, (size_t) rate);    // 1 s
        const std::vector<float> y = wav_test_resample(x, rate, 16000);
        // project the middle 0.5 s (a whole number of 16-sample periods) on sin and cos
        double s = 0, c = 0;
        const size_t i0 = 4000, n = 8000;
        for (size_t i = i0; i < i0 + n; i++) {
            s += y[i] * sin(2 * M_PI * 1000.0 * i / 16000);
            c += y[i] * cos(2 * M_PI * 1000.0 * i / 16000);
        }
        s *= 2.0 / n;
        c *= 2.0 / n;
        CHECK(fabs(s - 0.5) < 0.5e-3);   // amplitude: relative error < 1e-3
        CHECK(fabs(c) < 0.5e-3);         // phase (time alignment)
    }
}

TEST_CASE("resample: content above 8 kHz is rejected, 7 kHz passes") {
    auto rms = [](const std::vector<float> & v, size_t i0, size_t i1) {
        double e = 0;
        for (size_t i = i0; i < i1; i++) e += (double) v[i] * v[i];
        return sqrt(e / (i1 - i0));
    };
    for (int rate : { 44100, 48000 }) {
        CAPTURE(rate);
        const std::vector<float> x = wav_test_sine(10000.0, rate, (size_t) rate);
        const std::vector<float> y = wav_test_resample(x, rate, 16000);
        const double ratio = rms(y, 1000, 15000) / rms(x, rate / 16, rate - rate / 16);
        MESSAGE(rate << " Hz, 10 kHz sine: output/input RMS " << ratio);
        CHECK(ratio < 1e-3);

        const std::vector<float> z = wav_test_sine(8200.0, rate, (size_t) rate); // just past Nyquist
        CHECK(rms(wav_test_resample(z, rate, 16000), 1000, 15000) / rms(z, 100, z.size() - 100) < 1e-3);
    }
    {
        const std::vector<float> x = wav_test_sine(7000.0, 48000, 48000);
        const std::vector<float> y = wav_test_resample(x, 48000, 16000);
        const double gain = rms(y, 1000, 15000) / rms(x, 3000, 45000);
        MESSAGE("48 kHz, 7 kHz sine: gain " << gain);
        CHECK(fabs(gain - 1.0) < 0.01);
    }
}

// Issue 7, finding 16: rates whose polyphase table would be too large (16001, 44101,
// 999983 Hz: L = 16000 phases) took 17 s for 20 s of audio. They now interpolate between
// the rows of a smaller table; the same accuracy checks as the exact table's above.
TEST_CASE("resample: odd rates (interpolated phases) keep 1 kHz and 7 kHz, reject 8.2 and 10 kHz") {
    auto rms = [](const std::vector<float> & v, size_t i0, size_t i1) {
        double e = 0;
        for (size_t i = i0; i < i1; i++) e += (double) v[i] * v[i];
        return sqrt(e / (i1 - i0));
    };
    for (int rate : { 16001, 44101, 999983 }) {
        CAPTURE(rate);
        // 1 kHz: amplitude and phase (projection on sin and cos over 0.5 s)
        const std::vector<float> y = wav_test_resample(wav_test_sine(1000.0, rate, (size_t) rate), rate, 16000);
        REQUIRE(y.size() == 16000);
        double s = 0, c = 0;
        for (size_t i = 4000; i < 12000; i++) {
            s += y[i] * sin(2 * M_PI * 1000.0 * i / 16000);
            c += y[i] * cos(2 * M_PI * 1000.0 * i / 16000);
        }
        CHECK(fabs(s * 2.0 / 8000 - 0.5) < 0.5e-3);
        CHECK(fabs(c * 2.0 / 8000) < 0.5e-3);

        // 7 kHz passes with its gain, and nothing else comes out: the residual after removing
        // the 7 kHz sine (projections over 3500 whole periods) shows any error in the
        // sub-sample timing (a phase error of 1 / P input samples leaves 1e-3)
        const std::vector<float> x7 = wav_test_sine(7000.0, rate, (size_t) rate);
        const std::vector<float> y7 = wav_test_resample(x7, rate, 16000);
        const double gain = rms(y7, 1000, 15000) / rms(x7, rate / 16, rate - rate / 16);
        double s7 = 0, c7 = 0, res = 0;
        for (size_t i = 4000; i < 12000; i++) {
            s7 += y7[i] * sin(2 * M_PI * 7000.0 * i / 16000) * (2.0 / 8000);
            c7 += y7[i] * cos(2 * M_PI * 7000.0 * i / 16000) * (2.0 / 8000);
        }
        for (size_t i = 4000; i < 12000; i++) {
            const double e = y7[i] - s7 * sin(2 * M_PI * 7000.0 * i / 16000) - c7 * cos(2 * M_PI * 7000.0 * i / 16000);
            res += e * e;
        }
        res = sqrt(res / 8000) / (0.5 / sqrt(2.0));
        MESSAGE(rate << " Hz, 7 kHz sine: gain " << gain << ", residual " << res);
        CHECK(fabs(gain - 1.0) < 0.01);
        CHECK(res < 1e-4);

        if (rate > 20000) {   // (16001 Hz holds nothing above 8 kHz)
            for (double f : { 8200.0, 10000.0 }) {
                const std::vector<float> x = wav_test_sine(f, rate, (size_t) rate);
                const double ratio = rms(wav_test_resample(x, rate, 16000), 1000, 15000) / rms(x, rate / 16, rate - rate / 16);
                MESSAGE(rate << " Hz, " << f << " Hz sine: output/input RMS " << ratio);
                CHECK(ratio < 1e-3);
            }
        }
    }
}

TEST_CASE("resample: lengths are round(n_in * out / in)") {
    struct len_case { size_t n_in; int in, out; size_t n_out; };
    const len_case cases[] = {
        { 309414, 44100, 16000, 112259 }, { 154707, 22050, 16000, 112259 }, { 56130, 8000, 16000, 112260 },
        { 336777, 48000, 16000, 112259 }, { 3, 48000, 16000, 1 }, { 1, 44100, 16000, 0 },
        { 2, 44100, 16000, 1 }, { 1, 8000, 16000, 2 }, { 11025, 11025, 16000, 16000 }, { 7, 3000, 2000, 5 },
        { 0, 44100, 16000, 0 },
    };
    for (const len_case & lc : cases) {
        CAPTURE(lc.n_in);
        CAPTURE(lc.in);
        std::vector<float> x(lc.n_in, 0.1f);
        float * y = nullptr;
        size_t n = 99;
        REQUIRE(whisper_audio_resample(x.data(), x.size(), lc.in, lc.out, &y, &n));
        CHECK(n == lc.n_out);
        whisper_audio_pcm_free(y);
    }
    float * y = nullptr;
    size_t n = 0;
    const float one = 1.0f;
    CHECK_FALSE(whisper_audio_resample(&one, 1, 0, 16000, &y, &n));
    CHECK(wav_test_error_has("sample rate"));
    CHECK_FALSE(whisper_audio_resample(&one, 1, 16000, -1, &y, &n));
}

TEST_CASE("resample: 16 kHz to 16 kHz is a copy") {
    std::vector<float> x = wav_test_sine(440.0, 16000, 1001);
    x[17] = 1e30f;
    CHECK(wav_test_resample(x, 16000, 16000) == x);
}
