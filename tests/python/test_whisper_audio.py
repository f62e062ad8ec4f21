# The Python package against main: the same input and options must give the same .npy, bit
# for bit (the CPU; CUDA when a device is present). Then the options' shapes, bad input and
# threads. Run by `make test` (make test-python) in build/venv with the package pip-installed:
#
#   WA_MAIN=build/main build/venv/bin/python -m pytest tests/python
import inspect
import io
import json
import os
import re
import subprocess
import sys
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
TOWER_FILES = [model_path(f"tower-{n}-f32") for n in ("qwen2a", "voxtral", "ultravox", "af3", "glmasr", "minicpmo", "kimiaudio",
                                                           "stepaudio2", "meralion", "mflamingo")] + \
    [os.path.join(ROOT, "tests", "data", "towers", f"{n}.mmproj.gguf") for n in ("qwen2a", "voxtral", "ultravox", "af3", "meralion")]


@pytest.mark.parametrize("path", TOWER_FILES, ids=[os.path.basename(p) for p in TOWER_FILES])
def test_tower_tokens_equal_main(tmp_path, path):
    with wa.Model(path, device="cpu") as m:
        assert m.projector in ("qwen2a", "voxtral", "ultravox", "musicflamingo", "glmasr", "minicpmo", "kimiaudio",
                               "stepaudio2", "meralion") and m.hparams["projector"] == m.projector
        # Music Flamingo's file: Audio Flamingo 3's type, its rotary time embedding in the hyperparameters
        assert (m.hparams["n_time_rot"] > 0) == path.endswith("tower-mflamingo-f32.gguf")
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


# the AuT towers (Qwen3-Omni's, Qwen3-ASR's): their tokens alone (no Whisper windows or pooling of them)
@pytest.mark.parametrize("name", ["qwen3a", "qwen3asr"])
def test_aut_tower_tokens_equal_main(tmp_path, name):
    path = model_path(f"tower-{name}-f32")
    with wa.Model(path, device="cpu") as m:
        assert m.projector == name and m.hparams["n_conv"] > 0
        for audio in (SPEECH, LONG):
            for projector, args in ((True, []), (False, ["--no-projector"])):
                ref = run_main(tmp_path, path, [audio], *args)
                got = m.encode(audio, projector=projector)
                assert got.shape == ref.shape and np.array_equal(got, ref), (audio, projector)
                assert got.shape[0] == m.n_tokens(wa.load_audio(audio).size, projector)
        # Qwen3-ASR pads an input shorter than 8000 samples to them: 7 tokens for any of them
        assert m.n_tokens(4000) == (7 if name == "qwen3asr" else 4)
        with pytest.raises(wa.WhisperAudioError, match="gives its tokens alone"):
            m.encode(SPEECH, pool="mean")


# Voxtral Realtime: its causal tower's tokens alone (its processor's zeros around the audio), main's bytes
def test_voxtral_realtime_tokens_equal_main(tmp_path):
    path = model_path("tower-realtime-f32")
    with wa.Model(path, device="cpu") as m:
        assert m.projector == "voxtral_realtime" and m.projector is wa.Projector.VOXTRAL_REALTIME
        assert (m.hparams["n_window"], m.hparams["head_dim"], m.hparams["pad_left"], m.hparams["pad_right"]) == (750, 64, 32, 17)
        for audio in (SPEECH, LONG):
            for projector, args in ((True, []), (False, ["--no-projector"])):
                ref = run_main(tmp_path, path, [audio], *args)
                got = m.encode(audio, projector=projector)
                assert got.shape == ref.shape and np.array_equal(got, ref), (audio, projector)
                assert got.shape[0] == m.n_tokens(wa.load_audio(audio).size, projector)
        assert m.n_tokens(1) == 32 + 1 + 17
        with pytest.raises(wa.WhisperAudioError, match="gives its tokens alone"):
            m.encode(SPEECH, pool="mean")


