"""Random Whisper-shaped encoders and their float64 outputs in numpy alone (no torch): the cases of
tests/python/test_f32_error.py, whose transformers float32 errors tests/data/make-f32-error-references.py
measured once and committed in tests/data/f32-error.json.

A case is a shape (d_model, heads, layers, ffn, mels), a seed and a number of positions: the
weights come from numpy's generator with that seed, drawn as tests/data/make-tower-references.py
draws a tower's (matrices N(0, 1 / fan_in), norm weights 1 + 0.3 N, biases 0.3 N, every value
rounded to f16 so that float32 holds it exactly); the input is tests/data/features/speech_16k.melN.npy (real speech)
cut into windows of 2 x positions frames, unpadded as `--no-pad` runs them. The
reference is the encoder of DESIGN.md's graph in float64 (GELU by math.erf), which equals
transformers' WhisperEncoder in float64 to 1e-13.
"""
import json
import math
import os
import struct

import numpy as np

DATA = os.path.dirname(os.path.abspath(__file__))

# name: (d_model, heads, layers, ffn, mels, seed, positions)
CASES = {
    "base-1500": (512, 8, 6, 2048, 80, 1, 1500),
    "base-25": (512, 8, 6, 2048, 80, 1, 25),
    "large-v3-1500": (1280, 20, 1, 5120, 128, 3, 1500),
    "large-v3-25": (1280, 20, 1, 5120, 128, 3, 25),
}

# towers of tests/data/towers on their features reference: name: (make-tower-references.py's
# function, model directory, input log-mel, float64 reference of the tower's first rows)
TOWERS = {
    "tower-voxtral": ("voxtral", "towers/voxtral", "features/speech_16k.mel128.npy", "voxtral.speech_16k.features.tower.npy"),
}


def tower_mel(case):
    return np.load(os.path.join(DATA, TOWERS[case][2])).astype(np.float32)


def tower_reference(case):
    return np.load(os.path.join(DATA, "towers", TOWERS[case][3])).astype(np.float64)


def weights(case):
    """{transformers WhisperEncoder name: float32 array} of the case."""
    d, _, layers, ff, mels, seed, positions = CASES[case]
    shapes = {"conv1.weight": (d, mels, 3), "conv1.bias": (d,), "conv2.weight": (d, d, 3), "conv2.bias": (d,),
              "embed_positions.weight": (1500, d)}
    for i in range(layers):
        p = f"layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[p + f"self_attn.{n}.weight"] = (d, d)
            if n != "k_proj":
                shapes[p + f"self_attn.{n}.bias"] = (d,)
        for n in ("self_attn_layer_norm", "final_layer_norm"):
            shapes[p + n + ".weight"] = (d,)
            shapes[p + n + ".bias"] = (d,)
        shapes[p + "fc1.weight"], shapes[p + "fc1.bias"] = (ff, d), (ff,)
        shapes[p + "fc2.weight"], shapes[p + "fc2.bias"] = (d, ff), (d,)
    shapes["layer_norm.weight"], shapes["layer_norm.bias"] = (d,), (d,)
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        x = rng.standard_normal(shape)
        if len(shape) >= 2:
            x = x / math.sqrt(np.prod(shape[1:]))
        elif name.endswith("weight"):
            x = 1.0 + 0.3 * x
        else:
            x = 0.3 * x
        out[name] = x.astype(np.float16).astype(np.float32)
    return out


def mel(case):
    """The case's input windows [n, n_mels, 2 x positions]: the 3,000 frames cut into windows of
    2 x positions (one window of 1,500 positions; 60 of 25, which average the short case's error
    over the whole clip as the long one does)."""
    _, _, _, _, mels, _, positions = CASES[case]
    m = np.load(os.path.join(DATA, "features", f"speech_16k.mel{mels}.npy"))
    n = m.shape[1] // (2 * positions)
    return np.ascontiguousarray(m[:, :n * 2 * positions].reshape(mels, n, 2 * positions).transpose(1, 0, 2), dtype=np.float32)


def config(case):
    d, heads, layers, ff, mels, _, _ = CASES[case]
    return {"architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper", "d_model": d,
            "encoder_attention_heads": heads, "encoder_layers": layers, "encoder_ffn_dim": ff, "num_mel_bins": mels,
            "max_source_positions": 1500, "decoder_layers": 1, "decoder_attention_heads": heads,
            "decoder_ffn_dim": ff, "vocab_size": 128, "max_target_positions": 64, "activation_function": "gelu",
            "scale_embedding": False}


def write_model_dir(case, path):
    """A Hugging Face directory of the case (config.json, model.safetensors in F32, encoder only)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config(case), f)
    header, offset, blobs = {}, 0, []
    for name, x in weights(case).items():
        b = np.ascontiguousarray(x, "<f4").tobytes()
        header["model.encoder." + name] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _ln(x, w, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * w + b


def _conv_k3(x, w, b, stride):   # x [T, C_in], w [C_out, C_in, 3]: padding 1
    xp = np.pad(x, ((1, 1), (0, 0)))
    t_out = (x.shape[0] - 1) // stride + 1
    cols = np.stack([xp[k:k + stride * (t_out - 1) + 1:stride] for k in range(3)], axis=2)   # [T, C_in, 3]
    return cols.reshape(t_out, -1) @ w.reshape(w.shape[0], -1).T + b


def reference(case):
    """The case's output [n, positions, d_model] in float64."""
    W = {k: v.astype(np.float64) for k, v in weights(case).items()}
    return np.stack([_encode(case, W, m) for m in mel(case)])


def _encode(case, W, mel):   # one window [n_mels, frames]
    d, heads, layers, _, _, _, _ = CASES[case]
    hd = d // heads
    x = _gelu(_conv_k3(mel.astype(np.float64).T, W["conv1.weight"], W["conv1.bias"], 1))
    x = _gelu(_conv_k3(x, W["conv2.weight"], W["conv2.bias"], 2))
    x = x + W["embed_positions.weight"][:x.shape[0]]
    for i in range(layers):
        g = lambda n: W[f"layers.{i}.{n}"]
        h = _ln(x, g("self_attn_layer_norm.weight"), g("self_attn_layer_norm.bias"))
        q = h @ g("self_attn.q_proj.weight").T + g("self_attn.q_proj.bias")
        k = h @ g("self_attn.k_proj.weight").T
        v = h @ g("self_attn.v_proj.weight").T + g("self_attn.v_proj.bias")
        o = np.empty_like(q)
        for j in range(heads):
            c = slice(j * hd, (j + 1) * hd)
            s = q[:, c] @ k[:, c].T * hd ** -0.5
            p = np.exp(s - s.max(-1, keepdims=True))
            o[:, c] = (p / p.sum(-1, keepdims=True)) @ v[:, c]
        x = x + o @ g("self_attn.out_proj.weight").T + g("self_attn.out_proj.bias")
        h = _ln(x, g("final_layer_norm.weight"), g("final_layer_norm.bias"))
        x = x + _gelu(h @ g("fc1.weight").T + g("fc1.bias")) @ g("fc2.weight").T + g("fc2.bias")
    return _ln(x, W["layer_norm.weight"], W["layer_norm.bias"])


def rel_error(x, ref):
    x, ref = np.asarray(x, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))
