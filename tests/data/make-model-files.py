#!/usr/bin/env python3
# make-model-files.py - whisper.cpp's ggml-*.bin files and CTranslate2 model directories of the
# micro checkpoints (tests/data/micro-N), written again at test time, byte for byte as the real
# tools wrote them, by Python 3 alone (no numpy, torch or transformers).
#
#   python3 tests/data/make-model-files.py OUT_DIR        (`make` runs it with OUT_DIR = build)
#
# Writes OUT_DIR/ggml/micro-N-TYPE.bin and OUT_DIR/ct2/micro-N-Q/{model.bin,config.json,
# vocabulary.json}. The real tools' files were made once (tests/data/README.md: whisper.cpp's
# models/convert-h5-to-ggml.py and whisper-quantize at commit 233fe1fc, CTranslate2 4.8.5's
# TransformersConverter) and were 12 and 14 MB of the repository; their float64 reference outputs
# stay in tests/data/ggml and tests/data/ct2. This script does what those tools do to these
# checkpoints, in the same order and the same float32 arithmetic, and checks every file it writes
# against the sha256 of the real tool's file (SHA256 below): a file that differs by one byte is an
# error, not a test input.
#
# What the tools do, as this script repeats it:
# - convert-h5-to-ggml.py: hparams; whisper's mel_filters.npz bank (librosa.filters.mel, float32,
#   recomputed here as librosa computes it); the 128 one-byte tokens of the checkpoint copy's
#   vocab.json; then every tensor of the state dict in module order but proj_out, each rounded to
#   f16 and stored f16 if 2-D or more (conv kernels included), else (and the positional
#   embeddings, the conv biases as [d, 1]) stored as f32 of the f16 value.
# - whisper-quantize: the same header with ftype + 2000, every 2-D tensor but the positional
#   embeddings quantised by ggml's reference quantize_row_*_ref from its f16 values; the rest as is.
# - TransformersConverter + ModelSpec.optimize: WhisperSpec's variables (q, k, v fused, the missing
#   k bias as zeros), sorted by name, the tied projection as an alias; weights (linear,
#   embeddings, conv) of an int type quantised per row (int8: 127 / amax, conv kernels as [d, -1])
#   or per tensor (int16: 2^10 / amax), everything else converted to the stored float type.
import array
import hashlib
import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

GGML_FILES = {"micro-80": ["f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0"], "micro-128": ["q8_0"]}
CT2_DIRS = {"micro-80": ["float32", "float16", "bfloat16", "int8", "int8_float16", "int16"], "micro-128": ["int8"]}

# sha256 of the real tools' files (tests/data/README.md), which these must equal
SHA256 = {
    "ggml/micro-80-f16.bin": "3a7dcd1c51dd7f17f8f8b166742d658406592441b32a8da692a35640812d93f0",
    "ggml/micro-80-q8_0.bin": "0a764a1367acf3185d546b80e2157d4630b82a7419053db13c3a0877fc9cf5de",
    "ggml/micro-80-q5_1.bin": "b1daaa27844bec3032bf9eb6c704b8ad4a5db4eeaab3b57e3a3b09e755d08e90",
    "ggml/micro-80-q5_0.bin": "e3a30b7f39163c32e988d8bff49e0fd2e7c10643cc7fc849bf3ba50b49548c8e",
    "ggml/micro-80-q4_1.bin": "df1489d74d0a3dd636ee233f4ac3da8afbdde310d91e0a7c0f98bfaab84e32fc",
    "ggml/micro-80-q4_0.bin": "a5ff6bae910c8048b7b6d15ef3dffd9a0dd02b8c1055e5cc779a99d8fd3752f3",
    "ggml/micro-128-q8_0.bin": "2fd3ec50e552cdca01d47fb945dfdaa4a6b95294d37647f02c13a796bcb19faa",
    "ct2/micro-80-float32/model.bin": "0b724807b47a53758e6751a71187cf31285b75f819bffdf96f9d6004165f9048",
    "ct2/micro-80-float16/model.bin": "9688b5d6e981229e85c51d5d138eac00bb057e4f50dc9758df52617f250aeb03",
    "ct2/micro-80-bfloat16/model.bin": "a5e95d45258f5a8486b263917dbaae4ce9687c4fbc483109c4eb04fc3587b8fa",
    "ct2/micro-80-int8/model.bin": "c0db46a5841e904f397202195a6c3002527972c4fae6461f088bbcca68e9d997",
    "ct2/micro-80-int8_float16/model.bin": "e058679f05f51c69be5fb5641ef742e4dd5795aefbf7ade974c51f44626bd5ba",
    "ct2/micro-80-int16/model.bin": "fd3bd2b6cc479001624a69fa5a4321527872e762de60ca11b9a1ac465406ceaf",
    "ct2/micro-128-int8/model.bin": "f9901be06afea679e129b81668ab3c41b20127e3d698ed2826b10c4999ca448a",
    "ct2/config.json": "3e61ddba4c98f1040f2cbbba95ed88cec0b947e467433e0d341bdc3406f58a24",
    "ct2/vocabulary.json": "5cae9223f3a451f1bc3b24a5e3d75d638180330222f87c29d3447f207e4d818a",
}


