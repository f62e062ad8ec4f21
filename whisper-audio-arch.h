// whisper-audio-arch.h - the models' architecture as tables, in the way of whisper.cpp's
// whisper-arch.h: the encoder's tensors and where each goes, the audio LLMs' projectors, and
// every file format's names for them, one table per format, each row by row ours. Read by
// the library's sources (an internal header: it travels with them, see the README's
// "Embedding") and, for its Hugging Face tables, by convert/convert-hf-to-gguf.py; a new format
// adds a table here and a reader there, a new tower its rows here and its section in
// whisper-audio-towers.h.
#pragma once

#include "vt.h"
#include "whisper-audio.h"

#include <cstddef>
#include <vector>

// ---- the encoder's weights: one table of the file's tensors --------------------------------

// encoder.layers.N.*: q, k and v are stored as one [3a, d] matrix so that one GEMM
// makes all three; k's bias slots are zero (Whisper's k_proj has no bias). a, their width, is
// n_head x head_dim: d but for Voxtral Realtime's.
struct wa_layer {
    vt_tensor * attn_ln_w, * attn_ln_b;   // self_attn_layer_norm.{weight,bias}  [d]
    vt_tensor * qkv_w, * qkv_b;           // self_attn.{q,k,v}_proj              [3a, d], [3a]
    vt_tensor * out_w, * out_b;           // self_attn.out_proj                  [d, a], [d]
    vt_tensor * ffn_ln_w, * ffn_ln_b;     // final_layer_norm                    [d]
    vt_tensor * fc1_w, * fc1_b;           // fc1                                 [ff, d], [ff]
    vt_tensor * fc2_w, * fc2_b;           // fc2                                 [d, ff], [d]
    vt_tensor * up_gate_w;                // mlp.up_proj, mlp.gate_proj          [2 ff, d] (Voxtral Realtime's SwiGLU)
};

// The encoder's weights in its backend (the mel bank stays on the host). A model has one of
// the two conv stems: Whisper's conv1d (conv1, conv2) or Qwen3-Omni's Conv2d (conv2d1-3, conv_out).
struct wa_weights {
    vt_tensor * conv1_w, * conv1_b;      // encoder.conv1   [d, n_mels, 3], [d]
    vt_tensor * conv2_w, * conv2_b;      // encoder.conv2   [d, d, 3], [d]
    vt_tensor * conv2d1_w, * conv2d1_b;  // encoder.conv2d1 [c, 1, 3, 3], [c]   (c: hparams.n_conv)
    vt_tensor * conv2d2_w, * conv2d2_b;  // encoder.conv2d2 [c, c, 3, 3], [c]
    vt_tensor * conv2d3_w, * conv2d3_b;  // encoder.conv2d3 [c, c, 3, 3], [c]
    vt_tensor * conv_out_w;              // encoder.conv_out.weight [d, c f3] (no bias; f3 the mel bins after 3 halvings),
                                         // in the backend its columns f-major ([d, f3 c]: the stem's output order)
    vt_tensor * pos;                     // encoder.embed_positions.weight [1500, d]
    vt_tensor * ln_post_w, * ln_post_b;  // encoder.layer_norm [d]
    std::vector<wa_layer> layers;        // encoder.layers.N
};

// A shape's entries: a hyperparameter (these) or a constant (positive). WA_CONV: hparams.n_conv;
// WA_CONV_F: n_conv times the mel bins left after three stride-2 halvings (conv_out's input);
// WA_ATTN: the width of q, k and v (n_head x head_dim).
enum wa_dim { WA_D = -1, WA_FF = -2, WA_MELS = -3, WA_CTX = -4, WA_CONV = -9, WA_CONV_F = -10, WA_ATTN = -12 };

// Which models have a row: every one, those with Whisper's conv1d stem, those with Qwen3-Omni's
// AuT encoder (hparams.n_conv > 0: the Conv2d stem, and a bias on k_proj), those with Whisper's
// LayerNorms, fc1 and positional embedding (all but Voxtral Realtime's), or Voxtral Realtime's
// (hparams.n_window > 0: RMSNorms without bias, a SwiGLU MLP, RoPE).
enum wa_family { WA_EVERY, WA_WHISPER_STEM, WA_AUT, WA_LAYER_NORM, WA_REALTIME };

// One tensor of the model file and where it goes. A row with a layer field stands for one
// tensor per layer. A fused tensor (qkv) is n_parts blocks of rows stacked on PyTorch's
// first dimension; its rows are consecutive, from part 0 to part n_parts - 1, and a part
// without a row (k's bias) stays zero.
struct wa_tensor_desc {
    const char * name;                         // in the model file; "%d": the layer index
    int shape[4];                              // PyTorch's (outermost first) in wa_dim; 0 ends it
    bool matrix;                               // F32, F16 or BF16 in the file, the compute type
                                               // in the backend; otherwise F32 in both
    int order;                                 // its place in the file the converter writes
                                               // (whisper_audio_model_save_gguf too): the rows
                                               // outside the layers before them (< WA_AFTER_LAYERS)
                                               // and after them, each layer's rows in between
    vt_tensor * wa_layer::* layer;             // the tensor it fills in each layer, or
    vt_tensor * wa_weights::* top = nullptr;   // the one outside the layers; neither: host only
    int part = 0, n_parts = 1;                 // block `part` of n_parts in a fused tensor
    wa_family family = WA_EVERY;               // the models that have it
};

