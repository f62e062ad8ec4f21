// test-pipeline.cpp - the library's pipeline (whisper_audio_pipeline_*): rows against the
// one-call API, in input order, whatever the block sizes and the number of encoders;
// pooling, --no-pad windows and f16 rows; its errors. On a GPU: the log-mel op against the
// CPU log-mel, and the CUDA pipeline (GPU log-mel, f16 download, two encoders on one GPU).
#include <doctest/doctest.h>

#include "test-util.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <memory>
#include <string>
#include <vector>

namespace {

const size_t N = WHISPER_AUDIO_N_SAMPLES;

struct model_ptr {
    whisper_audio_model * m;
    explicit model_ptr(const char * path) : m(whisper_audio_model_load(path)) { REQUIRE_MESSAGE(m, whisper_audio_last_error()); }
    ~model_ptr() { whisper_audio_model_free(m); }
};

whisper_audio_encoder * make_encoder(const whisper_audio_model * model, whisper_audio_device device, int max_batch,
                                     int n_threads = 1) {
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = device;
    p.max_batch = max_batch;
    p.n_threads = n_threads;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    return enc;
}

// What on_rows saw: each window's description and its rows as bytes.
struct seen_window {
    whisper_audio_rows r;
    std::vector<uint8_t> bytes;
};

struct collector {
    std::vector<seen_window> windows;
    int stop_after = -1;           // return false at this window
    static bool on_rows(const whisper_audio_rows * r, void * user) {
        collector * c = (collector *)user;
        if ((int)c->windows.size() == c->stop_after) return false;
        const size_t bytes = (size_t)r->n_rows * r->n_state * (r->f16 ? 2 : 4);
        c->windows.push_back({*r, std::vector<uint8_t>((const uint8_t *)r->data, (const uint8_t *)r->data + bytes)});
        c->windows.back().r.data = nullptr;
        return true;
    }
};

// Every input through one pipeline of these encoders, pushed in blocks of `block` samples.
collector run_pipeline(std::vector<whisper_audio_encoder *> encs, const std::vector<std::vector<float>> & inputs,
                       whisper_audio_pipeline_params pp, size_t block) {
    collector c;
    pp.on_rows = collector::on_rows;
    pp.user = &c;
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(encs.data(), (int)encs.size(), pp);
    REQUIRE_MESSAGE(p, whisper_audio_last_error());
    for (const std::vector<float> & in : inputs) {
        for (size_t at = 0; at < in.size(); at += block)
            REQUIRE_MESSAGE(whisper_audio_pipeline_push(p, in.data() + at, std::min(block, in.size() - at)), whisper_audio_last_error());
        REQUIRE_MESSAGE(whisper_audio_pipeline_end_input(p), whisper_audio_last_error());
    }
    REQUIRE_MESSAGE(whisper_audio_pipeline_finish(p), whisper_audio_last_error());
    whisper_audio_pipeline_free(p);
    return c;
}

std::vector<float> as_f32(const seen_window & w) {
    std::vector<float> v((size_t)w.r.n_rows * w.r.n_state);
    if (w.r.f16) vt_convert(v.data(), VT_TYPE_F32, w.bytes.data(), VT_TYPE_F16, v.size());
    else memcpy(v.data(), w.bytes.data(), v.size() * sizeof(float));
    return v;
}

// Inputs: speech (under 30 s), 70 s (3 windows), then speech again.
std::vector<std::vector<float>> test_inputs() {
    const decoded_audio speech = decode_file(test_data("audio/speech_16k.wav"));
    const decoded_audio longer = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(speech.ok);
    REQUIRE(longer.ok);
    return {speech.pcm, longer.pcm, speech.pcm};
}

// Window w of pcm (the last zero-padded): its log-mel, encoded alone with n_frames frames.
std::vector<float> encode_window(whisper_audio_encoder * enc, const whisper_audio_model * model, const std::vector<float> & pcm,
                                 size_t w, int n_frames = WHISPER_AUDIO_N_FRAMES) {
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
    std::vector<float> mel((size_t)hp->n_mels * WHISPER_AUDIO_N_FRAMES), packed((size_t)hp->n_mels * n_frames);
    REQUIRE(whisper_audio_log_mel(model, pcm.data() + w * N, std::min(N, pcm.size() - w * N), mel.data()));
    for (int m = 0; m < hp->n_mels; m++)
        std::copy_n(mel.begin() + (size_t)m * WHISPER_AUDIO_N_FRAMES, n_frames, packed.begin() + (size_t)m * n_frames);
    std::vector<float> out((size_t)(n_frames / 2) * hp->n_state);
    REQUIRE_MESSAGE(whisper_audio_encode_mel_frames(enc, packed.data(), 1, n_frames, out.data()), whisper_audio_last_error());
    return out;
}

} // namespace

TEST_CASE("pipeline: rows in input order, equal to each window encoded alone, whatever the blocks and encoders") {
    model_ptr model("build/micro-80-f32.gguf");
    const std::vector<std::vector<float>> inputs = test_inputs();
    whisper_audio_encoder * a = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 2);
    whisper_audio_encoder * b = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 2);
    const whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();

    const collector one = run_pipeline({a}, inputs, pp, 12345);
    REQUIRE(one.windows.size() == 5);
    size_t k = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
        for (size_t w = 0; w < whisper_audio_n_windows(inputs[i].size()); w++, k++) {
            CAPTURE(i);
            CAPTURE(w);
            const whisper_audio_rows & r = one.windows[k].r;
            CHECK(r.input == (int64_t)i);
            CHECK(r.window == (int64_t)w);
            CHECK(r.samples == std::min(N, inputs[i].size() - w * N));
            CHECK(r.audio_positions == whisper_audio_n_positions(r.samples));
            CHECK(r.n_rows == 1500);
            CHECK(r.n_state == 128);
            CHECK(!r.f16);
            CHECK(as_f32(one.windows[k]) == encode_window(a, model.m, inputs[i], w));   // bitwise on the CPU
        }
    }

    // other blocks, two encoders taking turns: the same bytes; each encoder ran some batches
    whisper_audio_encoder_reset_timings(a);
    const collector two = run_pipeline({a, b}, inputs, pp, N + 1);
    REQUIRE(two.windows.size() == one.windows.size());
    for (size_t i = 0; i < one.windows.size(); i++) CHECK(two.windows[i].bytes == one.windows[i].bytes);
    const whisper_audio_timings ta = whisper_audio_encoder_timings(a), tb = whisper_audio_encoder_timings(b);
    CHECK(ta.n_windows + tb.n_windows == 5);
    CHECK(ta.n_batches + tb.n_batches == 3);      // [s, l0] [l1, l2] [s]: inputs share batches
    whisper_audio_encoder_free(a);
    whisper_audio_encoder_free(b);
}

