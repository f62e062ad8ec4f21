"""Whisper audio-encoder embeddings from Python: numpy in, numpy out.

    import whisper_audio
    model = whisper_audio.Model("tiny.gguf")              # device="auto": CUDA when present
    emb = model.encode("speech.wav")                      # float32 [n_windows, 1500, d_model]
    vec = model.encode(pcm, pool="mean")                  # pcm: float32 16 kHz mono -> [n_windows, d_model]

A thin layer over the C API (whisper-audio.h) through ctypes: every model rule (windows,
positions, pooling, the unpadded window) is the library's, so the results are main's, bit
for bit on the CPU. ctypes releases the GIL for each call into the library; a Model may be
used from several threads (each concurrent call gets its own encoder, see Model).
"""

import contextlib
import ctypes
import os
import threading
import weakref

import numpy as np

__all__ = ["Model", "WhisperAudioError", "load_audio", "version", "SAMPLE_RATE"]

SAMPLE_RATE = 16000
_N_SAMPLES = 480000     # WHISPER_AUDIO_N_SAMPLES: one 30 s window
_N_FRAMES = 3000        # WHISPER_AUDIO_N_FRAMES: mel frames per window


class WhisperAudioError(RuntimeError):
    """A failure inside the library; the message is whisper_audio_last_error()'s."""


# ---- the C API --------------------------------------------------------------------

class _Hparams(ctypes.Structure):
    _fields_ = [("n_mels", ctypes.c_int), ("n_ctx", ctypes.c_int), ("n_state", ctypes.c_int),
                ("n_head", ctypes.c_int), ("n_layer", ctypes.c_int), ("n_ff", ctypes.c_int),
                ("eps", ctypes.c_float), ("weight_type", ctypes.c_int), ("projector", ctypes.c_int),
                ("n_llm", ctypes.c_int), ("n_proj_ff", ctypes.c_int), ("stack_factor", ctypes.c_int),
                ("proj_eps", ctypes.c_float)]


class _Info(ctypes.Structure):
    _fields_ = [("sample_rate", ctypes.c_int), ("channels", ctypes.c_int), ("bits_per_sample", ctypes.c_int),
                ("format", ctypes.c_char * 32), ("frames", ctypes.c_int64)]


class _EncoderParams(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("dtype", ctypes.c_int), ("n_threads", ctypes.c_int),
                ("gpu_device", ctypes.c_int), ("max_batch", ctypes.c_int), ("output_layer", ctypes.c_int),
                ("final_ln", ctypes.c_bool), ("projector", ctypes.c_bool)]


_DEVICES = {"auto": 0, "cpu": 1, "cuda": 2}     # enum whisper_audio_device
_DTYPES = {"f16": 0, "bf16": 1}                 # enum whisper_audio_dtype
_MAX_BATCH = 256                                # WHISPER_AUDIO_MAX_BATCH


def _load_library():
    # the library pip installed beside this file; WHISPER_AUDIO_LIBRARY names another build
    # of the same API (make's build/libwhisper-audio.so, for example)
    path = os.environ.get("WHISPER_AUDIO_LIBRARY") or os.path.join(os.path.dirname(__file__), "libwhisper-audio.so")
    lib = ctypes.CDLL(path)     # CDLL (not PyDLL): the GIL is released during each call
    P, I, Z, B = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_bool
    S = ctypes.c_char_p
    signatures = {
        "whisper_audio_last_error": (S, []),
        "whisper_audio_version": (S, []),
        "whisper_audio_model_load": (P, [S]),
        "whisper_audio_model_free": (None, [P]),
        "whisper_audio_model_hparams": (ctypes.POINTER(_Hparams), [P]),
        "whisper_audio_weight_type_name": (S, [I]),
        "whisper_audio_decode_file": (B, [S, ctypes.POINTER(P), ctypes.POINTER(Z), ctypes.POINTER(_Info)]),
        "whisper_audio_pcm_free": (None, [P]),
        "whisper_audio_resample": (B, [P, Z, I, I, ctypes.POINTER(P), ctypes.POINTER(Z)]),
        "whisper_audio_log_mel_windows": (B, [P, P, Z, I, P, I]),
        "whisper_audio_encoder_default_params": (_EncoderParams, []),
        "whisper_audio_encoder_init": (P, [P, _EncoderParams]),
        "whisper_audio_encoder_free": (None, [P]),
        "whisper_audio_encoder_backend": (S, [P]),
        "whisper_audio_n_windows": (Z, [Z]),
        "whisper_audio_n_positions": (I, [Z]),
        "whisper_audio_n_positions_total": (Z, [Z]),
        "whisper_audio_pool_mean": (B, [P, I, I, Z, P]),
        "whisper_audio_encode_mel_frames": (B, [P, P, I, I, P]),
    }
    for name, (restype, argtypes) in signatures.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, argtypes
    return lib


