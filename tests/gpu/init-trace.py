#!/usr/bin/env python3
"""Where the encoder's init goes on CUDA: a CUPTI trace (torch.profiler) of the library's own
calls, phase by phase, in a process whose CUDA context torch has made already, so that what is
timed is the init above the floor of issue 21 (the context; the library's cuBLASLt handle is
timed, as part of the encoder's init).

Phases, each through the C API (the Python package's ctypes handle to build/libwhisper-audio.so):
  encoder   whisper_audio_encoder_init: the backend (stream, cuBLASLt, workspace), the weights'
            device memory and upload
  pipeline  whisper_audio_pipeline_init over it: the batches' pinned buffers and the whole
            batch's graph captured (the GEMMs' tuning runs here)
For each phase it prints the wall time, the CUDA runtime and driver calls that took most of it
(summed by name over every thread of the process: the upload's helpers too), and the GPU's busy
time (kernels, copies, memsets). Run on the GPU machine from the repository root:

    python3 tests/gpu/init-trace.py [--sizes base,large-v3] [--batches 1,32] [--dtype bf16] [--out DIR]

Writes init-trace.json to --out (default $OUT, else build/gpu-logs).
"""
import argparse
import ctypes
import importlib.util
import json
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("WHISPER_AUDIO_LIBRARY", os.path.join(ROOT, "build/libwhisper-audio.so"))
from whisper_audio import _lib  # noqa: E402

# init-bench.py's model_for: the random model of a size, made by the converter when missing
_spec = importlib.util.spec_from_file_location("init_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "init-bench.py"))
_init_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_init_bench)
model_for = _init_bench.model_for

DTYPES = {"f16": 0, "bf16": 1, "fp8": 2}


def summary(events, wall_ms):
    """The trace's host API calls by name and the GPU's busy time, in ms."""
    api, gpu = {}, {"kernel": 0.0, "gpu_memcpy": 0.0, "gpu_memset": 0.0}
    n_kernels = 0
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in ("cuda_runtime", "cuda_driver"):
            a = api.setdefault(e["name"], [0.0, 0])
            a[0] += e["dur"] / 1e3
            a[1] += 1
        elif cat in gpu:
            gpu[cat] += e["dur"] / 1e3
            n_kernels += cat == "kernel"
    top = sorted(api.items(), key=lambda kv: -kv[1][0])[:8]
    return {"wall_ms": wall_ms, "gpu_ms": gpu, "n_kernels": n_kernels,
            "api": [{"name": n, "ms": round(v[0], 3), "calls": v[1]} for n, v in top]}


def traced(fn, out, tag):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        r = fn()
        wall = (time.perf_counter() - t0) * 1e3
    path = os.path.join(out, f"init-trace-{tag}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.remove(path)
    return r, summary(events, wall)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="base,large-v3")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--rounds", type=int, default=2, help="each case this many times: the first pays what a process pays "
                    "once (cuBLASLt's and the kernels' loading), the last has it done")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "build", "gpu-logs"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    torch.zeros(1, device="cuda")                       # the context, before any of ours
    torch.cuda.synchronize()
    print(f"init-trace: torch's CUDA context {1e3 * (time.perf_counter() - t0):.0f} ms (not in the phases below)")
    rows = []
    for size in args.sizes.split(","):
        path = model_for(size)
        for b in (int(x) for x in args.batches.split(",")):
            for rnd in range(1, args.rounds + 1):
                t = time.perf_counter()
                model = _lib.whisper_audio_model_load(path.encode())
                load_ms = (time.perf_counter() - t) * 1e3
                ep = _lib.whisper_audio_encoder_default_params()
                ep.device, ep.dtype, ep.max_batch = 2, DTYPES[args.dtype], b
                enc, s_enc = traced(lambda: _lib.whisper_audio_encoder_init(model, ep), args.out, f"{size}-b{b}-encoder")
                if not enc:
                    raise RuntimeError(_lib.whisper_audio_last_error().decode())
                pp = _lib.whisper_audio_pipeline_default_params()
                pipe, s_pipe = traced(lambda: _lib.whisper_audio_pipeline_init((ctypes.c_void_p * 1)(enc), 1, pp), args.out,
                                      f"{size}-b{b}-pipeline")
                if not pipe:
                    raise RuntimeError(_lib.whisper_audio_last_error().decode())
                _lib.whisper_audio_pipeline_free(pipe)
                _lib.whisper_audio_encoder_free(enc)
                _lib.whisper_audio_model_free(model)
                row = {"size": size, "batch": b, "round": rnd, "dtype": args.dtype, "load_ms": load_ms, "encoder": s_enc,
                       "pipeline": s_pipe}
                rows.append(row)
                for phase in ("encoder", "pipeline"):
                    s = row[phase]
                    g = s["gpu_ms"]
                    print(f"init-trace: {size} -b {b} round {rnd} {phase}: {s['wall_ms']:.0f} ms wall; GPU kernels {g['kernel']:.1f} ms "
                          f"({s['n_kernels']}), copies {g['gpu_memcpy']:.1f}, memsets {g['gpu_memset']:.1f}; calls: " +
                          ", ".join(f"{a['name']} {a['ms']:.1f} ms x{a['calls']}" for a in s["api"][:6]), flush=True)
    with open(os.path.join(args.out, "init-trace.json"), "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    print("\n| model | batch | round | load ms | encoder init ms | pipeline init ms | largest calls (encoder; pipeline) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        top = lambda s: ", ".join(f"{a['name']} {a['ms']:.0f}" for a in s["api"][:3])
        print(f"| {r['size']} | {r['batch']} | {r['round']} | {r['load_ms']:.0f} | {r['encoder']['wall_ms']:.0f} | {r['pipeline']['wall_ms']:.0f} | "
              f"{top(r['encoder'])}; {top(r['pipeline'])} |")


if __name__ == "__main__":
    main()
