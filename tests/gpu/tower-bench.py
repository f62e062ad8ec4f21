#!/usr/bin/env python3
"""The audio-LLM towers' speed, side by side on one GPU: ./main against each model's own pipeline for
Qwen2-Audio-7B's, Voxtral Mini's and Ultravox v0.5 (Llama 3.1 8B)'s audio tower and projector (issue 20
item 5), and for the later towers (Audio Flamingo 3, GLM-ASR, Qwen2.5-Omni, Qwen3-Omni, MiniCPM-o
2.6, Kimi-Audio, Step-Audio 2, MERaLiON-2, Voxtral Realtime: their modules, checkpoints and pipelines are
tests/gpu/tower_models.py's), with random weights at the real shapes. tests/gpu/towers.py is the towers'
parity on tiny checkpoints; this is their speed at full size, with a parity check of its own so
that the speed is of correct output.

Models, built here with the models' own classes (random weights, biases and norm weights
perturbed so that a dropped one shows; every value rounded to f16, the checkpoint's type), saved
as Hugging Face checkpoints (audio tower + projector, as the published ones name them) and
converted by convert/convert-hf-to-gguf.py (--outtype f16):
  qwen2a   transformers' Qwen2AudioForConditionalGeneration (a 1-layer text model of width 4096,
           kept only for the projector's shape): encoder 1280 x 32 layers, 20 heads, 128 mels,
           avg-pool 2, linear 1280 -> 4096
  voxtral  transformers' VoxtralForConditionalGeneration (text width 3072): the same encoder,
           4 positions stacked, linear 5120 -> 3072, GELU, linear 3072 -> 3072
  ultravox fixie-ai/ultravox's ModifiedWhisperEncoder + UltravoxProjector (its v0.5 llama-3.1-8b
           shape: a whisper-large-v3-turbo encoder, stack 8, RMSNorm, linear 10240 -> 4096,
           SwiGLU, RMSNorm, linear 2048 -> 4096), from its ultravox_model.py, which is not in
           transformers: tests/gpu/make-ultravox-code.sh puts it in tests/gpu/.ultravox (ignored by
           git; carry it to the GPU machine). Written for transformers 4: the adapters below let
           transformers 5 run it unchanged.

Inputs (made here, in --work): 64 WAVs of 10 s (16 kHz mono s16: speech from tests/data, each cut
at its own offset with its own gain and noise floor, every 4th amplitude-modulated noise) and one
of an hour (the speech tiled, gain and noise changing per 30 s; 3595 s by default so that the last
30 s chunk is part-filled and each model's rule for it runs: Voxtral pads it, Ultravox masks it).

transformers (the peer), timed after a warm-up pass of the same input set, model load excluded:
the WAVs read with numpy, WhisperFeatureExtractor with device= (on the GPU), the tower + projector
with sdpa in bf16 or f16, 32 clips or chunks per call, the tokens copied to the host (f32), each
model's own processing:
  qwen2a   Qwen2AudioProcessor's features (padding to 30 s, its attention mask; an input longer
           than 30 s is truncated there: the hour gives its first 30 s), then
           Qwen2AudioModel.forward's audio path (the key-padding mask, audio_tower,
           multi_modal_projector, the first audio_output_lengths rows)
  voxtral  VoxtralProcessor's features (each input padded to a multiple of 30 s, one log-mel over
           all of it, cut into 3000-frame chunks), get_audio_features(...).pooler_output
  ultravox UltravoxProcessor's (padding to a hop, unpadded up to 30 s, longer ones cut into 3000
           frames, the last padded; audio_lens), then UltravoxModel._prepare_audio_embeds'
           audio_tower(audio_values, audio_len) + multi_modal_projector, audio_token_len rows each

Ours: `./main -m tower.gguf --device cuda --dtype D -b 32 --list FILES -o DIR/ --json`: "run s" is
its total less load and init (reading, decoding, the encoder, writing each .npy), "wall s" the
process from start to exit; GPU busy (nvidia-smi utilization.gpu every 20 ms) and device memory
(peak memory.used less the idle figure before it started) while it runs, peak RSS from its rusage.
"fwd s": our tower's encoder forward alone for the same windows (the C API's
whisper_audio_encode_mel / _frames at batch 32 on random log-mel, its compute_ms: the replayed
graph; the projector excluded), as many batches as the input set needs.

Parity, the 64 files: relative L2 of all tokens against transformers' own f32 (TF32 off) on the
same device, for ours and for transformers in the same dtype: ours must be within 1.25x of
transformers' error (f32 on the CPU: within 1e-5); the hour: token counts equal, and ours against
transformers in the same dtype reported.

The later towers: see tests/gpu/tower_models.py (the peers as their processors and code run,
the real shapes); Qwen3-Omni's "fwd s" is one window a call (encode_mel_tokens, its projector
included: its tower gives tokens alone), the others' a batch of 32.

Run on the GPU machine from the repository root, after `make -j16 all`, with tests/gpu/.ultravox
carried (for ultravox):
    python3 tests/gpu/tower-bench.py [--models qwen2a,voxtral,ultravox,af3,...] [--dtypes bf16,f16] [--out DIR]
Here, on the CPU, with tiny shapes (d 64, 3 layers) and a short "hour":
    VENV/bin/python tests/gpu/tower-bench.py --tiny --device cpu
Prints the tables last; writes tower-bench.json and tower-bench.md to --out (default $OUT when
set); exits 1 when a parity check fails.
"""
import argparse
import copy
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import types
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SR, CLIP_S, N_WIN = 16000, 10, 480000
BOUND = 1.25
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tower_models  # noqa: E402  (the later towers: their modules, checkpoints and peers)

