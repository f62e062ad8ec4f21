#!/usr/bin/env python3
"""GPU parity of the audio-LLM towers: Qwen2-Audio, Voxtral, Ultravox, Audio Flamingo 3, GLM-ASR, Qwen2.5-Omni, MiniCPM-o, Kimi-Audio, Qwen3-Omni, Step-Audio 2,
MERaLiON-2, Music Flamingo, Qwen3-ASR and Voxtral Realtime on CUDA against the
models' own code, on the tiny random checkpoints of tests/data/towers (made by
tests/data/make-tower-references.py; weights stored in f16, so every file holds the same numbers).

For each tower, the speech_16k log-mel (tests/data/features) goes through
  - the float64 reference stored beside the checkpoints (the models' own code, CPU, eager);
  - the models' own code on the GPU in f16 and in bf16 (sdpa attention): the peer's own error
    (Qwen2-Audio and Voxtral: transformers' Qwen2AudioModel path and get_audio_features; Audio
    Flamingo 3 and GLM-ASR: their models' get_audio_features with the input_features_mask;
    Qwen2.5-Omni: its Qwen2_5OmniAudioEncoder over the frames holding audio, as get_audio_features;
    Qwen3-Omni: its Qwen3OmniMoeAudioEncoder over the frames holding audio, as get_audio_features;
    Voxtral Realtime (PCM, not mel: its processor's padding written out, its feature extractor's log-mel,
    get_audio_features; ours through whisper_audio_encode_tokens) on speech_16k and 28 s of the long clip;
    Music Flamingo: its get_audio_features with the mask and its 175 audio tokens (the rotary time
    embedding's timestamps); Qwen3-ASR: its get_audio_features on the frames padded to whole chunks;
    Ultravox: its ModifiedWhisperEncoder and UltravoxProjector, written out below from
    transformers' WhisperEncoder layers and LlamaRMSNorm, since ultravox_model.py is not here;
    MiniCPM-o: get_audio_embedding's steps written out the same way from transformers' WhisperEncoder
    layers, its block-causal mask and MultiModalProjector, since its modeling_minicpmo.py runs only on
    the transformers of its time, 4.48, and the float64 reference was made by it; Kimi-Audio: its
    WhisperEncoder's forward (transformers' layers, sdpa: its own calls flash_attn) over the padded
    window, the first token_len * 4 positions, 4 stacked, its VQAdaptor's steps; Step-Audio 2: its
    AudioEncoder's and Adaptor's forward written out the same way (its modeling_step_audio_2.py is the
    checkpoint's own, not in transformers), its scores' softmax in f32 as it does; MERaLiON-2: transformers'
    WhisperEncoder (its speech_encoder) over the padded window, ln_speech, and MERaLiON2SpeechAudioAdaper's
    steps, written out, since YingxuH/vllm_plugin's transformers_utils is not here);
  - whisper-audio on CUDA in f16 and bf16 (build/libwhisper-audio.so through ctypes,
    whisper_audio_encode_mel_tokens), from our GGUF (build/tower-NAME-f32.gguf) and from
    llama.cpp's mmproj file (tests/data/towers/NAME.mmproj.gguf; GLM-ASR, Qwen2.5-Omni, MiniCPM-o, Kimi-Audio, Step-Audio 2,
    Music Flamingo and Qwen3-ASR have ours alone).
Ours must be within 1.25x the peer's error in the same dtype. Prints a table; exits 1 on a failure.

Run on the GPU machine from the repository root, after `make -j16 all build/tower-{qwen2a,voxtral,ultravox,af3,glmasr,qwen25o,minicpmo,kimiaudio,qwen3a,stepaudio2,meralion,mflamingo,qwen3asr,realtime}-f32.gguf`:
    python3 tests/gpu/towers.py
"""
import ctypes
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
BOUND = 1.25
N_FRAMES = 702       # speech_16k: the frames holding audio (ceil(112256 / 160))
DEVICE = os.environ.get("WA_TOWERS_DEVICE", "cuda")   # cpu: to check the peers here, in float64