TEST_CASE("pipeline: a dropped input gives no rows, counts as an input, and leaves the others' rows as they were") {
    const decoded_audio speech = decode_file(test_data("audio/speech_16k.wav"));
    const decoded_audio longer = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(speech.ok);
    REQUIRE(longer.ok);
    // a Whisper model (windows cut as the audio comes, batches of 1 already with the workers
    // when the input is dropped) and Voxtral (the input held, its first pass on the device)
    for (const char * path : {"build/micro-80-f32.gguf", "build/tower-voxtral-f32.gguf"}) {
        CAPTURE(path);
        model_ptr model(path);
        whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 1);
        const whisper_audio_pipeline_params pp0 = whisper_audio_pipeline_default_params();
        const collector alone = run_pipeline({enc}, {speech.pcm}, pp0, 12345);
        REQUIRE(!alone.windows.empty());

        collector c;
        whisper_audio_pipeline_params pp = pp0;
        pp.on_rows = collector::on_rows;
        pp.user = &c;
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE_MESSAGE(p, whisper_audio_last_error());
        // input 0: 65 s of the 70, in blocks, then dropped (a decode error half-way); input 1:
        // dropped before any sample; input 2: speech, whole
        const size_t part = 65 * WHISPER_AUDIO_SAMPLE_RATE;
        for (size_t at = 0; at < part; at += 40000)
            REQUIRE_MESSAGE(whisper_audio_pipeline_push(p, longer.pcm.data() + at, std::min<size_t>(40000, part - at)),
                            whisper_audio_last_error());
        REQUIRE_MESSAGE(whisper_audio_pipeline_drop_input(p), whisper_audio_last_error());
        REQUIRE_MESSAGE(whisper_audio_pipeline_drop_input(p), whisper_audio_last_error());
        REQUIRE(whisper_audio_pipeline_push(p, speech.pcm.data(), speech.pcm.size()));
        REQUIRE_MESSAGE(whisper_audio_pipeline_end_input(p), whisper_audio_last_error());
        REQUIRE_MESSAGE(whisper_audio_pipeline_finish(p), whisper_audio_last_error());
        whisper_audio_pipeline_free(p);
        REQUIRE(c.windows.size() == alone.windows.size());
        for (size_t i = 0; i < c.windows.size(); i++) {
            CHECK(c.windows[i].r.input == 2);
            CHECK(c.windows[i].r.window == alone.windows[i].r.window);
            CHECK(c.windows[i].bytes == alone.windows[i].bytes);
        }
        CHECK(!whisper_audio_pipeline_drop_input(nullptr));
        whisper_audio_encoder_free(enc);
    }
}

// Polls until `want` inputs are complete (bounded: 60 s), as a server between requests.
int64_t poll_until(whisper_audio_pipeline * p, int64_t want) {
    int64_t done = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((done = whisper_audio_pipeline_poll(p, 50)) >= 0 && done < want && std::chrono::steady_clock::now() < until) {}
    return done;
}

TEST_CASE("pipeline: flush and poll run inputs as they come, without finish; cancel_input skips an ended input") {
    const std::vector<std::vector<float>> inputs = test_inputs();   // speech, 70 s (3 windows), speech
    // a Whisper model (windows cut as audio comes) and Voxtral (each input held, then its chunks)
    for (const char * path : {"build/micro-80-f32.gguf", "build/tower-voxtral-f32.gguf"}) {
        CAPTURE(path);
        model_ptr model(path);
        // batches of 8: every window of the three inputs below fits in the one being filled
        whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 8);
        const whisper_audio_pipeline_params pp0 = whisper_audio_pipeline_default_params();
        const collector all = run_pipeline({enc}, inputs, pp0, 12345);      // the rows, by finish
        auto rows_of = [](const collector & c, int64_t input) {
            std::vector<const seen_window *> v;
            for (const seen_window & w : c.windows) if (w.r.input == input) v.push_back(&w);
            return v;
        };

        collector c;
        whisper_audio_pipeline_params pp = pp0;
        pp.on_rows = collector::on_rows;
        pp.user = &c;
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE_MESSAGE(p, whisper_audio_last_error());
        CHECK(whisper_audio_pipeline_poll(p, 0) == 0);
        // each input alone in a short batch: pushed, ended, flushed, polled until complete
        for (int64_t i = 0; i < 3; i++) {
            CAPTURE(i);
            REQUIRE(whisper_audio_pipeline_push(p, inputs[(size_t)i].data(), inputs[(size_t)i].size()));
            // mid-input, a flush is refused and the input goes on
            CHECK(!whisper_audio_pipeline_flush(p));
            CHECK(std::string(whisper_audio_last_error()).find("was not ended") != std::string::npos);
            REQUIRE_MESSAGE(whisper_audio_pipeline_end_input(p), whisper_audio_last_error());
            REQUIRE_MESSAGE(whisper_audio_pipeline_flush(p), whisper_audio_last_error());
            REQUIRE(poll_until(p, i + 1) == i + 1);
            const auto got = rows_of(c, i), want = rows_of(all, i);
            REQUIRE(got.size() == want.size());
            for (size_t k = 0; k < got.size(); k++) CHECK(got[k]->bytes == want[k]->bytes);
        }
        // cancel: the 70 s input (3 windows, still in the batch being filled) between two speech
        // inputs: the later input's window moves up in that batch
        c.windows.clear();
        for (const std::vector<float> & in : inputs) {
            REQUIRE(whisper_audio_pipeline_push(p, in.data(), in.size()));
            REQUIRE(whisper_audio_pipeline_end_input(p));
        }
        REQUIRE(whisper_audio_pipeline_push(p, inputs[0].data(), 1000));
        CHECK(!whisper_audio_pipeline_cancel_input(p, 6));              // the current input: drop_input's
        CHECK(std::string(whisper_audio_last_error()).find("has not ended") != std::string::npos);
        REQUIRE_MESSAGE(whisper_audio_pipeline_drop_input(p), whisper_audio_last_error());
        REQUIRE_MESSAGE(whisper_audio_pipeline_cancel_input(p, 4), whisper_audio_last_error());
        CHECK(whisper_audio_pipeline_cancel_input(p, 0));               // complete already: nothing to do
        REQUIRE_MESSAGE(whisper_audio_pipeline_finish(p), whisper_audio_last_error());
        CHECK(whisper_audio_pipeline_poll(p, 0) == 7);
        CHECK(rows_of(c, 4).empty());
        CHECK(rows_of(c, 6).empty());
        for (int64_t i : {3, 5}) {
            const auto got = rows_of(c, i), want = rows_of(all, i - 3);
            REQUIRE(got.size() == want.size());
            for (size_t k = 0; k < got.size(); k++) CHECK(got[k]->bytes == want[k]->bytes);
        }
        whisper_audio_pipeline_free(p);
        CHECK(whisper_audio_pipeline_poll(nullptr, 0) == -1);
        CHECK(!whisper_audio_pipeline_flush(nullptr));
        CHECK(!whisper_audio_pipeline_cancel_input(nullptr, 0));
        whisper_audio_encoder_free(enc);
    }
}

