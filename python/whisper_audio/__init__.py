"""Whisper audio-encoder embeddings from Python: numpy in, numpy out.

    import whisper_audio
    model = whisper_audio.Model("tiny.gguf")              # device="auto": CUDA when present
    emb = model.encode("speech.wav")                      # float32 [n_windows, 1500, d_model]
    emb = model(pcm, sampling_rate=44100)                 # model(...) is model.encode(...); resampled to 16 kHz
    embs = model(np.stack([pcm_a, pcm_b]))                # a 2-D array: a batch of rows, a list back
    emb = model(stereo, channels=2)                       # [n, 2] as soundfile reads it: down-mixed as main does
    emb = model.encode(open("a.mp3", "rb"))               # bytes or a binary file: encoded audio, decoded
    vec = model.encode(pcm, pool="mean")                  # pcm: float32 16 kHz mono -> [n_windows, d_model]
    out = model.encode(pcm, output_hidden_states=True)    # out.hidden_states: every layer, from one forward

The API (help(whisper_audio.Model) and each name's own help say more):

    Model(path, device="auto", dtype="f16", *, n_threads=0, batch=8, gpu_device=0)
        .encode(audio, *, sampling_rate=None, layer=None, final_ln=True, pool=None, no_pad=False,
                outtype="f32", projector=True, output_hidden_states=False, return_windows=False,
                channels=None)       Model(...)(audio, ...): encode
        .encode_mel(features, *, layer=None, final_ln=True, outtype="f32", output_hidden_states=False)
        .log_mel(audio, *, sampling_rate=None)      .n_tokens(n_samples, projector=True)
        .hparams .n_mels .n_ctx .n_state .n_layer .projector .token_dim .backend .n_threads .close()
    load_audio(path, sr=16000)     EncoderOutput(last_hidden_state, hidden_states)
    WhisperAudioError   version() and __version__   SAMPLE_RATE
    Device, DType, Pool, WeightType, Projector: the C API's enums by name (a member == its name)

An input of encode or log_mel is a mono array (float32, float64, float16, or int16 scaled by
1/32768; 16 kHz unless sampling_rate says otherwise), a path (str or os.PathLike), encoded audio as bytes (bytearray, memoryview) or a
binary file object (anything with .read(), read to its end), or a list of them.

A thin layer over the C API (whisper-audio.h) through ctypes: every model rule (windows,
positions, pooling, the unpadded window) is the library's, and encode runs audio through the
library's pipeline as main does, so its results are main's, bit for bit (on the CPU and on
CUDA). ctypes releases the GIL for each call into the library; a Model may be used from
several threads (each concurrent call gets its own encoder, see Model). The `whisper-audio`
command (and `python -m whisper_audio`) runs main's command line.
"""

import contextlib
import ctypes
import enum
import math
import importlib.util
import operator
import os
import sys
import threading
import warnings
import weakref
from typing import Any, BinaryIO, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["Model", "EncoderOutput", "WhisperAudioError", "WhisperAudioWarning", "load_audio", "model_hparams", "version", "__version__",
           "SAMPLE_RATE", "Device", "DType", "Pool", "WeightType", "Projector"]

SAMPLE_RATE = 16000
_N_SAMPLES = 480000     # WHISPER_AUDIO_N_SAMPLES: one 30 s window
_N_FRAMES = 3000        # WHISPER_AUDIO_N_FRAMES: mel frames per window


class WhisperAudioError(RuntimeError):
    """A failure inside the library; the message is whisper_audio_last_error()'s."""


class WhisperAudioWarning(UserWarning):
    """Audio decoded with a caveat (an input cut short of the length its header says: what is
    there was decoded); the message is whisper_audio_decode_warning()'s, as main prints it."""


# ---- the C API's enums, by name -----------------------------------------------------

class _CEnum(str, enum.Enum):
    """An enum of whisper-audio.h. A member is the string of its name as the library and main
    spell it (so it equals that string, hashes as it, and JSON writes it as it); int(member) is
    its value in the C enum."""

    def __str__(self):
        return self.value

    def __format__(self, spec):
        return format(self.value, spec)

    __hash__ = str.__hash__

    def __int__(self):
        return list(type(self)).index(self)     # the C enums count from 0 in this order (test_abi checks it)

    @classmethod
    def _of(cls, value, what):
        """The member value names (a member or its string), else a ValueError listing the names."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{what} must be one of {', '.join(m.value for m in cls)}, got {value!r}") from None


class Device(_CEnum):
    """Where a Model runs (enum whisper_audio_device): AUTO (CUDA when a GPU is present, else
    the CPU), CPU, or CUDA (GPU is its other name)."""
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"
    GPU = "cuda"        # WHISPER_AUDIO_DEVICE_GPU: the same member as CUDA


class DType(_CEnum):
    """The compute type on CUDA (enum whisper_audio_dtype; the CPU computes in f32): F16, BF16,
    or FP8 (bf16 with the linear layers' GEMMs of every block but the first and the last in FP8
    e4m3; compute capability 8.9+)."""
    F16 = "f16"
    BF16 = "bf16"
    FP8 = "fp8"


class Pool(_CEnum):
    """How encode pools a window's rows (enum whisper_audio_pool): NONE (every position) or MEAN
    (the mean over the positions that hold audio). encode's pool=None is NONE."""
    NONE = "none"
    MEAN = "mean"


class WeightType(_CEnum):
    """The type of a model file's matrices (enum whisper_audio_weight_type): hparams["weight_type"]."""
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"


class Projector(_CEnum):
    """The audio LLM whose tower and projector a model file holds (enum whisper_audio_projector;
    llama.cpp's clip.projector_type names): NONE for a Whisper encoder alone, QWEN2A
    (Qwen2-Audio), VOXTRAL, ULTRAVOX, MUSICFLAMINGO (Audio Flamingo 3's tower: llama.cpp's name; Music
    Flamingo's too, whose files also have its rotary time embedding: hparams["n_time_rot"] > 0),
    GLMASR (GLM-ASR as transformers lays it out), QWEN25O (Qwen2.5-Omni's audio tower), MINICPMO
    (MiniCPM-o 2.6's audio tower: block-causal attention, linear, ReLU, linear, pooling by 2),
    KIMIAUDIO (Kimi-Audio's continuous path: 4 positions stacked, its VQ adaptor), QWEN3A
    (Qwen3-Omni's audio tower), STEPAUDIO2 (Step-Audio 2: 25 s windows, pooling by 2, its adapter), MERALION
    (MERaLiON-2: each 30 s window normalised, 15 positions stacked, its gated speech adapter), QWEN3ASR
    (Qwen3-ASR: Qwen3-Omni's tower, an input shorter than 0.5 s zero-padded to it), VOXTRAL_REALTIME (Voxtral
    Realtime: a causal encoder over the whole input with its processor's zeros around it, 4 positions stacked).
    hparams["projector"]; Model.projector (None for NONE)."""
    NONE = "none"
    QWEN2A = "qwen2a"
    VOXTRAL = "voxtral"
    ULTRAVOX = "ultravox"
    MUSICFLAMINGO = "musicflamingo"
    GLMASR = "glmasr"
    QWEN25O = "qwen2.5o"
    MINICPMO = "minicpmo"
    KIMIAUDIO = "kimiaudio"
    QWEN3A = "qwen3a"
    STEPAUDIO2 = "stepaudio2"
    MERALION = "meralion"
    QWEN3ASR = "qwen3asr"
    VOXTRAL_REALTIME = "voxtral_realtime"


