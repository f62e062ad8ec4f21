#!/usr/bin/env python3
"""The Ray example on GPUs (issue 26 item 4): examples/ray/embed_dataset.py's GPU actors over
--files WAV clips against ./main on the same files in one call, and against the example's CPU
actors; files/s and the ratios. Target: Ray on the GPU within 1.3x of main's files/s.

Clips (made here with numpy, in --work, kept when already made so): --files distinct --clip-s
second 16 kHz mono s16 WAVs, each a few partials under a syllable-rate envelope plus noise, at
its own pitch, gain and noise floor. One 30 s window each.

Model: Whisper large-v3 with random weights (build/large-v3-random.gguf, made by
`convert/convert-hf-to-gguf.py --random large-v3` when missing, as tests/gpu/e2e.py and
server-bench.py make it), run in --dtype (bf16), pooled (--pool mean; --no-pool: every
position's row, written as Parquet and as main's .npy, far more bytes), -b --batch (32).

main: `./main -m MODEL --device cuda --dtype D -b B [--pool mean] --list CLIPS -o DIR/ --json`,
one process; files/s over its wall time (load and init included, as the example's), and over
its "run" timing (load and init apart).

Ray: a local Ray instance (ray.init; --address: a running cluster, see below), started before
the timing (a cluster is up before a job is sent). Each run is one call of embed_dataset.main
into a fresh output directory, Parquet (the default), after a warm-up job over the first
2 x --files-per-shard clips (a first job pays for Ray's worker processes and their imports; the
warm-up's time is printed apart): files/s over that call's wall time,
which holds the driver's checks (the model read by the loader, its sha256: both timed apart and
printed), the actors' start (model load, CUDA init) and the writes. GPU runs: one actor per
GPU, then --gpu-actors-per-gpu more sharing each GPU (default "1,2": does a second actor, decoding
while the other encodes, help?). CPU run: the example on the CPU alone (a second local instance
with no GPU: ray.init(address="local", num_gpus=0)) over the first --cpu-files clips (large-v3 on
the CPU is slow), its default threads and actors.

First, before this process starts Ray (--no-cold skips it; skipped with --address): the
example's command as a user runs it, `python3 examples/ray/embed_dataset.py ...` in its own
process with no Ray running (the model's identity already kept in $XDG_CACHE_HOME by the driver
step above): "ray-cold", timed from the command to its first Parquet file (issue 52: at most 3 s)
and to its exit.

Also printed per Ray run: when its first Parquet file was written (the driver's checks, Ray
Data's start, the actors' init and the first call's work) and the windows/s from then to the
last file (the rate once running), against main's run rate (issue 52: at least 0.95x).

Checks: every clip has one row in each Ray run; the GPU rows against main's .npy (the same
library on the same GPU; batches of other files around a window may change the GEMMs' order of
sums): bitwise share, and the largest relative L2 error, which must stay under --tol (1e-2 for
f16/bf16, 5e-2 for fp8); the CPU rows against the GPU's, reported. Exits 1 on a missing row or
an error over --tol.

On the GPU machine, from the repository root (the ray wheels carried: tests/gpu/ray-carry.sh):
    tests/gpu/ray-carry.sh install && export PYTHONPATH=/tmp/site:$PYTHONPATH
    make -j16 main build/libwhisper-audio.so && python3 tests/gpu/ray-bench.py [--out DIR]
On a cluster (every node sees the repository, the model and --work at the same paths):
    ray start --head                      # on the first node, then on each other node:
    ray start --address HEAD_IP:6379
    python3 tests/gpu/ray-bench.py --address auto --work /shared/ray-bench
(the package comes to the workers through runtime_env: PYTHONPATH=python and
WHISPER_AUDIO_LIBRARY=build/libwhisper-audio.so of this checkout; the CPU run stays on this node.)
Here, on the CPU, with the micro model (no GPU: the GPU runs are skipped):
    build/venv/bin/python tests/gpu/ray-bench.py --model build/micro-80-f32.gguf --files 64 --device cpu
Prints the table last; writes ray-bench.json to --out (default $OUT, else build/gpu-logs).
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SR = 16000
T_START = time.monotonic()


def log(*a):
    print("ray-bench:", *a, flush=True)


def load_example():
    spec = importlib.util.spec_from_file_location("embed_dataset", os.path.join(ROOT, "examples", "ray", "embed_dataset.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- clips ------------------------------------------------------------------------------------

def make_clips(work, n, clip_s):
    """n distinct clips of clip_s seconds under work/clips; the list file's path."""
    d = os.path.join(work, "clips")
    listing = os.path.join(work, "clips.txt")
    stamp = os.path.join(d, "stamp.json")
    want = {"n": n, "clip_s": clip_s, "version": 1}
    paths = [os.path.join(d, "c%05d.wav" % i) for i in range(n)]
    if os.path.exists(stamp) and json.load(open(stamp)) == want:
        return listing, paths
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(26)
    t = np.arange(clip_s * SR) / SR
    for path in paths:
        f0 = rng.uniform(90, 260)
        x = sum(rng.uniform(0.2, 1.0) / k * np.sin(2 * np.pi * k * f0 * t + rng.uniform(0, 6.3)) for k in range(1, 6))
        env = np.clip(np.sin(2 * np.pi * rng.uniform(2, 6) * t + rng.uniform(0, 6.3)), 0, None)
        x = x * env * rng.uniform(0.05, 0.3) + rng.standard_normal(t.size) * 10 ** rng.uniform(-4, -2)
        with wave.open(path, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SR)
            w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    with open(listing, "w") as f:
        f.write("\n".join(paths) + "\n")
    json.dump(want, open(stamp, "w"))
    return listing, paths