MODELS = ("qwen2a", "voxtral", "ultravox") + tower_models.NAMES
# d, layers, heads, ffn, mels (every tower here has a large-v3 / large-v3-turbo encoder), and the
# LLM width the projector makes; Ultravox's projector hidden size (SwiGLU halves it) and stack
REAL = dict(d=1280, layers=32, heads=20, ff=5120, mels=128, llm={"qwen2a": 4096, "voxtral": 3072, "ultravox": 4096},
            proj_hidden=4096)
TINY = dict(d=64, layers=3, heads=1, ff=256, mels=128, llm={"qwen2a": 32, "voxtral": 32, "ultravox": 32}, proj_hidden=128)


def log(*a):
    print("tower-bench:", *a, flush=True)


# ---------------------------------------------------------------------------------------
# audio
# ---------------------------------------------------------------------------------------

def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == SR and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def write_wav(path, x):
    tmp = path + ".tmp"
    with wave.open(tmp, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    os.replace(tmp, path)


def speech_pool():
    d = os.path.join(ROOT, "tests", "data", "audio")
    names = ["long_70s_16k.wav", "speech_16k.wav"] + ["speech/" + n for n in sorted(os.listdir(os.path.join(d, "speech")))
                                                     if n.endswith(".wav")]
    return np.concatenate([read_wav(os.path.join(d, n)) for n in names])


def make_audio(work, n_files, hour_s):
    """64 distinct 10 s clips and an hour; kept in work/audio when already made with these settings."""
    adir = os.path.join(work, "audio")
    stamp = os.path.join(adir, "stamp.json")
    want = {"n_files": n_files, "hour_s": hour_s, "clip_s": CLIP_S, "version": 1}
    clips = [os.path.join(adir, "clips", "clip%02d.wav" % i) for i in range(n_files)]
    hour = os.path.join(adir, "hour.wav")
    if os.path.exists(stamp) and json.load(open(stamp)) == want:
        return clips, hour
    os.makedirs(os.path.dirname(clips[0]), exist_ok=True)
    pool = speech_pool()
    rng = np.random.default_rng(20)
    n = CLIP_S * SR
    for i, path in enumerate(clips):
        if i % 4 == 3:     # noise with a syllable-rate envelope: speech-like in level, not in content
            noise = rng.standard_normal(n).astype(np.float32)
            if i % 8 == 7:     # brown-ish
                noise = np.cumsum(noise)
                noise -= np.convolve(noise, np.ones(801) / 801, mode="same")
            env = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(2, 6) * np.arange(n) / SR + rng.uniform(0, 6.3))
            x = noise / (np.abs(noise).max() + 1e-9) * env * rng.uniform(0.1, 0.5)
        else:
            off = (i * 7919 * 160) % (len(pool) - n)
            x = pool[off:off + n] * rng.uniform(0.3, 1.0) + rng.standard_normal(n).astype(np.float32) * 10 ** rng.uniform(-4, -2)
        write_wav(path, x.astype(np.float32))
    total = int(hour_s * SR)
    reps = -(-total // len(pool))
    x = np.tile(pool, reps)[:total].copy()
    for s in range(0, total, N_WIN):   # each 30 s its own gain and noise floor: no two windows equal
        e = min(total, s + N_WIN)
        x[s:e] = x[s:e] * rng.uniform(0.3, 1.0) + rng.standard_normal(e - s).astype(np.float32) * 10 ** rng.uniform(-4, -2.5)
    write_wav(hour, x)
    json.dump(want, open(stamp, "w"))
    return clips, hour


# ---------------------------------------------------------------------------------------
# the models: built with their own classes, saved, converted
# ---------------------------------------------------------------------------------------

def ultravox_modules(code_dir):
    """fixie-ai/ultravox's ultravox_config and ultravox_model (transformers 4 code), with the
    adapters transformers 5 needs. Nothing of theirs is changed; what is added:
      - peft and accelerate stand-ins when they are not installed (imported at the top of
        ultravox_model.py, used only for LoRA and device maps, which are not run here);
      - ModuleUtilsMixin.get_extended_attention_mask, gone in transformers 5, as transformers 4
        defined it for a 2-D padding mask of an encoder: (1 - mask[:, None, None, :]) * dtype min;
      - the encoder layer called as transformers 4 called it (positional mask, layer_head_mask and
        output_attentions keywords, a tuple back): a pre-hook drops the two keywords, a hook wraps
        the output in a tuple (transformers 5's layer returns the tensor)."""
    if not os.path.isfile(os.path.join(code_dir, "ultravox", "model", "ultravox_model.py")):
        raise SystemExit("tower-bench: no %s/ultravox/model/ultravox_model.py: run tests/gpu/make-ultravox-code.sh "
                         "(and carry tests/gpu/.ultravox to the GPU machine)" % code_dir)
    for mod in ("peft", "accelerate"):
        try:
            __import__(mod)
        except ImportError:
            sys.modules[mod] = types.ModuleType(mod)
    sys.path.insert(0, code_dir)
    from ultravox.model import ultravox_config, ultravox_model
    import torch
    import transformers

    def get_extended_attention_mask(self, attention_mask, input_shape=None, dtype=None):
        dtype = dtype if dtype is not None else self.dtype
        ext = attention_mask[:, None, None, :].to(dtype)
        return (1.0 - ext) * torch.finfo(dtype).min

    enc = ultravox_model.ModifiedWhisperEncoder
    if not hasattr(enc, "get_extended_attention_mask"):
        enc.get_extended_attention_mask = get_extended_attention_mask
    if not hasattr(transformers.PretrainedConfig, "use_return_dict"):
        transformers.PretrainedConfig.use_return_dict = property(lambda self: getattr(self, "return_dict", True))
    return ultravox_config, ultravox_model


def adapt_ultravox_layers(tower):
    def pre(module, args, kwargs):
        kwargs.pop("layer_head_mask", None)
        kwargs.pop("output_attentions", None)
        return args, kwargs

    def post(module, args, out):
        return out if isinstance(out, tuple) else (out,)

    for layer in tower.layers:
        layer.register_forward_pre_hook(pre, with_kwargs=True)
        layer.register_forward_hook(post)


def perturb_and_round(module, seed):
    """transformers' own init for the matrices; biases ~ N(0, 0.02) and norm weights x (1 + N(0, 0.05))
    so that a dropped bias or norm shows in the parity; every value rounded to f16 (the checkpoint's)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1:
                r = torch.randn(p.shape, generator=g)
                if name.endswith("bias"):
                    p.copy_(0.02 * r)
                else:
                    p.mul_(1.0 + 0.05 * r)
            p.copy_(p.half().float())


def tiny_text(kind, width):
    # the smallest text model of the LLM width the projector needs (it is never run)
    return dict(model_type=kind, hidden_size=width, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
                num_key_value_heads=1, head_dim=8, vocab_size=16)


class Tower:
    """One model: its modules (f32, CPU), its checkpoint and GGUF, and the peer's pipeline."""

    def __init__(self, name, shape, work, ultravox_code, device):
        import torch
        import transformers
        self.name, self.device = name, device
        s = shape
        self.spec = None
        torch.manual_seed({"qwen2a": 1, "voxtral": 2, "ultravox": 3}.get(name, 0))   # the later towers seed their own
        if name in tower_models.NAMES:
            s = (tower_models.TINY if shape is TINY else tower_models.REAL)[name]
            self.spec = tower_models.Model(name, s)
            self.modules, self.files = self.spec.modules, self.spec.files
        elif name == "qwen2a":
            cfg = transformers.Qwen2AudioConfig(
                audio_config=dict(d_model=s["d"], encoder_layers=s["layers"], encoder_attention_heads=s["heads"],
                                  encoder_ffn_dim=s["ff"], num_mel_bins=s["mels"], max_source_positions=1500),
                text_config=tiny_text("qwen2", s["llm"][name]))
            cfg.audio_config._attn_implementation = "sdpa"
            model = transformers.Qwen2AudioForConditionalGeneration(cfg).eval()
            self.modules = {"audio_tower": model.model.audio_tower, "multi_modal_projector": model.model.multi_modal_projector}
            self.holder = model
            config = dict(cfg.to_dict(), architectures=["Qwen2AudioForConditionalGeneration"])
        elif name == "voxtral":
            cfg = transformers.VoxtralConfig(
                audio_config=dict(hidden_size=s["d"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                                  intermediate_size=s["ff"], num_mel_bins=s["mels"], max_source_positions=1500),
                text_config=tiny_text("llama", s["llm"][name]), projector_hidden_act="gelu")
            cfg.audio_config._attn_implementation = "sdpa"
            model = transformers.VoxtralForConditionalGeneration(cfg).eval()
            self.modules = {"audio_tower": model.model.audio_tower, "multi_modal_projector": model.model.multi_modal_projector}
            self.holder = model
            config = dict(cfg.to_dict(), architectures=["VoxtralForConditionalGeneration"])
        else:
            uc, um = ultravox_modules(ultravox_code)
            wcfg = transformers.WhisperConfig(d_model=s["d"], encoder_layers=s["layers"], encoder_attention_heads=s["heads"],
                                              encoder_ffn_dim=s["ff"], num_mel_bins=s["mels"], max_source_positions=1500,
                                              decoder_layers=1, decoder_attention_heads=s["heads"], vocab_size=128)
            cfg = uc.UltravoxConfig(audio_config=wcfg.to_dict(), text_config=tiny_text("llama", s["llm"][name]),
                                    hidden_size=s["proj_hidden"], stack_factor=8, projector_act="swiglu",
                                    projector_ln_mid=True)
            cfg.audio_config._attn_implementation = "sdpa"
            tower = um.ModifiedWhisperEncoder(cfg.audio_config).eval()
            tower.init_latency_mask(None, torch.float32)
            adapt_ultravox_layers(tower)
            proj = um.UltravoxProjector(cfg).eval()
            self.modules = {"audio_tower": tower, "multi_modal_projector": proj}
            self.holder = None
            config = dict(cfg.to_dict(), architectures=["UltravoxModel"])
        self.d, self.mels = s["d"], s["mels"]
        if not self.spec:
            self.cfg = cfg
            attn = self.modules["audio_tower"].config._attn_implementation
            if attn != "sdpa":
                raise RuntimeError("%s: the tower's attention is %r, not sdpa" % (name, attn))
            self.files = {"model.safetensors": (config, list(self.modules))}
        for i, m in enumerate(self.modules.values()):
            perturb_and_round(m, 100 + i)
        tag = "tiny" if shape is TINY else "real"
        self.ckpt = os.path.join(work, "hf", "%s-%s" % (name, tag))
        self.gguf = os.path.join(work, "%s-%s-f16.gguf" % (name, tag))
        self.save()

    def state(self, prefixes):
        if self.spec:
            return self.spec.state(prefixes)
        out = {}
        for prefix in prefixes:
            out.update({prefix + "." + k: v for k, v in self.modules[prefix].state_dict().items()})
        return out

    def save(self):
        """The checkpoint (each file with its config.json beside it, as the published one lays them out) and its GGUF."""
        from safetensors.torch import save_file
        stamp = self.gguf + ".stamp"
        states = {rel: {k: v.detach().half().contiguous() for k, v in self.state(prefixes).items()}
                  for rel, (_, prefixes) in self.files.items()}
        # a fingerprint of the weights: rebuild the checkpoint and GGUF only when it changes
        items = sorted((k, v) for st in states.values() for k, v in st.items())
        fp = "%d:%.9e" % (sum(v.numel() for _, v in items), sum(float(v.float().abs().sum()) for _, v in items[:8]))
        if os.path.exists(self.gguf) and os.path.exists(stamp) and open(stamp).read() == fp:
            log("%s: %s is up to date" % (self.name, os.path.relpath(self.gguf, ROOT)))
            return
        for rel, (config, _) in self.files.items():
            path = os.path.join(self.ckpt, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(os.path.join(os.path.dirname(path), "config.json"), "w") as f:
                json.dump(config, f, indent=2, sort_keys=True, default=str)
            save_file(states[rel], path)
        t0 = time.time()
        r = subprocess.run([sys.executable, os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"), self.ckpt, "-o", self.gguf,
                            "--outtype", "f16"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("tower-bench: converting %s failed:\n%s%s" % (self.ckpt, r.stdout, r.stderr))
        open(stamp, "w").write(fp)
        log("%s: checkpoint %s, converted to %s in %.1f s" % (self.name, os.path.relpath(self.ckpt, ROOT),
                                                             os.path.relpath(self.gguf, ROOT), time.time() - t0))

    # ---- the peer ----------------------------------------------------------------------

    def to(self, dtype):
        """The tower and projector on the device in dtype (a copy; the f32 originals stay on the CPU)."""
        self.dtype = dtype
        if self.spec:
            self.dev = self.spec.to(self.device, dtype)
            return
        self.dev = {k: copy.deepcopy(m).to(self.device, dtype) for k, m in self.modules.items()}
        if self.name == "ultravox":   # the copies carry the hooks; make sure each is there once
            for layer in self.dev["audio_tower"].layers:
                layer._forward_pre_hooks.clear()
                layer._forward_hooks.clear()
            adapt_ultravox_layers(self.dev["audio_tower"])

    def release(self):
        import torch
        self.dev = None
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def fe(self):
        import transformers
        return transformers.WhisperFeatureExtractor(feature_size=self.mels)

    def run(self, fe, pcms, batch):
        """transformers' pipeline over decoded inputs: a list (per input) of f32 host token arrays."""
        import torch
        if self.spec:
            out = self.spec.run(self.dev, fe, pcms, batch)
            if self.device == "cuda":
                torch.cuda.synchronize()
            return out
        dev, dt = self.device, self.dtype
        out = []
        with torch.inference_mode():
            if self.name == "qwen2a":
                # Qwen2AudioProcessor: WhisperFeatureExtractor(padding="max_length", return_attention_mask=True),
                # which truncates at 30 s; then Qwen2AudioModel.forward's audio path
                tower, proj = self.dev["audio_tower"], self.dev["multi_modal_projector"]
                for b in range(0, len(pcms), batch):
                    x = fe(pcms[b:b + batch], sampling_rate=SR, return_attention_mask=True, padding="max_length",
                           return_tensors="pt", device=dev)
                    feats = x.input_features.to(dev, dt)
                    fmask = x.attention_mask.to(dev)
                    feat_len, out_len = tower._get_feat_extract_output_lengths(fmask.sum(-1))
                    B, _, max_mel = feats.shape
                    max_seq = (max_mel - 2) // 2 + 1
                    seq = torch.arange(max_seq, dtype=feat_len.dtype, device=dev)[None].expand(B, max_seq)
                    mask2d = (~(seq >= feat_len[:, None])).long()
                    import transformers
                    attn = transformers.masking_utils.create_bidirectional_mask(
                        config=tower.config, inputs_embeds=torch.zeros(B, max_seq, 1, dtype=dt, device=dev),
                        attention_mask=mask2d)
                    h = proj(tower(feats, attention_mask=attn).last_hidden_state)
                    keep = torch.arange(h.shape[1], device=dev)[None] < out_len[:, None]
                    flat = h[keep].float().cpu().numpy()
                    o = 0
                    for n in out_len.tolist():
                        out.append(flat[o:o + n])
                        o += n
            elif self.name == "voxtral":
                # VoxtralProcessor._retrieve_input_features: per input, padding to a multiple of 30 s,
                # one log-mel of all of it, cut into 3000-frame chunks; get_audio_features per batch
                mels = self.cfg.audio_config.num_mel_bins
                chunks, owner = [], []
                for i, pcm in enumerate(pcms):
                    f = fe(pcm, sampling_rate=SR, padding=True, truncation=False, pad_to_multiple_of=N_WIN,
                           return_tensors="pt", device=dev).input_features
                    c = f.reshape(mels, -1, 3000).transpose(0, 1)
                    chunks.append(c)
                    owner += [i] * c.shape[0]
                chunks = torch.cat(chunks)
                rows = []
                for b in range(0, chunks.shape[0], batch):
                    x = chunks[b:b + batch].to(dev, dt)
                    tok = self.holder_audio_features(x)
                    rows.append(tok.float().cpu().numpy().reshape(x.shape[0], -1, tok.shape[-1]))
                rows = np.concatenate(rows)
                owner = np.array(owner)
                out = [rows[owner == i].reshape(-1, rows.shape[-1]) for i in range(len(pcms))]
            else:
                # UltravoxProcessor: at least 2 hops, padding "longest" to a hop, its attention mask; the
                # log-mel cut into chunks of 3000 frames, a continuation chunk padded to 3000; then
                # _prepare_audio_embeds: audio_tower(audio_values, audio_len), the projector, the
                # first audio_token_len rows of each chunk
                tower, proj = self.dev["audio_tower"], self.dev["multi_modal_projector"]
                pcms = [np.pad(p, (0, 320 - len(p))) if len(p) < 320 else p for p in pcms]
                chunks, lens, owner = [], [], []
                for b in range(0, len(pcms), batch):   # the processor's batch: the inputs of one call
                    x = fe(pcms[b:b + batch], sampling_rate=SR, padding="longest", pad_to_multiple_of=160, truncation=False,
                           return_attention_mask=True, return_tensors="pt", device=dev)
                    vals, alen = torch.as_tensor(x.input_features), torch.as_tensor(x.attention_mask).sum(-1)
                    for i in range(vals.shape[0]):
                        for off in range(0, int(alen[i]), 3000):
                            c = vals[i, :, off:off + 3000]
                            if off > 0 and c.shape[-1] < 3000:
                                c = torch.nn.functional.pad(c, (0, 3000 - c.shape[-1]))
                            chunks.append(c)
                            lens.append(min(int(alen[i]) - off, 3000))
                            owner.append(b + i)
                per = [[] for _ in pcms]
                b = 0
                while b < len(chunks):   # batch chunks of one width together (10 s clips: 1000 frames; the hour: 3000)
                    e = b
                    while e < len(chunks) and e - b < batch and chunks[e].shape[-1] == chunks[b].shape[-1]:
                        e += 1
                    vals = torch.stack(chunks[b:e]).to(dev, dt)
                    alen = torch.tensor(lens[b:e], device=dev)
                    h = proj(tower(vals, audio_len=alen).last_hidden_state)
                    ntok = torch.ceil(alen / 16).int().tolist()
                    hc = h.float().cpu().numpy()
                    for j in range(e - b):
                        per[owner[b + j]].append(hc[j, :ntok[j]])
                    b = e
                out = [np.concatenate(p) for p in per]
        if dev == "cuda":
            torch.cuda.synchronize()
        return out

    def holder_audio_features(self, x):
        # VoxtralForConditionalGeneration.get_audio_features, run on the device copies of its modules
        h = self.dev["audio_tower"](x, return_dict=True).last_hidden_state
        h = h.reshape(-1, self.cfg.audio_config.intermediate_size)
        return self.dev["multi_modal_projector"](h)


def check_voxtral_method(t):
    """holder_audio_features is get_audio_features' body: check it against the model's own method
    once (f32, on the device), so that a transformers that changes the method is noticed."""
    import torch
    if t.name != "voxtral":
        return
    x = torch.randn(1, t.cfg.audio_config.num_mel_bins, 3000, device=t.device) * 0.3
    t.holder.to(t.device)            # moves t.modules' tower and projector too (the same objects)
    with torch.inference_mode():
        ref = t.holder.get_audio_features(x).pooler_output
        t.dev = t.modules
        got = t.holder_audio_features(x)
        t.dev = None
    t.holder.to("cpu")
    assert torch.allclose(ref, got, rtol=1e-5, atol=1e-6), "get_audio_features changed: update holder_audio_features"


# ---------------------------------------------------------------------------------------
# ours
# ---------------------------------------------------------------------------------------

class GpuSampler:
    """nvidia-smi every 20 ms: mean utilisation and peak memory used while running (nan without it)."""

    def __init__(self):
        self.util, self.mem = [], []
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                                          "-i", "0", "-lms", "20"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        for line in self.proc.stdout:
            try:
                u, m = (float(x) for x in line.split(",")[:2])
            except ValueError:
                continue
            self.util.append(u)
            self.mem.append(m)

    def done(self):
        if self.proc is None:
            return float("nan"), float("nan")
        self.proc.terminate()
        self.proc.wait()
        self.thread.join(timeout=2)
        return (sum(self.util) / len(self.util) if self.util else float("nan"), max(self.mem) if self.mem else float("nan"))


class PeakRss:
    """The child's VmHWM (/proc/PID/status) every 10 ms until it exits. Not its rusage: a child
    forked from this process (torch loaded: about 1 GB) carries this process's high-water mark
    across exec into ru_maxrss."""

    def __init__(self, pid):
        self.path, self.kib, self.stop = "/proc/%d/status" % pid, 0, False
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self):
        while not self.stop:
            try:
                with open(self.path) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self.kib = max(self.kib, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.01)

    def done(self):
        self.stop = True
        self.thread.join(timeout=2)
        return self.kib / 1024.0


def run_main(args, gguf, files, dtype, out_dir, main=None):
    os.makedirs(out_dir, exist_ok=True)
    lst = os.path.join(out_dir, "list.txt")
    with open(lst, "w") as f:
        f.write("".join(p + "\n" for p in files))
    cmd = [main or os.path.join(ROOT, "main"), "-m", gguf, "--device", args.device, "-b", str(args.batch), "--list", lst,
           "-o", out_dir + "/", "--json", "--no-progress"]
    if dtype != "f32":
        cmd += ["--dtype", dtype]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    idle = GpuSampler()
    time.sleep(0.3)
    base_mem = idle.done()[1]
    sampler = GpuSampler()
    t0 = time.time()
    with open(os.path.join(out_dir, "main.stdout"), "w+") as so, open(os.path.join(out_dir, "main.stderr"), "w+") as se:
        p = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        hwm = PeakRss(p.pid)
        _, status, _ = os.wait4(p.pid, 0)
        wall = time.time() - t0
        rss = hwm.done()
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    util, peak = sampler.done()
    if status != 0:
        raise RuntimeError("%s failed (status %d):\n%s" % (" ".join(cmd), status, stderr[-3000:]))
    j = json.loads(stdout)
    t = j["timings_ms"]
    for line in stderr.splitlines():             # main's own stage times, for the record
        if line.startswith("timings:"):
            print("tower-bench: main %s: %s" % (os.path.relpath(out_dir, args.work), line), flush=True)
    common = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])
    outs = [os.path.join(out_dir, os.path.relpath(os.path.splitext(os.path.abspath(f))[0], common) + ".npy") for f in files]
    return {"cmd": " ".join(cmd), "load_ms": t["load"], "init_ms": t["init"], "run_ms_json": t["run"], "total_ms": t["total"],
            "run_s": (t["total"] - t["load"] - t["init"]) / 1000.0, "wall_s": wall, "gpu_busy": util, "timings_ms": t,
            "dev_mem_mib": peak - base_mem, "rss_mib": rss, "outputs": outs}


class Lib:
    """The public C API through ctypes (build/libwhisper-audio.so)."""

    class Params(ctypes.Structure):   # whisper_audio_encoder_params
        _fields_ = [("device", ctypes.c_int), ("dtype", ctypes.c_int), ("n_threads", ctypes.c_int),
                    ("gpu_device", ctypes.c_int), ("max_batch", ctypes.c_int), ("output_layer", ctypes.c_int),
                    ("final_ln", ctypes.c_bool), ("projector", ctypes.c_bool)]

    class Timings(ctypes.Structure):  # whisper_audio_timings
        _fields_ = [("mel_ms", ctypes.c_double), ("encode_ms", ctypes.c_double), ("upload_ms", ctypes.c_double),
                    ("compute_ms", ctypes.c_double), ("download_ms", ctypes.c_double), ("wall_ms", ctypes.c_double),
                    ("n_batches", ctypes.c_int64), ("n_windows", ctypes.c_int64)]

    def __init__(self):
        L = self.L = ctypes.CDLL(os.path.join(ROOT, "build", "libwhisper-audio.so"))
        L.whisper_audio_model_load.restype = ctypes.c_void_p
        L.whisper_audio_model_load.argtypes = [ctypes.c_char_p]
        L.whisper_audio_model_free.argtypes = [ctypes.c_void_p]
        L.whisper_audio_encoder_default_params.restype = Lib.Params
        L.whisper_audio_encoder_init.restype = ctypes.c_void_p
        L.whisper_audio_encoder_init.argtypes = [ctypes.c_void_p, Lib.Params]
        L.whisper_audio_encoder_free.argtypes = [ctypes.c_void_p]
        L.whisper_audio_encode_mel.restype = ctypes.c_bool
        L.whisper_audio_encode_mel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        L.whisper_audio_encode_mel_frames.restype = ctypes.c_bool
        L.whisper_audio_encode_mel_frames.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        L.whisper_audio_encoder_timings.restype = Lib.Timings
        L.whisper_audio_encoder_timings.argtypes = [ctypes.c_void_p]
        L.whisper_audio_encoder_reset_timings.argtypes = [ctypes.c_void_p]
        L.whisper_audio_encode_mel_tokens.restype = ctypes.c_int
        L.whisper_audio_encode_mel_tokens.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        L.whisper_audio_last_error.restype = ctypes.c_char_p

    def forward_ms(self, gguf, device, dtype, batch, n_frames, n_mels, d, threads, iters):
        """(median compute_ms of one encode_mel(_frames) call of batch windows of n_frames (projector excluded), batch).
        A tower that gives its tokens alone (Qwen3-Omni: its windows are its own) is timed one window a call,
        encode_mel_tokens (its projector included): (that, 1)."""
        L = self.L
        model = L.whisper_audio_model_load(gguf.encode())
        if not model:
            raise RuntimeError(L.whisper_audio_last_error().decode())
        p = L.whisper_audio_encoder_default_params()
        p.device = 2 if device == "cuda" else 1
        p.dtype = {"f16": 0, "bf16": 1, "f32": 0}[dtype]
        p.max_batch = batch
        if threads:
            p.n_threads = threads
        enc = L.whisper_audio_encoder_init(model, p)
        if not enc:
            raise RuntimeError(L.whisper_audio_last_error().decode())
        L.whisper_audio_model_free(model)
        mel = np.random.default_rng(42).uniform(-0.8, 1.2, (batch, n_mels, n_frames)).astype(np.float32)
        out = np.empty((batch, n_frames // 2, d), dtype=np.float32)
        times, tokens_alone = [], False
        for i in range(2 + iters):
            L.whisper_audio_encoder_reset_timings(enc)
            if tokens_alone:
                ok = L.whisper_audio_encode_mel_tokens(enc, mel.ctypes.data, 3000, n_frames, out.ctypes.data) >= 0
            else:
                ok = (L.whisper_audio_encode_mel(enc, mel.ctypes.data, batch, out.ctypes.data) if n_frames == 3000 else
                      L.whisper_audio_encode_mel_frames(enc, mel.ctypes.data, batch, n_frames, out.ctypes.data))
            if not ok and i == 0 and "tokens alone" in L.whisper_audio_last_error().decode():
                tokens_alone, batch = True, 1
                # one padded 30 s window's log-mel, n_frames of it holding audio
                mel = np.random.default_rng(42).uniform(-0.8, 1.2, (1, n_mels, 3000)).astype(np.float32)
                out = np.empty((3000, 8192), dtype=np.float32)
                continue
            if not ok:
                raise RuntimeError(L.whisper_audio_last_error().decode())
            t = L.whisper_audio_encoder_timings(enc)
            if i >= 2:
                times.append(t.compute_ms if t.compute_ms > 0 else t.wall_ms)
        L.whisper_audio_encoder_free(enc)
        return statistics.median(times), batch


# ---------------------------------------------------------------------------------------

def rel_l2(a, b):
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-30))


def cat(arrs):
    return np.concatenate([a.reshape(-1).astype(np.float64) for a in arrs])


def windows_of(t, n_samples):
    """(encoder windows, mel frames each) the tower runs for one input of n samples (its model's rule)."""
    name = t.name
    if t.spec:
        return t.spec.windows(n_samples)
    frames = max(2, -(-n_samples // 160))
    if name == "qwen2a":
        return 1, 3000
    if name == "voxtral":
        return -(-n_samples // N_WIN), 3000
    if frames <= 3000:
        return 1, frames + (frames & 1)
    return -(-frames // 3000), 3000


def timed_peer(t, fe, paths, batch, device):
    """The peer's timed loop (after the caller's warm-up): read, features, forward, tokens on the host."""
    import torch
    sampler = GpuSampler() if device == "cuda" else None
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    t0 = time.time()
    pcms = [read_wav(p) for p in paths]
    toks = t.run(fe, pcms, batch)
    sec = time.time() - t0
    busy = sampler.done()[0] if sampler else float("nan")
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    return toks, sec, busy, peak


def bench_model(name, args, shape, dtypes, sets, clips, n_hour, lib, results):
    """Every dtype and input set of one model; appends to results, returns False on a parity failure."""
    import torch
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    failed = False
    t0 = time.time()
    t = Tower(name, shape, args.work, args.ultravox_code, args.device)
    log("%s: built in %.1f s" % (name, time.time() - t0))
    if args.build_only:
        return True
    check_voxtral_method(t)
    fe = t.fe()
    d, mels = t.d, t.mels
    # the reference: transformers in f32 (TF32 off) on the 64 files
    t.to(torch.float32)
    ref = t.run(fe, [read_wav(p) for p in clips], args.batch)
    t.release()
    for dtype in dtypes:
        # ours first, while the peer holds no device memory
        ours = {}
        for label, files in sets:
            ours[label] = run_main(args, t.gguf, files, dtype, os.path.join(args.work, "out", name, dtype, label.replace(" ", "")))
        # another tree's main on the same inputs (--before-main), its outputs against ours
        before = {}
        for label, files in sets if args.before_main else []:
            before[label] = run_main(args, t.gguf, files, dtype, os.path.join(args.work, "before", name, dtype, label.replace(" ", "")),
                                     main=args.before_main)
        # the forward alone, for the windows each set needs
        fwd = {}
        for label, files in sets:
            nw, nf = windows_of(t, CLIP_S * SR) if files is clips else windows_of(t, n_hour)
            nw *= len(files)
            b = min(args.batch, nw)
            try:
                ms, b = lib.forward_ms(t.gguf, args.device, dtype, b, nf, mels, d, args.threads, args.iters)
            except RuntimeError as e:   # reported, not a parity failure
                log("%s %s %s: the forward alone failed: %s" % (name, dtype, label, e))
                ms = float("nan")
            fwd[label] = {"windows": nw, "frames": nf, "batch": b, "ms_per_batch": ms, "s": ms / 1000.0 * nw / b}
        # the peer: a warm-up pass, then the timed one
        t.to(tdt[dtype])
        peer = {}
        for label, files in sets:
            t.run(fe, [read_wav(p) for p in files], args.batch)
            peer[label] = timed_peer(t, fe, files, args.batch, args.device)
        t.release()
        for label, files in sets:
            o, (toks, sec, busy, peak) = ours[label], peer[label]
            mine = [np.load(p) for p in o["outputs"]]
            counts_ok = [a.shape for a in mine] == [b.shape for b in toks]
            e_pair = rel_l2(cat(mine), cat(toks)) if counts_ok else float("nan")
            row = {"model": name, "dtype": dtype, "input": label, "transformers_s": sec, "transformers_gpu_busy": busy,
                   "transformers_peak_alloc_mib": peak, "ours": {k: v for k, v in o.items() if k != "outputs"},
                   "forward": fwd[label], "tokens": int(sum(a.shape[0] for a in mine)), "token_counts_equal": counts_ok,
                   "ours_vs_transformers": e_pair}
            if label in before:
                b = before[label]
                theirs = [np.load(p) for p in b["outputs"]]
                row["before"] = {k: v for k, v in b.items() if k != "outputs"}
                row["before"]["vs_ours"] = rel_l2(cat(mine), cat(theirs)) if [a.shape for a in theirs] == [a.shape for a in mine] else float("nan")
                log("%s %s %s: before (%s) run %.3f s (wall %.3f), +%.0f MiB; after/before run x%.3f, outputs' rel L2 %.3g" % (
                    name, dtype, label, args.before_main, b["run_s"], b["wall_s"], b["dev_mem_mib"], b["run_s"] / o["run_s"],
                    row["before"]["vs_ours"]))
                for p in b["outputs"]:
                    os.remove(p)
            if files is clips and counts_ok:
                r = cat(ref)
                e_ours, e_peer = rel_l2(cat(mine), r), rel_l2(cat(toks), r)
                ok = e_ours <= (1e-5 if dtype == "f32" else BOUND * e_peer)
                row.update(ours_vs_f32=e_ours, transformers_vs_f32=e_peer, parity_ok=ok)
            else:
                ok = counts_ok
                row["parity_ok"] = ok
            if not counts_ok:
                log("%s %s %s: token shapes differ: ours %s, transformers %s" % (
                    name, dtype, label, [a.shape for a in mine[:3]], [b.shape for b in toks[:3]]))
            failed |= not ok
            results.append(row)
            log("%s %s %s: transformers %.3f s, ours run %.3f s (wall %.3f, load %.0f + init %.0f ms), x%.2f; fwd alone %.3f s; "
                "GPU busy %.0f%%, +%.0f MiB, RSS %.0f MiB; %d tokens, ours vs transformers %.3g%s" % (
                    name, dtype, label, sec, o["run_s"], o["wall_s"], o["load_ms"], o["init_ms"], sec / o["run_s"],
                    fwd[label]["s"], o["gpu_busy"], o["dev_mem_mib"], o["rss_mib"], row["tokens"], e_pair,
                    ", vs f32: ours %.3g, transformers %.3g" % (row["ours_vs_f32"], row["transformers_vs_f32"])
                    if "ours_vs_f32" in row else ""))
            for p in o["outputs"]:
                os.remove(p)
    del t, ref
    return not failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default=None, help="bf16,f16 on cuda (default); f32 on the CPU (default there)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (d 64, 3 layers) for a run on the CPU")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--n-files", type=int, default=64)
    ap.add_argument("--hour-s", type=float, default=None, help="the long input's seconds (3595; --tiny: 95)")
    ap.add_argument("--threads", type=int, default=0, help="main's -t and the forward's threads (default: main's)")
    ap.add_argument("--iters", type=int, default=5, help="timed calls of the forward alone (median)")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "tower-bench"))
    ap.add_argument("--ultravox-code", default=os.path.join(ROOT, "tests", "gpu", ".ultravox"))
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--build-only", action="store_true", help="make the audio, checkpoints and GGUFs, then stop")
    ap.add_argument("--before-main", default=None, help="another tree's main, run on the same inputs after ours (before/after)")
    args = ap.parse_args()
    dtypes = (args.dtypes or ("f32" if args.device == "cpu" else "bf16,f16")).split(",")
    hour_s = args.hour_s if args.hour_s is not None else (95.0 if args.tiny else 3595.0)
    shape = TINY if args.tiny else REAL
    os.makedirs(args.work, exist_ok=True)

    import torch
    import transformers
    log("torch %s, transformers %s, device %s%s" % (torch.__version__, transformers.__version__, args.device,
                                                    " (%s)" % torch.cuda.get_device_name(0) if args.device == "cuda" else ""))
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    clips, hour = make_audio(args.work, args.n_files, hour_s)
    sets = [("%d x %d s" % (len(clips), CLIP_S), clips), ("%.0f s" % hour_s, [hour])]
    n_hour = len(read_wav(hour))
    lib = Lib()

    results = []
    ok_all = True
    for name in args.models.split(","):
        if name == "ultravox" and not os.path.isfile(os.path.join(args.ultravox_code, "ultravox", "model", "ultravox_model.py")):
            log("ultravox: skipped: no %s/ultravox/model/ultravox_model.py (tests/gpu/make-ultravox-code.sh makes it; "
                "carry tests/gpu/.ultravox)" % args.ultravox_code)
            ok_all = False
            continue
        try:
            ok_all &= bench_model(name, args, shape, dtypes, sets, clips, n_hour, lib, results)
        except Exception:
            import traceback
            log("%s: FAILED:\n%s" % (name, traceback.format_exc()))
            ok_all = False
    failed = not ok_all

    if args.build_only:
        return 0
    speed = ["| model | dtype | input | transformers s | ours run s | ours wall s | speed-up | tower fwd alone s | GPU busy ours / tr | "
             "device MiB ours / tr | RSS MiB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        o = r["ours"]
        speed.append("| %s | %s | %s | %.3f | %.3f | %.3f | x%.2f | %.3f | %.0f%% / %.0f%% | %.0f / %.0f | %.0f |" % (
            r["model"], r["dtype"], r["input"], r["transformers_s"], o["run_s"], o["wall_s"], r["transformers_s"] / o["run_s"],
            r["forward"]["s"], o["gpu_busy"], r["transformers_gpu_busy"], o["dev_mem_mib"], r["transformers_peak_alloc_mib"],
            o["rss_mib"]))
    par = ["| model | dtype | input | tokens | ours vs f32 | transformers vs f32 | ratio | ours vs transformers | ok |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "ours_vs_f32" in r:
            ratio = "%.2fx" % (r["ours_vs_f32"] / r["transformers_vs_f32"]) if r["transformers_vs_f32"] > 0 else "-"
            par.append("| %s | %s | %s | %d | %.3g | %.3g | %s | %.3g | %s |" % (
                r["model"], r["dtype"], r["input"], r["tokens"], r["ours_vs_f32"], r["transformers_vs_f32"], ratio,
                r["ours_vs_transformers"], "ok" if r["parity_ok"] else "FAIL"))
        else:
            par.append("| %s | %s | %s | %d | | | | %.3g | %s |" % (r["model"], r["dtype"], r["input"], r["tokens"],
                                                                  r["ours_vs_transformers"], "ok" if r["parity_ok"] else "FAIL"))
    note = ("ours run s: main's total less load and init (decode, tower, writing the .npy files); wall: the process; "
            "device MiB: ours the peak of nvidia-smi's memory.used less the idle figure, transformers torch's peak allocated; "
            "tower fwd alone: the encoder forward's compute (C API, batch %d, random log-mel, projector excluded); "
            "transformers: numpy read, WhisperFeatureExtractor(device=%s), tower + projector (sdpa), tokens to the host, "
            "after a warm-up pass. Bound: ours vs f32 within %.2fx transformers' own." % (args.batch, args.device, BOUND))
    print()
    print("\n".join(speed))
    print()
    print("\n".join(par))
    print(note)
    print("towerbench:", "FAILED (parity)" if failed else "parity ok; %d runs" % len(results))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "tower-bench.json"), "w") as f:
            json.dump({"shape": "tiny" if args.tiny else "real", "device": args.device, "hour_s": hour_s, "results": results},
                      f, indent=1, default=str)
        with open(os.path.join(args.out, "tower-bench.md"), "w") as f:
            f.write("\n".join(speed) + "\n\n" + "\n".join(par) + "\n\n" + note + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