class Params(ctypes.Structure):   # whisper_audio_encoder_params
    _fields_ = [("device", ctypes.c_int), ("dtype", ctypes.c_int), ("n_threads", ctypes.c_int),
                ("gpu_device", ctypes.c_int), ("max_batch", ctypes.c_int), ("output_layer", ctypes.c_int),
                ("final_ln", ctypes.c_bool), ("projector", ctypes.c_bool)]


def ours(lib, model_path, mel, n_frames, dtype, rows_max=1500, width=32):
    L = lib
    model = L.whisper_audio_model_load(model_path.encode())
    if not model:
        raise RuntimeError(L.whisper_audio_last_error().decode())
    p = L.whisper_audio_encoder_default_params()
    p.device = 2                                           # WHISPER_AUDIO_DEVICE_CUDA
    p.dtype = 1 if dtype == torch.bfloat16 else 0
    enc = L.whisper_audio_encoder_init(model, p)
    if not enc:
        raise RuntimeError(L.whisper_audio_last_error().decode())
    mel = np.ascontiguousarray(mel, dtype=np.float32)
    out = np.full((rows_max, width), np.nan, dtype=np.float32)
    rows = L.whisper_audio_encode_mel_tokens(enc, mel.ctypes.data, mel.shape[-1], N_FRAMES, out.ctypes.data)
    err = L.whisper_audio_last_error().decode() if rows < 0 else None
    L.whisper_audio_encoder_free(enc)
    L.whisper_audio_model_free(model)
    if err:
        raise RuntimeError(err)
    return out[:rows]


def realtime_pcm(pcm):
    """Voxtral Realtime's input as its processor makes it offline (mistral_common's AudioEncoder.pad, which
    is not on the GPU machine; the released model's numbers): 32 tokens of zeros (1280 samples each) before
    the audio, zeros to a whole token and 17 more after it."""
    tok = 1280
    return np.concatenate([np.zeros(32 * tok, np.float32), pcm, np.zeros(-len(pcm) % tok + 17 * tok, np.float32)])


def realtime(dtype, pcm):
    """Voxtral Realtime's get_audio_features on its feature extractor's log-mel of the padded input (centred,
    clamped at global_log_mel_max): it takes PCM, not a window of mel."""
    model, state = load(transformers.VoxtralRealtimeForConditionalGeneration, "realtime")
    model.load_state_dict({"model." + k: v for k, v in state.items()}, strict=False)   # the audio tower and projector
    model = model.to(DEVICE, dtype)
    fe = transformers.VoxtralRealtimeFeatureExtractor(feature_size=128)
    x = fe(realtime_pcm(pcm), sampling_rate=16000, return_tensors="pt").input_features
    return model.model.get_audio_features(x.to(DEVICE, dtype)).pooler_output[0]


def ours_pcm(lib, model_path, pcm, dtype, n_rows, width=32):
    """whisper_audio_encode_tokens of PCM on CUDA (Voxtral Realtime's way in)."""
    L = lib
    model = L.whisper_audio_model_load(model_path.encode())
    if not model:
        raise RuntimeError(L.whisper_audio_last_error().decode())
    p = L.whisper_audio_encoder_default_params()
    p.device = 2                                           # WHISPER_AUDIO_DEVICE_CUDA
    p.dtype = 1 if dtype == torch.bfloat16 else 0
    enc = L.whisper_audio_encoder_init(model, p)
    if not enc:
        raise RuntimeError(L.whisper_audio_last_error().decode())
    pcm = np.ascontiguousarray(pcm, dtype=np.float32)
    out = np.full((n_rows, width), np.nan, dtype=np.float32)
    ok = L.whisper_audio_encode_tokens(enc, pcm.ctypes.data, len(pcm), out.ctypes.data)
    err = None if ok else L.whisper_audio_last_error().decode()
    L.whisper_audio_encoder_free(enc)
    L.whisper_audio_model_free(model)
    if err:
        raise RuntimeError(err)
    return out