# ---- the C API --------------------------------------------------------------------

class _Hparams(ctypes.Structure):
    _fields_ = [("n_mels", ctypes.c_int), ("n_ctx", ctypes.c_int), ("n_state", ctypes.c_int),
                ("n_head", ctypes.c_int), ("n_layer", ctypes.c_int), ("n_ff", ctypes.c_int),
                ("eps", ctypes.c_float), ("weight_type", ctypes.c_int), ("projector", ctypes.c_int),
                ("n_llm", ctypes.c_int), ("n_proj_ff", ctypes.c_int), ("stack_factor", ctypes.c_int),
                ("proj_eps", ctypes.c_float), ("n_rot", ctypes.c_int), ("rope_theta", ctypes.c_float),
                ("n_chunk", ctypes.c_int), ("n_causal", ctypes.c_int), ("n_conv", ctypes.c_int), ("n_attn_window", ctypes.c_int),
                ("n_time_rot", ctypes.c_int), ("time_rope_theta", ctypes.c_float), ("time_rope_step", ctypes.c_float),
                ("head_dim", ctypes.c_int), ("n_window", ctypes.c_int), ("pad_left", ctypes.c_int), ("pad_right", ctypes.c_int)]


class _Info(ctypes.Structure):
    _fields_ = [("sample_rate", ctypes.c_int), ("channels", ctypes.c_int), ("bits_per_sample", ctypes.c_int),
                ("format", ctypes.c_char * 32), ("frames", ctypes.c_int64)]


class _ReaderParams(ctypes.Structure):
    _fields_ = [("n_workers", ctypes.c_int), ("max_samples", ctypes.c_size_t), ("max_buffered", ctypes.c_size_t)]


class _EncoderParams(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("dtype", ctypes.c_int), ("n_threads", ctypes.c_int),
                ("gpu_device", ctypes.c_int), ("max_batch", ctypes.c_int), ("output_layer", ctypes.c_int),
                ("final_ln", ctypes.c_bool), ("projector", ctypes.c_bool)]


class _Rows(ctypes.Structure):
    _fields_ = [("input", ctypes.c_int64), ("window", ctypes.c_int64), ("samples", ctypes.c_size_t),
                ("audio_positions", ctypes.c_int), ("n_rows", ctypes.c_int), ("n_state", ctypes.c_int),
                ("f16", ctypes.c_bool), ("data", ctypes.c_void_p)]


_ROWS_FN = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.POINTER(_Rows), ctypes.c_void_p)   # whisper_audio_rows_fn


class _PipelineParams(ctypes.Structure):
    _fields_ = [("pool", ctypes.c_int), ("no_pad", ctypes.c_bool), ("f16", ctypes.c_bool),
                ("on_rows", _ROWS_FN), ("user", ctypes.c_void_p), ("n_windows", ctypes.c_size_t),
                ("stream", ctypes.c_bool)]


_MAX_BATCH = 256                                # WHISPER_AUDIO_MAX_BATCH
_POST_CONV = -2                                 # WHISPER_AUDIO_POST_CONV: output_layer of the input of layer 0


def _nvidia_lib_dirs():
    """The lib folders of the nvidia-cublas wheel where it is installed: nvidia/cu13/lib (13.x; 12.x
    used nvidia/cublas/lib), in every folder of the `nvidia` namespace package on sys.path."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = spec.submodule_search_locations if spec is not None and spec.submodule_search_locations else []
    return [d for root in roots for d in (os.path.join(root, "cu13", "lib"), os.path.join(root, "cublas", "lib"))
            if os.path.isdir(d)]


def _load_library():
    # the CUDA backend opens cuBLASLt when it starts: first from the folders named here (where pip
    # put nvidia-cublas, the extra [cuda]), then the system's (vt-cuda-gemm.cuh lists the order); a value
    # the environment already has is kept
    dirs = _nvidia_lib_dirs()
    if dirs:
        os.environ.setdefault("WHISPER_AUDIO_NVIDIA_LIB_DIRS", os.pathsep.join(dirs))
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
        "whisper_audio_model_save_gguf": (B, [P, S]),
        "whisper_audio_weight_type_name": (S, [I]),
        "whisper_audio_decode_file": (B, [S, ctypes.POINTER(P), ctypes.POINTER(Z), ctypes.POINTER(_Info)]),
        "whisper_audio_decode_memory": (B, [P, Z, ctypes.POINTER(P), ctypes.POINTER(Z), ctypes.POINTER(_Info)]),
        "whisper_audio_pcm_free": (None, [P]),
        "whisper_audio_decode_warning": (S, []),
        "whisper_audio_stream_open": (P, [S, ctypes.POINTER(_Info)]),
        "whisper_audio_stream_read": (ctypes.c_int64, [P, P, Z]),
        "whisper_audio_stream_close": (None, [P]),
        "whisper_audio_reader_default_params": (_ReaderParams, []),
        "whisper_audio_reader_init": (P, [ctypes.POINTER(S), Z, _ReaderParams]),
        "whisper_audio_reader_read": (ctypes.c_int64, [P, Z, P, Z]),
        "whisper_audio_reader_info": (B, [P, Z, ctypes.POINTER(_Info)]),
        "whisper_audio_reader_free": (None, [P]),
        "whisper_audio_resample": (B, [P, Z, I, I, ctypes.POINTER(P), ctypes.POINTER(Z)]),
        "whisper_audio_log_mel_windows": (B, [P, P, Z, I, P, I]),
        "whisper_audio_encoder_default_params": (_EncoderParams, []),
        "whisper_audio_encoder_init": (P, [P, _EncoderParams]),
        "whisper_audio_encoder_free": (None, [P]),
        "whisper_audio_encoder_backend": (S, [P]),
        "whisper_audio_encoder_dtype": (S, [P]),
        "whisper_audio_n_windows": (Z, [Z]),
        "whisper_audio_n_positions": (I, [Z]),
        "whisper_audio_n_positions_total": (Z, [Z]),
        "whisper_audio_pool_mean": (B, [P, I, I, Z, P]),
        "whisper_audio_encode_mel_frames": (B, [P, P, I, I, P]),
        "whisper_audio_encode_mel_hidden_states": (B, [P, P, I, I, P]),
        "whisper_audio_pipeline_default_params": (_PipelineParams, []),
        "whisper_audio_pipeline_init": (P, [ctypes.POINTER(P), I, _PipelineParams]),
        "whisper_audio_pipeline_push": (B, [P, P, Z]),
        "whisper_audio_pipeline_end_input": (B, [P]),
        "whisper_audio_pipeline_finish": (B, [P]),
        "whisper_audio_pipeline_free": (None, [P]),
        "whisper_audio_pipeline_tokens": (B, [P]),
        "whisper_audio_pipeline_row_width": (I, [P]),
        "whisper_audio_pipeline_batch": (I, [P]),
        "whisper_audio_batch_for_windows": (I, [I, Z]),
        "whisper_audio_rows_are_tokens": (B, [P, _EncoderParams, _PipelineParams]),
        "whisper_audio_n_tokens": (Z, [P, Z, B]),
        "whisper_audio_token_dim": (I, [P, B]),
        "whisper_audio_projector_name": (S, [I]),
        "whisper_audio_samples_used": (Z, [P, B]),
    }
    for name, (restype, argtypes) in signatures.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, argtypes
    return lib


_lib = _load_library()


def _check(ok):
    if not ok:
        raise WhisperAudioError(_lib.whisper_audio_last_error().decode(errors="replace"))


def version() -> str:
    """The library's version, "MAJOR.MINOR.PATCH" (whisper_audio_version(); also __version__)."""
    return _lib.whisper_audio_version().decode()


