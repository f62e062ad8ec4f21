#!/usr/bin/env python3
# test-hf-dir.py - Hugging Face directories loaded as they are: `main -m DIR` (config.json +
# model.safetensors or a sharded index) and `main -m org/name` from the local Hugging Face cache.
#
#   WA_MAIN=build/main python3 tests/test-hf-dir.py [-v]
#
# The checkpoints are tests/data's micro models and towers and variants of them written here in a
# temp dir (sharded, other prefixes, F16/BF16/F64 storage, transformers 5's names, broken ones),
# with test-convert.py's safetensors helpers. Each loaded directory must be, bit for bit, the GGUF
# that convert/convert-hf-to-gguf.py makes of it with --outtype the stored type: main --save-gguf
# writes the same bytes, and main's embeddings of speech_16k.wav from both are the same bytes. A
# damaged directory gets a one-line error naming its file, exit code 1. The cache is laid out as
# huggingface_hub lays it out (blobs/, snapshots/<commit>/ symlinks, refs/main), found through
# $HF_HUB_CACHE, $HF_HOME and ~/.cache; symlinks that leave it are refused.
# Closes with a line "test-hf-dir: N passed, N failed" and exits non-zero on any failure.

import array
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
SPEECH = os.path.join(DATA, "audio", "speech_16k.wav")
MAIN = os.path.abspath(os.environ.get("WA_MAIN", os.path.join(ROOT, "build", "main")))

_spec = importlib.util.spec_from_file_location("test_convert", os.path.join(ROOT, "tests", "test-convert.py"))
tc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tc)
st_read, st_write, f16_rne, bf16_rne = tc.st_read, tc.st_write, tc.f16_rne, tc.bf16_rne

COMMIT = "0123456789abcdef0123456789abcdef01234567"

# the converter's reading of whisper-audio-arch.h's config tables (WA_HF_TOWERS, WA_HF_SETTINGS), which the
# library walks too
_cspec = importlib.util.spec_from_file_location("converter", os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"))
conv = importlib.util.module_from_spec(_cspec)
_cspec.loader.exec_module(conv)


def run_main(*args, env=None, cwd=None):
    p = subprocess.run([MAIN, *args], capture_output=True, text=True, env=env, cwd=cwd)
    return p.returncode, p.stderr


def read(path):
    with open(path, "rb") as f:
        return f.read()


def is_matrix(name):
    return name.endswith(".weight") and ("proj" in name or "fc" in name or "conv" in name or "linear" in name)


def halve(st, dtype, only_matrices=False):
    """st's F32 tensors stored as F16 or BF16 (rounded to nearest even)."""
    rnd = f16_rne if dtype == "F16" else bf16_rne
    out = {}
    for k, (dt, shape, data) in st.items():
        if dt == "F32" and (not only_matrices or is_matrix(k)):
            out[k] = (dtype, shape, array.array("H", [rnd(u) for u in array.array("I", data)]).tobytes())
        else:
            out[k] = (dt, shape, data)
    return out


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="test-hf-dir-")
        if not os.access(MAIN, os.X_OK):
            raise unittest.SkipTest("%s: not built (`make` writes build/main; or set WA_MAIN)" % MAIN)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def make(self, name, config, tensors=None, parent=None):
        """A directory `name` (under parent, else the temp dir) with config.json (a dict, or the
        text as it is) and model.safetensors of tensors (none: no file)."""
        d = os.path.join(parent or self.tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config))
        if tensors is not None:
            st_write(os.path.join(d, "model.safetensors"), tensors)
        return d

    def micro(self, name="micro-80"):
        src = os.path.join(DATA, name)
        with open(os.path.join(src, "config.json")) as f:
            return json.load(f), st_read(os.path.join(src, "model.safetensors"))

    def convert(self, src, outtype):
        out = os.path.join(self.tmp, "conv-%s-%s.gguf" % (os.path.basename(src), outtype))
        rc, err = tc.run_convert([src, "-o", out, "--outtype", outtype])
        self.assertEqual(rc, 0, err)
        return out

    def save(self, model, env=None, cwd=None):
        out = os.path.join(self.tmp, "lib.gguf")
        if os.path.exists(out):
            os.remove(out)
        rc, err = run_main("-m", model, "--save-gguf", out, env=env, cwd=cwd)
        self.assertEqual(rc, 0, err)
        return read(out)

    def embed(self, model, env=None):
        out = os.path.join(self.tmp, "emb.npy")
        rc, err = run_main("-m", model, "-f", SPEECH, "-o", out, "--device", "cpu", "--no-progress", env=env)
        self.assertEqual(rc, 0, err)
        return read(out)

    def expect_error(self, model, needle, names=None, env=None, cwd=None):
        """main fails on model with one line that holds needle (and names the file `names`)."""
        rc, err = run_main("-m", model, "--save-gguf", os.path.join(self.tmp, "never.gguf"), env=env, cwd=cwd)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.assertEqual(rc, 1, err)
        self.assertEqual(len(lines), 1, err)
        self.assertIn(needle, lines[0])
        if names:
            self.assertIn(names, lines[0])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "never.gguf")))
        return lines[0]


