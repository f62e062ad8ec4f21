// The audio towers of Qwen2-Audio, Voxtral, Ultravox, Audio Flamingo 3, GLM-ASR, Qwen2.5-Omni, MiniCPM-o, Kimi-Audio, Qwen3-Omni, Step-Audio 2,
// MERaLiON-2, Music Flamingo, Qwen3-ASR and Voxtral Realtime on the CPU against their own code in
// float64 (tests/data/towers, made by tests/data/make-tower-references.py), from our GGUF
// (build/tower-*.gguf, converted from the checkpoints there) and from llama.cpp's mmproj files
// of the same checkpoints; and the loader's answers to broken projector files.
#include <doctest/doctest.h>

#include "test-util.h"
#include "whisper-audio.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char * TOWERS[] = {"qwen2a", "voxtral", "ultravox", "af3", "glmasr", "qwen25o", "minicpmo", "kimiaudio", "qwen3a", "stepaudio2",
                         "meralion", "mflamingo", "qwen3asr"};

whisper_audio_encoder * cpu_encoder(const whisper_audio_model * model, bool projector) {
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.n_threads = 2;
    p.max_batch = 2;
    p.projector = projector;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    return enc;
}

// The first rows of got against a reference of ref.size() / width rows.
double first_rows_error(const std::vector<float> & got, const std::vector<float> & ref) {
    REQUIRE(got.size() >= ref.size());
    return rel_l2(got.data(), ref.data(), ref.size());
}

// Both files of a tower: our converter's f32 GGUF and llama.cpp's mmproj (f16 matrices
// holding the checkpoint's f16 values exactly, so the same reference applies). GLM-ASR has ours
// alone: llama.cpp's glma is the original checkpoint's layout, not transformers'; Qwen2.5-Omni's was
// not made (Qwen3-Omni's qwen3a is: its mmproj holds both towers' keys, the vision one's tensors none).
// Music Flamingo has ours alone: llama.cpp's musicflamingo files have no rotary time embedding; Qwen3-ASR
// too (llama.cpp's qwen3a file of it is Qwen3-Omni's layout and loads as that).
std::vector<std::string> tower_files(const std::string & name) {
    if (name == "glmasr" || name == "qwen25o" || name == "minicpmo" || name == "kimiaudio" || name == "stepaudio2" || name == "mflamingo" ||
        name == "qwen3asr")
        return {"build/tower-" + name + "-f32.gguf"};
    return {"build/tower-" + name + "-f32.gguf", test_data("towers/" + name + ".mmproj.gguf")};
}

std::vector<float> pcm_of(size_t n) {
    decoded_audio a = decode_file(test_data("audio/speech_16k.wav"));
    REQUIRE(a.ok);
    REQUIRE(a.pcm.size() >= n);
    a.pcm.resize(n);
    return a.pcm;
}

} // namespace

TEST_CASE("towers: the model file says the projector, llama.cpp's mmproj files load as they are") {
    const struct { const char * name; whisper_audio_projector type; int stack, n_mels; } want[] = {
        {"qwen2a", WHISPER_AUDIO_PROJECTOR_QWEN2A, 1, 80},
        {"voxtral", WHISPER_AUDIO_PROJECTOR_VOXTRAL, 4, 128},
        {"ultravox", WHISPER_AUDIO_PROJECTOR_ULTRAVOX, 8, 80},
        {"af3", WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, 1, 128},
        {"glmasr", WHISPER_AUDIO_PROJECTOR_GLMASR, 4, 128},
        {"qwen25o", WHISPER_AUDIO_PROJECTOR_QWEN25O, 1, 128},
        {"minicpmo", WHISPER_AUDIO_PROJECTOR_MINICPMO, 1, 80},
        {"kimiaudio", WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, 4, 128},
        {"qwen3a", WHISPER_AUDIO_PROJECTOR_QWEN3A, 1, 128},
        {"stepaudio2", WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, 1, 128},
        {"meralion", WHISPER_AUDIO_PROJECTOR_MERALION, 15, 128},
        {"mflamingo", WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, 1, 128},
        {"qwen3asr", WHISPER_AUDIO_PROJECTOR_QWEN3ASR, 1, 128},
    };
    for (const auto & w : want) {
        for (const std::string & path : tower_files(w.name)) {
            whisper_audio_model * m = whisper_audio_model_load(path.c_str());
            REQUIRE_MESSAGE(m, whisper_audio_last_error());
            const whisper_audio_hparams * hp = whisper_audio_model_hparams(m);
            CHECK(hp->projector == w.type);
            CHECK(hp->n_llm == 32);
            CHECK(hp->stack_factor == w.stack);
            CHECK(hp->n_mels == w.n_mels);
            CHECK(hp->n_state == 64);
            CHECK(hp->n_layer == 3);
            CHECK(whisper_audio_token_dim(m, true) == 32);
            CHECK(whisper_audio_token_dim(m, false) == 64);
            whisper_audio_model_free(m);
        }
    }
    // the two files' mel banks: the converter's tensor and the one computed at load agree
    whisper_audio_model * a = whisper_audio_model_load("build/tower-qwen2a-f32.gguf");
    whisper_audio_model * b = whisper_audio_model_load(test_data("towers/qwen2a.mmproj.gguf").c_str());
    REQUIRE(a);
    REQUIRE(b);
    CHECK(rel_l2(whisper_audio_model_mel_filters(b), whisper_audio_model_mel_filters(a), 80 * 201) < 1e-7);
    whisper_audio_model_free(a);
    whisper_audio_model_free(b);
    // Audio Flamingo 3: llama.cpp names it musicflamingo (and stores its conv weights in f32)
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO)) == "musicflamingo");
}

TEST_CASE("towers: the tower names are the projector names' values, and name the same types") {
    const whisper_audio_tower t = WHISPER_AUDIO_TOWER_STEPAUDIO2;
    CHECK(t == WHISPER_AUDIO_PROJECTOR_STEPAUDIO2);
    CHECK(WHISPER_AUDIO_TOWER_NONE == WHISPER_AUDIO_PROJECTOR_NONE);
    CHECK(WHISPER_AUDIO_TOWER_MERALION == WHISPER_AUDIO_PROJECTOR_MERALION);
    CHECK(std::string(whisper_audio_tower_name(WHISPER_AUDIO_TOWER_QWEN25O)) == "qwen2.5o");
}

TEST_CASE("towers: Audio Flamingo 3's tokens per audio length: 30 s windows of Qwen2-Audio's rule, its first 600 s") {
    whisper_audio_model * f = whisper_audio_model_load("build/tower-af3-f32.gguf");
    REQUIRE_MESSAGE(f, whisper_audio_last_error());
    // AudioFlamingo3Processor._get_audio_token_length of the summed frames: ((frames - 1) // 2 + 1 - 2) // 2 + 1
    CHECK(whisper_audio_n_tokens(f, 112256, true) == 175);
    CHECK(whisper_audio_n_tokens(f, 112256, false) == 175);
    CHECK(whisper_audio_n_tokens(f, 50001, true) == 78);
    CHECK(whisper_audio_n_tokens(f, 320, true) == 0);
    CHECK(whisper_audio_n_tokens(f, 480000, true) == 750);
    CHECK(whisper_audio_n_tokens(f, 480000 + 320, true) == 750);     // a second window of 2 frames: none
    CHECK(whisper_audio_n_tokens(f, 480000 + 321, true) == 751);
    CHECK(whisper_audio_n_tokens(f, 1120000, true) == 750 + 750 + 250);
    CHECK(whisper_audio_n_tokens(f, 20 * 480000, true) == 20 * 750);
    CHECK(whisper_audio_n_tokens(f, 30 * 480000, true) == 20 * 750);  // max_audio_len 600: the first 600 s
    CHECK(whisper_audio_samples_used(f, true) == 20 * (size_t)480000);
    whisper_audio_model_free(f);
}

TEST_CASE("towers: GLM-ASR's tokens per audio length: 30 s windows, 4 positions a token, its first 630 s; RoPE from the file") {
    whisper_audio_model * g = whisper_audio_model_load("build/tower-glmasr-f32.gguf");
    REQUIRE_MESSAGE(g, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(g);
    CHECK(hp->n_rot == 32);                    // partial_rotary_factor 0.5 of head_dim 64
    CHECK(hp->rope_theta == 10000.0f);
    CHECK(hp->n_proj_ff == 64);                // linear_1: 2 x the LLM's width
    // GlmAsrProcessor._get_audio_token_length: (positions - 4) // 4 + 1 of each window's
    CHECK(whisper_audio_n_tokens(g, 112256, true) == 87);     // 702 frames, 351 positions
    CHECK(whisper_audio_n_tokens(g, 112256, false) == 351);
    CHECK(whisper_audio_n_tokens(g, 50001, true) == 39);      // 313 frames, 157 positions
    CHECK(whisper_audio_n_tokens(g, 1120, true) == 1);        // 7 frames, 4 positions
    CHECK(whisper_audio_n_tokens(g, 960, true) == 0);         // 6 frames, 3 positions
    CHECK(whisper_audio_n_tokens(g, 480000, true) == 375);
    CHECK(whisper_audio_n_tokens(g, 1120000, true) == 375 + 375 + 125);
    CHECK(whisper_audio_n_tokens(g, 21 * 480000, true) == 21 * 375);
    CHECK(whisper_audio_n_tokens(g, 40 * 480000, true) == 21 * 375);     // int(655 // 30) = 21 windows kept
    CHECK(whisper_audio_samples_used(g, true) == 21 * (size_t)480000);
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_GLMASR)) == "glmasr");
    whisper_audio_model_free(g);
    // our GGUF of it without the RoPE keys is refused (the model would run without positions)
    std::vector<uint8_t> b = read_bytes("build/tower-glmasr-f32.gguf");
    const std::string key = "whisper.encoder.rope.dimension_count", bad_key = "whisper.encoder.rope.dimension_xount";
    auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
    REQUIRE(it != b.end());
    std::copy(bad_key.begin(), bad_key.end(), it);
    const std::string path = test_tmp("glmasr-no-rope.gguf");
    write_bytes(path, b);
    CHECK(whisper_audio_model_load(path.c_str()) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("whisper.encoder.rope.dimension_count") != std::string::npos);
    remove(path.c_str());
}

