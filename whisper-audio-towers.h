// whisper-audio-towers.h - the audio LLMs' towers, each in one place: its graph builder (what
// follows the encoder's last layer), its rules (the mel frames an input gives, the rows a window
// gives), its row of WA_TOWERS (what its processor does with an input) and the checks of its
// hyperparameters. A new tower adds its section and its row here; its rows of the checkpoint
// tables that the directory reader and the converter both read (whisper-audio-arch.h: WA_PROJECTORS,
// WA_PROJ_TENSORS, WA_HF_TOWERS with its config keys, WA_HF_SETTINGS, WA_HF_RENAMES), and a short
// case in each reader where its config says more than those hold; its value to the public enum, its
// test model to tests/data/towers and its line to the docs.
//
// Internal: whisper-audio.cpp includes it once, after the encoder's structs (whisper_audio_encoder),
// whose names it uses; it travels with that file (README, "Embedding").

// ---- rules every tower uses --------------------------------------------------------------
// The rows a chunk gives from its mel frames that hold audio (conv2's stride 2 makes
// ceil(frames / 2) positions).
static int positions_of(int frames) { return frames < 1 ? 0 : (frames - 1) / 2 + 1; }

// The AuT's positions (and tokens) from mel frames: transformers' _get_feat_extract_output_lengths,
// each chunk of n_chunk frames three halvings ((x - 1) // 2 + 1: 100 -> 13), the last chunk its rest's.
static int aut_positions(const whisper_audio_hparams & hp, int frames) {
    auto l3 = [](int x) { for (int i = 0; i < 3; i++) x = x < 1 ? 0 : (x - 1) / 2 + 1; return x; };
    return frames / hp.n_chunk * l3(hp.n_chunk) + l3(frames % hp.n_chunk);
}
// How many positions of a window hold audio, given its `frames` mel frames of audio: by the AuT's
// rule, or by Whisper's.
static int wa_positions(const whisper_audio_hparams & hp, int frames) {
    return hp.n_conv ? aut_positions(hp, frames) : positions_of(frames);
}
// The mel frames one window of a whole-signal tower takes; the next window starts after them.
// Whisper-style towers take 3000. The AuT takes the most whole attention windows that fit in 3000
// (2400 when n_attn_window is 800), so that our windows are cut where the model's attention
// windows are.
static int wa_window_frames(const whisper_audio_hparams & hp) {
    return hp.n_attn_window ? WHISPER_AUDIO_N_FRAMES / hp.n_attn_window * hp.n_attn_window : WHISPER_AUDIO_N_FRAMES;
}
// All of an input (30 s windows, no limit), a frame per started hop
// n / d rounded up, without n + d - 1, which wraps near SIZE_MAX (an input's count comes from callers).
static size_t wa_ceil_div(size_t n, size_t d) { return n / d + (n % d != 0); }

static int64_t frames_all(size_t n) {
    return (int64_t)wa_ceil_div(n, WHISPER_AUDIO_HOP);
}
// A window's positions through a stacking projector: whole windows (Voxtral's and MERaLiON-2's
// projectors stack within a padded window: 1500 / 4, 1500 / 15), else the window's positions
static int rows_window_stacked(const whisper_audio_hparams & hp, int, bool projector) {
    return projector ? hp.n_ctx / hp.stack_factor : hp.n_ctx;
}
// The positions holding audio pooled by 2 (Qwen2-Audio's avg_pooler, Audio Flamingo 3's and
// Qwen2.5-Omni's the same): (pos - 2) // 2 + 1
static int rows_pooled(const whisper_audio_hparams &, int frames, bool) { return positions_of(frames) / 2; }
// The first 30 s of an input, a frame per started hop (Qwen2-Audio's and Qwen2.5-Omni's processors)
static int64_t frames_first_window(size_t n) {
    return (int64_t)wa_ceil_div(std::min<size_t>(n, WHISPER_AUDIO_N_SAMPLES), WHISPER_AUDIO_HOP);
}

// ---- the towers: each a builder and its rules ---------------------------------------------
//
// A tower's builder follows the encoder's last layer, each step as the model's own code:
// cur [B, T, d] -> [B, tokens, n_llm] with the projector (params.projector), else the tower's
// own rows [B, rows, d]. window [B] (a graph input, a time_rope tower's alone): each window's
// index in its input.

// ---- Qwen2-Audio -------------------------------------------------------------------------
// Qwen2AudioEncoder: avg_pooler, layer_norm; Qwen2AudioMultiModalProjector's linear
static vt_tensor * build_qwen2a(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (enc->params.projector) cur = vt_linear(ctx, cur, enc->proj.fc1_w, enc->proj.fc1_b, VT_ACT_NONE, nullptr);
    return cur;
}

// ---- Voxtral -----------------------------------------------------------------------------
// layer_norm; get_audio_features: reshape(-1, 4 d), linear_1, GELU, linear_2
static vt_tensor * build_voxtral(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_linear(ctx, cur, enc->proj.fc1_w, nullptr, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, enc->proj.fc2_w, nullptr, VT_ACT_NONE, nullptr);
}
// padded to a multiple of 30 s
static int64_t frames_voxtral(size_t n) {
    return (int64_t)whisper_audio_n_windows(n) * WHISPER_AUDIO_N_FRAMES;
}

// ---- Ultravox ----------------------------------------------------------------------------
// layer_norm; UltravoxProjector: stack (the tail zero-padded), ln_pre, linear_1, SwiGLU, ln_mid,
// linear_2, ln_post (v0.4: ln_post after linear_2 instead of ln_mid)
static vt_tensor * build_ultravox(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
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
static int rows_ultravox(const whisper_audio_hparams & hp, int frames, bool projector) {
    const int pos = positions_of(frames);
    return projector ? (pos + hp.stack_factor - 1) / hp.stack_factor : pos;
}
static int64_t frames_ultravox(size_t n) {     // at least 2 hops, padded to a hop
    return (int64_t)wa_ceil_div(std::max<size_t>(n, 2 * WHISPER_AUDIO_HOP), WHISPER_AUDIO_HOP);
}

// ---- Audio Flamingo 3 --------------------------------------------------------------------
// AudioFlamingo3Encoder: avg_pooler, layer_norm (Qwen2-Audio's); AudioFlamingo3MultiModalProjector:
// linear_1, GELU, linear_2
static vt_tensor * build_af3(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    const wa_projector & p = enc->proj;
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}
static int64_t frames_af3(size_t n) {          // its first 600 s (max_audio_len), a frame per started hop
    return (int64_t)wa_ceil_div(std::min<size_t>(n, 20 * WHISPER_AUDIO_N_SAMPLES), WHISPER_AUDIO_HOP);
}

// ---- Music Flamingo ----------------------------------------------------------------------
// MusicFlamingoModel.get_audio_features: Audio Flamingo 3's encoder (avg_pooler, layer_norm), then
// pos_emb and apply_rotary_time_emb (the rows turned by their time in the input: their window's
// index and their place in it), then Audio Flamingo 3's projector. The tower's rows are the
// encoder's (the rotary embedding is the model's, beside its projector).
static vt_tensor * build_musicflamingo(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor * window) {
    const wa_projector & p = enc->proj;
    const whisper_audio_hparams & hp = enc->hparams;
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, hp.eps);
    if (!enc->params.projector) return cur;
    cur = vt_rope_time(ctx, cur, window, hp.n_time_rot, hp.time_rope_theta, hp.time_rope_step);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}
