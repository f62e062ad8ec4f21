# The Python package against main: the same input and options must give the same .npy, bit
# for bit (the CPU; CUDA when a device is present). Then the options' shapes, bad input and
# threads. Run by `make test` (make test-python) in build/venv with the package pip-installed:
#
#   WA_MAIN=build/main build/venv/bin/python -m pytest tests/python
import json
import os
import subprocess
import threading
import wave

import numpy as np
import pytest

import whisper_audio as wa

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN = os.path.join(ROOT, os.environ.get("WA_MAIN", "build/main"))
AUDIO = os.path.join(ROOT, "tests", "data", "audio")
LONG = os.path.join(AUDIO, "long_70s_16k.wav")              # 3 windows, the last one short
SPEECH = os.path.join(AUDIO, "speech_16k.wav")              # 7 s: one short window
STEREO = os.path.join(AUDIO, "speech_44k1_stereo_s16.wav")  # resampled and mixed down


def model_path(name):
    path = os.path.join(ROOT, "build", name + ".gguf")
    assert os.path.isfile(path), f"{path} is missing: make test builds it"
    return path


MICRO = model_path("micro-80-f32")


def run_main(tmp_path, model, files, *args):
    out = str(tmp_path / "main.npy")
    cmd = [MAIN, "-m", model, "-o", out, "--device", "cpu", "--no-progress"] + list(args)
    for f in files:
        cmd += ["-f", f]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.load(out)


@pytest.fixture(scope="module")
def model():
    with wa.Model(MICRO, device="cpu") as m:
        yield m


# ---- results equal to main's -------------------------------------------------------

OPTIONS = [
    ({}, []),
    ({"pool": "mean"}, ["--pool", "mean"]),
    ({"no_pad": True}, ["--no-pad"]),
    ({"no_pad": True, "pool": "mean"}, ["--no-pad", "--pool", "mean"]),
    ({"layer": 0}, ["--layer", "0"]),
    ({"final_ln": False}, ["--no-final-ln"]),
    ({"outtype": "f16"}, ["--outtype", "f16"]),
    ({"layer": 1, "pool": "mean", "outtype": "f16"}, ["--layer", "1", "--pool", "mean", "--outtype", "f16"]),
]


@pytest.mark.parametrize("kwargs,args", OPTIONS, ids=[" ".join(a) or "default" for _, a in OPTIONS])
@pytest.mark.parametrize("path", [LONG, STEREO], ids=["long_70s_16k", "44k1_stereo"])
def test_file_equals_main(tmp_path, model, path, kwargs, args):
    ref = run_main(tmp_path, MICRO, [path], *args)
    got = model.encode(path, **kwargs)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert np.array_equal(got, ref)
    # the same samples as an array: the same result
    assert np.array_equal(model.encode(wa.load_audio(path), **kwargs), ref)


@pytest.mark.parametrize("name", ["micro-128-f32", "micro-80-f16", "micro-80-bf16"])
def test_other_models_equal_main(tmp_path, name):
    with wa.Model(model_path(name), device="cpu") as m:
        assert np.array_equal(m.encode(LONG, no_pad=True), run_main(tmp_path, model_path(name), [LONG], "--no-pad"))


# every tower file in tests/data: our GGUF and llama.cpp's mmproj of each model
TOWER_FILES = [model_path(f"tower-{n}-f32") for n in ("qwen2a", "voxtral", "ultravox")] + \
    [os.path.join(ROOT, "tests", "data", "towers", f"{n}.mmproj.gguf") for n in ("qwen2a", "voxtral", "ultravox")]