TEST_CASE("towers: MiniCPM-o's tokens per audio length: all of it in 30 s windows, pooled by 2; its attention blocks from the file") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-minicpmo-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(m);
    CHECK(hp->n_causal == 50);                 // audio_chunk_length 1.0 s: 50 positions a block
    CHECK(hp->n_chunk == 0);
    // MiniCPMOProcessor's get_audio_placeholder: (positions - 2) // 2 + 1 of each 30 s piece
    CHECK(whisper_audio_n_tokens(m, 112256, true) == 175);    // 702 frames, 351 positions
    CHECK(whisper_audio_n_tokens(m, 112256, false) == 351);
    CHECK(whisper_audio_n_tokens(m, 50001, true) == 78);      // 313 frames, 157 positions
    CHECK(whisper_audio_n_tokens(m, 320, true) == 0);
    CHECK(whisper_audio_n_tokens(m, 1, false) == 1);
    CHECK(whisper_audio_n_tokens(m, 480000, true) == 750);
    CHECK(whisper_audio_n_tokens(m, 1120000, true) == 750 + 750 + 250);
    CHECK(whisper_audio_n_tokens(m, 100 * 480000, true) == 100 * 750);   // no limit
    CHECK(whisper_audio_samples_used(m, true) == SIZE_MAX);
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_MINICPMO)) == "minicpmo");
    whisper_audio_model_free(m);
    // our GGUF of it without the block key is refused (its attention would be full)
    const std::string key = "whisper.encoder.attention.causal_chunk", bad_key = "whisper.encoder.attention.causal_chunx";
    std::vector<uint8_t> b = read_bytes("build/tower-minicpmo-f32.gguf");
    auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
    REQUIRE(it != b.end());
    std::copy(bad_key.begin(), bad_key.end(), it);
    const std::string path = test_tmp("minicpmo-no-blocks.gguf");
    write_bytes(path, b);
    CHECK(whisper_audio_model_load(path.c_str()) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find(key) != std::string::npos);
    remove(path.c_str());
}

TEST_CASE("towers: MiniCPM-o's later window as its code runs it: the frames past its audio zero, its keys masked at its frame count") {
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    a.pcm.resize(480000 + 50001);              // a second window of 313 frames, 157 positions (inside a block of 50)
    whisper_audio_model * model = whisper_audio_model_load("build/tower-minicpmo-f32.gguf");
    REQUIRE_MESSAGE(model, whisper_audio_last_error());
    whisper_audio_encoder * enc = cpu_encoder(model, true);
    const size_t n_tok = whisper_audio_n_tokens(model, a.pcm.size(), true);
    REQUIRE(n_tok == 750 + 78);
    std::vector<float> got(n_tok * 32, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, a.pcm.data(), a.pcm.size(), got.data()), whisper_audio_last_error());
    std::vector<int64_t> shape;
    std::vector<float> ref = npy_load_f32(test_data("towers/minicpmo.long_530001.audio.tail.npy"), &shape);
    REQUIRE(shape.size() == 2);
    REQUIRE(shape[0] == 78);
    const std::vector<float> tail(got.begin() + 750 * 32, got.end());
    const double err = rel_l2(tail, ref);
    MESSAGE("MiniCPM-o 30 s + 50001 samples: the second window's 78 tokens, rel L2 " << err);
    CHECK(err < 1e-5);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
}

TEST_CASE("towers: Kimi-Audio's tokens per audio length: 30 s windows, token_len = (L - 1) // 1280 + 1 each, 4 positions a token") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-kimiaudio-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(m);
    CHECK(hp->stack_factor == 4);
    CHECK(hp->proj_eps == 1e-6f);              // its LayerNorm's rms_norm_eps
    // WhisperEncoder.tokenize_waveform: token_len = (L - 1) // (160 * 8) + 1 of each 30 s segment
    CHECK(whisper_audio_n_tokens(m, 112256, true) == 88);
    CHECK(whisper_audio_n_tokens(m, 112256, false) == 352);   // token_len * 4 positions (351 hold audio)
    CHECK(whisper_audio_n_tokens(m, 1, true) == 1);
    CHECK(whisper_audio_n_tokens(m, 1280, true) == 1);
    CHECK(whisper_audio_n_tokens(m, 1281, true) == 2);
    CHECK(whisper_audio_n_tokens(m, 480000, true) == 375);
    CHECK(whisper_audio_n_tokens(m, 480001, true) == 376);
    CHECK(whisper_audio_n_tokens(m, 1120000, true) == 375 + 375 + 125);
    CHECK(whisper_audio_samples_used(m, true) == SIZE_MAX);
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_KIMIAUDIO)) == "kimiaudio");
    whisper_audio_model_free(m);
}

TEST_CASE("towers: Step-Audio 2's tokens per audio length: 25 s windows, (E - 1) // 2 + 1 of E = (L + 1) // 2 // 2 each; "
          "a tail beside a whole window as padding_mels batches it") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-stepaudio2-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(m);
    CHECK(hp->n_proj_ff == 48);                // adapter.linear1's rows (2048 in Step-Audio 2 mini)
    CHECK(hp->stack_factor == 1);
    // compute_token_num of a chunk's (w + 479) // 160 frames: L = frames - 2 = ceil(w / 160)
    CHECK(whisper_audio_n_tokens(m, 112256, true) == 88);     // L 702, E 175
    CHECK(whisper_audio_n_tokens(m, 112256, false) == 175);   // after_norm's rows
    CHECK(whisper_audio_n_tokens(m, 50001, true) == 39);      // L 313, E 78
    CHECK(whisper_audio_n_tokens(m, 320, true) == 0);         // E 0
    CHECK(whisper_audio_n_tokens(m, 321, true) == 1);
    CHECK(whisper_audio_n_tokens(m, 400000, true) == 313);    // a whole window: L 2500, E 625
    CHECK(whisper_audio_n_tokens(m, 400000, false) == 625);
    CHECK(whisper_audio_n_tokens(m, 450001, true) == 313 + 39);
    CHECK(whisper_audio_n_tokens(m, 1120000, true) == 313 + 313 + 250);   // 25 s, 25 s, 20 s
    CHECK(whisper_audio_samples_used(m, true) == SIZE_MAX);
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_STEPAUDIO2)) == "stepaudio2");
    // 25 s and a tail of 313 frames (odd): the tail runs at the batch's 2502 frames, its keys by that
    // parity (156 of 157 positions), as its code batches them; each window's tokens near float64
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    std::vector<float> pcm(a.pcm.begin(), a.pcm.begin() + 450001);
    whisper_audio_encoder * enc = cpu_encoder(m, true);
    std::vector<float> got(352 * 32, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), got.data()), whisper_audio_last_error());
    std::vector<int64_t> shape;
    std::vector<float> ref = npy_load_f32(test_data("towers/stepaudio2.long_450001.audio.npy"), &shape);
    REQUIRE(shape[0] == 352);
    const double err = rel_l2(got, ref), tail = rel_l2(got.data() + 313 * 32, ref.data() + 313 * 32, 39 * 32);
    MESSAGE("stepaudio2 tokens from audio (long_450001): rel L2 " << err << ", its tail " << tail);
    CHECK(err < 1e-5);
    CHECK(tail < 1e-5);
    whisper_audio_encoder_free(enc);
    // from features: 2 frames give no pooled position (3 to 3000 frames)
    whisper_audio_encoder * tower = cpu_encoder(m, false);
    std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel128.npy"), nullptr);
    std::vector<float> rows(1500 * 64, NAN);
    CHECK(whisper_audio_encode_mel_tokens(tower, mel.data(), 2, 2, rows.data()) == -1);
    CHECK(std::string(whisper_audio_last_error()).find("3 to 3000") != std::string::npos);
    whisper_audio_encoder_free(tower);
    whisper_audio_model_free(m);
}

TEST_CASE("towers: MERaLiON-2's tokens per audio length: 100 a 30 s window, its first 300 s; each window normalised") {
    for (const std::string & path : tower_files("meralion")) {   // ours and llama.cpp's meralion mmproj
        CAPTURE(path);
        whisper_audio_model * m = whisper_audio_model_load(path.c_str());
        REQUIRE_MESSAGE(m, whisper_audio_last_error());
        CHECK(whisper_audio_model_hparams(m)->proj_eps == 1e-5f);   // ln_speech's (the mmproj: the encoder's eps)
        // MERaLiON2Processor: ((L - 1) // 480000 + 1) chunks, at most 10, fixed_speech_embeds_length 100 each
        CHECK(whisper_audio_n_tokens(m, 1, true) == 100);
        CHECK(whisper_audio_n_tokens(m, 112256, true) == 100);
        CHECK(whisper_audio_n_tokens(m, 112256, false) == 1500);
        CHECK(whisper_audio_n_tokens(m, 480000, true) == 100);
        CHECK(whisper_audio_n_tokens(m, 480001, true) == 200);
        CHECK(whisper_audio_n_tokens(m, 1120000, true) == 300);
        CHECK(whisper_audio_n_tokens(m, 10 * 480000, true) == 1000);
        CHECK(whisper_audio_n_tokens(m, 12 * 480000 + 5, true) == 1000);   // number_chunk_limit 10
        CHECK(whisper_audio_samples_used(m, true) == 10 * (size_t)480000);
        whisper_audio_model_free(m);
    }
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_MERALION)) == "meralion");
    whisper_audio_model * m = whisper_audio_model_load("build/tower-meralion-f32.gguf");
    REQUIRE(m);
    whisper_audio_encoder * enc = cpu_encoder(m, true);
    // do_normalize: each window to zero mean and unit variance first, so a gain and an offset change nothing
    std::vector<float> pcm = pcm_of(50001), scaled = pcm;
    for (float & v : scaled) v = 0.25f * v + 0.01f;
    std::vector<float> a(100 * 32), b(100 * 32);
    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), a.data()), whisper_audio_last_error());
    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, scaled.data(), scaled.size(), b.data()), whisper_audio_last_error());
    CHECK(rel_l2(b, a) < 1e-5);
    // 350 s (the 70 s clip 5 times): the processor's first 10 chunks, the 10th of them its last 100 tokens
    decoded_audio l = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(l.ok);
    std::vector<float> long5;
    for (int i = 0; i < 5; i++) long5.insert(long5.end(), l.pcm.begin(), l.pcm.end());
    REQUIRE(whisper_audio_n_tokens(m, long5.size(), true) == 1000);
    std::vector<float> got(1000 * 32, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, long5.data(), long5.size(), got.data()), whisper_audio_last_error());
    std::vector<int64_t> shape;
    std::vector<float> ref = npy_load_f32(test_data("towers/meralion.long_350s.audio.tail.npy"), &shape);
    REQUIRE(shape[0] == 100);
    const double err = rel_l2(std::vector<float>(got.begin() + 900 * 32, got.end()), ref);
    MESSAGE("MERaLiON-2 350 s: the 10th window's 100 tokens, rel L2 " << err);
    CHECK(err < 1e-5);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(m);
}