__version__ = version()


def _malloced_array(ptr, n):
    """A float32 array over n floats that the library malloc'ed: no copy, freed with the array."""
    if n == 0:
        _lib.whisper_audio_pcm_free(ptr)
        return np.empty(0, np.float32)
    buf = (ctypes.c_float * n).from_address(ptr)
    weakref.finalize(buf, _lib.whisper_audio_pcm_free, ptr)
    return np.frombuffer(buf, dtype=np.float32)


def _c_path(path):
    """path as the bytes of a C string; a NUL inside it would cut the path short there, so it is
    a ValueError (as open() has it) rather than another file opened."""
    b = os.fsencode(path)
    if b"\0" in b:
        raise ValueError(f"embedded null byte in path {os.fsdecode(path)!r}")
    return b


# the rates whisper_audio_resample takes
_MIN_RATE = 1000        # WHISPER_AUDIO_MIN_RATE: the sample rates the library takes
_MAX_RATE = 1000000     # WHISPER_AUDIO_MAX_RATE


def _check_rate(rate, what):
    # an integral float (16000.0, as soundfile and librosa hand rates around) is that int
    if isinstance(rate, (float, np.floating)) and float(rate).is_integer():
        rate = int(rate)
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not _MIN_RATE <= rate <= _MAX_RATE:
        raise ValueError(f"{what} must be a whole number in [{_MIN_RATE}, {_MAX_RATE}] (Hz), got {rate!r}")
    return int(rate)


def _check_flag(value, what):
    """An option flag: a bool (numpy.bool_ too), never a truthy string or number."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be True or False, got {value!r}")
    return bool(value)


def _resample(pcm, rate_in, rate_out):
    """pcm from rate_in to rate_out by the library's resampler (whisper_audio_resample)."""
    if rate_in == rate_out or pcm.size == 0:
        return pcm
    out, n_out = ctypes.c_void_p(), ctypes.c_size_t()
    _check(_lib.whisper_audio_resample(pcm.ctypes.data, pcm.size, rate_in, rate_out, ctypes.byref(out),
                                       ctypes.byref(n_out)))
    return _malloced_array(out.value, n_out.value)


# ---- inputs: arrays, paths, encoded audio --------------------------------------------

Audio = Union[np.ndarray, str, os.PathLike, bytes, bytearray, memoryview, BinaryIO]
"""One input: float32 mono samples, a path, or encoded audio (bytes, a binary file object)."""


def _is_batch(audio, channels=None):
    """A list or tuple of inputs, or a 2-D array of rows (transformers' batch); with channels a
    2-D array is one multichannel input."""
    if isinstance(audio, (list, tuple)):
        return True
    return isinstance(audio, np.ndarray) and audio.ndim == 2 and channels is None


def _is_path(audio):
    return isinstance(audio, (str, os.PathLike))


def _encoded(audio):
    """The bytes of encoded audio (bytes, bytearray, memoryview, or a binary file object read to
    its end) and a name for messages; None for anything else."""
    if isinstance(audio, (bytes, bytearray, memoryview)):
        return audio, "<memory>"
    read = getattr(audio, "read", None)
    if read is None or isinstance(audio, np.ndarray):
        return None
    data = read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"a file object of audio must be binary (open(path, 'rb')): its read() gave "
                        f"{type(data).__name__}")
    name = getattr(audio, "name", None)
    return data, (os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else "<file object>")


def _decode_memory(data, name):
    """Encoded audio in memory -> 16 kHz mono float32 (whisper_audio_decode_memory)."""
    if isinstance(data, bytearray):             # its own buffer, no copy
        buf = (ctypes.c_char * len(data)).from_buffer(data) if data else b""
    else:
        buf = data if isinstance(data, bytes) else bytes(memoryview(data))
    pcm, n = ctypes.c_void_p(), ctypes.c_size_t()
    if not _lib.whisper_audio_decode_memory(buf, len(data) if isinstance(data, bytearray) else len(buf),
                                            ctypes.byref(pcm), ctypes.byref(n), None):
        msg = _lib.whisper_audio_last_error().decode(errors="replace")
        if name != "<memory>" and msg.startswith("<memory>"):     # the file object's name instead
            msg = name + msg[len("<memory>"):]
        raise WhisperAudioError(msg)
    _warn_decoded(name)
    return _malloced_array(pcm.value, n.value)


def _warn_decoded(name=None):
    """The library's warning for the decode just done (an input cut short: decoded all the same,
    as main says), as a Python warning."""
    w = _lib.whisper_audio_decode_warning()
    if w:
        msg = w.decode(errors="replace")
        if name and name != "<memory>" and msg.startswith("<memory>"):
            msg = name + msg[len("<memory>"):]
        # attributed to the caller's first line outside this package (load_audio, encode, ...),
        # as a warning about its input, whatever path it took here
        frame, level = sys._getframe(0), 1
        while frame is not None and frame.f_code.co_filename == __file__:
            frame, level = frame.f_back, level + 1
        warnings.warn(msg, WhisperAudioWarning, stacklevel=level)


def _decode_file(path):
    pcm, n = ctypes.c_void_p(), ctypes.c_size_t()
    _check(_lib.whisper_audio_decode_file(_c_path(path), ctypes.byref(pcm), ctypes.byref(n), None))
    _warn_decoded()
    return _malloced_array(pcm.value, n.value)


