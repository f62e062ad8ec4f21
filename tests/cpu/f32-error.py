#!/usr/bin/env python3
"""The CPU f32 path's error against float64, beside transformers' own f32 error, on random
Whisper-shaped encoders (transformers' WhisperEncoder, weights from a seed as
tests/data/make-tower-references.py randomises them) and on real speech log-mel
(tests/data/features): a 1,500-position window and a short unpadded one (50 frames, 25
positions), on each kernel set (VT_CPU_ISA). Measurement only (needs torch, transformers):

    PYTHONPATH=python WHISPER_AUDIO_LIBRARY=build/libwhisper-audio.so \\
        python tests/cpu/f32-error.py [--shape base] [--isa avx512,avx2,plain] [--layers N]

Prints, per case, relative L2 errors against float64: transformers f32 (its default attention),
ours per kernel set, and ours / transformers.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {   # d_model, heads, layers, ffn, mels
    "base": (512, 8, 6, 2048, 80),
    "large-v3": (1280, 20, 32, 5120, 128),
}


def randomise(module, seed):   # as tests/data/make-tower-references.py: every parameter random, f16 values
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)
            elif name.endswith("weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            p.copy_(p.half().float())


def config(shape, layers, positions=1500):
    d, h, n, ff, mels = SHAPES[shape]
    return WhisperConfig(d_model=d, encoder_attention_heads=h, encoder_layers=layers or n, encoder_ffn_dim=ff,
                         num_mel_bins=mels, max_source_positions=positions, decoder_layers=1, decoder_attention_heads=h,
                         decoder_ffn_dim=ff, vocab_size=128, max_target_positions=64)


def encoder(cfg, state):
    enc = WhisperEncoder(cfg).eval()
    if state is not None:
        state = dict(state)
        state["embed_positions.weight"] = state["embed_positions.weight"][:cfg.max_source_positions]
        enc.load_state_dict(state)
    return enc


def save_dir(path, cfg, state):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(cfg.to_dict(), architectures=["WhisperForConditionalGeneration"]), f)
    save_file({"model.encoder." + k: v.contiguous() for k, v in state.items()}, os.path.join(path, "model.safetensors"))


def rel(x, ref):
    x, ref = np.asarray(x, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def references(cfg, state, mel):
    """float64 and transformers f32 outputs of mel [n_mels, frames] (frames = 2 positions)."""
    c = config_like(cfg, mel.shape[-1] // 2)
    enc = encoder(c, state)
    with torch.no_grad():
        f32 = enc(torch.from_numpy(mel[None])).last_hidden_state[0].numpy()
        enc64 = enc.double()
        f64 = enc64(torch.from_numpy(mel[None]).double()).last_hidden_state[0].numpy()
    return f64, f32


def config_like(cfg, positions):
    c = WhisperConfig(**{k: v for k, v in cfg.to_dict().items() if k in WhisperConfig().to_dict()})
    c.max_source_positions = positions
    return c


def timing(model_dir, mel, args):
    import time
    import whisper_audio
    for isa in args.isa.split(","):
        os.environ["VT_CPU_ISA"] = isa
        with whisper_audio.Model(model_dir, device="cpu", n_threads=args.threads) as m:
            m.encode_mel(mel)
            times, cpu = [], []
            for _ in range(args.time):
                t0, c0 = time.perf_counter(), time.process_time()
                m.encode_mel(mel)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        # CPU time: on a machine shared with other work, wall time measures the neighbours too
        print(f"{os.environ.get('WHISPER_AUDIO_LIBRARY')} {isa}: wall min {min(times) * 1e3:.1f} ms, "
              f"CPU time min {min(cpu) * 1e3:.1f} median {sorted(cpu)[len(cpu) // 2] * 1e3:.1f} ms of {args.time}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="base", choices=SHAPES)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--isa", default="avx512,avx2,plain")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="1500,25")
    ap.add_argument("--time", type=int, default=0, help="time N encodes of a 1,500-position window per kernel set instead")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import whisper_audio

    cfg = config(args.shape, args.layers)
    enc = WhisperEncoder(cfg).eval()
    randomise(enc, args.seed)
    state = {k: v.detach().clone() for k, v in enc.state_dict().items()}
    mels = SHAPES[args.shape][4]
    mel_all = np.load(os.path.join(ROOT, "tests", "data", "features", f"speech_16k.mel{mels}.npy")).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        save_dir(tmp, cfg, state)
        if args.time:
            return timing(tmp, mel_all, args)
        print(f"{args.shape}: d {cfg.d_model}, {cfg.encoder_attention_heads} heads, {cfg.encoder_layers} layers, seed {args.seed}")
        for positions in [int(x) for x in args.lengths.split(",")]:
            mel = np.ascontiguousarray(mel_all[:, :2 * positions])
            f64, f32 = references(cfg, state, mel)
            e_hf = rel(f32, f64)
            line = f"  {positions:5d} positions: transformers f32 {e_hf:.3e}"
            for isa in args.isa.split(","):
                os.environ["VT_CPU_ISA"] = isa
                with whisper_audio.Model(tmp, device="cpu", n_threads=args.threads) as m:
                    ours = m.encode_mel(mel)
                e = rel(ours, f64)
                line += f" | {isa} {e:.3e} ({e / e_hf:.2f}x)"
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
