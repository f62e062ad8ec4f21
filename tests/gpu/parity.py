#!/usr/bin/env python3
"""GPU parity: whisper-audio on CUDA against transformers, for every real Whisper shape.

For tiny, base, small, medium and large-v3 (random weights: transformers' own init, and a
"wide" variant with init_std 0.06, biases ~ N(0, 0.1), LayerNorm weights ~ N(1, 0.3)), one
random log-mel batch goes through
  - transformers in float64 on the CPU, eager attention: the reference;
  - transformers sdpa on the GPU in f16 and in bf16: the peer's own error;
  - whisper-audio (build/libwhisper-audio.so through python/whisper_audio) on CUDA in f16, bf16
    and fp8 (bf16 with the linear layers' GEMMs in FP8 e4m3).
Ours must be within 1.25x transformers' error in the same dtype; fp8's error is reported beside
bf16's (transformers has no FP8 mode to hold it to) and must be finite. Prints each layer's move
of the residual stream (|out - in| / |in|, float64) and a table; exits 1 on a failure.

Run on the GPU machine from the repository root, after `make -j16`:
    python3 tests/gpu/parity.py [--sizes tiny,base] [--out DIR]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

SIZES = {  # d_model, layers, heads, ffn, mels
    "tiny": (384, 4, 6, 1536, 80),
    "base": (512, 6, 8, 2048, 80),
    "small": (768, 12, 12, 3072, 80),
    "medium": (1024, 24, 16, 4096, 80),
    "large-v3": (1280, 32, 20, 5120, 128),
}
BOUND = 1.25
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_encoder(size, variant, seed):
    d, n_layer, n_head, ff, n_mels = SIZES[size]
    std = 0.06 if variant == "wide" else 0.02
    cfg = WhisperConfig(d_model=d, encoder_layers=n_layer, encoder_attention_heads=n_head, encoder_ffn_dim=ff,
                        decoder_layers=1, decoder_attention_heads=n_head, decoder_ffn_dim=ff, num_mel_bins=n_mels,
                        max_source_positions=1500, init_std=std, vocab_size=128)
    torch.manual_seed(seed)
    enc = WhisperEncoder(cfg).eval()
    with torch.no_grad():
        for name, p in enc.named_parameters():
            if name == "embed_positions.weight":
                continue                                   # sinusoids, as transformers sets them
            if p.dim() >= 2:
                p.normal_(0.0, std)
            elif variant == "wide":
                if "layer_norm" in name and name.endswith("weight"):
                    p.normal_(1.0, 0.3)
                else:
                    p.normal_(0.0, 0.1)
            else:
                p.fill_(1.0 if ("layer_norm" in name and name.endswith("weight")) else 0.0)
        # embed_positions: Whisper's sinusoids (what a real checkpoint holds)
        T = 1500
        inc = math.log(10000) / (d // 2 - 1)
        inv = torch.exp(-inc * torch.arange(d // 2, dtype=torch.float64))
        t = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        enc.embed_positions.weight.copy_(torch.cat([torch.sin(t), torch.cos(t)], dim=1).float())
    return cfg, enc


def convert(cfg, enc, workdir):
    """Writes an HF-style directory (WhisperModel key prefix) and converts it with ours."""
    hf = os.path.join(workdir, "hf")
    os.makedirs(hf, exist_ok=True)
    cfg.to_json_file(os.path.join(hf, "config.json"))
    save_file({"encoder." + k: v.contiguous() for k, v in enc.state_dict().items()}, os.path.join(hf, "model.safetensors"))
    out = os.path.join(workdir, "model.gguf")
    subprocess.run([sys.executable, os.path.join(ROOT, "convert/convert-hf-to-gguf.py"), hf, "-o", out, "--outtype", "f32"],
                   check=True, stderr=subprocess.DEVNULL)
    return out


class Ours:
    """whisper-audio through its Python package (python/whisper_audio: the one ctypes copy of
    the C API), on the library given."""

    def __init__(self, lib_path):
        os.environ["WHISPER_AUDIO_LIBRARY"] = lib_path        # read when the package loads
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import whisper_audio
        self.wa = whisper_audio

    def encode(self, model_path, mel, d_model, dtype):
        m = self.wa.Model(model_path, device="cuda", dtype=dtype, batch=mel.shape[0])
        try:
            out = m.encode_mel(np.ascontiguousarray(mel, dtype=np.float32))
            assert out.shape == (mel.shape[0], 1500, d_model)
            return out, m.backend
        finally:
            m.close()


def rel(a, ref):
    a = a.astype(np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--variants", default="default,wide")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--lib", default=os.path.join(ROOT, "build/libwhisper-audio.so"))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()

    ours = Ours(args.lib)
    dev = torch.device("cuda")
    rows, failed = [], False
    for size in args.sizes.split(","):
        for variant in args.variants.split(","):
            t0 = time.time()
            d, n_layer, n_head, ff, n_mels = SIZES[size]
            cfg, enc = make_encoder(size, variant, seed=1234 + n_layer)
            torch.manual_seed(7)
            mel = (torch.rand(args.batch, n_mels, 3000) * 2.3 - 0.9)       # a log-mel's range
            with tempfile.TemporaryDirectory() as work:
                gguf = convert(cfg, enc, work)

                # reference: float64, eager, CPU; per-layer residual moves from hooks
                enc64 = WhisperEncoder(cfg)
                enc64.load_state_dict(enc.state_dict())
                enc64 = enc64.double().eval()
                enc64.config._attn_implementation = "eager"
                moves = []
                hooks = [l.register_forward_hook(lambda m, i, o: moves.append(
                    float((o[0] if isinstance(o, tuple) else o).sub(i[0]).norm() / i[0].norm()))) for l in enc64.layers]
                with torch.no_grad():
                    ref = enc64(mel.double()).last_hidden_state.numpy()
                for h in hooks:
                    h.remove()
                del enc64

                row = {"size": size, "variant": variant, "move_mean": float(np.mean(moves)), "move_min": float(np.min(moves))}
                for dtype, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
                    encg = WhisperEncoder(cfg)
                    encg.load_state_dict(enc.state_dict())
                    encg = encg.to(dev, tdt).eval()
                    encg.config._attn_implementation = "sdpa"
                    with torch.no_grad():
                        theirs = encg(mel.to(dev, tdt)).last_hidden_state.float().cpu().numpy()
                    del encg
                    torch.cuda.empty_cache()
                    got, backend = ours.encode(gguf, mel.numpy(), d, dtype)
                    e_t, e_o = rel(theirs, ref), rel(got, ref)
                    ok = np.isfinite(got).all() and e_o <= BOUND * e_t
                    failed |= not ok
                    row[dtype] = {"transformers": e_t, "ours": e_o, "ratio": e_o / e_t, "ok": bool(ok), "backend": backend}
                # FP8 GEMMs (bf16 elsewhere): no transformers counterpart; reported beside bf16's
                got, backend = ours.encode(gguf, mel.numpy(), d, "fp8")
                failed |= not np.isfinite(got).all()
                row["fp8"] = {"ours": rel(got, ref), "finite": bool(np.isfinite(got).all()), "backend": backend}
            row["seconds"] = time.time() - t0
            rows.append(row)
            print(f"{size:9s} {variant:7s} layer moves mean {row['move_mean']:.1%} min {row['move_min']:.1%}  "
                  f"f16 {row['f16']['ours']:.2e} vs {row['f16']['transformers']:.2e}  "
                  f"bf16 {row['bf16']['ours']:.2e} vs {row['bf16']['transformers']:.2e}  fp8 {row['fp8']['ours']:.2e}  "
                  f"({row['seconds']:.0f} s)", flush=True)

    with open(os.path.join(args.out, "parity.json"), "w") as f:
        json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print()
    print(f"parity on {torch.cuda.get_device_name()}, torch {torch.__version__}; relative L2 error vs float64, batch {args.batch}")
    print(f"| size | init | layer move mean/min | f16 ours | f16 transformers | ratio | bf16 ours | bf16 transformers | ratio | pass | fp8 ours | fp8 / bf16 transformers |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['size']} | {r['variant']} | {r['move_mean']:.0%} / {r['move_min']:.0%} | {r['f16']['ours']:.2e} | "
              f"{r['f16']['transformers']:.2e} | {r['f16']['ratio']:.2f} | {r['bf16']['ours']:.2e} | "
              f"{r['bf16']['transformers']:.2e} | {r['bf16']['ratio']:.2f} | "
              f"{'yes' if r['f16']['ok'] and r['bf16']['ok'] else 'NO'} | {r['fp8']['ours']:.2e} | "
              f"{r['fp8']['ours'] / r['bf16']['transformers']:.2f} |")
    print("parity:", "FAILED" if failed else f"passed (every f16/bf16 error within {BOUND}x transformers'; fp8 finite, "
          "reported only)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