TEST_CASE("towers: Qwen3-Omni's tokens per audio length, its windows of 2400 frames, a clip shorter than a chunk") {
    whisper_audio_model * q = whisper_audio_model_load("build/tower-qwen3a-f32.gguf");
    REQUIRE_MESSAGE(q, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(q);
    CHECK(hp->n_conv == 16);                   // downsample_hidden_size
    CHECK(hp->n_chunk == 100);                 // 2 n_window
    CHECK(hp->n_attn_window == 800);           // n_window_infer
    // _get_feat_extract_output_lengths of the frames (n // 160: the feature extractor pads nothing):
    // 13 a chunk of 100, the rest's three halvings
    CHECK(whisper_audio_n_tokens(q, 112256, true) == 92);     // 701 frames
    CHECK(whisper_audio_n_tokens(q, 112256, false) == 92);
    CHECK(whisper_audio_n_tokens(q, 50001, true) == 41);      // 312 frames
    CHECK(whisper_audio_n_tokens(q, 8000, true) == 7);        // 50 frames
    CHECK(whisper_audio_n_tokens(q, 159, true) == 0);         // no frame
    CHECK(whisper_audio_n_tokens(q, 160, true) == 1);
    CHECK(whisper_audio_n_tokens(q, 480000, true) == 390);
    CHECK(whisper_audio_n_tokens(q, 448000, true) == 364);    // 2800 frames: windows of 2400 and 400
    CHECK(whisper_audio_n_tokens(q, 1120000, true) == 910);
    CHECK(whisper_audio_samples_used(q, true) == SIZE_MAX);   // all of it
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_QWEN3A)) == "qwen3a");
    // from audio: a clip shorter than a chunk (run at its own length) and one of two windows (the
    // whole input's max, the cut at 2400 frames: 312 tokens, three whole attention windows)
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    whisper_audio_encoder * enc = cpu_encoder(q, true);
    for (auto clip : {std::make_pair("speech_8000", (size_t)8000), std::make_pair("long_448000", (size_t)448000)}) {
        std::vector<float> pcm = clip.second == 8000 ? pcm_of(8000) : std::vector<float>(a.pcm.begin(), a.pcm.begin() + 448000);
        const size_t n_tok = whisper_audio_n_tokens(q, pcm.size(), true);
        std::vector<float> got(n_tok * 32, NAN);
        REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), got.data()), whisper_audio_last_error());
        std::vector<int64_t> shape;
        std::vector<float> ref = npy_load_f32(test_data(std::string("towers/qwen3a.") + clip.first + ".audio.npy"), &shape);
        CHECK((size_t)shape[0] == n_tok);
        const double err = rel_l2(got, ref);
        MESSAGE("qwen3a tokens from audio (" << std::string(clip.first) << "): rel L2 " << err << " (" << n_tok << " tokens)");
        CHECK(err < 1e-5);
        if (n_tok == 364) {                   // each side of the windows' cut on its own
            CHECK(rel_l2(got.data() + 300 * 32, ref.data() + 300 * 32, 12 * 32) < 1e-5);
            CHECK(rel_l2(got.data() + 312 * 32, ref.data() + 312 * 32, 12 * 32) < 1e-5);
        }
    }
    whisper_audio_encoder_free(enc);
    // from features: audio shorter than a chunk runs at its own length there too
    std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel128.npy"), nullptr);
    whisper_audio_encoder * tower = cpu_encoder(q, false);
    std::vector<float> rows(390 * 64, NAN);
    CHECK(whisper_audio_encode_mel_tokens(tower, mel.data(), 3000, 50, rows.data()) == 7);
    whisper_audio_encoder_free(tower);
    // its tokens alone: no Whisper windows, pooling or other layer of it
    whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
    ep.device = WHISPER_AUDIO_DEVICE_CPU;
    ep.output_layer = 1;
    whisper_audio_encoder * e1 = whisper_audio_encoder_init(q, ep);
    REQUIRE(e1);
    std::vector<float> out(1500 * 64);
    CHECK_FALSE(whisper_audio_encode_pcm(e1, pcm_of(16000).data(), 16000, out.data()));
    CHECK(std::string(whisper_audio_last_error()).find("gives its tokens alone") != std::string::npos);
    CHECK_FALSE(whisper_audio_encode_mel(e1, mel.data(), 1, out.data()));
    CHECK(std::string(whisper_audio_last_error()).find("gives its tokens alone") != std::string::npos);
    whisper_audio_encoder_free(e1);
    // our GGUF of it without the Conv2d stem's key is refused
    const std::vector<uint8_t> b = read_bytes("build/tower-qwen3a-f32.gguf");
    const std::string key = "whisper.encoder.conv2d.channels", bad_key = "whisper.encoder.conv2d.channelx";
    std::vector<uint8_t> c = b;
    auto it = std::search(c.begin(), c.end(), key.begin(), key.end());
    REQUIRE(it != c.end());
    std::copy(bad_key.begin(), bad_key.end(), it);
    const std::string path = test_tmp("qwen3a-no-conv.gguf");
    write_bytes(path, c);
    CHECK(whisper_audio_model_load(path.c_str()) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("whisper.encoder.conv2d.channels") != std::string::npos);
    remove(path.c_str());
    whisper_audio_model_free(q);
    // llama.cpp's mmproj of it (clip.audio.projector_type qwen3a beside its vision tower's keys): the
    // chunk and window are the config's (the file has neither), the channels its conv2d1's
    whisper_audio_model * mm = whisper_audio_model_load(test_data("towers/qwen3a.mmproj.gguf").c_str());
    REQUIRE_MESSAGE(mm, whisper_audio_last_error());
    CHECK(whisper_audio_model_hparams(mm)->n_conv == 16);
    CHECK(whisper_audio_model_hparams(mm)->n_chunk == 100);
    CHECK(whisper_audio_model_hparams(mm)->n_attn_window == 800);
    CHECK(whisper_audio_n_tokens(mm, 1120000, true) == 910);
    whisper_audio_model_free(mm);
    const std::vector<uint8_t> mb = read_bytes(test_data("towers/qwen3a.mmproj.gguf"));
    const std::string mk = "a.conv2d.1.weight", bad_mk = "a.conv2d.9.weight";
    std::vector<uint8_t> mc = mb;
    auto mi = std::search(mc.begin(), mc.end(), mk.begin(), mk.end());
    REQUIRE(mi != mc.end());
    std::copy(bad_mk.begin(), bad_mk.end(), mi);
    const std::string mpath = test_tmp("qwen3a-no-conv2d1.mmproj.gguf");
    write_bytes(mpath, mc);
    CHECK(whisper_audio_model_load(mpath.c_str()) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("'a.conv2d.1.weight' is missing") != std::string::npos);
    remove(mpath.c_str());
}

TEST_CASE("towers: tokens per audio length are the models' own") {
    whisper_audio_model * q = whisper_audio_model_load("build/tower-qwen2a-f32.gguf");
    whisper_audio_model * v = whisper_audio_model_load("build/tower-voxtral-f32.gguf");
    whisper_audio_model * u = whisper_audio_model_load("build/tower-ultravox-f32.gguf");
    REQUIRE(q);
    REQUIRE(v);
    REQUIRE(u);
    // speech_16k: 112256 samples, 702 mel frames, 351 positions (the references' row counts)
    CHECK(whisper_audio_n_tokens(q, 112256, true) == 175);
    CHECK(whisper_audio_n_tokens(v, 112256, true) == 375);
    CHECK(whisper_audio_n_tokens(v, 112256, false) == 1500);
    CHECK(whisper_audio_n_tokens(u, 112256, true) == 44);
    CHECK(whisper_audio_n_tokens(u, 112256, false) == 351);
    CHECK(whisper_audio_n_tokens(q, 50001, true) == 78);    // 313 frames (odd), 157 positions
    CHECK(whisper_audio_n_tokens(u, 50001, true) == 20);
    CHECK(whisper_audio_n_tokens(q, 480000, true) == 750);
    CHECK(whisper_audio_n_tokens(u, 480000, true) == 188);  // 1500 positions, the last token zero-padded
    CHECK(whisper_audio_n_tokens(q, 320, true) == 0);       // Qwen2-Audio: (1 - 2) // 2 + 1
    CHECK(whisper_audio_n_tokens(u, 1, true) == 1);         // Ultravox pads to 2 hops
    CHECK(whisper_audio_n_tokens(q, 480000 + 112256, true) == 750);        // its processor keeps the first 30 s
    CHECK(whisper_audio_n_tokens(v, 2 * 480000 + 1, true) == 3 * 375);
    CHECK(whisper_audio_n_tokens(u, 1120000, true) == 188 + 188 + 63);     // 7000 frames: chunks of 3000, 3000, 1000
    // a Whisper model has none
    whisper_audio_model * w = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(w);
    CHECK(whisper_audio_n_tokens(w, 16000, true) == 0);
    CHECK(std::string(whisper_audio_last_error()).find("without an audio-LLM projector") != std::string::npos);
    whisper_audio_model_free(w);
    whisper_audio_model_free(q);
    whisper_audio_model_free(v);
    whisper_audio_model_free(u);
}

