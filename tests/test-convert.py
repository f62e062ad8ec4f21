#!/usr/bin/env python3
# test-convert.py - tests for convert/convert-hf-to-gguf.py (Python 3 standard library only).
#
#   WA_MAIN=build/main python3 tests/test-convert.py [-v]
#
# Converts tests/data/micro-80 and micro-128 (random WhisperForConditionalGeneration
# checkpoints copied from shared/fixtures, see tests/data) and variants made here in a temp
# dir (sharded, WhisperModel prefix, bare encoder, fp16/bf16 storage, edge values, broken
# directories), then reads every file back with its own GGUF reader and checks the KVs, the
# tensor table, the layout and every value against the safetensors. The converter runs with
# numpy (when importable) and with WHISPER_AUDIO_NO_NUMPY=1; both must write the same bytes.
# whisper.cpp and CTranslate2 inputs go to the library (main --save-gguf, $WA_MAIN or build/main):
# TestLibrary here, and tests/test-convert-ct2.py on every such test file.
# Closes with a line "N passed, N failed" and exits non-zero on any failure.

import array
import json
import math
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERT = os.path.join(ROOT, "convert", "convert-hf-to-gguf.py")
DATA = os.path.join(ROOT, "tests", "data")

GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
TYPE_SIZE = {GGML_F32: 4, GGML_F16: 2, GGML_BF16: 2}
OUTTYPE = {"f32": GGML_F32, "f16": GGML_F16, "bf16": GGML_BF16}
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32}


# ---------------------------------------------------------------------------------------
# a small GGUF reader
# ---------------------------------------------------------------------------------------

class GGUF:
    """kv: {key: (type, value)} in file order; tensors: [(name, dims innermost first, type,
    offset)]; data_start: where the data section begins; raw: the whole file."""

    SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}

    def __init__(self, path):
        with open(path, "rb") as f:
            self.raw = f.read()
        self.pos = 0
        assert self._take(4) == b"GGUF", "bad magic"
        self.version, n_tensors, n_kv = self._unpack("<IQQ")
        self.kv = {}
        for _ in range(n_kv):
            key = self._string()
            assert key not in self.kv, "duplicate key " + key
            (vtype,) = self._unpack("<I")
            self.kv[key] = (vtype, self._value(vtype))
        self.tensors = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            dims = list(self._unpack("<%dQ" % n_dims))
            gtype, offset = self._unpack("<IQ")
            self.tensors.append((name, dims, gtype, offset))
        self.header_end = self.pos
        align = self.kv.get("general.alignment", (4, 32))[1]
        self.data_start = (self.pos + align - 1) // align * align

    def _take(self, n):
        b = self.raw[self.pos:self.pos + n]
        assert len(b) == n, "truncated"
        self.pos += n
        return b

    def _unpack(self, fmt):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))

    def _string(self):
        (n,) = self._unpack("<Q")
        return self._take(n).decode("utf-8")

    def _value(self, vtype):
        if vtype == 8:
            return self._string()
        if vtype == 9:
            etype, n = self._unpack("<IQ")
            return [self._value(etype) for _ in range(n)]
        return self._unpack(self.SCALAR[vtype])[0]

    def tensor_bytes(self, i):
        name, dims, gtype, offset = self.tensors[i]
        n = 1
        for d in dims:
            n *= d
        b = self.data_start + offset
        return self.raw[b:b + n * TYPE_SIZE[gtype]]

    def tensor_f32(self, name):
        for i, t in enumerate(self.tensors):
            if t[0] == name:
                assert t[2] == GGML_F32
                return array.array("f", self.tensor_bytes(i))
        raise KeyError(name)


# ---------------------------------------------------------------------------------------
# safetensors read/write and float rounding references
# ---------------------------------------------------------------------------------------

def st_read(path):
    """{name: (dtype, shape, bytes)}"""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def st_write(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, (dtype, shape, data) in tensors.items():
        header[k] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def f16_rne(u):
    """float32 bits -> float16 bits, round to nearest even (finite inputs and inf)."""
    sign = (u >> 16) & 0x8000
    exp = (u >> 23) & 0xff
    man = u & 0x7fffff
    if exp == 0xff:
        return sign | 0x7c00 | (0x200 if man else 0)
    e = exp - 112                       # rebias 127 -> 15
    if e >= 31:
        return sign | 0x7c00
    if e <= 0:                          # half subnormal: units of 2^-24
        if e < -10:
            return sign
        m, shift = man | 0x800000, 14 - e
        q, r, half = m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1)
    else:
        q, r, half = (e << 10) | (man >> 13), man & 0x1fff, 0x1000
    if r > half or (r == half and q & 1):
        q += 1                          # may carry into the exponent, up to inf: correct
    return sign | q


def bf16_rne(u):
    q, r = u >> 16, u & 0xffff
    if r > 0x8000 or (r == 0x8000 and q & 1):
        q += 1
    return q


def f16_to_f32_bits(h):
    return struct.unpack("<I", struct.pack("<f", struct.unpack("<e", struct.pack("<H", h))[0]))[0]


# ---------------------------------------------------------------------------------------
# the expected file contents
# ---------------------------------------------------------------------------------------

def expected_tensors(d, n_layer, n_ff, n_mels):
    """(name, torch shape, takes outtype) in file order, written out independently here."""
    t = [("encoder.conv1.weight", [d, n_mels, 3], True), ("encoder.conv1.bias", [d], False),
         ("encoder.conv2.weight", [d, d, 3], True), ("encoder.conv2.bias", [d], False),
         ("encoder.embed_positions.weight", [1500, d], False)]
    for i in range(n_layer):
        p = "encoder.layers.%d." % i
        for proj in ("q", "k", "v", "out"):
            t.append((p + "self_attn.%s_proj.weight" % proj, [d, d], True))
            if proj != "k":
                t.append((p + "self_attn.%s_proj.bias" % proj, [d], False))
        t += [(p + "self_attn_layer_norm.weight", [d], False),
              (p + "self_attn_layer_norm.bias", [d], False),
              (p + "fc1.weight", [n_ff, d], True), (p + "fc1.bias", [n_ff], False),
              (p + "fc2.weight", [d, n_ff], True), (p + "fc2.bias", [d], False),
              (p + "final_layer_norm.weight", [d], False),
              (p + "final_layer_norm.bias", [d], False)]
    t += [("encoder.layer_norm.weight", [d], False), ("encoder.layer_norm.bias", [d], False),
          ("mel_filters", [n_mels, 201], False)]
    return t


def reference_mel(n_mels):
    """Slaney mel bank [n_mels][201], float64, written as librosa.filters.mel does it: mel
    points -> Hz, ramps = points - bin frequencies, lower/upper slopes, enorm."""
    f_sp, min_log_hz, min_log_mel = 200.0 / 3, 1000.0, 15.0
    logstep = math.log(6.4) / 27.0

    def hz2mel(f):
        return f / f_sp if f < min_log_hz else min_log_mel + math.log(f / min_log_hz) / logstep

    def mel2hz(m):
        return f_sp * m if m < min_log_mel else min_log_hz * math.exp(logstep * (m - min_log_mel))

    lo, hi = hz2mel(0.0), hz2mel(8000.0)
    step = (hi - lo) / (n_mels + 1)
    mel_f = [mel2hz(lo + i * step) for i in range(n_mels + 1)] + [mel2hz(hi)]
    fft = [40.0 * k for k in range(201)]
    fdiff = [mel_f[i + 1] - mel_f[i] for i in range(n_mels + 1)]
    w = []
    for i in range(n_mels):
        enorm = 2.0 / (mel_f[i + 2] - mel_f[i])
        w.append([max(0.0, min(-(mel_f[i] - f) / fdiff[i], (mel_f[i + 2] - f) / fdiff[i + 1])) * enorm
                  for f in fft])
    return w


# a few entries of transformers' mel_filter_bank(201, N, 0, 8000, 16000, "slaney", "slaney")
# (transformers 5.x), rounded to float32: (n_mels, row, bin, value)
TRANSFORMERS_MEL = [
    (80, 0, 1, float.fromhex("0x1.9759480000000p-6")), (80, 0, 2, 0.0),
    (80, 1, 2, float.fromhex("0x1.76bb2a0000000p-6")),
    (80, 40, 43, float.fromhex("0x1.e2dae20000000p-7")),
    (80, 79, 192, float.fromhex("0x1.9ece1a0000000p-9")), (80, 79, 200, 0.0),
    (128, 0, 1, float.fromhex("0x1.9578860000000p-7")), (128, 1, 2, 0.0),
    (128, 64, 43, float.fromhex("0x1.2869540000000p-6")),
    (128, 127, 195, float.fromhex("0x1.4a680a0000000p-8")), (128, 127, 200, 0.0),
]
# row argmax of transformers' 80-mel bank
TRANSFORMERS_ARGMAX_80 = [
    1, 2, 3, 4, 5, 6, 7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 20, 21, 22, 23,
    24, 25, 26, 27, 28, 29, 30, 32, 33, 34, 36, 37, 38, 40, 41, 43, 45, 46, 48, 50, 52, 54, 56,
    59, 61, 63, 66, 68, 71, 74, 77, 80, 83, 86, 89, 93, 96, 100, 104, 108, 112, 117, 121, 126,
    131, 136, 142, 147, 153, 159, 165, 172, 178, 185, 192]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ---------------------------------------------------------------------------------------
# running the converter
# ---------------------------------------------------------------------------------------