# ---------------------------------------------------------------------------------------
# the converter's GGUF, bit for bit
# ---------------------------------------------------------------------------------------

# tests/data/towers: every tower of whisper-audio-arch.h's WA_HF_TOWERS, which both the library and the
# converter read
TOWERS = ("qwen2a", "voxtral", "ultravox", "af3", "glmasr", "qwen25o", "minicpmo", "kimiaudio", "qwen3a", "stepaudio2",
          "meralion", "mflamingo", "qwen3asr", "realtime")


class TestSameAsConverter(Base):
    def variants(self):
        """(directory, the converter's --outtype that keeps its stored types)"""
        out = [(os.path.join(DATA, "micro-80"), "f32"), (os.path.join(DATA, "micro-128"), "f32")]
        cfg, st = self.micro()
        out.append((self.make("stored-f16", cfg, halve(st, "F16")), "f16"))
        cfg128, st128 = self.micro("micro-128")
        out.append((self.make("stored-bf16", cfg128, halve(st128, "BF16")), "bf16"))
        # matrices in f16, the rest f32: what --outtype f16 keeps as it is
        out.append((self.make("matrices-f16", cfg, halve(st, "F16", only_matrices=True)), "f16"))
        # F64: every value off the float32 grid, so that the rounding is what is compared
        f64 = {}
        for k, (dt, shape, data) in st.items():
            vals = array.array("f", data)
            f64[k] = ("F64", shape, struct.pack("<%dd" % len(vals), *[v * (1 + 2 ** -30) + 2 ** -140 for v in vals]))
        out.append((self.make("stored-f64", cfg, f64), "f32"))
        # sharded in three, the encoder straddling them, and an index of today's huggingface_hub
        d = self.make("sharded", cfg)
        names = sorted(st)
        weight_map = {}
        for i in range(3):
            fn = "model-%05d-of-00003.safetensors" % (i + 1)
            part = names[i::3]
            st_write(os.path.join(d, fn), {k: st[k] for k in part})
            weight_map.update({k: fn for k in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(len(v[2]) for v in st.values())}, "weight_map": weight_map}, f, indent=2)
        out.append((d, "f32"))
        # WhisperModel's prefix and a WhisperEncoder saved alone
        out.append((self.make("prefix-encoder", cfg, {k[len("model."):]: v for k, v in st.items()}), "f32"))
        out.append((self.make("prefix-bare", cfg, {k[len("model.encoder."):]: v for k, v in st.items()
                                                   if k.startswith("model.encoder.")}), "f32"))
        # the towers (stored f16), one as transformers 5 names it, one with its language model
        for name in TOWERS:
            out.append((os.path.join(DATA, "towers", name), "f16"))
        tcfg, tst = json.load(open(os.path.join(DATA, "towers", "voxtral", "config.json"))), \
            st_read(os.path.join(DATA, "towers", "voxtral", "model.safetensors"))
        out.append((self.make("voxtral-t5", tcfg, {"model." + k: v for k, v in tst.items()}), "f16"))
        qcfg, qst = json.load(open(os.path.join(DATA, "towers", "qwen2a", "config.json"))), \
            st_read(os.path.join(DATA, "towers", "qwen2a", "model.safetensors"))
        qst["language_model.model.embed_tokens.weight"] = ("F16", [4, 2], b"\0" * 16)
        out.append((self.make("qwen2a-with-lm", qcfg, qst), "f16"))
        # Voxtral Realtime with its tokenizer's audio settings (tekken.json): its processor's padding from them
        rcfg, rst = json.load(open(os.path.join(DATA, "towers", "realtime", "config.json"))), \
            st_read(os.path.join(DATA, "towers", "realtime", "model.safetensors"))
        d = self.make("realtime-tekken", rcfg, rst)
        with open(os.path.join(d, "tekken.json"), "w") as f:
            json.dump({"vocab": [], "audio": {"sampling_rate": 16000, "frame_rate": 12.5, "transcription_delay_ms": 500,
                                              "streaming_n_left_pad_tokens": 16}}, f)
        out.append((d, "f16"))
        return out

    def test_same_file_and_same_embeddings(self):
        for d, outtype in self.variants():
            with self.subTest(dir=os.path.basename(d)):
                conv = self.convert(d, outtype)
                self.assertEqual(self.save(d), read(conv))
                self.assertEqual(self.embed(d), self.embed(conv))

    def test_every_tower_in_data_is_tested(self):
        self.assertEqual(sorted(n for n in os.listdir(os.path.join(DATA, "towers"))
                                if os.path.isfile(os.path.join(DATA, "towers", n, "config.json"))), sorted(TOWERS))

    def test_a_safetensors_file_is_its_directory(self):
        d = os.path.join(DATA, "micro-128")
        self.assertEqual(self.save(os.path.join(d, "model.safetensors")), self.save(d))
        self.assertEqual(self.save(d + "/"), self.save(d))

    def test_sources_never_overwritten(self):
        cfg, st = self.micro()
        d = self.make("own", cfg, st)
        before = {fn: read(os.path.join(d, fn)) for fn in os.listdir(d)}
        for target in ("model.safetensors", "config.json"):
            with self.subTest(target=target):
                rc, err = run_main("-m", d, "--save-gguf", os.path.join(d, target))
                self.assertEqual(rc, 1, err)
                self.assertIn("nothing was written", err)
                rc, err = run_main("-m", d, "-f", SPEECH, "-o", os.path.join(d, target), "--device", "cpu")
                self.assertEqual(rc, 1, err)
        self.assertEqual({fn: read(os.path.join(d, fn)) for fn in os.listdir(d)}, before)