def _hf_cache_put(cache, repo_id, src):
    """src's files where huggingface_hub puts a download of repo_id: blobs/, snapshots/<commit>/
    symlinks into them, refs/main."""
    commit = "89abcdef" * 5
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(repo, "refs"))
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(os.path.join(repo, "snapshots", commit))
    for i, fn in enumerate(sorted(os.listdir(src))):
        with open(os.path.join(src, fn), "rb") as f, open(os.path.join(repo, "blobs", "blob%d" % i), "wb") as g:
            g.write(f.read())
        os.symlink(os.path.join("..", "..", "blobs", "blob%d" % i), os.path.join(repo, "snapshots", commit, fn))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)


@pytest.mark.parametrize("name", ["micro-80", "towers/qwen2a"])
def test_hugging_face_directory_and_cache(tmp_path, monkeypatch, name):
    # a directory as it is and its repo id in the Hugging Face cache give main's rows of the
    # directory (micro-80's: those of its GGUF, build/micro-80-f32.gguf)
    src = os.path.join(ROOT, "tests", "data", *name.split("/"))
    ref = run_main(tmp_path, src, [SPEECH])
    if name == "micro-80":
        assert np.array_equal(ref, run_main(tmp_path, MICRO, [SPEECH]))
    cache = str(tmp_path / "hub")
    _hf_cache_put(cache, "test-org/" + os.path.basename(src), src)
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    for path in (src, "test-org/" + os.path.basename(src)):
        with wa.Model(path, device="cpu") as m:
            assert np.array_equal(m.encode(SPEECH), ref), path
    with pytest.raises(wa.WhisperAudioError, match="hf download test-org/not-there"):
        wa.Model("test-org/not-there")


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


def main_batch(files, batch):
    """The batch main reports it runs for these files at -b batch (its "batch N" line)."""
    cmd = [MAIN, "-m", MICRO, "--device", "cpu", "--no-progress", "-b", str(batch), "-o", os.devnull]
    for f in files:
        cmd += ["-f", f]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return int(re.search(r"backend cpu, \d+ threads?, batch (\d+)", r.stderr).group(1))


def pipeline_batch(m):
    """The batch of the pipeline the last encode call ran (the library's count), from the one
    encoder the model keeps."""
    (encs,) = [e for e in m._idle.values() if e]
    (enc,) = encs
    return wa._lib.whisper_audio_pipeline_batch(enc.pipe)


def test_batches_evened_as_main(tmp_path):
    # encode's inputs are known ahead, as main's files: the library evens the batches out by
    # their windows (9 windows at batch 4: 3 x 3, not 4 + 4 + 1) and the rows stay main's.
    # A file of no length known ahead (Ogg Vorbis) leaves the batch as asked, as in main.
    OGG = os.path.join(AUDIO, "speech_16k.ogg")
    cases = [[LONG] * 3, [LONG, SPEECH], [SPEECH], [LONG, OGG], [LONG] * 2]
    with wa.Model(MICRO, device="cpu", batch=4) as m:
        for files in cases:
            want = main_batch(files, 4)
            got = m.encode(files)
            assert pipeline_batch(m) == want, files
            ref = run_main(tmp_path, MICRO, files, "-b", "4")
            assert np.array_equal(np.concatenate(got), ref)
            # arrays count by their size, as files by their headers
            m.encode([wa.load_audio(f) for f in files])
            if OGG not in files:
                assert pipeline_batch(m) == want, files
        assert [main_batch(f, 4) for f in cases] == [3, 4, 1, 4, 3]


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