_lib = _load_library()


def _check(ok):
    if not ok:
        raise WhisperAudioError(_lib.whisper_audio_last_error().decode(errors="replace"))


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.whisper_audio_version().decode()


def _malloced_array(ptr, n):
    """A float32 array over n floats that the library malloc'ed: no copy, freed with the array."""
    if n == 0:
        _lib.whisper_audio_pcm_free(ptr)
        return np.empty(0, np.float32)
    buf = (ctypes.c_float * n).from_address(ptr)
    weakref.finalize(buf, _lib.whisper_audio_pcm_free, ptr)
    return np.frombuffer(buf, dtype=np.float32)


def load_audio(path, sr=SAMPLE_RATE):
    """Decodes an audio file (WAV, FLAC, MP3, Ogg Vorbis, Opus; found by content) to float32 mono.

    The library decodes to 16 kHz (channels averaged, resampled when needed); another sr is
    resampled from that, so it holds nothing above 8 kHz.
    """
    if isinstance(sr, bool) or not isinstance(sr, int) or sr <= 0:
        raise ValueError(f"sr must be a positive int, got {sr!r}")
    pcm, n = ctypes.c_void_p(), ctypes.c_size_t()
    _check(_lib.whisper_audio_decode_file(os.fsencode(path), ctypes.byref(pcm), ctypes.byref(n), None))
    audio = _malloced_array(pcm.value, n.value)
    if sr == SAMPLE_RATE or audio.size == 0:
        return audio
    out, n_out = ctypes.c_void_p(), ctypes.c_size_t()
    _check(_lib.whisper_audio_resample(audio.ctypes.data, audio.size, SAMPLE_RATE, sr, ctypes.byref(out),
                                       ctypes.byref(n_out)))
    return _malloced_array(out.value, n_out.value)


