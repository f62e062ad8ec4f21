# whisper-audio
#   make                 build main, bench and the tests (CUDA too when nvcc is found)
#   make demo            the quick start: a random tiny model, then main on samples/speech_16k.wav
#   make test            build and run every test (the converter's too)
#   make test-sanitize   the same under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build)
#   make CUDA=0          build without CUDA; CUDA_ARCH=... to choose GPU targets
# Missing Debian packages (doctest-dev, libstb-dev, libvorbis-dev, python3) are installed with apt-get
# when needed; `make fuzz` also installs clang.

BUILD    ?= build
CXX      ?= g++
CXXFLAGS ?= -O3 -march=native
CXXFLAGS += -std=c++17 -Wall -Wextra -fPIC -I. $(if $(wildcard .deps),-isystem .deps) -pthread
LDLIBS   += -pthread
# stb_image_write (Debian's libstb-dev) for main --png
ifneq ($(wildcard /usr/include/stb/stb_image_write.h .deps/stb/stb_image_write.h),)
CXXFLAGS += -DWHISPER_AUDIO_PNG
endif

ifeq ($(SANITIZE),1)
CXXFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
LDLIBS   += -fsanitize=address,undefined
CUDA      = 0
endif

# Ogg Vorbis input through Xiph's libvorbisfile (Debian: libvorbis-dev), when its header is
# there; OGG=0 builds without it (Ogg input then fails with a message that says how to get it)
OGG ?= $(if $(wildcard /usr/include/vorbis/vorbisfile.h),1,0)
ifeq ($(OGG),1)
CXXFLAGS += -DWHISPER_AUDIO_OGG
LDLIBS   += -lvorbisfile -lvorbis -logg
endif

NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)
# sm_90a: Hopper (H100/H200) with wgmma; compute_80 PTX lets other recent GPUs JIT-compile
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80

OBJS = $(BUILD)/vt.o $(BUILD)/whisper-audio.o
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CXXFLAGS  += -DVT_USE_CUDA
OBJS      += $(BUILD)/vt-cuda.o
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart
endif

SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_SRCS = $(wildcard tests/test-*.cpp)
# test models always live in build/ (the converter's output does not depend on the build flavour)
TEST_MODELS = $(foreach m,micro-80 micro-128,$(foreach t,f32 f16 bf16,build/$(m)-$(t).gguf))
CONVERT = python3 convert/convert-hf-to-gguf.py

.PHONY: all deps demo test test-run test-sanitize test-embed clean
all: main bench $(BUILD)/test-all $(BUILD)/libwhisper-audio.so

# one apt-get for whatever is missing (Ogg's library unless OGG=0 was asked for)
WANT_OGG = $(if $(filter command line environment,$(origin OGG)),$(OGG),1)
deps:
	@missing=""; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	[ -f /usr/include/doctest/doctest.h ] || [ -f .deps/doctest/doctest.h ] || missing="$$missing doctest-dev"; \
	[ -f /usr/include/stb/stb_image_write.h ] || [ -f .deps/stb/stb_image_write.h ] || missing="$$missing libstb-dev"; \
	[ -f /usr/include/vorbis/vorbisfile.h ] || [ "$(WANT_OGG)" = 0 ] || missing="$$missing libvorbis-dev"; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing; fi

$(BUILD):
	mkdir -p $@

$(BUILD)/%.o: %.cpp vt.h whisper-audio.h | $(BUILD)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/vt-cuda.o: vt-cuda.cu vt.h | $(BUILD)
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) -I. -DVT_USE_CUDA -Xcompiler -Wall,-Wextra,-fPIC -c $< -o $@

$(BUILD)/main: examples/main.cpp $(OBJS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bench: examples/bench.cpp $(OBJS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

main bench: %: $(BUILD)/%
	cp $< $@

# the C API as a shared library (tests/gpu/parity.py calls it through ctypes)
$(BUILD)/libwhisper-audio.so: $(OBJS)
	$(CXX) -shared $^ -o $@ $(LDLIBS)

$(BUILD)/test-all: $(TEST_SRCS) tests/test-util.h $(OBJS) | $(BUILD)
	$(CXX) $(CXXFLAGS) $(TEST_SRCS) $(OBJS) -o $@ $(LDLIBS)

# the fixtures' random micro models, converted by our own converter
build/micro-%.gguf: convert/convert-hf-to-gguf.py
	@mkdir -p build
	$(CONVERT) tests/data/micro-$(word 1,$(subst -, ,$*)) -o $@ --outtype $(word 2,$(subst -, ,$*)) 2>/dev/null

$(BUILD)/tiny-random.gguf: convert/convert-hf-to-gguf.py | $(BUILD)
	$(CONVERT) --random tiny -o $@ --outtype f16

# "drop two files into your tree": a consumer built by one plain compiler command
$(BUILD)/embed: examples/embed/embed.cpp vt.cpp whisper-audio.cpp vt.h whisper-audio.h | $(BUILD)
	$(CXX) -std=c++17 -O2 -I. examples/embed/embed.cpp vt.cpp whisper-audio.cpp -o $@ -pthread

test-embed: $(BUILD)/embed build/micro-80-f32.gguf
	$(BUILD)/embed build/micro-80-f32.gguf samples/speech_16k.wav

test: deps
	$(MAKE) test-run

test-run: $(BUILD)/main $(BUILD)/test-all $(TEST_MODELS) test-embed
	python3 tests/test-convert.py
	WA_MAIN=$(BUILD)/main $(BUILD)/test-all

test-sanitize:
	$(MAKE) BUILD=build-san SANITIZE=1 test

demo: deps
	$(MAKE) main $(BUILD)/tiny-random.gguf
	./main -m $(BUILD)/tiny-random.gguf -f samples/speech_16k.wav -o $(BUILD)/speech_16k.npy

clean:
	rm -rf build build-san build-fuzz main bench

# libFuzzer targets (tests/fuzz/, docs/FUZZING.md): make fuzz builds them with clang and runs
# each for FUZZ_SECONDS on a copy of its seed corpus (new inputs land in $(FUZZ_BUILD)/corpus-*)
FUZZ_CXX     ?= clang++
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_TARGETS  = wav ogg model
FUZZ_FLAGS    = -O1 -g -std=c++17 -I. -pthread -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                $(if $(filter 1,$(OGG)),-DWHISPER_AUDIO_OGG)
FUZZ_LDLIBS   = -pthread $(if $(filter 1,$(OGG)),-lvorbisfile -lvorbis -logg)

.PHONY: fuzz fuzz-deps
fuzz-deps:
	@command -v $(FUZZ_CXX) >/dev/null || { echo "installing clang"; $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq clang; }

$(FUZZ_BUILD)/%.o: %.cpp vt.h whisper-audio.h | fuzz-deps
	@mkdir -p $(FUZZ_BUILD)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/fuzz-%: tests/fuzz/fuzz-%.cpp tests/fuzz/fuzz-util.h $(FUZZ_BUILD)/vt.o $(FUZZ_BUILD)/whisper-audio.o whisper-audio.h
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