TEST_CASE("towers: tokens for any length in bounded time: no wrap near SIZE_MAX, the same counts as window by window") {
    for (const char * name : TOWERS) {
        CAPTURE(name);
        whisper_audio_model * m = whisper_audio_model_load(("build/tower-" + std::string(name) + "-f32.gguf").c_str());
        REQUIRE(m);
        const auto t0 = std::chrono::steady_clock::now();
        const size_t huge = whisper_audio_n_tokens(m, SIZE_MAX, true), big = whisper_audio_n_tokens(m, (size_t)1 << 50, true);
        CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);
        // an input past the tower's limit gives the limit's tokens; without a limit, more audio never gives fewer
        const size_t used = whisper_audio_samples_used(m, true);
        if (used == SIZE_MAX) CHECK(huge >= big);
        else CHECK(huge == whisper_audio_n_tokens(m, used, true));
        CHECK(big > 0);
        // 10 windows and a bit: the sum of what the inputs of each window's length give
        const size_t w = 10 * (size_t)WHISPER_AUDIO_N_SAMPLES + 12345;
        if (used == SIZE_MAX && name != std::string("qwen3a") && name != std::string("qwen3asr") && name != std::string("stepaudio2"))
            CHECK(whisper_audio_n_tokens(m, w, true) == 10 * whisper_audio_n_tokens(m, WHISPER_AUDIO_N_SAMPLES, true) +
                                                         whisper_audio_n_tokens(m, 12345, true));
        whisper_audio_model_free(m);
    }
}

TEST_CASE("towers: CPU f32 against the models' own code in float64, from features and from audio") {
    for (const char * name : TOWERS) {
        const std::string ref_dir = std::string("towers/") + name;
        for (const std::string & path : tower_files(name)) {
            whisper_audio_model * model = whisper_audio_model_load(path.c_str());
            REQUIRE_MESSAGE(model, whisper_audio_last_error());
            const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
            // Ultravox and MiniCPM-o: an input of one chunk unpadded; Step-Audio 2: its 704 frames (702 and
            // log_mel_spectrogram's 479 zeros), wav_lens 702; the others: a padded 30 s window
            const bool unpadded = hp->projector == WHISPER_AUDIO_PROJECTOR_ULTRAVOX || hp->projector == WHISPER_AUDIO_PROJECTOR_MINICPMO;
            const bool step = hp->projector == WHISPER_AUDIO_PROJECTOR_STEPAUDIO2;

            // from the feature extractor's log-mel (speech_16k: 702 frames hold audio)
            std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel" + std::to_string(hp->n_mels) + ".npy"), nullptr);
            const int n_frames = step ? 704 : unpadded ? 702 : 3000;
            std::vector<float> mel_in((size_t)hp->n_mels * n_frames);
            for (int m = 0; m < hp->n_mels; m++)
                std::copy(mel.begin() + (size_t)m * 3000, mel.begin() + (size_t)m * 3000 + n_frames, mel_in.begin() + (size_t)m * n_frames);
            for (bool projector : {true, false}) {
                whisper_audio_encoder * enc = cpu_encoder(model, projector);
                const int width = projector ? hp->n_llm : hp->n_state;
                std::vector<float> got((size_t)1500 * width, NAN);
                const int rows = whisper_audio_encode_mel_tokens(enc, mel_in.data(), n_frames, 702, got.data());
                REQUIRE_MESSAGE(rows > 0, whisper_audio_last_error());
                CHECK((size_t)rows == whisper_audio_n_tokens(model, 112256, projector));
                got.resize((size_t)rows * width);
                std::vector<int64_t> shape;
                std::vector<float> ref = npy_load_f32(test_data(ref_dir + ".speech_16k.features" + (projector ? "" : ".tower") + ".npy"), &shape);
                REQUIRE(shape.size() == 2);
                CHECK(shape[1] == width);
                const double err = first_rows_error(got, ref);
                MESSAGE(path << std::string(projector ? " tokens" : " tower") << " from features: rel L2 " << err << " (" << rows << " rows)");
                CHECK(err < 2e-6);
                whisper_audio_encoder_free(enc);
            }

            // from audio: our decode, log-mel and tokens (two lengths: 702 and 313 mel frames)
            whisper_audio_encoder * enc = cpu_encoder(model, true);
            for (auto clip : {std::make_pair("speech_16k", (size_t)112256), std::make_pair("speech_50001", (size_t)50001)}) {
                std::vector<float> pcm = pcm_of(clip.second);
                const size_t n_tok = whisper_audio_n_tokens(model, pcm.size(), true);
                std::vector<float> got(n_tok * hp->n_llm, NAN);
                REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), got.data()), whisper_audio_last_error());
                std::vector<int64_t> shape;
                std::vector<float> ref = npy_load_f32(test_data(ref_dir + "." + clip.first + ".audio.npy"), &shape);
                if (hp->projector != WHISPER_AUDIO_PROJECTOR_VOXTRAL) CHECK((size_t)shape[0] == n_tok);   // Voxtral's: the first 100
                const double err = first_rows_error(got, ref);
                MESSAGE(path << " tokens from audio (" << std::string(clip.first) << "): rel L2 " << err << " (" << n_tok << " tokens)");
                CHECK(err < 1e-5);
            }
            whisper_audio_encoder_free(enc);
            whisper_audio_model_free(model);
        }
    }
}

TEST_CASE("towers: 70 s of audio as each model's processor takes it (Qwen2-Audio: the first 30 s; Voxtral, Ultravox: one log-mel, chunks; "
          "Audio Flamingo 3, MiniCPM-o: 30 s windows)") {
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    REQUIRE(a.pcm.size() == 1120000);
    for (const char * name : TOWERS) {
        for (const std::string & path : tower_files(name)) {
            whisper_audio_model * model = whisper_audio_model_load(path.c_str());
            REQUIRE_MESSAGE(model, whisper_audio_last_error());
            const int width = whisper_audio_model_hparams(model)->n_llm;
            whisper_audio_encoder * enc = cpu_encoder(model, true);   // batch 2: chunks share a batch
            const size_t n_tok = whisper_audio_n_tokens(model, a.pcm.size(), true);
            std::vector<float> got(n_tok * width, NAN);
            REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, a.pcm.data(), a.pcm.size(), got.data()), whisper_audio_last_error());
            std::vector<int64_t> shape;
            std::vector<float> ref = npy_load_f32(test_data(std::string("towers/") + name + ".long_70s.audio.every8.npy"), &shape);
            REQUIRE(shape.size() == 2);
            CHECK((size_t)shape[0] == (n_tok + 7) / 8);
            std::vector<float> every8;
            for (size_t r = 0; r < n_tok; r += 8) every8.insert(every8.end(), got.begin() + r * width, got.begin() + (r + 1) * width);
            const double err = rel_l2(every8, ref);
            MESSAGE(path << " 70 s: " << n_tok << " tokens, rel L2 " << err);
            CHECK(err < 1e-5);
            whisper_audio_encoder_free(enc);
            whisper_audio_model_free(model);
        }
    }
}

namespace {

// file with the first `from` replaced by `to` (same length)
std::vector<uint8_t> patched(const std::vector<uint8_t> & file, const std::string & from, const std::string & to) {
    REQUIRE(from.size() == to.size());
    std::vector<uint8_t> b = file;
    auto it = std::search(b.begin(), b.end(), from.begin(), from.end());
    REQUIRE(it != b.end());
    std::copy(to.begin(), to.end(), it);
    return b;
}

// the uint32 value of a GGUF key set to v
std::vector<uint8_t> with_u32(const std::vector<uint8_t> & file, const std::string & key, uint32_t v) {
    std::vector<uint8_t> b = file;
    auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
    REQUIRE(it != b.end());
    memcpy(&*(it + key.size() + 4), &v, 4);                      // after the key: uint32 type, then the value
    return b;
}

// the string value of a GGUF key replaced by one of the same length
std::vector<uint8_t> with_string(const std::vector<uint8_t> & file, const std::string & key, const std::string & v) {
    std::vector<uint8_t> b = file;
    auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
    REQUIRE(it != b.end());
    uint64_t len;
    memcpy(&len, &*(it + key.size() + 4), 8);                    // after the key: uint32 type, uint64 length
    REQUIRE(len == v.size());
    std::copy(v.begin(), v.end(), it + key.size() + 12);
    return b;
}

} // namespace