static const bool WA_MATRIX = true, WA_F32 = false;
static constexpr int WA_AFTER_LAYERS = 100, WA_LAST = 200;   // orders: after the layers, the mel bank last (after a projector)
static constexpr wa_tensor_desc WA_TENSORS[] = {
    // name in the model file                        PyTorch shape                    type       order                 goes to (layer, top, part, n_parts)
    {"mel_filters",                                   {WA_MELS, WHISPER_AUDIO_N_BINS}, WA_F32,    WA_LAST,              nullptr, nullptr},
    {"encoder.conv1.weight",                          {WA_D, WA_MELS, 3},              WA_MATRIX, 0,                    nullptr, &wa_weights::conv1_w, 0, 1, WA_WHISPER_STEM},
    {"encoder.conv1.bias",                            {WA_D},                          WA_F32,    1,                    nullptr, &wa_weights::conv1_b, 0, 1, WA_WHISPER_STEM},
    {"encoder.conv2.weight",                          {WA_D, WA_D, 3},                 WA_MATRIX, 2,                    nullptr, &wa_weights::conv2_w, 0, 1, WA_WHISPER_STEM},
    {"encoder.conv2.bias",                            {WA_D},                          WA_F32,    3,                    nullptr, &wa_weights::conv2_b, 0, 1, WA_WHISPER_STEM},
    {"encoder.embed_positions.weight",                {WA_CTX, WA_D},                  WA_F32,    4,                    nullptr, &wa_weights::pos, 0, 1, WA_LAYER_NORM},
    {"encoder.layer_norm.weight",                     {WA_D},                          WA_F32,    WA_AFTER_LAYERS,      nullptr, &wa_weights::ln_post_w},
    {"encoder.layer_norm.bias",                       {WA_D},                          WA_F32,    WA_AFTER_LAYERS + 1,  nullptr, &wa_weights::ln_post_b, 0, 1, WA_LAYER_NORM},
    {"encoder.layers.%d.self_attn_layer_norm.weight", {WA_D},                          WA_F32,    7,                    &wa_layer::attn_ln_w},
    {"encoder.layers.%d.self_attn_layer_norm.bias",   {WA_D},                          WA_F32,    8,                    &wa_layer::attn_ln_b, nullptr, 0, 1, WA_LAYER_NORM},
    {"encoder.layers.%d.self_attn.q_proj.weight",     {WA_ATTN, WA_D},                 WA_MATRIX, 0,                    &wa_layer::qkv_w, nullptr, 0, 3},
    {"encoder.layers.%d.self_attn.k_proj.weight",     {WA_ATTN, WA_D},                 WA_MATRIX, 2,                    &wa_layer::qkv_w, nullptr, 1, 3},
    {"encoder.layers.%d.self_attn.v_proj.weight",     {WA_ATTN, WA_D},                 WA_MATRIX, 3,                    &wa_layer::qkv_w, nullptr, 2, 3},
    {"encoder.layers.%d.self_attn.q_proj.bias",       {WA_ATTN},                       WA_F32,    1,                    &wa_layer::qkv_b, nullptr, 0, 3},
    {"encoder.layers.%d.self_attn.k_proj.bias",       {WA_ATTN},                       WA_F32,    15,                   &wa_layer::qkv_b, nullptr, 1, 3, WA_AUT},   // the AuT's alone
    {"encoder.layers.%d.self_attn.v_proj.bias",       {WA_ATTN},                       WA_F32,    4,                    &wa_layer::qkv_b, nullptr, 2, 3},
    {"encoder.layers.%d.self_attn.out_proj.weight",   {WA_D, WA_ATTN},                 WA_MATRIX, 5,                    &wa_layer::out_w},
    {"encoder.layers.%d.self_attn.out_proj.bias",     {WA_D},                          WA_F32,    6,                    &wa_layer::out_b},
    {"encoder.layers.%d.final_layer_norm.weight",     {WA_D},                          WA_F32,    13,                   &wa_layer::ffn_ln_w},
    {"encoder.layers.%d.final_layer_norm.bias",       {WA_D},                          WA_F32,    14,                   &wa_layer::ffn_ln_b, nullptr, 0, 1, WA_LAYER_NORM},
    {"encoder.layers.%d.fc1.weight",                  {WA_FF, WA_D},                   WA_MATRIX, 9,                    &wa_layer::fc1_w, nullptr, 0, 1, WA_LAYER_NORM},
    {"encoder.layers.%d.fc1.bias",                    {WA_FF},                         WA_F32,    10,                   &wa_layer::fc1_b, nullptr, 0, 1, WA_LAYER_NORM},
    {"encoder.layers.%d.fc2.weight",                  {WA_D, WA_FF},                   WA_MATRIX, 11,                   &wa_layer::fc2_w},
    {"encoder.layers.%d.fc2.bias",                    {WA_D},                          WA_F32,    12,                   &wa_layer::fc2_b},
    // Qwen3-Omni's AuT encoder (Qwen3OmniMoeAudioEncoder): the Conv2d stem, k_proj's bias
    {"encoder.conv2d1.weight",                        {WA_CONV, 1, 3, 3},              WA_MATRIX, 5,                    nullptr, &wa_weights::conv2d1_w, 0, 1, WA_AUT},
    {"encoder.conv2d1.bias",                          {WA_CONV},                       WA_F32,    6,                    nullptr, &wa_weights::conv2d1_b, 0, 1, WA_AUT},
    {"encoder.conv2d2.weight",                        {WA_CONV, WA_CONV, 3, 3},        WA_MATRIX, 7,                    nullptr, &wa_weights::conv2d2_w, 0, 1, WA_AUT},
    {"encoder.conv2d2.bias",                          {WA_CONV},                       WA_F32,    8,                    nullptr, &wa_weights::conv2d2_b, 0, 1, WA_AUT},
    {"encoder.conv2d3.weight",                        {WA_CONV, WA_CONV, 3, 3},        WA_MATRIX, 9,                    nullptr, &wa_weights::conv2d3_w, 0, 1, WA_AUT},
    {"encoder.conv2d3.bias",                          {WA_CONV},                       WA_F32,    10,                   nullptr, &wa_weights::conv2d3_b, 0, 1, WA_AUT},
    {"encoder.conv_out.weight",                       {WA_D, WA_CONV_F},               WA_MATRIX, 11,                   nullptr, &wa_weights::conv_out_w, 0, 1, WA_AUT},
    // Voxtral Realtime's encoder (VoxtralRealtimeEncoder): its MLP's up and gate projections, one [2 ff, d]
    // matrix (vt_swiglu's value half, then its gate half); fc2 is its down_proj
    {"encoder.layers.%d.mlp.up_proj.weight",          {WA_FF, WA_D},                   WA_MATRIX, 16,                   &wa_layer::up_gate_w, nullptr, 0, 2, WA_REALTIME},
    {"encoder.layers.%d.mlp.gate_proj.weight",        {WA_FF, WA_D},                   WA_MATRIX, 17,                   &wa_layer::up_gate_w, nullptr, 1, 2, WA_REALTIME},
};

// The backend tensors the table makes (one per whole tensor or fused part 0), in a layer or
// outside: every field of wa_layer and wa_weights must be one of them.
static constexpr int wa_n_made(bool in_layer) {
    int n = 0;
    for (const wa_tensor_desc & t : WA_TENSORS) n += (in_layer ? t.layer != nullptr : t.top != nullptr) && t.part == 0;
    return n;
}
static_assert(wa_n_made(true) * sizeof(vt_tensor *) == sizeof(wa_layer), "a field of wa_layer has no row in WA_TENSORS");
static_assert(wa_n_made(false) * sizeof(vt_tensor *) + sizeof(std::vector<wa_layer>) == sizeof(wa_weights),
              "a field of wa_weights has no row in WA_TENSORS");
// The file order is one: no two rows of a group (outside the layers, in a layer) share a place.
static constexpr bool wa_orders_distinct() {
    for (const wa_tensor_desc & a : WA_TENSORS)
        for (const wa_tensor_desc & b : WA_TENSORS)
            if (&a != &b && !a.layer == !b.layer && a.order == b.order) return false;
    return true;
}
static_assert(wa_orders_distinct(), "two rows of WA_TENSORS share an order");

static constexpr bool wa_same(const char * a, const char * b) { return *a == *b && (*a == 0 || wa_same(a + 1, b + 1)); }
// Whether a table of another format's names has a row for each of WA_TENSORS', in order.
template <typename T, size_t N> static constexpr bool wa_names_follow_table(const T (&names)[N]) {
    if (N != sizeof(WA_TENSORS) / sizeof(WA_TENSORS[0])) return false;
    for (size_t i = 0; i < N; i++)
        if (!wa_same(names[i].ours, WA_TENSORS[i].name)) return false;
    return true;
}