def test_load_audio_lengths_that_lie_and_cut_files(tmp_path):
    # a FLAC whose STREAMINFO claims 2**36 - 1 samples and holds 1 s: load_audio reserved 256 GB
    # and failed ("out of memory"); main decoded it with a warning: now the same answer here
    flac = bytearray(open(os.path.join(AUDIO, "speech_44k1_stereo_1s.flac"), "rb").read())
    bits = int.from_bytes(flac[18:26], "big")
    flac[18:26] = ((bits & ~((1 << 36) - 1)) | ((1 << 36) - 1)).to_bytes(8, "big")
    ogg = open(os.path.join(AUDIO, "speech_16k.ogg"), "rb").read()
    cut_ogg = ogg[:len(ogg) // 2]               # an Ogg Vorbis cut short: was an error, now a warning
    path = tmp_path / "lie.flac"
    path.write_bytes(bytes(flac))
    for audio, said in ((bytes(flac), "but its header says 1558264.779 s"), (str(path), "but its header says"),
                        (cut_ogg, "without the stream's last page")):
        with pytest.warns(wa.WhisperAudioWarning, match=re.escape(said)):
            pcm = wa.load_audio(audio)
        assert pcm.size > 8000
    with pytest.warns(wa.WhisperAudioWarning, match=r"^<file object>|cut\.ogg"):
        wa.load_audio(io.BytesIO(cut_ogg))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a whole file: no warning
        wa.load_audio(os.path.join(AUDIO, "speech_16k.ogg"))


def test_version():
    with open(os.path.join(ROOT, "whisper-audio.h")) as f:
        assert f'#define WHISPER_AUDIO_VERSION "{wa.version()}"' in f.read()


# ---- what transformers and faster-whisper users expect -------------------------------

def mono_wav(path, samples, rate):
    """A mono 16-bit WAV of int16 samples at rate."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())


@pytest.fixture(scope="module")
def speech_s16():
    """speech_44k1_stereo_s16.wav's left channel: int16 samples."""
    with wave.open(STEREO) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, 2)[:, 0].copy()


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_sampling_rate_resamples_as_main_does_a_file(tmp_path, model, speech_s16, rate):
    # the same samples as a WAV of that rate through main, and as an array with sampling_rate:
    # the library's resampler both ways, the same rows bit for bit
    path = tmp_path / f"speech_{rate}.wav"
    mono_wav(path, speech_s16, rate)
    pcm = (speech_s16 / np.float32(32768)).astype(np.float32)
    for kwargs, args in [({}, []), ({"pool": "mean"}, ["--pool", "mean"]), ({"no_pad": True}, ["--no-pad"])]:
        ref = run_main(tmp_path, MICRO, [str(path)], *args)
        got = model.encode(pcm, sampling_rate=rate, **kwargs)
        assert got.shape == ref.shape and np.array_equal(got, ref), (rate, args)
    # a list: every array at that rate; log_mel takes it too
    got = model.encode([pcm, pcm], sampling_rate=rate)
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], model.encode(str(path)))
    assert np.array_equal(model.log_mel(pcm, sampling_rate=rate), model.log_mel(str(path)))
    assert not np.array_equal(model.encode(pcm), model.encode(pcm, sampling_rate=rate))   # it was resampled


def test_sampling_rate_16k_and_none_are_the_array_as_it_is(model):
    pcm = wa.load_audio(SPEECH)
    ref = model.encode(SPEECH)
    assert np.array_equal(model.encode(pcm), ref)
    assert np.array_equal(model.encode(pcm, sampling_rate=16000), ref)
    assert np.array_equal(model.encode(pcm, sampling_rate=np.int64(16000)), ref)


def test_sampling_rate_is_checked(model):
    pcm = wa.load_audio(SPEECH)
    # (an integral float is that rate: tests/python/test_transformers_inputs.py)
    for rate in (0, 999, 1000001, 2 ** 40, -16000, 44100.5, float("nan"), True, "44100"):
        with pytest.raises(ValueError, match=r"sampling_rate must be a whole number in \[1000, 1000000\]"):
            model.encode(pcm, sampling_rate=rate)
        with pytest.raises(ValueError, match=r"sampling_rate must be a whole number"):
            model.log_mel(pcm, sampling_rate=rate)
    # a file and encoded audio carry their own rate
    for audio in (SPEECH, _Path(SPEECH), open(SPEECH, "rb").read(), [pcm, SPEECH]):
        with pytest.raises(ValueError, match="sampling_rate is the rate of an array"):
            model.encode(audio, sampling_rate=16000)


# every format the test data holds, as a file and in memory
FORMAT_FILES = [os.path.join(AUDIO, f) for f in ("speech_16k.wav", "speech_44k1_stereo_s16.wav", "speech_48k_mono_s24.wav",
                                                  "speech_16k.mp3", "speech_16k.ogg", "speech_16k.opus",
                                                  "speech_8k_u8.flac", "speech_8k_u8_1s.oga")]


