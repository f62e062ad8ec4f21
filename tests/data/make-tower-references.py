#!/usr/bin/env python3
# Makes tests/data/towers/: tiny random Qwen2-Audio, Voxtral, Ultravox, Audio Flamingo 3, GLM-ASR,
# Qwen2.5-Omni, Qwen3-Omni, Music Flamingo, Qwen3-ASR, MERaLiON-2 and Voxtral Realtime checkpoints (the audio tower and projector only), and float64 references of what each model
# feeds its language model, computed by the models' own modules (transformers for Qwen2-Audio,
# Voxtral, Audio Flamingo 3, GLM-ASR and the two Omni towers; fixie-ai/ultravox's ultravox_model.py for Ultravox, which is not
# in transformers).
#
#   python3 tests/data/make-tower-references.py --ultravox ULTRAVOX_REPO/ultravox/model
#   python3 tests/data/make-tower-references.py --models af3      # some of them (no --ultravox needed)
#
# Every parameter is random (biases and norm weights too) and stored in f16, so the float64
# reference, our converter's f32 GGUF and llama.cpp's mmproj (conv weights in f16) all hold
# the same numbers. The mmproj files are made afterwards by llama.cpp's own converter (see
# tests/data/README.md).
import argparse, importlib.util, json, os, sys
import numpy as np
import torch
import transformers
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "towers")
D, LAYERS, HEADS, FF, LLM = 64, 3, 1, 256, 32      # head_dim 64 (the CUDA kernel's); 3+ layers for llama.cpp