# ---------------------------------------------------------------------------------------
# damaged directories: one line naming the file
# ---------------------------------------------------------------------------------------

def st_raw(header, data=b""):
    """A safetensors file of a header given as text (or a dict) and data bytes."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


class TestStrict(Base):
    def rewrite(self, d, edit, fn="model.safetensors"):
        """fn's header through edit(header dict) (a dict, or bytes to write as the header)."""
        path = os.path.join(d, fn)
        raw = read(path)
        (n,) = struct.unpack("<Q", raw[:8])
        h = edit(json.loads(raw[8:8 + n]))
        with open(path, "wb") as f:
            f.write(st_raw(h, raw[8 + n:]))
        return path

    def test_config_json(self):
        cfg, st = self.micro()
        cases = [
            ("trailing-comma", json.dumps(cfg)[:-1] + ",}", "config.json: not valid JSON: expected a key"),
            ("duplicate", json.dumps(cfg)[:-1] + ', "d_model": 64}', "the key \"d_model\" twice in one object"),
            ("bert", dict(cfg, model_type="bert"), "model_type is \"bert\", not \"whisper\""),
            ("float", dict(cfg, d_model=128.0), "d_model is 128.0, expected an integer in [1, 16384]"),
            ("string", dict(cfg, d_model="128"), "d_model is \"128\", expected an integer"),
            ("bool", dict(cfg, encoder_layers=True), "encoder_layers is true, expected an integer"),
            ("absent", {k: v for k, v in cfg.items() if k != "num_mel_bins"}, "num_mel_bins is absent"),
            ("huge", dict(cfg, encoder_ffn_dim=10 ** 30), "encoder_ffn_dim is 1000000000000000000000000000000"),
            ("positions", dict(cfg, max_source_positions=3000), "max_source_positions is 3000; whisper-audio needs 1500"),
            ("heads", dict(cfg, encoder_attention_heads=3), "d_model 128 is not a multiple of the 3 attention heads"),
            ("not-object", "[1, 2]", "model_type is absent (not an object)"),
            ("bad-utf8", b'{"model_type": "whisper\xff"}'.decode("latin-1"), "invalid UTF-8"),
            ("deep", "[" * 100 + "]" * 100, "nesting deeper than 64"),
            ("wide", dict(cfg, d_model=256), "has shape [128, 80, 3], config.json implies [256, 80, 3]"),
            ("fewer", dict(cfg, encoder_layers=1), "15 encoder tensors that config.json does not describe, e.g. model.encoder.layers.1."),
            ("more", dict(cfg, encoder_layers=3), "no encoder tensor 'model.encoder.layers.2"),
        ]
        for label, config, needle in cases:
            with self.subTest(case=label):
                d = self.make("cfg-" + label, config, st)
                if label == "bad-utf8":
                    with open(os.path.join(d, "config.json"), "wb") as f:
                        f.write(b'{"model_type": "whisper\xff"}')
                self.expect_error(d, needle, names=d)

    def test_music_flamingo_config(self):
        # its rotary time embedding's settings, refused as the converter refuses them (the tensors are Audio Flamingo 3's)
        src = os.path.join(DATA, "towers", "mflamingo")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        st = st_read(os.path.join(src, "model.safetensors"))
        rope = cfg["rope_parameters"]
        for label, bad, needle in (("type", dict(cfg, rope_parameters=dict(rope, rope_type="yarn")), 'rope_type is "yarn"'),
                                   ("odd", dict(cfg, rope_parameters=dict(rope, partial_rotary_factor=0.21)), "an even rotary width"),
                                   ("theta", dict(cfg, rope_parameters=dict(rope, rope_theta=100.0)), "rope_theta from 750"),
                                   ("step", dict(cfg, audio_frame_step="0.01"), 'audio_frame_step "0.01"')):
            with self.subTest(case=label):
                d = self.make("mf-" + label, bad, st)
                self.expect_error(d, needle, names=d)

    def test_voxtral_realtime_config(self):
        # what its encoder runs one way, refused as the converter refuses it (the library reads the same rows)
        src = os.path.join(DATA, "towers", "realtime")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        st = st_read(os.path.join(src, "model.safetensors"))
        audio = cfg["audio_config"]
        for label, bad, needle in (("kv", dict(cfg, audio_config=dict(audio, num_key_value_heads=1)), "num_key_value_heads is 1"),
                                   ("act", dict(cfg, audio_config=dict(audio, hidden_act="gelu")), 'hidden_act is "gelu"'),
                                   ("stack", dict(cfg, downsample_factor=2), "downsample_factor is 2"),
                                   ("rope", dict(cfg, audio_config=dict(audio, rope_parameters=dict(rope_type="yarn", rope_theta=1e6))),
                                    'rope_type is "yarn"'),
                                   ("odd", dict(cfg, audio_config=dict(audio, head_dim=63)), "head_dim 63 is odd")):
            with self.subTest(case=label):
                d = self.make("rt-" + label, bad, st)
                self.expect_error(d, needle, names=d)
        # its tokenizer's audio settings (tekken.json): another token length, a left padding out of range
        for label, audio, needle in (("rate", {"frame_rate": 25}, "audio.frame_rate is 25"),
                                     ("left", {"streaming_n_left_pad_tokens": 0}, "audio.streaming_n_left_pad_tokens is 0"),
                                     ("delay", {"transcription_delay_ms": "480"}, 'audio.transcription_delay_ms is "480"')):
            with self.subTest(case=label):
                d = self.make("rt-tekken-" + label, cfg, st)
                with open(os.path.join(d, "tekken.json"), "w") as f:
                    json.dump({"audio": audio}, f)
                self.expect_error(d, needle, names=d)

    def test_safetensors_headers(self):
        cfg, st = self.micro()
        name = "model.encoder.conv1.bias"
        cases = [
            ("unknown-field", lambda h: h[name].update(extra=1) or h, "an unknown field \"extra\""),
            ("dtype", lambda h: h[name].update(dtype="Q9") or h, "dtype \"Q9\" is not one of safetensors'"),
            ("negative", lambda h: h[name].update(data_offsets=[-64, 448]) or h, "data_offsets is not what safetensors stores there"),
            ("offsets-strings", lambda h: h[name].update(data_offsets=["0", "512"]) or h, "data_offsets is not what"),
            ("shape", lambda h: h[name].update(shape=[129]) or h, "shape [129] of F32 does not fill its data_offsets"),
            ("shape-float", lambda h: h[name].update(shape=[128.0]) or h, "shape holds 128.0, not a size"),
            ("no-dtype", lambda h: h[name].pop("dtype") and h, "no dtype"),
            ("outside", lambda h: h[name].update(data_offsets=[0, 10 ** 12]) or h, "lie outside the"),
            ("backwards", lambda h: h[name].update(data_offsets=[600, 88]) or h, "run backwards"),
            ("overlap", lambda h: h[name].update(data_offsets=[h[name]["data_offsets"][0] - 4, h[name]["data_offsets"][1] - 4]) or h,
             "overlap"),
            ("metadata", lambda h: h.update(__metadata__={"format": 1}) or h, "__metadata__ is not an object of strings"),
            ("array", lambda h: [1], "the safetensors header is an array, not an object"),
            ("i8", lambda h: h[name].update(dtype="I8", data_offsets=[h[name]["data_offsets"][0], h[name]["data_offsets"][0] + 128],
                                             shape=[128]) or h, None),
            ("utf8", lambda h: b'{"\xc0\xaf": 1}', "invalid UTF-8"),
            ("deep", lambda h: b"[" * 1000 + b"]" * 1000, "nesting deeper than 64"),
            ("trailing-text", lambda h: json.dumps(h).encode() + b" x", "text after the value"),
            ("duplicate", lambda h: json.dumps(h).encode()[:-1] + b', "%s": {}}' % name.encode(), "twice in one object"),
        ]
        for label, edit, needle in cases:
            with self.subTest(case=label):
                d = self.make("st-" + label, cfg, st)
                path = self.rewrite(d, edit)
                if label == "i8":       # a gap then follows the shrunk tensor: the tiling check names it
                    self.expect_error(d, "belong to no tensor", names=path)
                    continue
                self.expect_error(d, needle, names=path)

    def test_safetensors_file(self):
        cfg, st = self.micro()
        d = self.make("file-trailing", cfg, st)
        with open(os.path.join(d, "model.safetensors"), "ab") as f:
            f.write(b"\0" * 8)
        self.expect_error(d, "8 bytes after the last tensor's data belong to no tensor", names=d)
        d = self.make("file-cut", cfg, st)
        path = os.path.join(d, "model.safetensors")
        raw = read(path)
        with open(path, "wb") as f:
            f.write(raw[:len(raw) // 2])
        self.expect_error(d, "lie outside the", names=path)
        for label, raw in (("short", b"\x05\0\0"), ("length", struct.pack("<Q", 1 << 40) + b"{}"),
                           ("not-json", struct.pack("<Q", 4) + b"abcd")):
            with self.subTest(case=label):
                d = self.make("file-" + label, cfg)
                with open(os.path.join(d, "model.safetensors"), "wb") as f:
                    f.write(raw)
                self.expect_error(d, {"short": "too short for a safetensors file", "length": "a safetensors header of",
                                      "not-json": "bad safetensors header: unexpected character"}[label], names=d)
        # a type the model cannot hold, in a tensor it uses
        bad = dict(st)
        dt, shape, data = st["model.encoder.conv1.bias"]
        bad["model.encoder.conv1.bias"] = ("I32", shape, data)
        self.expect_error(self.make("file-i32", cfg, bad), "tensor 'model.encoder.conv1.bias' is I32 (F32, F16, BF16 or F64 expected)")
        # a weight that is not finite, and an F64 one beyond float32's range (inf once rounded)
        for label, dtype, value in (("nan", "F32", struct.pack("<f", float("nan"))), ("f64-overflow", "F64", struct.pack("<d", 1e300))):
            with self.subTest(case=label):
                bad = dict(st)
                dt, shape, data = st["model.encoder.layers.1.fc1.weight"]
                vals = bytearray(data if dtype == "F32" else struct.pack("<%dd" % (len(data) // 4), *array.array("f", data)))
                vals[5 * len(value):6 * len(value)] = value
                bad["model.encoder.layers.1.fc1.weight"] = (dtype, shape, bytes(vals))
                self.expect_error(self.make("file-" + label, cfg, bad),
                                  "tensor 'model.encoder.layers.1.fc1.weight' holds %s at element 5" % ("nan" if dtype == "F32" else "inf"))
        # no safetensors: PyTorch's pickle is not read; nothing at all; a FIFO
        d = self.make("pickle", cfg)
        open(os.path.join(d, "pytorch_model.bin"), "wb").close()
        self.expect_error(d, "PyTorch pickles are not read", names=d)
        self.expect_error(self.make("nothing", cfg), "no model.safetensors or model.safetensors.index.json")
        d = self.make("fifo", cfg)
        os.mkfifo(os.path.join(d, "model.safetensors"))
        self.expect_error(d, "not a regular file", names=d)
        # a missing tensor
        self.expect_error(self.make("missing", cfg, {k: v for k, v in st.items() if k != "model.encoder.layers.1.fc2.bias"}),
                          "no encoder tensor 'model.encoder.layers.1.fc2.bias'")
        self.expect_error(self.make("decoder-only", cfg, {k: v for k, v in st.items() if not k.startswith("model.encoder.")}),
                          "no encoder tensors")

    def test_shard_index(self):
        cfg, st = self.micro()
        names = sorted(st)
        def sharded(label, weight_map=None, index_text=None):
            d = self.make("idx-" + label, cfg)
            wm = {}
            for i, part in enumerate((names[:10], names[10:])):
                fn = "model-%05d-of-00002.safetensors" % (i + 1)
                st_write(os.path.join(d, fn), {k: st[k] for k in part})
                wm.update({k: fn for k in part})
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                f.write(index_text if index_text is not None else json.dumps({"weight_map": weight_map(wm) if weight_map else wm}))
            return d
        self.save(sharded("good"))
        cases = [
            ("no-map", None, '{"metadata": {}}', "no \"weight_map\" object"),
            ("not-json", None, '{"weight_map": {', "not valid JSON: unexpected end (expected a key) at byte 16"),
            ("dotdot", lambda wm: dict(wm, **{names[0]: "../outside.safetensors"}), None, "not a file name in the directory"),
            ("absolute", lambda wm: dict(wm, **{names[0]: "/etc/passwd"}), None, "not a file name in the directory"),
            ("number", lambda wm: dict(wm, **{names[0]: 3}), None, "the shard 3: not a file name"),
            ("missing-shard", lambda wm: dict(wm, **{names[0]: "model-00003-of-00002.safetensors"}), None,
             "shard model-00003-of-00002.safetensors, which the index names, is missing"),
            ("wrong-shard", lambda wm: dict(wm, **{names[0]: "model-00002-of-00002.safetensors"}), None,
             "is not in shard model-00002-of-00002.safetensors"),
            ("unlisted", lambda wm: {k: v for k, v in wm.items() if k != names[-1]}, None, "which the index does not name"),
        ]
        for label, wm, text, needle in cases:
            with self.subTest(case=label):
                d = sharded(label, wm, text)
                self.expect_error(d, needle, names=d)


# ---------------------------------------------------------------------------------------
# config.json's settings: those that change the forward and that the library does not run are
# refused by both readers, naming the setting; the rest load
# ---------------------------------------------------------------------------------------

def model_sources():
    """(data directory, its model_type) of micro-80 and every tower"""
    out = []
    for name in ("micro-80",) + tuple("towers/" + t for t in TOWERS):
        with open(os.path.join(DATA, name, "config.json")) as f:
            out.append((os.path.join(DATA, name), json.load(f)["model_type"]))
    return out


def set_at(obj, key, value):
    """obj's dotted key set to value (the objects on the way made)"""
    *path, last = key.split(".")
    for step in path:
        obj = obj.setdefault(step, {})
    obj[last] = value


class TestSettings(Base):
    def edited(self, label, src, encoder=None, model=None):
        """src copied (under the name of its directory, so that its GGUF is named as src's), its encoder's
        config (WA_HF_TOWERS' encoder) given encoder's settings and config.json's top model's."""
        d = os.path.join(self.tmp, label, os.path.basename(src))
        shutil.copytree(src, d)
        with open(os.path.join(src, "config.json")) as f:
            top = json.load(f)
        where = conv.TOWERS[top["model_type"]]["encoder"]
        files = {"config.json": top}
        if "/" in where:
            with open(os.path.join(src, where)) as f:
                files[where] = json.load(f)
            enc = files[where]
        else:
            enc = conv.json_at(top, where)
        for key, value in (encoder or {}).items():
            set_at(enc, key, value)
        for key, value in (model or {}).items():
            set_at(top, key, value)
        for fn, cfg in files.items():
            with open(os.path.join(d, fn), "w") as f:
                json.dump(cfg, f)
        return d

    def both_refuse(self, d, needle):
        line = self.expect_error(d, needle, names=d)
        rc, err = tc.run_convert([d, "-o", os.path.join(self.tmp, "never.gguf")])
        self.assertEqual(rc, 1, err)
        self.assertIn(needle, err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "never.gguf")))
        return line

    def test_settings_that_change_the_forward_are_refused(self):
        cases = []                          # (src, in "encoder" or "model", key, value)
        for src, mt in model_sources():
            t = conv.TOWERS[mt]
            if t["activation"]:             # the encoder's MLP: exact GELU alone
                cases += [(src, "encoder", t["activation"], "relu"), (src, "encoder", t["activation"], "gelu_new")]
            for smt, inside, key, runs in conv.SETTINGS:
                if smt == mt:
                    wrong = (runs != "true") if runs in ("true", "false") else 16 if runs == "null" else \
                        int(runs) + 1 if runs.isdigit() else runs + "_other"
                    cases.append((src, inside, key, wrong))
        self.assertGreater(len(cases), 20)
        for i, (src, inside, key, value) in enumerate(cases):
            with self.subTest(model=os.path.basename(src), key=key, value=value):
                d = self.edited("refused-%d" % i, src, **{inside: {key: value}})
                mt = json.load(open(os.path.join(src, "config.json")))["model_type"]
                where = conv.TOWERS[mt]["encoder"]
                at = where + "." if inside == "encoder" and where and "/" not in where else ""
                self.both_refuse(d, "%s%s is %s; whisper-audio runs" % (at, key, json.dumps(value)))

    def test_glmasr_grouped_query_attention_names_one_setting(self):
        d = self.edited("gqa", os.path.join(DATA, "towers", "glmasr"), encoder={"num_key_value_heads": 2})
        line = self.both_refuse(d, "audio_config.num_key_value_heads is 2; whisper-audio runs one per attention head (1)")
        for other in ("hidden_act", "projector_hidden_act", "rope_type"):
            self.assertNotIn(other, line)

    def test_settings_that_do_not_change_the_forward_load(self):
        # training-only settings, scale_embedding (set, never applied by the encoders) and the like
        same = {"dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1, "encoder_layerdrop": 0.3,
                "apply_spec_augment": True, "mask_time_prob": 0.5, "scale_embedding": True}
        for src, mt in model_sources():
            with self.subTest(model=os.path.basename(src)):
                extra = {"glmasr": {"max_position_embeddings": 3000}, "qwen3_omni_moe": {"conv_chunksize": 7}}.get(mt, {})
                d = self.edited("loads", src, encoder=dict(same, **extra), model={"use_cache": False})
                self.assertEqual(self.save(d), self.save(src))
                rc, err = tc.run_convert([d, "-o", os.path.join(self.tmp, "loads.gguf"), "--outtype", "f16"])
                self.assertEqual(rc, 0, err)
                shutil.rmtree(os.path.dirname(d))

    def test_both_readers_say_the_same(self):
        # one table, one reading: the library's line and the converter's for the same bad config.json
        cases = [
            ("micro-80", {"encoder_attention_heads": 3}, {}),
            ("micro-80", {"max_source_positions": None}, {}),
            ("towers/qwen2a", {"d_model": "x"}, {}),
            ("towers/qwen2a", {}, {"text_config": None}),
            ("towers/qwen25o", {"n_window": 7}, {}),
            ("towers/qwen3a", {"n_window_infer": 750}, {}),
            ("towers/qwen25o", {"d_model": 2, "encoder_attention_heads": 1}, {}),
            ("towers/glmasr", {"intermediate_size": 192}, {}),
            ("towers/glmasr", {"rope_parameters": [1]}, {}),
            ("towers/glmasr", {"rope_parameters.rope_theta": "x"}, {}),
            ("towers/glmasr", {"head_dim": 32}, {}),
            ("towers/stepaudio2", {"n_audio_ctx": 3000}, {}),
            ("towers/kimiaudio", {"num_mel_bins": 80}, {}),
            ("towers/kimiaudio", {}, {"rms_norm_eps": 2}),
            ("towers/minicpmo", {}, {"audio_chunk_length": 31.0}),
            ("towers/meralion", {}, {"speech_mlp_scale_factor": 7}),
            ("towers/ultravox", {}, {"projector_ln_mid": "yes"}),
            ("towers/voxtral", {"intermediate_size": 200}, {}),
        ]
        for i, (src, encoder, model) in enumerate(cases):
            with self.subTest(model=src, encoder=encoder, top=model):
                d = self.edited("same-%d" % i, os.path.join(DATA, src), encoder, model)
                line = self.expect_error(d, "", names=d)
                rc, err = tc.run_convert([d, "-o", os.path.join(self.tmp, "never.gguf")])
                self.assertEqual((rc, [ln for ln in err.splitlines() if ln.strip()]), (1, [line]))

    def test_kimi_audio_encoder_config_named(self):
        src = os.path.join(DATA, "towers", "kimiaudio")
        d = os.path.join(self.tmp, "kimi-cfg", "kimiaudio")
        shutil.copytree(src, d)
        enc = os.path.join(d, "whisper-large-v3", "config.json")
        with open(enc) as f:
            cfg = json.load(f)
        with open(enc, "w") as f:
            json.dump(dict(cfg, d_model=1.5), f)
        self.expect_error(d, "whisper-large-v3/config.json: d_model is 1.5, expected an integer", names=d)
        os.remove(enc)
        self.expect_error(d, "kimi_audio: no whisper-large-v3/config.json", names=d)
        shutil.rmtree(os.path.join(d, "whisper-large-v3"))
        os.makedirs(os.path.join(d, "whisper-large-v3"))
        shutil.copy(os.path.join(src, "whisper-large-v3", "config.json"), os.path.join(d, "whisper-large-v3"))
        self.expect_error(d, "whisper-large-v3: no model.safetensors", names=d)


# ---------------------------------------------------------------------------------------
# the local Hugging Face cache
# ---------------------------------------------------------------------------------------

def cache_put(cache, repo_id, src, symlinks=True, commit=COMMIT):
    """src's files as huggingface_hub stores a download of repo_id in cache: blobs/<hash>,
    snapshots/<commit>/<file> -> ../../blobs/<hash> (or the file itself), refs/main = commit."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    snap = os.path.join(repo, "snapshots", commit)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    os.makedirs(snap)
    for fn in os.listdir(src):
        data = read(os.path.join(src, fn))
        if symlinks:
            blob = hashlib.sha256(data).hexdigest()
            with open(os.path.join(repo, "blobs", blob), "wb") as f:
                f.write(data)
            os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, fn))
        else:
            shutil.copy(os.path.join(src, fn), snap)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    return repo


def hf_env(**kv):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")}
    env.update(kv)
    return env


class TestCache(Base):
    def test_found_where_huggingface_hub_puts_it(self):
        micro = os.path.join(DATA, "micro-80")
        # the name the converter gives a `hf download --local-dir whisper-micro`
        local = os.path.join(self.tmp, "named", "whisper-micro")
        shutil.copytree(micro, local)
        want = read(self.convert(local, "f32"))
        home = os.path.join(self.tmp, "home")
        places = [
            ("HF_HUB_CACHE", os.path.join(self.tmp, "hub-cache"), lambda c: hf_env(HF_HUB_CACHE=c, HOME=home)),
            ("HF_HOME", os.path.join(self.tmp, "hf-home", "hub"), lambda c: hf_env(HF_HOME=os.path.dirname(c), HOME=home)),
            ("XDG_CACHE_HOME", os.path.join(self.tmp, "xdg", "huggingface", "hub"),
             lambda c: hf_env(XDG_CACHE_HOME=os.path.join(self.tmp, "xdg"), HOME=home)),
            ("HOME", os.path.join(home, ".cache", "huggingface", "hub"), lambda c: hf_env(HOME=home)),
        ]
        for label, cache, env in places:
            for symlinks in (True, False):
                with self.subTest(where=label, symlinks=symlinks):
                    shutil.rmtree(cache, ignore_errors=True)
                    cache_put(cache, "test-org/whisper-micro", micro, symlinks)
                    self.assertEqual(self.save("test-org/whisper-micro", env=env(cache)), want)
                    self.assertEqual(self.embed("test-org/whisper-micro", env=env(cache)), self.embed(micro))
                    if label == "HF_HUB_CACHE":   # HF_HUB_CACHE wins over HF_HOME
                        e = env(cache)
                        e["HF_HOME"] = os.path.join(self.tmp, "elsewhere")
                        self.assertEqual(self.save("test-org/whisper-micro", env=e), want)
                    shutil.rmtree(cache)

    def test_a_local_path_wins(self):
        cache = os.path.join(self.tmp, "wins-cache")
        cache_put(cache, "test-org/whisper-micro", os.path.join(DATA, "micro-80"))
        cwd = os.path.join(self.tmp, "cwd")
        os.makedirs(os.path.join(cwd, "test-org"))
        shutil.copytree(os.path.join(DATA, "micro-128"), os.path.join(cwd, "test-org", "whisper-micro"))
        got = self.save("test-org/whisper-micro", env=hf_env(HF_HUB_CACHE=cache), cwd=cwd)
        # micro-128's file (named by its directory, as the converter names it), not the cache's micro-80
        self.assertEqual(got, read(self.convert(os.path.join(cwd, "test-org", "whisper-micro"), "f32")))

    def test_not_there_says_how_to_download(self):
        cache = os.path.join(self.tmp, "empty-cache")
        os.makedirs(cache)
        env = hf_env(HF_HUB_CACHE=cache)
        line = self.expect_error("test-org/not-downloaded", "`hf download test-org/not-downloaded`", env=env)
        self.assertIn(os.path.join(cache, "models--test-org--not-downloaded"), line)
        self.assertIn("never reaches the network", line)
        repo = cache_put(cache, "test-org/no-main", os.path.join(DATA, "micro-80"))
        os.remove(os.path.join(repo, "refs", "main"))
        self.expect_error("test-org/no-main", "has no refs/main", env=env)
        repo = cache_put(cache, "test-org/bad-ref", os.path.join(DATA, "micro-80"))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write("../../../etc")
        self.expect_error("test-org/bad-ref", "not a commit hash", env=env)
        repo = cache_put(cache, "test-org/gone", os.path.join(DATA, "micro-80"))
        shutil.rmtree(os.path.join(repo, "snapshots"))
        self.expect_error("test-org/gone", "whose snapshot", env=env)
        # not a repo id: an ordinary missing path; nor is a name below a local directory
        cwd = os.path.join(self.tmp, "cwd-missing")
        os.makedirs(os.path.join(cwd, "build"))
        for name in ("test-org/", "a/b/c", "-org/name", "org--x/name", "org/na..me", "./org/name", "build/model.gguf"):
            with self.subTest(name=name):
                self.expect_error(name, "cannot open", env=env, cwd=cwd)

    def test_symlinks_that_leave_the_cache_are_refused(self):
        cache = os.path.join(self.tmp, "leaky-cache")
        env = hf_env(HF_HUB_CACHE=cache)
        outside = os.path.join(self.tmp, "outside")
        shutil.copytree(os.path.join(DATA, "micro-80"), outside)
        for fn in ("model.safetensors", "config.json"):
            with self.subTest(file=fn):
                repo = cache_put(cache, "test-org/leaky-" + fn.split(".")[0], os.path.join(DATA, "micro-80"))
                link = os.path.join(repo, "snapshots", COMMIT, fn)
                os.remove(link)
                os.symlink(os.path.join(outside, fn), link)
                self.expect_error("test-org/leaky-" + fn.split(".")[0], "which leaves the model's folder in the Hugging Face cache", env=env)
        repo = os.path.join(cache, "models--test-org--leaky-snapshot")
        os.makedirs(os.path.join(repo, "refs"))
        os.makedirs(os.path.join(repo, "snapshots"))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write(COMMIT)
        os.symlink(outside, os.path.join(repo, "snapshots", COMMIT))
        self.expect_error("test-org/leaky-snapshot", "which leaves the model's folder in the Hugging Face cache", env=env)
        # a local directory may hold symlinks anywhere: the user chose them
        local = os.path.join(self.tmp, "local-links")
        os.makedirs(local)
        for fn in os.listdir(outside):
            os.symlink(os.path.join(outside, fn), os.path.join(local, fn))
        self.save(local)

    def test_ultravox_of_its_projector_alone(self):
        src = os.path.join(DATA, "towers", "ultravox")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        st = st_read(os.path.join(src, "model.safetensors"))
        cfg["audio_model_id"] = "test-org/whisper-tower"
        proj = {k: v for k, v in st.items() if k.startswith("multi_modal_projector.")}
        os.makedirs(os.path.join(self.tmp, "published"))
        d = self.make("ultravox", cfg, proj, parent=os.path.join(self.tmp, "published"))   # named as the full one
        cache = os.path.join(self.tmp, "uv-cache")
        os.makedirs(cache)
        env = hf_env(HF_HUB_CACHE=cache)
        line = self.expect_error(d, "its audio tower is the encoder of test-org/whisper-tower (config.json's audio_model_id)",
                                 names=d, env=env)
        self.assertIn("`hf download test-org/whisper-tower`", line)
        # the Whisper checkpoint it names, in the cache: the tower's tensors under a Whisper model's names
        whisper = self.make("whisper-tower", dict(cfg["audio_config"], model_type="whisper"),
                            {"model.encoder." + k[len("audio_tower."):]: v for k, v in st.items() if k.startswith("audio_tower.")})
        cache_put(cache, "test-org/whisper-tower", whisper)
        self.assertEqual(self.save(d, env=env), self.save(src))
        self.assertEqual(self.embed(d, env=env), self.embed(src))
        # or a local directory
        cfg["audio_model_id"] = whisper
        local = self.make("ultravox", cfg, proj, parent=os.path.join(self.tmp, "named"))
        self.assertEqual(self.save(local), self.save(src))


# ---------------------------------------------------------------------------------------

if __name__ == "__main__":
    verbosity = 2 if "-v" in sys.argv else 1
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
    bad = {getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors}
    skipped = len(result.skipped)
    passed = result.testsRun - len(bad) - skipped
    print("test-hf-dir: %d passed, %d failed" % (passed, len(bad)) + (", %d skipped" % skipped if skipped else ""))
    sys.exit(0 if result.wasSuccessful() else 1)