# ---- the checkpoint ---------------------------------------------------------------------------

class Tensor:
    def __init__(self, shape, vals):
        self.shape, self.vals = list(shape), vals      # vals: array('f'), row-major

    def squeeze(self):
        return Tensor([d for d in self.shape if d != 1], self.vals)


def read_checkpoint(d):
    """({HF name without 'model.': Tensor}, config)"""
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    head = json.loads(blob[8:8 + n])
    out = {}
    for name, info in head.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit("%s: %s is %s, not F32" % (d, name, info["dtype"]))
        a, b = info["data_offsets"]
        vals = array.array("f")
        vals.frombytes(blob[8 + n + a:8 + n + b])
        if sys.byteorder != "little":
            vals.byteswap()
        out[name[len("model."):] if name.startswith("model.") else name] = Tensor(info["shape"], vals)
    with open(os.path.join(d, "config.json")) as f:
        return out, json.load(f)


def module_order(cfg):
    """The state dict's names (WhisperModel's module registration order) without 'model.'."""
    def layer(p, cross):
        names = []
        for att in ["self_attn"] + (["encoder_attn"] if cross else []):
            names += ["%s.%s.k_proj.weight" % (p, att)]
            names += ["%s.%s.%s.%s" % (p, att, proj, wb) for proj in ("v_proj", "q_proj", "out_proj") for wb in ("weight", "bias")]
            names += ["%s.%s_layer_norm.%s" % (p, att, wb) for wb in ("weight", "bias")]
        names += ["%s.%s.%s" % (p, m, wb) for m in ("fc1", "fc2", "final_layer_norm") for wb in ("weight", "bias")]
        return names
    names = ["encoder.conv1.weight", "encoder.conv1.bias", "encoder.conv2.weight", "encoder.conv2.bias",
             "encoder.embed_positions.weight"]
    for i in range(cfg["encoder_layers"]):
        names += layer("encoder.layers.%d" % i, False)
    names += ["encoder.layer_norm.weight", "encoder.layer_norm.bias",
              "decoder.embed_tokens.weight", "decoder.embed_positions.weight"]
    for i in range(cfg["decoder_layers"]):
        names += layer("decoder.layers.%d" % i, True)
    return names + ["decoder.layer_norm.weight", "decoder.layer_norm.bias"]


# ---- float32 / f16 / bf16 arithmetic --------------------------------------------------------------

