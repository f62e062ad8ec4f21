#!/usr/bin/env python3
"""Where one forward's time goes on the GPU: a CUPTI timeline of the library's replayed graph.

torch.profiler (Kineto, CUPTI underneath) records every kernel the process runs, ours included:
the library is called through the Python package (whisper_audio.Model.encode_mel, one call a
forward: the mel upload, the CUDA graph's replay, the f32 download). For each dtype and batch it
keeps the fastest of a few calls and prints

  - the replay's span (first kernel's start to last kernel's end), the time kernels ran and the
    gaps between them (launch latency inside the graph and idle time);
  - the time by kind of kernel (GEMM by linear: qkv, out, fc1, fc2, the stem's conv; attention;
    LayerNorm; the GELU epilogue; FP8 quantization; the rest), with each GEMM's and attention's
    TFLOP/s from the FLOPs of its shape;
  - the largest gaps with the kernels on either side.

Run on the GPU machine from the repository root (the library built: build/libwhisper-audio.so):
    python3 tests/gpu/timeline.py [--size large-v3] [--dtypes bf16,fp8] [--batches 1,32] [--out DIR]
The raw trace of each case is written to DIR/timeline-<dtype>-b<batch>.json.gz (chrome://tracing,
Perfetto).
"""
import argparse
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("WHISPER_AUDIO_LIBRARY", os.path.join(ROOT, "build/libwhisper-audio.so"))
import whisper_audio  # noqa: E402

SIZES = {"base": (512, 6, 8, 2048, 80), "medium": (1024, 24, 16, 4096, 80), "large-v3": (1280, 32, 20, 5120, 128)}
T = 1500          # positions a 30 s window has after the stem


def kind(name):
    n = name.lower()
    for k, keys in (("attention", ("attention",)), ("layernorm", ("layer_norm",)), ("epilogue", ("epilogue",)),
                    ("quantize", ("quantize",)), ("im2col", ("im2col",)), ("convert", ("convert",))):
        if any(s in n for s in keys):
            return k
    if any(s in n for s in ("gemm", "nvjet", "xmma", "cutlass", "sm90", "matmul")):
        return "gemm"
    return "other"


def label_gemms(kernels):
    """Names each GEMM by its linear: the stem's convs before the first attention kernel (its
    last GEMM is layer 0's qkv), then out, fc1, fc2, qkv around each layer."""
    first_att = next((i for i, k in enumerate(kernels) if k["kind"] == "attention"), len(kernels))
    gemm_idx = [i for i, k in enumerate(kernels) if k["kind"] == "gemm"]
    before = [i for i in gemm_idx if i < first_att]
    for i in before[:-1]:
        kernels[i]["kind"] = "gemm conv"
    if before:
        kernels[before[-1]]["kind"] = "gemm qkv"
    cycle = ("gemm out", "gemm fc1", "gemm fc2", "gemm qkv")
    for j, i in enumerate(i for i in gemm_idx if i > first_att):
        kernels[i]["kind"] = cycle[j % 4]


def replays(events):
    """Splits the trace's GPU work into calls: each begins with the mel's host-to-device copy."""
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    calls, cur = [], None
    for e in gpu:
        if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"] and (cur is None or cur["kernels"]):
            cur = {"kernels": [], "copies": []}
            calls.append(cur)
        if cur is None:
            continue
        if e["cat"] == "kernel":
            cur["kernels"].append({"name": e["name"], "ts": e["ts"], "dur": e["dur"], "kind": kind(e["name"]),
                                   "grid": e.get("args", {}).get("grid"), "block": e.get("args", {}).get("block")})
        else:
            cur["copies"].append(e)
    return [c for c in calls if c["kernels"]]