def load_audio(path: Union[str, os.PathLike, bytes, bytearray, memoryview, BinaryIO],
               sr: int = SAMPLE_RATE) -> np.ndarray:
    """Decodes audio (WAV, FLAC, MP3, Ogg Vorbis, Opus; found by content) to float32 mono.

    path: a file's path (str or os.PathLike), or the encoded audio itself: bytes (bytearray,
    memoryview) or a binary file object (anything with .read(), read to its end). Bytes are
    audio, not a path (they used to be taken as a path: pass os.fsdecode(b) for one).
    The library decodes to 16 kHz (channels averaged, resampled when needed); another sr is
    resampled from that, so it holds nothing above 8 kHz.
    """
    sr = _check_rate(sr, "sr")
    encoded = None if _is_path(path) else _encoded(path)
    if encoded is None and not _is_path(path):
        raise TypeError(f"load_audio takes a path (str or os.PathLike), bytes or a binary file object, "
                        f"got {type(path).__name__}")
    audio = _decode_file(path) if encoded is None else _decode_memory(*encoded)
    return _resample(audio, SAMPLE_RATE, sr)


def _float32_array(a, what, ndims):
    """a itself when it is a C-contiguous float32 array of one of the ndims; else a clear error."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, a file path, encoded audio (bytes, a binary file object) "
                        f"or a list of them, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{what} must be float32 (native byte order), got {a.dtype}: convert with a.astype(np.float32)")
    if a.ndim not in ndims:
        raise ValueError(f"{what} must have {' or '.join(map(str, ndims))} dimensions, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous (a strided view?): pass np.ascontiguousarray(a)")
    return a


# the sample types an audio array may have: float32 goes in without a copy; the others are
# converted, int16 scaled by 1/32768 as the WAV decoder scales 16-bit PCM
_AUDIO_DTYPES = (np.float32, np.float64, np.float16, np.int16)


def _audio_array(a, channels=None):
    """One input's float32 mono samples from a 1-D array, or from a multichannel one with channels
    (interleaved 1-D, [n_samples, channels] as soundfile reads, or [channels, n_samples] as
    librosa's mono=False), down-mixed as main does: the channels' sum in float64, times 1/channels."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"audio must be a numpy array, a file path, encoded audio (bytes, a binary file object) "
                        f"or a list of them, got {type(a).__name__}")
    if a.dtype not in _AUDIO_DTYPES:
        raise TypeError(f"audio must be float32, float64, float16 or int16 samples, got {a.dtype}")
    if channels is None:
        if a.ndim != 1:
            raise ValueError(f"audio must have 1 dimension, got shape {a.shape} (a multichannel array: give channels=)")
        if a.dtype == np.float32:
            return _float32_array(a, "audio", (1,))
        return (a.astype(np.float64) / 32768.0).astype(np.float32) if a.dtype == np.int16 else a.astype(np.float32)
    if isinstance(channels, bool) or not isinstance(channels, (int, np.integer)) or not 1 <= channels <= 65535:
        raise ValueError(f"channels must be an int in [1, 65535], got {channels!r}")
    if a.ndim == 1:
        if a.size % channels:
            raise ValueError(f"interleaved audio of {a.size} samples is not a whole number of {channels}-channel frames")
        frames = a.reshape(-1, channels)
    elif a.ndim == 2 and a.shape[1] == channels:
        frames = a
    elif a.ndim == 2 and a.shape[0] == channels:
        frames = a.T
    else:
        raise ValueError(f"audio of shape {a.shape} has no axis of {channels} channels")
    x = frames.astype(np.float64)
    if a.dtype == np.int16:
        x /= 32768.0
    total = np.zeros(x.shape[0], np.float64)
    for c in range(channels):                # channel by channel, as the decoder sums them
        total += x[:, c]
    return (total * (1.0 / channels)).astype(np.float32)


class EncoderOutput(NamedTuple):
    """What encode and encode_mel give with output_hidden_states=True, as transformers'
    BaseModelOutput of WhisperEncoder(..., output_hidden_states=True):

    hidden_states: n_layer + 1 arrays of the output's shape, from one forward: [0] the input of
      the first layer (conv stem + positional embedding), [i] the output of layer i - 1, [-1]
      the last layer through the final LayerNorm (transformers puts last_hidden_state there,
      not the last layer's own output: that is encode(layer=n_layer - 1)).
    last_hidden_state: hidden_states[-1], the encoder's output (encode's default).
    """
    last_hidden_state: np.ndarray
    hidden_states: Tuple[np.ndarray, ...]


def _hparams_dict(hp):
    out = {name: getattr(hp, name) for name, _ in _Hparams._fields_}
    out["weight_type"] = WeightType(_lib.whisper_audio_weight_type_name(hp.weight_type).decode())
    out["projector"] = Projector(_lib.whisper_audio_projector_name(hp.projector).decode())
    return out