def _float32_array(a, what, ndims):
    """a itself when it is a C-contiguous float32 array of one of the ndims; else a clear error."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, a file path or a list of them, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{what} must be float32 (native byte order), got {a.dtype}: convert with a.astype(np.float32)")
    if a.ndim not in ndims:
        raise ValueError(f"{what} must have {' or '.join(map(str, ndims))} dimensions, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous (a strided view?): pass np.ascontiguousarray(a)")
    return a


class Model:
    """A Whisper encoder model (our GGUF, whisper.cpp's ggml-*.bin or a CTranslate2 directory).

    device: "auto" (CUDA when a GPU is present), "cpu" or "cuda"; dtype: the CUDA compute
    type, "f16" or "bf16" (the CPU computes in f32); n_threads: CPU threads (0: the
    library's default, as main); batch: windows per encoder run (main's -b).

    Threads: calls may come from several threads at once. Each running encode call holds an
    encoder of its own (the C API runs one call at a time per encoder), made when needed and
    kept for later calls, so memory grows with the number of calls that overlap.
    """

    def __init__(self, path, device="auto", dtype="f16", *, n_threads=0, batch=8, gpu_device=0):
        if device not in _DEVICES:
            raise ValueError(f"device must be one of {', '.join(_DEVICES)}, got {device!r}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        for name, v, lo, hi in (("n_threads", n_threads, 0, 4096), ("batch", batch, 1, _MAX_BATCH),
                                ("gpu_device", gpu_device, 0, 4096)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {v!r}")
        self._model = None                  # first, so that close() works on a half-made Model
        self._lock = threading.Lock()
        self._idle = {}                     # (output_layer, final_ln) -> encoders not in use
        self._calls = 0                     # calls running now
        self._closed = False
        self.path = os.fspath(path)
        model = _lib.whisper_audio_model_load(os.fsencode(path))
        _check(model)
        self._model = model
        hp = _lib.whisper_audio_model_hparams(model).contents
        self.hparams = {name: getattr(hp, name) for name, _ in _Hparams._fields_}
        self.hparams["weight_type"] = _lib.whisper_audio_weight_type_name(hp.weight_type).decode()
        self.n_mels, self.n_ctx, self.n_state, self.n_layer = hp.n_mels, hp.n_ctx, hp.n_state, hp.n_layer
        self._params = _lib.whisper_audio_encoder_default_params()
        self._params.device, self._params.dtype = _DEVICES[device], _DTYPES[dtype]
        if n_threads > 0:
            self._params.n_threads = n_threads
        self._params.gpu_device, self._params.max_batch = gpu_device, batch
        self.n_threads = self._params.n_threads
        try:                                # the default encoder now: a device that cannot work fails here
            with self._encoder(None, True) as enc:
                self.backend = _lib.whisper_audio_encoder_backend(enc).decode()
        except BaseException:
            self.close()
            raise

    # -- lifetime --------------------------------------------------------------------

    def close(self):
        """Frees the model and its encoders (after the calls running now end); later calls raise."""
        with self._lock:
            self._closed = True
            if self._calls == 0:
                self._free()

    def _free(self):                        # with the lock held, no call running
        for encoders in self._idle.values():
            for enc in encoders:
                _lib.whisper_audio_encoder_free(enc)
        self._idle = {}
        if self._model is not None:
            _lib.whisper_audio_model_free(self._model)
            self._model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_lock", None) is not None:
            self.close()

    @contextlib.contextmanager
    def _use(self):
        """The model pointer, kept alive until the block ends even if another thread closes it."""
        with self._lock:
            if self._closed:
                raise ValueError("the model is closed")
            self._calls += 1
        try:
            yield self._model
        finally:
            with self._lock:
                self._calls -= 1
                if self._closed and self._calls == 0:
                    self._free()

    @contextlib.contextmanager
    def _encoder(self, layer, final_ln):
        """An encoder for these settings that no other call is using."""
        key = (-1 if layer is None else int(layer), bool(final_ln) and layer is None)
        with self._use() as model:
            with self._lock:
                idle = self._idle.setdefault(key, [])
                enc = idle.pop() if idle else None
            if enc is None:
                params = _EncoderParams.from_buffer_copy(self._params)
                params.output_layer, params.final_ln = key
                enc = _lib.whisper_audio_encoder_init(model, params)
                _check(enc)
            try:
                yield enc
            finally:
                with self._lock:
                    self._idle.setdefault(key, []).append(enc)   # freed by _free when the model closes

    # -- inputs and options ------------------------------------------------------------

    def _check_layer(self, layer):
        if layer is None:
            return
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.n_layer:
            raise ValueError(f"layer {layer!r}: the model has layers 0 to {self.n_layer - 1} (None: the last)")

    @staticmethod
    def _pcm(audio):
        """(16 kHz float32 samples, a name for messages) of a path or an array."""
        if isinstance(audio, (str, bytes, os.PathLike)):
            pcm, name = load_audio(audio), os.fsdecode(audio)
        else:
            pcm, name = _float32_array(audio, "audio", (1,)), "audio array"
        if pcm.size == 0:
            raise ValueError(f"{name}: no audio samples")
        return pcm, name

    @staticmethod
    def _finish(out, name, outtype):
        # main refuses non-finite output too; f16 is main's conversion (round to nearest even)
        if not np.isfinite(out).all():
            raise WhisperAudioError(f"{name}: the encoder output holds non-finite values")
        return out.astype(np.float16) if outtype == "f16" else out

    # -- the API ---------------------------------------------------------------------

    def log_mel(self, audio):
        """Log-mel of each 30 s window, as WhisperFeatureExtractor: [n_windows, n_mels, 3000]
        (a list of them for a list of inputs)."""
        if isinstance(audio, (list, tuple)):
            return [self.log_mel(a) for a in audio]
        pcm, _ = self._pcm(audio)
        n_win = _lib.whisper_audio_n_windows(pcm.size)
        mel = np.empty((n_win, self.n_mels, _N_FRAMES), np.float32)
        with self._use() as model:
            _check(_lib.whisper_audio_log_mel_windows(model, pcm.ctypes.data, pcm.size, n_win, mel.ctypes.data,
                                                      self.n_threads))
        return mel

    def encode_mel(self, features, *, layer=None, final_ln=True, outtype="f32"):
        """Encodes log-mel windows [n_windows, n_mels, n_frames] (n_frames even, 2 to 3000;
        fewer than 3000: unpadded windows) to [n_windows, n_frames / 2, d_model]; a 2-D
        [n_mels, n_frames] gives [n_frames / 2, d_model]."""
        mel = _float32_array(features, "features", (2, 3))
        self._check_layer(layer)
        if outtype not in ("f32", "f16"):
            raise ValueError(f"outtype must be 'f32' or 'f16', got {outtype!r}")
        if mel.shape[-2] != self.n_mels or mel.size == 0:
            raise ValueError(f"features of shape {mel.shape}: the model takes [n_windows, {self.n_mels}, n_frames]")
        windows = mel.reshape((-1,) + mel.shape[-2:])
        n_frames = mel.shape[-1]
        out = np.empty((windows.shape[0], n_frames // 2, self.n_state), np.float32)
        with self._encoder(layer, final_ln) as enc:
            _check(_lib.whisper_audio_encode_mel_frames(enc, windows.ctypes.data, windows.shape[0], n_frames,
                                                        out.ctypes.data))
        return self._finish(out.reshape(mel.shape[:-2] + out.shape[1:]), "features", outtype)

    def encode(self, audio, *, layer=None, final_ln=True, pool=None, no_pad=False, outtype="f32"):
        """Encoder embeddings of audio: a float32 16 kHz mono array, a file path, or a list of them.

        As main's options: each input is cut into 30 s windows, the last zero-padded, and gives
        [n_windows, 1500, d_model]; pool="mean": [n_windows, d_model], the mean over the
        positions that hold audio; no_pad=True: the last window (or a clip under 30 s)
        unpadded, [n_positions, d_model]; layer=N: the hidden state after layer N;
        final_ln=False: the last layer before the final LayerNorm; outtype "f32" or "f16".
        A list gives a list, its windows encoded in shared batches (all of it in memory at once).
        """
        self._check_layer(layer)
        if pool not in (None, "mean"):
            raise ValueError(f"pool must be None or 'mean', got {pool!r}")
        if outtype not in ("f32", "f16"):
            raise ValueError(f"outtype must be 'f32' or 'f16', got {outtype!r}")
        single = not isinstance(audio, (list, tuple))
        inputs = [self._pcm(a) for a in ([audio] if single else audio)]
        with self._encoder(layer, final_ln) as enc, self._use() as model:
            outs = self._encode_inputs(model, enc, inputs, pool == "mean", no_pad)
        outs = [self._finish(out, name, outtype) for out, (_, name) in zip(outs, inputs)]
        return outs[0] if single else outs

    def _encode_inputs(self, model, enc, inputs, pool_mean, no_pad):
        N, d = _N_SAMPLES, self.n_state
        # the padded windows of each input, all encoded in one call: every window, or with
        # no_pad every full one (a short last window is encoded alone, unpadded, below)
        n_padded = []
        for pcm, _ in inputs:
            n = pcm.size
            n_padded.append(n // N if no_pad and n % N else _lib.whisper_audio_n_windows(n))
        total = sum(n_padded)
        emb = np.empty((total, self.n_ctx, d), np.float32)
        if total:
            mel = np.empty((total, self.n_mels, _N_FRAMES), np.float32)
            w = 0
            for (pcm, _), k in zip(inputs, n_padded):
                if k:
                    _check(_lib.whisper_audio_log_mel_windows(model, pcm.ctypes.data, min(pcm.size, k * N), k,
                                                              mel[w].ctypes.data, self.n_threads))
                    w += k
            _check(_lib.whisper_audio_encode_mel_frames(enc, mel.ctypes.data, total, _N_FRAMES, emb.ctypes.data))
            del mel
        outs, w = [], 0
        for (pcm, _), k in zip(inputs, n_padded):
            windows = emb[w:w + k]          # a view: no copy
            w += k
            # per window: (embeddings [n_pos, d], samples of audio in it)
            parts = [(windows[i], min(N, pcm.size - i * N)) for i in range(k)]
            if k < _lib.whisper_audio_n_windows(pcm.size):
                parts.append(self._encode_unpadded(model, enc, pcm, k * N))
            if pool_mean:
                out = np.empty((len(parts), d), np.float32)
                for i, (e, n_samples) in enumerate(parts):
                    _check(_lib.whisper_audio_pool_mean(e.ctypes.data, e.shape[0], d, n_samples, out[i].ctypes.data))
            elif no_pad:                    # a row per position: [n_positions_total, d]
                out = windows.reshape(-1, d) if len(parts) == k else np.concatenate([e for e, _ in parts])
                assert out.shape[0] == _lib.whisper_audio_n_positions_total(pcm.size)
            else:
                out = windows
            outs.append(out)
        return outs

    def _encode_unpadded(self, model, enc, pcm, start):
        """The short last window from sample start, unpadded (main's --no-pad): the log-mel of
        the padded window, its first 2 * n_positions frames encoded. (embeddings, samples)."""
        n = pcm.size - start
        n_frames = 2 * _lib.whisper_audio_n_positions(n)
        mel = np.empty((self.n_mels, _N_FRAMES), np.float32)
        _check(_lib.whisper_audio_log_mel_windows(model, pcm[start:].ctypes.data, n, 1, mel.ctypes.data,
                                                  self.n_threads))
        mel = np.ascontiguousarray(mel[:, :n_frames])
        out = np.empty((n_frames // 2, self.n_state), np.float32)
        _check(_lib.whisper_audio_encode_mel_frames(enc, mel.ctypes.data, 1, n_frames, out.ctypes.data))
        return out, n
