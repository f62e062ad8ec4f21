#!/usr/bin/env python3
"""Streaming latency of ./main --stream: raw f32le PCM written to its standard input in 20 ms
pieces, paced at --speed times real time (1: real time), for Whisper models of random weights
(build/<size>-random.gguf, made by convert/convert-hf-to-gguf.py --random when missing) or model
files by their paths (a causal tower's: Voxtral Realtime's records are a token's frames each).

For each window: when the piece holding its last sample was written and when main's JSON line
for it came (the feeder's clock), and main's own latency (from its push of that piece to its
rows). Checks that every whole window's line comes before the input ends, within one forward
(main's mean over the run: log-mel, encoder, download) plus 50 ms of its last sample.

    python3 tests/gpu/stream-latency.py [--sizes base,large-v3 (or model.gguf paths)] [--device cuda] [--dtype f16]
                                        [--speed 10] [--seconds 70]
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIECE = 320                 # 20 ms at 16 kHz


def model_of(size):
    if size.endswith(".gguf"):          # a model file given by its path
        return size
    path = os.path.join(ROOT, "build", f"{size}-random.gguf")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"), "--random", size, "-o", path,
                        "--outtype", "f16"], check=True, capture_output=True)
    return path


def audio(seconds):
    with wave.open(os.path.join(ROOT, "tests/data/audio/long_70s_16k.wav")) as w:
        s16 = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    n = seconds * 16000
    s16 = np.tile(s16, n // len(s16) + 1)[:n]
    return (s16.astype(np.float32) / 32768.0).astype("<f4")


def run(model, args, pcm):
    cmd = [os.path.join(ROOT, "main"), "-m", model, "--stream", "--raw", "f32le", "-f", "-", "--json", "--device", args.device,
           "-o", os.devnull] + (["--dtype", args.dtype] if args.device != "cpu" else [])
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = []

    def read():
        for line in p.stdout:
            lines.append((time.monotonic(), json.loads(line)))

    err = []
    t_out = threading.Thread(target=read)
    t_err = threading.Thread(target=lambda: err.append(p.stderr.read()))
    t_out.start()
    t_err.start()
    time.sleep(args.warmup)             # the model loaded and the pipeline made before the audio starts
    written = []                        # (samples written in all, when)
    t0 = time.monotonic()
    for at in range(0, len(pcm), PIECE):
        piece = pcm[at:at + PIECE]
        due = t0 + (at + len(piece)) / 16000 / args.speed
        time.sleep(max(0.0, due - time.monotonic()))
        p.stdin.write(piece.tobytes())
        p.stdin.flush()
        written.append((at + len(piece), time.monotonic()))
    t_end = time.monotonic()
    p.stdin.close()
    p.wait()
    t_out.join()
    t_err.join()
    if p.returncode != 0:
        raise SystemExit(f"main failed ({p.returncode}): {err[0].decode()[-2000:]}")
    windows = [(t, d) for t, d in lines if "window" in d]
    done = [d for _, d in lines if d.get("done")][0]
    rows = []
    end = 0
    # a causal tower's records (Voxtral Realtime: a token's frames each) are short; all but the last,
    # which the input's end closes, are checked as whole windows are
    causal = sum(1 for _, d in windows if d["samples"] != 480000) > 1
    for i, (t, d) in enumerate(windows):
        end += d["samples"]
        last = next((tw for n, tw in written if n >= end), t_end)
        whole = d["samples"] == 480000 or (causal and i < len(windows) - 1)
        rows.append((d["window"], (t - last) * 1000, d["latency_ms"], whole, t < t_end))
    return rows, done


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="base,large-v3")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--speed", type=float, default=10.0, help="times real time (1: real time)")
    ap.add_argument("--seconds", type=int, default=70)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds for main to load before the audio")
    args = ap.parse_args()
    pcm = audio(args.seconds)
    print(f"stream-latency: {args.seconds} s of audio in 20 ms pieces at {args.speed:g}x real time, --device {args.device} "
          f"--dtype {args.dtype}")
    print("| model | window | feeder's latency (ms) | main's latency (ms) | a forward (ms) | before the end | within a forward + 50 ms |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for size in args.sizes.split(","):
        rows, done = run(model_of(size), args, pcm)
        fwd = done["forward_ms"]
        for w, feeder_ms, main_ms, whole, before in rows:
            within = feeder_ms <= fwd + 50
            if whole and not (before and within):
                bad += 1
            # a short last window closes when the input ends: its latency counts from there, unchecked
            print(f"| {size} | {w}{'' if whole else ' (short: closed by the end)'} | {feeder_ms:.1f} | {main_ms:.1f} | {fwd:.1f} | "
                  f"{('yes' if before else 'no') if whole else 'n/a'} | {('yes' if within else 'NO') if whole else 'n/a'} |")
    print(f"stream-latency: {'every whole window in time' if bad == 0 else f'{bad} windows late'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