static int64_t frames_musicflamingo(size_t n) {   // its first 1200 s (MusicFlamingoProcessor's max_audio_len), a frame per started hop
    return (int64_t)wa_ceil_div(std::min<size_t>(n, 40 * WHISPER_AUDIO_N_SAMPLES), WHISPER_AUDIO_HOP);
}

// ---- GLM-ASR -----------------------------------------------------------------------------
// GlmAsrEncoder's norm; GlmAsrModel.get_audio_features: reshape(-1, intermediate_size) (4 positions
// stacked), GlmAsrMultiModalProjector's linear_1, GELU, linear_2
static vt_tensor * build_glmasr(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}
static int rows_glmasr(const whisper_audio_hparams & hp, int frames, bool projector) {   // (pos - 4) // 4 + 1
    return projector ? positions_of(frames) / hp.stack_factor : positions_of(frames);
}
static int64_t frames_glmasr(size_t n) {       // its first 21 windows (max_audio_len 655 s), a frame per started hop
    return (int64_t)wa_ceil_div(std::min<size_t>(n, 21 * WHISPER_AUDIO_N_SAMPLES), WHISPER_AUDIO_HOP);
}

// ---- Qwen2.5-Omni ------------------------------------------------------------------------
// Qwen2_5OmniAudioEncoder.forward after its layers: the stride-2 average pooling (its pool_indices:
// pairs of positions, the last of an odd count left out), ln_post, proj. (The chunked conv stem and
// block-diagonal attention are the encoder's, by hparams.n_chunk.)
static vt_tensor * build_qwen25o(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (enc->params.projector) cur = vt_linear(ctx, cur, enc->proj.fc1_w, enc->proj.fc1_b, VT_ACT_NONE, nullptr);
    return cur;
}

// ---- MiniCPM-o ---------------------------------------------------------------------------
// MiniCPMO.get_audio_embedding after apm (block-causal attention is the encoder's, by
// hparams.n_causal): hidden_states[-1] (the last layer through apm's layer_norm),
// audio_projection_layer (linear1, ReLU, linear2), then audio_avg_pooler (AvgPool1d(2, 2) over
// time: pairs of positions, an odd last one left out; fewer than 2 positions give no token).
static vt_tensor * build_minicpmo(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_NONE, nullptr);
    cur = vt_relu(ctx, cur);
    cur = vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
    return cur->ne[1] >= 2 ? vt_avg_pool2(ctx, cur) : cur;
}
static int rows_minicpmo(const whisper_audio_hparams &, int frames, bool projector) {   // (pos - 2) // 2 + 1
    return projector ? positions_of(frames) / 2 : positions_of(frames);
}

// ---- Kimi-Audio --------------------------------------------------------------------------
// Kimi-Audio: WhisperEncoder.tokenize_waveform's speech_encoder(mel).last_hidden_state (through its
// layer_norm), extract_whisper_feat's reshape to [T / 4, 4 d] (4 positions stacked), then the
// language model's VQAdaptor: layers 0 (linear), 1 (SiLU), 3 (linear), 4 (LayerNorm, rms_norm_eps).
static vt_tensor * build_kimiaudio(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_stack_frames(ctx, cur, enc->hparams.stack_factor);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_NONE, nullptr);
    cur = vt_silu(ctx, cur);
    cur = vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
    return vt_layer_norm(ctx, cur, p.norm_w, p.norm_b, enc->hparams.proj_eps);
}
// Kimi-Audio's token count. A window of L samples gives token_len = (L - 1) // 1280 + 1 tokens,
// which is ceil(frames / 8) of its ceil(L / 160) mel frames. Each token stacks 4 positions, so
// the tower's own rows are the first token_len * 4 positions.
static int rows_kimiaudio(const whisper_audio_hparams & hp, int frames, bool projector) {
    const int tokens = frames < 1 ? 0 : (frames - 1) / (2 * hp.stack_factor) + 1;
    return projector ? tokens : tokens * hp.stack_factor;
}

// ---- Qwen3-Omni --------------------------------------------------------------------------
// Qwen3OmniMoeAudioEncoder.forward after its layers: ln_post, then proj1, GELU, proj2 (the
// projector; the tower's rows are ln_post's).
static vt_tensor * build_qwen3a(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    const wa_projector & p = enc->proj;
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_GELU, nullptr);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}
static int rows_qwen3a(const whisper_audio_hparams & hp, int frames, bool) { return aut_positions(hp, frames); }
static int64_t frames_qwen3a(size_t n) {       // unpadded (padding "longest"): the STFT's 1 + n // 160 frames less its last
    return (int64_t)(n / WHISPER_AUDIO_HOP);
}

// ---- Qwen3-ASR ---------------------------------------------------------------------------
// Qwen3ASREncoder is Qwen3-Omni's AuT (its builder, build_qwen3a: ln_post, then Qwen3ASRMultiModalProjector's
// linear_1, GELU, linear_2). Qwen3ASRFeatureExtractor zero-pads a clip shorter than min_length 8000 samples
// to them (every frame of it valid), then frames as Qwen3-Omni's; it pads the log-mel to whole chunks, so
// a clip shorter than a chunk runs as a whole one (wa_tower.pad_chunks).
static const size_t QWEN3ASR_MIN_SAMPLES = 8000;
static int64_t frames_qwen3asr(size_t n) { return frames_qwen3a(std::max(n, QWEN3ASR_MIN_SAMPLES)); }