TEST_CASE("towers: Music Flamingo is Audio Flamingo 3's type with its rotary time embedding's keys; its first 1200 s; "
          "the rotation by the window's time (21 windows: its largest angles)") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-mflamingo-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(m);
    CHECK(hp->projector == WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO);
    CHECK(hp->n_time_rot == 12);               // int(d_model 64 x partial_rotary_factor 0.2)
    CHECK(hp->time_rope_theta == 1200.0f);
    CHECK(hp->time_rope_step == 0.04f);        // audio_frame_step 0.01 x 4
    // MusicFlamingoProcessor: Audio Flamingo 3's windows and rule, max_audio_len 1200 (40 windows)
    CHECK(whisper_audio_n_tokens(m, 112256, true) == 175);
    CHECK(whisper_audio_n_tokens(m, 1120000, true) == 750 + 750 + 250);
    CHECK(whisper_audio_n_tokens(m, 30 * 480000, true) == 30 * 750);
    CHECK(whisper_audio_n_tokens(m, 50 * 480000, true) == 40 * 750);
    CHECK(whisper_audio_samples_used(m, true) == 40 * (size_t)480000);
    // Audio Flamingo 3's files have none of the keys, and run without the rotation
    whisper_audio_model * f = whisper_audio_model_load("build/tower-af3-f32.gguf");
    REQUIRE(f);
    CHECK(whisper_audio_model_hparams(f)->n_time_rot == 0);
    CHECK(whisper_audio_model_hparams(f)->time_rope_theta == 0.0f);
    whisper_audio_model_free(f);

    // 630 s (the long clip 9 times): 21 windows; the last 250 tokens, at 620 to 630 s
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    std::vector<float> pcm;
    for (int i = 0; i < 9; i++) pcm.insert(pcm.end(), a.pcm.begin(), a.pcm.end());
    const size_t n_tok = whisper_audio_n_tokens(m, pcm.size(), true);
    CHECK(n_tok == 21 * 750);
    whisper_audio_encoder * enc = cpu_encoder(m, true);
    std::vector<float> got(n_tok * 32, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), got.data()), whisper_audio_last_error());
    std::vector<int64_t> shape;
    const std::vector<float> ref = npy_load_f32(test_data("towers/mflamingo.long_630s.audio.tail.npy"), &shape);
    REQUIRE(shape[0] == 250);
    const double err = rel_l2(got.data() + (n_tok - 250) * 32, ref.data(), ref.size());
    MESSAGE("mflamingo 630 s: the last 250 tokens, rel L2 " << err);
    CHECK(err < 1e-5);
    whisper_audio_encoder_free(enc);

    // the file without its keys is Audio Flamingo 3's: the same encoder, other tokens (the rotation is there)
    const std::vector<uint8_t> b = read_bytes("build/tower-mflamingo-f32.gguf");
    std::vector<uint8_t> c = b;
    for (const std::string key : {"whisper.projector.time_rope.dimension_count", "whisper.projector.time_rope.freq_base",
                                  "whisper.projector.time_rope.step"}) {
        auto it = std::search(c.begin(), c.end(), key.begin(), key.end());
        REQUIRE(it != c.end());
        *(it + 10) = 'X';                      // whisper.prXjector...: a key no reader takes
    }
    const std::string path = test_tmp("mflamingo-as-af3.gguf");
    write_bytes(path, c);
    whisper_audio_model * plain = whisper_audio_model_load(path.c_str());
    REQUIRE_MESSAGE(plain, whisper_audio_last_error());
    CHECK(whisper_audio_model_hparams(plain)->n_time_rot == 0);
    whisper_audio_encoder * e2 = cpu_encoder(plain, true);
    const std::vector<float> speech = pcm_of(112256);
    std::vector<float> with(175 * 32), without(175 * 32);
    REQUIRE(whisper_audio_encode_tokens(e2, speech.data(), speech.size(), without.data()));
    whisper_audio_encoder_free(e2);
    enc = cpu_encoder(m, true);
    REQUIRE(whisper_audio_encode_tokens(enc, speech.data(), speech.size(), with.data()));
    whisper_audio_encoder_free(enc);
    CHECK(rel_l2(without, with) > 1e-2);
    whisper_audio_model_free(plain);
    remove(path.c_str());
    // a rotary width that is odd or wider than half the model, a key missing, the keys on another tower: refused
    const std::string bad = test_tmp("mflamingo-bad.gguf");
    for (uint32_t v : {13u, 34u}) {
        write_bytes(bad, with_u32(b, "whisper.projector.time_rope.dimension_count", v));
        CHECK(whisper_audio_model_load(bad.c_str()) == nullptr);
        CHECK(std::string(whisper_audio_last_error()).find("whisper.projector.time_rope.dimension_count = " + std::to_string(v)) != std::string::npos);
    }
    write_bytes(bad, patched(b, "whisper.projector.time_rope.step", "whisper.projector.time_rope.stXp"));
    CHECK(whisper_audio_model_load(bad.c_str()) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("whisper.projector.time_rope.step") != std::string::npos);
    write_bytes(bad, with_string(b, "whisper.projector.type", "musicflamingX"));
    CHECK(whisper_audio_model_load(bad.c_str()) == nullptr);
    remove(bad.c_str());
    whisper_audio_model_free(m);
}

TEST_CASE("towers: Qwen3-ASR is Qwen3-Omni's tower with its own processing: 8000 samples at least, a clip shorter than a "
          "chunk run as a whole one") {
    whisper_audio_model * q = whisper_audio_model_load("build/tower-qwen3asr-f32.gguf");
    REQUIRE_MESSAGE(q, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(q);
    CHECK(hp->projector == WHISPER_AUDIO_PROJECTOR_QWEN3ASR);
    CHECK(hp->n_conv == 16);                   // downsample_hidden_size
    CHECK(hp->n_chunk == 100);                 // 2 n_window
    CHECK(hp->n_attn_window == 800);           // n_window_infer
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_QWEN3ASR)) == "qwen3asr");
    CHECK(WHISPER_AUDIO_TOWER_QWEN3ASR == WHISPER_AUDIO_PROJECTOR_QWEN3ASR);
    // Qwen3ASRProcessor._get_audio_token_length of floor(max(n, 8000) / 160) frames
    CHECK(whisper_audio_n_tokens(q, 112256, true) == 92);     // 701 frames
    CHECK(whisper_audio_n_tokens(q, 112256, false) == 92);
    CHECK(whisper_audio_n_tokens(q, 50001, true) == 41);
    CHECK(whisper_audio_n_tokens(q, 1, true) == 7);           // min_length: 8000 samples, 50 frames
    CHECK(whisper_audio_n_tokens(q, 7999, true) == 7);
    CHECK(whisper_audio_n_tokens(q, 8000, true) == 7);
    CHECK(whisper_audio_n_tokens(q, 8320, true) == 7);        // 52 frames: 26, 13, 7
    CHECK(whisper_audio_n_tokens(q, 16000, true) == 13);      // 100 frames: a whole chunk
    CHECK(whisper_audio_n_tokens(q, 448000, true) == 364);
    CHECK(whisper_audio_n_tokens(q, 1120000, true) == 910);
    CHECK(whisper_audio_samples_used(q, true) == SIZE_MAX);
    // from audio: shorter than min_length (zeros after it), at it, two windows (the cut at 2400 frames)
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    whisper_audio_encoder * enc = cpu_encoder(q, true);
    for (auto clip : {std::make_pair("speech_4000", (size_t)4000), std::make_pair("speech_8000", (size_t)8000),
                      std::make_pair("long_448000", (size_t)448000)}) {
        std::vector<float> pcm = clip.second < 10000 ? pcm_of(clip.second) : std::vector<float>(a.pcm.begin(), a.pcm.begin() + clip.second);
        const size_t n_tok = whisper_audio_n_tokens(q, pcm.size(), true);
        std::vector<float> got(n_tok * 32, NAN);
        REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), got.data()), whisper_audio_last_error());
        std::vector<int64_t> shape;
        std::vector<float> ref = npy_load_f32(test_data(std::string("towers/qwen3asr.") + clip.first + ".audio.npy"), &shape);
        CHECK((size_t)shape[0] == n_tok);
        const double err = rel_l2(got, ref);
        MESSAGE("qwen3asr tokens from audio (" << std::string(clip.first) << "): rel L2 " << err << " (" << n_tok << " tokens)");
        CHECK(err < 1e-5);
    }
    whisper_audio_encoder_free(enc);
    // from features: 50 frames hold audio, run as a whole chunk of 100 (not Qwen3-Omni's own length)
    std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel128.npy"), nullptr);
    enc = cpu_encoder(q, true);
    std::vector<float> got(390 * 32, NAN);
    REQUIRE(whisper_audio_encode_mel_tokens(enc, mel.data(), 3000, 50, got.data()) == 7);
    const std::vector<float> ref = npy_load_f32(test_data("towers/qwen3asr.speech_16k.features_50.npy"), nullptr);
    REQUIRE(ref.size() == 7 * 32);
    const double err = rel_l2(got.data(), ref.data(), ref.size());
    MESSAGE("qwen3asr tokens from 50 frames of features: rel L2 " << err);
    CHECK(err < 2e-6);
    whisper_audio_encoder_free(enc);
    // its projector's tensors are its own: a file that names them as Qwen3-Omni's is refused with the name
    const std::vector<uint8_t> b = read_bytes("build/tower-qwen3asr-f32.gguf");
    const std::string bad = test_tmp("qwen3asr-bad.gguf");
    write_bytes(bad, patched(b, "multi_modal_projector.linear_2.weight", "multi_modal_projector.linear_9.weight"));
    CHECK(whisper_audio_model_load(bad.c_str()) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("multi_modal_projector.linear_2.weight") != std::string::npos);
    remove(bad.c_str());
    whisper_audio_model_free(q);
}

