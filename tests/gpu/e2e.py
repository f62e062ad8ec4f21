#!/usr/bin/env python3
"""The whole path, side by side on one GPU: ./main on an hour of audio against transformers'
best pipeline, and against our own forward alone (./bench).

Audio: tests/data's 70 s speech tiled to one hour, as a 16 kHz mono s16 WAV and as a 44.1
kHz stereo s16 WAV (resampled on our path). Models: base and large-v3 with random weights
(the converter's --random), f16 and bf16, batch 32. Per run: ms per window and windows/s
over main's run (its --json "run": decode, resample, log-mel, forward, download, pooling and
writing; model load and init excluded, reported apart), the GPU's busy fraction and peak
device memory (nvidia-smi sampled every 20 ms), and peak host RSS (the child's rusage).

transformers: the WAV read with numpy, cut into 30 s windows, WhisperFeatureExtractor on
the GPU (device="cuda") 32 windows at a time, WhisperEncoder with sdpa in the same dtype,
the output copied to the host as f32 (pooled on the GPU for the pooled row), timed from the
file read to the last row on the host, after a warm-up pass.

Run on the GPU machine from the repository root, after `make -j16`:
    python3 tests/gpu/e2e.py [--sizes base,large-v3] [--dtypes f16,bf16] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = {"base": (512, 6, 8, 2048, 80), "large-v3": (1280, 32, 20, 5120, 128)}


def tiled_wav(path, src_name, seconds):
    with wave.open(os.path.join(ROOT, "tests/data/audio", src_name)) as src:
        ch, width, rate = src.getnchannels(), src.getsampwidth(), src.getframerate()
        frames = src.readframes(src.getnframes())
    need = seconds * rate * ch * width
    with wave.open(path, "wb") as w:
        w.setnchannels(ch)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes((frames * (need // len(frames) + 1))[:need])


class GpuSampler:
    """nvidia-smi every 20 ms: mean utilisation and peak memory used while running."""

    def __init__(self):
        self.util, self.mem, self.stop = [], [], False
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                                      "-lms", "20"], stdout=subprocess.PIPE, text=True)
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
        self.proc.terminate()
        self.thread.join(timeout=2)
        return (sum(self.util) / len(self.util) if self.util else float("nan"), max(self.mem) if self.mem else float("nan"))


def run_main(model, wav, dtype, extra, out_dir):
    out = os.path.join(out_dir, "out.npy")
    cmd = [os.path.join(ROOT, "main"), "-m", model, "-f", wav, "-b", "32", "--device", "cuda", "--dtype", dtype,
           "--no-progress", "--json", "-o", out] + extra
    idle = GpuSampler()
    time.sleep(0.3)
    base_mem = idle.done()[1]
    sampler = GpuSampler()
    t0 = time.time()
    with open(out + ".stdout", "w+") as so, open(out + ".stderr", "w+") as se:
        p = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        _, status, ru = os.wait4(p.pid, 0)                     # this child's own peak RSS
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    wall = time.time() - t0
    util, peak_mem = sampler.done()
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {stderr[-2000:]}")
    j = json.loads(stdout)
    t = j["timings_ms"]
    size = os.path.getsize(out)
    os.remove(out)
    return {"windows": j["windows"], "run_ms": t["run"], "ms_per_window": t["run"] / j["windows"],
            "windows_per_s": 1000.0 * j["windows"] / t["run"], "load_ms": t["load"], "init_ms": t["init"], "init_pipeline_ms": t["init_pipeline"],
            "decode_ms": t["decode"], "worker_ms": t["encode"], "gpu_busy": util, "dev_mem_mib": peak_mem - base_mem, "out_mb": size / 1e6,
            "peak_rss_mib": ru.ru_maxrss / 1024.0, "wall_s": wall}


def forward_alone(model, dtype):
    r = subprocess.run([os.path.join(ROOT, "bench"), "-m", model, "--device", "cuda", "--dtype", dtype, "-b", "32", "-n", "10"],
                       capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        if "of which compute" in line:
            return float(line.split("(")[1].split(" ms per clip")[0])
    raise RuntimeError(r.stdout)


def transformers_pipeline(size, dtype_name, wav, pool):
    import torch
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    d, n_layer, n_head, ff, n_mels = SIZES[size]
    dtype = torch.float16 if dtype_name == "f16" else torch.bfloat16
    cfg = WhisperConfig(d_model=d, encoder_layers=n_layer, encoder_attention_heads=n_head, encoder_ffn_dim=ff,
                        decoder_layers=1, decoder_attention_heads=n_head, decoder_ffn_dim=ff, num_mel_bins=n_mels,
                        max_source_positions=1500, vocab_size=128, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device("cuda"):
        enc = WhisperEncoder(cfg).to(dtype).eval()
    fe = WhisperFeatureExtractor(feature_size=n_mels)

    def run():
        with wave.open(wav) as w:
            x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0
        n_win = -(-len(x) // 480000)
        windows = [x[i * 480000:(i + 1) * 480000] for i in range(n_win)]
        rows = []
        with torch.no_grad():
            for b in range(0, n_win, 32):
                feats = fe(windows[b:b + 32], sampling_rate=16000, return_tensors="pt", device="cuda").input_features
                h = enc(feats.to("cuda", dtype)).last_hidden_state
                rows.append((h.float().mean(dim=1) if pool else h.float()).cpu())
        torch.cuda.synchronize()
        return n_win
    run()                                                   # warm-up
    t0 = time.time()
    n_win = run()
    ms = (time.time() - t0) * 1000.0
    del enc
    torch.cuda.empty_cache()
    return {"windows": n_win, "ms_per_window": ms / n_win, "windows_per_s": 1000.0 * n_win / ms}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="base,large-v3")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--out", default=os.path.join(ROOT, "build/gpu-logs"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        wav16 = os.path.join(tmp, "hour_16k_mono.wav")
        wav44 = os.path.join(tmp, "hour_44k1_stereo.wav")
        tiled_wav(wav16, "long_70s_16k.wav", 3600)
        tiled_wav(wav44, "speech_44k1_stereo_s16.wav", 3600)
        for size in args.sizes.split(","):
            model = os.path.join(ROOT, f"build/{size}-random.gguf")
            if not os.path.exists(model):
                subprocess.run([sys.executable, os.path.join(ROOT, "convert/convert-hf-to-gguf.py"), "--random", size, "-o", model],
                               check=True, capture_output=True)
            for dtype in args.dtypes.split(","):
                fwd = forward_alone(model, dtype)
                runs = [("16k mono, --pool mean", wav16, ["--pool", "mean"], True),
                        ("16k mono, f16 rows", wav16, ["--outtype", "f16"], False),
                        ("16k mono, f32 rows", wav16, [], False),
                        ("44.1k stereo, --pool mean", wav44, ["--pool", "mean"], True)]
                for label, wav, extra, pool in runs:
                    r = run_main(model, wav, dtype, extra, tmp)
                    tf = transformers_pipeline(size, dtype, wav, pool) if wav == wav16 and "f16 rows" not in label else None
                    results.append({"size": size, "dtype": dtype, "run": label, "forward_ms": fwd, "ours": r, "transformers": tf})
                    tf_txt = (f", transformers {tf['ms_per_window']:.2f} ms/window (ours x{tf['ms_per_window'] / r['ms_per_window']:.2f})"
                              if tf else "")
                    print(f"e2e {size} {dtype} {label}: {r['ms_per_window']:.3f} ms/window ({r['windows_per_s']:.0f}/s), forward alone "
                          f"{fwd:.3f} (x{r['ms_per_window'] / fwd:.2f}), GPU busy {r['gpu_busy']:.0f}%, device +{r['dev_mem_mib']:.0f} MiB, "
                          f"RSS {r['peak_rss_mib']:.0f} MiB, load {r['load_ms']:.0f} + init {r['init_ms']:.0f} ms (pipeline {r['init_pipeline_ms']:.0f}), out {r['out_mb']:.0f} MB, "
                          f"run {r['run_ms']:.0f} ms = decode {r['decode_ms']:.0f} + ..., worker busy {r['worker_ms']:.0f} ms"
                          + tf_txt, flush=True)
    with open(os.path.join(args.out, "e2e.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\n| size | dtype | run | ours ms/window | windows/s | forward alone | ours/forward | transformers ms/window | speed-up | "
          "GPU busy | device MiB | RSS MiB | load+init ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in results:
        r, tf = x["ours"], x["transformers"]
        print(f"| {x['size']} | {x['dtype']} | {x['run']} | {r['ms_per_window']:.3f} | {r['windows_per_s']:.0f} | {x['forward_ms']:.3f} | "
              f"{r['ms_per_window'] / x['forward_ms']:.2f} | {tf['ms_per_window'] if tf else float('nan'):.3f} | "
              f"{(tf['ms_per_window'] / r['ms_per_window']) if tf else float('nan'):.2f} | {r['gpu_busy']:.0f}% | {r['dev_mem_mib']:.0f} | "
              f"{r['peak_rss_mib']:.0f} | {r['load_ms'] + r['init_ms']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