@pytest.mark.parametrize("path", FORMAT_FILES, ids=[os.path.basename(p) for p in FORMAT_FILES])
def test_bytes_and_file_objects_are_encoded_audio(tmp_path, model, path):
    ref = run_main(tmp_path, MICRO, [path], "--pool", "mean")
    data = open(path, "rb").read()
    with open(path, "rb") as f:
        from_file = model.encode(f, pool="mean")
    for audio in (data, bytearray(data), memoryview(data), io.BytesIO(data)):
        assert np.array_equal(model.encode(audio, pool="mean"), ref), type(audio)
    assert np.array_equal(from_file, ref)
    assert np.array_equal(wa.load_audio(data), wa.load_audio(path))
    assert np.array_equal(wa.load_audio(io.BytesIO(data), sr=8000), wa.load_audio(path, sr=8000))
    assert np.array_equal(model.log_mel(data), model.log_mel(path))


def test_bytes_files_paths_and_arrays_in_one_list(tmp_path, model):
    files = [SPEECH, LONG, STEREO]
    ref = run_main(tmp_path, MICRO, files)
    got = model.encode([open(SPEECH, "rb").read(), io.BytesIO(open(LONG, "rb").read()), wa.load_audio(STEREO)])
    assert np.array_equal(np.concatenate(got), ref)


def test_bad_encoded_audio(model, tmp_path):
    with pytest.raises(wa.WhisperAudioError, match="<memory>: not a WAV file"):
        model.encode(b"not audio at all, just some text")
    with pytest.raises(wa.WhisperAudioError, match="<memory>: empty input"):
        model.encode(b"")
    text = tmp_path / "notes.txt"
    text.write_text("not audio at all")
    with open(text, "rb") as f:                             # a file object's message names its file
        with pytest.raises(wa.WhisperAudioError, match="notes.txt: not a WAV file"):
            model.encode(f)
    with open(text) as f:                                   # opened as text: read() gives str
        with pytest.raises(TypeError, match="must be binary"):
            model.encode(f)
    with pytest.raises(TypeError, match="load_audio takes a path"):
        wa.load_audio(wa.load_audio(SPEECH))


def test_hidden_states_are_each_layer_bit_for_bit(tmp_path):
    # every state of one forward against encode of one layer (the library's pipeline, main's
    # rows), with each option that shapes the rows; the last state is encode's output
    opts = [{}, {"no_pad": True}, {"pool": "mean"}, {"no_pad": True, "pool": "mean"}, {"outtype": "f16"}]
    for path in (MICRO, model_path("tower-qwen2a-f32")):    # 2 layers; a tower's Whisper encoder, 3 layers
        with wa.Model(path, device="cpu", batch=2) as m:
            for audio in (LONG, SPEECH):
                for kwargs in opts:
                    out = m.encode(audio, output_hidden_states=True, **kwargs)
                    assert isinstance(out, wa.EncoderOutput) and len(out.hidden_states) == m.n_layer + 1
                    assert out.last_hidden_state is out.hidden_states[-1]
                    for i in range(1, m.n_layer):
                        assert np.array_equal(out.hidden_states[i], m.encode(audio, layer=i - 1, **kwargs)), (path, i)
                    rows = kwargs.get("pool") or kwargs.get("no_pad")         # (else a tower gives its tokens)
                    last = m.encode(audio, **kwargs) if rows or not m.projector else \
                        m.encode_mel(m.log_mel(audio), outtype=kwargs.get("outtype", "f32"))
                    assert np.array_equal(out.last_hidden_state, last), (path, audio, kwargs)
                    assert all(h.shape == last.shape and h.dtype == last.dtype for h in out.hidden_states)
    # main's --layer, as a user would check it
    with wa.Model(MICRO, device="cpu") as m:
        out = m.encode(LONG, output_hidden_states=True)
        assert np.array_equal(out.hidden_states[1], run_main(tmp_path, MICRO, [LONG], "--layer", "0"))
        assert np.array_equal(out.hidden_states[2], run_main(tmp_path, MICRO, [LONG]))
        # a list: one EncoderOutput per input
        both = m.encode([SPEECH, wa.load_audio(LONG)], output_hidden_states=True)
        assert [len(o.hidden_states) for o in both] == [3, 3]
        assert all(np.array_equal(a, b) for a, b in zip(both[1].hidden_states, out.hidden_states))


