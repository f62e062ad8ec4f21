"""The later towers of tests/gpu/tower-bench.py (Audio Flamingo 3, GLM-ASR, Qwen2.5-Omni,
Qwen3-Omni, MiniCPM-o 2.6, Kimi-Audio, Step-Audio 2, MERaLiON-2, Voxtral Realtime): each one's modules at a given
shape (random weights), its checkpoint as the published one names and lays it out, and the peer: the
model's own pipeline over decoded 16 kHz inputs on the GPU, batched, as its processor and code run it.

The peers follow the towers' parity script (tests/gpu/towers.py), which checks each against the
float64 reference made by the model's own code (tests/data/make-tower-references.py), here over
many inputs and long ones:
  af3, glmasr   transformers' AudioFlamingo3Model / GlmAsrModel.get_audio_features (the method itself,
                on the device copies of the tower and projector) over their processors' 30 s windows
                (_process_audio: at most 20 / 21 windows, each its own WhisperFeatureExtractor call
                padded to 30 s, its attention mask)
  qwen25o, qwen3a  Qwen2_5OmniThinkerForConditionalGeneration / Qwen3OmniMoeThinkerModel.get_audio_features
                (the method itself) over their processors' features: Qwen2.5-Omni pads to and cuts at
                30 s; Qwen3-Omni takes all of an input (padding "longest", no truncation)
  minicpmo, kimiaudio, meralion  transformers' WhisperEncoder layers with each model's steps written out
                (their code is not in transformers), as towers.py does: MiniCPM-o's 30 s pieces, block-causal
                mask, projector and pooling; Kimi-Audio's 30 s segments, 4 positions stacked, VQ adaptor;
                MERaLiON-2's 30 s chunks (at most 10) normalised per chunk, ln_speech and the adapter
  stepaudio2    its AudioEncoder and Adaptor written out from the checkpoint's tensors (towers.py's steps),
                over its 25 s chunks, each its own log-mel of the chunk and 479 zero samples, padding_mels'
                batch (2502 frames; an input of one chunk at its own length) and key mask
  realtime      transformers' VoxtralRealtimeModel.get_audio_features (the method itself) over its processor's
                padded input, 3000 frames a call with its own padding and sliding-window caches

Real shapes (REAL below): the published models' towers (Whisper-large-v3-sized encoders, MiniCPM-o's
Whisper-medium) and their LLM widths; GLM-ASR's and Qwen3-Omni's LLM width 2048, Audio Flamingo 3's
transformers' default 4096, the others 3584 (Qwen2.5-7B, Gemma 2 9B).
"""
import copy
import json
import os
import types

import numpy as np

SR, W30 = 16000, 480000
NAMES = ("af3", "glmasr", "qwen25o", "qwen3a", "minicpmo", "kimiaudio", "stepaudio2", "meralion", "realtime")
LARGE = dict(d=1280, layers=32, heads=20, ff=5120, mels=128)
REAL = {"af3": dict(LARGE, llm=4096), "glmasr": dict(LARGE, llm=2048), "qwen25o": dict(LARGE, llm=3584),
        "qwen3a": dict(LARGE, llm=2048, conv=480), "minicpmo": dict(d=1024, layers=24, heads=16, ff=4096, mels=80, llm=3584),
        "kimiaudio": dict(LARGE, llm=3584), "stepaudio2": dict(LARGE, llm=3584, adapter=2048),
        "meralion": dict(LARGE, llm=3584),
        # Voxtral-Mini-4B-Realtime-2602's: 32 heads of 64 (q/k/v 2048 wide), its text width 3072
        "realtime": dict(LARGE, heads=32, head_dim=64, llm=3072)}
TINY = {k: dict(v, d=64, layers=3, heads=1, ff=256, llm=32, conv=16, adapter=48) for k, v in REAL.items()}
TINY["realtime"].update(heads=2)
REALTIME_TOKEN, REALTIME_LEFT, REALTIME_RIGHT = 1280, 32, 17   # its processor's zeros: tokens before, after


