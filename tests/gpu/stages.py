#!/usr/bin/env python3
"""Stage times and peak memory of ./main on long audio: the speech of tests/data tiled to
10 and 64 minutes (16 kHz s16 WAV), large-v3 (random weights), batch 32, on CUDA.

Prints main's own timing line (decode, mel, encode) and the peak resident memory of each
run (getrusage of the child), so that the mel stage can be compared with the encoder and
the peak checked for growth with the input's length.
    python3 tests/gpu/stages.py [--model build/large-v3-random.gguf] [--threads 16]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import wave

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiled_wav(path, seconds):
    with wave.open(os.path.join(ROOT, "tests/data/audio/long_70s_16k.wav")) as src:
        frames = src.readframes(src.getnframes())
    need = seconds * 16000 * 2
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((frames * (need // len(frames) + 1))[:need])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "build/large-v3-random.gguf"))
    ap.add_argument("--threads", default=str(os.cpu_count()))
    ap.add_argument("--batch", default="32")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for minutes in (10, 64):
            wav = os.path.join(tmp, f"long_{minutes}min.wav")
            tiled_wav(wav, minutes * 60)
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            r = subprocess.run([os.path.join(ROOT, "main"), "-m", args.model, "-f", wav, "-b", args.batch, "-t", args.threads,
                                "--device", "cuda", "--no-progress", "-o", os.path.join(tmp, "out.npy")],
                               capture_output=True, text=True)
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            timing = [l for l in r.stderr.splitlines() if l.startswith("timings:")]
            print(f"{minutes} min ({minutes * 2} windows), batch {args.batch}, {args.threads} threads: rc {r.returncode}, "
                  f"peak RSS {peak / 1024:.0f} MiB{' (max so far)' if peak == before else ''}")
            print("  " + (timing[0] if timing else r.stderr[-2000:]))
            os.remove(wav)
    return 0


if __name__ == "__main__":
    sys.exit(main())