@pytest.mark.parametrize("path", TOWER_FILES, ids=[os.path.basename(p) for p in TOWER_FILES])
def test_tower_tokens_equal_main(tmp_path, path):
    with wa.Model(path, device="cpu") as m:
        assert m.projector in ("qwen2a", "voxtral", "ultravox") and m.hparams["projector"] == m.projector
        for audio in (SPEECH, LONG):
            for projector, args in ((True, []), (False, ["--no-projector"])):
                ref = run_main(tmp_path, path, [audio], *args)
                got = m.encode(audio, projector=projector)
                assert got.shape == ref.shape and got.dtype == ref.dtype
                assert np.array_equal(got, ref), (audio, projector)
                assert got.shape[0] == m.n_tokens(wa.load_audio(audio).size, projector)
                assert got.shape[1] == (m.token_dim if projector else m.n_state)
                assert np.array_equal(m.encode(wa.load_audio(audio), projector=projector), ref)
        # the Whisper encoder's outputs when asked for, as main gives them
        assert np.array_equal(m.encode(LONG, pool="mean"), run_main(tmp_path, path, [LONG], "--pool", "mean"))
        # a list: inputs share batches, each gets its own tokens
        both = m.encode([SPEECH, LONG])
        assert np.array_equal(both[0], m.encode(SPEECH)) and np.array_equal(both[1], m.encode(LONG))
        with pytest.raises(ValueError, match="choose one"):
            m.encode(SPEECH, projector=False, layer=0)


def test_projector_refused_on_a_whisper_model(model):
    assert model.projector is None and model.token_dim is None and model.hparams["projector"] == "none"
    with pytest.raises(ValueError, match="without an audio-LLM projector"):
        model.encode(SPEECH, projector=False)
    with pytest.raises(ValueError, match="without an audio-LLM projector"):
        model.n_tokens(16000)


def test_list_equals_main(tmp_path, model):
    # main puts the rows of all its inputs in one array, in order; a list gives one array each
    files = [SPEECH, LONG, STEREO]
    for kwargs, args in [({}, []), ({"pool": "mean"}, ["--pool", "mean"])]:
        ref = run_main(tmp_path, MICRO, files, *args)
        got = model.encode(files, **kwargs)
        assert [g.shape[0] for g in got] == [1, 3, 1]
        assert np.array_equal(np.concatenate(got), ref)