TEST_CASE("pipeline: busy_ms tells how long the encoders have work, from their latest batches' times") {
    const std::vector<std::vector<float>> inputs = test_inputs();
    model_ptr model("build/micro-80-f32.gguf");
    whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 8);
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, whisper_audio_pipeline_default_params());
    REQUIRE_MESSAGE(p, whisper_audio_last_error());
    CHECK(whisper_audio_pipeline_busy_ms(p) == 0.0);                // idle
    // a batch of 8 speech windows, twice: the first times the shape, the second is expected to take
    // as long, so while it is queued or running the encoder is busy for a while yet
    for (int round = 0; round < 2; round++) {
        CAPTURE(round);
        for (int i = 0; i < 8; i++) {
            REQUIRE(whisper_audio_pipeline_push(p, inputs[0].data(), inputs[0].size()));
            REQUIRE(whisper_audio_pipeline_end_input(p));
        }
        const auto t0 = std::chrono::steady_clock::now();
        const double busy = whisper_audio_pipeline_busy_ms(p);         // the full batch has gone to the worker
        if (round == 0) CHECK(busy == 0.0);                            // no batch timed yet
        REQUIRE(poll_until(p, 8 * (round + 1)) == 8 * (round + 1));
        const double took = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (round == 1) {
            CHECK(busy > 0.0);
            CHECK(busy < 10 * took);                                   // of the batch's own order
        }
        CHECK(whisper_audio_pipeline_busy_ms(p) == 0.0);            // done: idle again
    }
    whisper_audio_pipeline_free(p);
    CHECK(whisper_audio_pipeline_busy_ms(nullptr) == -1.0);
    whisper_audio_encoder_free(enc);
}

namespace {

// One input pushed into a streaming pipeline in pieces of `piece` samples, piece k pushed at
// k * piece / 16 kHz / speedup after the start (speedup 0: as fast as the calls go), the rows
// polled for between pieces. Per window: when the push that carried its last sample began, and
// when its rows came (seconds since the start). The first `complete` windows (those whose last
// sample comes before the input ends) are waited for before end_input.
struct streamed {
    collector c;
    std::vector<double> last_sample_s, rows_s;
    double end_input_s = 0;                       // when end_input was called
};

streamed run_stream(whisper_audio_encoder * enc, const std::vector<float> & pcm, whisper_audio_pipeline_params pp,
                    size_t piece, double speedup, size_t complete) {
    streamed st;
    const auto t0 = std::chrono::steady_clock::now();
    auto now_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    struct ctx { streamed * st; std::function<double()> now; } cx{&st, now_s};
    pp.stream = true;
    pp.user = &cx;
    pp.on_rows = [](const whisper_audio_rows * r, void * user) {
        ctx * x = (ctx *)user;
        x->st->rows_s.push_back(x->now());
        return collector::on_rows(r, &x->st->c);
    };
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
    REQUIRE_MESSAGE(p, whisper_audio_last_error());
    const size_t W = N;
    for (size_t at = 0; at < pcm.size(); at += piece) {
        const size_t k = std::min(piece, pcm.size() - at);
        const double due = speedup > 0 ? (double)(at + k) / WHISPER_AUDIO_SAMPLE_RATE / speedup : 0.0;
        while (speedup > 0 && now_s() < due) {       // the rows that come meanwhile, as a live caller waits
            const int ms = (int)std::ceil((due - now_s()) * 1000.0);
            REQUIRE(whisper_audio_pipeline_poll(p, std::max(1, ms)) >= 0);
        }
        if ((at + k) / W > at / W) st.last_sample_s.push_back(now_s());   // this piece ends a window
        REQUIRE_MESSAGE(whisper_audio_pipeline_push(p, pcm.data() + at, k), whisper_audio_last_error());
    }
    // the windows whose last sample is in: their rows come before the input ends
    for (int spins = 0; st.c.windows.size() < complete && spins < 3000; spins++) REQUIRE(whisper_audio_pipeline_poll(p, 10) >= 0);
    REQUIRE(st.c.windows.size() >= complete);
    st.end_input_s = now_s();
    REQUIRE_MESSAGE(whisper_audio_pipeline_end_input(p), whisper_audio_last_error());
    REQUIRE_MESSAGE(whisper_audio_pipeline_finish(p), whisper_audio_last_error());
    whisper_audio_pipeline_free(p);
    return st;
}

} // namespace

