#!/usr/bin/env python3
"""Which of real base's linear layers can run in FP8? A float64 numpy emulation of --dtype fp8.

Runs on the CPU (no GPU, no torch): real Whisper base's encoder (build/carry/base-f16.gguf,
tests/gpu/transcripts.py --make-cpu makes it) on a clip's log-mel (the library's, through the
Python package), in float64, once exactly and once per variant with the CUDA backend's FP8 rule
applied to a chosen set of linear layers: each input row (token) and each weight row (output
channel) scaled so that its largest magnitude is 448 and rounded to e4m3 (3 mantissa bits,
subnormals from 2^-9, nearest even), the product rescaled. Attention, norms, GELU and the conv
stem stay exact. Prints each variant's relative L2 error against the exact float64 output
and writes its embedding as <clip>.emu-<variant>.npy into --out (for tests/gpu/transcripts.py).

What it found (2026-12-01, the clip `train`): every linear in FP8 8.5% (the GPU's own fp8
embedding: 8.8%); the first block's linears kept in bf16 4.1%; each kind of linear (q/k/v,
out, fc1, fc2) kept in bf16 in every block 6.7-8.1%; weights alone in FP8 5.4%, inputs alone
8.1%. So whisper-audio keeps block 0 in bf16 (whisper-audio.cpp, vt_set_fp8), and since
2026-12-07 the last block too (block0-last-bf16: 3.57-4.08% on the four clips against 4.06-4.58%).

Attention in FP8 too (issue 29's lever for fp8 batch 32; no kernel runs it yet): `attention`
emulates what an e4m3 attention kernel could do (q and k rows with their own scales, v a scale
per dimension, P's exponentials rounded a row; see attention()). 2026-12-07, the four clips:
the shipping rule (block0-bf16) 4.06-4.58%, with attention in FP8 after block 0 as well
4.21-4.72% (3-7% more); attention in FP8 alone after block 0 1.36-1.69%, in every block
5.07-6.16% (block 0's attention is as sensitive as its linears). Decoded (tests/gpu/transcripts.py
on the written embeddings): `train`'s "7" becomes "11" with the shipping rule's emulation (and
with attention alone in FP8 everywhere), not with attention added after block 0: that clip sits
at the edge FP8's noise reaches, whichever way the noise falls.

    python3 tests/gpu/fp8-layers.py [--clip train] [--out DIR] [--variants all,block0-bf16,...]
"""
import argparse
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("WHISPER_AUDIO_LIBRARY", os.path.join(ROOT, "build", "libwhisper-audio.so"))
import gguf  # noqa: E402  (pip install gguf)
import whisper_audio as wa  # noqa: E402

KINDS = {"qkv", "out", "fc1", "fc2"}


def e4m3_rows(x):
    """Each row scaled to a largest magnitude of 448 and rounded to e4m3; (values, scales)."""
    amax = np.abs(x).max(axis=1, keepdims=True)
    s = np.where(amax > 0, amax / 448.0, 1.0)
    y = x / s
    e = np.maximum(np.floor(np.log2(np.maximum(np.abs(y), 1e-30))), -6)
    step = 2.0 ** (e - 3)
    return np.round(y / step) * step, s


def linear(x, w, b, fp8):
    if fp8:
        qx, sx = e4m3_rows(x)
        qw, sw = e4m3_rows(w)
        y = (qx @ qw.T) * sx * sw.T
    else:
        y = x @ w.T
    return y if b is None else y + b


