#!/usr/bin/env python3
"""One encoder layer step by step: each step's relative L2 error against float64 on the same
float32 inputs, for transformers' f32 op (torch on the CPU) and for numpy emulations of how the
CPU backend's kernels accumulate (vt-cpu-kernels.h): ours_chain, one float32 FMA chain over all of K
(the kernels before they summed K in chunks); kc128, chunks of 128 each summed from zero and added
(GEMM_KC, ATTN_KC now); chains4, four interleaved chains. Measurement only (needs torch, transformers):

    python tests/cpu/f32-steps.py [--shape base] [--positions 1500]

The layer is layer 0 of tests/cpu/f32-error.py's random encoder, its input the float64 hidden state
after the conv stem on real speech. An FMA chain is emulated in float64 with a rounding to float32
after each step (a product of two floats is exact in float64).
"""
import argparse
import importlib.util
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("f32_error", os.path.join(ROOT, "tests", "cpu", "f32-error.py"))
fe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fe)
f32 = np.float32


def r32(x):
    return np.asarray(x, np.float64).astype(f32).astype(np.float64)


def rel(x, ref):
    return float(np.linalg.norm(np.asarray(x, np.float64) - ref) / np.linalg.norm(ref))


def chain(A, B, kc=None, chains=1):
    """C = A B, A [M, K], B [K, N] (float32 values): one FMA chain per output over all of K, or
    `chains` interleaved chains (k % chains) added at the end, or blocks of kc each summed from zero
    and added to C."""
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    K = A.shape[1]
    if kc:
        C = np.zeros((A.shape[0], B.shape[1]))
        for k0 in range(0, K, kc):
            C = r32(C + chain(A[:, k0:k0 + kc], B[k0:k0 + kc]))
        return C
    accs = [np.zeros((A.shape[0], B.shape[1])) for _ in range(chains)]
    for k in range(K):
        accs[k % chains] = r32(accs[k % chains] + np.outer(A[:, k], B[k]))
    C = accs[0]
    for a in accs[1:]:
        C = r32(C + a)
    return C


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="base", choices=fe.SHAPES)
    ap.add_argument("--positions", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rows", type=int, default=96, help="query rows emulated (the chains are slow in numpy)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    cfg = fe.config(args.shape, 1)
    enc = fe.WhisperEncoder(cfg).eval()
    fe.randomise(enc, args.seed)
    mels = fe.SHAPES[args.shape][4]
    T = args.positions
    mel = np.load(os.path.join(ROOT, "tests", "data", "features", f"speech_16k.mel{mels}.npy"))[:, :2 * T].astype(np.float32)
    c = fe.config_like(cfg, T)
    state = {k: v.detach().clone() for k, v in enc.state_dict().items()}
    enc = fe.encoder(c, state).double()
    with torch.no_grad():
        x = enc(torch.from_numpy(mel[None]).double(), output_hidden_states=True).hidden_states[0][0].numpy()
    W = {k: v.double().numpy() for k, v in state.items() if k.startswith("layers.0.")}
    g = lambda n: W["layers.0." + n]
    d, H = cfg.d_model, cfg.encoder_attention_heads
    hd = d // H
    R = args.rows   # rows of the output emulated (all of T for the keys)

    def ln(x, w, b):
        m = x.mean(-1, keepdims=True)
        return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b

    def report(name, exact, **errs):
        print(f"  {name:34s} " + " ".join(f"{k} {rel(v, exact):.3e}" for k, v in errs.items()), flush=True)

    print(f"{args.shape} layer 0, {T} positions, errors of one step on float32 inputs ({R} rows emulated)")
    h = r32(ln(x, g("self_attn_layer_norm.weight"), g("self_attn_layer_norm.bias")))
    Wqkv = np.concatenate([g("self_attn.q_proj.weight"), g("self_attn.k_proj.weight"), g("self_attn.v_proj.weight")])
    bqkv = np.concatenate([g("self_attn.q_proj.bias"), np.zeros(d), g("self_attn.v_proj.bias")])
    # QKV GEMM, K = d
    exact = h[:R] @ Wqkv.T + bqkv
    t32 = torch.nn.functional.linear(torch.from_numpy(h[:R]).float(), torch.from_numpy(Wqkv).float(),
                                     torch.from_numpy(bqkv).float()).numpy()
    ours = r32(chain(h[:R], Wqkv.T) + bqkv)
    report(f"qkv GEMM (K {d})", exact, torch=t32, ours_chain=ours, chains4=r32(chain(h[:R], Wqkv.T, chains=4) + bqkv),
           kc128=r32(chain(h[:R], Wqkv.T, kc=128) + bqkv))
    qkv = r32(h @ Wqkv.T + bqkv)
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(T, H, hd).transpose(1, 0, 2) for i in range(3))
    scale = hd ** -0.5
    # attention on float32 q, k, v: rows [0, R) of every head
    S = np.einsum("hqd,hkd->hqk", q[:, :R], k) * scale
    P = np.exp(S - S.max(-1, keepdims=True))
    exact = np.einsum("hqk,hkd->hqd", P / P.sum(-1, keepdims=True), v)
    tq, tk, tv = (torch.from_numpy(a).float()[None] for a in (q[:, :R], k, v))
    t32 = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv).numpy()[0]
    # ours: S by one chain over hd of (scale q) k, numerators exp(S - max) in f32, sum in double,
    # O = one chain over the keys of P V, then * f32(1 / sum)
    S32 = np.stack([chain(r32(q[h_, :R] * scale), k[h_].T) for h_ in range(H)])
    P32 = r32(np.exp(S32 - S32.max(-1, keepdims=True)))
    inv = r32(1.0 / P32.sum(-1, keepdims=True))
    report("scores S = q k (K hd)", S, ours_chain=S32)
    O_chain = np.stack([chain(P32[h_], v[h_]) for h_ in range(H)])
    O_exactPV = np.einsum("hqk,hkd->hqd", P32, v)
    report(f"P V (K {T}), exact S and P", np.einsum("hqk,hkd->hqd", P, v),
           ours_chain=np.stack([chain(r32(P[h_]), v[h_]) for h_ in range(H)]))
    report("attention output", exact, torch=t32, ours=r32(O_chain * inv), ours_PV_exact=r32(O_exactPV * inv),
           PV_chains4=r32(np.stack([chain(P32[h_], v[h_], chains=4) for h_ in range(H)]) * inv),
           PV_kc128=r32(np.stack([chain(P32[h_], v[h_], kc=128) for h_ in range(H)]) * inv))
    # fc2, K = ffn
    a = r32(np.random.default_rng(0).standard_normal((R, cfg.encoder_ffn_dim)))
    w2 = g("fc2.weight")
    exact = a @ w2.T
    t32 = torch.nn.functional.linear(torch.from_numpy(a).float(), torch.from_numpy(w2).float()).numpy()
    report(f"fc2 GEMM (K {cfg.encoder_ffn_dim})", exact, torch=t32, ours_chain=chain(a, w2.T), chains4=chain(a, w2.T, chains=4),
           kc128=chain(a, w2.T, kc=128))


if __name__ == "__main__":
    sys.exit(main())