TEST_CASE("pipeline: stream: each window's rows come while the input arrives, within a forward and 50 ms of its last sample, "
          "the whole input's bit for bit") {
    const decoded_audio longer = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(longer.ok);
    // 60 s: two whole windows, both complete before the input ends; 70 s: and a short last one
    const std::vector<float> sixty(longer.pcm.begin(), longer.pcm.begin() + 2 * N);
    model_ptr model("build/micro-80-f32.gguf");
    whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 8);
    const whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    const collector whole = run_pipeline({enc}, {longer.pcm}, pp, longer.pcm.size());   // batches of 8, one push

    // one forward of a window (its log-mel and encoder), the slowest of three
    double forward_s = 0;
    std::vector<float> out((size_t)1500 * 128);
    for (int i = 0; i < 3; i++) {
        const auto t = std::chrono::steady_clock::now();
        REQUIRE(whisper_audio_encode_pcm(enc, longer.pcm.data(), N, out.data()));
        forward_s = std::max(forward_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }

    // 20 ms pieces faster than real time, at most 50x, so that a window's audio takes three forwards
    // (a window does not wait for the one before it: 0.6 s at 50x, many forwards of this model; a
    // sanitizer's slower forward slows the pace); a forward: the slower of the one above and the
    // stream's own mean. The latency is a wall-clock figure that other work on the machine (a
    // parallel test part) can stretch: up to three runs, the first in time counts; the order, the
    // records and the bits are checked on every run.
    const double speed = std::min(50.0, WHISPER_AUDIO_N_SAMPLES / (double)WHISPER_AUDIO_SAMPLE_RATE / (3.0 * forward_s));
    bool in_time = false;
    for (int attempt = 0; attempt < 3 && !in_time; attempt++) {
        whisper_audio_encoder_reset_timings(enc);
        const streamed st = run_stream(enc, sixty, pp, 320, speed, 2);
        const whisper_audio_timings t = whisper_audio_encoder_timings(enc);
        REQUIRE(t.n_windows == 2);
        const double fwd = std::max(forward_s, (t.mel_ms + t.encode_ms) / 1000.0 / (double)t.n_windows);
        REQUIRE(st.c.windows.size() == 2);
        REQUIRE(st.last_sample_s.size() == 2);
        in_time = true;
        for (size_t w = 0; w < 2; w++) {
            CAPTURE(w);
            const double latency = st.rows_s[w] - st.last_sample_s[w];
            MESSAGE("stream: window " << w << "'s rows " << latency * 1000.0 << " ms after its last sample (a forward: "
                    << fwd * 1000.0 << " ms; 20 ms pieces at " << speed << "x real time; run " << attempt + 1 << ")");
            CHECK(st.rows_s[w] < st.end_input_s);                 // before the input ended
            in_time = in_time && latency <= fwd + 0.050;
            CHECK(st.c.windows[w].r.window == (int64_t)w);
            CHECK(st.c.windows[w].bytes == whole.windows[w].bytes);   // bitwise on the CPU
        }
    }
    CHECK_MESSAGE(in_time, "no run's windows came within a forward + 50 ms of their last samples");

    // as fast as the calls go, in pieces that straddle the windows, the 70 s input and its short
    // last window: every window's rows and records as the whole input's
    for (size_t piece : {(size_t)320, (size_t)N + 7}) {
        CAPTURE(piece);
        const streamed fast = run_stream(enc, longer.pcm, pp, piece, 0.0, 2);
        REQUIRE(fast.c.windows.size() == whole.windows.size());
        for (size_t w = 0; w < whole.windows.size(); w++) {
            CHECK(fast.c.windows[w].bytes == whole.windows[w].bytes);
            CHECK(fast.c.windows[w].r.samples == whole.windows[w].r.samples);
            CHECK(fast.c.windows[w].r.audio_positions == whole.windows[w].r.audio_positions);
        }
    }
    // pooled and --no-pad rows stream too
    for (bool pool : {true, false}) {
        whisper_audio_pipeline_params q = pp;
        if (pool) q.pool = WHISPER_AUDIO_POOL_MEAN; else q.no_pad = true;
        const collector want = run_pipeline({enc}, {longer.pcm}, q, longer.pcm.size());
        const streamed got = run_stream(enc, longer.pcm, q, 4000, 0.0, 2);
        REQUIRE(got.c.windows.size() == want.windows.size());
        for (size_t w = 0; w < want.windows.size(); w++) CHECK(got.c.windows[w].bytes == want.windows[w].bytes);
    }
    whisper_audio_encoder_free(enc);
}

TEST_CASE("pipeline: stream: the towers with windows of their own stream their tokens bit for bit; those with one "
          "log-mel over the whole input are refused, saying why") {
    const decoded_audio longer = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(longer.ok);
    for (const char * name : {"qwen2a", "af3", "mflamingo", "glmasr", "qwen25o", "minicpmo", "kimiaudio", "stepaudio2", "meralion"}) {
        const std::string path = std::string("build/tower-") + name + "-f32.gguf";
        CAPTURE(path);
        model_ptr model(path.c_str());
        whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 4);
        const whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
        whisper_audio_pipeline_params sp = pp;
        sp.stream = true;
        CHECK(whisper_audio_can_stream(model.m, whisper_audio_encoder_default_params(), sp));
        const collector whole = run_pipeline({enc}, {longer.pcm}, pp, longer.pcm.size());
        // the windows of a whole window's samples (the first's, of 70 s) come before the input ends
        size_t complete = 0;
        while (complete < whole.windows.size() && whole.windows[complete].r.samples == whole.windows[0].r.samples) complete++;
        const streamed st = run_stream(enc, longer.pcm, pp, 320, 0.0, complete);
        REQUIRE(st.c.windows.size() == whole.windows.size());
        for (size_t w = 0; w < whole.windows.size(); w++) {
            CHECK(st.c.windows[w].r.n_rows == whole.windows[w].r.n_rows);
            CHECK(st.c.windows[w].bytes == whole.windows[w].bytes);
        }
        whisper_audio_encoder_free(enc);
    }
    for (const char * name : {"voxtral", "ultravox", "qwen3a", "qwen3asr"}) {
        const std::string path = std::string("build/tower-") + name + "-f32.gguf";
        CAPTURE(path);
        model_ptr model(path.c_str());
        whisper_audio_pipeline_params sp = whisper_audio_pipeline_default_params();
        sp.stream = true;
        CHECK(!whisper_audio_can_stream(model.m, whisper_audio_encoder_default_params(), sp));
        CHECK(std::string(whisper_audio_last_error()).find("log-mel is one over the whole input") != std::string::npos);
        whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 1);
        CHECK(whisper_audio_pipeline_init(&enc, 1, sp) == nullptr);
        const std::string msg = whisper_audio_last_error();
        CHECK(msg.find("whisper_audio_pipeline_init: ") == 0);
        CHECK(msg.find("cannot stream") != std::string::npos);
        // the encoder was given back: a pipeline without stream takes it
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, whisper_audio_pipeline_default_params());
        CHECK(p != nullptr);
        whisper_audio_pipeline_free(p);
        whisper_audio_encoder_free(enc);
    }
    // a whole-input tower's model gives Whisper windows when pooled: those stream
    model_ptr voxtral("build/tower-voxtral-f32.gguf");
    whisper_audio_pipeline_params sp = whisper_audio_pipeline_default_params();
    sp.stream = true;
    sp.pool = WHISPER_AUDIO_POOL_MEAN;
    CHECK(whisper_audio_can_stream(voxtral.m, whisper_audio_encoder_default_params(), sp));
    CHECK(!whisper_audio_can_stream(nullptr, whisper_audio_encoder_default_params(), sp));
}