// ---- Step-Audio 2 ------------------------------------------------------------------------
// Step-Audio 2: AudioEncoder.forward after its blocks (avg_pooler: pairs of positions, an odd last
// one left out; after_norm), then its Adaptor: conv (kernel 3, stride 2, padding 1) + GELU,
// linear1, ReLU, linear2. The rows its lengths rule keeps are the first (wa_tower.rows).
static vt_tensor * build_stepaudio2(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
    const wa_projector & p = enc->proj;
    cur = vt_avg_pool2(ctx, cur);
    cur = vt_layer_norm(ctx, cur, enc->w.ln_post_w, enc->w.ln_post_b, enc->hparams.eps);
    if (!enc->params.projector) return cur;
    cur = vt_conv1d_k3(ctx, cur, p.conv_w, p.conv_b, 2, VT_ACT_GELU, nullptr);
    cur = vt_linear(ctx, cur, p.fc1_w, p.fc1_b, VT_ACT_NONE, nullptr);
    cur = vt_relu(ctx, cur);
    return vt_linear(ctx, cur, p.fc2_w, p.fc2_b, VT_ACT_NONE, nullptr);
}
// Step-Audio 2's token count. A window of w samples has L = ceil(w / 160) mel frames (wav_lens).
// Pooling leaves E = (L + 1) // 2 // 2 positions, and the adapter's stride-2 conv makes
// (E - 1) // 2 + 1 tokens of them, none when E is 0 (forward's feat_lens). The graph counts its
// output rows from its own frame count by the same rule.
static int rows_stepaudio2(const whisper_audio_hparams &, int frames, bool projector) {
    const int pooled = (frames + 1) / 2 / 2;
    return projector ? (pooled < 1 ? 0 : (pooled - 1) / 2 + 1) : pooled;
}
// Step-Audio 2 masks keys by its audio's length. A window holds `frames` mel frames of audio and
// runs at n_frames. conv2 keeps every second frame, starting at (n_frames + 1) % 2, and a key is
// kept when its frame holds audio (make_non_pad_mask of the length).
static int wa_keys_of(int frames, int n_frames) { return std::max(0, (frames - (n_frames + 1) % 2 + 1) / 2); }