def run_convert(args, no_numpy=False):
    env = dict(os.environ)
    env.pop("WHISPER_AUDIO_NO_NUMPY", None)
    if no_numpy:
        env["WHISPER_AUDIO_NO_NUMPY"] = "1"
    p = subprocess.run([sys.executable, CONVERT] + args, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stderr


def numpy_available():
    p = subprocess.run([sys.executable, "-c", "import numpy"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return p.returncode == 0


class Base(unittest.TestCase):
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="test-convert-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def convert(self, src, outtype, name=None, no_numpy=False, extra=()):
        out = os.path.join(self.tmp, name or "%s-%s%s.gguf" % (
            os.path.basename(src), outtype, "-py" if no_numpy else ""))
        rc, err = run_convert([src, "-o", out, "--outtype", outtype] + list(extra), no_numpy)
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.isfile(out))
        self.assertEqual([f for f in os.listdir(os.path.dirname(out)) if f.startswith(os.path.basename(out) + ".")], [])
        return out

    def copy_model(self, src, dst_name):
        dst = os.path.join(self.tmp, dst_name)
        os.makedirs(dst)
        shutil.copy(os.path.join(src, "config.json"), dst)
        return dst

    # checks the layout of any file this converter writes, and the hyperparameters
    def check_layout(self, g, d, n_layer, n_head, n_ff, n_mels, outtype, name):
        self.assertEqual(g.version, 3)
        kv = g.kv
        keys = ["general.architecture", "general.name", "general.file_type", "general.alignment",
                "whisper.encoder.context_length", "whisper.encoder.embedding_length",
                "whisper.encoder.block_count", "whisper.encoder.mels_count",
                "whisper.encoder.attention.head_count", "whisper.encoder.feed_forward_length",
                "whisper.encoder.attention.layer_norm_epsilon"]
        self.assertEqual([k for k in kv if k != "general.description"], keys)
        self.assertEqual(kv["general.architecture"], (8, "whisper"))
        self.assertEqual(kv["general.name"], (8, name))
        self.assertEqual(kv["general.file_type"], (4, FILE_TYPE[outtype]))
        self.assertEqual(kv["general.alignment"], (4, 32))
        self.assertEqual(kv["whisper.encoder.context_length"], (4, 1500))
        self.assertEqual(kv["whisper.encoder.embedding_length"], (4, d))
        self.assertEqual(kv["whisper.encoder.block_count"], (4, n_layer))
        self.assertEqual(kv["whisper.encoder.mels_count"], (4, n_mels))
        self.assertEqual(kv["whisper.encoder.attention.head_count"], (4, n_head))
        self.assertEqual(kv["whisper.encoder.feed_forward_length"], (4, n_ff))
        self.assertEqual(kv["whisper.encoder.attention.layer_norm_epsilon"], (6, f32(1e-5)))

        exp = expected_tensors(d, n_layer, n_ff, n_mels)
        self.assertEqual([t[0] for t in g.tensors], [e[0] for e in exp])
        self.assertEqual(g.data_start % 32, 0)
        self.assertTrue(all(b == 0 for b in g.raw[g.header_end:g.data_start]))
        offset = 0
        for (name_, dims, gtype, off), (ename, eshape, big) in zip(g.tensors, exp):
            self.assertLess(len(name_.encode()), 64)
            self.assertEqual(dims, list(reversed(eshape)), name_)
            self.assertEqual(gtype, OUTTYPE[outtype] if big else GGML_F32, name_)
            self.assertEqual(off, offset, name_)        # contiguous, in order, aligned
            nbytes = TYPE_SIZE[gtype]
            for x in dims:
                nbytes *= x
            pad = -nbytes % 32
            self.assertTrue(all(b == 0 for b in g.raw[g.data_start + off + nbytes:
                                                      g.data_start + off + nbytes + pad]))
            offset += nbytes + pad
        self.assertEqual(len(g.raw), g.data_start + offset)

    def check_mel(self, g, n_mels):
        mel = g.tensor_f32("mel_filters")
        ref = reference_mel(n_mels)
        self.assertEqual(list(mel), [f32(v) for row in ref for v in row])

    def check_as_stored(self, g, stored):
        """Every tensor but mel_filters holds a checkpoint tensor as it is: stored(name) gives its
        (dtype, shape, data) in the checkpoint (f16: the tiny checkpoints' type, which an f32 and an
        f16 file both keep exactly), or None for a tensor the caller checks itself."""
        for i, (tname, dims, gtype, _) in enumerate(g.tensors):
            found = None if tname == "mel_filters" else stored(tname)
            if found is None:
                continue
            dtype, shape, data = found
            self.assertEqual((dims, dtype), (list(reversed(shape)), "F16"), tname)
            want = data if gtype == GGML_F16 else array.array("I", [f16_to_f32_bits(h) for h in array.array("H", data)]).tobytes()
            self.assertEqual(g.tensor_bytes(i), want, tname)

    def check_sinusoids(self, g, points):
        """encoder.embed_positions.weight as float32 sinusoids (d 64, 1500 positions): position t,
        channel c < 32 is sin(t * 10000^(-c / 31)), c >= 32 its cos; checked at points (t, c)."""
        dims, gtype = next((t[1], t[2]) for t in g.tensors if t[0] == "encoder.embed_positions.weight")
        self.assertEqual((dims, gtype), ([64, 1500], GGML_F32))
        pos = g.tensor_f32("encoder.embed_positions.weight")
        for t, c in points:
            x = t * 10000.0 ** (-(c % 32) / 31)
            self.assertAlmostEqual(pos[t * 64 + c], math.sin(x) if c < 32 else math.cos(x), delta=2e-4, msg=(t, c))


# ---------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------

MICRO = {  # dir: (d, layers, heads, ffn, mels)
    "micro-80": (128, 2, 2, 512, 80),
    "micro-128": (128, 2, 2, 256, 128),
}


class TestMicro(Base):
    def test_values_all_types(self):
        for model, (d, nl, nh, nf, nm) in MICRO.items():
            src = os.path.join(DATA, model)
            st = st_read(os.path.join(src, "model.safetensors"))
            for outtype in ("f32", "f16", "bf16"):
                with self.subTest(model=model, outtype=outtype):
                    g = GGUF(self.convert(src, outtype))
                    self.check_layout(g, d, nl, nh, nf, nm, outtype, model)
                    self.check_mel(g, nm)
                    for i, (name, dims, gtype, off) in enumerate(g.tensors[:-1]):
                        dtype, shape, data = st["model." + name]
                        self.assertEqual(dtype, "F32")
                        got = g.tensor_bytes(i)
                        if gtype == GGML_F32:
                            self.assertEqual(got, data, name)
                            continue
                        bits = array.array("I", data)
                        rnd = f16_rne if gtype == GGML_F16 else bf16_rne
                        self.assertEqual(array.array("H", got).tolist(),
                                         [rnd(u) for u in bits], name)

    def test_numpy_and_pure_python_identical(self):
        if not numpy_available():
            print("\n  (numpy not importable: both runs take the pure-Python path)", file=sys.stderr)
        for model in MICRO:
            src = os.path.join(DATA, model)
            for outtype in ("f32", "f16", "bf16"):
                with self.subTest(model=model, outtype=outtype):
                    a = self.convert(src, outtype, name="np-%s-%s.gguf" % (model, outtype))
                    b = self.convert(src, outtype, name="py-%s-%s.gguf" % (model, outtype),
                                     no_numpy=True)
                    with open(a, "rb") as fa, open(b, "rb") as fb:
                        self.assertEqual(fa.read(), fb.read())

    def test_sharded(self):
        src = os.path.join(DATA, "micro-80")
        dst = os.path.join(self.tmp, "sharded", "micro-80")
        os.makedirs(dst)
        shutil.copy(os.path.join(src, "config.json"), dst)
        st = st_read(os.path.join(src, "model.safetensors"))
        names = sorted(st)
        half = len(names) // 2
        weight_map = {}
        for i, part in enumerate((names[:half], names[half:])):
            fn = "model-%05d-of-00002.safetensors" % (i + 1)
            st_write(os.path.join(dst, fn), {k: st[k] for k in part})
            weight_map.update({k: fn for k in part})
        with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
        # the encoder straddles the two shards
        shards = {weight_map["model.encoder." + k] for k in ("conv1.weight", "layer_norm.bias")}
        self.assertEqual(len(shards), 2)
        for outtype in ("f32", "bf16"):
            a = self.convert(src, outtype, name="unsharded-%s.gguf" % outtype)
            b = self.convert(dst, outtype, name="sharded-%s.gguf" % outtype)
            with open(a, "rb") as fa, open(b, "rb") as fb:
                self.assertEqual(fa.read(), fb.read())

    def test_prefixes(self):
        # WhisperModel (`encoder.`) and a bare WhisperEncoder (`conv1.weight`): same file
        src = os.path.join(DATA, "micro-128")
        st = st_read(os.path.join(src, "model.safetensors"))
        ref = self.convert(src, "f16", name="prefix-ref.gguf")
        with open(ref, "rb") as f:
            ref = f.read()
        variants = {
            "encoder.": {k[len("model."):]: v for k, v in st.items()},
            "bare": {k[len("model.encoder."):]: v for k, v in st.items()
                     if k.startswith("model.encoder.")},
        }
        for label, tensors in variants.items():
            with self.subTest(prefix=label):
                dst = os.path.join(self.tmp, "prefix-" + label.strip("."), "micro-128")
                os.makedirs(dst)
                shutil.copy(os.path.join(src, "config.json"), dst)
                st_write(os.path.join(dst, "model.safetensors"), tensors)
                out = self.convert(dst, "f16", name="prefix-%s.gguf" % label.strip("."))
                with open(out, "rb") as f:
                    self.assertEqual(f.read(), ref)

    def test_half_precision_storage(self):
        # fp16- and bf16-stored checkpoints: f32 output holds the exact widened values, the
        # same half type passes through bit for bit, the other is rounded from the f32 value
        src = os.path.join(DATA, "micro-80")
        st = st_read(os.path.join(src, "model.safetensors"))
        for stored in ("F16", "BF16"):
            rnd = f16_rne if stored == "F16" else bf16_rne
            half = {k: (stored, shape, array.array("H", [rnd(u) for u in array.array("I", data)]).tobytes())
                    for k, (dtype, shape, data) in st.items() if k.startswith("model.encoder.")}
            dst = self.copy_model(src, "stored-" + stored)
            st_write(os.path.join(dst, "model.safetensors"), half)
            for outtype in ("f32", "f16", "bf16"):
                with self.subTest(stored=stored, outtype=outtype):
                    g = GGUF(self.convert(dst, outtype, name="stored-%s-%s.gguf" % (stored, outtype)))
                    self.check_layout(g, 128, 2, 2, 512, 80, outtype, "stored-" + stored)
                    for i, (name, dims, gtype, off) in enumerate(g.tensors[:-1]):
                        hbits = array.array("H", half["model." + name][2])
                        wide = [f16_to_f32_bits(h) if stored == "F16" else h << 16 for h in hbits]
                        if gtype == GGML_F32:
                            expect = array.array("I", wide).tobytes()
                        elif OUTTYPE[stored.lower()] == gtype:
                            expect = hbits.tobytes()
                        else:
                            r = f16_rne if gtype == GGML_F16 else bf16_rne
                            expect = array.array("H", [r(u) for u in wide]).tobytes()
                        self.assertEqual(g.tensor_bytes(i), expect, name)

    def test_rounding_edge_values(self):
        # conv1.weight full of rounding ties, subnormals and values next to the overflow; a value
        # that the type rounds to an infinity (or one already infinite) is refused as the
        # loader would (TestErrors.test_non_finite_weights), so each type gets its own finite set
        src = os.path.join(DATA, "micro-80")
        st = st_read(os.path.join(src, "model.safetensors"))
        dtype, shape, data = st["model.encoder.conv1.weight"]
        n = len(data) // 4
        special = [0x00000000, 0x80000000, 0x7f800000, 0xff800000,       # +-0, +-inf
                   0x477fe000, 0x477fefff, 0x477ff000, 0xc77ff000,       # 65504, near/at the f16 overflow tie
                   0x33000000, 0x33000001, 0x33800000, 0x33c00000,       # 2^-25 (tie to 0), 2^-24, 1.5*2^-24
                   0x38800000, 0x387fe000, 0x387ff000, 0x3f801000,       # smallest normal, subnormal ties, f16 tie
                   0x3f803000, 0x3f808000, 0x3f818000, 0x3f817fff,       # f16 tie up, bf16 ties, just below
                   0x7f7fffff, 0xff7fffff, 0x00000001, 0x3f800001]       # f32 max, f32 denormal
        for outtype in ("f16", "bf16"):
            rnd, inf = (f16_rne, 0x7c00) if outtype == "f16" else (bf16_rne, 0x7f80)
            bits = array.array("I", data)
            for i in range(n):
                if i % 3 == 0:
                    bits[i] = special[(i // 3) % len(special)]
                elif i % 3 == 1:    # exact f16 ties with random-ish exponents and parities
                    bits[i] = ((100 + i % 40) << 23) | ((i * 2654435761) & 0x7fe000) | 0x1000
                if (rnd(bits[i]) & inf) == inf:
                    bits[i] = 0
            self.assertIn(0x477fefff, bits)
            st["model.encoder.conv1.weight"] = (dtype, shape, bits.tobytes())
            dst = self.copy_model(src, "edge-" + outtype)
            st_write(os.path.join(dst, "model.safetensors"), st)
            for no_numpy in (False, True):
                with self.subTest(outtype=outtype, no_numpy=no_numpy):
                    g = GGUF(self.convert(dst, outtype, no_numpy=no_numpy))
                    self.assertEqual(array.array("H", g.tensor_bytes(0)).tolist(),
                                     [rnd(u) for u in bits])


class TestMelBank(Base):
    def test_mel_bank(self):
        for n_mels in (80, 128):
            with self.subTest(n_mels=n_mels):
                src = os.path.join(DATA, "micro-%d" % n_mels)
                g = GGUF(self.convert(src, "f32", name="mel-%d.gguf" % n_mels))
                mel = g.tensor_f32("mel_filters")
                rows = [mel[i * 201:(i + 1) * 201] for i in range(n_mels)]
                # independent float64 table, rounded to f32: equal bit for bit
                self.check_mel(g, n_mels)
                for nm, r, b, v in TRANSFORMERS_MEL:
                    if nm == n_mels:
                        self.assertEqual(rows[r][b], v, (r, b))
                # every filter is a non-empty triangle; the peaks rise with the row
                peaks = [max(range(201), key=lambda k, row=row: row[k]) for row in rows]
                self.assertTrue(all(max(row) > 0 for row in rows))
                self.assertEqual(peaks, sorted(peaks))
                if n_mels == 80:
                    self.assertEqual(peaks, TRANSFORMERS_ARGMAX_80)
                self.assertLessEqual(peaks[-1], 200)
                self.assertTrue(all(v >= 0 for v in mel))
                # slaney normalisation: unit area in Hz, so row sum * 40 Hz ~ 1 wherever the
                # triangle spans many 40 Hz bins (the upper quarter of the bank)
                for i in range(3 * n_mels // 4, n_mels):
                    self.assertAlmostEqual(sum(rows[i]) * 40.0, 1.0, delta=0.05)
                # the peak of the filter nearest 1 kHz is at bin 25 (1000 Hz) +- 1
                centre = [(sum(k * v for k, v in enumerate(row)) / sum(row)) for row in rows]
                j = min(range(n_mels), key=lambda i: abs(centre[i] * 40.0 - 1000.0))
                self.assertLessEqual(abs(peaks[j] - 25), 1)


class TestRandom(Base):
    def check_random(self, out, outtype):
        g = GGUF(out)
        self.check_layout(g, 384, 4, 6, 1536, 80, outtype, "random-tiny")
        self.assertIn("general.description", g.kv)
        self.check_mel(g, 80)
        self.assertEqual(set(g.tensor_f32("encoder.layers.3.final_layer_norm.weight")), {1.0})
        self.assertEqual(set(g.tensor_f32("encoder.layers.0.self_attn.q_proj.bias")), {0.0})
        pos = g.tensor_f32("encoder.embed_positions.weight")
        inc = math.log(10000.0) / (192 - 1)
        for t, c in ((0, 0), (0, 192), (1, 0), (1, 191), (1499, 5), (700, 192 + 7), (1499, 383)):
            x = t * math.exp(-inc * (c % 192))
            self.assertAlmostEqual(pos[t * 384 + c], math.sin(x) if c < 192 else math.cos(x),
                                   delta=1e-6)
        w = g.tensors[2]                                    # conv2.weight
        raw = array.array("H", g.tensor_bytes(2))
        self.assertEqual(w[0], "encoder.conv2.weight")
        vals = [struct.unpack("<e", struct.pack("<H", h))[0] for h in raw[:20000]]
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        self.assertAlmostEqual(std, 0.02, delta=0.001)
        self.assertAlmostEqual(mean, 0.0, delta=0.001)

    def test_random_tiny(self):
        for no_numpy in (False, True):
            with self.subTest(no_numpy=no_numpy):
                out = os.path.join(self.tmp, "tiny-%d.gguf" % no_numpy)
                rc, err = run_convert(["--random", "tiny", "-o", out, "--outtype", "f16",
                                       "--seed", "3"], no_numpy=no_numpy)
                self.assertEqual(rc, 0, err)
                self.assertIn("wrote", err.splitlines()[-1])
                self.check_random(out, "f16")

    def test_random_seed(self):
        a, b, c = (os.path.join(self.tmp, "seed-%s.gguf" % x) for x in "abc")
        for path, seed in ((a, "1"), (b, "1"), (c, "2")):
            self.assertEqual(run_convert(["--random", "tiny", "-o", path, "--outtype", "bf16",
                                          "--seed", seed])[0], 0)
        with open(a, "rb") as fa, open(b, "rb") as fb, open(c, "rb") as fc:
            ra, rb, rc = fa.read(), fb.read(), fc.read()
        self.assertEqual(ra, rb)
        self.assertNotEqual(ra, rc)
        self.assertEqual(len(ra), len(rc))


class TestErrors(Base):
    def expect_error(self, src, needle):
        out = os.path.join(self.tmp, "bad.gguf")
        rc, err = run_convert([src, "-o", out])
        self.assertEqual(rc, 1, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("error: "), err)
        self.assertIn(needle, lines[0])
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("bad.gguf.")], [])

    def make(self, name, config=None, tensors=None):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        if config is not None:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(config, f)
        if tensors is not None:
            st_write(os.path.join(d, "model.safetensors"), tensors)
        return d

    def test_settings_that_change_the_forward(self):
        # refused, naming the setting: what whisper-audio would compute is not what the model computes
        src = os.path.join(DATA, "micro-80")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        st = st_read(os.path.join(src, "model.safetensors"))
        for act in ("relu", "gelu_new", None):
            self.expect_error(self.make("act-%s" % act, dict(cfg, activation_function=act), st),
                              'activation_function is %s; whisper-audio runs "gelu"' % json.dumps(act))
        with open(os.path.join(DATA, "towers", "glmasr", "config.json")) as f:
            gcfg = json.load(f)
        gst = st_read(os.path.join(DATA, "towers", "glmasr", "model.safetensors"))
        self.expect_error(self.make("glm-act", dict(gcfg, audio_config=dict(gcfg["audio_config"], hidden_act="silu")), gst),
                          'audio_config.hidden_act is "silu"; whisper-audio runs "gelu"')
        # those that do not (training-only ones; scale_embedding, which the encoders never apply) load, the same file
        want = self.convert(src, "f32", "settings-plain.gguf")
        quiet = dict(cfg, dropout=0.3, attention_dropout=0.1, activation_dropout=0.2, encoder_layerdrop=0.5,
                     apply_spec_augment=True, mask_time_prob=0.5, scale_embedding=True)
        d = os.path.join(self.make("quiet"), os.path.basename(src))
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(quiet, f)
        st_write(os.path.join(d, "model.safetensors"), st)
        with open(want, "rb") as f, open(self.convert(d, "f32", "settings-quiet.gguf"), "rb") as g:
            self.assertEqual(f.read(), g.read())

    def test_errors(self):
        src = os.path.join(DATA, "micro-80")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        st = st_read(os.path.join(src, "model.safetensors"))
        self.expect_error(os.path.join(self.tmp, "does-not-exist"), "not a directory")
        self.expect_error(self.make("empty"), "no config.json")
        self.expect_error(self.make("bert", {"model_type": "bert"}), 'not "whisper"')
        self.expect_error(self.make("nost", cfg), "no model.safetensors")
        no_enc = {k: v for k, v in st.items() if not k.startswith("model.encoder.")}
        self.expect_error(self.make("decoder-only", cfg, no_enc), "no encoder tensors")
        missing = dict(st)
        del missing["model.encoder.layers.1.fc2.bias"]
        self.expect_error(self.make("missing", cfg, missing),
                          "missing encoder tensor model.encoder.layers.1.fc2.bias")
        self.expect_error(self.make("wide", dict(cfg, d_model=256), st), "has shape")
        self.expect_error(self.make("mels", dict(cfg, num_mel_bins=128), st),
                          "model.encoder.conv1.weight has shape [128, 80, 3]")
        self.expect_error(self.make("fewer", dict(cfg, encoder_layers=1), st),
                          "config.json does not describe")
        self.expect_error(self.make("more", dict(cfg, encoder_layers=3), st),
                          "missing encoder tensor model.encoder.layers.2")
        self.expect_error(self.make("heads", dict(cfg, encoder_attention_heads=3), st),
                          "not a multiple")
        with open(os.path.join(self.make("garbage", cfg), "model.safetensors"), "wb") as f:
            f.write(b"\xff" * 64)
        self.expect_error(os.path.join(self.tmp, "garbage"), "safetensors header")
        # an existing output file is not replaced by a failed run
        out = os.path.join(self.tmp, "keep.gguf")
        with open(out, "w") as f:
            f.write("old")
        self.assertEqual(run_convert([os.path.join(self.tmp, "empty"), "-o", out])[0], 1)
        with open(out) as f:
            self.assertEqual(f.read(), "old")


class TestHardening(Base):
    """Issue 23: what hostile or careless use of the converter still broke."""
    expect_error = TestErrors.expect_error
    make = TestErrors.make

    def micro(self):
        src = os.path.join(DATA, "micro-80")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        return cfg, st_read(os.path.join(src, "model.safetensors"))

    def leftovers(self, d, name):
        return [f for f in os.listdir(d) if f.startswith(name + ".")]

    def test_output_rules(self):
        src = os.path.join(DATA, "micro-80")
        d = os.path.join(self.tmp, "outputs")
        os.makedirs(d)
        want = self.convert(src, "f32", name="outputs/want.gguf")
        with open(want, "rb") as f:
            want_bytes = f.read()
        # a user's own OUT.tmp is not touched, and no temporary is left
        out = os.path.join(d, "notes.gguf")
        with open(out + ".tmp", "w") as f:
            f.write("mine")
        self.assertEqual(run_convert([src, "-o", out, "--outtype", "f32"])[0], 0)
        with open(out + ".tmp") as f:
            self.assertEqual(f.read(), "mine")
        self.assertEqual(self.leftovers(d, "notes.gguf"), ["notes.gguf.tmp"])
        # a symlink: the file it points to is replaced (its mode kept), the link stays
        target = os.path.join(d, "target.gguf")
        with open(target, "w") as f:
            f.write("old")
        os.chmod(target, 0o640)
        os.symlink("target.gguf", os.path.join(d, "link.gguf"))
        rc, err = run_convert([src, "-o", os.path.join(d, "link.gguf"), "--outtype", "f32"])
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.islink(os.path.join(d, "link.gguf")))
        with open(target, "rb") as f:
            self.assertEqual(f.read(), want_bytes)
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o640)
        # a dangling symlink is an error, and nothing is made
        os.symlink("nowhere/x.gguf", os.path.join(d, "dangling.gguf"))
        rc, err = run_convert([src, "-o", os.path.join(d, "dangling.gguf")])
        self.assertEqual(rc, 1, err)
        self.assertIn("a symlink that does not lead to a file", err)
        # a FIFO is written through and stays a FIFO
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        rc, err = run_convert([src, "-o", fifo, "--outtype", "f32"])
        reader.join(60)
        self.assertEqual(rc, 0, err)
        self.assertEqual(got, [want_bytes])
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertEqual(self.leftovers(d, "fifo"), [])
        # two runs at once on one output: both whole, the survivor one of them
        both = os.path.join(d, "both.gguf")
        procs = [subprocess.Popen([sys.executable, CONVERT, src, "-o", both, "--outtype", t],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for t in ("f32", "f16")]
        self.assertEqual([p.wait() for p in procs], [0, 0])
        with open(both, "rb") as f:
            survivor = f.read()
        self.assertIn(survivor, (want_bytes, open(self.convert(src, "f16", name="outputs/f16.gguf"), "rb").read()))
        self.assertEqual(self.leftovers(d, "both.gguf"), [])

    def test_never_its_own_input(self):
        cfg, st = self.micro()
        d = self.make("own-input", cfg, st)
        files = {fn: open(os.path.join(d, fn), "rb").read() for fn in os.listdir(d)}
        os.link(os.path.join(d, "model.safetensors"), os.path.join(self.tmp, "hard.gguf"))
        os.symlink(os.path.join(d, "config.json"), os.path.join(self.tmp, "soft.gguf"))
        for out in (os.path.join(d, "model.safetensors"), os.path.join(d, "config.json"),
                    os.path.join(d, ".", "config.json"), os.path.join(self.tmp, "hard.gguf"),
                    os.path.join(self.tmp, "soft.gguf")):
            with self.subTest(out=out):
                rc, err = run_convert([d, "-o", out])
                self.assertEqual(rc, 1, err)
                self.assertIn("the output is the input", err)
                self.assertNotIn("[  1/", err)                       # before any work
                self.assertEqual({fn: open(os.path.join(d, fn), "rb").read() for fn in os.listdir(d)}, files)
        # a whisper.cpp file as its own output
        ggml = os.path.join(self.tmp, "ggml-own.bin")
        with open(ggml, "wb") as f:
            f.write(struct.pack("<I", 0x67676D6C) + b"\0" * 64)
        rc, err = run_convert([ggml, "-o", ggml])
        self.assertEqual(rc, 1, err)
        self.assertIn("the output is the input", err)
        # the checkpoint directory is a fine place for an output of a new name
        rc, err = run_convert([d, "-o", os.path.join(d, "micro.gguf")])
        self.assertEqual(rc, 0, err)

    def test_fifo_as_the_source(self):
        fifo = os.path.join(self.tmp, "src-fifo")
        os.mkfifo(fifo)
        d = os.path.join(self.tmp, "ct2-fifo")
        os.makedirs(d)
        shutil.copy(os.path.join(ROOT, "build", "ct2", "micro-80-float32", "config.json"), d)   # make-model-files.py's
        os.mkfifo(os.path.join(d, "model.bin"))
        cfg, st = self.micro()
        d2 = self.make("st-fifo", cfg)
        os.mkfifo(os.path.join(d2, "model.safetensors"))
        for src in (fifo, d, d2):
            with self.subTest(src=src):
                p = subprocess.run([sys.executable, CONVERT, src, "-o", os.path.join(self.tmp, "bad.gguf")],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn("not a regular file or a directory", p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_hparams_bounded(self):
        cfg, st = self.micro()
        for key, v in (("encoder_layers", 10 ** 9), ("encoder_layers", 257), ("d_model", 1 << 40),
                       ("num_mel_bins", 513), ("encoder_attention_heads", 10 ** 12)):
            with self.subTest(key=key, v=v):
                p = subprocess.run([sys.executable, CONVERT, self.make("big-%s-%d" % (key, v), dict(cfg, **{key: v}), st),
                                    "-o", os.path.join(self.tmp, "bad.gguf")], capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn("%s is %d, expected an integer in [1, " % (key, v), p.stderr)

    def test_non_finite_weights_and_negative_offsets(self):
        cfg, st = self.micro()
        dtype, shape, data = st["model.encoder.layers.1.fc1.weight"]
        for label, bits in (("nan", 0x7fc00000), ("inf", 0xff800000), ("f16-overflow", 0x47800000)):
            vals = array.array("I", data)
            vals[5] = bits
            bad = dict(st)
            bad["model.encoder.layers.1.fc1.weight"] = (dtype, shape, vals.tobytes())
            d = self.make("nonfinite-" + label, cfg, bad)
            for no_numpy in (False, True):
                with self.subTest(label=label, no_numpy=no_numpy):
                    out = os.path.join(self.tmp, "bad.gguf")
                    rc, err = run_convert([d, "-o", out, "--outtype", "f16"], no_numpy)
                    self.assertEqual(rc, 1, err)
                    self.assertIn("tensor encoder.layers.1.fc1.weight: element 5 is not finite", err)
                    self.assertFalse(os.path.exists(out))
                    self.assertEqual(self.leftovers(self.tmp, "bad.gguf"), [])
        # negative data_offsets: the tensor would be read from the JSON header's own bytes
        d = self.make("negative", cfg, st)
        self.rewrite_header(os.path.join(d, "model.safetensors"),
                            lambda h: h["model.encoder.conv1.bias"].update(data_offsets=[-64, 448]))
        self.expect_error(d, "tensor 'model.encoder.conv1.bias': data_offsets is not what safetensors stores there")

    def rewrite_header(self, path, edit):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            data = f.read()
        edit(header)
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)

    def test_bad_headers_one_line(self):
        # each of these was a Python traceback
        cfg, st = self.micro()
        d = self.make("strings", cfg, st)
        self.rewrite_header(os.path.join(d, "model.safetensors"),
                            lambda h: h["model.encoder.conv1.bias"].update(data_offsets=["0", "512"]))
        self.expect_error(d, "data_offsets is not what safetensors stores there")
        d = self.make("deep", cfg)
        h = b"[" * 100000 + b"]" * 100000
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
        self.expect_error(d, "bad safetensors header: nesting deeper than 64")
        for label, weight_map in (("int", 7), ("list", ["model.safetensors"]), ("absolute", "/etc/passwd"),
                                  ("dotdot", "../outside.safetensors"), ("number", 3)):
            with self.subTest(weight_map=label):
                d = self.make("index-" + label, cfg)
                shard = os.path.join(self.tmp, "outside.safetensors")
                st_write(shard, st)
                if isinstance(weight_map, str) or label == "number":
                    weight_map = {k: weight_map for k in st}
                with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                    json.dump({"weight_map": weight_map}, f)
                needle = {"int": 'no "weight_map" object', "list": 'no "weight_map" object',
                          "number": "not a file name in the directory", "absolute": "not a file name in the directory",
                          "dotdot": "not a file name in the directory"}[label]
                self.expect_error(d, needle)

    def test_loader_checks(self):
        # what the loader (main -m DIR) refuses, the converter refuses with the same message:
        # each of these converted (exit 0) before, or ended in a traceback
        cfg, st = self.micro()
        main = os.path.abspath(os.environ.get("WA_MAIN", os.path.join(ROOT, "build", "main")))
        names = list(st)
        first, second = names[0], names[1]
        cases = []

        def case(label, needle, edit=None, tail=b"", shards=None, config=None):
            d = self.make("loader-" + label, cfg if config is None else None, None if shards else st)
            if config is not None:
                with open(os.path.join(d, "config.json"), "w") as f:
                    f.write(config)
            path = os.path.join(d, "model.safetensors")
            if shards:
                for fn, part in shards.items():
                    st_write(os.path.join(d, fn), part)
                with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:   # the first shard's name wins
                    json.dump({"weight_map": {k: next(fn for fn, part in shards.items() if k in part) for k in st}}, f)
            if edit:
                self.rewrite_header(path, edit)
            if tail:
                with open(path, "ab") as f:
                    f.write(tail)
            cases.append((label, d, needle))

        def overlap(h):                    # the second tensor's bytes start inside the first's
            b, e = h[first]["data_offsets"]
            h[second]["data_offsets"] = [b, b + h[second]["data_offsets"][1] - h[second]["data_offsets"][0]]

        def gap(h):                        # every tensor after the first moved 64 bytes on: a gap, and the
            for k in names[1:]:            # last one past the data
                h[k]["data_offsets"] = [x + 64 for x in h[k]["data_offsets"]]

        case("overlap", "tensors '%s' and '%s' overlap" % (first, second), edit=overlap)
        case("gap", "data_offsets [", edit=gap)
        case("gap-inside", "belong to no tensor", edit=gap, tail=b"\0" * 64)
        case("trailing", "1048576 bytes after the last tensor's data belong to no tensor", tail=b"\xa5" * (1 << 20))
        case("metadata", "__metadata__ is not an object of strings", edit=lambda h: h.update(__metadata__={"format": 1}))
        case("metadata-list", "__metadata__ is not an object of strings", edit=lambda h: h.update(__metadata__=["pt"]))
        half = len(names) // 2
        a = {k: st[k] for k in names[:half]}
        b = {k: st[k] for k in names[half:]}
        b[names[0]] = st[names[0]]         # a tensor in both shards: the index names one
        case("split", "shard b holds tensor '%s', which the index puts in another shard" % names[0],
             shards={"a": a, "b": b})
        case("deep-config", "config.json: nesting deeper than 64", config="[" * 100000 + "]" * 100000)
        case("dup-key", 'the key "model_type" twice in one object',
             config=json.dumps(cfg)[:-1] + ', "model_type": "whisper"}')
        for label, d, needle in cases:
            with self.subTest(label):
                self.expect_error(d, needle)
                out = os.path.join(self.tmp, "bad.gguf")
                conv = run_convert([d, "-o", out])[1].strip()
                if os.access(main, os.X_OK) and not label.endswith("config") and label != "dup-key":
                    # main's line is the converter's: the same check and the same words
                    p = subprocess.run([main, "-m", d, "-f", os.path.join(ROOT, "samples", "speech_16k.wav"), "-o",
                                        os.path.join(self.tmp, "loader.npy"), "--device", "cpu"],
                                       capture_output=True, text=True, timeout=120)
                    self.assertNotEqual(p.returncode, 0, p.stderr)
                    said = conv[len("error: "):]
                    self.assertIn(said, p.stderr, "main: %s\nconverter: %s" % (p.stderr, conv))

    def test_devices_written_through_errors_name_the_output(self):
        # device nodes made here, never the machine's own /dev files (a converter that replaced
        # devices would replace them): a twin of /dev/null stays a device, one of /dev/full
        # fails with the reason and the path
        null, full = os.path.join(self.tmp, "null"), os.path.join(self.tmp, "full")
        try:
            os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except OSError as e:
            self.skipTest("mknod needs root: %s" % e)
        rc, err = run_convert([os.path.join(DATA, "micro-80"), "-o", null])
        self.assertEqual(rc, 0, err)
        self.assertTrue(stat.S_ISCHR(os.lstat(null).st_mode))
        rc, err = run_convert([os.path.join(DATA, "micro-80"), "-o", full])
        self.assertEqual(rc, 1, err)
        self.assertIn(full, err.strip().splitlines()[-1])
        self.assertIn("No space left on device", err)
        self.assertTrue(stat.S_ISCHR(os.lstat(full).st_mode))
        self.assertEqual(self.leftovers(self.tmp, "full") + self.leftovers(self.tmp, "null"), [])


# ---------------------------------------------------------------------------------------
# audio LLMs: the tower and projector of Qwen2-Audio, Voxtral, Ultravox and Audio Flamingo 3 checkpoints
# ---------------------------------------------------------------------------------------

TOWERS = {  # dir: (projector, mels, stack factor, projector tensors: name -> PyTorch shape)
    "qwen2a": ("qwen2a", 80, 1, {"linear.weight": (32, 64), "linear.bias": (32,)}),
    "voxtral": ("voxtral", 128, 4, {"linear_1.weight": (32, 256), "linear_2.weight": (32, 32)}),
    "ultravox": ("ultravox", 80, 8, {"ln_pre.weight": (512,), "linear_1.weight": (128, 512),
                                     "linear_2.weight": (32, 64), "ln_mid.weight": (64,)}),
    "af3": ("musicflamingo", 128, 1, {"linear_1.weight": (32, 64), "linear_1.bias": (32,),
                                      "linear_2.weight": (32, 32), "linear_2.bias": (32,)}),
    "mflamingo": ("musicflamingo", 128, 1, {"linear_1.weight": (32, 64), "linear_1.bias": (32,),
                                            "linear_2.weight": (32, 32), "linear_2.bias": (32,)}),
}
# Music Flamingo's rotary time embedding: Audio Flamingo 3's type with these keys (its files have none)
TIME_ROPE = {"whisper.projector.time_rope.dimension_count": (4, 12), "whisper.projector.time_rope.freq_base": (6, 1200.0),
             "whisper.projector.time_rope.step": (6, f32(0.04))}


def thinker_name(ours):
    """Qwen2.5-Omni's and Qwen3-Omni's checkpoint name of one of our tensors: under thinker.audio_tower.,
    the encoder's final LayerNorm as ln_post."""
    theirs = "thinker." + (ours if ours.startswith("audio_tower.") else "audio_tower." + ours[len("encoder."):])
    return theirs.replace("audio_tower.layer_norm.", "audio_tower.ln_post.")


class TestTowers(Base):
    def test_towers(self):
        for name, (proj, n_mels, stack, ptensors) in TOWERS.items():
            src = os.path.join(DATA, "towers", name)
            st = st_read(os.path.join(src, "model.safetensors"))
            for outtype in ("f32", "f16"):
                g = GGUF(self.convert(src, outtype, "tower-%s-%s.gguf" % (name, outtype)))
                kv = g.kv
                self.assertEqual(kv["whisper.projector.type"], (8, proj))
                self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
                self.assertEqual(kv["whisper.projector.stack_factor"], (4, stack))
                self.assertEqual(kv["whisper.projector.layer_norm_epsilon"], (6, f32(1e-6)))
                self.assertEqual(kv["whisper.encoder.mels_count"], (4, n_mels))
                self.assertEqual(kv["whisper.encoder.feed_forward_length"], (4, 256))
                for key, value in TIME_ROPE.items():
                    self.assertEqual(kv.get(key), value if name == "mflamingo" else None)
                # the encoder's tensors, then the projector's, then the mel bank; values exact
                # (the checkpoints hold f16, which f32 and f16 both keep)
                enc = [e[0] for e in expected_tensors(64, 3, 256, n_mels) if e[0] != "mel_filters"]
                names = [t[0] for t in g.tensors]
                self.assertEqual(names, enc + ["multi_modal_projector." + p for p in ptensors] + ["mel_filters"])
                self.check_as_stored(g, lambda n: st["audio_tower." + n[len("encoder."):] if n.startswith("encoder.") else n])
                self.check_mel(g, n_mels)

    def test_glmasr(self):
        # transformers' GlmAsrForConditionalGeneration: GlmAsrEncoder's names to ours, RoPE keys, a zero
        # positional embedding (it has none), 4 frames stacked into linear_1 (2 x the LLM's width)
        src = os.path.join(DATA, "towers", "glmasr")
        st = st_read(os.path.join(src, "model.safetensors"))
        names = {"self_attn.out_proj.": "self_attn.o_proj.", "self_attn_layer_norm.": "input_layernorm.",
                 "final_layer_norm.": "post_attention_layernorm.", "fc1.": "mlp.fc1.", "fc2.": "mlp.fc2.", "layer_norm.": "norm."}
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-glmasr-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "glmasr"))
            self.assertEqual(kv["whisper.projector.stack_factor"], (4, 4))
            self.assertEqual(kv["whisper.encoder.rope.dimension_count"], (4, 32))
            self.assertEqual(kv["whisper.encoder.rope.freq_base"], (6, f32(10000.0)))
            enc = [e[0] for e in expected_tensors(64, 3, 256, 128) if e[0] != "mel_filters"]
            proj = ["multi_modal_projector." + p for p in ("linear_1.weight", "linear_1.bias", "linear_2.weight", "linear_2.bias")]
            self.assertEqual([t[0] for t in g.tensors], enc + proj + ["mel_filters"])
            def stored(ours):
                if ours == "encoder.embed_positions.weight":
                    return None                     # zeros, checked below
                if not ours.startswith("encoder."):
                    return st[ours]
                theirs = "audio_tower." + ours[len("encoder."):]
                part = next((k for k in names if k in theirs), None)
                return st[theirs.replace(part, names[part]) if part else theirs]
            self.check_as_stored(g, stored)
            dims, gtype = next((t[1], t[2]) for t in g.tensors if t[0] == "encoder.embed_positions.weight")
            self.assertEqual((dims, gtype), ([64, 1500], GGML_F32))
            self.assertEqual(g.tensor_f32("encoder.embed_positions.weight").tobytes(), bytes(4 * 64 * 1500))
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        ac = cfg["audio_config"]
        t.expect_error(t.make("g-ff", dict(cfg, audio_config=dict(ac, intermediate_size=192)), st), "is not 4 x hidden_size 64")
        t.expect_error(t.make("g-kv", dict(cfg, audio_config=dict(ac, num_key_value_heads=2)), st), "num_key_value_heads is 2; whisper-audio runs one per attention head (1)")
        t.expect_error(t.make("g-rope", dict(cfg, audio_config=dict(ac, rope_parameters=dict(ac["rope_parameters"], partial_rotary_factor=0.01))), st),
                       "give 0 rotary dims of 64")
        missing = {k: v for k, v in st.items() if k != "audio_tower.layers.1.self_attn.o_proj.bias"}
        t.expect_error(t.make("g-missing", cfg, missing), "missing encoder tensor audio_tower.layers.1.self_attn.o_proj.bias")

    def test_qwen25o(self):
        # transformers' Qwen2_5OmniForConditionalGeneration: thinker.audio_tower's Whisper names (ln_post
        # for the final LayerNorm), its proj after ours, the chunk length (n_window * 2) as a key, the
        # sinusoidal positions computed (the checkpoint holds none: a buffer that is not saved), and
        # audio_bos_eos_token left out (the audio-feature path never reads it)
        src = os.path.join(DATA, "towers", "qwen25o")
        st = st_read(os.path.join(src, "model.safetensors"))
        self.assertIn("thinker.audio_tower.audio_bos_eos_token.weight", st)
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-qwen25o-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "qwen2.5o"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.encoder.chunk_length"], (4, 200))
            enc = [e[0] for e in expected_tensors(64, 3, 256, 128) if e[0] != "mel_filters"]
            self.assertEqual([t[0] for t in g.tensors], enc + ["audio_tower.proj.weight", "audio_tower.proj.bias", "mel_filters"])
            self.check_as_stored(g, lambda n: None if n == "encoder.embed_positions.weight" else st[thinker_name(n)])
            self.check_sinusoids(g, ((0, 0), (0, 32), (1, 0), (7, 5), (1499, 31), (1499, 63), (800, 40)))
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        missing = {k: v for k, v in st.items() if k != "thinker.audio_tower.proj.bias"}
        t.expect_error(t.make("o-missing", cfg, missing), "thinker.audio_tower.proj.bias")
        t.expect_error(t.make("o-nothinker", {k: v for k, v in cfg.items() if k != "thinker_config"}, st),
                       "qwen2_5_omni without a thinker_config")

    def test_minicpmo(self):
        # MiniCPM-o 2.6 (OpenBMB's MiniCPMO): apm's Whisper names under "apm.", audio_projection_layer's
        # linear1 and linear2 after ours, the LLM's width from the top-level hidden_size (MiniCPMOConfig
        # is its Qwen2Config), audio_chunk_length 1.0 as 50-position blocks; the LLM, vision and TTS
        # weights beside them left out
        src = os.path.join(DATA, "towers", "minicpmo")
        st = st_read(os.path.join(src, "model.safetensors"))
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-minicpmo-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "minicpmo"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.encoder.attention.causal_chunk"], (4, 50))
            self.assertNotIn("whisper.encoder.chunk_length", kv)
            enc = [e[0] for e in expected_tensors(64, 3, 256, 80) if e[0] != "mel_filters"]
            proj = ["audio_projection_layer." + p for p in ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias")]
            self.assertEqual([t[0] for t in g.tensors], enc + proj + ["mel_filters"])
            self.check_as_stored(g, lambda n: st["apm." + n[len("encoder."):] if n.startswith("encoder.") else n])
            self.check_mel(g, 80)
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        # the rest of the model beside the tower is left out
        with_rest = dict(st, **{"llm.model.embed_tokens.weight": ("F16", [4, 2], b"\0" * 16),
                                "vpm.embeddings.patch_embedding.weight": ("F16", [2, 2], b"\0" * 8),
                                "tts.emb_text.weight": ("F16", [2, 2], b"\0" * 8)})
        a = GGUF(self.convert(src, "f32", "minicpmo-plain.gguf"))
        b = GGUF(self.convert(t.make("m-rest", cfg, with_rest), "f32", "minicpmo-rest.gguf"))
        self.assertEqual(a.raw[a.data_start:], b.raw[b.data_start:])
        # audio_chunk_length -1: full attention, one block of the whole window
        c = GGUF(self.convert(t.make("m-full", dict(cfg, audio_chunk_length=-1), st), "f32", "minicpmo-full.gguf"))
        self.assertEqual(c.kv["whisper.encoder.attention.causal_chunk"], (4, 1500))
        t.expect_error(t.make("m-pool", dict(cfg, audio_pool_step=5), st), "audio_pool_step is 5; whisper-audio runs 2")
        t.expect_error(t.make("m-noaudio", dict(cfg, init_audio=False), st), "init_audio is false; whisper-audio runs true")
        t.expect_error(t.make("m-chunk", dict(cfg, audio_chunk_length="1s"), st), 'audio_chunk_length is "1s", not a number')
        t.expect_error(t.make("m-long", dict(cfg, audio_chunk_length=31.0), st), "blocks of 1550 positions")
        missing = {k: v for k, v in st.items() if k != "audio_projection_layer.linear2.bias"}
        t.expect_error(t.make("m-missing", cfg, missing), "missing projector tensor audio_projection_layer.linear2.bias")
        extra = dict(st)
        extra["apm.layers.3.fc1.bias"] = st["apm.layers.2.fc1.bias"]
        t.expect_error(t.make("m-extra", cfg, extra), "config.json does not describe")

    def test_kimiaudio(self):
        # Kimi-Audio: config.json's LLM (kimi_audio) with the encoder in whisper-large-v3/ (WhisperModel's
        # encoder.* names, its own config), the LLM's model.vq_adaptor.layers.{0,3,4} after ours (without
        # model.), 4 positions stacked, the LayerNorm's rms_norm_eps
        src = os.path.join(DATA, "towers", "kimiaudio")
        st = st_read(os.path.join(src, "model.safetensors"))
        wst = st_read(os.path.join(src, "whisper-large-v3", "model.safetensors"))
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-kimiaudio-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "kimiaudio"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.projector.stack_factor"], (4, 4))
            self.assertEqual(kv["whisper.projector.layer_norm_epsilon"], (6, f32(1e-6)))
            enc = [e[0] for e in expected_tensors(64, 3, 256, 128) if e[0] != "mel_filters"]
            proj = ["vq_adaptor.layers." + p for p in ("0.weight", "0.bias", "3.weight", "3.bias", "4.weight", "4.bias")]
            self.assertEqual([t[0] for t in g.tensors], enc + proj + ["mel_filters"])
            self.check_as_stored(g, lambda n: wst[n] if n.startswith("encoder.") else st["model." + n])
            self.check_mel(g, 128)
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(src, "whisper-large-v3", "config.json")) as f:
            wcfg = json.load(f)

        def kimi(name, cfg, st, wcfg=wcfg, wst=wst):
            d = t.make(name, cfg, st)
            os.makedirs(os.path.join(d, "whisper-large-v3"))
            with open(os.path.join(d, "whisper-large-v3", "config.json"), "w") as f:
                json.dump(wcfg, f)
            st_write(os.path.join(d, "whisper-large-v3", "model.safetensors"), wst)
            return d
        # the LLM's own weights beside the adaptor are left out; its other model_type name reads the same
        rest = dict(st, **{"model.embed_tokens.weight": ("F16", [4, 2], b"\0" * 16)})
        a = GGUF(self.convert(src, "f32", "kimi-plain.gguf"))
        b = GGUF(self.convert(kimi("k-rest", dict(cfg, model_type="moonshot_kimia"), rest), "f32", "kimi-rest.gguf"))
        self.assertEqual(a.raw[a.data_start:], b.raw[b.data_start:])
        t.expect_error(t.make("k-nowhisper", cfg, st), "no whisper-large-v3/config.json")
        t.expect_error(kimi("k-dim", dict(cfg, kimia_adaptor_input_dim=128), st), "kimia_adaptor_input_dim 128")
        t.expect_error(kimi("k-feat", dict(cfg, use_whisper_feature=False), st), "use_whisper_feature is false; whisper-audio runs true")
        t.expect_error(kimi("k-eps", dict(cfg, rms_norm_eps="x"), st), 'rms_norm_eps is "x", not a number')
        missing = {k: v for k, v in st.items() if k != "model.vq_adaptor.layers.4.bias"}
        t.expect_error(kimi("k-missing", cfg, missing), "missing projector tensor model.vq_adaptor.layers.4.bias")
        wmissing = {k: v for k, v in wst.items() if k != "encoder.layers.2.fc2.bias"}
        t.expect_error(kimi("k-wmissing", cfg, st, wst=wmissing), "missing encoder tensor encoder.layers.2.fc2.bias")


    def test_qwen3a(self):
        # transformers' Qwen3OmniMoeForConditionalGeneration: thinker.audio_tower's Conv2d stem (conv2d1-3,
        # conv_out without a bias) in place of conv1/conv2, Whisper's layer names with a bias on k_proj, ln_post
        # for the final LayerNorm, proj1 and proj2 after it; the chunk (n_window * 2), the attention window
        # (n_window_infer) and the stem's channels (downsample_hidden_size) as keys; the sinusoids computed
        src = os.path.join(DATA, "towers", "qwen3a")
        st = st_read(os.path.join(src, "model.safetensors"))
        self.assertIn("thinker.audio_tower.layers.0.self_attn.k_proj.bias", st)
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-qwen3a-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "qwen3a"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.encoder.chunk_length"], (4, 100))
            self.assertEqual(kv["whisper.encoder.attention.window_length"], (4, 800))
            self.assertEqual(kv["whisper.encoder.conv2d.channels"], (4, 16))
            names = [t[0] for t in g.tensors]
            stem = ["encoder.embed_positions.weight", "encoder.conv2d1.weight", "encoder.conv2d1.bias", "encoder.conv2d2.weight",
                    "encoder.conv2d2.bias", "encoder.conv2d3.weight", "encoder.conv2d3.bias", "encoder.conv_out.weight"]
            self.assertEqual(names[:8], stem)
            self.assertNotIn("encoder.conv1.weight", names)
            self.assertEqual(names[8 + 15], "encoder.layers.0.self_attn.k_proj.bias")     # each layer's last
            self.assertEqual(names[-5:], ["audio_tower.proj1.weight", "audio_tower.proj1.bias", "audio_tower.proj2.weight",
                                          "audio_tower.proj2.bias", "mel_filters"])
            self.assertEqual(len(names), 8 + 3 * 16 + 2 + 4 + 1)
            self.check_as_stored(g, lambda n: None if n == "encoder.embed_positions.weight" else st[thinker_name(n)])
            self.check_sinusoids(g, ((0, 0), (0, 32), (1, 0), (12, 5), (12, 63)))
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        missing = {k: v for k, v in st.items() if k != "thinker.audio_tower.layers.2.self_attn.k_proj.bias"}
        t.expect_error(t.make("q3-missing", cfg, missing), "thinker.audio_tower.layers.2.self_attn.k_proj.bias")
        t.expect_error(t.make("q3-nothinker", {k: v for k, v in cfg.items() if k != "thinker_config"}, st),
                       "qwen3_omni_moe without a thinker_config")
        bad = json.loads(json.dumps(cfg))
        bad["thinker_config"]["audio_config"]["n_window_infer"] = 750
        t.expect_error(t.make("q3-window", bad, st), "n_window_infer 750 is not a multiple of 2 x n_window 100")
    def test_qwen3asr(self):
        # transformers' Qwen3ASRForConditionalGeneration as transformers 5 saves it: Qwen3-Omni's encoder under
        # model.audio_tower (ln_post for the final LayerNorm), the projector beside it as
        # model.multi_modal_projector.linear_1 / linear_2; the windows and channels from its audio_config
        src = os.path.join(DATA, "towers", "qwen3asr")
        st = st_read(os.path.join(src, "model.safetensors"))

        def theirs(ours):
            if ours.startswith("multi_modal_projector."):
                return "model." + ours
            return ("model.audio_tower." + ours[len("encoder."):]).replace("audio_tower.layer_norm.", "audio_tower.ln_post.")
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-qwen3asr-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "qwen3asr"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.encoder.chunk_length"], (4, 100))
            self.assertEqual(kv["whisper.encoder.attention.window_length"], (4, 800))
            self.assertEqual(kv["whisper.encoder.conv2d.channels"], (4, 16))
            names = [t[0] for t in g.tensors]
            self.assertEqual(names[-5:], ["multi_modal_projector.linear_1.weight", "multi_modal_projector.linear_1.bias",
                                          "multi_modal_projector.linear_2.weight", "multi_modal_projector.linear_2.bias",
                                          "mel_filters"])
            self.assertEqual(len(names), 8 + 3 * 16 + 2 + 4 + 1)
            self.check_as_stored(g, lambda n: None if n == "encoder.embed_positions.weight" else st[theirs(n)])
            self.check_sinusoids(g, ((0, 0), (0, 32), (1, 0), (12, 5), (12, 63)))
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        missing = {k: v for k, v in st.items() if k != "model.multi_modal_projector.linear_2.bias"}
        t.expect_error(t.make("qa-missing", cfg, missing), "missing projector tensor model.multi_modal_projector.linear_2.bias")
        t.expect_error(t.make("qa-noaudio", {k: v for k, v in cfg.items() if k != "audio_config"}, st),
                       "qwen3_asr without an audio_config")
        bad = json.loads(json.dumps(cfg))
        bad["audio_config"]["n_window_infer"] = 750
        t.expect_error(t.make("qa-window", bad, st), "n_window_infer 750 is not a multiple of 2 x n_window 100")

    def test_voxtral_realtime(self):
        # transformers' VoxtralRealtimeForConditionalGeneration, its audio tower and projector as the published
        # checkpoint names them: its causal encoder under audio_tower (embedder.conv1/2, o_proj, mlp.gate/up/down_proj,
        # norm; RMSNorms without bias, no positional embedding), the projector beside it without biases; its attention
        # and padding as keys
        src = os.path.join(DATA, "towers", "realtime")
        st = st_read(os.path.join(src, "model.safetensors"))

        def theirs(ours):
            if ours.startswith("multi_modal_projector."):
                return ours
            n = "audio_tower." + ours[len("encoder."):]
            for a, b in (("audio_tower.conv", "audio_tower.embedder.conv"), ("out_proj.", "o_proj."), (".fc2.", ".mlp.down_proj."),
                         ("audio_tower.layer_norm.", "audio_tower.norm.")):
                n = n.replace(a, b)
            return n
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-realtime-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "voxtral_realtime"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.projector.stack_factor"], (4, 4))
            self.assertEqual(kv["whisper.projector.pad_left_tokens"], (4, 32))
            self.assertEqual(kv["whisper.projector.pad_right_tokens"], (4, 17))
            self.assertEqual(kv["whisper.encoder.attention.key_length"], (4, 64))
            self.assertEqual(kv["whisper.encoder.attention.sliding_window"], (4, 750))
            self.assertEqual(kv["whisper.encoder.rope.dimension_count"], (4, 64))
            self.assertEqual(kv["whisper.encoder.rope.freq_base"], (6, 1e6))
            names = [t[0] for t in g.tensors]
            self.assertNotIn("encoder.embed_positions.weight", names)
            self.assertEqual(names[-3:], ["multi_modal_projector.linear_1.weight", "multi_modal_projector.linear_2.weight", "mel_filters"])
            self.assertEqual(len(names), 4 + 3 * 13 + 1 + 2 + 1)
            shapes = dict((t[0], t[1]) for t in g.tensors)
            self.assertEqual(list(reversed(shapes["encoder.layers.0.self_attn.q_proj.weight"])), [128, 64])   # 2 heads x 64
            self.assertEqual(list(reversed(shapes["encoder.layers.0.self_attn.out_proj.weight"])), [64, 128])
            self.check_as_stored(g, lambda n: st[theirs(n)])
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        missing = {k: v for k, v in st.items() if k != "audio_tower.layers.1.mlp.up_proj.weight"}
        t.expect_error(t.make("rt-missing", cfg, missing), "missing encoder tensor audio_tower.layers.1.mlp.up_proj.weight")
        bad = json.loads(json.dumps(cfg))
        bad["audio_config"]["num_key_value_heads"] = 1
        t.expect_error(t.make("rt-kv", bad, st), "num_key_value_heads is 1")
        # tekken.json's audio settings (its mistral_common tokenizer) give the padding: 16 tokens before; a delay of
        # 500 ms, 50 frames, is 7 tokens (ceil(50 / 8)), so 7 + 1 + 10 after
        d = t.make("rt-tekken", cfg, st)
        with open(os.path.join(d, "tekken.json"), "w") as f:
            json.dump({"audio": {"transcription_delay_ms": 500, "streaming_n_left_pad_tokens": 16}}, f)
        kv = GGUF(self.convert(d, "f32", "rt-tekken.gguf")).kv
        self.assertEqual((kv["whisper.projector.pad_left_tokens"], kv["whisper.projector.pad_right_tokens"]), ((4, 16), (4, 18)))

    def test_stepaudio2(self):
        # Step-Audio 2: audio_encoder_config's sizes (the MLP 4 n_audio_state), OpenAI Whisper's names under
        # encoder. (blocks.N.attn.query, positional_embedding, after_norm), adapter.* as they are (its conv
        # [d, d, 3]), linear1's rows its width; the LLM's model.* and lm_head left out
        src = os.path.join(DATA, "towers", "stepaudio2")
        st = st_read(os.path.join(src, "model.safetensors"))
        theirs = {"encoder.embed_positions.weight": "encoder.positional_embedding.weight",
                  "encoder.layer_norm.weight": "encoder.after_norm.weight", "encoder.layer_norm.bias": "encoder.after_norm.bias"}
        layer = {"self_attn.q_proj.": "attn.query.", "self_attn.k_proj.": "attn.key.", "self_attn.v_proj.": "attn.value.",
                 "self_attn.out_proj.": "attn.out.", "self_attn_layer_norm.": "attn_ln.", "fc1.": "mlp.0.", "fc2.": "mlp.2.",
                 "final_layer_norm.": "mlp_ln."}

        def src_name(ours):
            if not ours.startswith("encoder.layers."):
                return theirs.get(ours, ours)
            i, rest = ours[len("encoder.layers."):].split(".", 1)
            part = next(k for k in layer if rest.startswith(k))
            return "encoder.blocks.%s.%s%s" % (i, layer[part], rest[len(part):])
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-stepaudio2-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "stepaudio2"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.projector.stack_factor"], (4, 1))
            self.assertEqual(kv["whisper.encoder.feed_forward_length"], (4, 256))
            enc = [e[0] for e in expected_tensors(64, 3, 256, 128) if e[0] != "mel_filters"]
            proj = ["adapter." + p for p in ("conv.weight", "conv.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                             "linear2.bias")]
            self.assertEqual([t[0] for t in g.tensors], enc + proj + ["mel_filters"])
            self.check_as_stored(g, lambda n: st[src_name(n)])
            self.check_mel(g, 128)
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        ac = cfg["audio_encoder_config"]
        # the LLM's weights are left out: without them the same file
        bare = {k: v for k, v in st.items() if k.startswith(("encoder.", "adapter."))}
        a = GGUF(self.convert(src, "f32", "step-plain.gguf"))
        b = GGUF(self.convert(t.make("s-bare", cfg, bare), "f32", "step-bare.gguf"))
        self.assertEqual(a.raw[a.data_start:], b.raw[b.data_start:])
        t.expect_error(t.make("s-noaudio", {k: v for k, v in cfg.items() if k != "audio_encoder_config"}, st),
                       "without an audio_encoder_config")
        t.expect_error(t.make("s-kernel", dict(cfg, audio_encoder_config=dict(ac, kernel_size=7)), st), "audio_encoder_config.kernel_size is 7; whisper-audio runs 3")
        t.expect_error(t.make("s-stride", dict(cfg, audio_encoder_config=dict(ac, adapter_stride=4)), st), "audio_encoder_config.adapter_stride is 4; whisper-audio runs 2")
        t.expect_error(t.make("s-llm", dict(cfg, audio_encoder_config=dict(ac, llm_dim=16)), st), "adapter.linear2.weight has shape")
        t.expect_error(t.make("s-nol1", cfg, {k: v for k, v in st.items() if not k.startswith("adapter.linear1.weight")}),
                       "missing projector tensor adapter.linear1.weight")
        t.expect_error(t.make("s-missing", cfg, {k: v for k, v in st.items() if k != "encoder.blocks.2.mlp.2.bias"}),
                       "missing encoder tensor encoder.blocks.2.mlp.2.bias")
        extra = dict(st, **{"encoder.blocks.3.mlp.0.bias": st["encoder.blocks.2.mlp.0.bias"]})
        t.expect_error(t.make("s-extra", cfg, extra), "config.json does not describe")

    def test_meralion(self):
        # MERaLiON-2: the encoder as speech_encoder.* (config.json's speech_config), ln_speech and
        # speech_audio_adapter.{mlp_adapter.0, gate_proj, pool_proj, out_proj} after it under their own
        # names, speech_mlp_scale_factor 15 positions stacked, ln_speech's eps (nn.LayerNorm's 1e-5)
        src = os.path.join(DATA, "towers", "meralion")
        st = st_read(os.path.join(src, "model.safetensors"))
        for outtype in ("f32", "f16"):
            g = GGUF(self.convert(src, outtype, "tower-meralion-%s.gguf" % outtype))
            kv = g.kv
            self.assertEqual(kv["whisper.projector.type"], (8, "meralion"))
            self.assertEqual(kv["whisper.projector.embedding_length"], (4, 32))
            self.assertEqual(kv["whisper.projector.stack_factor"], (4, 15))
            self.assertEqual(kv["whisper.projector.layer_norm_epsilon"], (6, f32(1e-5)))
            enc = [e[0] for e in expected_tensors(64, 3, 256, 128) if e[0] != "mel_filters"]
            p = "speech_audio_adapter."
            proj = ["ln_speech.weight", "ln_speech.bias"] + [p + n + "." + w for n in ("mlp_adapter.0", "gate_proj", "pool_proj",
                                                                                      "out_proj") for w in ("weight", "bias")]
            self.assertEqual([t[0] for t in g.tensors], enc + proj + ["mel_filters"])
            self.check_as_stored(g, lambda n: st["speech_encoder." + n[len("encoder."):] if n.startswith("encoder.") else n])
            self.check_mel(g, 128)
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        # the LLM's text_decoder.* is left out
        rest = dict(st, **{"text_decoder.model.embed_tokens.weight": ("F16", [4, 2], b"\0" * 16)})
        a = GGUF(self.convert(src, "f32", "meralion-plain.gguf"))
        b = GGUF(self.convert(t.make("mer-rest", cfg, rest), "f32", "meralion-rest.gguf"))
        self.assertEqual(a.raw[a.data_start:], b.raw[b.data_start:])
        t.expect_error(t.make("mer-nospeech", {k: v for k, v in cfg.items() if k != "speech_config"}, st),
                       "meralion2 without a speech_config")
        t.expect_error(t.make("mer-sf", dict(cfg, speech_mlp_scale_factor=7), st), "speech_mlp_scale_factor is 7")
        t.expect_error(t.make("mer-proj", dict(cfg, speech_mlp_use_projection=False), st), "speech_mlp_use_projection is false; whisper-audio runs true")
        missing = {k: v for k, v in st.items() if k != p + "pool_proj.bias"}
        t.expect_error(t.make("mer-missing", cfg, missing), "missing projector tensor speech_audio_adapter.pool_proj.bias")
        extra = dict(st, **{"speech_audio_adapter.speech_llm_proj.0.weight": ("F16", [4, 2], b"\0" * 16)})
        t.expect_error(t.make("mer-extra", cfg, extra), "config.json does not describe")

    def test_language_model_left_out(self):
        src = os.path.join(DATA, "towers", "qwen2a")
        st = st_read(os.path.join(src, "model.safetensors"))
        st["language_model.model.embed_tokens.weight"] = ("F16", [4, 2], b"\0" * 16)
        d = self.copy_model(src, "qwen2a-with-lm")
        st_write(os.path.join(d, "model.safetensors"), st)
        a = GGUF(self.convert(src, "f32", "qwen2a-plain.gguf"))
        b = GGUF(self.convert(d, "f32", "qwen2a-with-lm.gguf"))
        self.assertEqual(a.tensors, b.tensors)
        self.assertEqual(a.raw[a.data_start:], b.raw[b.data_start:])

    def test_tower_errors(self):
        t = TestErrors("test_errors")
        t.tmp = self.tmp
        for name in ("qwen2a", "voxtral", "ultravox", "af3", "mflamingo"):
            with open(os.path.join(DATA, "towers", name, "config.json")) as f:
                cfg = json.load(f)
            st = st_read(os.path.join(DATA, "towers", name, "model.safetensors"))
            if name == "qwen2a":
                missing = {k: v for k, v in st.items() if k != "multi_modal_projector.linear.bias"}
                t.expect_error(t.make("q-missing", cfg, missing), "missing projector tensor multi_modal_projector.linear.bias")
                t.expect_error(t.make("q-llm", dict(cfg, text_config=dict(cfg["text_config"], hidden_size=48)), st),
                               "multi_modal_projector.linear.weight has shape [32, 64], config.json implies [48, 64]")
                extra = dict(st)
                extra["multi_modal_projector.linear_2.weight"] = st["multi_modal_projector.linear.weight"]
                t.expect_error(t.make("q-extra", cfg, extra), "config.json does not describe")
                t.expect_error(t.make("q-noaudio", {k: v for k, v in cfg.items() if k != "audio_config"}, st),
                               "qwen2_audio without an audio_config")
            if name == "voxtral":
                t.expect_error(t.make("v-act", dict(cfg, projector_hidden_act="silu"), st), 'projector_hidden_act is "silu"; whisper-audio runs "gelu"')
                t.expect_error(t.make("v-ff", dict(cfg, audio_config=dict(cfg["audio_config"], intermediate_size=200)), st),
                               "intermediate_size 200 is not the d_model 64 times a divisor of 1500")
            if name == "ultravox":
                t.expect_error(t.make("u-act", dict(cfg, projector_act="gelu"), st), 'projector_act is "gelu"; whisper-audio runs "swiglu"')
                t.expect_error(t.make("u-post", dict(cfg, projector_ln_mid=False), st),
                               "missing projector tensor multi_modal_projector.ln_post.weight")
            if name == "af3":
                t.expect_error(t.make("f-act", dict(cfg, projector_hidden_act="relu"), st), 'projector_hidden_act is "relu"; whisper-audio runs "gelu"')
                t.expect_error(t.make("f-bias", dict(cfg, projector_bias=False), st), "projector_bias is false; whisper-audio runs true")
                missing = {k: v for k, v in st.items() if k != "multi_modal_projector.linear_2.bias"}
                t.expect_error(t.make("f-missing", cfg, missing), "missing projector tensor multi_modal_projector.linear_2.bias")
            if name == "mflamingo":
                rope = cfg["rope_parameters"]
                for i, bad in enumerate((dict(rope, rope_type="linear"), dict(rope, partial_rotary_factor=0.6),
                                         dict(rope, partial_rotary_factor=0.21), dict(rope, rope_theta=100.0))):
                    t.expect_error(t.make("m-rope%d" % i, dict(cfg, rope_parameters=bad), st), "rope_parameters")
                t.expect_error(t.make("m-step", dict(cfg, audio_frame_step=0), st), "audio_frame_step 0")
                t.expect_error(t.make("m-act", dict(cfg, projector_hidden_act="relu"), st), 'projector_hidden_act is "relu"; whisper-audio runs "gelu"')


class TestLibrary(Base):
    """Issue 22: whisper.cpp and CTranslate2 models go to the library (main --save-gguf, WA_MAIN);
    a Hugging Face checkpoint stays this converter's alone, and the library writes its GGUF
    back byte for byte (the two agree on keys, names, order and alignment)."""

    def main_bin(self):
        path = os.path.abspath(os.environ.get("WA_MAIN", os.path.join(ROOT, "build", "main")))
        self.assertTrue(os.access(path, os.X_OK), "%s: not built (`make` writes build/main; or set WA_MAIN)" % path)
        return path

    def test_library_writes_the_converters_file_again(self):
        main = self.main_bin()
        for src, outtype in (("micro-80", "f32"), ("micro-80", "f16"), ("micro-128", "bf16"), ("towers/qwen2a", "f16"),
                             ("towers/voxtral", "bf16"), ("towers/ultravox", "f32"), ("towers/af3", "f16"), ("towers/mflamingo", "f32"),
                             ("towers/glmasr", "f32"), ("towers/qwen25o", "f16"), ("towers/minicpmo", "f32"),
                             ("towers/kimiaudio", "bf16"), ("towers/qwen3a", "f16"), ("towers/stepaudio2", "bf16"),
                             ("towers/meralion", "bf16"), ("towers/qwen3asr", "bf16"), ("towers/realtime", "f16")):
            with self.subTest(src=src, outtype=outtype):
                ours = self.convert(os.path.join(DATA, src), outtype, name="lib-%s-%s.gguf" % (src.replace("/", "-"), outtype))
                again = ours + ".again.gguf"
                p = subprocess.run([main, "-m", ours, "--save-gguf", again], capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, p.stderr)
                with open(ours, "rb") as a, open(again, "rb") as b:
                    self.assertEqual(a.read(), b.read())

    def test_hf_needs_no_main(self):
        env = dict(os.environ, WA_MAIN=os.path.join(self.tmp, "no-main"))
        p = subprocess.run([sys.executable, CONVERT, os.path.join(DATA, "micro-80"), "-o", os.path.join(self.tmp, "nomain.gguf")],
                           env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_library_inputs_never_overwritten(self):
        ct2 = os.path.join(ROOT, "build", "ct2", "micro-80-int8")
        self.assertTrue(os.path.isdir(ct2), "%s: `make build/model-files.stamp` writes it" % ct2)
        d = os.path.join(self.tmp, "ct2-own")
        shutil.copytree(ct2, d)
        files = {fn: open(os.path.join(d, fn), "rb").read() for fn in os.listdir(d)}
        for out in ("model.bin", "config.json"):
            with self.subTest(out=out):
                rc, err = run_convert([d, "-o", os.path.join(d, out)])
                self.assertEqual(rc, 1, err)
                self.assertIn("the output is the input", err)
        self.assertEqual({fn: open(os.path.join(d, fn), "rb").read() for fn in os.listdir(d)}, files)


# ---------------------------------------------------------------------------------------

if __name__ == "__main__":
    verbosity = 2 if "-v" in sys.argv else 1
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
    # a test with failing subtests counts once
    bad = {getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors}
    skipped = len(result.skipped)
    passed = result.testsRun - len(bad) - skipped
    print("test-convert: %d passed, %d failed" % (passed, len(bad))
          + (", %d skipped" % skipped if skipped else ""))
    sys.exit(0 if result.wasSuccessful() else 1)