def randomise(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            elif name.endswith("weight"):   # norms
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            p.copy_(p.half().float())   # the f16 the checkpoint stores


def save(model_dir, config, state):
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    save_file({k: v.detach().half().contiguous() for k, v in state.items()}, os.path.join(model_dir, "model.safetensors"))


def hub_names(model):   # the audio tower and projector, named as the published checkpoints name them
    state = {k.removeprefix("model."): v for k, v in model.state_dict().items()}
    return {k: v for k, v in state.items() if k.split(".")[0] in ("audio_tower", "multi_modal_projector")}


def read_wav(name):
    import wave
    with wave.open(os.path.join(ROOT, "audio", name)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def load_audio():
    pcm = read_wav("speech_16k.wav")
    return {"speech_16k": pcm, "speech_50001": pcm[:50001]}   # 702 and 313 (odd) mel frames


LONG = "long_70s"   # audio/long_70s_16k.wav: 1120000 samples, 7000 mel frames; references keep every 8th token


def store(name, x):
    np.save(os.path.join(OUT, name), np.asarray(x, dtype=np.float32))


def text_llama():
    return transformers.LlamaConfig(hidden_size=LLM, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=1, vocab_size=128, head_dim=16)


def qwen2_audio(audios):
    cfg = transformers.Qwen2AudioConfig(
        audio_config=dict(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FF,
                          num_mel_bins=80, max_source_positions=1500),
        text_config=dict(model_type="qwen2", hidden_size=LLM, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=128))
    cfg.audio_config._attn_implementation = "eager"
    model = transformers.Qwen2AudioForConditionalGeneration(cfg).eval()
    randomise(model, 1)
    state = hub_names(model)
    save(os.path.join(OUT, "qwen2a"), dict(cfg.to_dict(), architectures=["Qwen2AudioForConditionalGeneration"]), state)
    inner = model.model.double()
    tower, proj = inner.audio_tower, inner.multi_modal_projector

    def tokens(features, n_frames):   # Qwen2AudioModel.forward's audio path, for one clip
        mask = torch.zeros(1, features.shape[-1], dtype=torch.long)
        mask[:, :n_frames] = 1
        feat_len, out_len = tower._get_feat_extract_output_lengths(mask.sum(-1))
        seq = torch.arange((features.shape[-1] - 2) // 2 + 1)[None, :]
        mask2d = (seq < feat_len[:, None]).long()
        attn = transformers.masking_utils.create_bidirectional_mask(
            config=tower.config, inputs_embeds=torch.zeros(1, seq.shape[1], 1, dtype=torch.float64), attention_mask=mask2d)
        hidden = tower(features, attention_mask=attn).last_hidden_state
        return proj(hidden)[0, : int(out_len)], hidden[0, : int(out_len)]

    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel80.npy"))).double()[None]
        n_frames = -(-len(audios["speech_16k"]) // 160)
        out, tower_out = tokens(mel, n_frames)
        store("qwen2a.speech_16k.features.npy", out)
        store("qwen2a.speech_16k.features.tower.npy", tower_out)
        for clip, pcm in audios.items():
            x = fe(pcm, sampling_rate=16000, return_attention_mask=True, padding="max_length", return_tensors="pt")
            out, _ = tokens(x.input_features.double(), int(x.attention_mask.sum()))
            store(f"qwen2a.{clip}.audio.npy", out)
        # 70 s: Qwen2AudioProcessor's feature extractor truncates to the first 30 s (truncation=True)
        x = fe(read_wav("long_70s_16k.wav"), sampling_rate=16000, return_attention_mask=True, padding="max_length",
               return_tensors="pt")
        out, _ = tokens(x.input_features.double(), int(x.attention_mask.sum()))
        store(f"qwen2a.{LONG}.audio.every8.npy", out[::8])


def voxtral(audios):
    cfg = transformers.VoxtralConfig(
        audio_config=dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FF,
                          num_mel_bins=128, max_source_positions=1500),
        text_config=text_llama().to_dict(), projector_hidden_act="gelu")
    cfg.audio_config._attn_implementation = "eager"
    model = transformers.VoxtralForConditionalGeneration(cfg).eval()
    randomise(model, 2)
    state = hub_names(model)
    save(os.path.join(OUT, "voxtral"), dict(cfg.to_dict(), architectures=["VoxtralForConditionalGeneration"]), state)
    model = model.double()
    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        out = model.get_audio_features(mel)
        store("voxtral.speech_16k.features.npy", out.pooler_output[:100])          # the first 100 of 375 tokens
        store("voxtral.speech_16k.features.tower.npy", out.last_hidden_state[0, :100])
        for clip, pcm in audios.items():   # the processor pads to a multiple of 30 s
            x = fe(pcm, sampling_rate=16000, padding="max_length", return_tensors="pt")
            store(f"voxtral.{clip}.audio.npy", model.get_audio_features(x.input_features.double()).pooler_output[:100])
        # 70 s: VoxtralProcessor._retrieve_input_features: one log-mel of the audio padded to a
        # multiple of 30 s, cut into 3000-frame chunks
        x = fe(read_wav("long_70s_16k.wav"), sampling_rate=16000, padding=True, truncation=False, pad_to_multiple_of=480000,
               return_tensors="pt")
        chunks = x.input_features.reshape(128, -1, 3000).transpose(0, 1).double()
        store(f"voxtral.{LONG}.audio.every8.npy", model.get_audio_features(chunks).pooler_output[::8])


def ultravox(audios, src):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(src))))
    from ultravox.model import ultravox_config, ultravox_model
    wcfg = transformers.WhisperConfig(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FF,
                                      num_mel_bins=80, max_source_positions=1500, decoder_layers=1, vocab_size=128)
    wcfg._name_or_path = "openai/whisper-tiny-random"
    cfg = ultravox_config.UltravoxConfig(audio_config=wcfg.to_dict(), text_config=text_llama().to_dict(),
                                         hidden_size=128, stack_factor=8, projector_act="swiglu", projector_ln_mid=True)
    cfg.audio_config._attn_implementation = "eager"
    tower = ultravox_model.ModifiedWhisperEncoder(cfg.audio_config).eval()
    tower.init_latency_mask(None, torch.float32)
    proj = ultravox_model.UltravoxProjector(cfg).eval()
    randomise(tower, 3)
    randomise(proj, 4)
    state = {"audio_tower." + k: v for k, v in tower.state_dict().items()}
    state.update({"multi_modal_projector." + k: v for k, v in proj.state_dict().items()})
    config = cfg.to_dict()
    config["architectures"] = ["UltravoxModel"]
    save(os.path.join(OUT, "ultravox"), config, state)
    tower, proj = tower.double(), proj.double()

    def tokens_long(features, lens):   # several chunks, the last padded: the padding mask matters
        x = torch.nn.functional.gelu(tower.conv1(features))
        x = torch.nn.functional.gelu(tower.conv2(x)).permute(0, 2, 1)
        hidden = x + tower.embed_positions.weight[: x.size(-2)]
        pos = (lens - 1) // 2 + 1                                  # _get_feat_extract_output_lengths
        keep = torch.arange(hidden.shape[1])[None, :] < pos[:, None]
        mask = (1.0 - keep[:, None, None, :].double()) * torch.finfo(torch.float64).min   # get_extended_attention_mask
        for layer in tower.layers:
            hidden = layer(hidden, mask)
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        out = proj(tower.layer_norm(hidden))
        return torch.cat([out[i, : -(-int(l) // 16)] for i, l in enumerate(lens)])

    def tokens(features, n_frames):   # UltravoxModel._prepare_audio_embeds for one clip
        # ModifiedWhisperEncoder.forward, step by step: its layer call is written for transformers
        # 4 (positional layer_head_mask, output_attentions) and transformers 5's layer takes
        # (hidden_states, attention_mask); one clip of n_frames has an all-ones padding mask
        assert features.shape[-1] == n_frames
        x = torch.nn.functional.gelu(tower.conv1(features))
        x = torch.nn.functional.gelu(tower.conv2(x)).permute(0, 2, 1)
        hidden = x + tower.embed_positions.weight[: x.size(-2)]   # the positions sliced, as it does
        for layer in tower.layers:
            hidden = layer(hidden, None)
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        hidden = tower.layer_norm(hidden)
        n_tok = -(-n_frames // 16)    # the processor's audio_token_len: ceil(frames / (2 * stack_factor))
        return proj(hidden)[0, :n_tok], hidden[0]

    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    with torch.no_grad():
        n_frames = -(-len(audios["speech_16k"]) // 160)
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel80.npy"))).double()[None, :, :n_frames]
        out, tower_out = tokens(mel, n_frames)
        store("ultravox.speech_16k.features.npy", out)
        store("ultravox.speech_16k.features.tower.npy", tower_out)
        for clip, pcm in audios.items():   # UltravoxProcessor: at least 2 hops, unpadded to a multiple of 160
            pcm = np.pad(pcm, (0, max(0, 320 - len(pcm))))
            x = fe(pcm, sampling_rate=16000, padding="longest", pad_to_multiple_of=160, truncation=False,
                   return_attention_mask=True, return_tensors="pt")
            out, _ = tokens(x.input_features.double(), int(x.attention_mask.sum()))
            store(f"ultravox.{clip}.audio.npy", out)
        # 70 s: UltravoxProcessor._chunk_and_pad_audio: the log-mel of all of it cut into chunks of
        # 3000 frames, the last (a continuation) zero-padded to 3000, audio_lens per chunk
        x = fe(read_wav("long_70s_16k.wav"), sampling_rate=16000, padding="longest", pad_to_multiple_of=160,
               truncation=False, return_attention_mask=True, return_tensors="pt")
        feats, n = x.input_features.double(), int(x.attention_mask.sum())
        chunks = [feats[0, :, o:o + 3000] for o in range(0, n, 3000)]
        lens = torch.tensor([c.shape[-1] for c in chunks])
        chunks = torch.stack([torch.nn.functional.pad(c, (0, 3000 - c.shape[-1])) for c in chunks])
        store(f"ultravox.{LONG}.audio.every8.npy", tokens_long(chunks, lens)[::8])


def af3(audios):
    cfg = transformers.AudioFlamingo3Config(
        audio_config=dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FF,
                          num_mel_bins=128, max_source_positions=1500),
        text_config=dict(model_type="qwen2", hidden_size=LLM, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=128))
    cfg.audio_config._attn_implementation = "eager"
    model = transformers.AudioFlamingo3ForConditionalGeneration(cfg).eval()
    randomise(model, 5)
    state = hub_names(model)
    save(os.path.join(OUT, "af3"), dict(cfg.to_dict(), architectures=["AudioFlamingo3ForConditionalGeneration"]), state)
    inner = model.model.double()

    def tokens(features, frames):   # AudioFlamingo3Model.get_audio_features: chunks [n, 128, 3000], frames per chunk
        mask = (torch.arange(features.shape[-1])[None, :] < torch.tensor(frames)[:, None]).long()
        out = inner.get_audio_features(features, mask)
        _, out_len = inner.audio_tower._get_feat_extract_output_lengths(mask.sum(-1))
        return out.pooler_output, torch.cat([out.last_hidden_state[i, : int(n)] for i, n in enumerate(out_len)])

    def chunks(pcm):   # AudioFlamingo3Processor._process_audio: 30 s chunks (at most 20), each its own
        w = 480000     # WhisperFeatureExtractor call (padding to 30 s, its own max, its attention mask)
        n_win = min(max(1, -(-len(pcm) // w)), 600 // 30)
        parts = [pcm[i * w: min((i + 1) * w, len(pcm))] for i in range(n_win)]
        x = fe(parts, sampling_rate=16000, return_attention_mask=True, return_tensors="pt")
        return x.input_features.double(), [int(m) for m in x.attention_mask.sum(-1)]

    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        out, tower_out = tokens(mel, [-(-len(audios["speech_16k"]) // 160)])
        store("af3.speech_16k.features.npy", out)
        store("af3.speech_16k.features.tower.npy", tower_out)
        for clip, pcm in audios.items():
            out, _ = tokens(*chunks(pcm))
            store(f"af3.{clip}.audio.npy", out)
        out, _ = tokens(*chunks(read_wav("long_70s_16k.wav")))   # 3 chunks: 30 s, 30 s, 10 s
        store(f"af3.{LONG}.audio.every8.npy", out[::8])


def mflamingo(audios):
    # Music Flamingo: Audio Flamingo 3's encoder and projector, its rotary time embedding between them
    # (the config's defaults: rope_theta 1200, partial_rotary_factor 0.2 of d_model, audio_frame_step 0.01)
    cfg = transformers.MusicFlamingoConfig(
        audio_config=dict(model_type="audioflamingo3_encoder", hidden_size=D, num_hidden_layers=LAYERS,
                          num_attention_heads=HEADS, intermediate_size=FF, num_mel_bins=128, max_source_positions=1500),
        text_config=dict(model_type="qwen2", hidden_size=LLM, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=128))
    cfg.audio_config._attn_implementation = "eager"
    model = transformers.MusicFlamingoForConditionalGeneration(cfg).eval()
    randomise(model, 13)
    state = hub_names(model)
    save(os.path.join(OUT, "mflamingo"), dict(cfg.to_dict(), architectures=["MusicFlamingoForConditionalGeneration"]), state)
    inner = model.model.double()

    def tokens(features, frames):   # MusicFlamingoModel.get_audio_features: one input's chunks [n, 128, 3000], frames per chunk
        mask = (torch.arange(features.shape[-1])[None, :] < torch.tensor(frames)[:, None]).long()
        _, out_len = inner.audio_tower._get_feat_extract_output_lengths(mask.sum(-1))
        ids = torch.full((1, int(out_len.sum())), cfg.audio_token_id)   # the input's <sound> tokens: its timestamps
        out = inner.get_audio_features(features, mask, ids)
        return out.pooler_output, torch.cat([out.last_hidden_state[i, : int(n)] for i, n in enumerate(out_len)])

    def chunks(pcm):   # MusicFlamingoProcessor._process_audio: 30 s chunks (at most 40), each its own
        w = 480000     # WhisperFeatureExtractor call (padding to 30 s, its own max, its attention mask)
        n_win = min(max(1, -(-len(pcm) // w)), 1200 // 30)
        parts = [pcm[i * w: min((i + 1) * w, len(pcm))] for i in range(n_win)]
        x = fe(parts, sampling_rate=16000, return_attention_mask=True, return_tensors="pt")
        return x.input_features.double(), [int(m) for m in x.attention_mask.sum(-1)]

    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        out, tower_out = tokens(mel, [-(-len(audios["speech_16k"]) // 160)])
        store("mflamingo.speech_16k.features.npy", out)
        store("mflamingo.speech_16k.features.tower.npy", tower_out)
        for clip, pcm in audios.items():
            out, _ = tokens(*chunks(pcm))
            store(f"mflamingo.{clip}.audio.npy", out)
        long = read_wav("long_70s_16k.wav")
        out, _ = tokens(*chunks(long))   # 3 chunks: 30 s, 30 s, 10 s
        store(f"mflamingo.{LONG}.audio.every8.npy", out[::8])
        # 630 s (the long clip 9 times): 21 chunks, past Audio Flamingo 3's 20; the last 250 tokens (620 to
        # 630 s), where the angles are largest
        out, _ = tokens(*chunks(np.tile(long, 9)))
        store("mflamingo.long_630s.audio.tail.npy", out[-250:])


def glmasr(audios):
    cfg = transformers.GlmAsrConfig(
        audio_config=dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FF,
                          num_mel_bins=128, max_position_embeddings=1500),
        text_config=text_llama().to_dict())
    cfg.audio_config._attn_implementation = "eager"
    model = transformers.GlmAsrForConditionalGeneration(cfg).eval()
    randomise(model, 6)
    state = hub_names(model)
    save(os.path.join(OUT, "glmasr"), dict(cfg.to_dict(), architectures=["GlmAsrForConditionalGeneration"]), state)
    inner = model.model.double()

    def tokens(features, frames):   # GlmAsrModel.get_audio_features: chunks [n, 128, 3000], frames per chunk
        mask = (torch.arange(features.shape[-1])[None, :] < torch.tensor(frames)[:, None]).long()
        out = inner.get_audio_features(features, mask)
        pos = (mask.sum(-1) - 1) // 2 + 1       # the positions holding audio (its audio_lengths after conv2)
        return out.pooler_output, torch.cat([out.last_hidden_state[i, : int(n)] for i, n in enumerate(pos)])

    def chunks(pcm):   # GlmAsrProcessor._process_audio: 30 s chunks (at most 655 // 30 = 21), each its own
        w = 480000     # WhisperFeatureExtractor call (padding to 30 s, its own max, its attention mask)
        n_win = min(max(1, -(-len(pcm) // w)), int(655 // 30))
        parts = [pcm[i * w: min((i + 1) * w, len(pcm))] for i in range(n_win)]
        x = fe(parts, sampling_rate=16000, return_attention_mask=True, return_tensors="pt")
        return x.input_features.double(), [int(m) for m in x.attention_mask.sum(-1)]

    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        out, tower_out = tokens(mel, [-(-len(audios["speech_16k"]) // 160)])
        store("glmasr.speech_16k.features.npy", out)
        store("glmasr.speech_16k.features.tower.npy", tower_out)
        for clip, pcm in audios.items():
            out, _ = tokens(*chunks(pcm))
            store(f"glmasr.{clip}.audio.npy", out)
        out, _ = tokens(*chunks(read_wav("long_70s_16k.wav")))   # 3 chunks: 30 s, 30 s, 10 s
        store(f"glmasr.{LONG}.audio.every8.npy", out[::8])


def qwen25o(audios):
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as omni
    audio = dict(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FF, num_mel_bins=128,
                 max_source_positions=1500, n_window=100, output_dim=LLM)
    cfg = transformers.Qwen2_5OmniConfig(thinker_config=dict(audio_config=audio, text_config=dict(
        hidden_size=LLM, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        vocab_size=128)))
    acfg = cfg.thinker_config.audio_config
    acfg._attn_implementation = "eager"
    tower = omni.Qwen2_5OmniAudioEncoder(acfg).eval()
    randomise(tower, 7)
    # the published checkpoints' names (Qwen2_5OmniForConditionalGeneration: thinker.audio_tower.*)
    state = {"thinker.audio_tower." + k: v for k, v in tower.state_dict().items()}
    save(os.path.join(OUT, "qwen25o"), dict(cfg.to_dict(), architectures=["Qwen2_5OmniForConditionalGeneration"]), state)
    tower = tower.double()

    def tokens(features, mask):   # Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features, line by line
        lengths = mask.sum(1)
        x = features.permute(0, 2, 1)[mask.bool()].permute(1, 0)
        aftercnn, _ = tower._get_feat_extract_output_lengths(lengths)
        return tower(x, feature_lens=lengths, aftercnn_lens=aftercnn).last_hidden_state

    def processed(pcm):   # Qwen2_5OmniProcessor._process_audio: padding "max_length" (30 s, truncated), its mask
        x = fe(pcm, sampling_rate=16000, return_attention_mask=True, padding="max_length", return_tensors="pt")
        return x.input_features.double(), x.attention_mask

    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        frames = -(-len(audios["speech_16k"]) // 160)                      # 702: 3 chunks of 200 and one of 102
        mask = (torch.arange(3000)[None, :] < frames).long()
        store("qwen25o.speech_16k.features.npy", tokens(mel, mask))
        proj, tower.proj = tower.proj, torch.nn.Identity()                 # the tower's rows before proj
        store("qwen25o.speech_16k.features.tower.npy", tokens(mel, mask))
        tower.proj = proj
        for clip, pcm in audios.items():                                   # speech_50001: 313 frames, a tail of 113
            store(f"qwen25o.{clip}.audio.npy", tokens(*processed(pcm)))
        out = tokens(*processed(read_wav("long_70s_16k.wav")))            # its first 30 s: 15 chunks, 750 tokens
        store(f"qwen25o.{LONG}.audio.every8.npy", out[::8])


def load_defs(path, names, methods_of=None, **extra):
    """Runs the named top-level classes and functions (and, from class methods_of[0], the methods methods_of[1])
    of a model file that cannot be imported whole (MiniCPM-o's pulls in its vision, TTS and LLM
    code), in a namespace of what they use (and extra); returns that namespace."""
    import ast, logging, math, typing
    from transformers.activations import ACT2FN
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache
    from transformers.modeling_outputs import BaseModelOutputWithPast
    from transformers.models.whisper import modeling_whisper
    with open(path) as f:
        tree = ast.parse(f.read())
    ns = dict(torch=torch, nn=torch.nn, np=np, math=math, Optional=typing.Optional, List=typing.List,
              Union=typing.Union, Tuple=typing.Tuple, ACT2FN=ACT2FN, DynamicCache=DynamicCache,
              EncoderDecoderCache=EncoderDecoderCache, BaseModelOutputWithPast=BaseModelOutputWithPast,
              WhisperConfig=transformers.WhisperConfig, WhisperEncoder=modeling_whisper.WhisperEncoder,
              WHISPER_ATTENTION_CLASSES=getattr(modeling_whisper, "WHISPER_ATTENTION_CLASSES", None),
              logger=logging.getLogger("reference"), F=torch.nn.functional, Iterable=typing.Iterable, **extra)
    body = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in names]
    if methods_of:
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == methods_of[0])
        fns = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in methods_of[1]]
        body.append(ast.ClassDef(name=methods_of[0], bases=[], keywords=[], body=fns, decorator_list=[], type_params=[]))
    exec(compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), path, "exec"), ns)
    return ns


def minicpmo(audios, modeling, processing):
    # OpenBMB's modeling_minicpmo.py (MiniCPM-o 2.6, from the hub: not in transformers) runs on the
    # transformers of its time (WHISPER_ATTENTION_CLASSES, attention returning three values): run
    # this model with transformers 4.48.3 first on PYTHONPATH (tests/data/README.md)
    if not hasattr(transformers.models.whisper.modeling_whisper, "WHISPER_ATTENTION_CLASSES"):
        sys.exit("minicpmo: needs transformers 4.48 (its WHISPER_ATTENTION_CLASSES); this is " + transformers.__version__)
    m = load_defs(modeling, ("MiniCPMWhisperEncoderLayer", "MiniCPMWhisperEncoder", "MultiModalProjector"),
                  ("MiniCPMO", ("subsequent_chunk_mask", "_get_feat_extract_output_lengths", "get_audio_embedding")))
    pr = load_defs(processing, (), ("MiniCPMOProcessor", ("audio_feature_extract",)))
    audio = transformers.WhisperConfig(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS,
                                       encoder_ffn_dim=FF, num_mel_bins=80, max_source_positions=1500)
    audio._attn_implementation = "eager"
    config = dict(model_type="minicpmo", architectures=["MiniCPMO"], hidden_size=LLM, audio_pool_step=2,
                  audio_chunk_length=1.0, init_audio=True, init_vision=True, init_tts=True,
                  audio_config=dict(audio.to_dict(), model_type="whisper"))

    class Model(m["MiniCPMO"], torch.nn.Module):    # MiniCPMO.__init__'s audio part
        def __init__(self):
            torch.nn.Module.__init__(self)
            self.config = type("Config", (), dict(audio_pool_step=2, audio_chunk_length=1.0))()
            self.apm = m["MiniCPMWhisperEncoder"](audio)
            self.audio_avg_pooler = torch.nn.AvgPool1d(self.config.audio_pool_step, stride=self.config.audio_pool_step)
            self.audio_projection_layer = m["MultiModalProjector"](in_dim=int(audio.encoder_ffn_dim // 4), out_dim=LLM)
            self.audio_encoder_layer = -1

    model = Model().eval()
    randomise(model, 8)
    state = {k: v for k, v in model.state_dict().items()}
    save(os.path.join(OUT, "minicpmo"), config, state)
    model = model.double()

    class Processor(pr["MiniCPMOProcessor"]):       # MiniCPMOProcessor's audio part (its tokenizer's markers only)
        feature_extractor = transformers.WhisperFeatureExtractor(feature_size=80)
        tokenizer = type("Tokenizer", (), dict(audio_start="<|audio_start|>", audio_end="<|audio_end|>"))()

    def tokens(pcm):   # MiniCPMO.chat's audio path: the processor's pieces, get_audio_embedding per input
        feats, lens, _ = Processor().audio_feature_extract([pcm], sampling_rate=16000)
        out = model.get_audio_embedding(dict(audio_features=feats.double(), audio_feature_lens=lens),
                                        chunk_length=model.config.audio_chunk_length)
        return torch.cat(out[0])

    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel80.npy"))).double()[None]
        frames = -(-len(audios["speech_16k"]) // 160)                     # 702: the processor cuts the mel there
        data = dict(audio_features=mel[:, :, :frames], audio_feature_lens=[torch.tensor([frames])])
        store("minicpmo.speech_16k.features.npy", model.get_audio_embedding(data, chunk_length=1.0)[0][0])
        # the tower's rows: apm's hidden_states[-1] at the positions holding audio (351)
        proj, pool, lengths = model.audio_projection_layer, model.audio_avg_pooler, model._get_feat_extract_output_lengths
        model.audio_projection_layer = model.audio_avg_pooler = torch.nn.Identity()
        model._get_feat_extract_output_lengths = lambda n: (lengths(n)[0], lengths(n)[0])
        store("minicpmo.speech_16k.features.tower.npy", model.get_audio_embedding(data, chunk_length=1.0)[0][0])
        model.audio_projection_layer, model.audio_avg_pooler = proj, pool
        del model._get_feat_extract_output_lengths
        for clip, pcm in audios.items():
            store(f"minicpmo.{clip}.audio.npy", tokens(pcm))
        out = tokens(read_wav("long_70s_16k.wav"))                         # 3 pieces: 30 s, 30 s, 10 s
        store(f"minicpmo.{LONG}.audio.every8.npy", out[::8])
        # 30 s and 50001 samples: a last piece of 313 frames (odd) and 157 positions (inside a 50-position
        # block), where its code's rules for a later piece show: the frames past it zero (pad_sequence) and
        # its keys masked at 313 (mel frames), not 157; the tokens of that piece (the 78 after the first 750)
        out = tokens(read_wav("long_70s_16k.wav")[: 480000 + 50001])
        store("minicpmo.long_530001.audio.tail.npy", out[750:])


def kimiaudio(audios, repo, modeling):
    # Kimi-Audio's own code: MoonshotAI/Kimi-Audio's kimia_infer/models/tokenizer/whisper_Lv3 (its
    # WhisperModel and log_mel_spectrogram, imported from the checkout REPO) and the language model's
    # VQAdaptor (modeling_moonshot_kimia.py: the class alone, load_defs). Its attention calls flash_attn,
    # a CUDA kernel: a float64 stand-in (softmax(q k^T * scale) v, non-causal, as flash_attn_func computes)
    # takes its place. Run with transformers 4.48 (its file imports names later transformers dropped).
    import types
    # transformers' own flash_attn probes first, before the stand-in exists
    from transformers.models.whisper import modeling_whisper, tokenization_whisper  # noqa: F401
    from transformers.generation import logits_process  # noqa: F401
    vq = load_defs(modeling, ("VQAdaptor",))["VQAdaptor"]
    fa = types.ModuleType("flash_attn")

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, return_attn_probs=False):
        assert not causal and dropout_p == 0.0 and not return_attn_probs   # the encoder's call
        att = torch.einsum("bthd,bshd->bhts", q, k) * softmax_scale
        return torch.einsum("bhts,bshd->bthd", att.softmax(-1), v)

    def unused(*args, **kwargs):
        raise AssertionError("the encoder without input_seq_lens calls flash_attn_func alone")
    fa.flash_attn_func = flash_attn_func
    fa.flash_attn_qkvpacked_func = fa.flash_attn_varlen_func = fa.flash_attn_varlen_qkvpacked_func = unused
    sys.modules["flash_attn"] = fa
    sys.path.insert(0, repo)
    from kimia_infer.models.tokenizer.whisper_Lv3 import whisper as kw
    from kimia_infer.models.tokenizer.whisper_Lv3.modeling_whisper import WhisperModel

    wcfg = transformers.WhisperConfig(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FF,
                                      decoder_layers=1, decoder_attention_heads=1, decoder_ffn_dim=64, num_mel_bins=128,
                                      max_source_positions=1500, vocab_size=64, pad_token_id=0,
                                      bos_token_id=1, eos_token_id=2, decoder_start_token_id=3, max_target_positions=8)
    top = dict(model_type="kimi_audio", architectures=["MoonshotKimiaForCausalLM"], hidden_size=LLM, rms_norm_eps=1e-6,
               kimia_adaptor_input_dim=4 * D, use_whisper_feature=True)
    whisper = WhisperModel(wcfg).eval()
    adaptor = vq(type("Config", (), top)).eval()
    randomise(whisper, 9)
    randomise(adaptor, 10)
    d = os.path.join(OUT, "kimiaudio")
    save(os.path.join(d, "whisper-large-v3"), dict(wcfg.to_dict(), model_type="whisper", architectures=["WhisperModel"]),
         {k: v for k, v in whisper.state_dict().items() if k.startswith("encoder.")})   # its encoder alone (tokenize_waveform's)
    save(d, top, {"model.vq_adaptor." + k: v for k, v in adaptor.state_dict().items()})
    encoder, adaptor = whisper.encoder.double(), adaptor.double()

    def features(pcm):   # WhisperEncoder.tokenize_waveform's loop, on the CPU in float64 (it casts to bf16 on a GPU)
        time_step, out = 0, []
        while time_step * 16000 < pcm.shape[0]:
            seg = pcm[time_step * 16000: (time_step + 30) * 16000]
            time_step += 30
            token_len = (seg.shape[0] - 1) // (160 * 8) + 1
            mel = kw.log_mel_spectrogram(kw.pad_or_trim(seg.flatten()))          # its own log-mel (float32)
            out.append(encoder(mel.unsqueeze(0).double(), return_dict=True).last_hidden_state[:, : token_len * 4, :])
        return torch.cat(out, dim=1)

    def tokens(feat):    # KimiAPromptManager.extract_whisper_feat's reshape, then the model's vq_adaptor
        return adaptor(feat.reshape(feat.shape[0], feat.shape[1] // 4, feat.shape[2] * 4))[0]

    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        token_len = (len(audios["speech_16k"]) - 1) // 1280 + 1                 # 88 tokens, 352 positions
        feat = encoder(mel, return_dict=True).last_hidden_state[:, : token_len * 4]
        store("kimiaudio.speech_16k.features.npy", tokens(feat))
        store("kimiaudio.speech_16k.features.tower.npy", feat[0])
        for clip, pcm in audios.items():
            store(f"kimiaudio.{clip}.audio.npy", tokens(features(pcm)))
        out = tokens(features(read_wav("long_70s_16k.wav")))                      # 30 s, 30 s, 10 s: 375 + 375 + 125
        store(f"kimiaudio.{LONG}.audio.every8.npy", out[::8])


def stepaudio2(audios, modeling, utils):
    # Step-Audio 2's own code: its AudioEncoder and Adaptor (and make_non_pad_mask, mask_to_bias) from
    # MODELING (vLLM's vllm/model_executor/models/step_audio_2.py, the Hugging Face checkpoint's
    # modeling_step_audio_2.py as vLLM runs it), log_mel_spectrogram and padding_mels from UTILS (Step-Audio2's
    # utils.py), run as StepAudio2.apply_chat_template, __call__ and StepAudio2ForCausalLM.forward do (25 s
    # chunks, one batch, feat_lens = (x_len - 1) // 2 + 1). Stand-ins, for the float64 run on the CPU:
    # librosa.filters.mel by transformers' slaney mel bank (librosa's, which is not installed here);
    # mask_to_bias's float32/bf16/f16 assert met by a float32 bias (0 or -1e10) cast to float64; and
    # qkv_attention's qk.float() (its bf16 scores to f32) keeping float64.
    import contextlib, types
    from torch.nn.utils.rnn import pad_sequence
    from transformers.audio_utils import mel_filter_bank
    librosa = types.SimpleNamespace(filters=types.SimpleNamespace(mel=lambda sr, n_fft, n_mels: mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1, num_mel_filters=n_mels, min_frequency=0.0, max_frequency=sr / 2,
        sampling_rate=sr, norm="slaney", mel_scale="slaney").T.astype(np.float32)))
    u = load_defs(utils, ("_mel_filters", "log_mel_spectrogram", "padding_mels", "compute_token_num"),
                  librosa=librosa, pad_sequence=pad_sequence)
    m = load_defs(modeling, ("make_non_pad_mask", "mask_to_bias", "MultiHeadAttention", "ResidualAttentionBlock",
                             "AudioEncoder", "Adaptor"))
    to_bias = m["mask_to_bias"]
    m["mask_to_bias"] = lambda mask, dtype: to_bias(mask, torch.float32).to(dtype)

    @contextlib.contextmanager
    def float64_scores():
        f = torch.Tensor.float
        torch.Tensor.float = lambda t, *a, **k: t if t.dtype == torch.float64 else f(t, *a, **k)
        try:
            yield
        finally:
            torch.Tensor.float = f

    PFF = 48                                          # the adapter's width (2048 in Step-Audio 2 mini)
    enc_cfg = dict(n_mels=128, n_audio_ctx=1500, n_audio_state=D, n_audio_head=HEADS, n_audio_layer=LAYERS, llm_dim=LLM,
                   kernel_size=3, adapter_stride=2)
    encoder = m["AudioEncoder"](128, 1500, D, HEADS, LAYERS).eval()
    adapter = m["Adaptor"](D, LLM, 3, 2, PFF).eval()
    randomise(encoder, 11)
    randomise(adapter, 12)
    # StepAudio2ForCausalLM's names: encoder.*, adapter.* beside its LLM (model.*, lm_head: a token's worth here)
    state = {"encoder." + k: v for k, v in encoder.state_dict().items()}
    state.update({"adapter." + k: v for k, v in adapter.state_dict().items()})
    state.update({"model.embed_tokens.weight": torch.zeros(8, LLM), "lm_head.weight": torch.zeros(8, LLM)})
    top = dict(model_type="step_audio_2", architectures=["StepAudio2ForCausalLM"], audio_encoder_config=enc_cfg,
               text_config=dict(hidden_size=LLM, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=1, vocab_size=8))
    save(os.path.join(OUT, "stepaudio2"), top, state)
    encoder, adapter = encoder.double(), adapter.double()

    def run(mels, lens):   # forward's audio path: encoder, adapter, the first feat_lens of each
        out, x_len = encoder(mels.double(), lens)
        tok, n_tok = adapter(out), (x_len - 1) // 2 + 1
        return (torch.cat([tok[i, : int(n_tok[i])] for i in range(len(lens))]),
                torch.cat([out[i, : int(x_len[i])] for i in range(len(lens))]))

    def tokens(pcm):       # apply_chat_template's chunks (its own float32 log-mel each), padding_mels' batch
        mels = [u["log_mel_spectrogram"](torch.from_numpy(pcm[i: i + 16000 * 25]), n_mels=128, padding=479)
                for i in range(0, pcm.shape[0], 16000 * 25)]
        assert [int(u["compute_token_num"](x.shape[1])) for x in mels][:1] == [int(run(*u["padding_mels"](mels[:1]))[0].shape[0])]
        return run(*u["padding_mels"](mels))[0]

    with torch.no_grad(), float64_scores():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        out, tower_out = run(mel[:, :, :704], torch.tensor([702]))   # a clip's 704 frames, wav_lens 702: 88 tokens
        store("stepaudio2.speech_16k.features.npy", out)
        store("stepaudio2.speech_16k.features.tower.npy", tower_out)
        for clip, pcm in audios.items():
            store(f"stepaudio2.{clip}.audio.npy", tokens(pcm))
        long = read_wav("long_70s_16k.wav")
        store("stepaudio2.long_450001.audio.npy", tokens(long[:450001]))   # a tail of 313 frames beside 25 s (2502 frames)
        store(f"stepaudio2.{LONG}.audio.every8.npy", tokens(long)[::8])    # 25 s, 25 s, 20 s: 313 + 313 + 250


def qwen3a(audios):
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as omni3
    # the AuT's real layout (n_window 50: chunks of 100 frames, 13 positions each; n_window_infer
    # 800: attention windows of 104 positions) at a tiny width (downsample_hidden_size 16 of 480)
    audio = dict(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FF, num_mel_bins=128,
                 max_source_positions=1500, n_window=50, n_window_infer=800, conv_chunksize=500,
                 downsample_hidden_size=16, output_dim=LLM)
    cfg = transformers.Qwen3OmniMoeConfig(thinker_config=dict(audio_config=audio, text_config=dict(
        hidden_size=LLM, intermediate_size=64, moe_intermediate_size=16, num_experts=2, num_experts_per_tok=1,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, vocab_size=128)))
    acfg = transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe.Qwen3OmniMoeAudioEncoderConfig(**audio)
    acfg._attn_implementation = "eager"
    tower = omni3.Qwen3OmniMoeAudioEncoder(acfg).eval()
    randomise(tower, 8)
    # the published checkpoints' names (Qwen3OmniMoeForConditionalGeneration: thinker.audio_tower.*)
    state = {"thinker.audio_tower." + k: v for k, v in tower.state_dict().items()}
    save(os.path.join(OUT, "qwen3a"), dict(cfg.to_dict(), architectures=["Qwen3OmniMoeForConditionalGeneration"]), state)
    # the processor's config, as the published checkpoints have one: the audio feature extractor's and the
    # image processor's (llama.cpp's converter reads image_mean/std for the vision tower's keys of its mmproj)
    pre = dict(transformers.WhisperFeatureExtractor(feature_size=128).to_dict(), image_mean=[0.5, 0.5, 0.5],
               image_std=[0.5, 0.5, 0.5], patch_size=16, merge_size=2, temporal_patch_size=2)
    pre.pop("mel_filters", None)
    with open(os.path.join(OUT, "qwen3a", "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=2, sort_keys=True)
    tower = tower.double()

    def tokens(features, n_frames):   # Qwen3OmniMoeThinkerModel.get_audio_features for one clip: its frames, feature_lens
        x = features[0, :, :n_frames]
        return tower(x, feature_lens=torch.tensor([n_frames])).last_hidden_state

    def processed(pcm):   # Qwen3OmniMoeProcessor's audio_kwargs: padding True (longest: none for one clip), no truncation
        x = fe(pcm, sampling_rate=16000, return_attention_mask=True, padding=True, truncation=False, return_tensors="pt")
        return x.input_features.double(), int(x.attention_mask.sum())

    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        store("qwen3a.speech_16k.features.npy", tokens(mel, 702))          # 702 frames: 7 chunks and one of 2
        tail, tower.proj1, tower.act, tower.proj2 = (tower.proj1, tower.act, tower.proj2), *(torch.nn.Identity(),) * 3
        store("qwen3a.speech_16k.features.tower.npy", tokens(mel, 702))    # the tower's rows: ln_post's
        tower.proj1, tower.act, tower.proj2 = tail
        long = read_wav("long_70s_16k.wav")
        clips = dict(audios, speech_8000=audios["speech_16k"][:8000],      # 50 frames: less than a chunk
                     long_448000=long[:448000])                            # 2800 frames: windows of 2400 and 400
        for clip, pcm in clips.items():
            store(f"qwen3a.{clip}.audio.npy", tokens(*processed(pcm)))
        store(f"qwen3a.{LONG}.audio.every8.npy", tokens(*processed(long))[::8])   # 7000 frames, 910 tokens


def qwen3asr(audios):
    # Qwen3-ASR (transformers qwen3_asr): Qwen3-Omni's AuT encoder at its windows (n_window 50, n_window_infer
    # 800), the projector outside it (multi_modal_projector.linear_1, GELU, linear_2), and its own feature
    # extractor (a clip shorter than min_length 8000 samples zero-padded to it, every frame of it valid)
    audio = dict(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FF, num_mel_bins=128,
                 n_window=50, n_window_infer=800, downsample_hidden_size=16, output_dim=LLM)
    cfg = transformers.Qwen3ASRConfig(audio_config=audio, text_config=dict(
        hidden_size=LLM, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, vocab_size=128))
    cfg.audio_config._attn_implementation = "eager"
    model = transformers.Qwen3ASRForConditionalGeneration(cfg).eval()
    randomise(model, 14)
    # as transformers 5 saves it (model.audio_tower.*, model.multi_modal_projector.*), the language model left out
    state = {k: v for k, v in model.state_dict().items() if k.split(".")[1] in ("audio_tower", "multi_modal_projector")}
    save(os.path.join(OUT, "qwen3asr"), dict(cfg.to_dict(), architectures=["Qwen3ASRForConditionalGeneration"]), state)
    inner = model.model.double()
    fe = transformers.Qwen3ASRFeatureExtractor()

    def tokens(features, mask, projector=True):   # Qwen3ASRModel.get_audio_features: pooler_output, or the tower's rows
        out = inner.get_audio_features(features, mask)
        return out.pooler_output if projector else out.last_hidden_state

    def processed(pcm):   # Qwen3ASRProcessor's audio_kwargs: padding True, no truncation, n_window 50
        x = fe(pcm, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True, n_window=50)
        return x.input_features.double(), x.attention_mask

    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        mel, mask = mel[:, :, :800].clone(), (torch.arange(800) < 702).long()[None]   # 702 frames, padded to 800
        mel[:, :, 702:] = 0
        store("qwen3asr.speech_16k.features.npy", tokens(mel, mask))
        store("qwen3asr.speech_16k.features.tower.npy", tokens(mel, mask, False))
        short = mel[:, :, :100].clone()            # 50 frames, less than a chunk: one chunk padded to 100
        short[:, :, 50:] = 0
        store("qwen3asr.speech_16k.features_50.npy", tokens(short, (torch.arange(100) < 50).long()[None]))
        long = read_wav("long_70s_16k.wav")
        clips = dict(audios, speech_8000=audios["speech_16k"][:8000],      # min_length: 50 frames, less than a chunk
                     speech_4000=audios["speech_16k"][:4000],              # padded to 8000 samples: 50 frames too
                     long_448000=long[:448000])                            # 2800 frames: windows of 2400 and 400
        for clip, pcm in clips.items():
            store(f"qwen3asr.{clip}.audio.npy", tokens(*processed(pcm)))
        store(f"qwen3asr.{LONG}.audio.every8.npy", tokens(*processed(long))[::8])   # 7000 frames, 910 tokens


def realtime(audios, mc):
    # Voxtral Realtime (transformers voxtral_realtime): its causal encoder (conv stem padded on the left,
    # RMSNorm, SwiGLU, RoPE, attention over a sliding window of the last 750 positions, q/k/v 2 x 64 wide
    # where the model is 64), 4 positions stacked into its projector. The input as its processor makes it
    # offline: mistral_common's AudioEncoder.pad (from MC, a directory where mistral-common is installed)
    # puts streaming_n_left_pad_tokens x 1280 zero samples before the audio and, after it, zeros to a whole
    # token and n_right_pad_tokens more (delay 480 ms: 6 + 1 + 10); the feature extractor's log-mel is
    # centred, clamped at global_log_mel_max 1.5 (not the input's own max).
    sys.path.insert(0, mc)
    from mistral_common.tokens.tokenizers.audio import AudioConfig, AudioEncoder, AudioSpectrogramConfig, TranscriptionFormat
    audio = dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=2, head_dim=64, intermediate_size=FF,
                 num_mel_bins=128, sliding_window=750, rms_norm_eps=1e-5, rope_parameters=dict(rope_type="default", rope_theta=1e6))
    cfg = transformers.VoxtralRealtimeConfig(audio_config=audio, text_config=dict(
        hidden_size=LLM, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, vocab_size=128))
    cfg.audio_config._attn_implementation = "eager"
    model = transformers.VoxtralRealtimeForConditionalGeneration(cfg).eval()
    randomise(model, 15)
    state = hub_names(model)
    save(os.path.join(OUT, "realtime"), dict(cfg.to_dict(), architectures=["VoxtralRealtimeForConditionalGeneration"]), state)
    inner = model.model.double()
    fe = transformers.VoxtralRealtimeFeatureExtractor(feature_size=128)
    pad = AudioEncoder(AudioConfig(sampling_rate=16000, frame_rate=12.5, encoding_config=AudioSpectrogramConfig(
        num_mel_bins=128, hop_length=160, window_size=400), transcription_format=TranscriptionFormat.STREAMING,
        transcription_delay_ms=480.0, streaming_n_left_pad_tokens=32, streaming_look_ahead_ms=2.5,
        streaming_look_back_ms=52.5), None)

    def tokens(pcm, projector=True):   # VoxtralRealtimeModel.get_audio_features of the processor's input
        x = fe(pad.pad(pcm, 16000), sampling_rate=16000, return_tensors="pt")   # VoxtralRealtimeProcessor: center True
        out = inner.get_audio_features(x.input_features.double())
        return out.pooler_output[0] if projector else out.last_hidden_state[0]

    with torch.no_grad():
        for clip, pcm in dict(audios, speech_1000=audios["speech_16k"][:1000]).items():
            store(f"realtime.{clip}.audio.npy", tokens(pcm))
        store("realtime.speech_16k.audio.tower.npy", tokens(audios["speech_16k"], False)[:200])   # of 548
        long = read_wav("long_70s_16k.wav")
        store("realtime.long_448000.audio.npy", tokens(long[:448000]))          # 28 s: 3096 positions, past the window
        store(f"realtime.{LONG}.audio.every8.npy", tokens(long)[::8])           # 7256 positions: 914 tokens


def meralion(audios, src):
    # MERaLiON-2's own code, from the checkout SRC of YingxuH/vllm_plugin (A*STAR's vLLM plugin of it):
    # transformers_utils' MERaLiON2Config, MERaLiON2SpeechAudioAdaper and MERaLiON2Processor (its
    # chunking and feature-extractor call), and the speech path of its model (speech_encoder: transformers'
    # WhisperEncoder, ln_speech, speech_audio_adapter, as _process_audio_input and the hub's
    # modeling_meralion2.py run them).
    import types
    tu = os.path.join(src, "src", "vllm_plugin_meralion2", "transformers_utils")

    def module(name):
        spec = importlib.util.spec_from_file_location("meralion2_" + name, os.path.join(tu, name + ".py"))
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m
    conf, mods, proc_mod = module("configuration_meralion2"), module("modules"), module("processing_meralion2")
    speech = dict(d_model=D, encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FF, num_mel_bins=128,
                  max_source_positions=1500, decoder_layers=1, decoder_attention_heads=1, decoder_ffn_dim=64, vocab_size=64)
    text = dict(hidden_size=LLM, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                head_dim=16, vocab_size=128)
    cfg = conf.MERaLiON2Config(speech_config=speech, text_config=text, speech_mlp_scale_factor=15)
    cfg.speech_config._attn_implementation = "eager"

    class Speech(torch.nn.Module):   # MERaLiON2ForConditionalGeneration's speech modules, under their names
        def __init__(self):
            super().__init__()
            self.speech_encoder = transformers.models.whisper.modeling_whisper.WhisperEncoder(cfg.speech_config)
            self.ln_speech = torch.nn.LayerNorm(cfg.speech_config.d_model)
            self.speech_audio_adapter = mods.MERaLiON2SpeechAudioAdaper(
                audio_hidden_size=cfg.speech_config.d_model, text_hidden_size=cfg.text_config.hidden_size,
                speech_mlp_scale_factor=cfg.speech_mlp_scale_factor, speech_mlp_use_projection=True)

        def forward(self, features, mask=None):   # _process_audio_input: [chunks, 100, n_llm] -> [tokens, n_llm]
            h = self.speech_encoder(features, attention_mask=mask).last_hidden_state
            return self.speech_audio_adapter(self.ln_speech(h)).reshape(-1, cfg.text_config.hidden_size), h

    model = Speech().eval()
    randomise(model, 12)
    config = dict(cfg.to_dict(), architectures=["MERaLiON2ForConditionalGeneration"])
    save(os.path.join(OUT, "meralion"), config, model.state_dict())   # the LLM's text_decoder.* left out
    model = model.double()

    # the processor as its __call__ runs, a stand-in tokenizer for the text it leaves aside
    processor = proc_mod.MERaLiON2Processor.__new__(proc_mod.MERaLiON2Processor)
    processor.feature_extractor = transformers.WhisperFeatureExtractor(feature_size=128)
    processor.tokenizer = lambda **kw: types.SimpleNamespace(input_ids=torch.zeros(1, 1), attention_mask=torch.ones(1, 1))
    processor.fixed_speech_embeds_length, processor.speech_token_index = 100, 255999
    processor.time_duration_limit, processor.whisper_chunk_size, processor.do_normalize = 300, 30, True
    processor.number_chunk_limit = processor.time_duration_limit // processor.whisper_chunk_size
    processor.speech_token, processor.feature_chunk_size = "<SpeechHere>", 30 * 16000

    def from_audio(pcm):
        x = processor(text="<SpeechHere>", audios=pcm)
        return model(x["input_features"].double(), x["feature_attention_mask"])[0]

    with torch.no_grad():
        mel = torch.from_numpy(np.load(os.path.join(ROOT, "features", "speech_16k.mel128.npy"))).double()[None]
        out, tower = model(mel)
        store("meralion.speech_16k.features.npy", out)                        # 100 tokens
        store("meralion.speech_16k.features.tower.npy", tower[0, :300])      # the first 300 of 1500 positions
        # speech_16k as the tests cut it (its first 112256 of 112259 samples): a window's normalisation
        # takes every sample, so the other towers' 3 samples more would move its tokens by 2e-5
        for clip, pcm in dict(audios, speech_16k=audios["speech_16k"][:112256]).items():
            store(f"meralion.{clip}.audio.npy", from_audio(pcm))
        long = read_wav("long_70s_16k.wav")
        store(f"meralion.{LONG}.audio.every8.npy", from_audio(long)[::8])    # 3 chunks (30 s, 30 s, 10 s): 300 tokens
        # past its 10 chunks: the first 300 s (the long clip 5 times, 350 s), the last chunk's 100 tokens
        store("meralion.long_350s.audio.tail.npy", from_audio(np.tile(long, 5))[-100:])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ultravox", help="fixie-ai/ultravox's ultravox/model directory (for ultravox)")
    ap.add_argument("--minicpmo", nargs=2, metavar=("MODELING", "PROCESSING"),
                    help="MiniCPM-o 2.6's modeling_minicpmo.py and processing_minicpmo.py (for minicpmo)")
    ap.add_argument("--kimi", nargs=2, metavar=("REPO", "MODELING"),
                    help="a MoonshotAI/Kimi-Audio checkout and its modeling_moonshot_kimia.py (for kimiaudio)")
    ap.add_argument("--stepaudio2", nargs=2, metavar=("MODELING", "UTILS"),
                    help="vLLM's step_audio_2.py (Step-Audio 2's AudioEncoder, Adaptor) and Step-Audio2's utils.py (for stepaudio2)")
    ap.add_argument("--meralion", help="a YingxuH/vllm_plugin checkout (MERaLiON-2's code; for meralion)")
    ap.add_argument("--mistral-common", help="a directory where mistral-common is installed (pip install --target; for realtime)")
    ap.add_argument("--models", default="qwen2a,voxtral,ultravox,af3,glmasr,qwen25o,qwen3a,mflamingo,qwen3asr",
                    help="comma-separated, of the default and minicpmo, kimiaudio (their own run: transformers 4.48), "
                         "stepaudio2, meralion, realtime")
    args = ap.parse_args()
    models = args.models.split(",")
    if "ultravox" in models and not args.ultravox:
        ap.error("ultravox needs --ultravox")
    if "minicpmo" in models and not args.minicpmo:
        ap.error("minicpmo needs --minicpmo")
    if "kimiaudio" in models and not args.kimi:
        ap.error("kimiaudio needs --kimi")
    if "stepaudio2" in models and not args.stepaudio2:
        ap.error("stepaudio2 needs --stepaudio2")
    if "meralion" in models and not args.meralion:
        ap.error("meralion needs --meralion")
    if "realtime" in models and not args.mistral_common:
        ap.error("realtime needs --mistral-common")
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    audios = load_audio()
    for name in models:   # each seeds its own parameters: any subset gives the same files
        if name == "ultravox":
            ultravox(audios, args.ultravox)
        elif name == "minicpmo":
            minicpmo(audios, *args.minicpmo)
        elif name == "kimiaudio":
            kimiaudio(audios, *args.kimi)
        elif name == "stepaudio2":
            stepaudio2(audios, *args.stepaudio2)
        elif name == "meralion":
            meralion(audios, args.meralion)
        elif name == "realtime":
            realtime(audios, args.mistral_common)
        else:
            {"qwen2a": qwen2_audio, "voxtral": voxtral, "af3": af3, "glmasr": glmasr, "qwen25o": qwen25o,
             "qwen3a": qwen3a, "mflamingo": mflamingo, "qwen3asr": qwen3asr}[name](audios)
    print("wrote", OUT)