TEST_CASE("pipeline: stream: a causal tower (Voxtral Realtime) gives each token as its frames are in, within a step "
          "and 50 ms of its last sample, the whole input's tokens bit for bit") {
    const decoded_audio speech = decode_file(test_data("audio/speech_16k.wav"));
    REQUIRE(speech.ok);
    model_ptr model("build/tower-realtime-f32.gguf");
    whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 1);
    const whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    whisper_audio_pipeline_params sp = pp;
    sp.stream = true;
    CHECK(whisper_audio_can_stream(model.m, whisper_audio_encoder_default_params(), sp));
    const collector whole = run_pipeline({enc}, {speech.pcm}, pp, speech.pcm.size());
    std::vector<uint8_t> want;
    for (const auto & w : whole.windows) want.insert(want.end(), w.bytes.begin(), w.bytes.end());

    // 20 ms pieces at 4x real time: each push's tokens come in that push (a causal step of a
    // token's 8 frames), within that push's own forward (the encoder's time in it) + 50 ms
    whisper_audio_encoder_reset_timings(enc);
    streamed st;
    const auto t0 = std::chrono::steady_clock::now();
    auto now_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    struct ctx { streamed * st; std::function<double()> now; } cx{&st, now_s};
    sp.user = &cx;
    sp.on_rows = [](const whisper_audio_rows * r, void * user) {
        ctx * x = (ctx *)user;
        x->st->rows_s.push_back(x->now());
        return collector::on_rows(r, &x->st->c);
    };
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, sp);
    REQUIRE_MESSAGE(p, whisper_audio_last_error());
    const size_t piece = 320;
    double worst = 0, worst_over = -1;           // the latest rows after their push began; over its forward
    size_t before_end = 0;
    for (size_t at = 0; at < speech.pcm.size(); at += piece) {
        const size_t k = std::min(piece, speech.pcm.size() - at);
        while (now_s() < (double)(at + k) / WHISPER_AUDIO_SAMPLE_RATE / 4.0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        const double start = now_s(), encoded_ms = whisper_audio_encoder_timings(enc).encode_ms;
        const size_t had = st.rows_s.size();
        REQUIRE_MESSAGE(whisper_audio_pipeline_push(p, speech.pcm.data() + at, k), whisper_audio_last_error());
        const double forward_s = (whisper_audio_encoder_timings(enc).encode_ms - encoded_ms) / 1000.0;
        for (size_t i = had; i < st.rows_s.size(); i++) {
            worst = std::max(worst, st.rows_s[i] - start);
            worst_over = std::max(worst_over, st.rows_s[i] - start - forward_s);
        }
        before_end = st.c.windows.size();
    }
    REQUIRE_MESSAGE(whisper_audio_pipeline_end_input(p), whisper_audio_last_error());
    REQUIRE_MESSAGE(whisper_audio_pipeline_finish(p), whisper_audio_last_error());
    whisper_audio_pipeline_free(p);
    std::vector<uint8_t> got;
    size_t tokens = 0;
    for (const auto & w : st.c.windows) { got.insert(got.end(), w.bytes.begin(), w.bytes.end()); tokens += w.r.n_rows; }
    MESSAGE("stream (Voxtral Realtime): " << tokens << " tokens in " << st.c.windows.size() << " records, " << before_end
            << " of them before the input ended; a token's rows at most " << worst * 1000.0 << " ms after its push began, "
            << worst_over * 1000.0 << " ms past that push's forward");
    CHECK(got == want);                                        // bitwise on the CPU
    CHECK(before_end >= st.c.windows.size() - 2);              // all but the end's padding frames, as they came
    CHECK(worst_over <= 0.050);
    whisper_audio_encoder_free(enc);
}

TEST_CASE("pipeline: pooling, --no-pad windows and f16 rows come from the library's rules") {
    model_ptr model("build/micro-80-f32.gguf");
    const std::vector<std::vector<float>> inputs = test_inputs();
    whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 4, 2);
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    const collector full = run_pipeline({enc}, inputs, pp, 1 << 16);

    pp.pool = WHISPER_AUDIO_POOL_MEAN;
    const collector pooled = run_pipeline({enc}, inputs, pp, 1 << 16);
    pp.f16 = true;
    const collector pooled16 = run_pipeline({enc}, inputs, pp, 1 << 16);
    pp.pool = WHISPER_AUDIO_POOL_NONE;
    const collector full16 = run_pipeline({enc}, inputs, pp, 1 << 16);
    REQUIRE(pooled.windows.size() == full.windows.size());
    for (size_t k = 0; k < full.windows.size(); k++) {
        CAPTURE(k);
        const std::vector<float> rows = as_f32(full.windows[k]);
        std::vector<float> mean(128);
        REQUIRE(whisper_audio_pool_mean(rows.data(), 1500, 128, full.windows[k].r.samples, mean.data()));
        CHECK(pooled.windows[k].r.n_rows == 1);
        CHECK(as_f32(pooled.windows[k]) == mean);
        std::vector<uint16_t> h(mean.size()), h_full(rows.size());
        vt_convert(h.data(), VT_TYPE_F16, mean.data(), VT_TYPE_F32, h.size());
        vt_convert(h_full.data(), VT_TYPE_F16, rows.data(), VT_TYPE_F32, h_full.size());
        CHECK(pooled16.windows[k].r.f16);
        CHECK(memcmp(pooled16.windows[k].bytes.data(), h.data(), h.size() * 2) == 0);
        CHECK(memcmp(full16.windows[k].bytes.data(), h_full.data(), h_full.size() * 2) == 0);
    }

    // --no-pad: each input's short last window alone, unpadded; full windows as before
    pp = whisper_audio_pipeline_default_params();
    pp.no_pad = true;
    const collector nopad = run_pipeline({enc}, inputs, pp, 1 << 16);
    REQUIRE(nopad.windows.size() == full.windows.size());
    for (size_t k = 0; k < full.windows.size(); k++) {
        CAPTURE(k);
        const whisper_audio_rows & r = nopad.windows[k].r;
        const int n_pos = whisper_audio_n_positions(r.samples);
        CHECK(r.n_rows == (r.samples < N ? n_pos : 1500));
        CHECK(r.audio_positions == n_pos);
        CHECK(as_f32(nopad.windows[k]) == encode_window(enc, model.m, inputs[r.input], r.window, 2 * r.n_rows));
    }
    whisper_audio_encoder_free(enc);
}