_erf = np.vectorize(math.erf)
def gelu(x): return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def layer_norm(x, g, b):
    m = x.mean(1, keepdims=True)
    v = ((x - m) ** 2).mean(1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


def conv_k3(x, w, b, stride):
    """x [T, C], w [O, C, 3], zero padding 1"""
    xp = np.pad(x, ((1, 1), (0, 0)))
    t_out = (x.shape[0] - 1) // stride + 1
    cols = np.stack([xp[k: k + stride * (t_out - 1) + 1: stride] for k in range(3)], axis=2)
    return cols.reshape(t_out, -1) @ w.reshape(w.shape[0], -1).T + b


def e4m3_cols(x):
    """Each column scaled to a largest magnitude of 448 and rounded to e4m3; (values, scales)."""
    q, s = e4m3_rows(x.T)
    return q.T, s.T


def attention(qh, kh, vh, fp8):
    """One head's softmax(q k^T / sqrt(d)) v, [T, d] each. fp8: as an FP8 attention kernel could run
    it on e4m3 tensor cores: q and k rows each with their own scale (folded into S's rows and
    columns), v with a scale per dimension (folded into O's columns), the softmax in full
    precision and its unnormalised exponentials (at most 1 a row) scaled a row to 448 and
    rounded to e4m3 for P V; the row sums from the exponentials before rounding."""
    d = qh.shape[1]
    if fp8:
        (q8, sq), (k8, sk) = e4m3_rows(qh), e4m3_rows(kh)
        s = (q8 @ k8.T) * sq * sk.T / math.sqrt(d)
    else:
        s = qh @ kh.T / math.sqrt(d)
    e = np.exp(s - s.max(-1, keepdims=True))
    l = e.sum(-1, keepdims=True)
    if fp8:
        (p8, sp), (v8, sv) = e4m3_rows(e), e4m3_cols(vh)
        return (p8 @ v8) * sp * sv / l
    return (e @ vh) / l


def encode(W, n_layer, n_head, mel, fp8_kinds):
    """fp8_kinds(layer) -> the kinds of linear in FP8 there (and "attention": attention in FP8)"""
    x = gelu(conv_k3(mel.T, W["encoder.conv1.weight"], W["encoder.conv1.bias"], 1))
    x = gelu(conv_k3(x, W["encoder.conv2.weight"], W["encoder.conv2.bias"], 2)) + W["encoder.embed_positions.weight"]
    for il in range(n_layer):
        p, q = f"encoder.layers.{il}.", fp8_kinds(il)
        h = layer_norm(x, W[p + "self_attn_layer_norm.weight"], W[p + "self_attn_layer_norm.bias"])
        qq = linear(h, W[p + "self_attn.q_proj.weight"], W[p + "self_attn.q_proj.bias"], "qkv" in q)
        kk = linear(h, W[p + "self_attn.k_proj.weight"], None, "qkv" in q)
        vv = linear(h, W[p + "self_attn.v_proj.weight"], W[p + "self_attn.v_proj.bias"], "qkv" in q)
        T, D = qq.shape
        qh, kh, vh = (a.reshape(T, n_head, D // n_head).transpose(1, 0, 2) for a in (qq, kk, vv))
        o = np.stack([attention(qh[i], kh[i], vh[i], "attention" in q) for i in range(n_head)]).transpose(1, 0, 2).reshape(T, D)
        x = x + linear(o, W[p + "self_attn.out_proj.weight"], W[p + "self_attn.out_proj.bias"], "out" in q)
        h = layer_norm(x, W[p + "final_layer_norm.weight"], W[p + "final_layer_norm.bias"])
        f = gelu(linear(h, W[p + "fc1.weight"], W[p + "fc1.bias"], "fc1" in q))
        x = x + linear(f, W[p + "fc2.weight"], W[p + "fc2.bias"], "fc2" in q)
    return layer_norm(x, W["encoder.layer_norm.weight"], W["encoder.layer_norm.bias"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "build", "carry", "base-f16.gguf"))
    ap.add_argument("--clip", default="train")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "fp8-layers"))
    ap.add_argument("--variants", default="", help="comma-separated names to run (default: all)")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"no {args.model}: tests/gpu/transcripts.py --make-cpu DIR makes it")
    r = gguf.GGUFReader(args.model)
    W = {t.name: np.array(t.data, np.float64).reshape([int(n) for n in reversed(t.shape)]) for t in r.tensors}
    n_layer = 1 + max(int(n.split(".")[2]) for n in W if n.startswith("encoder.layers."))
    n_head = 8 if W["encoder.conv1.bias"].size == 512 else sys.exit("the script knows base's head count only")
    m = wa.Model(args.model, device="cpu")
    mel = np.asarray(m.log_mel(wa.load_audio(os.path.join(ROOT, "tests/data/audio/speech", args.clip + ".wav"))), np.float64)[0]
    variants = {
        "all": lambda il: KINDS,
        "block0-bf16": lambda il: set() if il == 0 else KINDS,
        "block0-last-bf16": lambda il: set() if il in (0, n_layer - 1) else KINDS,
        **{k + "-bf16": (lambda k: lambda il: KINDS - {k})(k) for k in sorted(KINDS)},
        "block0-bf16+attention": lambda il: set() if il == 0 else KINDS | {"attention"},
        "attention-alone": lambda il: {"attention"},
        "attention-alone-after-block0": lambda il: set() if il == 0 else {"attention"},
    }
    if args.variants:
        unknown = set(args.variants.split(",")) - set(variants)
        if unknown:
            sys.exit(f"unknown variants {sorted(unknown)}: the names are {', '.join(variants)}")
        variants = {k: v for k, v in variants.items() if k in args.variants.split(",")}
    os.makedirs(args.out, exist_ok=True)
    ref = encode(W, n_layer, n_head, mel, lambda il: set())
    print(f"{args.clip}: relative L2 error against the exact float64 encoder")
    for name, kinds in variants.items():
        y = encode(W, n_layer, n_head, mel, kinds)
        np.save(os.path.join(args.out, f"{args.clip}.emu-{name}.npy"), y.astype(np.float32))
        print(f"  fp8 {name:18s} {np.linalg.norm(y - ref) / np.linalg.norm(ref):.4f}", flush=True)


if __name__ == "__main__":
    main()
