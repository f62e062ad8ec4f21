#!/usr/bin/env python3
# make-ggml-references.py - float64 references for the whisper.cpp model files in build/ggml.
#
#   WA_MAIN=build/main python3 tests/data/make-ggml-references.py
#                                       (from the repository root; needs torch, transformers, numpy,
#                                        gguf, and main: `make`)
#
# The files: whisper.cpp's own (tests/data/README.md), which tests/data/make-model-files.py writes
# again byte for byte into build/ggml (`make build/model-files.stamp`); they were in tests/data/ggml
# when this script was run.
# For each build/ggml/micro-N-TYPE.bin: our GGUF of it, written by the library (main --save-gguf,
# the format's one reader: issue 22; its blocks kept as they are), read with gguf-py; the encoder
# tensors dequantised exactly (in float64), puts them into the HF micro-N
# checkpoint's WhisperEncoder in place of its weights, runs it in float64 (eager attention, CPU)
# on features/speech_16k.melN.npy and saves the output as
# tests/data/ggml/micro-N-TYPE.speech_16k.last_hidden_state.npy (float32). It prints each file's
# quantisation error: its encoder matrices against the f16 file's, relative L2.

import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration

BLOCKS = {2: 18, 3: 20, 6: 22, 7: 24, 8: 34}     # ggml type -> bytes per block of 32


def library_gguf(src, out):
    """Our GGUF of the model src (any format main loads) at out, by main --save-gguf."""
    main = os.environ.get("WA_MAIN", os.path.join("build", "main"))
    subprocess.run([main, "-m", src, "--save-gguf", out], check=True, stderr=subprocess.DEVNULL)
    return out


def library_weights(src, dequantize_block=None):
    """({hparam: value} from whisper.encoder.* (mels_count, embedding_length, block_count,
    attention.head_count, feed_forward_length), {our encoder tensor name: float64 array of the
    PyTorch shape}) of the model src as the library reads it: main --save-gguf, then gguf-py's
    reader. dequantize_block(type, raw bytes, n) takes a block type's tensor to float64."""
    import gguf
    with tempfile.TemporaryDirectory() as tmp:
        r = gguf.GGUFReader(library_gguf(src, os.path.join(tmp, "model.gguf")))
        hp = {}
        for key in ("mels_count", "embedding_length", "block_count", "attention.head_count", "feed_forward_length"):
            field = r.fields["whisper.encoder." + key]
            hp[key] = int(field.parts[field.data[0]][0])
        out = {}
        for t in r.tensors:
            if not t.name.startswith("encoder."):
                continue
            kind, ne, raw = int(t.tensor_type), [int(n) for n in t.shape], t.data.tobytes()
            n = int(np.prod(ne))
            if kind == 0:
                v = np.frombuffer(raw, "<f4").astype(np.float64)
            elif kind == 1:
                v = np.frombuffer(raw, "<f2").astype(np.float64)
            elif kind == 30:
                v = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            else:
                v = dequantize_block(kind, raw, n)
            out[t.name] = v.reshape(tuple(reversed(ne)))
    return hp, out


def dequantize(t, raw, n):
    """ggml-quants.c's dequantize_row_* in float64: exact."""
    b = np.frombuffer(raw, np.uint8).reshape(n // 32, BLOCKS[t])
    d = b[:, 0:2].copy().view("<f2").astype(np.float64)
    has_min = t in (3, 7)
    m = b[:, 2:4].copy().view("<f2").astype(np.float64) if has_min else 0.0
    off = 4 if has_min else 2
    if t == 8:
        q = b[:, off:].view(np.int8).astype(np.float64)
    else:
        if t in (6, 7):
            qh = b[:, off:off + 4].copy().view("<u4").astype(np.int64)
            off += 4
        qs = b[:, off:off + 16].astype(np.int64)
        lo, hi = qs & 15, qs >> 4
        if t in (6, 7):
            j = np.arange(16)
            lo = lo | (((qh >> j) & 1) << 4)
            hi = hi | (((qh >> (j + 16)) & 1) << 4)
        q = np.concatenate([lo, hi], axis=1).astype(np.float64)
        q -= {2: 8, 3: 0, 6: 16, 7: 0}[t]
    return (q * d + m).reshape(-1)


def read_ggml(path):
    """(n_mels, {transformers encoder name: float64 array}): blocks dequantised here in float64,
    checked against gguf-py's (float32) dequantiser."""
    def block(t, raw, n):
        import gguf
        v = dequantize(t, raw, n)
        w = gguf.quants.dequantize(np.frombuffer(raw, np.uint8), gguf.GGMLQuantizationType(t)).reshape(-1)
        assert np.array_equal(w, v.astype(np.float32)), t
        return v
    hp, w = library_weights(path, block)
    return hp["mels_count"], w


def main():
    torch.set_default_dtype(torch.float64)
    files = sorted(glob.glob("build/ggml/micro-*.bin"))
    weights = {f: read_ggml(f) for f in files}
    for f in files:
        base = os.path.basename(f)[:-len(".bin")]
        model_name, ftype = base.rsplit("-", 1)
        n_mels, w = weights[f]
        model = WhisperForConditionalGeneration.from_pretrained("tests/data/" + model_name, attn_implementation="eager")
        enc = model.model.encoder.double().eval()
        sd = enc.state_dict()
        assert set("encoder." + k for k in sd) == set(w), (f, set("encoder." + k for k in sd) ^ set(w))
        enc.load_state_dict({k: torch.from_numpy(w["encoder." + k].reshape(sd[k].shape)) for k in sd})

        mel = np.load("tests/data/features/speech_16k.mel%d.npy" % n_mels).astype(np.float64)
        with torch.no_grad():
            y = enc(torch.from_numpy(mel)[None]).last_hidden_state[0].numpy()
        out = "tests/data/ggml/%s.speech_16k.last_hidden_state.npy" % base
        np.save(out, y[:100].astype(np.float32))   # the first 100 positions: small, and they depend on every weight

        f16 = weights.get("build/ggml/%s-f16.bin" % model_name)[1]
        mats = [k for k in w if w[k].ndim >= 2 and "embed_positions" not in k]
        num = sum(((w[k] - f16[k]) ** 2).sum() for k in mats)
        den = sum((f16[k] ** 2).sum() for k in mats)
        print("%s: matrices vs the f16 file: relative L2 %.3e; wrote %s" % (base, np.sqrt(num / den), out))


if __name__ == "__main__":
    sys.exit(main())