def test_no_pad_list_equals_main_per_file(tmp_path, model):
    files = [SPEECH, LONG]
    out = tmp_path / "out"
    r = subprocess.run([MAIN, "-m", MICRO, "-o", str(out) + "/", "--device", "cpu", "--no-pad", "-f", files[0],
                        "-f", files[1]], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = model.encode(files, no_pad=True)
    assert np.array_equal(got[0], np.load(out / "speech_16k.npy"))
    assert np.array_equal(got[1], np.load(out / "long_70s_16k.npy"))


def main_json(tmp_path, model, files, *args):
    """main's --json document of a run over files (into a directory: one .npy each)."""
    cmd = [MAIN, "-m", model, "-o", str(tmp_path / "json") + "/", "--device", "cpu", "--no-progress", "--json"]
    r = subprocess.run(cmd + list(args) + files, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("kwargs,args", [({}, []), ({"pool": "mean"}, ["--pool", "mean"]), ({"no_pad": True}, ["--no-pad"])],
                         ids=["default", "pool", "no_pad"])
def test_return_windows_as_main_reports_them(tmp_path, model, kwargs, args):
    # each window's samples, positions holding audio and rows: the pipeline's, as main's --json has them
    files = [SPEECH, LONG, STEREO]
    doc = main_json(tmp_path, MICRO, files, *args)
    got = model.encode(files, return_windows=True, **kwargs)
    plain = model.encode(files, **kwargs)
    for (rows, windows), ref, f, p in zip(got, doc["files"], files, plain):
        assert np.array_equal(rows, p)
        n = ref["windows"]
        assert list(windows["window"]) == list(range(n))
        assert list(windows["audio_positions"]) == ref["audio_positions"]
        assert windows["rows"].sum() == ref["rows"] * (1500 if not kwargs else 1)
        assert windows["samples"].sum() == wa.load_audio(f).size
        assert all(windows["samples"][:-1] == 480000) and 0 < windows["samples"][-1] <= 480000
        expect = {"pool": [1] * n, "no_pad": [1500] * (n - 1) + [ref["audio_positions"][-1]]}
        assert list(windows["rows"]) == expect.get(next(iter(kwargs), None), [1500] * n)
    rows, windows = model.encode(wa.load_audio(LONG), pool="mean", return_windows=True)   # an array too
    assert rows.shape == (3, model.n_state) and list(windows["rows"]) == [1, 1, 1]


def test_return_windows_of_a_tower(tmp_path):
    with wa.Model(model_path("tower-voxtral-f32"), device="cpu") as m:
        rows, windows = m.encode(LONG, return_windows=True)
        assert windows["rows"].sum() == rows.shape[0] == m.n_tokens(wa.load_audio(LONG).size)
        assert list(windows["window"]) == list(range(len(windows["window"])))


def test_model_hparams(model, tmp_path):
    # the loader's hyperparameters without an encoder: Model's, for every kind of model file
    assert wa.model_hparams(MICRO) == model.hparams
    with wa.Model(model_path("tower-voxtral-f32"), device="cpu") as m:
        assert wa.model_hparams(model_path("tower-voxtral-f32")) == m.hparams
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(wa.WhisperAudioError, match="bad.gguf"):
        wa.model_hparams(str(bad))


def test_row_width(model):
    # the library's rule for the rows' width, before any audio: what encode then gives
    assert model.row_width() == model.row_width(pool="mean", outtype="f16") == model.n_state
    with wa.Model(model_path("tower-voxtral-f32"), device="cpu") as m:
        for kwargs in ({}, {"projector": False}, {"pool": "mean"}, {"layer": 0}):
            assert m.row_width(**kwargs) == m.encode(SPEECH, **kwargs).shape[-1], kwargs
        assert m.row_width() == m.token_dim != m.n_state
    with pytest.raises(ValueError, match="layer 9"):
        model.row_width(layer=9)


def test_batch_and_threads_do_not_change_results(model):
    ref = model.encode(LONG)
    with wa.Model(MICRO, device="cpu", batch=1, n_threads=1) as m:
        assert np.array_equal(m.encode(LONG), ref)


def test_pipeline_kept_across_calls(tmp_path, model):
    # an encoder keeps the pipeline of its last encode call for the next one with the same
    # options; other options, and the encoder's own calls (encode_mel), replace or free it
    opts = OPTIONS[:4]
    refs = [run_main(tmp_path, MICRO, [LONG], *args) for _, args in opts]
    mel = model.log_mel(SPEECH)
    mel_ref = model.encode_mel(mel)
    for _ in range(2):
        for (kwargs, _), ref in zip(opts + opts, refs + refs):
            assert np.array_equal(model.encode(LONG, **kwargs), ref)
        assert np.array_equal(model.encode_mel(mel), mel_ref)


def test_error_in_rows_handler_is_raised(model, monkeypatch):
    # an exception while the rows are copied stops the pipeline and is raised as it is; the
    # next call gets a fresh pipeline
    ref = model.encode([SPEECH, LONG], pool="mean")

    def boom(self, rows):
        raise KeyError("boom")

    monkeypatch.setattr(wa._Collector, "add", boom)
    with pytest.raises(KeyError, match="boom"):
        model.encode([SPEECH, LONG], pool="mean")
    monkeypatch.undo()
    got = model.encode([SPEECH, LONG], pool="mean")
    assert all(np.array_equal(g, r) for g, r in zip(got, ref))


def test_failed_input_in_a_list(model, tmp_path):
    ref = model.encode([SPEECH, LONG])
    with pytest.raises(wa.WhisperAudioError, match="no-such-file.wav"):
        model.encode([SPEECH, str(tmp_path / "no-such-file.wav"), LONG])
    bad = wa.load_audio(SPEECH).copy()
    bad[7] = np.inf
    with pytest.raises(wa.WhisperAudioError, match="sample 7"):
        model.encode([SPEECH, bad, LONG])
    empty = tmp_path / "empty.wav"                          # a file of no samples
    with wave.open(str(empty), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
    with pytest.raises(wa.WhisperAudioError, match="empty.wav: .*no audio samples"):
        model.encode([SPEECH, str(empty)])
    got = model.encode([SPEECH, LONG])
    assert all(np.array_equal(g, r) for g, r in zip(got, ref))


# ---- the parts: log_mel, encode_mel, load_audio ---------------------------------------

def test_log_mel_then_encode_mel_is_encode(model):
    mel = model.log_mel(LONG)
    assert mel.shape == (3, 80, 3000) and mel.dtype == np.float32
    assert np.array_equal(model.encode_mel(mel), model.encode(LONG))
    # one window as a 2-D array; an unpadded window of 2 * n_positions frames is main's --no-pad
    assert np.array_equal(model.encode_mel(mel[0]), model.encode(LONG)[0])
    speech = model.log_mel(SPEECH)[0]
    n_frames = 2 * int(np.ceil(wa.load_audio(SPEECH).size / 320))
    unpadded = model.encode_mel(np.ascontiguousarray(speech[:, :n_frames]))
    assert np.array_equal(unpadded, model.encode(SPEECH, no_pad=True))


def test_log_mel_matches_the_feature_extractor(model):
    # tests/data/features: WhisperFeatureExtractor's log-mel of the same clip (transformers)
    ref = np.load(os.path.join(ROOT, "tests", "data", "features", "speech_16k.mel80.npy"))
    assert np.abs(model.log_mel(SPEECH)[0] - ref).max() < 1e-4


def test_load_audio():
    pcm = wa.load_audio(SPEECH)
    assert pcm.dtype == np.float32 and pcm.ndim == 1 and pcm.flags.c_contiguous
    assert not pcm.flags.owndata                            # the library's buffer, not a copy of it
    assert pcm.size == 112259 and 0 < np.abs(pcm).max() <= 1
    stereo = wa.load_audio(STEREO)                          # 44.1 kHz stereo -> 16 kHz mono
    assert abs(stereo.size - pcm.size) <= 1
    half = wa.load_audio(SPEECH, sr=8000)
    assert abs(half.size - pcm.size / 2) <= 1
    assert wa.load_audio(os.path.join(AUDIO, "speech_16k.ogg")).size > 100000   # Ogg Vorbis, if built in


def test_version():
    with open(os.path.join(ROOT, "whisper-audio.h")) as f:
        assert f'#define WHISPER_AUDIO_VERSION "{wa.version()}"' in f.read()


# ---- bad input: a clear exception, never a crash or a wrong result ---------------------

def test_bad_audio_arrays(model):
    pcm = wa.load_audio(SPEECH)
    with pytest.raises(TypeError, match="float32"):
        model.encode(pcm.astype(np.float64))
    with pytest.raises(TypeError, match="float32"):
        model.encode(pcm.astype(">f4"))
    with pytest.raises(ValueError, match="dimensions, got shape"):
        model.encode(pcm[:100000].reshape(2, -1))
    with pytest.raises(ValueError, match="not C-contiguous"):
        model.encode(pcm[::2])
    with pytest.raises(ValueError, match="no audio samples"):
        model.encode(np.zeros(0, np.float32))
    with pytest.raises(TypeError, match="numpy array, a file path"):
        model.encode(pcm.tolist())
    bad = pcm.copy()
    bad[1000] = np.nan
    with pytest.raises(wa.WhisperAudioError, match="sample 1000"):
        model.encode(bad)


def test_bad_files(model, tmp_path):
    with pytest.raises(wa.WhisperAudioError, match="no-such-file.wav"):
        model.encode(str(tmp_path / "no-such-file.wav"))
    text = tmp_path / "notes.wav"
    text.write_text("not audio at all, just some text")
    with pytest.raises(wa.WhisperAudioError, match="notes.wav"):
        wa.load_audio(text)
    with pytest.raises(wa.WhisperAudioError, match="no-such-model"):
        wa.Model(str(tmp_path / "no-such-model.gguf"))
    with pytest.raises(wa.WhisperAudioError):
        wa.Model(str(text))


def test_paths_with_a_nul_are_refused(model, tmp_path):
    # a C string ends at the NUL: 'ok.wav\0junk' used to encode ok.wav
    for path in (SPEECH + "\0junk", os.fsencode(SPEECH) + b"\0junk"):
        with pytest.raises(ValueError, match="embedded null byte"):
            model.encode(path)
        with pytest.raises(ValueError, match="embedded null byte"):
            model.encode([SPEECH, path])
        with pytest.raises(ValueError, match="embedded null byte"):
            model.log_mel(path)
        with pytest.raises(ValueError, match="embedded null byte"):
            wa.load_audio(path)
    with pytest.raises(ValueError, match="embedded null byte"):
        wa.Model(MICRO + "\0junk", device="cpu")


def test_load_audio_rates_outside_the_resampler_range():
    # sr=2**40 reached the library as 0 Hz ("16000 -> 0 Hz"); 2**31 - 1 ran minutes into GBs
    for sr in (2 ** 40, 2 ** 31 - 1, 1000001, 999, 0, -16000):
        with pytest.raises(ValueError, match=r"sr must be an int in \[1000, 1000000\]"):
            wa.load_audio(SPEECH, sr=sr)
    assert abs(wa.load_audio(SPEECH, sr=1000).size - 112259 / 16) <= 1


def test_bad_options(model):
    with pytest.raises(ValueError, match="layers 0 to 1"):
        model.encode(SPEECH, layer=2)
    with pytest.raises(ValueError, match="layers 0 to 1"):
        model.encode(SPEECH, layer=-1)
    with pytest.raises(ValueError, match="pool"):
        model.encode(SPEECH, pool="max")
    with pytest.raises(ValueError, match="outtype"):
        model.encode(SPEECH, outtype="f64")
    with pytest.raises(ValueError, match="device"):
        wa.Model(MICRO, device="tpu")
    with pytest.raises(ValueError, match="batch"):
        wa.Model(MICRO, batch=0)
    with pytest.raises(ValueError, match="features of shape"):
        model.encode_mel(np.zeros((1, 128, 3000), np.float32))
    with pytest.raises(wa.WhisperAudioError, match="even count"):
        model.encode_mel(np.zeros((1, 80, 301), np.float32))


def test_closed_model():
    m = wa.Model(MICRO, device="cpu")
    m.encode(SPEECH)
    m.close()
    m.close()                                               # twice is fine
    for call in (lambda: m.encode(SPEECH), lambda: m.log_mel(SPEECH),
                 lambda: m.encode_mel(np.zeros((80, 3000), np.float32))):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_cuda_refused_cleanly_without_a_device():
    try:
        m = wa.Model(MICRO, device="cuda")
    except wa.WhisperAudioError as e:
        assert "CUDA" in str(e)
        return
    m.close()                                               # a GPU is there: see test_cuda_equals_main


# ---- threads -----------------------------------------------------------------------

def test_threads_share_a_model(model):
    files = [LONG, SPEECH, STEREO, LONG, SPEECH, STEREO]
    ref = [model.encode(f, pool="mean") for f in files]
    got = [None] * len(files)
    errors = []

    def work(i):
        try:
            got[i] = model.encode(files[i], pool="mean")
        except Exception as e:                              # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(files))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(np.array_equal(g, r) for g, r in zip(got, ref))


def test_gil_released_while_encoding(model):
    # if encode held the GIL, this thread could not count while it runs
    done = threading.Event()
    t = threading.Thread(target=lambda: (model.encode(LONG), done.set()))
    count = 0
    t.start()
    while not done.is_set():
        count += 1
    t.join()
    assert count > 10000


# ---- CUDA (skipped without a device) -----------------------------------------------

def test_cuda_equals_main(tmp_path):
    try:
        m = wa.Model(MICRO, device="cuda")
    except wa.WhisperAudioError as e:
        pytest.skip(f"no CUDA device: {e}")
    with m:
        for kwargs, args in OPTIONS:
            out = str(tmp_path / "cuda.npy")
            r = subprocess.run([MAIN, "-m", MICRO, "-f", LONG, "-o", out, "--device", "cuda"] + args,
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert np.array_equal(m.encode(LONG, **kwargs), np.load(out)), args
