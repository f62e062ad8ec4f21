#!/usr/bin/env python3
"""Loading a Hugging Face directory as it is against loading its GGUF (issue 25: at most 1.3x).

Writes a random fp16 checkpoint of a real Whisper shape as save_pretrained lays it out
(config.json + model.safetensors, model.encoder.* names; --decoder adds the decoder's tensors
too, as the real checkpoint holds them: the loader must skip them), converts it with
convert/convert-hf-to-gguf.py --outtype f16, checks that the library's GGUF of the directory
(main --save-gguf) is that file byte for byte, then times whisper_audio_model_load of each
(libwhisper-audio.so through ctypes), taking turns: warm (both in the page cache) and cold
(the files' pages dropped first with posix_fadvise DONTNEED: this run's files only, not the
machine's cache). Prints each one's median and minimum over --repeat rounds, the ratios, the
CPU and the load average (the machine may be shared). Needs numpy.

    python3 tests/cpu/bench-hf-load.py [--size large-v3|medium|base] [--decoder] [--repeat 11]
                                       [--dir DIR] [--lib build/libwhisper-audio.so] [--main build/main]
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = {  # d_model, layers, heads, ffn, mels
    "base": (512, 6, 8, 2048, 80), "medium": (1024, 24, 16, 4096, 80), "large-v3": (1280, 32, 20, 5120, 128),
}
N_VOCAB = 51866


def checkpoint_tensors(size, decoder):
    d, n_layer, _, f, n_mels = SIZES[size]
    t = [("conv1.weight", (d, n_mels, 3)), ("conv1.bias", (d,)), ("conv2.weight", (d, d, 3)), ("conv2.bias", (d,)),
         ("embed_positions.weight", (1500, d))]
    for i in range(n_layer):
        p = "layers.%d." % i
        t += [(p + "self_attn.k_proj.weight", (d, d)), (p + "self_attn.v_proj.weight", (d, d)), (p + "self_attn.v_proj.bias", (d,)),
              (p + "self_attn.q_proj.weight", (d, d)), (p + "self_attn.q_proj.bias", (d,)),
              (p + "self_attn.out_proj.weight", (d, d)), (p + "self_attn.out_proj.bias", (d,)),
              (p + "self_attn_layer_norm.weight", (d,)), (p + "self_attn_layer_norm.bias", (d,)),
              (p + "fc1.weight", (f, d)), (p + "fc1.bias", (f,)), (p + "fc2.weight", (d, f)), (p + "fc2.bias", (d,)),
              (p + "final_layer_norm.weight", (d,)), (p + "final_layer_norm.bias", (d,))]
    t += [("layer_norm.weight", (d,)), ("layer_norm.bias", (d,))]
    out = [("model.encoder." + n, s) for n, s in t]
    if decoder:
        out.append(("model.decoder.embed_tokens.weight", (N_VOCAB, d)))
        for i in range(n_layer):
            for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                      "encoder_attn.q_proj", "encoder_attn.k_proj", "encoder_attn.v_proj", "encoder_attn.out_proj"):
                out.append(("model.decoder.layers.%d.%s.weight" % (i, n), (d, d)))
            out += [("model.decoder.layers.%d.fc1.weight" % i, (f, d)), ("model.decoder.layers.%d.fc2.weight" % i, (d, f))]
    return out


def write_checkpoint(dst, size, decoder):
    d, n_layer, n_head, f, n_mels = SIZES[size]
    tensors = checkpoint_tensors(size, decoder)
    rng = np.random.default_rng(0)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "model.safetensors"), "wb") as fo:
        fo.write(struct.pack("<Q", len(h)) + h)
        for name, shape in tensors:
            a = rng.standard_normal(int(np.prod(shape)), dtype=np.float32)
            a *= 0.1 if name.endswith(".bias") or "norm" in name else 0.02
            if "layer_norm.weight" in name:
                a += 1
            fo.write(a.astype("<f2").tobytes())
    with open(os.path.join(dst, "config.json"), "w") as fo:
        json.dump({"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"], "d_model": d,
                   "encoder_layers": n_layer, "encoder_attention_heads": n_head, "encoder_ffn_dim": f,
                   "num_mel_bins": n_mels, "max_source_positions": 1500, "decoder_layers": n_layer,
                   "torch_dtype": "float16"}, fo, indent=2)


def evict(path):
    """path's pages (a directory: its files') out of the page cache; nothing else's."""
    for f in [os.path.join(path, x) for x in os.listdir(path)] if os.path.isdir(path) else [path]:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="large-v3")
    ap.add_argument("--decoder", action="store_true", help="the decoder's tensors too, as the real checkpoint")
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--dir", help="where to write the checkpoint and its GGUF (default: a temp dir, removed)")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libwhisper-audio.so"))
    ap.add_argument("--main", default=os.path.join(ROOT, "build", "main"))
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="bench-hf-load-")
    try:
        hf = os.path.join(work, "whisper-%s" % args.size)
        gguf = os.path.join(work, "whisper-%s.gguf" % args.size)
        if not os.path.isfile(os.path.join(hf, "model.safetensors")):
            write_checkpoint(hf, args.size, args.decoder)
        if not os.path.isfile(gguf):
            subprocess.run([sys.executable, os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"), hf, "-o", gguf,
                            "--outtype", "f16"], check=True, stderr=subprocess.DEVNULL)
        again = os.path.join(work, "again.gguf")
        subprocess.run([args.main, "-m", hf, "--save-gguf", again], check=True, capture_output=True)
        same = subprocess.run(["cmp", "-s", again, gguf]).returncode == 0
        os.remove(again)
        print("%s: %.0f MB of safetensors, %.0f MB of GGUF; main --save-gguf of the directory %s the converter's file"
              % (hf, os.path.getsize(os.path.join(hf, "model.safetensors")) / 1e6, os.path.getsize(gguf) / 1e6,
                 "is byte for byte" if same else "DIFFERS from"))

        lib = ctypes.CDLL(args.lib)
        lib.whisper_audio_model_load.restype = ctypes.c_void_p
        lib.whisper_audio_model_load.argtypes = [ctypes.c_char_p]
        lib.whisper_audio_model_free.argtypes = [ctypes.c_void_p]
        lib.whisper_audio_last_error.restype = ctypes.c_char_p
        times = {(p, c): [] for p in (gguf, hf) for c in (False, True)}
        for _ in range(args.repeat):
            for cold in (False, True):
                for p in (gguf, hf):
                    if cold:
                        evict(p)
                    t0 = time.perf_counter()
                    m = lib.whisper_audio_model_load(p.encode())
                    dt = (time.perf_counter() - t0) * 1000
                    if not m:
                        sys.exit(lib.whisper_audio_last_error().decode())
                    lib.whisper_audio_model_free(m)
                    times[(p, cold)].append(dt)
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
        print("CPU: %s, %d cores; load average %s" % (cpu, os.cpu_count(), open("/proc/loadavg").read().split()[:3]))
        for cold in (False, True):
            g, h = times[(gguf, cold)], times[(hf, cold)]
            print("%s  GGUF median %6.0f ms (min %6.0f)  HF directory median %6.0f ms (min %6.0f)  ratio %.2f (min %.2f)"
                  % ("cold" if cold else "warm", statistics.median(g), min(g), statistics.median(h), min(h),
                     statistics.median(h) / statistics.median(g), min(h) / min(g)))
        return 0 if same else 1
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