# ---- the runs ---------------------------------------------------------------------------------

def run_main(args, listing, paths):
    out = os.path.join(args.work, "main")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.main, "-m", args.model, "--device", args.device, "-b", str(args.batch), "--list", listing,
           "-o", out + "/", "--json", "--no-progress"]
    if args.device == "cuda":
        cmd += ["--dtype", args.dtype]
    if args.pool:
        cmd += ["--pool", "mean"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"main failed ({r.returncode}): {r.stderr[-2000:]}")
    j = json.loads(r.stdout)
    rows = {os.path.abspath(f["path"]): np.load(f["output"]) for f in j["files"]}
    assert sorted(rows) == sorted(paths), "main: not every clip written"
    t = j["timings_ms"]
    return {"files": len(paths), "wall_s": wall, "run_s": t["run"] / 1000, "load_init_s": (t["load"] + t["init"]) / 1000,
            "files_per_s": len(paths) / wall, "files_per_s_run": len(paths) / (t["run"] / 1000)}, rows


def read_rows(out):
    """{path: rows [windows * rows, d]} of a Parquet output, read with pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    t = pq.read_table(os.path.join(out, "parquet")).sort_by([("path", "ascending"), ("window_index", "ascending")])
    typ = t.schema.field("embedding").type
    pooled = pa.types.is_fixed_size_list(typ)
    d = typ.list_size if pooled else typ.value_type.list_size
    rows = {}
    for path, emb in zip(t["path"].to_pylist(), t["embedding"]):
        flat = emb.values if pooled else emb.values.flatten()
        rows.setdefault(path, []).append(flat.to_numpy(zero_copy_only=False).reshape(-1, d))
    return {p: np.concatenate(r) for p, r in rows.items()}, t["compute"][0].as_py() if t.num_rows else None


def example_argv(args, listing, out):
    return ["-m", args.model, "--list", listing, "-o", out, "--batch", str(args.batch), "--dtype", args.dtype,
            "--files-per-shard", str(args.files_per_shard)] + (["--pool", "mean"] if args.pool else [])


def written_times(out, w0):
    """(when the first Parquet file was written, seconds after w0; the rows a second from it to the
    last file: the steady rate, the start, the actors' init and the first call's work before it)."""
    import pyarrow.parquet as pq
    pq_dir = os.path.join(out, "parquet")
    written = sorted((os.path.getmtime(os.path.join(pq_dir, n)), pq.read_metadata(os.path.join(pq_dir, n)).num_rows)
                     for n in os.listdir(pq_dir) if n.endswith(".parquet"))
    steady = None
    if len(written) > 1 and written[-1][0] > written[0][0]:
        steady = sum(r for _, r in written[1:]) / (written[-1][0] - written[0][0])    # pooled: a row a file
    return (written[0][0] - w0 if written else None), steady


def run_example(ed, args, listing, n_files, name, extra):
    out = os.path.join(args.work, name)
    shutil.rmtree(out, ignore_errors=True)
    t0, w0 = time.monotonic(), time.time()
    result = ed.main(example_argv(args, listing, out) + extra)
    wall = time.monotonic() - t0
    if result["errors"] or result["done"] != n_files:
        raise RuntimeError(f"{name}: {result['done']} of {n_files} done; errors {list(result['errors'].items())[:3]}")
    rows, compute = read_rows(out)
    first, steady = written_times(out, w0)
    return {"files": n_files, "wall_s": wall, "files_per_s": n_files / wall, "compute": compute,
            "first_file_s": first, "steady_files_per_s": steady}, rows


def run_cold(args, listing, n_files, env):
    """The example as a user runs it, Ray not running yet: `python3 examples/ray/embed_dataset.py
    ...` in a process of its own (its start, Ray's local instance, the actor's, the model's load and
    init, the first call), timed from the command to its first Parquet file and to its exit."""
    out = os.path.join(args.work, "ray-cold")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, os.path.join(ROOT, "examples", "ray", "embed_dataset.py")] + example_argv(args, listing, out)
    t0, w0 = time.monotonic(), time.time()
    r = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"ray-cold: exit {r.returncode}: {(r.stdout + r.stderr)[-2000:]}")
    rows, compute = read_rows(out)
    first, steady = written_times(out, w0)
    return {"files": n_files, "wall_s": wall, "files_per_s": n_files / wall, "compute": compute,
            "first_file_s": first, "steady_files_per_s": steady}, rows


def compare(rows, ref, paths):
    """(share of clips bitwise equal, largest relative L2 error) of rows against ref."""
    missing = [p for p in paths if p not in rows]
    if missing:
        raise RuntimeError(f"{len(missing)} clips have no rows, {missing[0]} first")
    same, worst = 0, 0.0
    for p in paths:
        a, b = rows[p].astype(np.float64), ref[p].reshape(rows[p].shape).astype(np.float64)
        same += np.array_equal(a, b)
        worst = max(worst, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)))
    return same / len(paths), worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="default build/large-v3-random.gguf (made when missing)")
    ap.add_argument("--main", default=os.path.join(ROOT, "build", "main"))
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="main's device (cpu: try it here)")
    ap.add_argument("--dtype", choices=["f16", "bf16", "fp8"], default=None,
                    help="main's and the GPU actors' --dtype (default bf16; with --device cpu f16, the f32 the CPU actors compute)")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--clip-s", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--files-per-shard", type=int, default=64)
    ap.add_argument("--no-pool", dest="pool", action="store_false", help="every position's row, not one per window")
    ap.add_argument("--gpu-actors-per-gpu", default="1,2")
    ap.add_argument("--no-cold", dest="cold", action="store_false",
                    help="skip the first run: the example's command with Ray not running (skipped with --address)")
    ap.add_argument("--cpu-files", type=int, default=48, help="clips for the CPU run (0: none)")
    ap.add_argument("--address", default=None, help="a running Ray cluster (ray.init's address), else a local instance")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "ray-bench"))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "build", "gpu-logs"))
    ap.add_argument("--tol", type=float, default=None)
    ap.add_argument("--budget-s", type=float, default=540, help="the CPU run is skipped past this")
    args = ap.parse_args()
    if args.dtype is None:
        args.dtype = "f16" if args.device == "cpu" else "bf16"
    tol = args.tol if args.tol is not None else (5e-2 if args.dtype == "fp8" else 1e-2)
    if args.device == "cpu":
        tol = args.tol if args.tol is not None else 0.0
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    if args.model is None:
        args.model = os.path.join(ROOT, "build", "large-v3-random.gguf")
        if not os.path.exists(args.model):
            log(f"making {args.model} (--random large-v3)")
            subprocess.run([sys.executable, os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"), "--random", "large-v3",
                            "-o", args.model], check=True, capture_output=True)
    args.model = os.path.abspath(args.model)

    # the package from this checkout, for the driver and (runtime_env) every worker
    lib = os.path.join(ROOT, "build", "libwhisper-audio.so")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH")])),
           "WHISPER_AUDIO_LIBRARY": lib}
    os.environ.update(env)
    sys.path.insert(0, os.path.join(ROOT, "python"))
    for p in (args.main, args.model, lib):
        if not os.path.exists(p):
            log(f"FAILED: {p} is missing (make -j16 main build/libwhisper-audio.so)")
            return 1
    try:
        import pyarrow
        import ray
    except ImportError as e:
        log(f"FAILED: {e} (carry the wheels: tests/gpu/ray-carry.sh)")
        return 1
    import whisper_audio
    ed = load_example()
    log(f"ray {ray.__version__}, pyarrow {pyarrow.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}, "
        f"whisper_audio {whisper_audio.version()}")

    listing, paths = make_clips(args.work, args.files, args.clip_s)
    log(f"{len(paths)} clips of {args.clip_s:g} s; model {os.path.basename(args.model)}; {time.monotonic() - T_START:.1f} s so far")

    # the example's driver work before any actor, timed apart
    t0 = time.monotonic()
    hparams = whisper_audio.model_hparams(args.model)
    t_check = time.monotonic() - t0
    t0 = time.monotonic()
    ed.model_identity(whisper_audio, args.model, args.work)
    t_hash = time.monotonic() - t0
    t0 = time.monotonic()
    ed.model_identity(whisper_audio, args.model, args.work)
    t_kept = time.monotonic() - t0
    log(f"driver: the model checked by the loader in {t_check:.2f} s, its identity (the GGUF's sha256) in {t_hash:.2f} s, "
        f"then {t_kept * 1000:.1f} ms from $XDG_CACHE_HOME (what each Ray run pays)")

    results = {"settings": {"files": len(paths), "clip_s": args.clip_s, "model": args.model, "dtype": args.dtype,
                            "batch": args.batch, "files_per_shard": args.files_per_shard, "pool": args.pool},
               "driver_check_s": t_check, "driver_hash_s": t_hash, "runs": {}}
    failed = []
    main_r, main_rows = run_main(args, listing, paths)
    results["runs"]["main"] = main_r
    log(f"main: {main_r['files_per_s']:.1f} files/s over its wall ({main_r['wall_s']:.2f} s), "
        f"{main_r['files_per_s_run']:.1f} over its run ({main_r['run_s']:.2f} s)")

    if args.cold and not args.address:   # before this process starts Ray: the user's first command
        r, rows = run_cold(args, listing, len(paths), env)
        r["same"], r["rel_err"] = compare(rows, main_rows, paths)
        r["vs_main"] = main_r["files_per_s"] / r["files_per_s"]
        results["runs"]["ray-cold"] = r
        log(f"ray-cold (the command, Ray not running): {r['files_per_s']:.1f} files/s ({r['wall_s']:.2f} s to its exit); its "
            f"first Parquet file at {r['first_file_s']:.2f} s, then {r['steady_files_per_s'] or 0:.1f} windows/s "
            f"({(r['steady_files_per_s'] or 0) / main_r['files_per_s_run']:.2f}x main's run rate); {r['same']:.0%} of the "
            f"clips bitwise main's, largest relative error {r['rel_err']:.2e} ({r['compute']})")
        if r["rel_err"] > tol:
            failed.append(f"ray-cold: relative error {r['rel_err']:.2e} over {tol:g}")

    runtime_env = {"env_vars": env}
    if args.address:
        ray.init(address=args.address, runtime_env=runtime_env, log_to_driver=False)
    else:
        ray.init(runtime_env=runtime_env, include_dashboard=False, log_to_driver=False)
    n_gpus = int(ray.cluster_resources().get("GPU", 0))
    log(f"Ray: {ray.cluster_resources()}")
    gpu_rows = None
    if n_gpus == 0:
        log("no GPU in the Ray cluster: the GPU runs skipped")
    if n_gpus:      # a first job pays for Ray's worker processes (their imports): a warm-up job first, reported apart
        warm = paths[:min(len(paths), 2 * args.files_per_shard)]
        warm_list = os.path.join(args.work, "clips-warmup.txt")
        with open(warm_list, "w") as f:
            f.write("\n".join(warm) + "\n")
        r, rows = run_example(ed, args, warm_list, len(warm), "ray-gpu-warmup", ["--actors", str(n_gpus)])
        r["same"], r["rel_err"] = compare(rows, main_rows, warm)
        r["vs_main"] = None
        results["runs"]["ray-gpu-warmup"] = r
        log(f"ray-gpu-warmup: {len(warm)} clips in {r['wall_s']:.2f} s (not in the comparison)")
    for k in (int(x) for x in args.gpu_actors_per_gpu.split(",") if x) if n_gpus else ():
        name = f"ray-gpu-{k}"
        r, rows = run_example(ed, args, listing, len(paths), name, ["--actors", str(k * n_gpus)])
        r["same"], r["rel_err"] = compare(rows, main_rows, paths)
        r["vs_main"] = main_r["files_per_s"] / r["files_per_s"]
        results["runs"][name] = r
        log(f"{name}: {r['files_per_s']:.1f} files/s ({r['wall_s']:.2f} s; its first Parquet file at "
            f"{r['first_file_s']:.2f} s, then {r['steady_files_per_s'] or 0:.1f} windows/s), main's {r['vs_main']:.2f}x of it; "
            f"{r['same']:.0%} of the clips bitwise main's, largest relative error {r['rel_err']:.2e} ({r['compute']})")
        if r["rel_err"] > tol:
            failed.append(f"{name}: relative error {r['rel_err']:.2e} over {tol:g}")
        if gpu_rows is None:
            gpu_rows = rows
    ray.shutdown()

    if args.cpu_files and time.monotonic() - T_START < args.budget_s:
        sub = paths[:args.cpu_files]
        sub_list = os.path.join(args.work, "clips-cpu.txt")
        with open(sub_list, "w") as f:
            f.write("\n".join(sub) + "\n")
        ray.init(address="local", num_gpus=0, runtime_env=runtime_env, include_dashboard=False, log_to_driver=False)
        log(f"Ray on the CPU: {ray.cluster_resources()}")
        # a few files a call, so that every CPU actor gets some
        r, rows = run_example(ed, args, sub_list, len(sub), "ray-cpu", ["--files-per-shard", "4"])
        ray.shutdown()
        ref = gpu_rows if gpu_rows is not None else main_rows
        r["same"], r["rel_err"] = compare(rows, ref, sub)
        r["vs_main"] = main_r["files_per_s"] / r["files_per_s"]
        results["runs"]["ray-cpu"] = r
        log(f"ray-cpu: {r['files_per_s']:.2f} files/s over {len(sub)} clips; against the "
            f"{'GPU' if gpu_rows is not None else 'main'} rows: {r['same']:.0%} bitwise, largest relative error {r['rel_err']:.2e}")
        if gpu_rows is None and r["rel_err"] > tol:
            failed.append(f"ray-cpu: relative error {r['rel_err']:.2e} over {tol:g}")
    elif args.cpu_files:
        log(f"ray-cpu: skipped, {time.monotonic() - T_START:.0f} s past --budget-s")

    with open(os.path.join(args.out, "ray-bench.json"), "w") as f:
        json.dump(results, f, indent=1)
    print()
    print(f"{len(paths)} clips of {args.clip_s:g} s, {os.path.basename(args.model)}, {args.dtype}, -b {args.batch}, "
          f"{'pooled' if args.pool else 'every position'}; the model's identity {t_hash:.2f} s once, {t_kept * 1000:.1f} ms kept")
    print("| run | files | wall s | files/s | main's files/s / this | first file s | then windows/s | then / main's run rate "
          "| bitwise main's | max rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    m = results["runs"]["main"]
    print(f"| ./main (wall) | {m['files']} | {m['wall_s']:.2f} | {m['files_per_s']:.1f} | 1.00 | | | | | |")
    print(f"| ./main (run, load + init {m['load_init_s']:.2f} s apart) | {m['files']} | {m['run_s']:.2f} | "
          f"{m['files_per_s_run']:.1f} | {m['files_per_s'] / m['files_per_s_run']:.2f} | | | 1.00 | | |")
    for name, r in results["runs"].items():
        if name != "main":
            first = "" if r["first_file_s"] is None else f"{r['first_file_s']:.2f}"
            steady = "" if r["steady_files_per_s"] is None else f"{r['steady_files_per_s']:.1f}"
            vs = "" if r["vs_main"] is None else f"{r['vs_main']:.2f}"
            rate = "" if r["steady_files_per_s"] is None else f"{r['steady_files_per_s'] / m['files_per_s_run']:.2f}"
            print(f"| {name} | {r['files']} | {r['wall_s']:.2f} | {r['files_per_s']:.2f} | {vs} | {first} | "
                  f"{steady} | {rate} | {r['same']:.0%} | {r['rel_err']:.2e} |")
    cold = results["runs"].get("ray-cold")
    if cold and cold["first_file_s"] is not None:
        print(f"target (the command to the first Parquet row, Ray not running, at most 3 s): {cold['first_file_s']:.2f} s: "
              f"{'met' if cold['first_file_s'] <= 3 else 'NOT met'}")
    steady = [r["steady_files_per_s"] for n, r in results["runs"].items()
              if n in ("ray-cold", "ray-gpu-1") and r["steady_files_per_s"] is not None]
    if steady:
        best = max(steady) / m["files_per_s_run"]
        print(f"target (the steady rate at least 0.95x main's run rate): {best:.2f}x: {'met' if best >= 0.95 else 'NOT met'}")
    for f in failed:
        log("FAILED: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