TEST_CASE("pipeline: with the windows known ahead (n_windows) the batches are evened out, the rows the same") {
    model_ptr model("build/micro-80-f32.gguf");
    const std::vector<std::vector<float>> inputs = test_inputs();      // 5 windows
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    CHECK(pp.n_windows == 0);

    // the batch for n windows at max_batch B: ceil(B) batches of equal size, the last shorter by the rounding
    struct { size_t n; int max_batch, batch; } cases[] = {
        {0, 8, 8}, {1, 8, 1}, {5, 4, 3}, {8, 8, 8}, {9, 8, 5}, {12, 8, 6}, {120, 32, 30}, {97, 32, 25}, {1000, 256, 250},
    };
    for (const auto & c : cases) {
        CAPTURE(c.n);
        CAPTURE(c.max_batch);
        whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, c.max_batch);
        pp.n_windows = c.n;
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE_MESSAGE(p, whisper_audio_last_error());
        CHECK(whisper_audio_pipeline_batch(p) == c.batch);
        CHECK(whisper_audio_batch_for_windows(c.max_batch, c.n) == c.batch);   // the rule before a pipeline
        whisper_audio_pipeline_free(p);
        whisper_audio_encoder_free(enc);
    }
    CHECK(whisper_audio_pipeline_batch(nullptr) == 0);
    CHECK(whisper_audio_batch_for_windows(0, 5) == 0);

    // 5 windows at max_batch 4 run as 3 + 2, not 4 + 1: the encoder's memory is that of a batch
    // of 3 (its graph and arena made for the pipeline's batch), and the rows are those of the
    // plain run; a wrong count changes the batches, never the rows
    pp = whisper_audio_pipeline_default_params();
    whisper_audio_encoder * four = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 4);
    whisper_audio_encoder * three = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 3);
    const collector plain = run_pipeline({three}, inputs, pp, 1 << 16);
    pp.n_windows = 5;
    const collector even = run_pipeline({four}, inputs, pp, 1 << 16);
    CHECK(whisper_audio_encoder_memory(four) == whisper_audio_encoder_memory(three));
    const whisper_audio_timings t = whisper_audio_encoder_timings(four);
    CHECK(t.n_batches == 2);
    CHECK(t.n_windows == 5);
    REQUIRE(even.windows.size() == plain.windows.size());
    for (size_t k = 0; k < plain.windows.size(); k++) CHECK(even.windows[k].bytes == plain.windows[k].bytes);
    whisper_audio_encoder_reset_timings(four);
    pp.n_windows = 1;                              // fewer than come: batches of 1
    const collector under = run_pipeline({four}, inputs, pp, 1 << 16);
    CHECK(whisper_audio_encoder_timings(four).n_batches == 5);
    REQUIRE(under.windows.size() == plain.windows.size());
    for (size_t k = 0; k < plain.windows.size(); k++) CHECK(under.windows[k].bytes == plain.windows[k].bytes);

    // freed, the pipeline gives the encoder its own max_batch back: a profile of 4 windows runs
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(model.m);
    std::vector<float> mel((size_t)4 * hp->n_mels * WHISPER_AUDIO_N_FRAMES, 0.0f);
    std::vector<whisper_audio_op_time> times(4096);
    CHECK_MESSAGE(whisper_audio_encoder_profile(four, mel.data(), 4, times.data(), (int)times.size()) > 0,
                  whisper_audio_last_error());
    whisper_audio_encoder_free(four);
    whisper_audio_encoder_free(three);
}

TEST_CASE("pipeline: bad calls fail with a message, and a failed pipeline stays failed") {
    model_ptr model("build/micro-80-f32.gguf");
    whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CPU, 1);
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    collector c;
    pp.on_rows = collector::on_rows;
    pp.user = &c;

    CHECK(whisper_audio_pipeline_init(nullptr, 1, pp) == nullptr);
    whisper_audio_encoder * twice[2] = {enc, enc};
    CHECK(whisper_audio_pipeline_init(twice, 2, pp) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("encoder 1 is busy") != std::string::npos);
    whisper_audio_pipeline_params bad = pp;
    const int seven = 7;
    memcpy(&bad.pool, &seven, sizeof(int));
    CHECK(whisper_audio_pipeline_init(&enc, 1, bad) == nullptr);

    std::vector<float> pcm(40000, 0.25f);
    {   // the encoder belongs to the pipeline while it lives
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE(p);
        std::vector<float> out((size_t)1500 * 128);
        CHECK(!whisper_audio_encode_pcm(enc, pcm.data(), pcm.size(), out.data()));
        CHECK(!whisper_audio_pipeline_end_input(p));                              // an input with no samples
        CHECK(std::string(whisper_audio_last_error()).find("input 0 has no audio samples") != std::string::npos);
        CHECK(whisper_audio_pipeline_push(p, pcm.data(), pcm.size()));            // a refused call: still usable
        whisper_audio_pipeline_free(p);
    }
    {
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE(p);
        REQUIRE(whisper_audio_pipeline_push(p, pcm.data(), pcm.size()));
        CHECK(!whisper_audio_pipeline_finish(p));                                 // the input was not ended
        CHECK(std::string(whisper_audio_last_error()).find("was not ended") != std::string::npos);
        whisper_audio_pipeline_free(p);
    }
    {
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE(p);
        pcm[12345] = NAN;
        CHECK(!whisper_audio_pipeline_push(p, pcm.data(), pcm.size()));
        CHECK(std::string(whisper_audio_last_error()).find("sample 12345 is nan") != std::string::npos);
        pcm[12345] = 0.25f;
        whisper_audio_pipeline_free(p);
    }
    {   // the callback stops the run: the call that made it fails, and the next
        c.stop_after = 1;
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE(p);
        bool ok = true;
        for (int i = 0; i < 4 && ok; i++) ok = whisper_audio_pipeline_push(p, pcm.data(), pcm.size()) && whisper_audio_pipeline_end_input(p);
        ok = ok && whisper_audio_pipeline_finish(p);
        CHECK(!ok);
        CHECK(std::string(whisper_audio_last_error()) == "stopped by the rows callback");
        CHECK(c.windows.size() == 1);
        CHECK(!whisper_audio_pipeline_finish(p));
        whisper_audio_pipeline_free(p);
    }
    {   // freed with work queued: nothing is handed out, nothing leaks (ASan), the encoder is free again
        c = collector();
        whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
        REQUIRE(p);
        for (int i = 0; i < 3; i++) {
            REQUIRE(whisper_audio_pipeline_push(p, pcm.data(), pcm.size()));
            REQUIRE(whisper_audio_pipeline_end_input(p));
        }
        whisper_audio_pipeline_free(p);
        std::vector<float> out((size_t)1500 * 128);
        CHECK(whisper_audio_encode_pcm(enc, pcm.data(), pcm.size(), out.data()));
    }
    whisper_audio_encoder_free(enc);
}