def analyse(call, size, batch):
    d, n_layer, n_head, ff, _ = SIZES[size]
    ks = call["kernels"]
    label_gemms(ks)
    t0, t1 = ks[0]["ts"], max(k["ts"] + k["dur"] for k in ks)
    busy, end = 0.0, t0
    gaps = []
    for a, b in zip([None] + ks[:-1], ks):
        s, e = b["ts"], b["ts"] + b["dur"]
        if s > end and a is not None:
            gaps.append((s - end, a["name"], b["name"]))
        busy += max(0.0, e - max(s, end))
        end = max(end, e)
    rows = batch * T
    flops = {"gemm qkv": 2 * rows * d * 3 * d, "gemm out": 2 * rows * d * d, "gemm fc1": 2 * rows * d * ff,
             "gemm fc2": 2 * rows * d * ff, "attention": 4 * batch * n_head * T * T * (d // n_head)}
    by = {}
    for k in ks:
        s = by.setdefault(k["kind"], {"us": 0.0, "n": 0, "names": {}})
        s["us"] += k["dur"]
        s["n"] += 1
        s["names"][k["name"][:60]] = s["names"].get(k["name"][:60], 0) + 1
    for k, s in by.items():
        if k in flops and s["n"]:
            s["tflops"] = flops[k] * s["n"] / (s["us"] * 1e-6) / 1e12
    return {"span_us": t1 - t0, "busy_us": busy, "gap_us": (t1 - t0) - busy, "n_kernels": len(ks), "by_kind": by,
            "top_gaps": sorted(gaps, reverse=True)[:8], "n_gaps_over_2us": sum(1 for g in gaps if g[0] > 2.0),
            "gap_hist": {"<1us": sum(g[0] for g in gaps if g[0] < 1), "1-3us": sum(g[0] for g in gaps if 1 <= g[0] < 3),
                         ">=3us": sum(g[0] for g in gaps if g[0] >= 3)}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="large-v3")
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    model = os.path.join(ROOT, f"build/{args.size}-random.gguf")
    if not os.path.exists(model):
        subprocess.run([sys.executable, os.path.join(ROOT, "convert/convert-hf-to-gguf.py"), "--random", args.size, "-o", model,
                        "--outtype", "f16"], check=True, stderr=subprocess.DEVNULL)
    n_mels = SIZES[args.size][4]
    results = []
    for dt in args.dtypes.split(","):
        for b in (int(x) for x in args.batches.split(",")):
            m = whisper_audio.Model(model, device="cuda", dtype=dt, batch=b)
            mel = (np.random.default_rng(0).random((b, n_mels, 3000), dtype=np.float32) * 2.3 - 0.9)
            for _ in range(3):
                m.encode_mel(mel)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    m.encode_mel(mel)
            m.close()
            path = os.path.join(args.out, f"timeline-{dt}-b{b}.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
            with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
                g.write(f.read())
            os.remove(path)
            calls = replays(events)
            if not calls:
                print(f"timeline {dt} b{b}: no kernels recorded (CUPTI saw none of the library's work)")
                continue
            each = [analyse(c, args.size, b) for c in calls]
            r = min(each, key=lambda r: r["span_us"])
            spans = sorted(e["span_us"] for e in each)
            # the least span is analysed; the median is what bench's median forward compares with
            r.update(dtype=dt, batch=b, spans_us=spans, span_median_us=spans[len(spans) // 2])
            results.append(r)
            print(f"\ntimeline {args.size} {dt} b{b}: replay span {r['span_us'] / 1e3:.3f} ms ({r['span_us'] / 1e3 / b:.3f} ms/window; "
                  f"the least of {len(spans)} calls, median {r['span_median_us'] / 1e3:.3f}), "
                  f"kernels {r['busy_us'] / 1e3:.3f} ms, gaps {r['gap_us'] / 1e3:.3f} ms over {r['n_kernels']} kernels "
                  f"(gaps <1 us {r['gap_hist']['<1us']:.0f} us, 1-3 us {r['gap_hist']['1-3us']:.0f}, >=3 us {r['gap_hist']['>=3us']:.0f})")
            print("| kind | kernels | ms | share of span | TFLOP/s | names |")
            print("| --- | ---: | ---: | ---: | ---: | --- |")
            for k, s in sorted(r["by_kind"].items(), key=lambda kv: -kv[1]["us"]):
                names = "; ".join(f"{n} x{c}" for n, c in sorted(s["names"].items(), key=lambda nc: -nc[1])[:2])
                tf = f"{s['tflops']:.0f}" if "tflops" in s else ""
                print(f"| {k} | {s['n']} | {s['us'] / 1e3:.3f} | {100 * s['us'] / r['span_us']:.1f}% | {tf} | {names} |")
            print("largest gaps: " + "; ".join(f"{g:.1f} us {a[:32]} -> {bn[:32]}" for g, a, bn in r["top_gaps"][:5]))
    with open(os.path.join(args.out, "timeline.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