TEST_CASE("towers: bad projector files get a one-line error that names the tensor or key") {
    const std::vector<uint8_t> qwen = read_bytes(test_data("towers/qwen2a.mmproj.gguf"));
    const std::vector<uint8_t> vox = read_bytes(test_data("towers/voxtral.mmproj.gguf"));
    const std::vector<uint8_t> uvx = read_bytes(test_data("towers/ultravox.mmproj.gguf"));
    const std::vector<uint8_t> ours = read_bytes("build/tower-voxtral-f32.gguf");
    struct bad { const char * name; std::vector<uint8_t> bytes; const char * expect; };
    const bad cases[] = {
        {"unknown-type.gguf", with_string(qwen, "clip.projector_type", "qwen9a"), "clip.projector_type is 'qwen9a', not a projector this library runs"},
        {"ours-unknown-type.gguf", with_string(ours, "whisper.projector.type", "voxtrax"), "whisper.projector.type is 'voxtrax'"},
        {"llm-dim.gguf", with_u32(qwen, "clip.audio.projection_dim", 33), "tensor 'mm.a.fc.weight' has dims [64, 32]"},
        {"stack.gguf", with_u32(vox, "clip.audio.projector.stack_factor", 3), "tensor 'mm.a.mlp.1.weight' has dims [256, 32]"},
        {"stack-1500.gguf", with_u32(vox, "clip.audio.projector.stack_factor", 7), "does not divide the 1500 positions"},
        {"no-norm.gguf", patched(uvx, "mm.a.norm_mid.weight", "mm.a.norm_xid.weight"), "needs one of the tensors 'mm.a.norm_mid.weight'"},
        {"no-fc.gguf", patched(qwen, "mm.a.fc.bias", "mm.a.fc.bixs"), "tensor 'mm.a.fc.bias' is missing"},
        {"no-audio.gguf", patched(qwen, "clip.audio.embedding_length", "clip.audio.embedding_lengtx"), "without an audio encoder"},
        {"layer.gguf", patched(vox, "a.blk.2.ln2.weight", "a.blk.2.ln9.weight"), "tensor 'a.blk.2.ln2.weight' is missing"},
    };
    for (const bad & c : cases) {
        const std::string path = test_tmp(c.name);
        write_bytes(path, c.bytes);
        whisper_audio_model * m = whisper_audio_model_load(path.c_str());
        CHECK_MESSAGE(m == nullptr, c.name);
        const std::string msg = whisper_audio_last_error();
        CHECK_MESSAGE(msg.find(c.expect) != std::string::npos, msg);
        CHECK_MESSAGE(msg.find('\n') == std::string::npos, msg);
        whisper_audio_model_free(m);
        remove(path.c_str());
    }
}

TEST_CASE("towers on CUDA: tokens in f16 and bf16 near the float64 references (tests/gpu/towers.py: the 1.25x bound)" *
          doctest::skip(no_gpu())) {
    for (const char * name : TOWERS) {
        for (const std::string & path : tower_files(name)) {
            whisper_audio_model * model = whisper_audio_model_load(path.c_str());
            REQUIRE_MESSAGE(model, whisper_audio_last_error());
            const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
            for (whisper_audio_dtype dt : {WHISPER_AUDIO_DTYPE_F16, WHISPER_AUDIO_DTYPE_BF16}) {
                whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
                p.device = WHISPER_AUDIO_DEVICE_CUDA;
                p.dtype = dt;
                p.max_batch = 2;
                whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
                REQUIRE_MESSAGE(enc, whisper_audio_last_error());
                for (auto clip : {std::make_pair("speech_16k", (size_t)112256), std::make_pair("speech_50001", (size_t)50001)}) {
                    std::vector<float> pcm = pcm_of(clip.second);
                    std::vector<float> got(whisper_audio_n_tokens(model, pcm.size(), true) * hp->n_llm, NAN);
                    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), got.data()), whisper_audio_last_error());
                    std::vector<float> ref = npy_load_f32(test_data(std::string("towers/") + name + "." + clip.first + ".audio.npy"), nullptr);
                    const double err = first_rows_error(got, ref);
                    MESSAGE(path << std::string(dt == WHISPER_AUDIO_DTYPE_F16 ? " f16 " : " bf16 ") << std::string(clip.first)
                                 << ": rel L2 " << err);
                    CHECK(err < (dt == WHISPER_AUDIO_DTYPE_F16 ? 1e-2 : 5e-2));
                }
                whisper_audio_encoder_free(enc);
            }
            whisper_audio_model_free(model);
        }
    }
}

namespace {

struct token_rows {                      // what a pipeline gave, per input: its rows and records
    std::vector<std::vector<float>> rows;
    std::vector<std::vector<whisper_audio_rows>> records;
    int width = 0;
};

bool collect_rows(const whisper_audio_rows * r, void * user) {
    token_rows & t = *(token_rows *)user;
    if ((size_t)r->input >= t.rows.size()) { t.rows.resize(r->input + 1); t.records.resize(r->input + 1); }
    REQUIRE(!r->f16);
    t.width = r->n_state;
    const float * x = (const float *)r->data;
    t.rows[r->input].insert(t.rows[r->input].end(), x, x + (size_t)r->n_rows * r->n_state);
    whisper_audio_rows rec = *r;
    rec.data = nullptr;
    t.records[r->input].push_back(rec);
    return true;
}

// inputs through one pipeline over encs, pushed in pieces of `piece` samples
token_rows pipeline_tokens(std::vector<whisper_audio_encoder *> encs, const std::vector<std::vector<float>> & inputs,
                           size_t piece) {
    token_rows t;
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.on_rows = collect_rows;
    pp.user = &t;
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(encs.data(), (int)encs.size(), pp);
    REQUIRE_MESSAGE(p, whisper_audio_last_error());
    CHECK(whisper_audio_pipeline_tokens(p));
    for (const std::vector<float> & x : inputs) {
        for (size_t i = 0; i < x.size(); i += piece)
            REQUIRE_MESSAGE(whisper_audio_pipeline_push(p, x.data() + i, std::min(piece, x.size() - i)), whisper_audio_last_error());
        REQUIRE_MESSAGE(whisper_audio_pipeline_end_input(p), whisper_audio_last_error());
    }
    REQUIRE_MESSAGE(whisper_audio_pipeline_finish(p), whisper_audio_last_error());
    whisper_audio_pipeline_free(p);
    return t;
}

} // namespace

TEST_CASE("towers on the pipeline: inputs share batches, and every input's tokens are encode_tokens' of it alone, bit for bit") {
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    // lengths around every rule: at most 320 samples (Qwen2-Audio: no tokens), one unpadded chunk,
    // equal lengths (Ultravox's unpadded chunks batch together), 30 s exactly, 70 s (three chunks:
    // the first pass for the whole input's max)
    const size_t lengths[] = {300, 50001, 112256, 50001, 480000, 1120000, 321, 50001};
    std::vector<std::vector<float>> inputs;
    for (size_t n : lengths) inputs.emplace_back(a.pcm.begin(), a.pcm.begin() + n);
    std::vector<const char *> towers(std::begin(TOWERS), std::end(TOWERS));
    towers.push_back("realtime");          // (its inputs run in causal steps, not batches: each its rows at once)
    for (const char * name : towers) {
        CAPTURE(name);
        whisper_audio_model * model = whisper_audio_model_load(("build/tower-" + std::string(name) + "-f32.gguf").c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        for (bool projector : {true, false}) {
            CAPTURE(projector);
            whisper_audio_encoder * alone = cpu_encoder(model, projector);
            std::vector<std::vector<float>> want;
            for (const std::vector<float> & x : inputs) {
                want.emplace_back(whisper_audio_n_tokens(model, x.size(), projector) * whisper_audio_token_dim(model, projector));
                REQUIRE_MESSAGE(whisper_audio_encode_tokens(alone, x.data(), x.size(), want.back().data()), whisper_audio_last_error());
            }
            whisper_audio_encoder_free(alone);
            // batch 3, one encoder or two (two GPUs' worth), pushed whole or in odd pieces
            whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
            ep.device = WHISPER_AUDIO_DEVICE_CPU;
            ep.n_threads = 2;
            ep.max_batch = 3;
            ep.projector = projector;
            for (int n_enc : {1, 2}) {
                std::vector<whisper_audio_encoder *> encs;
                for (int e = 0; e < n_enc; e++) encs.push_back(whisper_audio_encoder_init(model, ep));
                for (whisper_audio_encoder * e : encs) REQUIRE_MESSAGE(e, whisper_audio_last_error());
                token_rows got = pipeline_tokens(encs, inputs, n_enc == 1 ? (size_t)1 << 30 : 77777);
                REQUIRE(got.rows.size() == inputs.size());
                CHECK(got.width == whisper_audio_token_dim(model, projector));
                for (size_t i = 0; i < inputs.size(); i++) {
                    CAPTURE(i);
                    CHECK(got.rows[i].size() == want[i].size());
                    CHECK(got.rows[i] == want[i]);
                    // one record per chunk: its index, the audio in it, the positions holding audio
                    size_t samples = 0;
                    for (size_t c = 0; c < got.records[i].size(); c++) {
                        CHECK(got.records[i][c].window == (int64_t)c);
                        samples += got.records[i][c].samples;
                    }
                    CHECK(samples == std::min(inputs[i].size(), whisper_audio_samples_used(model, true)));
                }
                for (whisper_audio_encoder * e : encs) whisper_audio_encoder_free(e);
            }
        }
        whisper_audio_model_free(model);
    }
}

TEST_CASE("towers: what each input gives is the library's rule (tokens, or the Whisper encoder's windows)") {
    whisper_audio_model * tower = whisper_audio_model_load("build/tower-qwen2a-f32.gguf");
    whisper_audio_model * whisper = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(tower);
    REQUIRE(whisper);
    whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    CHECK(whisper_audio_rows_are_tokens(tower, ep, pp));
    CHECK_FALSE(whisper_audio_rows_are_tokens(whisper, ep, pp));
    ep.output_layer = 1;
    CHECK_FALSE(whisper_audio_rows_are_tokens(tower, ep, pp));
    ep.output_layer = -1;
    pp.pool = WHISPER_AUDIO_POOL_MEAN;
    CHECK_FALSE(whisper_audio_rows_are_tokens(tower, ep, pp));
    pp.pool = WHISPER_AUDIO_POOL_NONE;
    pp.no_pad = true;
    CHECK_FALSE(whisper_audio_rows_are_tokens(tower, ep, pp));
    CHECK(whisper_audio_samples_used(tower, true) == WHISPER_AUDIO_N_SAMPLES);
    CHECK(whisper_audio_samples_used(tower, false) == SIZE_MAX);
    CHECK(whisper_audio_samples_used(whisper, true) == SIZE_MAX);
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_VOXTRAL)) == "voxtral");
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_NONE)) == "none");
    CHECK(whisper_audio_projector_name((whisper_audio_projector)99) == nullptr);
    // Qwen2-Audio's rule for at most 320 samples: no tokens, as its own code gives (an input of
    // 321 gives its first)
    CHECK(whisper_audio_n_tokens(tower, 320, true) == 0);
    CHECK(whisper_audio_n_tokens(tower, 321, true) == 1);
    whisper_audio_model_free(tower);
    whisper_audio_model_free(whisper);
}

