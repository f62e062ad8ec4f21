#!/usr/bin/env python3
"""Speed, side by side on one GPU: whisper-audio (./bench) against transformers' WhisperEncoder.

For each size (default large-v3), dtype (f16, bf16, fp8) and batch (1, 8, 32): transformers eager
and sdpa, sdpa replayed as a CUDA graph (torch.cuda.CUDAGraph), and ours. Random weights
(init_std 0.02) and random log-mel input; medians of CUDA-event or wall times after warm-up.
Ours is timed end to end by ./bench (the mel upload, the graph replay, the f32 download
and copy into the caller's buffer); transformers' input and output stay on the GPU.
fp8 is ours with FP8 GEMMs (bf16 otherwise) against transformers in bf16 (it has no FP8 mode).

Run on the GPU machine from the repository root, after `make -j16`:
    python3 tests/gpu/compare.py [--sizes large-v3] [--batches 1,8,32] [--out DIR] [--before TREE]

--before TREE: another tree's ./bench (built there) timed in the same rows, before and after
alternating three times (the minimum of each side kept), so that a change is compared with the
GPU's state shared by both.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import torch
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

SIZES = {"tiny": (384, 4, 6, 1536, 80), "base": (512, 6, 8, 2048, 80), "small": (768, 12, 12, 3072, 80),
         "medium": (1024, 24, 16, 4096, 80), "large-v3": (1280, 32, 20, 5120, 128)}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def time_cuda(fn, warmup=3, iters=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return ms[len(ms) // 2]


def make_encoder(size, dtype):
    d, n_layer, n_head, ff, n_mels = SIZES[size]
    cfg = WhisperConfig(d_model=d, encoder_layers=n_layer, encoder_attention_heads=n_head, encoder_ffn_dim=ff,
                        decoder_layers=1, decoder_attention_heads=n_head, decoder_ffn_dim=ff, num_mel_bins=n_mels,
                        max_source_positions=1500, vocab_size=128)
    torch.manual_seed(0)
    with torch.device("cuda"):
        enc = WhisperEncoder(cfg)
    return enc.to(dtype).eval(), n_mels


def transformers_times(enc, n_mels, dtype, batch, compile=False):
    """eager and sdpa (the attention implementation is read at each forward), then sdpa as a CUDA graph;
    compile: also torch.compile(mode="max-autotune-no-cudagraphs") of sdpa, the strongest configuration
    at batch 32 (its autotuning takes minutes)."""
    res = {}
    x = (torch.rand(batch, n_mels, 3000, device="cuda") * 2.3 - 0.9).to(dtype)
    with torch.no_grad():
        for attn in ("eager", "sdpa"):
            enc.config._attn_implementation = attn
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            res[attn] = time_cuda(lambda: enc(x))
            res[attn + "_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20   # activations only
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                enc(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = enc(x)
        res["sdpa_graph"] = time_cuda(lambda: g.replay())
        del g, y
        if compile:
            import time
            t = time.time()
            fast = torch.compile(enc, mode="max-autotune-no-cudagraphs")
            for _ in range(2):
                fast(x)
            torch.cuda.synchronize()
            res["compile_s"] = time.time() - t
            res["compile"] = time_cuda(lambda: fast(x))
            del fast
            torch._dynamo.reset()
    torch.cuda.empty_cache()
    return res


def ours(model, dtype, batch, profile=False, tree=ROOT):
    cmd = [os.path.join(tree, "bench"), "-m", model, "--device", "cuda", "--dtype", dtype, "-b", str(batch), "-n", "20"]
    if profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    ms = float(re.search(r"([\d.]+) ms per batch", out).group(1))
    tflops = float(re.search(r"([\d.]+) TFLOP/s in the forward", out).group(1))
    compute = float(re.search(r"of which compute ([\d.]+) ms", out).group(1))
    own = float(re.search(r"own allocations ([\d.]+) MiB", out).group(1))
    delta = re.search(r"used-memory delta ([\d.-]+) MiB", out)
    return {"ms": ms, "compute_ms": compute, "tflops": tflops, "own_mib": own, "delta_mib": float(delta.group(1)) if delta else None, "text": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="large-v3")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--dtypes", default="f16,bf16,fp8")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--compile-batches", default="", help="batches that also time torch.compile (max-autotune, no graphs)")
    ap.add_argument("--before", default=None, help="another tree's root, its ./bench built: timed beside ours")
    args = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    rows = []
    for size in args.sizes.split(","):
        model = os.path.join(ROOT, f"build/{size}-random.gguf")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(ROOT, "convert/convert-hf-to-gguf.py"), "--random", size, "-o", model,
                            "--outtype", "f16"], check=True, stderr=subprocess.DEVNULL)
        for dt in args.dtypes.split(","):
            tdt = torch.float16 if dt == "f16" else torch.bfloat16
            enc, n_mels = make_encoder(size, tdt)
            for b in (int(x) for x in args.batches.split(",")):
                t = transformers_times(enc, n_mels, tdt, b, compile=str(b) in args.compile_batches.split(",") and dt != "fp8")
                o = ours(model, dt, b, profile=(b in (1, 32)))
                before = None
                if args.before:   # alternate the trees; each side's fastest call
                    for _ in range(3):
                        ob, oa = ours(model, dt, b, tree=args.before), ours(model, dt, b)
                        before = ob if before is None or ob["ms"] < before["ms"] else before
                        o = {**o, "ms": min(o["ms"], oa["ms"]), "compute_ms": min(o["compute_ms"], oa["compute_ms"]),
                             "tflops": max(o["tflops"], oa["tflops"])}
                best = min(t["sdpa"], t["sdpa_graph"], t["eager"])
                row = {"size": size, "dtype": dt, "batch": b, **t,
                       "ours_ms": o["ms"], "ours_compute_ms": o["compute_ms"], "ours_tflops": o["tflops"], "ours_own_mib": o["own_mib"],
                       "ours_delta_mib": o["delta_mib"], "speedup_vs_best": best / o["ms"],
                       "speedup_vs_sdpa": t["sdpa"] / o["ms"], "speedup_vs_graph": t["sdpa_graph"] / o["ms"],
                       "compute_speedup_vs_sdpa": t["sdpa"] / o["compute_ms"],
                       "compute_speedup_vs_graph": t["sdpa_graph"] / o["compute_ms"]}
                if before:
                    row.update(before_ms=before["ms"], before_compute_ms=before["compute_ms"], before_tflops=before["tflops"])
                    print(f"{size} {dt} b{b}: before tree {before['ms']:.2f} ms end to end, {before['compute_ms']:.2f} forward; "
                          f"after {o['ms']:.2f}, {o['compute_ms']:.2f}", flush=True)
                rows.append(row)
                print(f"{size} {dt} b{b}: transformers eager {t['eager']:.2f} sdpa {t['sdpa']:.2f} sdpa+graph "
                      f"{t['sdpa_graph']:.2f} ms | ours {o['ms']:.2f} ms end to end, {o['compute_ms']:.2f} forward ({o['tflops']:.0f} TFLOP/s) | "
                      f"x{row['speedup_vs_graph']:.2f} vs graph, x{row['speedup_vs_sdpa']:.2f} vs sdpa", flush=True)
                if "compile" in t:
                    row["speedup_vs_compile"] = t["compile"] / o["compute_ms"]
                    print(f"{size} {dt} b{b}: torch.compile max-autotune-no-cudagraphs {t['compile']:.2f} ms "
                          f"(compiled in {t['compile_s']:.0f} s) | ours forward {o['compute_ms']:.2f}: x{row['speedup_vs_compile']:.2f}", flush=True)
                if b in (1, 32):
                    print(o["text"], flush=True)
            del enc
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "rows": rows}, f, indent=1)
    print()
    print(f"compare on {gpu}, torch {torch.__version__}: ms per batch (median); ours end to end (mel upload, forward, f32 download) and forward only")
    print("| size | dtype | batch | tr eager | tr sdpa | tr sdpa graph | ours e2e | ours fwd | fwd ms/clip | fwd TFLOP/s | e2e vs graph | e2e vs sdpa | fwd vs graph | fwd vs sdpa | tr sdpa act. MiB | ours own MiB | ours dev delta MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['size']} | {r['dtype']} | {r['batch']} | {r['eager']:.2f} | {r['sdpa']:.2f} | {r['sdpa_graph']:.2f} | "
              f"{r['ours_ms']:.2f} | {r['ours_compute_ms']:.2f} | {r['ours_compute_ms'] / r['batch']:.2f} | {r['ours_tflops']:.0f} | "
              f"x{r['speedup_vs_graph']:.2f} | x{r['speedup_vs_sdpa']:.2f} | x{r['compute_speedup_vs_graph']:.2f} | "
              f"x{r['compute_speedup_vs_sdpa']:.2f} | {r['sdpa_peak_mib']:.0f} | {r['ours_own_mib']:.0f} | {r['ours_delta_mib']} |")
    if any("compile" in r for r in rows):
        print("\ntorch.compile (max-autotune-no-cudagraphs) against our forward, ms per batch")
        print("| size | dtype | batch | tr compile | tr compile ms/clip | ours fwd | fwd ms/clip | fwd vs compile |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in (r for r in rows if "compile" in r):
            print(f"| {r['size']} | {r['dtype']} | {r['batch']} | {r['compile']:.2f} | {r['compile'] / r['batch']:.2f} | "
                  f"{r['ours_compute_ms']:.2f} | {r['ours_compute_ms'] / r['batch']:.2f} | x{r['speedup_vs_compile']:.2f} |")
    if args.before:
        print(f"\nbefore ({args.before}) and after, each side's fastest of its calls, ms per batch")
        print("| size | dtype | batch | before e2e | after e2e | before fwd | after fwd | fwd after/before |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['size']} | {r['dtype']} | {r['batch']} | {r['before_ms']:.2f} | {r['ours_ms']:.2f} | "
                  f"{r['before_compute_ms']:.2f} | {r['ours_compute_ms']:.2f} | {r['ours_compute_ms'] / r['before_compute_ms']:.3f} |")


if __name__ == "__main__":
    main()