// ---- GPU ---------------------------------------------------------------------------

TEST_CASE("cuda log_mel: the CPU log-mel within 1e-5 (speech, 70 s, a tone, near-silence, silence)" * doctest::skip(no_gpu())) {
    for (const char * path : {"build/micro-80-f32.gguf", "build/micro-128-f32.gguf"}) {
        CAPTURE(path);
        model_ptr model(path);
        const whisper_audio_hparams * hp = whisper_audio_model_hparams(model.m);
        const std::vector<std::vector<float>> inputs = test_inputs();
        std::vector<std::vector<float>> windows = {inputs[0], std::vector<float>(inputs[1].begin(), inputs[1].begin() + N),
                                                   std::vector<float>(inputs[1].begin() + 2 * N, inputs[1].end())};
        std::vector<float> tone(N), quiet(N), silence(N, 0.0f);
        for (size_t i = 0; i < N; i++) {
            tone[i] = 0.5f * sinf(2.0f * (float)M_PI * 1000.0f * i / 16000.0f);
            quiet[i] = 1e-6f * sinf(2.0f * (float)M_PI * 440.0f * i / 16000.0f) + (i % 7 == 0 ? 3e-7f : 0.0f);
        }
        windows.push_back(tone);
        windows.push_back(quiet);
        windows.push_back(silence);
        const int B = (int)windows.size();

        vt_backend * be = test_cuda_backend(VT_TYPE_F16);
        REQUIRE_MESSAGE(be, vt_last_error());
        vt_context * wctx = vt_init(1);
        vt_tensor * filters = vt_new_tensor_2d(wctx, VT_TYPE_F32, 201, hp->n_mels);
        vt_set_weight(filters);
        REQUIRE(vt_backend_alloc_weights(be, wctx));
        REQUIRE(vt_backend_set_tensor(be, filters, whisper_audio_model_mel_filters(model.m), VT_TYPE_F32));
        vt_context * ctx = vt_init(4);
        vt_tensor * pcm = vt_new_tensor_2d(ctx, VT_TYPE_F32, TEST_MEL_ROW, B);
        vt_set_input(pcm);
        vt_tensor * mel = vt_log_mel(ctx, pcm, filters, nullptr, &TEST_MEL_SHAPE);
        vt_graph * g = vt_graph_build(ctx, &mel, 1);
        REQUIRE_MESSAGE(vt_backend_alloc_graph(be, g), vt_last_error());
        // each window a signal of its own: its row mirrored at both ends (vt_log_mel's layout)
        std::vector<float> in((size_t)B * TEST_MEL_ROW, 0.0f), got((size_t)B * hp->n_mels * 3000);
        for (int b = 0; b < B; b++) {
            std::vector<float> x(N, 0.0f);
            std::copy(windows[b].begin(), windows[b].begin() + std::min(windows[b].size(), (size_t)N), x.begin());
            const std::vector<float> row = test_mel_row(x.data(), x.size());
            std::copy(row.begin(), row.end(), in.begin() + (size_t)b * TEST_MEL_ROW);
        }
        REQUIRE(vt_backend_set_tensor(be, pcm, in.data(), VT_TYPE_F32));
        REQUIRE_MESSAGE(vt_backend_compute(be, g), vt_last_error());
        REQUIRE(vt_backend_get_tensor_f32(be, mel, got.data()));
        for (int b = 0; b < B; b++) {
            CAPTURE(b);
            std::vector<float> ref((size_t)hp->n_mels * 3000);
            REQUIRE(whisper_audio_log_mel(model.m, windows[b].data(), windows[b].size(), ref.data()));
            double worst = 0;
            for (size_t i = 0; i < ref.size(); i++) worst = std::max(worst, (double)fabsf(got[(size_t)b * ref.size() + i] - ref[i]));
            MESSAGE("n_mels " << hp->n_mels << ", window " << b << ": max abs difference " << worst);
            CHECK(worst <= 1e-5);
        }
        // its time (the graph replayed; no assertion, a figure for docs/BENCHMARKS.md)
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; i++) REQUIRE(vt_backend_compute(be, g));
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20;
        MESSAGE("log-mel on the GPU, n_mels " << hp->n_mels << ": " << ms / B << " ms per window (" << B << " windows a run)");
        vt_graph_free(g);
        vt_free(ctx);
        vt_backend_free(be);
        vt_free(wctx);
    }
}

TEST_CASE("cuda pipeline: GPU log-mel near the CPU one, f16 rows the f32 rows rounded, two encoders = one" * doctest::skip(no_gpu())) {
    model_ptr model("build/micro-80-f32.gguf");
    const std::vector<std::vector<float>> inputs = test_inputs();
    for (whisper_audio_dtype dtype : {WHISPER_AUDIO_DTYPE_F16, WHISPER_AUDIO_DTYPE_BF16}) {
        CAPTURE(dtype);
        whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
        p.device = WHISPER_AUDIO_DEVICE_CUDA;
        p.dtype = dtype;
        p.max_batch = 2;
        whisper_audio_encoder * a = whisper_audio_encoder_init(model.m, p);
        whisper_audio_encoder * b = whisper_audio_encoder_init(model.m, p);
        REQUIRE_MESSAGE(a, whisper_audio_last_error());
        REQUIRE_MESSAGE(b, whisper_audio_last_error());
        whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
        const collector one = run_pipeline({a}, inputs, pp, 50000);
        REQUIRE(one.windows.size() == 5);
        for (const seen_window & w : one.windows) {                      // against the CPU log-mel, same encoder
            CAPTURE(w.r.input);
            CAPTURE(w.r.window);
            const std::vector<float> ref = encode_window(a, model.m, inputs[w.r.input], w.r.window);
            CHECK(rel_l2(as_f32(w), ref) < 2e-3);
        }
        const collector two = run_pipeline({a, b}, inputs, pp, N);
        REQUIRE(two.windows.size() == 5);
        for (size_t k = 0; k < 5; k++) CHECK(two.windows[k].bytes == one.windows[k].bytes);
        pp.f16 = true;
        const collector half = run_pipeline({a}, inputs, pp, 50000);
        for (size_t k = 0; k < 5; k++) {
            const std::vector<float> rows = as_f32(one.windows[k]);
            std::vector<uint16_t> h(rows.size());
            vt_convert(h.data(), VT_TYPE_F16, rows.data(), VT_TYPE_F32, h.size());
            CHECK(memcmp(half.windows[k].bytes.data(), h.data(), h.size() * 2) == 0);
        }
        whisper_audio_encoder_free(a);
        whisper_audio_encoder_free(b);
    }
}