TEST_CASE("towers on CUDA: 70 s through the pipeline (the first pass for the input's max on the device) near float64" *
          doctest::skip(no_gpu())) {
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    for (const char * name : TOWERS) {
        whisper_audio_model * model = whisper_audio_model_load(("build/tower-" + std::string(name) + "-f32.gguf").c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        const int width = whisper_audio_model_hparams(model)->n_llm;
        std::vector<float> ref = npy_load_f32(test_data(std::string("towers/") + name + ".long_70s.audio.every8.npy"), nullptr);
        for (whisper_audio_dtype dt : {WHISPER_AUDIO_DTYPE_F16, WHISPER_AUDIO_DTYPE_BF16}) {
            whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
            p.device = WHISPER_AUDIO_DEVICE_CUDA;
            p.dtype = dt;
            p.max_batch = 2;
            whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
            REQUIRE_MESSAGE(enc, whisper_audio_last_error());
            const size_t n_tok = whisper_audio_n_tokens(model, a.pcm.size(), true);
            std::vector<float> got(n_tok * width, NAN);
            REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, a.pcm.data(), a.pcm.size(), got.data()), whisper_audio_last_error());
            std::vector<float> every8;
            for (size_t r = 0; r < n_tok; r += 8) every8.insert(every8.end(), got.begin() + r * width, got.begin() + (r + 1) * width);
            const double err = rel_l2(every8, ref);
            MESSAGE(name << (dt == WHISPER_AUDIO_DTYPE_F16 ? " f16" : " bf16") << " 70 s: " << n_tok << " tokens, rel L2 " << err);
            CHECK(err < (dt == WHISPER_AUDIO_DTYPE_F16 ? 1e-2 : 5e-2));
            whisper_audio_encoder_free(enc);
        }
        whisper_audio_model_free(model);
    }
}

TEST_CASE("towers on CUDA: an input of 1 sample (and of 320) gives the CPU's rows: no crash, Qwen2-Audio none (issue 23)" *
          doctest::skip(no_gpu())) {
    for (const char * name : TOWERS) {
        whisper_audio_model * model = whisper_audio_model_load(("build/tower-" + std::string(name) + "-f32.gguf").c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        whisper_audio_encoder * cpu = cpu_encoder(model, true);
        whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
        p.device = WHISPER_AUDIO_DEVICE_CUDA;
        p.max_batch = 2;
        whisper_audio_encoder * gpu = whisper_audio_encoder_init(model, p);
        REQUIRE_MESSAGE(gpu, whisper_audio_last_error());
        for (size_t n : {(size_t)1, (size_t)320}) {
            CAPTURE(name);
            CAPTURE(n);
            const std::vector<float> pcm = pcm_of(n);
            const size_t rows = whisper_audio_n_tokens(model, n, true);
            const int width = whisper_audio_token_dim(model, true);
            const std::string nm = name;
            CHECK(rows == (nm == "qwen2a" || nm == "af3" || nm == "mflamingo" || nm == "glmasr" || nm == "qwen25o" || nm == "minicpmo"
                           || nm == "stepaudio2" ? 0u                  // (Step-Audio 2: E = 0 pooled positions)
                           : nm == "voxtral" ? 375u : nm == "meralion" ? 100u                 // (MERaLiON-2: 100 a chunk of any length)
                           : nm == "qwen3a" ? (n == 1 ? 0u : 1u) : nm == "qwen3asr" ? 7u   // (Qwen3-ASR: padded to 8000 samples)
                           : 1u));   // (Kimi-Audio: token_len 1; Qwen3-Omni: a frame per whole hop)
            std::vector<float> a(rows * width + 1, NAN), b(rows * width + 1, NAN);
            REQUIRE_MESSAGE(whisper_audio_encode_tokens(cpu, pcm.data(), n, a.data()), whisper_audio_last_error());
            REQUIRE_MESSAGE(whisper_audio_encode_tokens(gpu, pcm.data(), n, b.data()), whisper_audio_last_error());
            if (rows > 0) CHECK(rel_l2(b.data(), a.data(), rows * width) < 5e-2);
            CHECK(std::isnan(b[rows * width]));          // nothing written past the rows
        }
        whisper_audio_encoder_free(gpu);
        whisper_audio_encoder_free(cpu);
        whisper_audio_model_free(model);
    }
}

// ---- Voxtral Realtime: causal, run in steps -------------------------------------------------

#include "whisper-audio-impl.h"

namespace {

// The rows of pcm through the tower's causal state, fed in pieces of `piece` samples, its steps
// waiting for min_step mel frames (wa_causal: what the pipeline and a stream call).
std::vector<float> realtime_in_steps(whisper_audio_encoder * enc, const std::vector<float> & pcm, size_t piece, int min_step) {
    std::vector<float> rows;
    wa_causal * s = wa_causal_begin(enc, min_step);
    for (size_t i = 0; i < pcm.size(); i += piece)
        REQUIRE_MESSAGE(wa_causal_feed(s, pcm.data() + i, std::min(piece, pcm.size() - i), rows), whisper_audio_last_error());
    REQUIRE_MESSAGE(wa_causal_end(s, rows), whisper_audio_last_error());
    wa_causal_free(s);
    return rows;
}

} // namespace

TEST_CASE("towers: Voxtral Realtime's tokens: its processor's zeros around the audio, 8 mel frames a token, near float64 "
          "(transformers' own f32: 5.0e-7 tokens, 3.9e-7 tower)") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-realtime-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(m);
    CHECK(hp->projector == WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME);
    CHECK(WHISPER_AUDIO_TOWER_VOXTRAL_REALTIME == WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME);
    CHECK(std::string(whisper_audio_projector_name(WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME)) == "voxtral_realtime");
    CHECK(hp->head_dim == 64);                 // q, k, v 2 x 64 wide, the model 64
    CHECK(hp->n_window == 750);
    CHECK(hp->n_rot == 64);
    CHECK(hp->stack_factor == 4);
    CHECK(hp->pad_left == 32);                 // streaming_n_left_pad_tokens
    CHECK(hp->pad_right == 17);                // delay 6 + 1 + 10
    // 32 + ceil(n / 1280) + 17 tokens (mistral_common's AudioEncoder.pad, offline)
    CHECK(whisper_audio_n_tokens(m, 112256, true) == 137);
    CHECK(whisper_audio_n_tokens(m, 112256, false) == 548);
    CHECK(whisper_audio_n_tokens(m, 50001, true) == 89);
    CHECK(whisper_audio_n_tokens(m, 1, true) == 50);
    CHECK(whisper_audio_n_tokens(m, 1280, true) == 50);
    CHECK(whisper_audio_n_tokens(m, 1281, true) == 51);
    CHECK(whisper_audio_n_tokens(m, 1120000, true) == 924);
    CHECK(whisper_audio_samples_used(m, true) == SIZE_MAX);
    CHECK(whisper_audio_n_tokens(m, SIZE_MAX, true) >= whisper_audio_n_tokens(m, (size_t)1 << 50, true));

    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    // transformers' own float32 error on each clip (its get_audio_features in f32 on the same input)
    struct clip { const char * name; std::vector<float> pcm; double transformers_f32; size_t every; };
    const std::vector<clip> clips = {
        {"speech_16k", pcm_of(112256), 5.03e-7, 1},
        {"speech_50001", pcm_of(50001), 5.11e-7, 1},
        {"speech_1000", pcm_of(1000), 4.98e-7, 1},
        {"long_448000", std::vector<float>(a.pcm.begin(), a.pcm.begin() + 448000), 4.89e-7, 1},   // 3096 positions: 4 windows of 750
        {"long_70s", a.pcm, 0.0, 8},                                                              // steps of 3000, 3000 and 1392 frames
    };
    whisper_audio_encoder * enc = cpu_encoder(m, true);
    for (const clip & c : clips) {
        const size_t n_tok = whisper_audio_n_tokens(m, c.pcm.size(), true);
        std::vector<float> got(n_tok * 32, NAN);
        REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, c.pcm.data(), c.pcm.size(), got.data()), whisper_audio_last_error());
        std::vector<int64_t> shape;
        const std::vector<float> ref = npy_load_f32(test_data(std::string("towers/realtime.") + c.name + (c.every > 1 ? ".audio.every8.npy" : ".audio.npy")), &shape);
        std::vector<float> kept;
        for (size_t t = 0; t < n_tok; t += c.every) kept.insert(kept.end(), got.begin() + t * 32, got.begin() + (t + 1) * 32);
        REQUIRE(kept.size() == ref.size());
        const double err = rel_l2(kept, ref);
        MESSAGE("realtime tokens from audio (" << std::string(c.name) << "): rel L2 " << err << " (" << n_tok << " tokens; transformers' f32 "
                << c.transformers_f32 << ")");
        CHECK(err < 1e-6);
        if (c.transformers_f32 > 0) CHECK(err <= 1.05 * c.transformers_f32);
    }
    whisper_audio_encoder_free(enc);
    // the tower's own rows (the final RMSNorm's), the first 200 of 548 positions
    enc = cpu_encoder(m, false);
    std::vector<float> rows(548 * 64, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, clips[0].pcm.data(), 112256, rows.data()), whisper_audio_last_error());
    const std::vector<float> ref = npy_load_f32(test_data("towers/realtime.speech_16k.audio.tower.npy"), nullptr);
    const double err = first_rows_error(rows, ref);
    MESSAGE("realtime tower from audio: rel L2 " << err << " (transformers' f32 3.95e-7)");
    CHECK(err <= 1.05 * 3.95e-7);
    whisper_audio_encoder_free(enc);
    // what the encoder cannot take: windows of mel (its log-mel and steps are its own), Whisper windows
    enc = cpu_encoder(m, true);
    std::vector<float> mel((size_t)128 * 3000, 0.0f), out(375 * 32);
    CHECK(whisper_audio_encode_mel_tokens(enc, mel.data(), 3000, 3000, out.data()) == -1);
    CHECK(std::string(whisper_audio_last_error()).find("takes PCM") != std::string::npos);
    std::vector<float> win(1500 * 64);
    CHECK_FALSE(whisper_audio_encode_pcm(enc, clips[0].pcm.data(), 16000, win.data()));
    whisper_audio_op_time times[8];
    CHECK(whisper_audio_encoder_profile(enc, mel.data(), 1, times, 8) == -1);
    CHECK(std::string(whisper_audio_last_error()).find("causal steps") != std::string::npos);
    whisper_audio_encoder_free(enc);
    // its keys: each one missing is a one-line error naming it
    const std::vector<uint8_t> b = read_bytes("build/tower-realtime-f32.gguf");
    const std::string bad = test_tmp("realtime-bad.gguf");
    for (auto k : {std::make_pair("whisper.projector.pad_left_tokens", "whisper.projector.pad_lefx_tokens"),
                   std::make_pair("whisper.projector.pad_right_tokens", "whisper.projector.pad_righx_tokens"),
                   std::make_pair("whisper.encoder.attention.sliding_window", "whisper.encoder.attention.sliding_windox"),
                   std::make_pair("whisper.encoder.attention.key_length", "whisper.encoder.attention.key_lengtx")}) {
        write_bytes(bad, patched(b, k.first, k.second));
        CHECK(whisper_audio_model_load(bad.c_str()) == nullptr);
        CHECK_MESSAGE(std::string(whisper_audio_last_error()).find(std::string("missing key ") + k.first) != std::string::npos,
                      whisper_audio_last_error());
    }
    remove(bad.c_str());
    whisper_audio_model_free(m);
}

