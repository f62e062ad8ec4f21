# whisper-audio: `make` builds main, bench and the tests; `make test` runs the tests.
# CUDA is used when nvcc is found (PATH or /usr/local/cuda); `make CUDA=0` builds without.

CXX      ?= g++
CXXFLAGS ?= -O3 -march=native
CXXFLAGS += -std=c++17 -Wall -Wextra -I. -pthread
LDLIBS   += -pthread

NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)
# sm_90a: Hopper's wgmma; compute_80 PTX lets other recent GPUs JIT the rest
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80

OBJS = build/vt.o build/whisper-audio.o
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CXXFLAGS  += -DVT_USE_CUDA
OBJS      += build/vt-cuda.o
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart
endif

TEST_SRCS = $(wildcard tests/test-*.cpp)

all: main bench build/test-all

build:
	mkdir -p build

build/%.o: %.cpp vt.h whisper-audio.h | build
	$(CXX) $(CXXFLAGS) -c $< -o $@

build/vt-cuda.o: vt-cuda.cu vt.h | build
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) -I. -DVT_USE_CUDA -Xcompiler -Wall,-Wextra -c $< -o $@

main: examples/main.cpp $(OBJS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

bench: examples/bench.cpp $(OBJS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

build/test-all: $(TEST_SRCS) $(OBJS) | build
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

.PHONY: all test clean
test: all
	build/test-all

clean:
	rm -rf build main bench