def load(cls, name):
    d = os.path.join(DATA, "towers", name)
    model = cls(transformers.AutoConfig.from_pretrained(d)).eval()
    state = load_file(os.path.join(d, "model.safetensors"))
    return model, state


def qwen2a(dtype, mel):
    model, state = load(transformers.Qwen2AudioForConditionalGeneration, "qwen2a")
    inner = model.model
    inner.audio_tower.load_state_dict({k[len("audio_tower."):]: v for k, v in state.items() if k.startswith("audio_tower.")})
    inner.multi_modal_projector.load_state_dict(
        {k[len("multi_modal_projector."):]: v for k, v in state.items() if k.startswith("multi_modal_projector.")})
    tower, proj = inner.audio_tower.to(DEVICE, dtype), inner.multi_modal_projector.to(DEVICE, dtype)
    mask = torch.zeros(1, mel.shape[-1], dtype=torch.long, device=DEVICE)
    mask[:, :N_FRAMES] = 1
    feat_len, out_len = tower._get_feat_extract_output_lengths(mask.sum(-1))
    seq = torch.arange((mel.shape[-1] - 2) // 2 + 1, device=DEVICE)[None, :]
    attn = transformers.masking_utils.create_bidirectional_mask(
        config=tower.config, inputs_embeds=torch.zeros(1, seq.shape[1], 1, dtype=dtype, device=DEVICE),
        attention_mask=(seq < feat_len[:, None]).long())
    x = torch.from_numpy(mel)[None].to(DEVICE, dtype)
    return proj(tower(x, attention_mask=attn).last_hidden_state)[0, : int(out_len)]


def voxtral(dtype, mel):
    model, state = load(transformers.VoxtralForConditionalGeneration, "voxtral")
    model.model.audio_tower.load_state_dict({k[len("audio_tower."):]: v for k, v in state.items() if k.startswith("audio_tower.")})
    model.model.multi_modal_projector.load_state_dict(
        {k[len("multi_modal_projector."):]: v for k, v in state.items() if k.startswith("multi_modal_projector.")})
    model = model.to(DEVICE, dtype)
    return model.get_audio_features(torch.from_numpy(mel)[None].to(DEVICE, dtype)).pooler_output[:100]


def af3(dtype, mel):
    model, state = load(transformers.AudioFlamingo3ForConditionalGeneration, "af3")
    model.model.audio_tower.load_state_dict({k[len("audio_tower."):]: v for k, v in state.items() if k.startswith("audio_tower.")})
    model.model.multi_modal_projector.load_state_dict(
        {k[len("multi_modal_projector."):]: v for k, v in state.items() if k.startswith("multi_modal_projector.")})
    model = model.to(DEVICE, dtype)
    mask = torch.zeros(1, mel.shape[-1], dtype=torch.long, device=DEVICE)
    mask[:, :N_FRAMES] = 1
    return model.model.get_audio_features(torch.from_numpy(mel)[None].to(DEVICE, dtype), mask).pooler_output


def mflamingo(dtype, mel):
    model, state = load(transformers.MusicFlamingoForConditionalGeneration, "mflamingo")
    model.model.audio_tower.load_state_dict({k[len("audio_tower."):]: v for k, v in state.items() if k.startswith("audio_tower.")})
    model.model.multi_modal_projector.load_state_dict(
        {k[len("multi_modal_projector."):]: v for k, v in state.items() if k.startswith("multi_modal_projector.")})
    model = model.to(DEVICE, dtype)
    mask = torch.zeros(1, mel.shape[-1], dtype=torch.long, device=DEVICE)
    mask[:, :N_FRAMES] = 1
    ids = torch.full((1, (N_FRAMES + 1) // 4), model.config.audio_token_id, device=DEVICE)   # its 175 tokens: one input
    return model.model.get_audio_features(torch.from_numpy(mel)[None].to(DEVICE, dtype), mask, ids).pooler_output


def qwen3asr(dtype, mel):
    model, state = load(transformers.Qwen3ASRForConditionalGeneration, "qwen3asr")
    model.load_state_dict(state, strict=False)                     # the audio tower and projector; positions: a buffer
    model = model.to(DEVICE, dtype)
    x = torch.zeros(1, mel.shape[0], 800, dtype=dtype, device=DEVICE)   # the frames holding audio, padded to whole chunks
    x[0, :, :N_FRAMES] = torch.from_numpy(mel[:, :N_FRAMES]).to(DEVICE, dtype)
    mask = (torch.arange(800, device=DEVICE) < N_FRAMES).long()[None]
    return model.model.get_audio_features(x, mask).pooler_output


def glmasr(dtype, mel):
    model, state = load(transformers.GlmAsrForConditionalGeneration, "glmasr")
    model.model.audio_tower.load_state_dict({k[len("audio_tower."):]: v for k, v in state.items() if k.startswith("audio_tower.")})
    model.model.multi_modal_projector.load_state_dict(
        {k[len("multi_modal_projector."):]: v for k, v in state.items() if k.startswith("multi_modal_projector.")})
    model = model.to(DEVICE, dtype)
    mask = torch.zeros(1, mel.shape[-1], dtype=torch.long, device=DEVICE)
    mask[:, :N_FRAMES] = 1
    return model.model.get_audio_features(torch.from_numpy(mel)[None].to(DEVICE, dtype), mask).pooler_output


def qwen25o(dtype, mel):
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as omni
    d = os.path.join(DATA, "towers", "qwen25o")
    acfg = transformers.AutoConfig.from_pretrained(d).thinker_config.audio_config
    acfg._attn_implementation = "sdpa"
    tower = omni.Qwen2_5OmniAudioEncoder(acfg).eval()
    state = load_file(os.path.join(d, "model.safetensors"))
    pre = "thinker.audio_tower."
    tower.load_state_dict({k[len(pre):]: v for k, v in state.items() if k.startswith(pre)})
    tower = tower.to(DEVICE, dtype)
    # Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features: the frames holding audio, their lengths
    lengths = torch.tensor([N_FRAMES], device=DEVICE)
    x = torch.from_numpy(mel[:, :N_FRAMES]).to(DEVICE, dtype)
    aftercnn, _ = tower._get_feat_extract_output_lengths(lengths)
    return tower(x, feature_lens=lengths, aftercnn_lens=aftercnn).last_hidden_state


def minicpmo(dtype, mel):
    d = os.path.join(DATA, "towers", "minicpmo")
    cfg = json.load(open(os.path.join(d, "config.json")))
    state = load_file(os.path.join(d, "model.safetensors"))
    wcfg = transformers.WhisperConfig(**{k: v for k, v in cfg["audio_config"].items() if k != "model_type"})
    wcfg._attn_implementation = "sdpa"
    tower = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
    tower.load_state_dict({k[len("apm."):]: v for k, v in state.items() if k.startswith("apm.")})
    tower = tower.to(DEVICE, dtype)
    p = {k[len("audio_projection_layer."):]: v.to(DEVICE, dtype) for k, v in state.items() if k.startswith("audio_projection_layer.")}
    block = int(cfg["audio_chunk_length"] * 50)
    with torch.no_grad():
        # MiniCPMWhisperEncoder.forward over the processor's frames (cut at the audio), the positions sliced
        x = torch.from_numpy(mel[:, :N_FRAMES])[None].to(DEVICE, dtype)
        x = torch.nn.functional.gelu(tower.conv1(x))
        x = torch.nn.functional.gelu(tower.conv2(x)).permute(0, 2, 1)
        h = x + tower.embed_positions.weight[: x.size(1)]
        T = h.shape[1]
        # get_audio_embedding's mask: subsequent_chunk_mask(T, 50, num_left_chunks=-1), -inf elsewhere
        i = torch.arange(T, device=DEVICE)
        mask = torch.zeros(1, 1, T, T, device=DEVICE, dtype=dtype)
        mask[0, 0][i[None, :] >= ((i[:, None] // block + 1) * block)] = float("-inf")
        for layer in tower.layers:
            h = layer(h, mask)
            h = h[0] if isinstance(h, tuple) else h
        h = tower.layer_norm(h)                                   # hidden_states[-1]
        h = torch.relu(h @ p["linear1.weight"].T + p["linear1.bias"]) @ p["linear2.weight"].T + p["linear2.bias"]
        h = torch.nn.functional.avg_pool1d(h.transpose(1, 2), cfg["audio_pool_step"]).transpose(1, 2)
        return h[0]


def kimiaudio(dtype, mel):
    d = os.path.join(DATA, "towers", "kimiaudio")
    cfg = json.load(open(os.path.join(d, "config.json")))
    wcfg = json.load(open(os.path.join(d, "whisper-large-v3", "config.json")))
    wcfg = transformers.WhisperConfig(**{k: v for k, v in wcfg.items() if k != "model_type"})
    wcfg._attn_implementation = "sdpa"
    tower = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
    wstate = load_file(os.path.join(d, "whisper-large-v3", "model.safetensors"))
    tower.load_state_dict({k[len("encoder."):]: v for k, v in wstate.items() if k.startswith("encoder.")})
    tower = tower.to(DEVICE, dtype)
    p = {k[len("model.vq_adaptor.layers."):]: v.to(DEVICE, dtype) for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    token_len = (112256 - 1) // 1280 + 1                 # tokenize_waveform's of speech_16k's 112256 samples: 88
    with torch.no_grad():
        # its WhisperEncoder.forward (the whole padded window, no mask), the first token_len * 4 positions
        x = torch.from_numpy(mel)[None].to(DEVICE, dtype)
        h = tower(x).last_hidden_state[:, : token_len * 4]
        h = h.reshape(1, token_len, -1)                      # extract_whisper_feat: 4 positions stacked
        h = torch.nn.functional.silu(h @ p["0.weight"].T + p["0.bias"]) @ p["3.weight"].T + p["3.bias"]
        h = torch.nn.functional.layer_norm(h, (h.shape[-1],), p["4.weight"], p["4.bias"], cfg["rms_norm_eps"])
        return h[0]


def meralion(dtype, mel):
    d = os.path.join(DATA, "towers", "meralion")
    cfg = json.load(open(os.path.join(d, "config.json")))
    wcfg = transformers.WhisperConfig(**{k: v for k, v in cfg["speech_config"].items() if k != "model_type"})
    wcfg._attn_implementation = "sdpa"
    tower = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
    state = load_file(os.path.join(d, "model.safetensors"))
    tower.load_state_dict({k[len("speech_encoder."):]: v for k, v in state.items() if k.startswith("speech_encoder.")})
    tower = tower.to(DEVICE, dtype)
    p = {k: v.to(DEVICE, dtype) for k, v in state.items() if not k.startswith("speech_encoder.")}
    a, f = "speech_audio_adapter.", cfg["speech_mlp_scale_factor"]
    with torch.no_grad():
        # _process_audio_input: speech_encoder (the padded window; it takes no mask), ln_speech, the adapter
        h = tower(torch.from_numpy(mel)[None].to(DEVICE, dtype)).last_hidden_state
        h = torch.nn.functional.layer_norm(h, (h.shape[-1],), p["ln_speech.weight"], p["ln_speech.bias"])
        B, T, C = h.shape
        h = h.reshape(B, T // f, C * f)                        # speech_mlp_scale_factor positions stacked
        h = torch.nn.functional.silu(h @ p[a + "mlp_adapter.0.weight"].T + p[a + "mlp_adapter.0.bias"])
        gate = torch.nn.functional.silu(h @ p[a + "gate_proj.weight"].T + p[a + "gate_proj.bias"])
        h = gate * (h @ p[a + "pool_proj.weight"].T + p[a + "pool_proj.bias"])
        return (h @ p[a + "out_proj.weight"].T + p[a + "out_proj.bias"])[0]


def qwen3a(dtype, mel):
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as omni3
    d = os.path.join(DATA, "towers", "qwen3a")
    acfg = transformers.AutoConfig.from_pretrained(d).thinker_config.audio_config
    acfg._attn_implementation = "sdpa"
    tower = omni3.Qwen3OmniMoeAudioEncoder(acfg).eval()
    state = load_file(os.path.join(d, "model.safetensors"))
    pre = "thinker.audio_tower."
    tower.load_state_dict({k[len(pre):]: v for k, v in state.items() if k.startswith(pre)}, strict=False)   # positions: a buffer
    tower = tower.to(DEVICE, dtype)
    # Qwen3OmniMoeThinkerModel.get_audio_features: the frames holding audio, their lengths
    x = torch.from_numpy(mel[:, :N_FRAMES]).to(DEVICE, dtype)
    return tower(x, feature_lens=torch.tensor([N_FRAMES], device=DEVICE)).last_hidden_state


def stepaudio2(dtype, mel):
    d = os.path.join(DATA, "towers", "stepaudio2")
    cfg = json.load(open(os.path.join(d, "config.json")))["audio_encoder_config"]
    w = {k: v.to(DEVICE, dtype) for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    F, H = torch.nn.functional, cfg["n_audio_head"]
    T, x_len = N_FRAMES + 2, N_FRAMES                     # a clip's frames (its 479 zeros), padding_mels' wav_lens
    with torch.no_grad():
        # AudioEncoder.forward: the conv stem, the bias of its length mask at conv2's positions, the blocks
        x = torch.from_numpy(mel[:, :T])[None].to(DEVICE, dtype)
        x = F.gelu(F.conv1d(x, w["encoder.conv1.weight"], w["encoder.conv1.bias"], padding=1))
        x = F.gelu(F.conv1d(x, w["encoder.conv2.weight"], w["encoder.conv2.bias"], stride=2, padding=1)).permute(0, 2, 1)
        keep = torch.arange(T, device=DEVICE)[(T + 1) % 2:: 2] < x_len
        bias = ((1.0 - keep.to(dtype)) * -1.0e10)[None, None, None]
        x = x + w["encoder.positional_embedding.weight"][: x.shape[1]]
        B, n, D = x.shape
        for i in range(cfg["n_audio_layer"]):
            p = "encoder.blocks.%d." % i
            h = F.layer_norm(x, (D,), w[p + "attn_ln.weight"], w[p + "attn_ln.bias"])
            scale = (D // H) ** -0.25
            q = F.linear(h, w[p + "attn.query.weight"], w[p + "attn.query.bias"]).view(B, n, H, -1).permute(0, 2, 1, 3) * scale
            k = F.linear(h, w[p + "attn.key.weight"]).view(B, n, H, -1).permute(0, 2, 3, 1) * scale
            v = F.linear(h, w[p + "attn.value.weight"], w[p + "attn.value.bias"]).view(B, n, H, -1).permute(0, 2, 1, 3)
            a = F.softmax((q @ k + bias).float(), dim=-1).to(dtype)
            a = (a @ v).permute(0, 2, 1, 3).flatten(start_dim=2)
            x = x + F.linear(a, w[p + "attn.out.weight"], w[p + "attn.out.bias"])
            h = F.layer_norm(x, (D,), w[p + "mlp_ln.weight"], w[p + "mlp_ln.bias"])
            h = F.linear(F.gelu(F.linear(h, w[p + "mlp.0.weight"], w[p + "mlp.0.bias"])), w[p + "mlp.2.weight"], w[p + "mlp.2.bias"])
            x = x + h
        x = F.avg_pool1d(x.permute(0, 2, 1), 2, 2).permute(0, 2, 1)
        x = F.layer_norm(x, (D,), w["encoder.after_norm.weight"], w["encoder.after_norm.bias"])
        # Adaptor.forward: conv (kernel 3, stride 2) + GELU, linear1, ReLU, linear2; forward's feat_lens
        x = F.gelu(F.conv1d(x.permute(0, 2, 1), w["adapter.conv.weight"], w["adapter.conv.bias"], stride=2, padding=1))
        x = F.linear(F.relu(F.linear(x.permute(0, 2, 1), w["adapter.linear1.weight"], w["adapter.linear1.bias"])),
                     w["adapter.linear2.weight"], w["adapter.linear2.bias"])
        return x[0, : ((x_len + 1) // 2 // 2 - 1) // 2 + 1]


def ultravox(dtype, mel):
    d = os.path.join(DATA, "towers", "ultravox")
    cfg = json.load(open(os.path.join(d, "config.json")))
    state = load_file(os.path.join(d, "model.safetensors"))
    wcfg = transformers.WhisperConfig(**{k: v for k, v in cfg["audio_config"].items() if k != "model_type"})
    tower = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
    tower.load_state_dict({k[len("audio_tower."):]: v for k, v in state.items() if k.startswith("audio_tower.")})
    tower = tower.to(DEVICE, dtype)
    p = {k[len("multi_modal_projector."):]: v.to(DEVICE) for k, v in state.items() if k.startswith("multi_modal_projector.")}

    def rms(name, dim):
        n = transformers.models.llama.modeling_llama.LlamaRMSNorm(dim, eps=1e-6).to(DEVICE, dtype)
        n.weight.data.copy_(p[name])
        return n

    stack, hidden = cfg["stack_factor"], cfg["hidden_size"]
    with torch.no_grad():
        # ModifiedWhisperEncoder.forward: unpadded input, the positions sliced
        x = torch.from_numpy(mel[:, :N_FRAMES])[None].to(DEVICE, dtype)
        x = torch.nn.functional.gelu(tower.conv1(x))
        x = torch.nn.functional.gelu(tower.conv2(x)).permute(0, 2, 1)
        h = x + tower.embed_positions.weight[: x.size(1)]
        for layer in tower.layers:
            h = layer(h, None)
            h = h[0] if isinstance(h, tuple) else h
        h = tower.layer_norm(h)
        # UltravoxProjector: pad and stack, ln_pre, linear_1, SwiGLU, ln_mid, linear_2
        B, T, C = h.shape
        h = torch.nn.functional.pad(h, (0, 0, 0, (T + stack - 1) // stack * stack - T)).view(B, -1, C * stack)
        h = rms("ln_pre.weight", C * stack)(h)
        h = h @ p["linear_1.weight"].to(dtype).T
        a, gate = h.chunk(2, dim=-1)
        h = torch.nn.functional.silu(gate) * a
        h = rms("ln_mid.weight", hidden // 2)(h)
        h = h @ p["linear_2.weight"].to(dtype).T
        return h[0, : (N_FRAMES + 15) // 16]


def main():
    lib = ctypes.CDLL(os.path.join(ROOT, "build", "libwhisper-audio.so"))
    lib.whisper_audio_model_load.restype = ctypes.c_void_p
    lib.whisper_audio_model_load.argtypes = [ctypes.c_char_p]
    lib.whisper_audio_model_free.argtypes = [ctypes.c_void_p]
    lib.whisper_audio_encoder_default_params.restype = Params
    lib.whisper_audio_encoder_init.restype = ctypes.c_void_p
    lib.whisper_audio_encoder_init.argtypes = [ctypes.c_void_p, Params]
    lib.whisper_audio_encoder_free.argtypes = [ctypes.c_void_p]
    lib.whisper_audio_encode_mel_tokens.restype = ctypes.c_int
    lib.whisper_audio_encode_mel_tokens.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.whisper_audio_last_error.restype = ctypes.c_char_p
    lib.whisper_audio_encode_tokens.restype = ctypes.c_bool
    lib.whisper_audio_encode_tokens.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

    rows, failed = [], False
    for name, peer, n_mels in (("qwen2a", qwen2a, 80), ("voxtral", voxtral, 128), ("ultravox", ultravox, 80),
                                ("af3", af3, 128), ("glmasr", glmasr, 128), ("qwen25o", qwen25o, 128),
                                ("minicpmo", minicpmo, 80), ("kimiaudio", kimiaudio, 128),
                                ("qwen3a", qwen3a, 128), ("stepaudio2", stepaudio2, 128), ("meralion", meralion, 128),
                                ("mflamingo", mflamingo, 128), ("qwen3asr", qwen3asr, 128)):
        mel = np.load(os.path.join(DATA, "features", "speech_16k.mel%d.npy" % n_mels))
        ref = np.load(os.path.join(DATA, "towers", name + ".speech_16k.features.npy")).astype(np.float64)
        our_mel = mel[:, :N_FRAMES] if name in ("ultravox", "minicpmo") else mel   # run unpadded
        our_mel = mel[:, :N_FRAMES + 2] if name == "stepaudio2" else our_mel       # a clip's frames, wav_lens 702
        for dtype in (torch.float16, torch.bfloat16):
            with torch.no_grad():
                theirs = peer(dtype, mel).float().cpu().numpy().astype(np.float64)
            e_peer = np.linalg.norm(theirs[: len(ref)] - ref) / np.linalg.norm(ref)
            files = [("gguf", os.path.join(ROOT, "build", "tower-%s-f32.gguf" % name))]
            if name not in ("glmasr", "qwen25o", "minicpmo", "kimiaudio", "stepaudio2", "mflamingo", "qwen3asr"):   # llama.cpp's glma is the original checkpoint's layout;
                                                                # its qwen2.5o needs the whole Omni model; no others
                files.append(("mmproj", os.path.join(DATA, "towers", name + ".mmproj.gguf")))
            for label, path in files:
                got = ours(lib, path, our_mel, our_mel.shape[-1], dtype).astype(np.float64)
                e_ours = np.linalg.norm(got[: len(ref)] - ref) / np.linalg.norm(ref)
                ok = e_ours <= BOUND * e_peer
                failed |= not ok
                rows.append("| %s (%s) | %s | %.3g | %.3g | %.2fx | %s |" % (name, label, str(dtype)[6:], e_ours, e_peer,
                                                                         e_ours / e_peer, "ok" if ok else "FAIL"))
    # Voxtral Realtime takes PCM: its processor's input of speech_16k and of 28 s of the long clip (past its window)
    import wave
    for clip, path, n in (("speech_16k", "speech_16k.wav", 112256), ("long_448000", "long_70s_16k.wav", 448000)):
        with wave.open(os.path.join(DATA, "audio", path)) as w:
            pcm = (np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0)[:n]
        ref = np.load(os.path.join(DATA, "towers", "realtime.%s.audio.npy" % clip)).astype(np.float64)
        for dtype in (torch.float16, torch.bfloat16):
            with torch.no_grad():
                theirs = realtime(dtype, pcm).float().cpu().numpy().astype(np.float64)
            e_peer = np.linalg.norm(theirs - ref) / np.linalg.norm(ref)
            got = ours_pcm(lib, os.path.join(ROOT, "build", "tower-realtime-f32.gguf"), pcm, dtype, len(ref)).astype(np.float64)
            e_ours = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            ok = e_ours <= BOUND * e_peer
            failed |= not ok
            rows.append("| realtime %s (gguf) | %s | %.3g | %.3g | %.2fx | %s |" % (clip, str(dtype)[6:], e_ours, e_peer, e_ours / e_peer,
                                                                                   "ok" if ok else "FAIL"))
    print("| tower | dtype | ours vs float64 | the model's own code | ratio | <= %.2fx |" % BOUND)
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print("towers parity:", "FAILED" if failed else "all within %.2fx" % BOUND)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
