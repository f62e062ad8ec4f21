# whisper-audio
#   make                 build main, bench and the tests (CUDA too when nvcc is found)
#   make demo            the quick start: a random tiny model, then main on samples/speech_16k.wav
#   make test            build and run every test (the converter's too)
#   make test-sanitize   the same under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build)
#   make CUDA=0          build without CUDA; CUDA_ARCH=... to choose GPU targets
# Missing Debian packages (doctest-dev, python3) are installed with apt-get when needed.

BUILD    ?= build
CXX      ?= g++
CXXFLAGS ?= -O3 -march=native
CXXFLAGS += -std=c++17 -Wall -Wextra -fPIC -I. $(if $(wildcard .deps),-I.deps) -pthread
LDLIBS   += -pthread

ifeq ($(SANITIZE),1)
CXXFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -g
LDLIBS   += -fsanitize=address,undefined
CUDA      = 0
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

.PHONY: all deps demo test test-sanitize test-embed clean
all: main bench $(BUILD)/test-all $(BUILD)/libwhisper-audio.so

deps:
	@command -v python3 >/dev/null || { echo "installing python3"; $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3; }
	@test -f /usr/include/doctest/doctest.h || test -f .deps/doctest/doctest.h || \
		{ echo "installing doctest-dev"; $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq doctest-dev; }

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

$(BUILD)/test-all: $(TEST_SRCS) tests/npy.h $(OBJS) | deps $(BUILD)
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

test: deps $(BUILD)/main $(BUILD)/test-all $(TEST_MODELS) test-embed
	python3 tests/test-convert.py
	WA_MAIN=$(BUILD)/main $(BUILD)/test-all

test-sanitize:
	$(MAKE) BUILD=build-san SANITIZE=1 test

demo: deps main $(BUILD)/tiny-random.gguf
	./main -m $(BUILD)/tiny-random.gguf -f samples/speech_16k.wav -o $(BUILD)/speech_16k.npy

clean:
	rm -rf build build-san main bench