def model_hparams(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """A model file's hyperparameters (Model.hparams), read and checked by the library's loader
    without making an encoder: a fraction of a second where Model on the CPU takes seconds for
    a large model (its weights prepared for the CPU backend)."""
    model = _lib.whisper_audio_model_load(_c_path(path))
    _check(model)
    try:
        return _hparams_dict(_lib.whisper_audio_model_hparams(model).contents)
    finally:
        _lib.whisper_audio_model_free(model)


class _Encoder:
    """An encoder of a Model's pool, with the pipeline over it kept for the next encode call
    with the same options (a pipeline holds its encoder busy: freed before the encoder's own
    calls). Used by one call at a time."""

    def __init__(self, ptr, params):
        self.ptr = ptr
        self.params = params                # the _EncoderParams it was made with
        self.projector = params.projector   # its tokens' rows: through the projector, or the tower's
        self.pipe = None                    # whisper_audio_pipeline *, or None
        self.pipe_key = None                # its (pool, no_pad, f16)
        self.pipe_batch = 0                 # its batch (whisper_audio_pipeline_batch)
        self.inputs = 0                     # inputs it has ended: rows' input numbers go on across calls
        self.handler = None                 # this call's handler(rows) for on_rows
        self.error = None                   # what handler raised (the pipeline stopped there)
        self._on_rows = _ROWS_FN(self._rows)    # the C callback: lives as long as this object

    def _rows(self, rows, _user):           # on the thread inside push, end_input or finish
        try:
            self.handler(rows.contents)
            return True
        except BaseException as e:          # never through C: raised again by check()
            self.error = e
            return False

    def check(self, ok, what=None):
        """Raises what a pipeline call failed with: the handler's exception, or the library's error."""
        if ok:
            return
        if self.error is not None:
            e, self.error = self.error, None
            raise e
        msg = _lib.whisper_audio_last_error().decode(errors="replace")
        raise WhisperAudioError(f"{what}: {msg}" if what else msg)

    @staticmethod
    def pipeline_params(key, n_windows=0):
        pool, no_pad, f16 = key
        params = _lib.whisper_audio_pipeline_default_params()
        params.pool, params.no_pad, params.f16, params.n_windows = int(pool), no_pad, f16, n_windows
        return params

    def pipeline(self, key, n_windows=0):
        """The pipeline over this encoder for key (pool, no_pad, f16) and n_windows known ahead
        (0: not known): the kept one where the library's batch for them is its batch, or a new one."""
        batch = _lib.whisper_audio_batch_for_windows(self.params.max_batch, n_windows)
        if self.pipe is not None and self.pipe_key == key and self.pipe_batch == batch:
            return self.pipe
        self.free_pipeline()
        params = self.pipeline_params(key, n_windows)
        params.on_rows = self._on_rows
        pipe = _lib.whisper_audio_pipeline_init((ctypes.c_void_p * 1)(self.ptr), 1, params)
        _check(pipe)
        self.pipe, self.pipe_key, self.inputs = pipe, key, 0
        self.pipe_batch = _lib.whisper_audio_pipeline_batch(pipe)
        return pipe

    def free_pipeline(self):
        if self.pipe is not None:
            _lib.whisper_audio_pipeline_free(self.pipe)
            self.pipe = self.pipe_key = None

    def free(self):
        self.free_pipeline()
        _lib.whisper_audio_encoder_free(self.ptr)


class _Collector:
    """One input's rows [n, d] as the pipeline hands them over, copied out of its buffer:
    into an array of the expected rows (rows known ahead), else one copy per window."""

    def __init__(self, d, dtype, rows=None):
        self.d, self.dtype, self.n, self.parts = d, dtype, 0, []
        self.out = None if rows is None else np.empty((rows, d), dtype)
        self.windows = []                   # per window: (window, samples, audio_positions, rows)

    def add(self, r):
        k = r.n_rows
        self.windows.append((r.window, r.samples, r.audio_positions, k))
        dtype = np.float16 if r.f16 else np.float32
        size = k * r.n_state * np.dtype(dtype).itemsize
        src = np.frombuffer((ctypes.c_char * size).from_address(r.data), dtype).reshape(k, r.n_state)
        if self.out is not None:
            self.out[self.n:self.n + k] = src
        else:
            self.parts.append(src.copy())
        self.n += k

    def result(self):
        if self.out is not None:
            assert self.n == self.out.shape[0], (self.n, self.out.shape)
            return self.out
        if len(self.parts) == 1:
            return self.parts[0]
        return np.concatenate(self.parts) if self.parts else np.empty((0, self.d), self.dtype)

    def window_info(self):
        """The windows as the pipeline described them: a dict of int64 arrays, one entry a window."""
        cols = np.array(self.windows, np.int64).reshape(-1, 4)
        return {name: cols[:, i].copy() for i, name in enumerate(("window", "samples", "audio_positions", "rows"))}


class Model:
    """A Whisper encoder model: our GGUF, whisper.cpp's ggml-*.bin, a CTranslate2 /
    faster-whisper directory, or llama.cpp's audio mmproj GGUF (an audio LLM's tower),
    recognised by content.

    path: the model file or directory (str or os.PathLike).
    device: "auto" (CUDA when a GPU is present), "cpu" or "cuda" (or a Device).
    dtype: the CUDA compute type, "f16", "bf16" or "fp8" (or a DType; the CPU computes in f32).
    n_threads: CPU threads (0: the library's default, as main). batch: windows per encoder run
    (main's -b, at most 256). gpu_device: the GPU's index.

    Attributes: hparams (the file's hyperparameters: n_mels, n_ctx, n_state, n_head, n_layer,
    n_ff, eps, weight_type (a WeightType), projector (a Projector), n_llm, n_proj_ff,
    stack_factor, proj_eps), n_mels, n_ctx, n_state, n_layer, projector (a Projector, None for
    a Whisper encoder alone), token_dim (an audio LLM's token width, else None), backend (the
    library's name of the device it runs on), n_threads, path. A Model is a context manager
    (close() on exit).

    Threads: calls may come from several threads at once. Each running encode call holds an
    encoder of its own (the C API runs one call at a time per encoder), made when needed and
    kept for later calls, so memory grows with the number of calls that overlap. An encoder
    keeps the pipeline of its last encode call (its batch buffers: three batches of audio and
    rows) for the next call with the same options.
    """

    def __init__(self, path: Union[str, os.PathLike], device: Union[str, Device] = "auto",
                 dtype: Union[str, DType] = "f16", *, n_threads: int = 0, batch: int = 8, gpu_device: int = 0) -> None:
        device = Device._of(device, "device")
        dtype = DType._of(dtype, "dtype")
        for name, v, lo, hi in (("n_threads", n_threads, 0, 4096), ("batch", batch, 1, _MAX_BATCH),
                                ("gpu_device", gpu_device, 0, 4096)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {v!r}")
        self._model = None                  # first, so that close() works on a half-made Model
        self._lock = threading.Lock()
        self._idle = {}                     # (output_layer, final_ln) -> _Encoders not in use
        self._calls = 0                     # calls running now
        self._closed = False
        self.path = os.fspath(path)
        model = _lib.whisper_audio_model_load(_c_path(path))
        _check(model)
        self._model = model
        hp = _lib.whisper_audio_model_hparams(model).contents
        self.hparams = _hparams_dict(hp)
        self.n_mels, self.n_ctx, self.n_state, self.n_layer = hp.n_mels, hp.n_ctx, hp.n_state, hp.n_layer
        # an audio LLM's tower: its projector ("qwen2a", "voxtral", "ultravox", "musicflamingo"; None for a
        # Whisper encoder) and a token's width (its LLM's, n_llm; None for a Whisper encoder)
        self.projector = None if self.hparams["projector"] is Projector.NONE else self.hparams["projector"]
        self.token_dim = None if self.projector is None else hp.n_llm
        self._params = _lib.whisper_audio_encoder_default_params()
        self._params.device, self._params.dtype = int(device), int(dtype)
        if n_threads > 0:
            self._params.n_threads = n_threads
        self._params.gpu_device, self._params.max_batch = gpu_device, batch
        self.n_threads = self._params.n_threads
        try:                                # the default encoder now: a device that cannot work fails here
            with self._encoder(None, True) as enc:
                self.backend = _lib.whisper_audio_encoder_backend(enc.ptr).decode()
        except BaseException:
            self.close()
            raise

    def __repr__(self):
        return f"whisper_audio.Model({self.path!r}, backend={getattr(self, 'backend', None)!r})"

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        """Frees the model and its encoders (after the calls running now end); later calls raise."""
        with self._lock:
            self._closed = True
            if self._calls == 0:
                self._free()

    def _free(self):                        # with the lock held, no call running
        for encoders in self._idle.values():
            for enc in encoders:
                enc.free()
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
    def _encoder(self, layer, final_ln, pipe_key=None, projector=True):
        """An _Encoder for these settings that no other call is using. pipe_key: for a pipeline
        of these options (one that has it kept is taken first); None: for the encoder's own
        calls (its pipeline freed)."""
        key = (-1 if layer is None else int(layer), bool(final_ln) and layer is None, bool(projector))
        with self._use() as model:
            with self._lock:
                idle = self._idle.setdefault(key, [])
                i = next((i for i in reversed(range(len(idle))) if idle[i].pipe_key == pipe_key), len(idle) - 1)
                enc = idle.pop(i) if idle else None
            if enc is None:
                params = _EncoderParams.from_buffer_copy(self._params)
                params.output_layer, params.final_ln, params.projector = key
                ptr = _lib.whisper_audio_encoder_init(model, params)
                _check(ptr)
                enc = _Encoder(ptr, params)
            if pipe_key is None:
                enc.free_pipeline()
            ok = False
            try:
                yield enc
                ok = True
            finally:
                if not ok:                  # a pipeline stopped half-way is not kept
                    enc.free_pipeline()
                with self._lock:
                    self._idle.setdefault(key, []).append(enc)   # freed by _free when the model closes

    # -- inputs and options ------------------------------------------------------------

    def _check_layer(self, layer):
        if layer is None:
            return
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.n_layer:
            raise ValueError(f"layer {layer!r}: the model has layers 0 to {self.n_layer - 1} (None: the last)")

    @staticmethod
    def _input(audio, sampling_rate, stream=True, channels=None):
        """(a float32 16 kHz array, or a path's C string with stream, a name for messages) of one input."""
        if _is_path(audio):
            if sampling_rate is not None:
                raise ValueError(f"sampling_rate is the rate of an array: a file ({os.fsdecode(audio)!r}) has its "
                                 f"own, read from it")
            name = os.fsdecode(audio)
            if stream:
                return _c_path(audio), name
            pcm = _decode_file(audio)
        else:
            encoded = _encoded(audio)
            if encoded is not None:
                if sampling_rate is not None:
                    raise ValueError("sampling_rate is the rate of an array: encoded audio (bytes, a file object) "
                                     "has its own, read from it")
                pcm, name = _decode_memory(*encoded), encoded[1]
            else:
                pcm, name = _audio_array(audio, channels), "audio array"
                if sampling_rate is not None:
                    pcm = _resample(pcm, _check_rate(sampling_rate, "sampling_rate"), SAMPLE_RATE)
        if pcm.size == 0:
            raise ValueError(f"{name}: no audio samples")
        return pcm, name

    @staticmethod
    def _check_finite(out, name):
        # main refuses non-finite output too (f16 rows: after the library's conversion)
        if not np.isfinite(out).all():
            raise WhisperAudioError(f"{name}: the encoder output holds non-finite values")
        return out

    @staticmethod
    def _check_outtype(outtype):
        if outtype not in ("f32", "f16"):
            raise ValueError(f"outtype must be 'f32' or 'f16', got {outtype!r}")

    def _log_mel_windows(self, pcm):
        """The library's log-mel of each 30 s window of pcm: [n_windows, n_mels, 3000]."""
        n_win = _lib.whisper_audio_n_windows(pcm.size)
        mel = np.empty((n_win, self.n_mels, _N_FRAMES), np.float32)
        with self._use() as model:
            _check(_lib.whisper_audio_log_mel_windows(model, pcm.ctypes.data, pcm.size, n_win, mel.ctypes.data,
                                                      self.n_threads))
        return mel

    def _hidden_states(self, windows):
        """Every hidden state of mel windows [n, n_mels, n_frames] from one forward:
        [n_layer + 1, n, n_frames / 2, d] (whisper_audio_encode_mel_hidden_states)."""
        n, n_frames = windows.shape[0], windows.shape[-1]
        out = np.empty((self.n_layer + 1, n, n_frames // 2, self.n_state), np.float32)
        with self._encoder(None, True) as enc:
            _check(_lib.whisper_audio_encode_mel_hidden_states(enc.ptr, windows.ctypes.data, n, n_frames,
                                                               out.ctypes.data))
        return out

    # -- the API ---------------------------------------------------------------------

    def log_mel(self, audio: Union[Audio, Sequence[Audio]], *,
                sampling_rate: Optional[int] = None, channels: Optional[int] = None) -> Union[np.ndarray, List[np.ndarray]]:
        """Log-mel of each 30 s window, as WhisperFeatureExtractor: [n_windows, n_mels, 3000]
        (a list of them for a list of inputs or a 2-D array). audio, sampling_rate and channels
        as for encode."""
        if _is_batch(audio, channels):
            return [self.log_mel(a, sampling_rate=sampling_rate, channels=channels) for a in audio]
        pcm, _ = self._input(audio, sampling_rate, stream=False, channels=channels)
        return self._log_mel_windows(pcm)

    def encode_mel(self, features: np.ndarray, *, layer: Optional[int] = None, final_ln: bool = True,
                   outtype: str = "f32", output_hidden_states: bool = False) -> Union[np.ndarray, EncoderOutput]:
        """Encodes log-mel windows [n_windows, n_mels, n_frames] (float32; n_frames even, 2 to
        3000; fewer than 3000: unpadded windows) to [n_windows, n_frames / 2, d_model]; a 2-D
        [n_mels, n_frames] gives [n_frames / 2, d_model].

        layer=N: the hidden state after layer N (0-based); final_ln=False: the last layer
        before the final LayerNorm; outtype "f32" or "f16". output_hidden_states=True: an
        EncoderOutput of every layer's hidden state from one forward (not with layer or
        final_ln=False), each of the output's shape.
        """
        mel = _float32_array(features, "features", (2, 3))
        final_ln = _check_flag(final_ln, "final_ln")
        output_hidden_states = _check_flag(output_hidden_states, "output_hidden_states")
        self._check_layer(layer)
        self._check_outtype(outtype)
        if output_hidden_states and (layer is not None or not final_ln):
            raise ValueError("output_hidden_states gives every layer, the last through the final LayerNorm; "
                             "layer and final_ln=False one state: choose one")
        if mel.shape[-2] != self.n_mels or mel.size == 0:
            raise ValueError(f"features of shape {mel.shape}: the model takes [n_windows, {self.n_mels}, n_frames]")
        windows = mel.reshape((-1,) + mel.shape[-2:])
        n_frames = mel.shape[-1]
        if output_hidden_states:
            states = self._hidden_states(windows)
            states = states.reshape((states.shape[0],) + mel.shape[:-2] + states.shape[2:])
            return self._states_output(self._check_finite(states, "features"), outtype)
        out = np.empty((windows.shape[0], n_frames // 2, self.n_state), np.float32)
        with self._encoder(layer, final_ln) as enc:
            _check(_lib.whisper_audio_encode_mel_frames(enc.ptr, windows.ctypes.data, windows.shape[0], n_frames,
                                                        out.ctypes.data))
        out = self._check_finite(out.reshape(mel.shape[:-2] + out.shape[1:]), "features")
        return out.astype(np.float16) if outtype == "f16" else out     # main's conversion (round to nearest even)

    @staticmethod
    def _states_output(states, outtype):
        if outtype == "f16":
            states = states.astype(np.float16)                          # main's conversion (round to nearest even)
        hidden = tuple(states)
        return EncoderOutput(hidden[-1], hidden)

    def n_tokens(self, n_samples: int, projector: bool = True) -> int:
        """The rows an input of n_samples 16 kHz samples gives an audio LLM's tower (the library's rule)."""
        if self.projector is None:
            raise ValueError(f"{self.path}: a Whisper encoder without an audio-LLM projector has no tokens")
        n = operator.index(n_samples)
        if n < 0:
            raise ValueError(f"n_samples is {n}: a count of samples is not negative")
        with self._use() as model:
            return _lib.whisper_audio_n_tokens(model, n, _check_flag(projector, "projector"))

    def encode(self, audio: Union[Audio, Sequence[Audio]], *, sampling_rate: Optional[int] = None,
               layer: Optional[int] = None, final_ln: bool = True, pool: Union[None, str, Pool] = None,
               no_pad: bool = False, outtype: str = "f32", projector: bool = True,
               output_hidden_states: bool = False, return_windows: bool = False,
               channels: Optional[int] = None) -> Union[np.ndarray, EncoderOutput, tuple, list]:
        """Encoder embeddings of audio, or a list of inputs (a list of results). model(audio, ...)
        is model.encode(audio, ...).

        audio: a mono array of samples, a path (str or os.PathLike), encoded audio as bytes
        (bytearray, memoryview) or a binary file object (anything with .read(), read to its
        end; WAV, FLAC, MP3, Ogg Vorbis or Opus, found by content), or a list of them. A 2-D
        array is a batch of rows, one input each, as transformers' feature extractor takes it
        (a list back). Samples may be float32 (taken without a copy), float64, float16 or int16;
        int16 is scaled by 1/32768, the rule main applies to 16-bit PCM (transformers does not
        scale: give it int16 / 32768 to compare). channels=N: the array is one input of N
        channels (interleaved, [n_samples, N] as soundfile reads it, or [N, n_samples]),
        down-mixed as main down-mixes a file (the channels' mean); a shape alone is never read
        as channels.
        sampling_rate: the arrays' sample rate in Hz (a whole number, 1000 to 1000000: 16000.0
        is 16000); other than 16000 they are resampled to 16 kHz by the library's resampler. An
        array given without it is taken as 16 kHz. Files and encoded audio carry their own
        rate: sampling_rate with one of them is a ValueError. The flags (final_ln, no_pad,
        projector, output_hidden_states, return_windows) are bools: anything else is a TypeError.

        As main's options: each input is cut into 30 s windows, the last zero-padded, and gives
        [n_windows, 1500, d_model]; pool="mean": [n_windows, d_model], the mean over the
        positions that hold audio; no_pad=True: the last window (or a clip under 30 s)
        unpadded, [n_positions, d_model]; layer=N: the hidden state after layer N;
        final_ln=False: the last layer before the final LayerNorm; outtype "f32" or "f16".
        A list gives a list, its windows encoded in shared batches (main's inputs); a file is
        decoded a block at a time. Runs the library's pipeline as main does: main's results.

        output_hidden_states=True: an EncoderOutput (a list of them for a list), as
        transformers' WhisperEncoder(output_hidden_states=True): hidden_states, the n_layer + 1
        states of one forward (the input of the first layer, each layer's output, the last
        through the final LayerNorm), each shaped as encode's output with these pool, no_pad
        and outtype; last_hidden_state is hidden_states[-1]. Not with layer, final_ln=False or
        projector=False. Each input is decoded whole and its log-mel made on the CPU; on the CPU
        hidden_states[i] equals encode(layer=i - 1) bit for bit (hidden_states[0]: the input of
        layer 0) and hidden_states[-1] equals encode().

        An audio LLM's model (Qwen2-Audio, Voxtral, Ultravox, Audio Flamingo 3, GLM-ASR: self.projector) gives, as main,
        the tokens it feeds its LLM, [n_tokens, token_dim], by its processor's rules;
        projector=False the tower's own rows [n, d_model]; layer, final_ln=False, pool, no_pad
        or output_hidden_states the Whisper encoder's outputs instead (the library decides which).

        return_windows=True: each input gives (rows, windows) instead, windows a dict of int64
        arrays with one entry per window (a tower's chunk), as the pipeline reports it:
        "window" (0-based), "samples" (of audio in it; the rest is padding), "audio_positions"
        (the encoder positions that hold audio) and "rows" (its rows: 1500, 1 pooled, a no_pad
        window's positions, a chunk's tokens); the rows are the windows' one after another. Not with
        output_hidden_states.
        """
        return_windows = _check_flag(return_windows, "return_windows")
        key = self._options(layer, final_ln, pool, no_pad, outtype, projector, output_hidden_states)
        if output_hidden_states and return_windows:
            raise ValueError("return_windows describes the pipeline's windows; output_hidden_states encodes apart: choose one")
        if sampling_rate is not None:
            _check_rate(sampling_rate, "sampling_rate")
        single = not _is_batch(audio, channels)
        items = [audio] if single else list(audio)
        if output_hidden_states:
            outs = [self._encode_states(*self._input(a, sampling_rate, stream=False, channels=channels), key[0], key[1], outtype)
                    for a in items]
            return outs[0] if single else outs
        inputs = [self._input(a, sampling_rate, channels=channels) for a in items]
        with self._encoder(layer, final_ln, key, projector) as enc:
            outs = self._run_pipeline(enc, inputs, key)
        outs = [(self._check_finite(out, name), windows) for (out, windows), (_, name) in zip(outs, inputs)]
        if not return_windows:
            outs = [out for out, _ in outs]
        return outs[0] if single else outs

    def save_gguf(self, path: Union[str, os.PathLike]) -> None:
        """Writes the model as our GGUF (main --save-gguf): its matrices as loaded, so the file
        gives the same output, bit for bit, whatever format it was loaded from."""
        with self._use() as model:
            _check(_lib.whisper_audio_model_save_gguf(model, _c_path(path)))

    # model(audio, ...) as transformers' modules are called: encode
    def __call__(self, audio: Union[Audio, Sequence[Audio]], **options):
        return self.encode(audio, **options)

    def row_width(self, *, layer: Optional[int] = None, final_ln: bool = True, pool: Union[None, str, Pool] = None,
                  no_pad: bool = False, outtype: str = "f32", projector: bool = True) -> int:
        """The width of the rows encode gives with these options, by the library's rule
        (whisper_audio_pipeline_row_width): d_model, or an audio LLM's token_dim; no audio needed.
        The pipeline it asks is kept for the next encode call with the same options."""
        key = self._options(layer, final_ln, pool, no_pad, outtype, projector)
        with self._encoder(layer, final_ln, key, projector) as enc:
            return _lib.whisper_audio_pipeline_row_width(enc.pipeline(key))

    def _options(self, layer, final_ln, pool, no_pad, outtype, projector, output_hidden_states=False):
        """Checks encode's options; the pipeline's key (pool, no_pad, f16) for them."""
        final_ln, no_pad = _check_flag(final_ln, "final_ln"), _check_flag(no_pad, "no_pad")
        projector = _check_flag(projector, "projector")
        output_hidden_states = _check_flag(output_hidden_states, "output_hidden_states")
        self._check_layer(layer)
        pool = Pool.NONE if pool is None else Pool._of(pool, "pool")
        if not projector and self.projector is None:
            raise ValueError("projector=False: the model is a Whisper encoder without an audio-LLM projector")
        if not projector and (layer is not None or not final_ln or pool is Pool.MEAN or no_pad or output_hidden_states):
            raise ValueError("projector=False gives the audio tower's output; layer, final_ln=False, pool, no_pad "
                             "and output_hidden_states the Whisper encoder's: choose one")
        if output_hidden_states and (layer is not None or not final_ln):
            raise ValueError("output_hidden_states gives every layer, the last through the final LayerNorm; "
                             "layer and final_ln=False one state: choose one")
        self._check_outtype(outtype)
        return (pool, bool(no_pad), outtype == "f16")

    def _encode_states(self, pcm, name, pool, no_pad, outtype):
        """Every hidden state of one input, by the library's rules for windows, no_pad and
        pooling (whisper_audio_n_windows, _n_positions, _pool_mean), as the pipeline makes encode's rows."""
        mel = self._log_mel_windows(pcm)
        n_win = mel.shape[0]
        # the windows' samples (the rest of each 480000 is padding) and, with no_pad, the last one's
        # frames: 2 per position that holds audio
        samples = [min(_N_SAMPLES, pcm.size - w * _N_SAMPLES) for w in range(n_win)]
        last_frames = 2 * _lib.whisper_audio_n_positions(samples[-1]) if no_pad else _N_FRAMES
        if last_frames == _N_FRAMES:
            parts = [self._hidden_states(mel)]
        else:
            last = np.ascontiguousarray(mel[-1:, :, :last_frames])
            parts = ([self._hidden_states(mel[:-1])] if n_win > 1 else []) + [self._hidden_states(last)]
        if pool is Pool.MEAN:                   # [n_layer + 1, n_win, d]: each window's mean over its audio
            states = np.empty((self.n_layer + 1, n_win, self.n_state), np.float32)
            w = 0
            for part in parts:
                for i in range(part.shape[1]):
                    for s in range(part.shape[0]):
                        emb = np.ascontiguousarray(part[s, i])
                        _check(_lib.whisper_audio_pool_mean(emb.ctypes.data, emb.shape[0], self.n_state, samples[w],
                                                            states[s, w].ctypes.data))
                    w += 1
        elif no_pad:                            # [n_layer + 1, n_positions, d]
            states = np.concatenate([p.reshape(p.shape[0], -1, self.n_state) for p in parts], axis=1)
        else:                                   # [n_layer + 1, n_win, 1500, d]
            states = parts[0]
        return self._states_output(self._check_finite(states, name), outtype)

    def _run_pipeline(self, enc, inputs, key):
        """The inputs through enc's pipeline, as main: the windows counted ahead (arrays by their
        size, files by their headers) so that the library evens the batches out as main's, each
        input's samples pushed (a file decoded a block at a time), the input ended, then finish;
        (rows, windows) of each input."""
        pool, no_pad, f16 = key
        projector = enc.projector
        # the files decoded ahead by the library's reader (a worker per core), as main's
        paths = [src for src, _ in inputs if not isinstance(src, np.ndarray)]
        reader = None
        try:
            with self._use() as model:
                tokens = _lib.whisper_audio_rows_are_tokens(model, enc.params, enc.pipeline_params(key))
                used = _lib.whisper_audio_samples_used(model, tokens)
                if paths:
                    rp = _lib.whisper_audio_reader_default_params()
                    rp.n_workers = self.n_threads
                    rp.max_samples = 0 if used >= 2 ** 63 else used
                    reader = _lib.whisper_audio_reader_init((ctypes.c_char_p * len(paths))(*paths), len(paths), rp)
                    _check(reader)
                pipe = enc.pipeline(key, self._windows_ahead(inputs, reader, used))
                assert _lib.whisper_audio_pipeline_tokens(pipe) == tokens
                d, dtype = _lib.whisper_audio_pipeline_row_width(pipe), (np.float16 if f16 else np.float32)
                collectors = []
                for src, _ in inputs:                # rows known ahead for an array: copied into place
                    rows = None
                    if isinstance(src, np.ndarray):
                        n = src.size
                        rows = (_lib.whisper_audio_n_tokens(model, n, projector) if tokens else
                                _lib.whisper_audio_n_windows(n) if pool is Pool.MEAN else
                                _lib.whisper_audio_n_positions_total(n) if no_pad else _lib.whisper_audio_n_windows(n) * self.n_ctx)
                    collectors.append(_Collector(d, dtype, rows))
            first = enc.inputs

            def on_rows(r):
                collectors[r.input - first].add(r)

            enc.handler = on_rows
            block, k = None, 0
            for src, name in inputs:
                if isinstance(src, np.ndarray):
                    enc.check(_lib.whisper_audio_pipeline_push(pipe, src.ctypes.data, min(src.size, used)), name)
                else:
                    if block is None:
                        block = np.empty(_N_SAMPLES, np.float32)
                    if self._push_file(enc, pipe, reader, k, name, block) == 0:
                        raise ValueError(f"{name}: no audio samples")
                    k += 1
                enc.check(_lib.whisper_audio_pipeline_end_input(pipe), name)
                enc.inputs += 1
            enc.check(_lib.whisper_audio_pipeline_finish(pipe))
        finally:
            enc.handler = None
            if reader:
                _lib.whisper_audio_reader_free(reader)
        outs = [c.result() for c in collectors]
        if pool is Pool.NONE and not no_pad and not tokens:   # a window of n_ctx rows each
            outs = [out.reshape(-1, self.n_ctx, d) for out in outs]
        return [(out, c.window_info()) for out, c in zip(outs, collectors)]

    @staticmethod
    def _windows_ahead(inputs, reader, used):
        """The 30 s windows the inputs will give, as main counts them for the pipeline's
        n_windows: each input's 16 kHz samples (an array's size, a file's from its header's
        frames and rate) up to what the model uses; 0 (not known) where a file's header gives
        no length or it did not open (its error comes when it is read)."""
        total, k = 0, 0
        for src, _ in inputs:
            if isinstance(src, np.ndarray):
                n = src.size
            else:
                info = _Info()
                ok = _lib.whisper_audio_reader_info(reader, k, ctypes.byref(info))
                k += 1
                if not ok or info.frames < 0 or info.sample_rate <= 0:
                    return 0
                n = int(math.floor(info.frames * SAMPLE_RATE / info.sample_rate + 0.5))   # main's llround
            total += _lib.whisper_audio_n_windows(min(n, used))
        return max(total, 1)

    @staticmethod
    def _push_file(enc, pipe, reader, k, name, block):
        """Input k of the reader (decoded as far as the model uses it) into the pipeline a block
        at a time: the samples pushed."""
        total = 0
        while True:
            got = _lib.whisper_audio_reader_read(reader, k, block.ctypes.data, block.size)
            _check(got >= 0)
            if got == 0:
                return total
            enc.check(_lib.whisper_audio_pipeline_push(pipe, block.ctypes.data, got), name)
            total += got