def test_hidden_states_of_the_reference_log_mel_are_transformers(model):
    # tests/data/encoder: transformers' float64 activations of WhisperEncoder on this log-mel;
    # hidden_states[0] is its input embedding (conv stem + positions), [1] layer 0's output,
    # [-1] last_hidden_state (the final LayerNorm), as its output_hidden_states gives them
    data = os.path.join(ROOT, "tests", "data")
    mel = np.load(os.path.join(data, "features", "speech_16k.mel80.npy")).astype(np.float32)
    out = model.encode_mel(mel, output_hidden_states=True)
    assert out.last_hidden_state.shape == (1500, 128)
    for state, ref in zip(out.hidden_states, ("post_conv", "layer0", "last_hidden_state")):
        want = np.load(os.path.join(data, "encoder", "micro-80", f"speech_16k.{ref}.npy")).reshape(1500, 128)
        assert np.linalg.norm(state - want) / np.linalg.norm(want) < 2e-6, ref
    assert np.array_equal(out.hidden_states[1], model.encode_mel(mel, layer=0))
    assert np.array_equal(out.last_hidden_state, model.encode_mel(mel))
    # windows [n, n_mels, n_frames], unpadded ones too
    windows = np.ascontiguousarray(np.stack([mel, mel])[:, :, :702])
    out = model.encode_mel(windows, output_hidden_states=True, outtype="f16")
    assert out.last_hidden_state.shape == (2, 351, 128) and out.last_hidden_state.dtype == np.float16
    assert np.array_equal(out.hidden_states[1], model.encode_mel(windows, layer=0, outtype="f16"))


def test_hidden_states_refuse_one_layer_options(model):
    tower = model_path("tower-voxtral-f32")
    for kwargs in ({"layer": 0}, {"final_ln": False}):
        with pytest.raises(ValueError, match="output_hidden_states gives every layer.*choose one"):
            model.encode(SPEECH, output_hidden_states=True, **kwargs)
        with pytest.raises(ValueError, match="output_hidden_states gives every layer.*choose one"):
            model.encode_mel(np.zeros((80, 3000), np.float32), output_hidden_states=True, **kwargs)
    with wa.Model(tower, device="cpu") as m:
        with pytest.raises(ValueError, match="projector=False gives the audio tower's output.*choose one"):
            m.encode(SPEECH, output_hidden_states=True, projector=False)
    with pytest.raises(wa.WhisperAudioError, match="even count"):
        model.encode_mel(np.zeros((80, 301), np.float32), output_hidden_states=True)


def test_version_attribute():
    assert wa.__version__ == wa.version()
    with open(os.path.join(ROOT, "whisper-audio.h")) as f:
        assert f'#define WHISPER_AUDIO_VERSION "{wa.__version__}"' in f.read()


