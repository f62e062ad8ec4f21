# The lists that the Makefile and CMakeLists.txt share, written once: the Makefile includes this
# file and CMake reads its `NAME = words` lines (so: plain words, no make functions, no comment
# after a value). A format, test model or GPU target added here reaches both builds.

# Compressed audio input, each format through its reference decoder when its header is found
# (under /usr/include, or a multiarch folder below it): the build then defines
# WHISPER_AUDIO_<FORMAT> and links the libraries. _INCLUDE: a folder below the header's include
# root that goes on the include path too. _DEB: the Debian package that `make deps` installs.
AUDIO_FORMATS = OGG FLAC MP3 OPUS
OGG_HEADER = vorbis/vorbisfile.h
OGG_LIBS = vorbisfile vorbis ogg
OGG_DEB = libvorbis-dev
FLAC_HEADER = FLAC/stream_decoder.h
FLAC_LIBS = FLAC
FLAC_DEB = libflac-dev
MP3_HEADER = mpg123.h
MP3_LIBS = mpg123
MP3_DEB = libmpg123-dev
OPUS_HEADER = opus/opusfile.h
OPUS_INCLUDE = opus
OPUS_LIBS = opusfile
OPUS_DEB = libopusfile-dev

# The library's files, as another project drops them into its tree (README, "Embedding"; make
# test-embed builds from copies of these alone): EMBED_SOURCES, the model, takes PCM and a GGUF;
# EMBED_FILE_SOURCES, the optional second set, adds audio files and foreign model files (compiled
# with -DWHISPER_AUDIO_INPUT -DWHISPER_AUDIO_FORMATS); EMBED_CUDA_SOURCES adds the GPU (vt-cuda.cu
# through nvcc, the kernel headers it includes beside it, each of which compiles on its own: make
# check-cuda-headers).
EMBED_SOURCES = vt.h vt-cpu-kernels.h vt-cpu.h vt.cpp whisper-audio.h whisper-audio-arch.h whisper-audio-impl.h whisper-audio-towers.h whisper-audio.cpp
EMBED_FILE_SOURCES = whisper-audio-input.cpp whisper-audio-formats.cpp
EMBED_FILE_DEFINES = -DWHISPER_AUDIO_INPUT -DWHISPER_AUDIO_FORMATS
EMBED_CUDA_SOURCES = vt-cuda.cu vt-cuda-common.cuh vt-cuda-ptx.cuh vt-cuda-gemm.cuh vt-cuda-attention.cuh vt-cuda-attention-wgmma.cuh vt-cuda-conv.cuh vt-cuda-elementwise.cuh vt-cuda-norm.cuh vt-cuda-projector.cuh vt-cuda-mel.cuh

# CUDA: the GPU targets (sm_90a: Hopper with wgmma; compute_80 PTX lets other recent GPUs
# JIT-compile). make CUDA_ARCH=... and cmake -DWHISPER_AUDIO_CUDA_ARCH=... choose others.
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80

# The shared library exports these symbols alone (the version script's global: patterns).
EXPORTS = whisper_audio_*

# Test models, converted by our converter into build/: micro-<MELS>-<TYPE>.gguf from
# tests/data/micro-<MELS>, and tower-<TOWER>-f32.gguf from tests/data/towers/<TOWER>.
TEST_MICRO_MELS = 80 128
TEST_MICRO_TYPES = f32 f16 bf16
TEST_TOWERS = qwen2a voxtral ultravox af3 glmasr qwen25o minicpmo kimiaudio qwen3a stepaudio2 meralion mflamingo qwen3asr realtime