TEST_CASE("cuda pipeline: short batches flushed one after another queue behind the running one; busy_ms" * doctest::skip(no_gpu())) {
    model_ptr model("build/micro-80-f32.gguf");
    const std::vector<std::vector<float>> inputs = test_inputs();
    whisper_audio_encoder * enc = make_encoder(model.m, WHISPER_AUDIO_DEVICE_CUDA, 4);
    collector c;
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.on_rows = collector::on_rows;
    pp.user = &c;
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
    REQUIRE_MESSAGE(p, whisper_audio_last_error());
    // as a server at load: each input alone in a short batch, handed over while the batches
    // before it run (the worker takes one that comes while it waits for the running one)
    const int n = 8;
    for (int i = 0; i < n; i++) {
        const std::vector<float> & in = inputs[0];                          // speech: one window
        REQUIRE(whisper_audio_pipeline_push(p, in.data(), in.size()));
        REQUIRE(whisper_audio_pipeline_end_input(p));
        REQUIRE_MESSAGE(whisper_audio_pipeline_flush(p), whisper_audio_last_error());
        CHECK(whisper_audio_pipeline_busy_ms(p) >= 0.0);
    }
    REQUIRE(poll_until(p, n) == n);
    CHECK(whisper_audio_pipeline_busy_ms(p) == 0.0);                // every batch landed
    whisper_audio_pipeline_free(p);
    REQUIRE(c.windows.size() == (size_t)n);
    const std::vector<float> ref = encode_window(enc, model.m, inputs[0], 0);   // the CPU log-mel, same encoder
    for (const seen_window & w : c.windows) {
        CAPTURE(w.r.input);
        CHECK(w.r.input == (int64_t)(&w - c.windows.data()));
        CHECK(rel_l2(as_f32(w), ref) < 2e-3);
    }
    whisper_audio_encoder_free(enc);
}

#ifdef VT_USE_CUDA
// The GPU out of memory on demand, for the test below, without a hook in the library: test-all
// is linked with -Wl,--wrap=cudaMalloc (Makefile, CMakeLists.txt), so every cudaMalloc of the
// backend (the CUDA runtime is linked statically) comes here first; while g_cuda_malloc_fail is
// set each one fails as a full GPU fails it. __real_cudaMalloc is weak: a test binary linked
// without the flag still links, and the test says what it lacks (no call ever came here).
std::atomic<bool> g_cuda_malloc_fail{false};
std::atomic<long> g_cuda_malloc_calls{0};
extern "C" __attribute__((weak)) int __real_cudaMalloc(void ** p, size_t bytes);   // cudaError_t cudaMalloc(void **, size_t)
extern "C" int __wrap_cudaMalloc(void ** p, size_t bytes) {
    g_cuda_malloc_calls++;
    if (g_cuda_malloc_fail || !__real_cudaMalloc) {
        *p = nullptr;
        return 2;   // cudaErrorMemoryAllocation ("out of memory")
    }
    return __real_cudaMalloc(p, bytes);
}
#endif

TEST_CASE("cuda pipeline: the GPU out of memory mid-run is an error that says so; the encoder runs again after" * doctest::skip(no_gpu())) {
#ifndef VT_USE_CUDA
    FAIL("a build without CUDA has no CUDA device");
#else
    model_ptr model("build/micro-80-f32.gguf");
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CUDA;
    p.max_batch = 2;
    whisper_audio_encoder * e = whisper_audio_encoder_init(model.m, p);
    REQUIRE_MESSAGE(e, whisper_audio_last_error());
    // no_pad: a short last window needs a graph of its own length, made when it comes
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.no_pad = true;
    size_t n_rows = 0;
    pp.user = &n_rows;
    pp.on_rows = [](const whisper_audio_rows * r, void * user) { *(size_t *)user += (size_t)r->n_rows; return true; };
    const std::vector<float> pcm(WHISPER_AUDIO_N_SAMPLES + 12345, 0.01f);
    whisper_audio_pipeline * pipe = whisper_audio_pipeline_init(&e, 1, pp);
    REQUIRE_MESSAGE(pipe, whisper_audio_last_error());
    REQUIRE_MESSAGE(g_cuda_malloc_calls > 0, "the backend's cudaMalloc calls do not reach __wrap_cudaMalloc: link "
                                             "test-all with -Wl,--wrap=cudaMalloc");
    // from here on no device memory is left
    g_cuda_malloc_fail = true;
    bool ok = whisper_audio_pipeline_push(pipe, pcm.data(), pcm.size()) && whisper_audio_pipeline_end_input(pipe) &&
              whisper_audio_pipeline_finish(pipe);
    const std::string error = whisper_audio_last_error();
    g_cuda_malloc_fail = false;
    CHECK_FALSE(ok);
    CHECK(error.find("cudaMalloc") != std::string::npos);
    CHECK(error.find("out of memory") != std::string::npos);
    whisper_audio_pipeline_free(pipe);
    // memory back: the same encoder, a new pipeline, every row
    n_rows = 0;
    pipe = whisper_audio_pipeline_init(&e, 1, pp);
    REQUIRE_MESSAGE(pipe, whisper_audio_last_error());
    ok = whisper_audio_pipeline_push(pipe, pcm.data(), pcm.size()) && whisper_audio_pipeline_end_input(pipe) &&
         whisper_audio_pipeline_finish(pipe);
    CHECK_MESSAGE(ok, whisper_audio_last_error());
    CHECK(n_rows == (size_t)whisper_audio_n_positions_total(pcm.size()));
    whisper_audio_pipeline_free(pipe);
    whisper_audio_encoder_free(e);
#endif
}