def test_enums_by_name(model):
    # a member is its name (a str: ==, hash, JSON), int() its C value; options take either
    hp = model.hparams
    assert hp["projector"] is wa.Projector.NONE and hp["projector"] == "none" and int(hp["projector"]) == 0
    assert hp["weight_type"] is wa.WeightType.F32 and hp["weight_type"] == "f32" and f"{hp['weight_type']}" == "f32"
    assert json.loads(json.dumps(hp))["projector"] == "none"
    assert {"f32": 1}[hp["weight_type"]] == 1
    with wa.Model(model_path("tower-qwen2a-f32"), device=wa.Device.CPU, dtype=wa.DType.BF16) as m:
        assert m.projector is wa.Projector.QWEN2A and m.projector == "qwen2a" and int(m.projector) == 1
        assert m.hparams["projector"] is m.projector and str(m.projector) == "qwen2a"
    assert wa.Projector.QWEN3ASR == "qwen3asr" and int(wa.Projector.QWEN3ASR) == 12
    assert wa.Projector.VOXTRAL_REALTIME == "voxtral_realtime" and int(wa.Projector.VOXTRAL_REALTIME) == 13
    assert wa.Device.GPU is wa.Device.CUDA and wa.Device("cuda") is wa.Device.CUDA
    assert np.array_equal(model.encode(SPEECH, pool=wa.Pool.MEAN), model.encode(SPEECH, pool="mean"))
    assert np.array_equal(model.encode(SPEECH, pool=wa.Pool.NONE), model.encode(SPEECH))
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, got 'tpu'"):
        wa.Model(MICRO, device="tpu")
    with pytest.raises(ValueError, match="dtype must be one of f16, bf16, fp8"):
        wa.Model(MICRO, dtype="int8")
    with pytest.raises(ValueError, match="pool must be one of none, mean, got 'max'"):
        model.encode(SPEECH, pool="max")


def test_help_documents_every_name():
    # help() shows a docstring and type hints for every public function, class and method
    public = [getattr(wa, n) for n in wa.__all__ if callable(getattr(wa, n))]
    methods = [getattr(wa.Model, n) for n in vars(wa.Model) if not n.startswith("_")]
    assert len(methods) >= 5
    for f in public + methods + [wa.Model.__init__]:
        assert inspect.getdoc(f), f"{f.__qualname__} has no docstring"
        if inspect.isfunction(f):
            sig = inspect.signature(f)
            for name, p in sig.parameters.items():
                assert name == "self" or p.annotation is not inspect.Parameter.empty, f"{f.__qualname__}({name}) has no type hint"
            assert sig.return_annotation is not inspect.Signature.empty, f"{f.__qualname__} has no return type hint"
    import pydoc
    text = pydoc.render_doc(wa.Model.encode, renderer=pydoc.plaintext)
    for word in ("sampling_rate: Optional[int] = None", "output_hidden_states: bool = False", "EncoderOutput",
                 "taken as 16 kHz", "binary file object"):
        assert word in text, word


# the command: python -m whisper_audio (and the console script) run main's command line

def run_cli(cmd, tmp_path, env=None, *args):
    out = str(tmp_path / "cli.npy")
    r = subprocess.run(cmd + ["-m", MICRO, "-f", LONG, "-o", out, "--device", "cpu", "--no-progress"] + list(args),
                       capture_output=True, text=True, env=env)
    return r, (np.load(out) if r.returncode == 0 else None)


