#!/usr/bin/env python3
"""./main of two trees on the same inputs, runs interleaved (before, after, before, after), so
that a change's effect on the whole path is measured on one GPU in one call, with the GPU's
and the host's state shared by both sides.

Inputs (made in --work): an hour of 16 kHz mono s16 WAV and an hour of 44.1 kHz stereo s16 WAV
(tests/data's speech tiled, as tests/gpu/e2e.py makes them), and 1000 files of 5 s of each
(cut from the same speech at their own offsets). Models: build/<size>-random.gguf (made by
the converter's --random when missing). Each run: `main -b 32 --device cuda --dtype DTYPE
--json`, pooled (--pool mean, to /dev/null's directory) or full rows (f32 / f16) to a file on
--work's disk; its --json "run" (decode, log-mel, forward, download, writing; load and init
apart) per window or per file, and load + init. The disk's own write speed (dd, 2 GB, fsync)
is printed first.

    python3 tests/gpu/before-after.py --before build/carry/before21 [--sizes base,large-v3] [--cases pooled]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def speech(name):
    with wave.open(os.path.join(ROOT, "tests/data/audio", name)) as w:
        return w.getnchannels(), w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16)


def write_wav(path, ch, rate, x):
    with wave.open(path, "wb") as w:
        w.setnchannels(ch)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(x.astype("<i2").tobytes())


def make_inputs(work):
    made = {}
    for tag, src in (("16k", "long_70s_16k.wav"), ("44k", "speech_44k1_stereo_s16.wav")):
        ch, rate, x = speech(src)
        hour = os.path.join(work, f"hour_{tag}.wav")
        if not os.path.exists(hour):
            n = 3600 * rate * ch
            write_wav(hour, ch, rate, np.tile(x, n // len(x) + 1)[:n])
        files = []
        d = os.path.join(work, f"files_{tag}")
        os.makedirs(d, exist_ok=True)
        clip = 5 * rate * ch
        for i in range(1000):
            f = os.path.join(d, f"{i:04d}.wav")
            if not os.path.exists(f):
                at = (i * 7919 * ch) % max(1, len(x) - clip)
                at -= at % ch
                y = np.resize(x[at:], clip) if len(x) - at < clip else x[at:at + clip]
                write_wav(f, ch, rate, y)
            files.append(f)
        lst = os.path.join(work, f"files_{tag}.txt")
        with open(lst, "w") as f:
            f.write("\n".join(files) + "\n")
        made[tag] = (hour, lst)
    return made


def run(tree, model, dtype, inp, extra, work):
    out = os.path.join(work, "rows.npy")
    cmd = [os.path.join(tree, "main"), "-m", model, "-b", "32", "--device", "cuda", "--dtype", dtype, "--no-progress",
           "--json", "-o", out] + inp + extra
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-1500:]}")
    j = json.loads(r.stdout)
    t = j["timings_ms"]
    size = os.path.getsize(out)
    os.remove(out)
    return {"windows": j["windows"], "files": len(j["files"]), "run_ms": t["run"], "load_init_ms": t["load"] + t["init"],
            "decode_ms": t["decode"], "wait_ms": t.get("decode_wait", float("nan")), "out_mb": size / 1e6, "wall_s": wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the other tree's root (its ./main built)")
    ap.add_argument("--sizes", default="base,large-v3")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--work", default="/tmp/wa-before-after")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "build/gpu-logs"))
    ap.add_argument("--cases", default="", help="only the inputs whose label holds one of these words (e.g. pooled)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    dd = subprocess.run(["dd", "if=/dev/zero", f"of={args.work}/dd.bin", "bs=16M", "count=128", "conv=fsync"],
                        capture_output=True, text=True)
    print("disk:", dd.stderr.strip().splitlines()[-1], flush=True)
    os.remove(f"{args.work}/dd.bin")
    t0 = time.time()
    inputs = make_inputs(args.work)
    print(f"inputs made in {time.time() - t0:.0f} s", flush=True)
    (h16, l16), (h44, l44) = inputs["16k"], inputs["44k"]
    cases = [("1 h 16k mono, pooled", ["-f", h16], ["--pool", "mean"]),
             ("1 h 44.1k stereo, pooled", ["-f", h44], ["--pool", "mean"]),
             ("1000 x 5 s 16k mono, pooled", ["--list", l16], ["--pool", "mean"]),
             ("1000 x 5 s 44.1k stereo, pooled", ["--list", l44], ["--pool", "mean"]),
             ("1 h 16k mono, f32 rows", ["-f", h16], []),
             ("1 h 16k mono, f16 rows", ["-f", h16], ["--outtype", "f16"])]
    if args.cases:
        cases = [c for c in cases if any(w in c[0] for w in args.cases.split(","))]
    results = []
    for size in args.sizes.split(","):
        model = os.path.join(ROOT, f"build/{size}-random.gguf")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(ROOT, "convert/convert-hf-to-gguf.py"), "--random", size, "-o", model],
                           check=True, capture_output=True)
        for label, inp, extra in cases:
            best = {}
            for _ in range(args.repeats):
                for side, tree in (("before", os.path.abspath(args.before)), ("after", ROOT)):
                    r = run(tree, model, args.dtype, inp, extra, args.work)
                    if side not in best or r["run_ms"] < best[side]["run_ms"]:
                        best[side] = r
            b, a = best["before"], best["after"]
            per = "file" if "1000" in label else "window"
            n = a["files"] if per == "file" else a["windows"]
            res = {"size": size, "case": label, "per": per, "n": n, "before": b, "after": a}
            results.append(res)
            print(f"{size} {label}: before {b['run_ms'] / n:.3f} ms/{per} (decode {b['decode_ms']:.0f} ms, load+init "
                  f"{b['load_init_ms']:.0f}), after {a['run_ms'] / n:.3f} ms/{per} (decode {a['decode_ms']:.0f} ms, waited "
                  f"{a['wait_ms']:.0f}, load+init {a['load_init_ms']:.0f}), x{b['run_ms'] / a['run_ms']:.2f}; out {a['out_mb']:.0f} MB "
                  f"({a['out_mb'] / (a['run_ms'] / 1000):.0f} MB/s)", flush=True)
    with open(os.path.join(args.out, "before-after.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\n| size | input | before ms/unit | after ms/unit | speed-up | after decode ms | after load+init ms |")
    print("|---|---|---|---|---|---|---|")
    for x in results:
        b, a, n = x["before"], x["after"], x["n"]
        print(f"| {x['size']} | {x['case']} | {b['run_ms'] / n:.3f} | {a['run_ms'] / n:.3f} | {b['run_ms'] / a['run_ms']:.2f} | "
              f"{a['decode_ms']:.0f} | {a['load_init_ms']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