// ---- the audio LLMs' projectors: their names, weights and table ----------------------------

// Each projector type once: its GGUF name (ours and llama.cpp's clip.projector_type) and
// whether it stacks frames (its GGUF then says by how many: a stack_factor key). GLM-ASR's
// "glmasr", MiniCPM-o's, Kimi-Audio's and Step-Audio 2's are ours alone (llama.cpp's "glma" is
// GLM-ASR's original layout; it has no audio type of the others).
struct wa_projector_name {
    whisper_audio_projector type;
    const char * gguf;
    bool stacks;
};
static const wa_projector_name WA_PROJECTORS[] = {
    {WHISPER_AUDIO_PROJECTOR_QWEN2A,        "qwen2a",        false},
    {WHISPER_AUDIO_PROJECTOR_VOXTRAL,       "voxtral",       true},
    {WHISPER_AUDIO_PROJECTOR_ULTRAVOX,      "ultravox",      true},
    {WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, "musicflamingo", false},   // Audio Flamingo 3 (llama.cpp's name)
    {WHISPER_AUDIO_PROJECTOR_GLMASR,        "glmasr",        true},
    {WHISPER_AUDIO_PROJECTOR_QWEN25O,       "qwen2.5o",      false},   // Qwen2.5-Omni (llama.cpp's name)
    {WHISPER_AUDIO_PROJECTOR_MINICPMO,      "minicpmo",      false},   // MiniCPM-o 2.6
    {WHISPER_AUDIO_PROJECTOR_KIMIAUDIO,     "kimiaudio",     true},    // Kimi-Audio
    {WHISPER_AUDIO_PROJECTOR_QWEN3A,        "qwen3a",        false},   // Qwen3-Omni (llama.cpp's name)
    {WHISPER_AUDIO_PROJECTOR_STEPAUDIO2,    "stepaudio2",    false},   // Step-Audio 2
    {WHISPER_AUDIO_PROJECTOR_MERALION,      "meralion",      true},    // MERaLiON-2 (llama.cpp's name)
    {WHISPER_AUDIO_PROJECTOR_QWEN3ASR,      "qwen3asr",      false},   // Qwen3-ASR (ours: llama.cpp's qwen3a is Qwen3-Omni's layout)
    {WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME, "voxtral_realtime", true},  // Voxtral Realtime (ours)
};

// ---- the towers' Hugging Face checkpoints: written once for both readers -------------------
// whisper-audio-formats.cpp's directory reader walks these tables (and WA_HF_PREFIXES,
// WA_PROJ_TENSORS below), and convert/convert-hf-to-gguf.py parses them from this file when it
// runs (a regular expression over the rows: keep each row on one line, of string literals alone).