def f32(x):
    """x rounded to float32 (one float32 operation = the double result rounded: exact for + - * /)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def to_f16_bytes(vals):
    return struct.pack("<%de" % len(vals), *vals)       # round to nearest even, as numpy and ggml do


def f16_round(vals):
    return array.array("f", struct.unpack("<%de" % len(vals), to_f16_bytes(vals)))


def to_bf16_bytes(vals):
    bits = array.array("I")
    bits.frombytes(f32_bytes(vals))
    return struct.pack("<%dH" % len(bits), *[(b + 0x7FFF + ((b >> 16) & 1)) >> 16 for b in bits])   # RNE


def f32_bytes(vals):
    a = array.array("f", vals)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


# ---- whisper.cpp ------------------------------------------------------------------------------------

def librosa_mel(n_mels, sr=16000, n_fft=400):
    """librosa.filters.mel(sr=16000, n_fft=400, n_mels=N) (slaney scale and norm, float32): whisper's
    mel_filters.npz, as librosa computes it (float64, each weight stored to float32, then the
    float32 weight times the float64 norm stored to float32; the first weight is -0.0)."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0

    def hz_to_mel(f):
        return min_log_mel + math.log(f / min_log_hz) / logstep if f >= min_log_hz else f / f_sp

    def mel_to_hz(m):
        return min_log_hz * math.exp(logstep * (m - min_log_mel)) if m >= min_log_mel else f_sp * m
    lo, hi, num = hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2
    step = (hi - lo) / (num - 1)                                 # np.linspace
    mels = [i * step + lo for i in range(num - 1)] + [hi]
    mel_f = [mel_to_hz(m) for m in mels]
    val = 1.0 / (n_fft * (1.0 / sr))                             # np.fft.rfftfreq
    fft = [i * val for i in range(n_fft // 2 + 1)]
    out = []
    for i in range(n_mels):
        fd0, fd1 = mel_f[i + 1] - mel_f[i], mel_f[i + 2] - mel_f[i + 1]
        enorm = 2.0 / (mel_f[i + 2] - mel_f[i])
        for f in fft:
            lower, upper = -(mel_f[i] - f) / fd0, (mel_f[i + 2] - f) / fd1
            w = lower if lower < upper else upper               # np.minimum, then np.maximum(0, w) as
            w = f32(0.0 if 0.0 > w else w)                       # SIMD min/max do it: -0.0 stays -0.0
            out.append(f32(w * enorm))
    return out


GGML_NAMES = {"self_attn.k_proj": "attn.key", "self_attn.q_proj": "attn.query", "self_attn.v_proj": "attn.value",
              "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_ln",
              "encoder_attn.k_proj": "cross_attn.key", "encoder_attn.q_proj": "cross_attn.query",
              "encoder_attn.v_proj": "cross_attn.value", "encoder_attn.out_proj": "cross_attn.out",
              "encoder_attn_layer_norm": "cross_attn_ln", "fc1": "mlp.0", "fc2": "mlp.2", "final_layer_norm": "mlp_ln",
              "encoder.layer_norm.bias": "encoder.ln_post.bias", "encoder.layer_norm.weight": "encoder.ln_post.weight",
              "encoder.embed_positions.weight": "encoder.positional_embedding",
              "decoder.layer_norm.bias": "decoder.ln.bias", "decoder.layer_norm.weight": "decoder.ln.weight",
              "decoder.embed_positions.weight": "decoder.positional_embedding",
              "decoder.embed_tokens.weight": "decoder.token_embedding.weight"}
F32_NAMES = ("encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding", "decoder.positional_embedding")


def ggml_name(name):
    nn = name.split(".")
    if nn[1] == "layers":
        return ".".join([nn[0], "blocks", nn[2], GGML_NAMES[".".join(nn[3:-1])], nn[-1]])
    return GGML_NAMES.get(name, name)


def ggml_f16_tensors(ckpt, cfg):
    """convert-h5-to-ggml.py's tensors: [(name, dims innermost first, ttype, values)], values
    already rounded to f16 (array('f'))."""
    out = []
    for src in module_order(cfg):
        t = ckpt[src].squeeze()
        name = ggml_name(src)
        shape = t.shape + [1] if name in ("encoder.conv1.bias", "encoder.conv2.bias") else t.shape
        ttype = 0 if len(shape) < 2 or name in F32_NAMES else 1
        out.append((name, list(reversed(shape)), ttype, f16_round(t.vals)))
    return out


def ggml_header(cfg, ftype):
    h = struct.pack("<12i", 0x67676D6C, cfg["vocab_size"], cfg["max_source_positions"], cfg["d_model"],
                    cfg["encoder_attention_heads"], cfg["encoder_layers"], cfg.get("max_length") or cfg["max_target_positions"],
                    cfg["d_model"], cfg["decoder_attention_heads"], cfg["decoder_layers"], cfg["num_mel_bins"], ftype)
    n_mels = cfg["num_mel_bins"]
    h += struct.pack("<2i", n_mels, 201) + f32_bytes(librosa_mel(n_mels))
    # the checkpoint copy's vocab.json: GPT-2's byte-to-unicode characters of the bytes 0-127 (ids 0-127)
    h += struct.pack("<i", 128) + b"".join(struct.pack("<i", 1) + bytes([i]) for i in range(128))
    return h


# ggml's reference quantisers (ggml-quants.c quantize_row_*_ref), one block of 32 f32 values -> bytes
def q8_0(x):
    amax = max(abs(v) for v in x)
    d = f32(amax / 127)
    idv = f32(1.0 / d) if d else 0.0
    qs = []
    for v in x:
        x0 = f32(v * idv)
        qs.append(int(math.floor(abs(x0) + 0.5)) * (1 if x0 >= 0 else -1))      # roundf: half away from zero
    return to_f16_bytes([d]) + struct.pack("<32b", *qs)


def _absmax(x):
    amax, mx = 0.0, 0.0
    for v in x:
        if amax < abs(v):
            amax, mx = abs(v), v
    return mx


def _trunc(v):
    return int(v)        # C's (int8_t) / (uint8_t) cast of a value in range: toward zero


def _qh(xs):
    qh = 0
    for j, q in enumerate(xs[:16]):
        qh |= ((q & 0x10) >> 4) << j
    for j, q in enumerate(xs[16:]):
        qh |= ((q & 0x10) >> 4) << (j + 16)
    return struct.pack("<I", qh)


def q4_0(x):
    d = f32(_absmax(x) / -8)
    idv = f32(1.0 / d) if d else 0.0
    q = [min(15, _trunc(f32(f32(v * idv) + 8.5))) for v in x]
    return to_f16_bytes([d]) + bytes(q[j] | (q[16 + j] << 4) for j in range(16))


def q4_1(x):
    mn, mx = min(x), max(x)
    d = f32(f32(mx - mn) / 15)
    idv = f32(1.0 / d) if d else 0.0
    q = [min(15, _trunc(f32(f32(f32(v - mn) * idv) + 0.5))) for v in x]
    return to_f16_bytes([d, mn]) + bytes(q[j] | (q[16 + j] << 4) for j in range(16))


def q5_0(x):
    d = f32(_absmax(x) / -16)
    idv = f32(1.0 / d) if d else 0.0
    q = [min(31, _trunc(f32(f32(v * idv) + 16.5))) for v in x]
    return to_f16_bytes([d]) + _qh(q) + bytes((q[j] & 15) | ((q[16 + j] & 15) << 4) for j in range(16))


def q5_1(x):
    mn, mx = min(x), max(x)
    d = f32(f32(mx - mn) / 31)
    idv = f32(1.0 / d) if d else 0.0
    q = [_trunc(f32(f32(f32(v - mn) * idv) + 0.5)) for v in x]
    return to_f16_bytes([d, mn]) + _qh(q) + bytes((q[j] & 15) | ((q[16 + j] & 15) << 4) for j in range(16))


# ftype (the file's hparam, ggml_ftype) and tensor type of each quantisation
QUANTS = {"q4_0": (2, 2, q4_0), "q4_1": (3, 3, q4_1), "q5_0": (8, 6, q5_0), "q5_1": (9, 7, q5_1), "q8_0": (7, 8, q8_0)}


def ggml_file(ckpt, cfg, kind):
    tensors = ggml_f16_tensors(ckpt, cfg)
    out = [ggml_header(cfg, 1 if kind == "f16" else 2000 + QUANTS[kind][0])]
    for name, dims, ttype, vals in tensors:
        quantise = kind != "f16" and len(dims) == 2 and name not in F32_NAMES
        if quantise:
            fn = QUANTS[kind][2]
            ttype = QUANTS[kind][1]
            data = b"".join(fn(vals[i:i + 32]) for i in range(0, len(vals), 32))
        else:
            data = f32_bytes(vals) if ttype == 0 else to_f16_bytes(vals)
        enc = name.encode()
        out.append(struct.pack("<%di" % (3 + len(dims)), len(dims), len(enc), ttype, *dims) + enc + data)
    return b"".join(out)


# ---- CTranslate2 ------------------------------------------------------------------------------------

def ct2_variables(ckpt, cfg):
    """WhisperSpec's variables as the converter sets them: {name: (shape, values or None, scalar
    (dtype id, bytes) or None, quantisable)}."""
    v = {}

    def put(name, t, quantisable=False):
        v[name] = (t.shape, t.vals, None, quantisable)

    def linear(name, src, fused=None, no_bias=()):
        parts = fused or [src]
        w = array.array("f")
        b = array.array("f")
        rows = 0
        for p in parts:
            t = ckpt[p + ".weight"]
            w.extend(t.vals)
            rows += t.shape[0]
            b.extend(array.array("f", [0.0] * t.shape[0]) if p in no_bias else ckpt[p + ".bias"].vals)
        v[name + "/weight"] = ([rows, ckpt[parts[0] + ".weight"].shape[1]], w, None, True)
        v[name + "/bias"] = ([rows], b, None, False)

    def norm(name, src):
        put(name + "/gamma", ckpt[src + ".weight"])
        put(name + "/beta", ckpt[src + ".bias"])

    def scalar(name, dtype, fmt, value):
        v[name] = ([], None, (dtype, struct.pack("<" + fmt, value)), False)

    for c in ("conv1", "conv2"):
        put("encoder/%s/weight" % c, ckpt["encoder.%s.weight" % c], True)
        put("encoder/%s/bias" % c, ckpt["encoder.%s.bias" % c])
    put("encoder/position_encodings/encodings", ckpt["encoder.embed_positions.weight"])
    scalar("encoder/num_heads", 2, "h", cfg["encoder_attention_heads"])
    for i in range(cfg["encoder_layers"]):
        s, p = "encoder/layer_%d/" % i, "encoder.layers.%d." % i
        norm(s + "self_attention/layer_norm", p + "self_attn_layer_norm")
        qkv = [p + "self_attn.%s_proj" % x for x in "qkv"]
        linear(s + "self_attention/linear_0", None, qkv, no_bias=[qkv[1]])
        linear(s + "self_attention/linear_1", p + "self_attn.out_proj")
        norm(s + "ffn/layer_norm", p + "final_layer_norm")
        linear(s + "ffn/linear_0", p + "fc1")
        linear(s + "ffn/linear_1", p + "fc2")
    norm("encoder/layer_norm", "encoder.layer_norm")

    put("decoder/embeddings/weight", ckpt["decoder.embed_tokens.weight"], True)
    put("decoder/position_encodings/encodings", ckpt["decoder.embed_positions.weight"])
    for i in range(cfg["decoder_layers"]):
        s, p = "decoder/layer_%d/" % i, "decoder.layers.%d." % i
        norm(s + "self_attention/layer_norm", p + "self_attn_layer_norm")
        qkv = [p + "self_attn.%s_proj" % x for x in "qkv"]
        linear(s + "self_attention/linear_0", None, qkv, no_bias=[qkv[1]])
        linear(s + "self_attention/linear_1", p + "self_attn.out_proj")
        norm(s + "attention/layer_norm", p + "encoder_attn_layer_norm")
        linear(s + "attention/linear_0", p + "encoder_attn.q_proj")
        kv = [p + "encoder_attn.%s_proj" % x for x in "kv"]
        linear(s + "attention/linear_1", None, kv, no_bias=[kv[0]])
        linear(s + "attention/linear_2", p + "encoder_attn.out_proj")
        norm(s + "ffn/layer_norm", p + "final_layer_norm")
        linear(s + "ffn/linear_0", p + "fc1")
        linear(s + "ffn/linear_1", p + "fc2")
    norm("decoder/layer_norm", "decoder.layer_norm")
    # TransformerDecoderSpec's constants for Whisper (GELU = 3); the alignment heads: CTranslate2's
    # default, every head of the second half of the decoder's layers
    for name, value in (("activation", 3), ("alibi", 0), ("alibi_use_positive_positions", 0), ("pre_norm", 1),
                        ("scale_alibi", 0), ("scale_embeddings", 0), ("start_from_zero_embedding", 0)):
        scalar("decoder/" + name, 1, "b", value)
    scalar("decoder/alignment_heads", 2, "h", 1)
    scalar("decoder/alignment_layer", 2, "h", -1)
    scalar("decoder/num_heads", 2, "h", cfg["decoder_attention_heads"])
    return v


def ct2_model_bin(ckpt, cfg, q):
    stored = {"float32": "f32", "int8": "f32", "int16": "f32", "float16": "f16", "int8_float16": "f16", "bfloat16": "bf16"}[q]
    out = []
    for name, (shape, vals, sc, quantisable) in ct2_variables(ckpt, cfg).items():
        if sc is not None:
            out.append((name, shape, sc[0], sc[1]))
        elif quantisable and q in ("int8", "int8_float16"):
            cols = len(vals) // shape[0]                        # conv kernels as [d, n_in * 3]
            qs, scales = [], []
            for r in range(shape[0]):
                row = vals[r * cols:(r + 1) * cols]
                amax = max(abs(x) for x in row) or 127.0
                s = f32(127.0 / amax)
                scales.append(s)
                qs += [round(x) for x in array.array("f", [x * s for x in row])]     # np.rint: half to even
            out.append((name, shape, 1, struct.pack("<%db" % len(qs), *qs)))
            out.append((name + "_scale", [shape[0]], 0, f32_bytes(scales)))
        elif quantisable and q == "int16":
            s = f32(2.0 ** 10 / max(abs(x) for x in vals))
            qs = [max(-32768, min(32767, round(x))) for x in array.array("f", [x * s for x in vals])]
            out.append((name, shape, 2, struct.pack("<%dh" % len(qs), *qs)))
            out.append((name + "_scale", [], 0, f32_bytes([s])))
        elif stored == "f16":
            out.append((name, shape, 4, to_f16_bytes(vals)))
        elif stored == "bf16":
            out.append((name, shape, 5, to_bf16_bytes(vals)))
        else:
            out.append((name, shape, 0, f32_bytes(vals)))
    out.sort(key=lambda x: x[0])

    def string(s):
        return struct.pack("<H", len(s) + 1) + s.encode() + b"\0"
    b = [struct.pack("<I", 6), string("WhisperSpec"), struct.pack("<II", 3, len(out))]
    for name, shape, dtype, data in out:
        b += [string(name), struct.pack("<B%dI" % len(shape), len(shape), *shape), struct.pack("<BI", dtype, len(data)), data]
    b += [struct.pack("<I", 1), string("decoder/projection/weight"), string("decoder/embeddings/weight")]
    return b"".join(b)


def ct2_config(cfg):
    c = {"alignment_heads": [[cfg["decoder_layers"] // 2 + i // cfg["decoder_attention_heads"], i % cfg["decoder_attention_heads"]]
                             for i in range((cfg["decoder_layers"] - cfg["decoder_layers"] // 2) * cfg["decoder_attention_heads"])],
         "lang_ids": [], "suppress_ids": cfg["suppress_tokens"], "suppress_ids_begin": cfg["begin_suppress_tokens"]}
    return json.dumps(c, indent=2, sort_keys=True) + "\n"


def ct2_vocabulary(cfg):
    # CTranslate2's vocabulary of a checkpoint without a tokenizer: <|endoftext|>, then timestamps
    toks = ["<|endoftext|>"] + ["<|%d.%02d|>" % divmod(2 * i, 100) for i in range(cfg["vocab_size"] - 1)]
    return json.dumps(toks, indent=2)


# ---- main -------------------------------------------------------------------------------------------

def main(argv):
    if len(argv) != 2:
        sys.exit("usage: make-model-files.py OUT_DIR")
    out_dir = argv[1]
    made = []

    def write(rel, data, check):
        if isinstance(data, str):
            data = data.encode()
        want = SHA256[check]
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            sys.exit("make-model-files.py: %s differs from the real tool's file (sha256 %s, want %s)" % (rel, got, want))
        path = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        made.append(rel)

    for model in sorted(set(GGML_FILES) | set(CT2_DIRS)):
        ckpt, cfg = read_checkpoint(os.path.join(HERE, model))
        for kind in GGML_FILES.get(model, []):
            rel = "ggml/%s-%s.bin" % (model, kind)
            write(rel, ggml_file(ckpt, cfg, kind), rel)
        for q in CT2_DIRS.get(model, []):
            d = "ct2/%s-%s/" % (model, q)
            write(d + "model.bin", ct2_model_bin(ckpt, cfg, q), d + "model.bin")
            write(d + "config.json", ct2_config(cfg), "ct2/config.json")
            write(d + "vocabulary.json", ct2_vocabulary(cfg), "ct2/vocabulary.json")
    print("make-model-files.py: %d files in %s, each equal to the real tool's" % (len(made), out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
