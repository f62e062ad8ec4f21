#!/usr/bin/env python3
"""Where a tower's run goes on the GPU: the kernels of one encode call, by name, and the device
memory the model and its encoder hold.

torch.profiler (CUPTI underneath) records every kernel the process runs, the library's included:
the model is called through the Python package (whisper_audio.Model.encode on a list of clips,
the pipeline main runs: log-mel on the device, the batches' replayed graphs, the tokens copied
back). After a warm-up call of the same clips, one call is recorded and this prints

  - the call's wall time, the span from its first kernel to its last, the time kernels ran
    (busy) and the rest (gaps: the host, copies, launch latency);
  - kernels grouped by name (templates cut at "<"), largest first, with count and share;
  - the device memory in use before the model loaded and after the run (cudaMemGetInfo through
    torch: the library's allocations count, the profiler's own buffers too).

Run on the GPU machine from the repository root (the library built: build/libwhisper-audio.so):
    python3 tests/gpu/tower-timeline.py --gguf build/tower-bench/qwen3a-real-f16.gguf [--dtype bf16]
        [--batch 32] [--clips 64] [--seconds 10] [--out DIR]
The clips are noise at speech level (the tower's time does not depend on the values). The raw
trace is written to DIR/tower-timeline-<model>-<dtype>.json.gz (chrome://tracing, Perfetto).
"""
import argparse
import collections
import gzip
import os
import shutil
import sys
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("WHISPER_AUDIO_LIBRARY", os.path.join(ROOT, "build/libwhisper-audio.so"))
import whisper_audio  # noqa: E402


def kernel_name(name):
    """A kernel's name without its template arguments and parameters: one row per kernel family."""
    for cut in ("<", "("):
        i = name.find(cut)
        if i > 0:
            name = name[:i]
    return name.replace("void ", "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--clips", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    clips = [(0.05 * rng.standard_normal(int(args.seconds * 16000))).astype(np.float32) for _ in range(args.clips)]
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info()
    model = whisper_audio.Model(args.gguf, device="cuda", dtype=args.dtype, batch=args.batch)
    model.encode(clips)                      # warm-up: graphs built and captured
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        out = model.encode(clips)
        wall = time.perf_counter() - t0
    free1, _ = torch.cuda.mem_get_info()
    n_tok = sum(o.shape[0] for o in out)

    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.name
               and not e.name.startswith("Memcpy") and not e.name.startswith("Memset")]
    copies = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.name
              and (e.name.startswith("Memcpy") or e.name.startswith("Memset"))]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy = 0.0
    end = -1.0
    for s, e in spans:                       # the union of the kernels' intervals (us)
        if e > end:
            busy += e - max(s, end)
            end = e
    span = (spans[-1][1] - spans[0][0]) if spans else 0.0
    by = collections.defaultdict(lambda: [0, 0.0])
    for e in kernels:
        r = by[kernel_name(e.name)]
        r[0] += 1
        r[1] += e.time_range.end - e.time_range.start
    total_k = sum(r[1] for r in by.values())
    name = os.path.basename(args.gguf).split(".")[0]
    print("tower-timeline: %s %s, %d clips of %.0f s, batch %d: %d tokens; wall %.1f ms, kernel span %.1f ms, "
          "kernels busy %.1f ms (%.0f%% of the wall), copies %.1f ms" % (
              name, args.dtype, args.clips, args.seconds, args.batch, n_tok, wall * 1e3, span / 1e3, busy / 1e3,
              100 * busy / 1e3 / (wall * 1e3), sum(e.time_range.end - e.time_range.start for e in copies) / 1e3))
    print("tower-timeline: device memory in use: %.0f MiB before the model, %.0f MiB after the run (+%.0f MiB)" % (
        (total - free0) / 2**20, (total - free1) / 2**20, (free0 - free1) / 2**20))
    print("| kernel | count | ms | share |")
    print("| --- | ---: | ---: | ---: |")
    for k, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print("| %s | %d | %.2f | %.1f%% |" % (k[:60], n, us / 1e3, 100 * us / total_k))
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, "tower-timeline-%s-%s.json" % (name, args.dtype))
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)
    model.close()


if __name__ == "__main__":
    main()