def _text(kind, width):
    # the smallest text model of the LLM width the projector needs (never run)
    return dict(model_type=kind, hidden_size=width, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
                num_key_value_heads=1, head_dim=8, vocab_size=16)


def _whisper_cfg(s):
    import transformers
    c = transformers.WhisperConfig(d_model=s["d"], encoder_layers=s["layers"], encoder_attention_heads=s["heads"],
                                   encoder_ffn_dim=s["ff"], num_mel_bins=s["mels"], max_source_positions=1500,
                                   decoder_layers=1, decoder_attention_heads=1, decoder_ffn_dim=64, vocab_size=64)
    c._attn_implementation = "sdpa"
    return c


def _linears(**shapes):
    """A module of named linears (in, out[, bias]) and LayerNorms (an int), named as a checkpoint names them."""
    import torch
    m = torch.nn.Module()
    for k, v in shapes.items():
        m.add_module(k, torch.nn.LayerNorm(v) if isinstance(v, int) else torch.nn.Linear(v[0], v[1], bias=v[2] if len(v) > 2 else True))
    return m


class Model:
    """One tower: .modules (prefix -> module, f32 on the CPU), .files (checkpoint file -> (config, prefixes,
    key renames)), .mels, and .run(dev, fe, pcms, batch, device, dtype) -> per input, f32 host token rows."""

    def __init__(self, name, s):
        import torch
        import transformers
        self.name, self.s, self.mels = name, s, s["mels"]
        self.rename = lambda k: k
        torch.manual_seed(10 + NAMES.index(name))
        if name in ("af3", "glmasr"):
            audio = dict(hidden_size=s["d"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                         intermediate_size=s["ff"], num_mel_bins=128)
            if name == "af3":
                cfg = transformers.AudioFlamingo3Config(audio_config=dict(audio, max_source_positions=1500),
                                                        text_config=_text("qwen2", s["llm"]))
                cls, arch = transformers.AudioFlamingo3ForConditionalGeneration, "AudioFlamingo3ForConditionalGeneration"
            else:
                cfg = transformers.GlmAsrConfig(audio_config=dict(audio, max_position_embeddings=1500),
                                                text_config=_text("llama", s["llm"]))
                cls, arch = transformers.GlmAsrForConditionalGeneration, "GlmAsrForConditionalGeneration"
            cfg.audio_config._attn_implementation = "sdpa"
            model = cls(cfg).eval()
            self.modules = {"audio_tower": model.model.audio_tower, "multi_modal_projector": model.model.multi_modal_projector}
            self.method = type(model.model).get_audio_features
            self.cfg, config = cfg, dict(cfg.to_dict(), architectures=[arch])
        elif name in ("qwen25o", "qwen3a"):
            audio = dict(d_model=s["d"], encoder_layers=s["layers"], encoder_attention_heads=s["heads"], encoder_ffn_dim=s["ff"],
                         num_mel_bins=128, max_source_positions=1500, output_dim=s["llm"])
            text = dict(hidden_size=s["llm"], intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                        num_key_value_heads=1, vocab_size=128)
            if name == "qwen25o":
                from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as omni
                cfg = transformers.Qwen2_5OmniConfig(thinker_config=dict(audio_config=dict(audio, n_window=100), text_config=text))
                acfg, enc = cfg.thinker_config.audio_config, omni.Qwen2_5OmniAudioEncoder
                self.method, arch = omni.Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features, "Qwen2_5OmniForConditionalGeneration"
            else:
                from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as omni3
                audio.update(n_window=50, n_window_infer=800, conv_chunksize=500, downsample_hidden_size=s["conv"])
                cfg = transformers.Qwen3OmniMoeConfig(thinker_config=dict(audio_config=audio, text_config=dict(
                    text, moe_intermediate_size=16, num_experts=2, num_experts_per_tok=1)))
                acfg, enc = cfg.thinker_config.audio_config, omni3.Qwen3OmniMoeAudioEncoder
                self.method, arch = omni3.Qwen3OmniMoeThinkerForConditionalGeneration.get_audio_features, "Qwen3OmniMoeForConditionalGeneration"
            acfg._attn_implementation = "sdpa"
            self.modules = {"thinker.audio_tower": enc(acfg).eval()}
            self.cfg, config = cfg, dict(cfg.to_dict(), architectures=[arch])
        elif name == "minicpmo":
            wcfg = _whisper_cfg(s)
            enc = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
            self.modules = {"apm": enc, "audio_projection_layer": _linears(linear1=(s["d"], s["llm"]), linear2=(s["llm"], s["llm"]))}
            config = dict(model_type="minicpmo", architectures=["MiniCPMO"], hidden_size=s["llm"], audio_pool_step=2,
                          audio_chunk_length=1.0, init_audio=True, init_vision=True, init_tts=True,
                          audio_config=dict(wcfg.to_dict(), model_type="whisper"))
        elif name == "kimiaudio":
            wcfg = _whisper_cfg(s)
            enc = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
            self.modules = {"encoder": enc, "model.vq_adaptor.layers": _linears(**{"0": (4 * s["d"], s["llm"]), "3": (s["llm"], s["llm"]),
                                                                                "4": s["llm"]})}
            top = dict(model_type="kimi_audio", architectures=["MoonshotKimiaForCausalLM"], hidden_size=s["llm"],
                       rms_norm_eps=1e-6, kimia_adaptor_input_dim=4 * s["d"], use_whisper_feature=True)
            self.files = {"whisper-large-v3/model.safetensors": (dict(wcfg.to_dict(), model_type="whisper", architectures=["WhisperModel"]),
                                                                 ["encoder"]),
                          "model.safetensors": (top, ["model.vq_adaptor.layers"])}
        elif name == "stepaudio2":
            # OpenAI Whisper's layout under its names, from a WhisperEncoder's tensors (the key has no bias in both)
            wcfg = _whisper_cfg(s)
            enc = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
            d = s["d"]
            self.modules = {"encoder": enc,
                            "adapter": _linears(linear1=(d, s["adapter"]), linear2=(s["adapter"], s["llm"])),
                            "model": _linears(), "lm_head": _linears()}
            self.modules["adapter"].add_module("conv", torch.nn.Conv1d(d, d, 3, stride=2, padding=1))
            self.modules["model"].add_module("embed_tokens", torch.nn.Embedding(8, s["llm"]))
            self.modules["lm_head"] = torch.nn.Linear(s["llm"], 8, bias=False)
            names = [("embed_positions", "positional_embedding"), ("layers.", "blocks."), ("self_attn_layer_norm", "attn_ln"),
                     ("self_attn.q_proj", "attn.query"), ("self_attn.k_proj", "attn.key"), ("self_attn.v_proj", "attn.value"),
                     ("self_attn.out_proj", "attn.out"), ("final_layer_norm", "mlp_ln"), ("fc1", "mlp.0"), ("fc2", "mlp.2"),
                     ("encoder.layer_norm", "encoder.after_norm")]

            def rename(k):
                if k.startswith("encoder."):
                    for a, b in names:
                        k = k.replace(a, b)
                return k
            self.rename = rename
            config = dict(model_type="step_audio_2", architectures=["StepAudio2ForCausalLM"],
                          audio_encoder_config=dict(n_mels=128, n_audio_ctx=1500, n_audio_state=d, n_audio_head=s["heads"],
                                                    n_audio_layer=s["layers"], llm_dim=s["llm"], kernel_size=3, adapter_stride=2),
                          text_config=dict(hidden_size=s["llm"], intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                           num_key_value_heads=1, vocab_size=8))
        elif name == "meralion":
            wcfg = _whisper_cfg(s)
            enc = transformers.models.whisper.modeling_whisper.WhisperEncoder(wcfg).eval()
            d, h = s["d"], 5 * s["d"]
            self.modules = {"speech_encoder": enc, "ln_speech": torch.nn.LayerNorm(d),
                            "speech_audio_adapter": _linears(gate_proj=(h, h), pool_proj=(h, h), out_proj=(h, s["llm"]))}
            self.modules["speech_audio_adapter"].add_module("mlp_adapter", torch.nn.Sequential(torch.nn.Linear(15 * d, h)))
            tiny = json.load(open(os.path.join(os.path.dirname(__file__), "..", "data", "towers", "meralion", "config.json")))
            speech = dict(tiny["speech_config"], d_model=d, encoder_layers=s["layers"], encoder_attention_heads=s["heads"],
                          encoder_ffn_dim=s["ff"], num_mel_bins=128)
            config = dict(tiny, speech_config=speech, text_config=dict(tiny["text_config"], hidden_size=s["llm"]),
                          hidden_size=s["llm"])
        elif name == "realtime":
            audio = dict(hidden_size=s["d"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"], head_dim=s["head_dim"],
                         intermediate_size=s["ff"], num_mel_bins=128, sliding_window=750,
                         rope_parameters=dict(rope_type="default", rope_theta=1e6))
            cfg = transformers.VoxtralRealtimeConfig(audio_config=audio, text_config=_text("voxtral_realtime_text", s["llm"]))
            cfg.audio_config._attn_implementation = "sdpa"
            model = transformers.VoxtralRealtimeForConditionalGeneration(cfg).eval()
            self.modules = {"audio_tower": model.model.audio_tower, "multi_modal_projector": model.model.multi_modal_projector}
            self.method = type(model.model).get_audio_features
            self.cfg, config = cfg, dict(cfg.to_dict(), architectures=["VoxtralRealtimeForConditionalGeneration"])
        else:
            raise ValueError(name)
        if not hasattr(self, "files"):
            self.files = {"model.safetensors": (config, list(self.modules))}

    def state(self, prefixes):
        """The checkpoint's tensors under the published names (f16 is the caller's)."""
        out = {}
        for p in prefixes:
            out.update({self.rename(p + "." + k): v for k, v in self.modules[p].state_dict().items()})
        return out

    def to(self, device, dtype):
        """Device copies of the modules, and their tensors under the checkpoint's names."""
        dev = {k: copy.deepcopy(m).to(device, dtype) for k, m in self.modules.items()}
        w = {}
        for p, m in dev.items():
            w.update({self.rename(p + "." + k): v for k, v in m.state_dict().items()})
        return types.SimpleNamespace(m=dev, w=w, device=device, dtype=dtype)

    # ---- the tokens' count and the windows our library runs, per input of n samples -------------

    def windows(self, n):
        """(encoder windows, mel frames each) that our library runs for one input of n samples."""
        f = max(2, -(-n // 160))
        if self.name in ("af3", "glmasr", "kimiaudio", "meralion"):
            cap = {"af3": 20, "glmasr": 21, "meralion": 10}.get(self.name, 1 << 30)
            return min(max(1, -(-n // W30)), cap), 3000
        if self.name == "qwen25o":
            return 1, 3000
        if self.name == "qwen3a":
            f = n // 160
            return -(-f // 2400), min(f, 2400)
        if self.name == "minicpmo":
            return (1, f) if n <= W30 else (-(-n // W30), 3000)
        if self.name == "stepaudio2":
            return (1, (n + 479) // 160) if n <= 400000 else (-(-n // 400000), 2502)
        if self.name == "realtime":   # its causal steps of 3000 frames over the padded input
            f = 8 * (REALTIME_LEFT + -(-n // REALTIME_TOKEN) + REALTIME_RIGHT)
            return -(-f // 3000), 3000
        raise ValueError(self.name)

    # ---- the peer -----------------------------------------------------------------------------------

    def run(self, dev, fe, pcms, batch):
        import torch
        with torch.inference_mode():
            return getattr(self, "_run_" + self.name)(dev, fe, pcms, batch)

    def _windows30(self, pcms, cap):
        # AudioFlamingo3Processor / GlmAsrProcessor._process_audio: 30 s windows, at most cap, the last one cut
        chunks, owner = [], []
        for i, p in enumerate(pcms):
            n_win = min(max(1, -(-len(p) // W30)), cap)
            end = min(len(p), n_win * W30)
            for j in range(n_win):
                chunks.append(p[j * W30: min((j + 1) * W30, end)])
                owner.append(i)
        return chunks, owner

    @staticmethod
    def _split(rows, counts, owner, n_inputs):
        per = [[] for _ in range(n_inputs)]
        o = 0
        for c, i in zip(counts, owner):
            per[i].append(rows[o:o + c])
            o += c
        return [np.concatenate(p) if p else np.zeros((0, rows.shape[-1]), np.float32) for p in per]

    def _run_af3(self, dev, fe, pcms, batch):
        return self._run_windowed(dev, fe, pcms, batch, 20)

    def _run_glmasr(self, dev, fe, pcms, batch):
        return self._run_windowed(dev, fe, pcms, batch, 21)

    def _run_windowed(self, dev, fe, pcms, batch, cap):
        import torch
        chunks, owner = self._windows30(pcms, cap)
        holder = types.SimpleNamespace(audio_tower=dev.m["audio_tower"], multi_modal_projector=dev.m["multi_modal_projector"],
                                       config=self.cfg)
        rows, counts = [], []
        for b in range(0, len(chunks), batch):
            x = fe(chunks[b:b + batch], sampling_rate=SR, padding="max_length", return_attention_mask=True,
                   return_tensors="pt", device=dev.device)
            feats, mask = x.input_features.to(dev.device, dev.dtype), x.attention_mask.to(dev.device)
            rows.append(self.method(holder, feats, mask).pooler_output.float().cpu().numpy())
            frames = mask.sum(-1)
            if self.name == "af3":
                counts += holder.audio_tower._get_feat_extract_output_lengths(frames)[1].tolist()
            else:   # GlmAsrModel.get_audio_features' post_lengths
                pos = (frames - 1) // 2 + 1
                counts += ((pos - 4) // 4 + 1).tolist()
        return self._split(np.concatenate(rows), counts, owner, len(pcms))

    def _run_realtime(self, dev, fe, pcms, batch):
        """VoxtralRealtimeProcessor offline (mistral_common's AudioEncoder.pad: 32 tokens of zeros before, zeros to a
        whole token and 17 more after; its feature extractor, centred, on the CPU), then get_audio_features over
        3000 frames a call with the model's own caches (padding_cache, the encoder's sliding-window cache), as its
        streaming generation runs it: an hour in one call would need its whole attention mask. Inputs of one padded
        length go batch a call."""
        import torch
        import transformers
        vfe = transformers.VoxtralRealtimeFeatureExtractor(feature_size=128)
        holder = types.SimpleNamespace(audio_tower=dev.m["audio_tower"], multi_modal_projector=dev.m["multi_modal_projector"],
                                       config=self.cfg)
        padded = [np.concatenate([np.zeros(REALTIME_LEFT * REALTIME_TOKEN, np.float32), p,
                                  np.zeros(-len(p) % REALTIME_TOKEN + REALTIME_RIGHT * REALTIME_TOKEN, np.float32)]) for p in pcms]
        out = [None] * len(pcms)
        by_len = {}
        for i, x in enumerate(padded):
            by_len.setdefault(len(x), []).append(i)
        for idx in by_len.values():
            for b in range(0, len(idx), batch):
                group = idx[b:b + batch]
                # its extractor on the CPU: given device="cuda", transformers 5.x puts stft's window on the
                # device and leaves the waveform on the CPU, and fails
                f = vfe([padded[i] for i in group], sampling_rate=SR, return_tensors="pt", device="cpu").input_features
                f = f.to(dev.device, dev.dtype)
                cache, pcache, rows = None, None, []
                for c in range(0, f.shape[-1], 3000):
                    o = self.method(holder, f[..., c:c + 3000], padding_cache=pcache, cache=cache, use_cache=True)
                    cache, pcache = o.cache, o.padding_cache
                    rows.append(o.pooler_output.float().cpu().numpy())
                rows = np.concatenate(rows, axis=1)
                for j, i in enumerate(group):
                    out[i] = rows[j]
        return out

    def _run_qwen25o(self, dev, fe, pcms, batch):
        # Qwen2_5OmniProcessor: padding to 30 s, truncation there, the feature attention mask
        tower = dev.m["thinker.audio_tower"]
        return self._run_thinker(dev, fe, pcms, batch, dict(padding="max_length", truncation=True),
                                 lambda frames: tower._get_feat_extract_output_lengths(frames)[1])

    def _run_qwen3a(self, dev, fe, pcms, batch):
        # Qwen3OmniMoeProcessor: padding "longest", no truncation (an input's frames: floor(n / 160))
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths
        return self._run_thinker(dev, fe, pcms, batch, dict(padding="longest", truncation=False), _get_feat_extract_output_lengths)

    def _run_thinker(self, dev, fe, pcms, batch, fe_args, n_tokens):
        """The Omni thinkers' get_audio_features over their processors' features, batch inputs a call."""
        holder = types.SimpleNamespace(audio_tower=dev.m["thinker.audio_tower"], config=self.cfg.thinker_config)
        out = []
        for b in range(0, len(pcms), batch):
            x = fe(pcms[b:b + batch], sampling_rate=SR, return_attention_mask=True, return_tensors="pt", device=dev.device,
                   **fe_args)
            mask = x.attention_mask.to(dev.device)
            h = self.method(holder, x.input_features.to(dev.device, dev.dtype), mask).last_hidden_state
            counts = n_tokens(mask.sum(-1)).tolist()
            out += self._split(h.float().cpu().numpy(), counts, list(range(len(counts))), len(counts))
        return out

    @staticmethod
    def _whisper_layers(enc, x, mask):
        """transformers' WhisperEncoder over a log-mel batch run at its own length (the positions sliced), an
        additive mask [B, 1, T, T] or None, through the final LayerNorm."""
        import torch
        F = torch.nn.functional
        x = F.gelu(enc.conv1(x))
        x = F.gelu(enc.conv2(x)).permute(0, 2, 1)
        h = x + enc.embed_positions.weight[: x.size(1)]
        for layer in enc.layers:
            h = layer(h, mask)
            h = h[0] if isinstance(h, tuple) else h
        return enc.layer_norm(h)

    def _run_minicpmo(self, dev, fe, pcms, batch):
        # MiniCPMOProcessor.audio_feature_extract + MiniCPMO.get_audio_embedding (towers.py's steps): an input of
        # at most 30 s is one log-mel padded to 30 s and cut to its frames; a longer one 30 s pieces of 3000
        # frames, the last one's frames past its audio 0.0 and keys masked from its frame count on
        import torch
        pieces = []                                   # (owner, log-mel [80, F], frames holding audio)
        for i, p in enumerate(pcms):
            parts = [p] if len(p) <= W30 else [p[s:s + W30] for s in range(0, len(p), W30)]
            for part in parts:
                m = fe(part, sampling_rate=SR, padding="max_length", return_tensors="pt", device=dev.device).input_features[0]
                f = -(-len(part) // 160)
                if len(parts) == 1:
                    m = m[:, :f]
                else:
                    m = m.clone()
                    m[:, f:] = 0.0
                pieces.append((i, m, f))
        enc, p = dev.m["apm"], dev.m["audio_projection_layer"]
        block = 50                                    # audio_chunk_length 1 s of positions
        per = [[] for _ in pcms]
        b = 0
        while b < len(pieces):                        # pieces of one width share a batch
            e = b
            while e < len(pieces) and e - b < batch and pieces[e][1].shape[-1] == pieces[b][1].shape[-1]:
                e += 1
            x = torch.stack([q[1] for q in pieces[b:e]]).to(dev.device, dev.dtype)
            T = (x.shape[-1] + 1) // 2
            frames = torch.tensor([q[2] for q in pieces[b:e]], device=dev.device)
            i = torch.arange(T, device=dev.device)
            allowed = (i[None, :] < ((i[:, None] // block + 1) * block))[None] & (i[None, None, :] < frames[:, None, None])
            mask = torch.zeros(e - b, 1, T, T, device=dev.device, dtype=dev.dtype).masked_fill(~allowed[:, None], float("-inf"))
            h = self._whisper_layers(enc, x, mask)
            h = p.linear2(torch.relu(p.linear1(h)))
            h = torch.nn.functional.avg_pool1d(h.transpose(1, 2), 2).transpose(1, 2).float().cpu().numpy()
            for j, (owner, _, f) in enumerate(pieces[b:e]):
                per[owner].append(h[j, : (-(-f // 2)) // 2])
            b = e
        return [np.concatenate(q) for q in per]

    def _run_kimiaudio(self, dev, fe, pcms, batch):
        # tokenize_waveform's 30 s segments, each padded to 30 s with its own log-mel; its WhisperEncoder over the
        # window, the first token_len * 4 positions; extract_whisper_feat's 4 stacked; the VQ adaptor
        import torch
        F = torch.nn.functional
        segs = [(i, p[s:s + W30]) for i, p in enumerate(pcms) for s in range(0, max(1, len(p)), W30)]
        enc, a = dev.m["encoder"], dev.m["model.vq_adaptor.layers"]
        per = [[] for _ in pcms]
        for b in range(0, len(segs), batch):
            part = segs[b:b + batch]
            x = fe([q[1] for q in part], sampling_rate=SR, padding="max_length", return_tensors="pt",
                   device=dev.device).input_features.to(dev.device, dev.dtype)
            h = enc(x).last_hidden_state
            for j, (owner, seg) in enumerate(part):
                tl = (len(seg) - 1) // 1280 + 1
                t = h[j, : tl * 4].reshape(tl, -1)
                t = getattr(a, "3")(F.silu(getattr(a, "0")(t)))
                t = F.layer_norm(t, (t.shape[-1],), getattr(a, "4").weight, getattr(a, "4").bias, 1e-6)
                per[owner].append(t.float().cpu().numpy())
        return [np.concatenate(q) for q in per]

    def _run_meralion(self, dev, fe, pcms, batch):
        # MERaLiON2Processor: the first 300 s in 30 s chunks, each normalised over its samples (do_normalize) and
        # padded to 30 s; speech_encoder over the window, ln_speech, MERaLiON2SpeechAudioAdaper's steps
        import torch
        F = torch.nn.functional
        chunks = [(i, p[s:s + W30]) for i, p in enumerate(pcms) for s in range(0, min(max(1, len(p)), 10 * W30), W30)]
        enc, ln, a = dev.m["speech_encoder"], dev.m["ln_speech"], dev.m["speech_audio_adapter"]
        per = [[] for _ in pcms]
        for b in range(0, len(chunks), batch):
            part = chunks[b:b + batch]
            x = fe([q[1] for q in part], sampling_rate=SR, padding="max_length", do_normalize=True, return_attention_mask=True,
                   return_tensors="pt", device=dev.device).input_features.to(dev.device, dev.dtype)
            h = ln(enc(x).last_hidden_state)
            B, T, C = h.shape
            h = h.reshape(B, T // 15, C * 15)
            h = F.silu(a.mlp_adapter[0](h))
            h = a.out_proj(F.silu(a.gate_proj(h)) * a.pool_proj(h)).float().cpu().numpy()
            for j, (owner, _) in enumerate(part):
                per[owner].append(h[j])
        return [np.concatenate(q) for q in per]

    def _run_stepaudio2(self, dev, fe, pcms, batch):
        # apply_chat_template's 25 s chunks, each its own log-mel of the chunk and 479 zero samples; padding_mels:
        # an input of one chunk at its frames, a longer one's chunks padded with zeros to the longest; wav_lens
        # = frames - 2; AudioEncoder (keys masked past conv2's sampling of them), avg_pooler, after_norm; Adaptor
        import torch
        F = torch.nn.functional
        w, H, D = dev.w, self.s["heads"], self.s["d"]
        per = [[] for _ in pcms]
        groups = []
        for i, p in enumerate(pcms):
            mels = [fe(np.pad(p[s:s + 400000], (0, 479)), sampling_rate=SR, padding="longest", return_tensors="pt",
                       device=dev.device).input_features[0] for s in range(0, max(1, len(p)), 400000)]
            T = max(m.shape[-1] for m in mels)
            groups += [(i, F.pad(m, (0, T - m.shape[-1])), m.shape[-1] - 2) for m in mels]
        b = 0
        while b < len(groups):
            e = b
            while e < len(groups) and e - b < batch and groups[e][1].shape[-1] == groups[b][1].shape[-1]:
                e += 1
            x = torch.stack([g[1] for g in groups[b:e]]).to(dev.device, dev.dtype)
            x_len = torch.tensor([g[2] for g in groups[b:e]], device=dev.device)
            T = x.shape[-1]
            x = F.gelu(F.conv1d(x, w["encoder.conv1.weight"], w["encoder.conv1.bias"], padding=1))
            x = F.gelu(F.conv1d(x, w["encoder.conv2.weight"], w["encoder.conv2.bias"], stride=2, padding=1)).permute(0, 2, 1)
            keep = torch.arange(T, device=dev.device)[(T + 1) % 2:: 2][None] < x_len[:, None]
            bias = ((1.0 - keep.to(dev.dtype)) * -1.0e10)[:, None, None]
            x = x + w["encoder.positional_embedding.weight"][: x.shape[1]]
            B, n, _ = x.shape
            for li in range(self.s["layers"]):
                p = "encoder.blocks.%d." % li
                h = F.layer_norm(x, (D,), w[p + "attn_ln.weight"], w[p + "attn_ln.bias"])
                scale = (D // H) ** -0.25
                q = F.linear(h, w[p + "attn.query.weight"], w[p + "attn.query.bias"]).view(B, n, H, -1).permute(0, 2, 1, 3) * scale
                k = F.linear(h, w[p + "attn.key.weight"]).view(B, n, H, -1).permute(0, 2, 3, 1) * scale
                v = F.linear(h, w[p + "attn.value.weight"], w[p + "attn.value.bias"]).view(B, n, H, -1).permute(0, 2, 1, 3)
                att = F.softmax((q @ k + bias).float(), dim=-1).to(dev.dtype)
                x = x + F.linear((att @ v).permute(0, 2, 1, 3).flatten(start_dim=2), w[p + "attn.out.weight"], w[p + "attn.out.bias"])
                h = F.layer_norm(x, (D,), w[p + "mlp_ln.weight"], w[p + "mlp_ln.bias"])
                x = x + F.linear(F.gelu(F.linear(h, w[p + "mlp.0.weight"], w[p + "mlp.0.bias"])), w[p + "mlp.2.weight"], w[p + "mlp.2.bias"])
            x = F.avg_pool1d(x.permute(0, 2, 1), 2, 2).permute(0, 2, 1)
            x = F.layer_norm(x, (D,), w["encoder.after_norm.weight"], w["encoder.after_norm.bias"])
            x = F.gelu(F.conv1d(x.permute(0, 2, 1), w["adapter.conv.weight"], w["adapter.conv.bias"], stride=2, padding=1))
            x = F.linear(F.relu(F.linear(x.permute(0, 2, 1), w["adapter.linear1.weight"], w["adapter.linear1.bias"])),
                         w["adapter.linear2.weight"], w["adapter.linear2.bias"]).float().cpu().numpy()
            for j, (owner, _, L) in enumerate(groups[b:e]):
                E = (L + 1) // 2 // 2
                per[owner].append(x[j, : (E - 1) // 2 + 1 if E > 0 else 0])
            b = e
        return [np.concatenate(q) for q in per]
