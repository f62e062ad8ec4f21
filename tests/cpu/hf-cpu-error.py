#!/usr/bin/env python3
"""transformers' own WhisperEncoder on the CPU, float32 and bfloat16 (model.to(torch.bfloat16),
its default attention), on real base: its error against the committed float64 reference, the
figure our CPU modes are compared with (docs/BENCHMARKS.md).

The weights are the library's reading of the CTranslate2 directory (tests/test-real-weights.py
fetches it; main --save-gguf, then gguf-py, as tests/data/make-ggml-references.py does); the
input is tests/data/features/speech_16k.mel80.npy; the error is the relative L2 distance of the
first 50 positions and the mean over 1500 from tests/data/ct2/base.speech_16k.ref.npy (as
tests/cpu/bench-cpu.py measures ours). Needs torch, transformers and gguf:

    WA_MAIN=build/main python3 tests/cpu/hf-cpu-error.py [--threads 2]
"""
import argparse
import importlib.util
import os
import sys
import time

import numpy as np
import torch
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d = load_module("real_weights", "tests/test-real-weights.py").fetch()
    if d is None:
        return 0
    hp, w = load_module("ggml_refs", "tests/data/make-ggml-references.py").library_weights(d)
    ref = np.load(os.path.join(ROOT, "tests", "data", "ct2", "base.speech_16k.ref.npy")).astype(np.float64)
    mel = np.load(os.path.join(ROOT, "tests", "data", "features", "speech_16k.mel80.npy")).reshape(1, 80, 3000)
    cfg = WhisperConfig(d_model=hp["embedding_length"], encoder_layers=hp["block_count"],
                        encoder_attention_heads=hp["attention.head_count"], encoder_ffn_dim=hp["feed_forward_length"],
                        num_mel_bins=hp["mels_count"])
    enc = WhisperEncoder(cfg).eval()
    missing, unexpected = enc.load_state_dict({k[len("encoder."):]: torch.from_numpy(v.astype(np.float32)) for k, v in w.items()},
                                              strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    print("torch %s, %d threads, attention %s" % (torch.__version__, args.threads, enc.config._attn_implementation))
    for dtype in (torch.float32, torch.bfloat16):
        m = enc.to(dtype)
        x = torch.from_numpy(mel).to(dtype)
        times = []
        with torch.no_grad():
            for _ in range(3):
                t0 = time.perf_counter()
                y = m(x).last_hidden_state[0].double().numpy()
                times.append((time.perf_counter() - t0) * 1e3)
        got = np.concatenate([y[:50], y.mean(axis=0, keepdims=True)])
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        print("transformers %-14s error vs float64 %.2e (%.0f ms a window, min of 3)" % (str(dtype).split(".")[1], err, min(times)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