def test_python_m_whisper_audio_runs_main(tmp_path):
    env = dict(os.environ, WHISPER_AUDIO_MAIN=MAIN)
    cmd = [sys.executable, "-m", "whisper_audio"]
    r, got = run_cli(cmd, tmp_path, env, "--pool", "mean")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(got, run_main(tmp_path, MICRO, [LONG], "--pool", "mean"))
    r = subprocess.run(cmd + ["--version"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and wa.__version__ in r.stdout + r.stderr
    r = subprocess.run(cmd + ["-m", MICRO, "--no-such-option"], capture_output=True, text=True, env=env)
    assert r.returncode == 2, (r.returncode, r.stderr)                     # main's exit status, as it is
    r = subprocess.run(cmd + ["--help"], capture_output=True, text=True, env=env)
    assert "whisper-audio" in r.stdout + r.stderr                         # main's usage, under the command's name
    env["WHISPER_AUDIO_MAIN"] = str(tmp_path / "no-such-main")
    r = subprocess.run(cmd + ["--version"], capture_output=True, text=True, env=env)
    assert r.returncode == 127 and "no such file" in r.stderr and "WHISPER_AUDIO_MAIN" in r.stderr


def test_console_script_of_an_installed_package_runs_its_main(tmp_path):
    # pip installed the package (make test-python: build/venv): its `whisper-audio` command
    # runs the main binary the wheel carries, without WHISPER_AUDIO_MAIN
    package = os.path.dirname(os.path.abspath(wa.__file__))
    if package == os.path.join(ROOT, "python", "whisper_audio"):
        pytest.skip("the package runs from the source tree (PYTHONPATH), not installed: no console script to run")
    script = os.path.join(os.path.dirname(sys.executable), "whisper-audio")
    assert os.path.isfile(script), f"pip installed no {script}"
    assert os.access(os.path.join(package, "whisper-audio"), os.X_OK), "the wheel carries no main binary"
    env = {k: v for k, v in os.environ.items() if k != "WHISPER_AUDIO_MAIN"}
    r, got = run_cli([script], tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(got, run_main(tmp_path, MICRO, [LONG]))


# ---- bad input: a clear exception, never a crash or a wrong result ---------------------

def test_bad_audio_arrays(model):
    pcm = wa.load_audio(SPEECH)
    # (float64, float16 and int16 are converted, a 2-D array is a batch: test_transformers_inputs.py)
    with pytest.raises(TypeError, match="float32"):
        model.encode(pcm.astype(">f4"))
    with pytest.raises(TypeError, match="float32"):
        model.encode(pcm.astype(np.complex64))
    with pytest.raises(ValueError, match="dimension, got shape"):
        model.encode(pcm[:100000].reshape(2, 2, -1))
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


class _Path:
    """An os.PathLike that is not a str (as pathlib's, but its string may hold a NUL)."""

    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return self.path


def test_paths_with_a_nul_are_refused(model, tmp_path):
    # a C string ends at the NUL: 'ok.wav\0junk' used to encode ok.wav
    for path in (SPEECH + "\0junk", _Path(SPEECH + "\0junk")):
        with pytest.raises(ValueError, match="embedded null byte"):
            model.encode(path)
        with pytest.raises(ValueError, match="embedded null byte"):
            model.encode([SPEECH, path])
        with pytest.raises(ValueError, match="embedded null byte"):
            model.log_mel(path)
        with pytest.raises(ValueError, match="embedded null byte"):
            wa.load_audio(path)
        with pytest.raises(ValueError, match="embedded null byte"):
            model.encode(path, output_hidden_states=True)
    with pytest.raises(ValueError, match="embedded null byte"):
        wa.Model(MICRO + "\0junk", device="cpu")
    # bytes are encoded audio now, not a path: a path's bytes are not audio
    with pytest.raises(wa.WhisperAudioError, match="<memory>: not a WAV file"):
        model.encode(os.fsencode(SPEECH) + b"\0junk")


def test_load_audio_rates_outside_the_resampler_range():
    # sr=2**40 reached the library as 0 Hz ("16000 -> 0 Hz"); 2**31 - 1 ran minutes into GBs
    for sr in (2 ** 40, 2 ** 31 - 1, 1000001, 999, 0, -16000):
        with pytest.raises(ValueError, match=r"sr must be a whole number in \[1000, 1000000\]"):
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


def test_cuda_looks_in_the_nvidia_wheel_first(tmp_path):
    """import points the CUDA backend at the nvidia-cublas wheel's folder (nvidia/cu13/lib on
    sys.path): device="cuda" asks the dynamic loader for cuBLASLt there before the system's"""
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    code = ("import os, whisper_audio as wa\n"
            "print(os.environ['WHISPER_AUDIO_NVIDIA_LIB_DIRS'])\n"
            "try:\n    wa.Model(%r, device='cuda').close()\n"
            "except wa.WhisperAudioError as e:\n    print(e)\n" % MICRO)
    env = {k: v for k, v in os.environ.items()
           if k not in ("WHISPER_AUDIO_NVIDIA_LIB_DIRS", "WHISPER_AUDIO_CUBLASLT", "PYTHONPATH")}
    env.update(PYTHONPATH=str(tmp_path), LD_DEBUG="files")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    if "this build has no CUDA backend" in r.stdout:
        pytest.skip("a build without CUDA")
    assert r.stdout.splitlines()[0].split(os.pathsep)[0] == str(lib)
    tried = re.findall(r"file=(\S*libcublasLt\S*) \[0\];  dynamically loaded by", r.stderr)
    assert tried and re.fullmatch(re.escape(str(lib)) + r"/libcublasLt\.so\.\d+", tried[0]), tried


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
