"""The package as transformers and soundfile users write it: float64, float16 and int16 arrays,
an integral float sampling_rate, a 2-D array as a batch of rows, stereo only through channels=,
the model callable, option flags that are bools."""
import os
import subprocess
import wave

import numpy as np
import pytest

import whisper_audio as wa

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "build", "micro-80-f32.gguf")
MAIN = os.path.join(ROOT, os.environ.get("WA_MAIN", "build/main"))


@pytest.fixture(scope="module")
def model():
    with wa.Model(MODEL, device="cpu", n_threads=2) as m:
        yield m


def pcm(n=16000 * 3, seed=0):
    return (np.random.default_rng(seed).standard_normal(n) * 0.1).astype(np.float32)


def test_sample_types(model):
    x = pcm()
    ref = model.encode(x, pool="mean")
    assert np.array_equal(model.encode(x.astype(np.float64), pool="mean"), ref)
    h = x.astype(np.float16)
    assert np.array_equal(model.encode(h, pool="mean"), model.encode(h.astype(np.float32), pool="mean"))
    i = (x * 32767).astype(np.int16)
    assert np.array_equal(model.encode(i, pool="mean"), model.encode(i.astype(np.float32) / 32768, pool="mean"))
    with pytest.raises(TypeError, match="int32"):
        model.encode(i.astype(np.int32))


def test_int16_equals_main_on_the_wav(model, tmp_path):
    with wave.open(os.path.join(ROOT, "samples", "speech_16k.wav")) as w:
        s = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    out = tmp_path / "ref.npy"
    subprocess.run([MAIN, "-m", MODEL, "-f", os.path.join(ROOT, "samples", "speech_16k.wav"), "-o", str(out),
                    "--device", "cpu", "--no-progress", "-q"], check=True)
    assert np.array_equal(model.encode(s), np.load(out))


def test_stereo_is_a_keyword_and_downmixes_as_main(model, tmp_path):
    rng = np.random.default_rng(1)
    st = (rng.standard_normal((16000 * 2, 2)) * 3000).astype(np.int16)
    path = tmp_path / "st.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(st.tobytes())
    ref = model.encode(str(path))
    assert np.array_equal(model.encode(st, channels=2), ref)               # soundfile's [n, 2]
    assert np.array_equal(model.encode(st.T.copy(), channels=2), ref)      # librosa's [2, n]
    assert np.array_equal(model.encode(st.reshape(-1), channels=2), ref)   # interleaved
    assert len(model.encode(st[:3], pool="mean")) == 3                     # a 2-D array alone: a batch of rows


def test_2d_is_a_batch_of_rows(model):
    a, b = pcm(seed=2), pcm(seed=3)
    got = model.encode(np.stack([a, b]), pool="mean")
    assert isinstance(got, list) and len(got) == 2
    assert np.array_equal(got[0], model.encode(a, pool="mean")) and np.array_equal(got[1], model.encode(b, pool="mean"))
    mels = model.log_mel(np.stack([a, b]))
    assert len(mels) == 2 and np.array_equal(mels[1], model.log_mel(b))


def test_sampling_rate_may_be_an_integral_float(model):
    x = pcm(44100)
    assert np.array_equal(model.encode(x, sampling_rate=44100.0), model.encode(x, sampling_rate=44100))
    assert np.array_equal(model.encode(x[:16000], sampling_rate=np.float64(16000)), model.encode(x[:16000]))
    with pytest.raises(ValueError, match="whole number"):
        model.encode(x, sampling_rate=16000.5)


def test_the_model_is_callable(model):
    x = pcm()
    assert np.array_equal(model(x, pool="mean"), model.encode(x, pool="mean"))


@pytest.mark.parametrize("flag", ["final_ln", "no_pad", "projector", "output_hidden_states", "return_windows"])
def test_flags_are_bools(model, flag):
    x = pcm()
    for bad in ("no", "yes", 1, 0, None, [True]):
        with pytest.raises(TypeError, match=flag):
            model.encode(x, **{flag: bad})
    model.encode(x, **{flag: np.bool_(flag in ("final_ln", "projector"))})    # numpy's bool is a bool
    with pytest.raises(TypeError, match="final_ln"):
        model.encode_mel(model.log_mel(x), final_ln="no")


def test_n_tokens_refuses_negative_counts_and_takes_any_size():
    with wa.Model(os.path.join(ROOT, "build", "tower-qwen2a-f32.gguf"), device="cpu") as m:
        with pytest.raises(ValueError, match="not negative"):
            m.n_tokens(-5)
        with pytest.raises(TypeError):
            m.n_tokens(1.5)
        assert m.n_tokens(2**64 - 1) == m.n_tokens(480000) == 750     # its processor keeps the first 30 s
