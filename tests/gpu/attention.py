#!/usr/bin/env python3
"""Attention speed beside torch: large-v3's shape (T 1500, 20 heads, head_dim 64, non-causal),
B 1 and 32 (--batches), f16 and bf16.

torch's scaled_dot_product_attention runs with the flash backend and with the cuDNN backend,
each on its own (torch.nn.attention.sdpa_kernel; a backend torch cannot run here is reported
and skipped), timed with CUDA events: the median of 20 runs after 5 warm-up runs and at least 50 ms of them. Then
build/test-all's attention benchmark (VT_CUDA_BENCH=attention: the library's two kernels, wgmma
and fa2, through its graphs; tests/test-cuda.cpp) and build/dev/attention (dev/cuda/attention.cu,
`make dev-cuda`: the wgmma kernel's measurement variants, held to 128-row or 192-row tiles (2 or
3 consumer warpgroups), without its ping-pong between consumers, with a block per work tile
instead of persistent blocks; each checked against the CPU and the library's kernel first) run
on the same shapes, and one table holds everything, in ms and TFLOP/s (4 B H T^2 64 FLOPs). The
"ours (wgmma)" column is the tile the library's rule picks; beside the 128-row and 192-row
columns it shows whether the rule picked the faster. Without build/dev/attention the variant
columns read n/a.
    python3 tests/gpu/attention.py [--bin build/test-all] [--dev build/dev/attention] [--batches 1,6,30]
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T, H, D = 1500, 20, 64
DTYPES = ("f16", "bf16")


def flops(B):
    return 4.0 * B * H * T * T * D


def time_torch(backend_name, B, dtype_name, reps=20, warmup=5):
    """Median ms of one sdpa call with the given backend, or a string saying why it did not run."""
    import torch
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except ImportError as e:
        return f"torch {torch.__version__}: {e}"
    backend = getattr(SDPBackend, backend_name, None)
    if backend is None:
        return f"torch {torch.__version__} has no SDPBackend.{backend_name}"
    dtype = torch.float16 if dtype_name == "f16" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(B)
    # [B, H, T, D] views of one fused [B, T, 3, H, D] tensor, as the encoder's QKV projection makes them
    qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=dtype, generator=gen)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    try:
        with sdpa_kernel([backend]):
            # warm-up: `warmup` calls and at least 50 ms of them, so that a call of tens of
            # microseconds is not timed at a clock the idle GPU may have dropped (ours do the same)
            t0, n = time.perf_counter(), 0
            while n < warmup or time.perf_counter() - t0 < 0.05:
                F.scaled_dot_product_attention(q, k, v)
                torch.cuda.synchronize()
                n += 1
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                F.scaled_dot_product_attention(q, k, v)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
    except RuntimeError as e:
        return f"{backend_name}: {str(e).splitlines()[0][:120]}"
    times.sort()
    return times[len(times) // 2]


def bench_lines(stdout):
    """{(dtype, B): {"wgmma": ms or None, "fa2": ..., ...}} from "bench <dtype> attention B=..." lines."""
    ours = {}
    for line in stdout.splitlines():
        m = re.match(r"bench (\w+)\s+attention B=(\d+)\s+T=(\d+) H=(\d+):(.*)", line)
        if not m:
            continue
        print(line)
        cols = {}
        for name, ms in re.findall(r"([\w-]+)\s+(n/a|[\d.]+ ms)", m.group(5)):
            cols[name] = None if ms == "n/a" else float(ms.split()[0])
        ours[(m.group(1), int(m.group(2)))] = cols
    return ours


def run_ours(binary, batches):
    """The library's kernels (wgmma, fa2) from test-all's benchmark."""
    env = dict(os.environ, VT_CUDA_BENCH="attention", VT_CUDA_BENCH_BATCHES=",".join(map(str, batches)), WA_REQUIRE_GPU="1")
    r = subprocess.run([binary, "-tc=cuda bench*"], capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode != 0:
        print(f"{binary} failed (rc {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-2000:]}")
    return bench_lines(r.stdout)


def run_dev(binary, batches):
    """The wgmma kernel's variants from dev/cuda/attention.cu (its check lines printed too)."""
    if not os.path.exists(binary):
        print(f"attention: {binary} not built (make dev-cuda): the variant columns are n/a")
        return {}
    r = subprocess.run([binary] + [str(b) for b in batches], capture_output=True, text=True, cwd=ROOT)
    for line in r.stdout.splitlines():
        if line.startswith("check ") or line.startswith("dev/cuda/attention:"):
            print(line)
    if r.returncode != 0:
        print(f"{binary} failed (rc {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-2000:]}")
    return bench_lines(r.stdout)


def cell(ms, B):
    if not isinstance(ms, float):
        return "n/a"
    return f"{ms:.3f} ms {flops(B) / ms * 1e-9:6.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/test-all"))
    ap.add_argument("--dev", default=os.path.join(ROOT, "build/dev/attention"))
    ap.add_argument("--batches", default="1,32", help="comma-separated batches, 1 to 256")
    args = ap.parse_args()
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        batches = []
    if not batches or any(b < 1 or b > 256 for b in batches):
        ap.error(f"--batches {args.batches!r}: batches from 1 to 256 separated by commas (1,6,30)")

    import torch
    print(f"attention: {torch.cuda.get_device_name()}, torch {torch.__version__}, T {T}, {H} heads, head_dim {D}")
    torch_ms = {}
    for dt in DTYPES:
        for B in batches:
            for be in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
                r = time_torch(be, B, dt)
                if isinstance(r, str):
                    print(f"attention: torch {be} skipped ({dt}, B {B}): {r}")
                torch_ms[(dt, B, be)] = r
    torch.cuda.empty_cache()

    ours = run_ours(args.bin, batches)
    for key, cols in run_dev(args.dev, batches).items():   # the library's own columns stay test-all's
        for name, ms in cols.items():
            ours.setdefault(key, {}).setdefault(name, ms)

    print()
    print("attention (ms, TFLOP/s; T 1500, 20 heads, head_dim 64, non-causal):")
    print("| shape | dtype | ours (wgmma) | ours (fa2) | torch flash | torch cuDNN | wgmma 128 rows | wgmma 192 rows | "
          "wgmma, no ping-pong | wgmma, a block a tile |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for B in batches:
        for dt in DTYPES:
            o = ours.get((dt, B), {})
            print(f"| B {B} T {T} H {H} | {dt} | {cell(o.get('wgmma'), B)} | {cell(o.get('fa2'), B)} | "
                  f"{cell(torch_ms[(dt, B, 'FLASH_ATTENTION')], B)} | {cell(torch_ms[(dt, B, 'CUDNN_ATTENTION')], B)} | "
                  f"{cell(o.get('wgmma-128'), B)} | {cell(o.get('wgmma-192'), B)} | "
                  f"{cell(o.get('wgmma-nopp'), B)} | {cell(o.get('wgmma-1tile'), B)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
