#!/usr/bin/env python3
# make-ggml-references.py - float64 references for the whisper.cpp model files in build/ggml.
#
#   python3 tests/data/make-ggml-references.py      (from the repository root; needs torch,
#                                                    transformers, numpy; gguf to cross-check)
#
# The files: whisper.cpp's own (tests/data/README.md), which tests/data/make-model-files.py writes
# again byte for byte into build/ggml (`make build/model-files.stamp`); they were in tests/data/ggml
# when this script was run.
# For each build/ggml/micro-N-TYPE.bin: reads the file (its own small reader, not ours),
# dequantises its encoder tensors exactly (in float64), puts them into the HF micro-N
# checkpoint's WhisperEncoder in place of its weights, runs it in float64 (eager attention, CPU)
# on features/speech_16k.melN.npy and saves the output as
# tests/data/ggml/micro-N-TYPE.speech_16k.last_hidden_state.npy (float32). It prints each file's
# quantisation error: its encoder matrices against the f16 file's, relative L2.

import glob
import os
import struct
import sys

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration

BLOCKS = {2: 18, 3: 20, 6: 22, 7: 24, 8: 34}     # ggml type -> bytes per block of 32

# whisper.cpp's name parts -> transformers' (whisper.cpp's convert-h5-to-ggml.py conv_map, inverted)
RENAME = [("encoder.positional_embedding", "encoder.embed_positions.weight"),
          ("encoder.ln_post.", "encoder.layer_norm."), ("encoder.blocks.", "encoder.layers."),
          (".attn.query.", ".self_attn.q_proj."), (".attn.key.", ".self_attn.k_proj."),
          (".attn.value.", ".self_attn.v_proj."), (".attn.out.", ".self_attn.out_proj."),
          (".attn_ln.", ".self_attn_layer_norm."), (".mlp.0.", ".fc1."), (".mlp.2.", ".fc2."),
          (".mlp_ln.", ".final_layer_norm.")]


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
    """(n_mels, {transformers encoder name: float64 array, the file's shape squeezed})"""
    data = open(path, "rb").read()
    assert struct.unpack_from("<I", data, 0)[0] == 0x67676D6C, path
    hp = struct.unpack_from("<11i", data, 4)
    pos = 48
    n_mel, n_fft = struct.unpack_from("<2i", data, pos)
    pos += 8 + 4 * n_mel * n_fft
    (n_vocab,) = struct.unpack_from("<i", data, pos)
    pos += 4
    for _ in range(n_vocab):
        pos += 4 + struct.unpack_from("<i", data, pos)[0]
    out = {}
    while pos < len(data):
        n_dims, name_len, t = struct.unpack_from("<3i", data, pos)
        ne = struct.unpack_from("<%di" % n_dims, data, pos + 12)
        pos += 12 + 4 * n_dims
        name = data[pos:pos + name_len].decode()
        pos += name_len
        n = int(np.prod(ne))
        nbytes = n // 32 * BLOCKS[t] if t in BLOCKS else n * (4 if t == 0 else 2)
        raw = data[pos:pos + nbytes]
        pos += nbytes
        if not name.startswith("encoder."):
            continue
        if t in BLOCKS:
            v = dequantize(t, raw, n)
            try:                                    # cross-check with gguf-py's (float32) dequantiser
                import gguf
                w = gguf.quants.dequantize(np.frombuffer(raw, np.uint8), gguf.GGMLQuantizationType(t)).reshape(-1)
                assert np.array_equal(w, v.astype(np.float32)), name
            except ImportError:
                pass
        else:
            v = np.frombuffer(raw, "<f4" if t == 0 else "<f2").astype(np.float64)
        for a, b in RENAME:
            name = name.replace(a, b)
        out[name] = v.reshape(tuple(reversed(ne))).squeeze()
    return hp[9], out


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