// config.json of each model type: where the encoder's settings sit and which key gives which
// hyperparameter, the projector's GGUF name ("": Whisper itself) and the LLM width it outputs.
// encoder: a path of objects in config.json ("": its top), or a config.json of its own (Kimi-Audio's
// whisper-large-v3/: its checkpoint beside it). ffn "": 4 d_model (OpenAI Whisper's MLP). positions:
// the key that must say 1500 when present ("": none). activation: the MLP's activation key, which must
// say gelu when present. llm: the projector's output width, a path in config.json. embed_positions:
// "stored" in the checkpoint, "sinusoids" computed (a buffer the checkpoint does not hold), "rope" none
// (zeros in the file; the graph turns q and k instead). unused: a tensor under the encoder's prefix
// that the forward never reads.
struct wa_hf_tower {
    const char * model_type, * projector, * encoder;
    const char * d_model, * layers, * heads, * ffn, * mels, * positions, * activation;
    const char * llm, * embed_positions, * unused;
};
static const wa_hf_tower WA_HF_TOWERS[] = {
    // model_type      projector        encoder                         d_model          layers               heads                      ffn                  mels            positions               activation             llm                                       embed_positions  unused
    {"whisper",        "",              "",                             "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "",                                       "stored",    ""},
    {"qwen2_audio",    "qwen2a",        "audio_config",                 "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "text_config.hidden_size",                "stored",    ""},
    {"voxtral",        "voxtral",       "audio_config",                 "hidden_size",   "num_hidden_layers", "num_attention_heads",     "intermediate_size", "num_mel_bins", "max_source_positions", "activation_function", "text_config.hidden_size",                "stored",    ""},
    {"ultravox",       "ultravox",      "audio_config",                 "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "text_config.hidden_size",                "stored",    ""},
    {"audioflamingo3", "musicflamingo", "audio_config",                 "hidden_size",   "num_hidden_layers", "num_attention_heads",     "intermediate_size", "num_mel_bins", "max_source_positions", "activation_function", "text_config.hidden_size",                "stored",    ""},
    {"musicflamingo",  "musicflamingo", "audio_config",                 "hidden_size",   "num_hidden_layers", "num_attention_heads",     "intermediate_size", "num_mel_bins", "max_source_positions", "activation_function", "text_config.hidden_size",                "stored",    ""},
    {"glmasr",         "glmasr",        "audio_config",                 "hidden_size",   "num_hidden_layers", "num_attention_heads",     "intermediate_size", "num_mel_bins", "",                     "hidden_act",          "text_config.hidden_size",                "rope",      ""},
    {"qwen2_5_omni",   "qwen2.5o",      "thinker_config.audio_config",  "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "thinker_config.audio_config.output_dim", "sinusoids", "audio_bos_eos_token.weight"},
    {"minicpmo",       "minicpmo",      "audio_config",                 "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "hidden_size",                            "stored",    ""},
    {"kimi_audio",     "kimiaudio",     "whisper-large-v3/config.json", "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "hidden_size",                            "stored",    ""},
    {"moonshot_kimia", "kimiaudio",     "whisper-large-v3/config.json", "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "hidden_size",                            "stored",    ""},
    {"qwen3_omni_moe", "qwen3a",        "thinker_config.audio_config",  "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "thinker_config.audio_config.output_dim", "sinusoids", ""},
    {"qwen3_asr",      "qwen3asr",      "audio_config",                 "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "",                     "activation_function", "audio_config.output_dim",                "sinusoids", ""},
    {"step_audio_2",   "stepaudio2",    "audio_encoder_config",         "n_audio_state", "n_audio_layer",     "n_audio_head",            "",                  "n_mels",       "n_audio_ctx",          "",                    "audio_encoder_config.llm_dim",           "stored",    ""},
    {"meralion2",      "meralion",      "speech_config",                "d_model",       "encoder_layers",    "encoder_attention_heads", "encoder_ffn_dim",   "num_mel_bins", "max_source_positions", "activation_function", "text_config.hidden_size",                "stored",    ""},
    {"voxtral_realtime", "voxtral_realtime", "audio_config",            "hidden_size",   "num_hidden_layers", "num_attention_heads",     "intermediate_size", "num_mel_bins", "",                     "",                    "text_config.hidden_size",                "rope",      ""},
};

// Settings that change the forward and that whisper-audio runs one way: a model's key that, when
// present, must hold `runs` (a string, or true/false/null, or a number). in: "encoder" (the encoder's
// config that WA_HF_TOWERS names) or "model" (config.json's top); a dotted key reaches into an
// object. The encoders' MLP activation is WA_HF_TOWERS' activation column. Left out on purpose:
// dropout, layerdrop and SpecAugment's masks (training alone), scale_embedding (the encoders set
// embed_scale and never apply it), conv_chunksize (how Qwen3-Omni's stem splits its batch, not
// what it computes), GLM-ASR's max_position_embeddings (the length of its RoPE cache).
struct wa_hf_setting { const char * model_type, * in, * key, * runs; };
static const wa_hf_setting WA_HF_SETTINGS[] = {
    {"voxtral",        "model",   "projector_hidden_act",      "gelu"},
    {"audioflamingo3", "model",   "projector_hidden_act",      "gelu"},
    {"audioflamingo3", "model",   "projector_bias",            "true"},
    {"musicflamingo",  "model",   "projector_hidden_act",      "gelu"},
    {"musicflamingo",  "model",   "projector_bias",            "true"},
    {"musicflamingo",  "model",   "rope_parameters.rope_type", "default"},   // its rotary time embedding
    {"glmasr",         "model",   "projector_hidden_act",      "gelu"},
    {"glmasr",         "encoder", "rope_parameters.rope_type", "default"},
    {"ultravox",       "model",   "projector_act",             "swiglu"},
    {"ultravox",       "model",   "audio_latency_block_size",  "null"},    // set: its encoder's block-causal streaming mask
    {"minicpmo",       "model",   "init_audio",                "true"},
    {"minicpmo",       "model",   "audio_pool_step",           "2"},       // what the graph pools by (MiniCPM-o 2.6's)
    {"meralion2",      "model",   "speech_mlp_use_projection", "true"},    // its gated adapter
    {"kimi_audio",     "model",   "use_whisper_feature",       "true"},
    {"moonshot_kimia", "model",   "use_whisper_feature",       "true"},
    {"step_audio_2",   "encoder", "kernel_size",               "3"},       // its Adaptor's conv
    {"step_audio_2",   "encoder", "adapter_stride",            "2"},
    {"voxtral_realtime", "model", "projector_hidden_act",      "gelu"},
    {"voxtral_realtime", "model", "downsample_factor",         "4"},       // 4 positions a token
    {"voxtral_realtime", "encoder", "hidden_act",              "silu"},    // its MLP's SwiGLU
    {"voxtral_realtime", "encoder", "rope_parameters.rope_type", "default"},
};

// The checkpoint's names of our encoder tensors where they differ from Whisper's, below the
// encoder's prefix: a name that begins with `ours` (%d: the layer) begins with `hf` instead; the
// first row of the projector that matches applies, and a name no row matches is Whisper's.
struct wa_hf_rename { const char * projector, * ours, * hf; };
static const wa_hf_rename WA_HF_RENAMES[] = {
    // GlmAsrEncoder (Llama's names)
    {"glmasr",     "layers.%d.self_attn.out_proj.",      "layers.%d.self_attn.o_proj."},
    {"glmasr",     "layers.%d.self_attn_layer_norm.",    "layers.%d.input_layernorm."},
    {"glmasr",     "layers.%d.final_layer_norm.",        "layers.%d.post_attention_layernorm."},
    {"glmasr",     "layers.%d.fc1.",                     "layers.%d.mlp.fc1."},
    {"glmasr",     "layers.%d.fc2.",                     "layers.%d.mlp.fc2."},
    {"glmasr",     "layer_norm.",                        "norm."},
    // Qwen2.5-Omni's and Qwen3-Omni's audio towers: ln_post for layer_norm
    {"qwen2.5o",   "layer_norm.",                        "ln_post."},
    {"qwen3a",     "layer_norm.",                        "ln_post."},
    {"qwen3asr",   "layer_norm.",                        "ln_post."},
    // Step-Audio 2's AudioEncoder (OpenAI Whisper's names)
    {"stepaudio2", "embed_positions.",                   "positional_embedding."},
    {"stepaudio2", "layer_norm.",                        "after_norm."},
    {"stepaudio2", "layers.%d.self_attn.q_proj.",        "blocks.%d.attn.query."},
    {"stepaudio2", "layers.%d.self_attn.k_proj.",        "blocks.%d.attn.key."},
    {"stepaudio2", "layers.%d.self_attn.v_proj.",        "blocks.%d.attn.value."},
    {"stepaudio2", "layers.%d.self_attn.out_proj.",      "blocks.%d.attn.out."},
    {"stepaudio2", "layers.%d.self_attn_layer_norm.",    "blocks.%d.attn_ln."},
    {"stepaudio2", "layers.%d.fc1.",                     "blocks.%d.mlp.0."},
    {"stepaudio2", "layers.%d.fc2.",                     "blocks.%d.mlp.2."},
    {"stepaudio2", "layers.%d.final_layer_norm.",        "blocks.%d.mlp_ln."},
    // VoxtralRealtimeEncoder: its conv stem under embedder, o_proj, its MLP's down_proj, norm
    {"voxtral_realtime", "conv1.",                       "embedder.conv1."},
    {"voxtral_realtime", "conv2.",                       "embedder.conv2."},
    {"voxtral_realtime", "layers.%d.self_attn.out_proj.", "layers.%d.self_attn.o_proj."},
    {"voxtral_realtime", "layers.%d.fc2.",               "layers.%d.mlp.down_proj."},
    {"voxtral_realtime", "layer_norm.",                  "norm."},
};

// multi_modal_projector.* of Qwen2-Audio, Voxtral, Ultravox, Audio Flamingo 3 and GLM-ASR,
// Qwen2.5-Omni's audio_tower.proj (the checkpoints' names, Omni's without its `thinker.`) and
// MiniCPM-o's audio_projection_layer.
struct wa_projector {
    vt_tensor * ln_pre_w;                 // ln_pre.weight    [stack d]         Ultravox's RMSNorm
    vt_tensor * fc1_w, * fc1_b;           // linear (Qwen2-Audio, with bias), linear_1 (Audio Flamingo 3, GLM-ASR, Qwen3-ASR: with
                                          // bias), audio_tower.proj (Qwen2.5-Omni, with bias), audio_tower.proj1 (Qwen3-Omni)
    vt_tensor * fc2_w, * fc2_b;           // linear_2 (Audio Flamingo 3, GLM-ASR, Qwen3-ASR: with bias), audio_tower.proj2 (Qwen3-Omni);
                                          // MiniCPM-o's audio_projection_layer.linear1 and linear2 are fc1 and fc2
    vt_tensor * ln_mid_w, * ln_post_w;    // ln_mid.weight (Ultravox v0.5+), ln_post.weight (v0.4)
    vt_tensor * norm_w, * norm_b;         // Kimi-Audio's vq_adaptor.layers.4 (a LayerNorm; its layers.0 and .3 are fc1, fc2);
                                          // MERaLiON-2's ln_speech (its speech_audio_adapter's mlp_adapter.0 and
                                          // out_proj are fc1, fc2)
    vt_tensor * conv_w, * conv_b;         // Step-Audio 2's adapter.conv [d, d, 3] (its adapter.linear1 and linear2 are fc1, fc2)
    vt_tensor * gate_w, * gate_b;         // MERaLiON-2's speech_audio_adapter.gate_proj
    vt_tensor * pool_w, * pool_b;         // ... and pool_proj
};

// Projector shapes' entries, beside wa_dim's
enum wa_proj_dim { WA_LLM = -5, WA_STACKED = -6, WA_PFF = -7, WA_PFF_HALF = -8, WA_D5 = -11 };   // WA_D5: 5 d (MERaLiON-2)

struct wa_proj_desc {
    const char * name;                         // in our GGUF (the checkpoint's)
    whisper_audio_projector type;              // the projector that has it
    int shape[3];                              // PyTorch's, in wa_dim / wa_proj_dim; 0 ends it
    bool matrix;
    vt_tensor * wa_projector::* dst;
    bool either = false;                       // one of the two rows so marked (ln_mid or ln_post)
};

static constexpr wa_proj_desc WA_PROJ_TENSORS[] = {
    {"multi_modal_projector.linear.weight",   WHISPER_AUDIO_PROJECTOR_QWEN2A,   {WA_LLM, WA_D},           WA_MATRIX, &wa_projector::fc1_w},
    {"multi_modal_projector.linear.bias",     WHISPER_AUDIO_PROJECTOR_QWEN2A,   {WA_LLM},                 WA_F32,    &wa_projector::fc1_b},
    {"multi_modal_projector.linear_1.weight", WHISPER_AUDIO_PROJECTOR_VOXTRAL,  {WA_LLM, WA_STACKED},     WA_MATRIX, &wa_projector::fc1_w},
    {"multi_modal_projector.linear_2.weight", WHISPER_AUDIO_PROJECTOR_VOXTRAL,  {WA_LLM, WA_LLM},         WA_MATRIX, &wa_projector::fc2_w},
    {"multi_modal_projector.ln_pre.weight",   WHISPER_AUDIO_PROJECTOR_ULTRAVOX, {WA_STACKED},             WA_F32,    &wa_projector::ln_pre_w},
    {"multi_modal_projector.linear_1.weight", WHISPER_AUDIO_PROJECTOR_ULTRAVOX, {WA_PFF, WA_STACKED},     WA_MATRIX, &wa_projector::fc1_w},
    {"multi_modal_projector.linear_2.weight", WHISPER_AUDIO_PROJECTOR_ULTRAVOX, {WA_LLM, WA_PFF_HALF},    WA_MATRIX, &wa_projector::fc2_w},
    {"multi_modal_projector.ln_mid.weight",   WHISPER_AUDIO_PROJECTOR_ULTRAVOX, {WA_PFF_HALF},            WA_F32,    &wa_projector::ln_mid_w, true},
    {"multi_modal_projector.ln_post.weight",  WHISPER_AUDIO_PROJECTOR_ULTRAVOX, {WA_LLM},                 WA_F32,    &wa_projector::ln_post_w, true},
    {"multi_modal_projector.linear_1.weight", WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, {WA_LLM, WA_D},           WA_MATRIX, &wa_projector::fc1_w},
    {"multi_modal_projector.linear_1.bias",   WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, {WA_LLM},                 WA_F32,    &wa_projector::fc1_b},
    {"multi_modal_projector.linear_2.weight", WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, {WA_LLM, WA_LLM},         WA_MATRIX, &wa_projector::fc2_w},
    {"multi_modal_projector.linear_2.bias",   WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, {WA_LLM},                 WA_F32,    &wa_projector::fc2_b},
    {"multi_modal_projector.linear_1.weight", WHISPER_AUDIO_PROJECTOR_GLMASR,   {WA_PFF, WA_STACKED},     WA_MATRIX, &wa_projector::fc1_w},
    {"multi_modal_projector.linear_1.bias",   WHISPER_AUDIO_PROJECTOR_GLMASR,   {WA_PFF},                 WA_F32,    &wa_projector::fc1_b},
    {"multi_modal_projector.linear_2.weight", WHISPER_AUDIO_PROJECTOR_GLMASR,   {WA_LLM, WA_PFF},         WA_MATRIX, &wa_projector::fc2_w},
    {"multi_modal_projector.linear_2.bias",   WHISPER_AUDIO_PROJECTOR_GLMASR,   {WA_LLM},                 WA_F32,    &wa_projector::fc2_b},
    {"audio_tower.proj.weight",               WHISPER_AUDIO_PROJECTOR_QWEN25O,  {WA_LLM, WA_D},           WA_MATRIX, &wa_projector::fc1_w},
    {"audio_tower.proj.bias",                 WHISPER_AUDIO_PROJECTOR_QWEN25O,  {WA_LLM},                 WA_F32,    &wa_projector::fc1_b},
    {"audio_projection_layer.linear1.weight", WHISPER_AUDIO_PROJECTOR_MINICPMO, {WA_LLM, WA_D},           WA_MATRIX, &wa_projector::fc1_w},
    {"audio_projection_layer.linear1.bias",   WHISPER_AUDIO_PROJECTOR_MINICPMO, {WA_LLM},                 WA_F32,    &wa_projector::fc1_b},
    {"audio_projection_layer.linear2.weight", WHISPER_AUDIO_PROJECTOR_MINICPMO, {WA_LLM, WA_LLM},         WA_MATRIX, &wa_projector::fc2_w},
    {"audio_projection_layer.linear2.bias",   WHISPER_AUDIO_PROJECTOR_MINICPMO, {WA_LLM},                 WA_F32,    &wa_projector::fc2_b},
    {"vq_adaptor.layers.0.weight",            WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, {WA_LLM, WA_STACKED},    WA_MATRIX, &wa_projector::fc1_w},
    {"vq_adaptor.layers.0.bias",              WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, {WA_LLM},                WA_F32,    &wa_projector::fc1_b},
    {"vq_adaptor.layers.3.weight",            WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, {WA_LLM, WA_LLM},        WA_MATRIX, &wa_projector::fc2_w},
    {"vq_adaptor.layers.3.bias",              WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, {WA_LLM},                WA_F32,    &wa_projector::fc2_b},
    {"vq_adaptor.layers.4.weight",            WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, {WA_LLM},                WA_F32,    &wa_projector::norm_w},
    {"vq_adaptor.layers.4.bias",              WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, {WA_LLM},                WA_F32,    &wa_projector::norm_b},
    {"audio_tower.proj1.weight",              WHISPER_AUDIO_PROJECTOR_QWEN3A,   {WA_D, WA_D},             WA_MATRIX, &wa_projector::fc1_w},
    {"audio_tower.proj1.bias",                WHISPER_AUDIO_PROJECTOR_QWEN3A,   {WA_D},                   WA_F32,    &wa_projector::fc1_b},
    {"audio_tower.proj2.weight",              WHISPER_AUDIO_PROJECTOR_QWEN3A,   {WA_LLM, WA_D},           WA_MATRIX, &wa_projector::fc2_w},
    {"audio_tower.proj2.bias",                WHISPER_AUDIO_PROJECTOR_QWEN3A,   {WA_LLM},                 WA_F32,    &wa_projector::fc2_b},
    {"multi_modal_projector.linear_1.weight", WHISPER_AUDIO_PROJECTOR_QWEN3ASR, {WA_D, WA_D},             WA_MATRIX, &wa_projector::fc1_w},
    {"multi_modal_projector.linear_1.bias",   WHISPER_AUDIO_PROJECTOR_QWEN3ASR, {WA_D},                   WA_F32,    &wa_projector::fc1_b},
    {"multi_modal_projector.linear_2.weight", WHISPER_AUDIO_PROJECTOR_QWEN3ASR, {WA_LLM, WA_D},           WA_MATRIX, &wa_projector::fc2_w},
    {"multi_modal_projector.linear_2.bias",   WHISPER_AUDIO_PROJECTOR_QWEN3ASR, {WA_LLM},                 WA_F32,    &wa_projector::fc2_b},
    {"adapter.conv.weight",                   WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, {WA_D, WA_D, 3},        WA_MATRIX, &wa_projector::conv_w},
    {"adapter.conv.bias",                     WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, {WA_D},                 WA_F32,    &wa_projector::conv_b},
    {"adapter.linear1.weight",                WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, {WA_PFF, WA_D},         WA_MATRIX, &wa_projector::fc1_w},
    {"adapter.linear1.bias",                  WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, {WA_PFF},               WA_F32,    &wa_projector::fc1_b},
    {"adapter.linear2.weight",                WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, {WA_LLM, WA_PFF},       WA_MATRIX, &wa_projector::fc2_w},
    {"adapter.linear2.bias",                  WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, {WA_LLM},               WA_F32,    &wa_projector::fc2_b},
    {"ln_speech.weight",                                 WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D},              WA_F32,    &wa_projector::norm_w},
    {"ln_speech.bias",                                   WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D},              WA_F32,    &wa_projector::norm_b},
    {"speech_audio_adapter.mlp_adapter.0.weight",        WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D5, WA_STACKED}, WA_MATRIX, &wa_projector::fc1_w},
    {"speech_audio_adapter.mlp_adapter.0.bias",          WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D5},             WA_F32,    &wa_projector::fc1_b},
    {"speech_audio_adapter.gate_proj.weight",            WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D5, WA_D5},      WA_MATRIX, &wa_projector::gate_w},
    {"speech_audio_adapter.gate_proj.bias",              WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D5},             WA_F32,    &wa_projector::gate_b},
    {"speech_audio_adapter.pool_proj.weight",            WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D5, WA_D5},      WA_MATRIX, &wa_projector::pool_w},
    {"speech_audio_adapter.pool_proj.bias",              WHISPER_AUDIO_PROJECTOR_MERALION, {WA_D5},             WA_F32,    &wa_projector::pool_b},
    {"speech_audio_adapter.out_proj.weight",             WHISPER_AUDIO_PROJECTOR_MERALION, {WA_LLM, WA_D5},     WA_MATRIX, &wa_projector::fc2_w},
    {"speech_audio_adapter.out_proj.bias",               WHISPER_AUDIO_PROJECTOR_MERALION, {WA_LLM},            WA_F32,    &wa_projector::fc2_b},
    {"multi_modal_projector.linear_1.weight", WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME, {WA_LLM, WA_STACKED}, WA_MATRIX, &wa_projector::fc1_w},
    {"multi_modal_projector.linear_2.weight", WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME, {WA_LLM, WA_LLM},     WA_MATRIX, &wa_projector::fc2_w},
};

// ---- whisper.cpp's legacy ggml-*.bin ----------------------------------------------------

// whisper.cpp's name of each row of WA_TENSORS ("%d": the layer), row by row; the mel bank is
// the file's own block.
struct wa_ggml_name { const char * ours, * ggml; };
static constexpr wa_ggml_name WA_GGML_NAMES[] = {
    {"mel_filters",                                   nullptr},
    {"encoder.conv1.weight",                          "encoder.conv1.weight"},
    {"encoder.conv1.bias",                            "encoder.conv1.bias"},
    {"encoder.conv2.weight",                          "encoder.conv2.weight"},
    {"encoder.conv2.bias",                            "encoder.conv2.bias"},
    {"encoder.embed_positions.weight",                "encoder.positional_embedding"},
    {"encoder.layer_norm.weight",                     "encoder.ln_post.weight"},
    {"encoder.layer_norm.bias",                       "encoder.ln_post.bias"},
    {"encoder.layers.%d.self_attn_layer_norm.weight", "encoder.blocks.%d.attn_ln.weight"},
    {"encoder.layers.%d.self_attn_layer_norm.bias",   "encoder.blocks.%d.attn_ln.bias"},
    {"encoder.layers.%d.self_attn.q_proj.weight",     "encoder.blocks.%d.attn.query.weight"},
    {"encoder.layers.%d.self_attn.k_proj.weight",     "encoder.blocks.%d.attn.key.weight"},
    {"encoder.layers.%d.self_attn.v_proj.weight",     "encoder.blocks.%d.attn.value.weight"},
    {"encoder.layers.%d.self_attn.q_proj.bias",       "encoder.blocks.%d.attn.query.bias"},
    {"encoder.layers.%d.self_attn.k_proj.bias",       nullptr},   // the AuT's alone: not in this format
    {"encoder.layers.%d.self_attn.v_proj.bias",       "encoder.blocks.%d.attn.value.bias"},
    {"encoder.layers.%d.self_attn.out_proj.weight",   "encoder.blocks.%d.attn.out.weight"},
    {"encoder.layers.%d.self_attn.out_proj.bias",     "encoder.blocks.%d.attn.out.bias"},
    {"encoder.layers.%d.final_layer_norm.weight",     "encoder.blocks.%d.mlp_ln.weight"},
    {"encoder.layers.%d.final_layer_norm.bias",       "encoder.blocks.%d.mlp_ln.bias"},
    {"encoder.layers.%d.fc1.weight",                  "encoder.blocks.%d.mlp.0.weight"},
    {"encoder.layers.%d.fc1.bias",                    "encoder.blocks.%d.mlp.0.bias"},
    {"encoder.layers.%d.fc2.weight",                  "encoder.blocks.%d.mlp.2.weight"},
    {"encoder.layers.%d.fc2.bias",                    "encoder.blocks.%d.mlp.2.bias"},
    {"encoder.conv2d1.weight",                        nullptr},   // Qwen3-Omni's AuT rows: not in this format
    {"encoder.conv2d1.bias",                          nullptr},
    {"encoder.conv2d2.weight",                        nullptr},
    {"encoder.conv2d2.bias",                          nullptr},
    {"encoder.conv2d3.weight",                        nullptr},
    {"encoder.conv2d3.bias",                          nullptr},
    {"encoder.conv_out.weight",                       nullptr},
    {"encoder.layers.%d.mlp.up_proj.weight",          nullptr},   // Voxtral Realtime's rows: not in this format
    {"encoder.layers.%d.mlp.gate_proj.weight",        nullptr},
};
static_assert(wa_names_follow_table(WA_GGML_NAMES), "WA_GGML_NAMES must name the rows of WA_TENSORS in order");

// ---- CTranslate2 / faster-whisper model.bin ----------------------------------------------

// The CTranslate2 variable of each row of WA_TENSORS ("%d": the layer), row by row. The
// variable of a fused row is the whole fused tensor (q, k, v as [3d, d]: our own layout),
// its part's rows at part * rows; mel_filters is not stored and is computed.
struct wa_ct2_name { const char * ours, * ct2; };
static constexpr wa_ct2_name WA_CT2_NAMES[] = {
    {"mel_filters",                                   nullptr},
    {"encoder.conv1.weight",                          "encoder/conv1/weight"},
    {"encoder.conv1.bias",                            "encoder/conv1/bias"},
    {"encoder.conv2.weight",                          "encoder/conv2/weight"},
    {"encoder.conv2.bias",                            "encoder/conv2/bias"},
    {"encoder.embed_positions.weight",                "encoder/position_encodings/encodings"},
    {"encoder.layer_norm.weight",                     "encoder/layer_norm/gamma"},
    {"encoder.layer_norm.bias",                       "encoder/layer_norm/beta"},
    {"encoder.layers.%d.self_attn_layer_norm.weight", "encoder/layer_%d/self_attention/layer_norm/gamma"},
    {"encoder.layers.%d.self_attn_layer_norm.bias",   "encoder/layer_%d/self_attention/layer_norm/beta"},
    {"encoder.layers.%d.self_attn.q_proj.weight",     "encoder/layer_%d/self_attention/linear_0/weight"},
    {"encoder.layers.%d.self_attn.k_proj.weight",     "encoder/layer_%d/self_attention/linear_0/weight"},
    {"encoder.layers.%d.self_attn.v_proj.weight",     "encoder/layer_%d/self_attention/linear_0/weight"},
    {"encoder.layers.%d.self_attn.q_proj.bias",       "encoder/layer_%d/self_attention/linear_0/bias"},
    {"encoder.layers.%d.self_attn.k_proj.bias",       nullptr},   // the AuT's alone: not in this format
    {"encoder.layers.%d.self_attn.v_proj.bias",       "encoder/layer_%d/self_attention/linear_0/bias"},
    {"encoder.layers.%d.self_attn.out_proj.weight",   "encoder/layer_%d/self_attention/linear_1/weight"},
    {"encoder.layers.%d.self_attn.out_proj.bias",     "encoder/layer_%d/self_attention/linear_1/bias"},
    {"encoder.layers.%d.final_layer_norm.weight",     "encoder/layer_%d/ffn/layer_norm/gamma"},
    {"encoder.layers.%d.final_layer_norm.bias",       "encoder/layer_%d/ffn/layer_norm/beta"},
    {"encoder.layers.%d.fc1.weight",                  "encoder/layer_%d/ffn/linear_0/weight"},
    {"encoder.layers.%d.fc1.bias",                    "encoder/layer_%d/ffn/linear_0/bias"},
    {"encoder.layers.%d.fc2.weight",                  "encoder/layer_%d/ffn/linear_1/weight"},
    {"encoder.layers.%d.fc2.bias",                    "encoder/layer_%d/ffn/linear_1/bias"},
    {"encoder.conv2d1.weight",                        nullptr},   // Qwen3-Omni's AuT rows: not in this format
    {"encoder.conv2d1.bias",                          nullptr},
    {"encoder.conv2d2.weight",                        nullptr},
    {"encoder.conv2d2.bias",                          nullptr},
    {"encoder.conv2d3.weight",                        nullptr},
    {"encoder.conv2d3.bias",                          nullptr},
    {"encoder.conv_out.weight",                       nullptr},
    {"encoder.layers.%d.mlp.up_proj.weight",          nullptr},   // Voxtral Realtime's rows: not in this format
    {"encoder.layers.%d.mlp.gate_proj.weight",        nullptr},
};
static_assert(wa_names_follow_table(WA_CT2_NAMES), "WA_CT2_NAMES must name the rows of WA_TENSORS in order");

// ---- Hugging Face checkpoints (safetensors) ----------------------------------------------

// The checkpoint's name of each row of WA_TENSORS below its encoder's prefix ("%d": the
// layer), row by row; the mel bank is not stored.
struct wa_hf_name { const char * ours, * hf; };
static constexpr wa_hf_name WA_HF_NAMES[] = {
    {"mel_filters",                                   nullptr},
    {"encoder.conv1.weight",                          "conv1.weight"},
    {"encoder.conv1.bias",                            "conv1.bias"},
    {"encoder.conv2.weight",                          "conv2.weight"},
    {"encoder.conv2.bias",                            "conv2.bias"},
    {"encoder.embed_positions.weight",                "embed_positions.weight"},
    {"encoder.layer_norm.weight",                     "layer_norm.weight"},
    {"encoder.layer_norm.bias",                       "layer_norm.bias"},
    {"encoder.layers.%d.self_attn_layer_norm.weight", "layers.%d.self_attn_layer_norm.weight"},
    {"encoder.layers.%d.self_attn_layer_norm.bias",   "layers.%d.self_attn_layer_norm.bias"},
    {"encoder.layers.%d.self_attn.q_proj.weight",     "layers.%d.self_attn.q_proj.weight"},
    {"encoder.layers.%d.self_attn.k_proj.weight",     "layers.%d.self_attn.k_proj.weight"},
    {"encoder.layers.%d.self_attn.v_proj.weight",     "layers.%d.self_attn.v_proj.weight"},
    {"encoder.layers.%d.self_attn.q_proj.bias",       "layers.%d.self_attn.q_proj.bias"},
    {"encoder.layers.%d.self_attn.k_proj.bias",       "layers.%d.self_attn.k_proj.bias"},   // the AuT's alone
    {"encoder.layers.%d.self_attn.v_proj.bias",       "layers.%d.self_attn.v_proj.bias"},
    {"encoder.layers.%d.self_attn.out_proj.weight",   "layers.%d.self_attn.out_proj.weight"},
    {"encoder.layers.%d.self_attn.out_proj.bias",     "layers.%d.self_attn.out_proj.bias"},
    {"encoder.layers.%d.final_layer_norm.weight",     "layers.%d.final_layer_norm.weight"},
    {"encoder.layers.%d.final_layer_norm.bias",       "layers.%d.final_layer_norm.bias"},
    {"encoder.layers.%d.fc1.weight",                  "layers.%d.fc1.weight"},
    {"encoder.layers.%d.fc1.bias",                    "layers.%d.fc1.bias"},
    {"encoder.layers.%d.fc2.weight",                  "layers.%d.fc2.weight"},
    {"encoder.layers.%d.fc2.bias",                    "layers.%d.fc2.bias"},
    {"encoder.conv2d1.weight",                        "conv2d1.weight"},   // Qwen3-Omni's AuT stem
    {"encoder.conv2d1.bias",                          "conv2d1.bias"},
    {"encoder.conv2d2.weight",                        "conv2d2.weight"},
    {"encoder.conv2d2.bias",                          "conv2d2.bias"},
    {"encoder.conv2d3.weight",                        "conv2d3.weight"},
    {"encoder.conv2d3.bias",                          "conv2d3.bias"},
    {"encoder.conv_out.weight",                       "conv_out.weight"},
    {"encoder.layers.%d.mlp.up_proj.weight",          "layers.%d.mlp.up_proj.weight"},     // Voxtral Realtime's MLP
    {"encoder.layers.%d.mlp.gate_proj.weight",        "layers.%d.mlp.gate_proj.weight"},
};
static_assert(wa_names_follow_table(WA_HF_NAMES), "WA_HF_NAMES must name the rows of WA_TENSORS in order");

// Where the encoder is, by the class that saved it: the first prefix whose conv1.weight (or the
// AuT's conv2d1.weight) the checkpoint holds. A tower's projector (WA_PROJ_TENSORS' names) sits
// beside it, under `projector`. Read by the converter too.
struct wa_hf_prefix { const char * encoder, * projector; };
static const wa_hf_prefix WA_HF_PREFIXES[] = {
    {"model.encoder.",        ""},           // WhisperForConditionalGeneration
    {"encoder.",              ""},           // WhisperModel, WhisperForAudioClassification, Step-Audio 2's
    {"audio_tower.",          ""},           // Qwen2AudioForConditionalGeneration, VoxtralForConditionalGeneration, UltravoxModel, GLM-ASR
    {"model.audio_tower.",    "model."},     // the same, as transformers 5 saves them
    {"thinker.audio_tower.",  "thinker."},   // Qwen2.5-Omni's and Qwen3-Omni's thinker
    {"apm.",                  ""},           // MiniCPM-o's WhisperEncoder
    {"speech_encoder.",       ""},           // MERaLiON-2's
    {"",                      ""},           // a WhisperEncoder saved alone
};

// ---- llama.cpp's mmproj files: their audio tensors' names, row by row ours ----------------
// (convert_hf_to_gguf.py --mmproj; "%d": the layer)
struct wa_mmproj_name { const char * ours, * mmproj; };
static const wa_mmproj_name WA_MMPROJ_NAMES[] = {
    {"encoder.conv1.weight",                          "a.conv1d.1.weight"},
    {"encoder.conv1.bias",                            "a.conv1d.1.bias"},
    {"encoder.conv2.weight",                          "a.conv1d.2.weight"},
    {"encoder.conv2.bias",                            "a.conv1d.2.bias"},
    {"encoder.embed_positions.weight",                "a.position_embd.weight"},
    {"encoder.layer_norm.weight",                     "a.post_ln.weight"},
    {"encoder.layer_norm.bias",                       "a.post_ln.bias"},
    {"encoder.layers.%d.self_attn_layer_norm.weight", "a.blk.%d.ln1.weight"},
    {"encoder.layers.%d.self_attn_layer_norm.bias",   "a.blk.%d.ln1.bias"},
    {"encoder.layers.%d.self_attn.q_proj.weight",     "a.blk.%d.attn_q.weight"},
    {"encoder.layers.%d.self_attn.k_proj.weight",     "a.blk.%d.attn_k.weight"},
    {"encoder.layers.%d.self_attn.v_proj.weight",     "a.blk.%d.attn_v.weight"},
    {"encoder.layers.%d.self_attn.q_proj.bias",       "a.blk.%d.attn_q.bias"},
    {"encoder.layers.%d.self_attn.v_proj.bias",       "a.blk.%d.attn_v.bias"},
    {"encoder.layers.%d.self_attn.out_proj.weight",   "a.blk.%d.attn_out.weight"},
    {"encoder.layers.%d.self_attn.out_proj.bias",     "a.blk.%d.attn_out.bias"},
    {"encoder.layers.%d.final_layer_norm.weight",     "a.blk.%d.ln2.weight"},
    {"encoder.layers.%d.final_layer_norm.bias",       "a.blk.%d.ln2.bias"},
    {"encoder.layers.%d.fc1.weight",                  "a.blk.%d.ffn_up.weight"},
    {"encoder.layers.%d.fc1.bias",                    "a.blk.%d.ffn_up.bias"},
    {"encoder.layers.%d.fc2.weight",                  "a.blk.%d.ffn_down.weight"},
    {"encoder.layers.%d.fc2.bias",                    "a.blk.%d.ffn_down.bias"},
    {"encoder.layers.%d.self_attn.k_proj.bias",       "a.blk.%d.attn_k.bias"},       // qwen3a's (the AuT)
    {"encoder.conv2d1.weight",                        "a.conv2d.1.weight"},
    {"encoder.conv2d1.bias",                          "a.conv2d.1.bias"},
    {"encoder.conv2d2.weight",                        "a.conv2d.2.weight"},
    {"encoder.conv2d2.bias",                          "a.conv2d.2.bias"},
    {"encoder.conv2d3.weight",                        "a.conv2d.3.weight"},
    {"encoder.conv2d3.bias",                          "a.conv2d.3.bias"},
    {"encoder.conv_out.weight",                       "a.conv_out.weight"},
    {"multi_modal_projector.linear.weight",           "mm.a.fc.weight"},
    {"multi_modal_projector.linear.bias",             "mm.a.fc.bias"},
    {"multi_modal_projector.linear_1.weight",         "mm.a.mlp.1.weight"},
    {"multi_modal_projector.linear_2.weight",         "mm.a.mlp.2.weight"},
    {"multi_modal_projector.linear_1.bias",           "mm.a.mlp.1.bias"},
    {"multi_modal_projector.linear_2.bias",           "mm.a.mlp.2.bias"},
    {"multi_modal_projector.ln_pre.weight",           "mm.a.norm_pre.weight"},
    {"multi_modal_projector.ln_mid.weight",           "mm.a.norm_mid.weight"},
};
// MERaLiON-2's adapter in llama.cpp's meralion files (its converter's MERaLiONWhisperEncoderModel):
// mlp_adapter.0, gate_proj, pool_proj, out_proj as mm.a.mlp.0-3, ln_speech as mm.a.norm_pre. Read
// before WA_MMPROJ_NAMES for that type alone: there mm.a.mlp.1, .2 and norm_pre are other towers'.
static const wa_mmproj_name WA_MMPROJ_MERALION_NAMES[] = {
    {"speech_audio_adapter.mlp_adapter.0.weight",     "mm.a.mlp.0.weight"},
    {"speech_audio_adapter.mlp_adapter.0.bias",       "mm.a.mlp.0.bias"},
    {"speech_audio_adapter.gate_proj.weight",         "mm.a.mlp.1.weight"},
    {"speech_audio_adapter.gate_proj.bias",           "mm.a.mlp.1.bias"},
    {"speech_audio_adapter.pool_proj.weight",         "mm.a.mlp.2.weight"},
    {"speech_audio_adapter.pool_proj.bias",           "mm.a.mlp.2.bias"},
    {"speech_audio_adapter.out_proj.weight",          "mm.a.mlp.3.weight"},
    {"speech_audio_adapter.out_proj.bias",            "mm.a.mlp.3.bias"},
    {"ln_speech.weight",                              "mm.a.norm_pre.weight"},
    {"ln_speech.bias",                                "mm.a.norm_pre.bias"},
};