TEST_CASE("towers: Voxtral Realtime in steps: pieces of any size and steps of 8, 80 or odd frame counts give the whole "
          "input's tokens bit for bit") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-realtime-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    // 20 s: 2000 + 256 + 136 frames, past the window of 750 positions
    const std::vector<float> pcm(a.pcm.begin() + 160000, a.pcm.begin() + 480000);
    for (bool projector : {true, false}) {
        CAPTURE(projector);
        whisper_audio_encoder * enc = cpu_encoder(m, projector);
        const std::vector<float> whole = realtime_in_steps(enc, pcm, pcm.size(), 1 << 30);   // one step of each 3000 frames
        REQUIRE(whole.size() == whisper_audio_n_tokens(m, pcm.size(), projector) * (projector ? 32 : 64));
        struct way { size_t piece; int min_step; };
        for (way w : {way{320, 8}, way{1280, 8}, way{12800, 80}, way{4001, 24}, way{999, 8}, way{77777, 3000}, way{160000, 1}}) {
            CAPTURE(w.piece);
            CAPTURE(w.min_step);
            const std::vector<float> got = realtime_in_steps(enc, pcm, w.piece, w.min_step);
            REQUIRE(got.size() == whole.size());
            CHECK(memcmp(got.data(), whole.data(), whole.size() * sizeof(float)) == 0);
        }
        whisper_audio_encoder_free(enc);
    }
    whisper_audio_model_free(m);
}

TEST_CASE("towers: Voxtral Realtime's streams on one encoder, their steps interleaved: each its own tokens, bit for bit") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-realtime-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    whisper_audio_encoder * enc = cpu_encoder(m, true);
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    // two inputs past the window of 750 positions; each step of one overwrites the graph that holds the other's caches
    const std::vector<float> x(a.pcm.begin(), a.pcm.begin() + 300000), y(a.pcm.begin() + 500000, a.pcm.begin() + 760000);
    const std::vector<float> want_x = realtime_in_steps(enc, x, x.size(), 1 << 30), want_y = realtime_in_steps(enc, y, y.size(), 1 << 30);
    wa_causal * sx = wa_causal_begin(enc, 80), * sy = wa_causal_begin(enc, 8);
    std::vector<float> got_x, got_y;
    for (size_t i = 0; i < std::max(x.size(), y.size()); i += 4000) {
        if (i < x.size()) REQUIRE_MESSAGE(wa_causal_feed(sx, x.data() + i, std::min<size_t>(4000, x.size() - i), got_x), whisper_audio_last_error());
        if (i < y.size()) REQUIRE_MESSAGE(wa_causal_feed(sy, y.data() + i, std::min<size_t>(4000, y.size() - i), got_y), whisper_audio_last_error());
    }
    REQUIRE(wa_causal_end(sx, got_x));
    REQUIRE(wa_causal_end(sy, got_y));
    wa_causal_free(sx);
    wa_causal_free(sy);
    REQUIRE(got_x.size() == want_x.size());
    REQUIRE(got_y.size() == want_y.size());
    CHECK(memcmp(got_x.data(), want_x.data(), want_x.size() * sizeof(float)) == 0);
    CHECK(memcmp(got_y.data(), want_y.data(), want_y.size() * sizeof(float)) == 0);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(m);
}

TEST_CASE("towers: Voxtral Realtime's short inputs held for a batch: a cancelled one gives no rows, the others theirs") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-realtime-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    whisper_audio_encoder * enc = cpu_encoder(m, true);   // max_batch 2
    const std::vector<float> x = pcm_of(50001), y = pcm_of(112256);
    std::vector<float> want_y(whisper_audio_n_tokens(m, y.size(), true) * 32);
    REQUIRE(whisper_audio_encode_tokens(enc, y.data(), y.size(), want_y.data()));
    token_rows t;
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.on_rows = collect_rows;
    pp.user = &t;
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, pp);
    REQUIRE_MESSAGE(p, whisper_audio_last_error());
    REQUIRE(whisper_audio_pipeline_push(p, x.data(), x.size()));
    REQUIRE(whisper_audio_pipeline_end_input(p));          // held: one step, the batch not full
    CHECK(whisper_audio_pipeline_poll(p, 0) == 0);         // input 0 is not done
    REQUIRE(whisper_audio_pipeline_cancel_input(p, 0));    // it goes unrun
    REQUIRE(whisper_audio_pipeline_push(p, y.data(), y.size()));
    REQUIRE(whisper_audio_pipeline_end_input(p));
    REQUIRE(whisper_audio_pipeline_finish(p));
    whisper_audio_pipeline_free(p);
    REQUIRE(t.rows.size() == 2);
    CHECK(t.rows[0].empty());
    CHECK(t.rows[1] == want_y);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(m);
}

TEST_CASE("towers: Voxtral Realtime's rows come as its input comes: each piece's steps before the input ends") {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-realtime-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    whisper_audio_encoder * enc = cpu_encoder(m, true);
    const std::vector<float> pcm = pcm_of(112256);
    wa_causal * s = wa_causal_begin(enc, 8);
    std::vector<float> rows;
    // the left zeros' 32 tokens (256 frames) need the first frame's 200 samples past its centre
    REQUIRE(wa_causal_feed(s, pcm.data(), 320, rows));   // 20 ms
    CHECK(rows.size() == 32u * 32);
    // each token (1280 samples) comes once 200 samples past its last frame's centre are in
    size_t fed = 320;
    for (; fed + 320 <= 12800; fed += 320) REQUIRE(wa_causal_feed(s, pcm.data() + fed, 320, rows));
    CHECK(rows.size() == (32u + (12800 - 200 + 160 - 1) / 1280) * 32);
    REQUIRE(wa_causal_feed(s, pcm.data() + fed, pcm.size() - fed, rows));
    REQUIRE(wa_causal_end(s, rows));
    CHECK(rows.size() == 137u * 32);
    wa_causal_free(s);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(m);
}

TEST_CASE("towers on CUDA: Voxtral Realtime's tokens in f16 and bf16 near float64, past its window, and in steps of 8 frames near "
          "the whole input's" * doctest::skip(no_gpu())) {
    whisper_audio_model * m = whisper_audio_model_load("build/tower-realtime-f32.gguf");
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    decoded_audio a = decode_file(test_data("audio/long_70s_16k.wav"));
    REQUIRE(a.ok);
    for (whisper_audio_dtype dt : {WHISPER_AUDIO_DTYPE_F16, WHISPER_AUDIO_DTYPE_BF16}) {
        whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
        p.device = WHISPER_AUDIO_DEVICE_CUDA;
        p.dtype = dt;
        whisper_audio_encoder * enc = whisper_audio_encoder_init(m, p);
        REQUIRE_MESSAGE(enc, whisper_audio_last_error());
        const double bound = dt == WHISPER_AUDIO_DTYPE_F16 ? 1e-2 : 5e-2;
        for (auto clip : {std::make_pair("speech_16k", pcm_of(112256)), std::make_pair("speech_1000", pcm_of(1000)),
                          std::make_pair("long_448000", std::vector<float>(a.pcm.begin(), a.pcm.begin() + 448000))}) {
            const std::vector<float> & pcm = clip.second;
            std::vector<float> got(whisper_audio_n_tokens(m, pcm.size(), true) * 32, NAN);
            REQUIRE_MESSAGE(whisper_audio_encode_tokens(enc, pcm.data(), pcm.size(), got.data()), whisper_audio_last_error());
            const std::vector<float> ref = npy_load_f32(test_data(std::string("towers/realtime.") + clip.first + ".audio.npy"), nullptr);
            REQUIRE(got.size() == ref.size());
            const double err = rel_l2(got, ref);
            MESSAGE("realtime " << std::string(dt == WHISPER_AUDIO_DTYPE_F16 ? "f16 " : "bf16 ") << std::string(clip.first) << ": rel L2 " << err);
            CHECK(err < bound);
            // a stream's steps: 20 ms pieces, each step as soon as 8 frames are complete
            const std::vector<float> steps = realtime_in_steps(enc, pcm, 320, 8);
            REQUIRE(steps.size() == ref.size());
            CHECK(rel_l2(steps, ref) < bound);
        }
        whisper_audio_encoder_free(enc);
    }
    whisper_audio_model_free(m);
}