// ---- MERaLiON-2 --------------------------------------------------------------------------
// MERaLiON-2 (MERaLiON2ForConditionalGeneration's speech path): speech_encoder(...).last_hidden_state
// (through its layer_norm), ln_speech, then speech_audio_adapter: reshape to [T / 15, 15 d]
// (speech_mlp_scale_factor positions stacked), mlp_adapter (linear, SiLU), act_fn(gate_proj(h)) *
// pool_proj(h), out_proj. The tower's rows are the encoder's (ln_speech is the adapter's side).
static vt_tensor * build_meralion(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor *) {
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
// MERaLiON-2 (MERaLiON2Processor): number_chunk_limit = time_duration_limit 300 // whisper_chunk_size 30
static const size_t MERALION_MAX_SAMPLES = 10 * (size_t)WHISPER_AUDIO_N_SAMPLES;
static int64_t frames_meralion(size_t n) {     // its first 10 chunks of 30 s, a frame per started hop
    return (int64_t)wa_ceil_div(std::min(n, MERALION_MAX_SAMPLES), WHISPER_AUDIO_HOP);
}

// ---- Voxtral Realtime --------------------------------------------------------------------
// VoxtralRealtimeEncoder (transformers voxtral_realtime) is causal: a position depends on the audio up
// to its own, never on later audio, so the tower runs an input in steps, each carrying what the next
// needs (wa_causal below), and a step of any size gives the same rows (bit for bit on the CPU). Its processor (mistral_common's
// AudioEncoder.pad, offline) puts pad_left tokens of zeros (1280 samples each) before the audio, and
// after it zeros to a whole token and pad_right tokens more; the feature extractor's log-mel is centred
// (torch.stft center=True) and clamped at the fixed global_log_mel_max 1.5, not at the input's own max.
// A token is 8 mel frames: conv2's stride 2, then 4 positions stacked into the projector.
static const int RT_TOKEN_FRAMES = 8;
static const size_t RT_TOKEN_SAMPLES = RT_TOKEN_FRAMES * WHISPER_AUDIO_HOP;
static const float RT_LOG_MEL_MAX = 1.5f;
static const int RT_MAX_STEP = WHISPER_AUDIO_N_FRAMES;   // mel frames a step runs at most (30 s)

static size_t rows_realtime(const whisper_audio_hparams & hp, size_t n, bool projector) {
    const size_t tokens = (size_t)hp.pad_left + wa_ceil_div(n, RT_TOKEN_SAMPLES) + (size_t)hp.pad_right;
    return projector ? tokens : tokens * hp.stack_factor;
}
// The table's rules for a window of `frames` frames (a step's): its tokens, or its positions.
static int rows_realtime_step(const whisper_audio_hparams &, int frames, bool projector) {
    return projector ? frames / RT_TOKEN_FRAMES : frames / 2;
}
static int64_t frames_realtime(size_t n) { return (int64_t)wa_ceil_div(n, RT_TOKEN_SAMPLES) * RT_TOKEN_FRAMES; }

// One step of B inputs' F new mel frames (g's inputs set by the caller), as VoxtralRealtimeEncoder's
// forward with its caches: the causal conv stem (conv1, then conv2 of stride 2, each GELU, their left
// padding the previous step's last rows), then per layer RMSNorm, q/k/v (k without bias) turned by RoPE at
// their positions in the input, attention over the sliding window of the cache's keys and the step's own,
// o_proj + residual, RMSNorm, down_proj(silu(gate_proj) * up_proj) + residual; the final RMSNorm; then
// get_audio_features: 4 positions stacked, linear_1, GELU, linear_2.
static void build_realtime_step(const whisper_audio_encoder * enc, vt_context * ctx, wa_step_graph & g, int B, int F) {
    const whisper_audio_hparams & hp = enc->hparams;
    const wa_weights & w = enc->w;
    const int n_state = hp.n_state, n_head = hp.n_head, hd = wa_head_dim(hp), a = n_head * hd, W = hp.n_window;
    const int P = F / 2;
    const float kq_scale = 1.0f / sqrtf((float)hd);
    auto input = [&](vt_tensor * t, const char * name) { vt_set_name(t, "%s", name); vt_set_input(t); return t; };
    g.mel = input(vt_new_tensor_3d(ctx, VT_TYPE_F32, hp.n_mels, F, B), "mel");
    g.tail1 = input(vt_new_tensor_3d(ctx, VT_TYPE_F32, hp.n_mels, 2, B), "tail1");
    g.tail2 = input(vt_new_tensor_3d(ctx, VT_TYPE_F32, n_state, 1, B), "tail2");
    g.pos0 = input(vt_new_tensor_1d(ctx, VT_TYPE_F32, B), "pos0");
    g.kv_start = input(vt_new_tensor_1d(ctx, VT_TYPE_F32, B), "kv_start");

    // embedder: the causal conv stem
    vt_tensor * cur = vt_conv1d_k3_causal(ctx, g.mel, g.tail1, w.conv1_w, w.conv1_b, 1, VT_ACT_GELU);
    g.conv1 = vt_set_name(cur, "conv1");
    cur = vt_conv1d_k3_causal(ctx, cur, g.tail2, w.conv2_w, w.conv2_b, 2, VT_ACT_GELU);
    vt_set_name(cur, "post_conv");

    const size_t es = vt_type_size(cur->type);
    for (int il = 0; il < hp.n_layer; il++) {
        const wa_layer & layer = w.layers[il];
        vt_tensor * inpL = cur;

        // norm
        cur = vt_rms_norm(ctx, inpL, layer.attn_ln_w, hp.eps);

        // self-attention: q, k, v in one GEMM, turned at the step's positions; the keys and values after the caches'
        {
            vt_tensor * qkv = vt_linear(ctx, cur, layer.qkv_w, layer.qkv_b, VT_ACT_NONE, nullptr);
            qkv = vt_rope_qk_at(ctx, qkv, n_head, hp.n_rot, hp.rope_theta, g.pos0);
            const size_t row = 3 * (size_t)a * es, win = row * P;
            vt_tensor * q = vt_view_3d(ctx, qkv, a, P, B, row, win, 0);
            vt_tensor * k = vt_view_3d(ctx, qkv, a, P, B, row, win, a * es);
            vt_tensor * v = vt_view_3d(ctx, qkv, a, P, B, row, win, 2 * a * es);
            char name[32];
            snprintf(name, sizeof(name), "k_cache%d", il);
            g.k_cache.push_back(input(vt_new_tensor_3d(ctx, cur->type, a, W, B), name));
            snprintf(name, sizeof(name), "v_cache%d", il);
            g.v_cache.push_back(input(vt_new_tensor_3d(ctx, cur->type, a, W, B), name));
            g.k_all.push_back(vt_concat_rows(ctx, g.k_cache.back(), k));
            g.v_all.push_back(vt_concat_rows(ctx, g.v_cache.back(), v));
            cur = vt_attention_window(ctx, q, g.k_all.back(), g.v_all.back(), n_head, kq_scale, g.kv_start, W);
        }

        // projection + residual
        vt_tensor * inpFF = vt_linear(ctx, cur, layer.out_w, layer.out_b, VT_ACT_NONE, inpL);

        // feed-forward network (SwiGLU) + residual
        cur = vt_rms_norm(ctx, inpFF, layer.ffn_ln_w, hp.eps);
        cur = vt_linear(ctx, cur, layer.up_gate_w, nullptr, VT_ACT_NONE, nullptr);
        cur = vt_swiglu(ctx, cur);
        cur = vt_linear(ctx, cur, layer.fc2_w, layer.fc2_b, VT_ACT_NONE, inpFF);
        vt_set_name(cur, "layer%d", il);
    }
    cur = vt_rms_norm(ctx, cur, w.ln_post_w, hp.eps);
    if (enc->params.projector) {
        cur = vt_stack_frames(ctx, cur, hp.stack_factor);
        cur = vt_linear(ctx, cur, enc->proj.fc1_w, nullptr, VT_ACT_GELU, nullptr);
        cur = vt_linear(ctx, cur, enc->proj.fc2_w, nullptr, VT_ACT_NONE, nullptr);
    }
    g.out = vt_set_name(cur, "tokens");
}

// One input's state between steps. Mel frame t of the padded signal is centred on its sample 160 t and
// reads samples [160 t - 200, 160 t + 200): it waits for the 200 samples past its centre, and the last
// frames wait for the input's end (the zeros after it). The processor's zeros, a token or more each side,
// are what the centred STFT's mirror reads past the signal's two ends, so reading zeros there is exact.
struct wa_causal {
    whisper_audio_encoder * enc = nullptr;
    int min_step = 0;                    // mel frames a step waits for (a multiple of 8), but at the end
    std::vector<float> pcm;              // the padded signal from sample pcm_first on: what the next frames read
    int64_t pcm_first = 0;
    int64_t n_padded = 0;                // samples of the padded signal so far (pcm_first + pcm.size())
    int64_t n_frames = 0;                // mel frames made so far
    std::vector<float> mel;              // [frames, n_mels] made and not yet encoded, clamped as the model takes them
    std::vector<float> tail1, tail2;     // [2, n_mels] the last two frames encoded, [d] conv1's last row: zeros at first
    std::vector<float> k_cache, v_cache; // [n_layer, W, a] the rotated keys and the values of the last W positions,
                                         // when on is null; else they are rows [on_row0, + W) of on's k_all, v_all
    wa_step_graph * on = nullptr;        // the step graph whose outputs hold them (on the device, not copied out)
    int64_t on_row0 = 0;
    int64_t positions = 0;               // encoded
    size_t n_input = 0;                  // samples of the input fed
    bool ended = false;
};

// Another input's step is about to overwrite the graph that holds s's caches: they go to s's host copy.
static bool causal_spill(wa_causal * s) {
    wa_step_graph * g = s->on;
    if (!g) return true;
    whisper_audio_encoder * enc = s->enc;
    const whisper_audio_hparams & hp = enc->hparams;
    const size_t cache = (size_t)hp.n_window * hp.n_head * wa_head_dim(hp);
    std::vector<float> all((size_t)vt_nelements(g->k_all[0]));
    bool ok = true;
    for (int il = 0; ok && il < hp.n_layer; il++) {
        ok = vt_backend_get_tensor_f32(enc->backend, g->k_all[il], all.data());
        std::copy(all.begin() + s->on_row0 * (cache / hp.n_window), all.begin() + s->on_row0 * (cache / hp.n_window) + cache,
                  s->k_cache.begin() + il * cache);
        ok = ok && vt_backend_get_tensor_f32(enc->backend, g->v_all[il], all.data());
        std::copy(all.begin() + s->on_row0 * (cache / hp.n_window), all.begin() + s->on_row0 * (cache / hp.n_window) + cache,
                  s->v_cache.begin() + il * cache);
    }
    g->holder = nullptr;
    s->on = nullptr;
    if (!ok) wa_set_error("Voxtral Realtime's caches from %s: %s", vt_backend_name(enc->backend), vt_last_error());
    return ok;
}

// The step graph of B inputs and F frames, built and allocated on first use. Kept: the graphs of the
// most frames (whole inputs' steps) and of one other size (a stream's steps), so memory stays bounded.
static wa_step_graph * step_graph_for(whisper_audio_encoder * enc, int B, int F) {
    const std::pair<int, int> key(B, F);
    auto it = enc->step_graphs.find(key);
    if (it != enc->step_graphs.end()) return &it->second;
    for (auto i = enc->step_graphs.begin(); i != enc->step_graphs.end();) {
        if (i->first.second != RT_MAX_STEP) {
            if (i->second.holder && !causal_spill(i->second.holder)) return nullptr;
            vt_graph_free(i->second.graph);
            vt_free(i->second.ctx);
            i = enc->step_graphs.erase(i);
        } else {
            ++i;
        }
    }
    const whisper_audio_hparams & hp = enc->hparams;
    std::unique_ptr<vt_context, void (*)(vt_context *)> ctx(vt_init(64 + 24 * hp.n_layer), vt_free);
    wa_step_graph g;
    build_realtime_step(enc, ctx.get(), g, B, F);
    std::vector<vt_tensor *> outs = {g.out, g.conv1};
    outs.insert(outs.end(), g.k_all.begin(), g.k_all.end());
    outs.insert(outs.end(), g.v_all.begin(), g.v_all.end());
    std::unique_ptr<vt_graph, void (*)(vt_graph *)> graph(vt_graph_build(ctx.get(), outs.data(), (int)outs.size()), vt_graph_free);
    vt_graph_set_tune(graph.get(), F == RT_MAX_STEP);
    if (!vt_backend_alloc_graph(enc->backend, graph.get())) {
        wa_set_error("allocating Voxtral Realtime's step graph (batch %d, %d frames, %.1f MiB) on %s: %s", B, F,
                     vt_graph_arena_size(graph.get()) / 1048576.0, vt_backend_name(enc->backend), vt_last_error());
        return nullptr;
    }
    g.ctx = ctx.release();
    g.graph = graph.release();
    return &(enc->step_graphs[key] = g);
}

// The frames the padded signal so far completes (all of them once the input has ended), appended to s->mel.
static void causal_make_frames(wa_causal * s) {
    const whisper_audio_hparams & hp = s->enc->hparams;
    const int64_t ready = s->ended ? s->n_padded / WHISPER_AUDIO_HOP
                                   : std::max<int64_t>(0, (s->n_padded - WA_MEL_CONTEXT) / WHISPER_AUDIO_HOP + 1);
    const int k = (int)(ready - s->n_frames);
    if (k <= 0) return;
    // the samples frames [n_frames, ready) read, zeros where the padded signal has none (before it; past its end)
    const int64_t first = s->n_frames * WHISPER_AUDIO_HOP - WA_MEL_CONTEXT;
    std::vector<float> row((size_t)(k - 1) * WHISPER_AUDIO_HOP + WHISPER_AUDIO_N_FFT, 0.0f);
    for (size_t i = 0; i < row.size(); i++) {
        const int64_t j = first + (int64_t)i - s->pcm_first;
        if (j >= 0 && j < (int64_t)s->pcm.size()) row[i] = s->pcm[(size_t)j];
    }
    std::vector<float> out((size_t)hp.n_mels * k);
    const int per = 256, n_blocks = (k + per - 1) / per;   // blocks of frames on the encoder's threads (a frame is its own)
    wa_parallel(n_blocks, s->enc->params.n_threads, [&](int i) {
        const int t0 = i * per;
        log_mel_frames(s->enc->mel_filters.data(), hp.n_mels, row.data() + (size_t)t0 * WHISPER_AUDIO_HOP, std::min(per, k - t0),
                       out.data() + t0, (size_t)k);
    });
    log_mel_clamp(out.data(), hp.n_mels, k, (size_t)k, RT_LOG_MEL_MAX);
    const size_t at = s->mel.size();
    s->mel.resize(at + (size_t)k * hp.n_mels);
    for (int t = 0; t < k; t++)
        for (int m = 0; m < hp.n_mels; m++) s->mel[at + (size_t)t * hp.n_mels + m] = out[(size_t)m * k + t];
    s->n_frames = ready;
    // keep what later frames read: from 200 samples before the next frame's centre
    const int64_t keep = std::max<int64_t>(s->pcm_first, s->n_frames * WHISPER_AUDIO_HOP - WA_MEL_CONTEXT);
    s->pcm.erase(s->pcm.begin(), s->pcm.begin() + (keep - s->pcm_first));
    s->pcm_first = keep;
}

// Runs the frames made in steps of at most RT_MAX_STEP: each step waits for min_step of them (a stream's
// few), all of them once the input has ended; every step's rows are appended to rows.
static bool causal_run(wa_causal * s, std::vector<float> & rows) {
    whisper_audio_encoder * enc = s->enc;
    const whisper_audio_hparams & hp = enc->hparams;
    const int n_mels = hp.n_mels, d = hp.n_state, a = hp.n_head * wa_head_dim(hp), W = hp.n_window;
    for (;;) {
        const int pending = (int)(s->mel.size() / n_mels);
        int F = std::min(RT_MAX_STEP, pending / RT_TOKEN_FRAMES * RT_TOKEN_FRAMES);
        if (F == 0 || (!s->ended && F < s->min_step)) return true;
        const auto t0 = std::chrono::steady_clock::now();
        wa_step_graph * g = step_graph_for(enc, 1, F);
        if (!g) return false;
        const float pos0 = (float)s->positions, kv_start = (float)std::max<int64_t>(0, W - s->positions);
        bool ok = vt_backend_set_tensor(enc->backend, g->mel, s->mel.data(), VT_TYPE_F32) &&
                  vt_backend_set_tensor(enc->backend, g->tail1, s->tail1.data(), VT_TYPE_F32) &&
                  vt_backend_set_tensor(enc->backend, g->tail2, s->tail2.data(), VT_TYPE_F32) &&
                  vt_backend_set_tensor(enc->backend, g->pos0, &pos0, VT_TYPE_F32) &&
                  vt_backend_set_tensor(enc->backend, g->kv_start, &kv_start, VT_TYPE_F32);
        // The caches: an input's first step has none (kv_start masks every row: never read). Else they come from
        // the device, where the input's last step left them (rows of its graph's k_all and v_all: copied there,
        // not through the host), or from the host copy. Another input's caches in this graph go to its host copy
        // first: this step overwrites them.
        const bool first = s->positions == 0, last = s->ended && F == pending;
        const size_t cache = (size_t)W * a;
        if (g->holder && g->holder != s && !causal_spill(g->holder)) return false;
        for (int il = 0; ok && !first && il < hp.n_layer; il++) {
            if (s->on) {
                ok = vt_backend_copy_rows(enc->backend, g->k_cache[il], s->on->k_all[il], s->on_row0) &&
                     vt_backend_copy_rows(enc->backend, g->v_cache[il], s->on->v_all[il], s->on_row0);
            } else {
                ok = vt_backend_set_tensor(enc->backend, g->k_cache[il], s->k_cache.data() + il * cache, VT_TYPE_F32) &&
                     vt_backend_set_tensor(enc->backend, g->v_cache[il], s->v_cache.data() + il * cache, VT_TYPE_F32);
            }
        }
        ok = ok && vt_backend_compute(enc->backend, g->graph);
        if (s->on) s->on->holder = nullptr;
        s->on = nullptr;
        const size_t n_out = (size_t)vt_nelements(g->out), at = rows.size();
        rows.resize(at + n_out);
        ok = ok && vt_backend_get_tensor_f32(enc->backend, g->out, rows.data() + at);
        // what the next step carries: the last two frames, conv1's last row, each layer's last W keys and values
        // (left in this graph's outputs; the last step carries nothing)
        std::vector<float> conv1((size_t)F * d);
        ok = ok && (last || vt_backend_get_tensor_f32(enc->backend, g->conv1, conv1.data()));
        if (!ok) { wa_set_error("Voxtral Realtime's step of %d frames on %s: %s", F, vt_backend_name(enc->backend), vt_last_error()); return false; }
        if (!last) {
            s->on = g;
            s->on_row0 = F / 2;
            g->holder = s;
        }
        std::copy(s->mel.begin() + (size_t)(F - 2) * n_mels, s->mel.begin() + (size_t)F * n_mels, s->tail1.begin());
        std::copy(conv1.end() - d, conv1.end(), s->tail2.begin());
        s->mel.erase(s->mel.begin(), s->mel.begin() + (size_t)F * n_mels);
        s->positions += F / 2;
        // the encoder's timings count a step as a batch of one window
        enc->timings.encode_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        enc->timings.n_batches++;
        enc->timings.n_windows++;
    }
}

wa_causal * wa_causal_begin(whisper_audio_encoder * enc, int min_step) {
    const whisper_audio_hparams & hp = enc->hparams;
    VT_ASSERT(hp.n_window > 0 && min_step >= 1);
    std::unique_ptr<wa_causal> s(new wa_causal());
    s->enc = enc;
    s->min_step = (min_step + RT_TOKEN_FRAMES - 1) / RT_TOKEN_FRAMES * RT_TOKEN_FRAMES;
    const size_t cache = (size_t)hp.n_layer * hp.n_window * hp.n_head * wa_head_dim(hp);
    s->tail1.assign((size_t)2 * hp.n_mels, 0.0f);
    s->tail2.assign((size_t)hp.n_state, 0.0f);
    s->k_cache.assign(cache, 0.0f);
    s->v_cache.assign(cache, 0.0f);
    s->pcm.assign((size_t)hp.pad_left * RT_TOKEN_SAMPLES, 0.0f);   // the processor's zeros before the audio
    s->n_padded = (int64_t)s->pcm.size();
    return s.release();
}

bool wa_causal_feed(wa_causal * s, const float * pcm, size_t n, std::vector<float> & rows) {
    VT_ASSERT(!s->ended);
    s->pcm.insert(s->pcm.end(), pcm, pcm + n);
    s->n_padded += (int64_t)n;
    s->n_input += n;
    causal_make_frames(s);
    return causal_run(s, rows);
}

int wa_causal_close(wa_causal * s) {
    VT_ASSERT(!s->ended);
    const whisper_audio_hparams & hp = s->enc->hparams;
    // zeros to a whole token, then pad_right tokens more (the left zeros are whole tokens)
    const size_t n = (size_t)(wa_ceil_div(s->n_input, RT_TOKEN_SAMPLES) * RT_TOKEN_SAMPLES - s->n_input) +
                     (size_t)hp.pad_right * RT_TOKEN_SAMPLES;
    s->pcm.insert(s->pcm.end(), n, 0.0f);
    s->n_padded += (int64_t)n;
    s->ended = true;
    causal_make_frames(s);
    const int pending = (int)(s->mel.size() / hp.n_mels);
    return s->positions == 0 && pending <= RT_MAX_STEP ? pending : 0;
}

bool wa_causal_end(wa_causal * s, std::vector<float> & rows) {
    if (!s->ended) wa_causal_close(s);
    return causal_run(s, rows);
}

bool wa_causal_run_batch(wa_causal * const * s, int n, std::vector<float> * rows) {
    VT_ASSERT(n >= 1);
    whisper_audio_encoder * enc = s[0]->enc;
    const whisper_audio_hparams & hp = enc->hparams;
    const int n_mels = hp.n_mels, F = (int)(s[0]->mel.size() / n_mels);
    for (int i = 0; i < n; i++) VT_ASSERT(s[i]->enc == enc && s[i]->ended && s[i]->positions == 0 && s[i]->mel.size() == (size_t)F * n_mels);
    wa_step_graph * g = step_graph_for(enc, n, F);
    if (!g) return false;
    if (g->holder && !causal_spill(g->holder)) return false;
    // every input's one step: its first (no caches: kv_start masks them all) and its last (nothing carried on)
    std::vector<float> mel((size_t)n * F * n_mels), zeros((size_t)n * 2 * std::max(n_mels, hp.n_state), 0.0f);
    std::vector<float> pos0(n, 0.0f), kv_start(n, (float)hp.n_window);
    for (int i = 0; i < n; i++) std::copy(s[i]->mel.begin(), s[i]->mel.end(), mel.begin() + (size_t)i * F * n_mels);
    std::vector<float> out((size_t)vt_nelements(g->out));
    const bool ok = vt_backend_set_tensor(enc->backend, g->mel, mel.data(), VT_TYPE_F32) &&
                    vt_backend_set_tensor(enc->backend, g->tail1, zeros.data(), VT_TYPE_F32) &&
                    vt_backend_set_tensor(enc->backend, g->tail2, zeros.data(), VT_TYPE_F32) &&
                    vt_backend_set_tensor(enc->backend, g->pos0, pos0.data(), VT_TYPE_F32) &&
                    vt_backend_set_tensor(enc->backend, g->kv_start, kv_start.data(), VT_TYPE_F32) &&
                    vt_backend_compute(enc->backend, g->graph) && vt_backend_get_tensor_f32(enc->backend, g->out, out.data());
    if (!ok) { wa_set_error("Voxtral Realtime's batch of %d inputs of %d frames on %s: %s", n, F, vt_backend_name(enc->backend), vt_last_error()); return false; }
    const size_t per = out.size() / n;
    for (int i = 0; i < n; i++) {
        rows[i].insert(rows[i].end(), out.begin() + i * per, out.begin() + (i + 1) * per);
        s[i]->mel.clear();
        s[i]->positions = F / 2;
    }
    return true;
}

void wa_causal_free(wa_causal * s) {
    if (s && s->on) s->on->holder = nullptr;
    delete s;
}

// ---- the table ----------------------------------------------------------------------------

// One row per audio LLM: what its processor and code do with an input, for the pipeline, the
// token counts and the graph.
struct wa_tower {
    whisper_audio_projector type;
    size_t max_samples;          // the most of an input the processor keeps (0: all of it)
    bool whole_signal;           // one log-mel over the whole input, its clamp over all of it (else
                                 // each 30 s window its own, zero-padded)
    bool unpadded;               // an input of one chunk runs at its own length (positional embedding sliced)
    bool masked;                 // attention masked past the positions that hold audio
    int64_t (*frames)(size_t n_samples);
    int (*rows)(const whisper_audio_hparams & hp, int frames, bool projector);
    vt_tensor * (*build)(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * cur, vt_tensor * window);
    bool tail_by_frames;        // a later window of an input (not its first) that holds less than 30 s: its mel
                                 // frames past the audio read as zero and its keys masked at its mel frame
                                 // count, not its positions (MiniCPM-o: pad_sequence's 0.0, and its padding
                                 // mask compares positions with audio_feature_lens, the mel frames)
    bool normalized = false;     // each window's samples to zero mean and unit variance over its audio before the
                                 // log-mel, its padding zero (WhisperFeatureExtractor's do_normalize: MERaLiON-2)
    // Step-Audio 2 cuts windows of window_samples (0 means 30 s). Each window gets its own log-mel
    // over its audio plus mel_pad zero samples: (w + mel_pad) / 160 frames, clamped over those. Its
    // length is L = ceil(w / 160) frames (padding_mels' frames minus 2), and its keys follow conv2's
    // sampling of them (mask[(T + 1) % 2 :: 2] of the T frames it runs). Every window after the
    // first runs at a whole window's frames, because padding_mels pads to the longest.
    size_t window_samples = 0;
    int mel_pad = 0;
    bool time_rope = false;      // Music Flamingo's rotary time embedding (hparams.n_time_rot): the row of a model
                                 // that has it, where another row of its projector type has not
    size_t min_samples = 0;      // a whole-signal input shorter than this zero-padded to it (Qwen3-ASR's min_length)
    bool pad_chunks = false;     // the AuT's log-mel padded to whole chunks (Qwen3-ASR): a clip shorter than a chunk
                                 // runs as one whole chunk, not at its own length (Qwen3-Omni's)
    bool causal = false;         // run in steps with its state carried (wa_causal: Voxtral Realtime), not in windows
};

static const wa_tower WA_TOWERS[] = {
    //  type                               max_samples               whole  unpad  mask  frames rows build tail_by_frames normalized
    { WHISPER_AUDIO_PROJECTOR_QWEN2A,   WHISPER_AUDIO_N_SAMPLES, false, false, true,  frames_first_window, rows_pooled,   build_qwen2a,   false, false },
    { WHISPER_AUDIO_PROJECTOR_VOXTRAL,  0,                       true,  false, false, frames_voxtral,  rows_window_stacked,  build_voxtral,  false, false },
    { WHISPER_AUDIO_PROJECTOR_ULTRAVOX, 0,                       true,  true,  true,  frames_ultravox, rows_ultravox, build_ultravox, false, false },
    // Audio Flamingo 3: each 30 s window as Qwen2-Audio's one (padded, its own log-mel, masked)
    { WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, 20 * WHISPER_AUDIO_N_SAMPLES, false, false, true,  frames_af3, rows_pooled, build_af3, false, false },
    // Music Flamingo: Audio Flamingo 3's windows, its first 1200 s, the window's index in its input to the graph
    { WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO, 40 * WHISPER_AUDIO_N_SAMPLES, false, false, true,  frames_musicflamingo, rows_pooled,
      build_musicflamingo, false, false, 0, 0, true },
    // GLM-ASR: each 30 s window padded with its own log-mel, attention over all of it (no mask)
    { WHISPER_AUDIO_PROJECTOR_GLMASR,   21 * WHISPER_AUDIO_N_SAMPLES, false, false, false, frames_glmasr, rows_glmasr, build_glmasr, false, false },
    // Qwen2.5-Omni: its first 30 s as Qwen2-Audio's (Qwen2_5OmniProcessor pads to 30 s and truncates
    // there), the encoder over chunks of hparams.n_chunk frames (conv stem and attention per chunk,
    // the frames past the audio zero), then Qwen2-Audio's pooling and token rule
    { WHISPER_AUDIO_PROJECTOR_QWEN25O,  WHISPER_AUDIO_N_SAMPLES, false, false, true,  frames_first_window, rows_pooled,   build_qwen25o,  false, false },
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
    // Qwen3-ASR (Qwen3ASRProcessor: padding True, no truncation): Qwen3-Omni's windows, an input shorter than
    // 8000 samples zero-padded to them, a clip shorter than a chunk a whole chunk
    { WHISPER_AUDIO_PROJECTOR_QWEN3ASR, 0,                       true,  false, true,  frames_qwen3asr, rows_qwen3a,   build_qwen3a,   false, false,
      0, 0, false, QWEN3ASR_MIN_SAMPLES, true },
    // Step-Audio 2 (StepAudio2.apply_chat_template, padding_mels, AudioEncoder, Adaptor): all of it in
    // 25 s windows, an input of one at its own frames, masked by its length rule
    { WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, 0,                     false, true,  true,  frames_all, rows_stepaudio2, build_stepaudio2, false, false,
      25 * WHISPER_AUDIO_SAMPLE_RATE, 479 },
    // MERaLiON-2 (MERaLiON2Processor): its first 10 chunks of 30 s, each normalised (do_normalize) and
    // padded with its own log-mel, attention over all of it (WhisperEncoder takes no mask), 100 tokens each
    { WHISPER_AUDIO_PROJECTOR_MERALION, MERALION_MAX_SAMPLES,    false, false, false, frames_meralion, rows_window_stacked, build_meralion, false, true },
    // Voxtral Realtime (VoxtralRealtimeProcessor offline, get_audio_features): all of the input with its
    // processor's zeros around it, one causal pass in steps (build_realtime_step; build is unused)
    { WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME, 0,               false, false, false, frames_realtime, rows_realtime_step, nullptr, false, false,
      0, 0, false, 0, false, true },
};

static const wa_tower * wa_tower_of(const whisper_audio_hparams & hp) {
    for (const wa_tower & t : WA_TOWERS) if (t.type == hp.projector && t.time_rope == (hp.n_time_rot > 0)) return &t;
    return nullptr;
}

// A window's samples (30 s, or the tower's), and the mel frames a whole one runs at (Step-Audio 2's
// window and its padding; the AuT's whole attention windows; else 30 s)
static size_t wa_window_samples(const wa_tower * t) { return t && t->window_samples ? t->window_samples : WHISPER_AUDIO_N_SAMPLES; }
static int wa_full_frames(const wa_tower * t, const whisper_audio_hparams & hp) {
    return t && t->window_samples ? (int)((t->window_samples + t->mel_pad) / WHISPER_AUDIO_HOP) : wa_window_frames(hp);
}
// The mel frames of a mel_pad tower's window of n samples: its audio and the zeros after it
static int wa_padded_frames(const wa_tower & t, size_t n) {
    return (int)std::min<size_t>(WHISPER_AUDIO_N_FRAMES, (n + t.mel_pad) / WHISPER_AUDIO_HOP);
}

// ---- hyperparameters: what each tower needs of a model file -------------------------------

// The GGUF reader's checks of a tower's keys, once the encoder's and the projector's are read
// (gguf_projector): what each tower needs, its defaults where llama.cpp's mmproj files store none,
// and the keys no other tower may set.
static bool wa_tower_hparams(whisper_audio_model * m, const gguf_kv & kv, const gguf_dialect & d) {
    const char * path = m->path.c_str();
    whisper_audio_hparams & hp = m->hparams;
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_VOXTRAL && hp.n_ctx % hp.stack_factor != 0) {
        wa_set_error("%s: %s = %u does not divide the %d positions of a window (Voxtral stacks within one)", path,
                     d.stack_factor, (unsigned)hp.stack_factor, hp.n_ctx);
        return false;
    }
    // Ultravox's RMSNorm eps (its own class's 1e-6; llama.cpp's files do not store it); MERaLiON-2's
    // ln_speech (nn.LayerNorm's default, which llama.cpp's meralion graph takes as the encoder's)
    auto e = kv.f32.find("whisper.projector.layer_norm_epsilon");
    hp.proj_eps = e != kv.f32.end() ? e->second : hp.projector == WHISPER_AUDIO_PROJECTOR_MERALION ? hp.eps : 1e-6f;
    if (!(std::isfinite(hp.proj_eps) && hp.proj_eps > 0.0f)) {
        wa_set_error("%s: whisper.projector.layer_norm_epsilon is %g; it must be a positive finite number", path, hp.proj_eps);
        return false;
    }
    // Music Flamingo's rotary time embedding (our GGUF's keys): all three or none; none is Audio Flamingo 3
    auto td = kv.u32.find("whisper.projector.time_rope.dimension_count");
    auto tf = kv.f32.find("whisper.projector.time_rope.freq_base"), ts = kv.f32.find("whisper.projector.time_rope.step");
    hp.n_time_rot = 0;
    hp.time_rope_theta = hp.time_rope_step = 0.0f;
    if (td != kv.u32.end() || tf != kv.f32.end() || ts != kv.f32.end()) {
        if (hp.projector != WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO) {
            wa_set_error("%s: whisper.projector.time_rope.* is set for a model that is not Music Flamingo's (projector musicflamingo)", path);
            return false;
        }
        if (td == kv.u32.end()) return kv.missing(path, "whisper.projector.time_rope.dimension_count", "uint32 (4)");
        if (tf == kv.f32.end()) return kv.missing(path, "whisper.projector.time_rope.freq_base", "float32 (6)");
        if (ts == kv.f32.end()) return kv.missing(path, "whisper.projector.time_rope.step", "float32 (6)");
        if (td->second < 2 || td->second % 2 || 2 * td->second > (uint32_t)hp.n_state) {
            wa_set_error("%s: whisper.projector.time_rope.dimension_count = %u; it must be even, in [2, embedding_length / 2 = %d]",
                         path, td->second, hp.n_state / 2);
            return false;
        }
        // its position table has freq_base rows, one a row of a window's (n_ctx / 2 after the pooling)
        if (!(std::isfinite(tf->second) && tf->second >= hp.n_ctx / 2 && tf->second <= 1e9f)) {
            wa_set_error("%s: whisper.projector.time_rope.freq_base is %g; it must be a finite number from %d (a window's rows) "
                         "to 1e9", path, tf->second, hp.n_ctx / 2);
            return false;
        }
        if (!(std::isfinite(ts->second) && ts->second > 0.0f && ts->second <= 1.0f)) {
            wa_set_error("%s: whisper.projector.time_rope.step is %g; it must be in (0, 1] seconds", path, ts->second);
            return false;
        }
        hp.n_time_rot = (int)td->second;
        hp.time_rope_theta = tf->second;
        hp.time_rope_step = ts->second;
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_GLMASR && hp.n_rot == 0)
        return kv.missing(path, "whisper.encoder.rope.dimension_count", "uint32 (4)");
    // Voxtral Realtime: its encoder's sliding window and RoPE over whole heads, whole tokens of 4 positions,
    // its processor's zeros around the audio (at least a token each side: a centred frame reads 200 samples
    // past its centre, which must be zeros, not the signal's mirror)
    const bool realtime = hp.projector == WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME;
    hp.pad_left = hp.pad_right = 0;
    if (realtime) {
        if (hp.n_window == 0) return kv.missing(path, "whisper.encoder.attention.sliding_window", "uint32 (4)");
        if (hp.n_rot != hp.head_dim) {
            wa_set_error("%s: whisper.encoder.rope.dimension_count is %d; Voxtral Realtime turns whole heads (key_length %d)", path,
                         hp.n_rot, hp.head_dim);
            return false;
        }
        if (hp.stack_factor != 4) {
            wa_set_error("%s: %s = %d; Voxtral Realtime stacks 4 positions (a token: 8 mel frames, 1280 samples)", path,
                         d.stack_factor, hp.stack_factor);
            return false;
        }
        for (auto k : {std::make_pair("whisper.projector.pad_left_tokens", &hp.pad_left),
                       std::make_pair("whisper.projector.pad_right_tokens", &hp.pad_right)}) {
            auto it = kv.u32.find(k.first);
            if (it == kv.u32.end()) return kv.missing(path, k.first, "uint32 (4)");
            if (it->second < 1 || it->second > 1000) {
                wa_set_error("%s: %s = %u is outside [1, 1000] tokens", path, k.first, it->second);
                return false;
            }
            *k.second = (int)it->second;
        }
    } else if (hp.n_window) {
        wa_set_error("%s: whisper.encoder.attention.sliding_window is set for a model that is not Voxtral Realtime's tower", path);
        return false;
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_QWEN25O && hp.n_chunk == 0) {
        if (!m->mmproj) return kv.missing(path, "whisper.encoder.chunk_length", "uint32 (4)");
        hp.n_chunk = 200;                 // Qwen2_5OmniAudioEncoderConfig's n_window 100, as every release has it
    }
    const bool aut = hp.projector == WHISPER_AUDIO_PROJECTOR_QWEN3A || hp.projector == WHISPER_AUDIO_PROJECTOR_QWEN3ASR;
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
        wa_set_error("%s: whisper.encoder.chunk_length is set for a model that is not Qwen2.5-Omni's, Qwen3-Omni's or Qwen3-ASR's tower", path);
        return false;
    }
    if ((hp.n_conv || hp.n_attn_window) && !aut) {
        wa_set_error("%s: whisper.encoder.%s is set for a model that is not Qwen3-Omni's or Qwen3-ASR's tower", path,
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

// The hyperparameters a tower's tensors say (read after their infos): Qwen3-Omni's mmproj stem
// channels, the projector widths of GLM-ASR, Step-Audio 2 and Ultravox.
static bool wa_tower_tensor_hparams(whisper_audio_model * m) {
    const char * path = m->path.c_str();
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
    return true;
}
