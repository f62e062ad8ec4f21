// fuzz-hf.cpp - libFuzzer target: whisper_audio_model_load on a Hugging Face directory, one of
// whose files is the input, the others those of a tiny valid Whisper checkpoint (d_model 4, one
// layer, 2 mels; written at start into a temp dir). The input's first byte picks which file the
// rest is: 0 model.safetensors, 1 config.json, 2 model.safetensors.index.json (beside the
// valid shard model-00001-of-00001.safetensors), so that every input reaches our JSON reader
// through the safetensors header, the config or the shard index. Seeds: tests/fuzz/corpus/hf,
// the valid files, each behind its byte, as `FUZZ_HF_SEEDS=DIR build-fuzz/fuzz-hf` writes them.
#include "fuzz-util.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

static std::string g_dir[3];        // one directory per choice of the fuzzed file

static void put_file(const std::string & path, const void * data, size_t n) {
    FILE * f = fopen(path.c_str(), "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) abort();
}

// The tiny checkpoint: config.json and one safetensors file of F32 tensors (model.encoder.*).
static std::string tiny_config() {
    return "{\"model_type\": \"whisper\", \"d_model\": 4, \"encoder_layers\": 1, \"encoder_attention_heads\": 1, "
           "\"encoder_ffn_dim\": 8, \"num_mel_bins\": 2, \"max_source_positions\": 1500}";
}

static std::vector<uint8_t> tiny_safetensors(std::string & index) {
    struct t { const char * name; std::vector<int> shape; };
    const std::vector<t> ts = {
        {"conv1.weight", {4, 2, 3}}, {"conv1.bias", {4}}, {"conv2.weight", {4, 4, 3}}, {"conv2.bias", {4}},
        {"embed_positions.weight", {1500, 4}},
        {"layers.0.self_attn.q_proj.weight", {4, 4}}, {"layers.0.self_attn.q_proj.bias", {4}},
        {"layers.0.self_attn.k_proj.weight", {4, 4}}, {"layers.0.self_attn.v_proj.weight", {4, 4}},
        {"layers.0.self_attn.v_proj.bias", {4}}, {"layers.0.self_attn.out_proj.weight", {4, 4}},
        {"layers.0.self_attn.out_proj.bias", {4}}, {"layers.0.self_attn_layer_norm.weight", {4}},
        {"layers.0.self_attn_layer_norm.bias", {4}}, {"layers.0.fc1.weight", {8, 4}}, {"layers.0.fc1.bias", {8}},
        {"layers.0.fc2.weight", {4, 8}}, {"layers.0.fc2.bias", {4}}, {"layers.0.final_layer_norm.weight", {4}},
        {"layers.0.final_layer_norm.bias", {4}}, {"layer_norm.weight", {4}}, {"layer_norm.bias", {4}},
    };
    std::string header = "{\"__metadata__\": {\"format\": \"pt\"}";
    index = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
    std::vector<uint8_t> data;
    for (const t & x : ts) {
        size_t n = 1;
        std::string shape;
        for (int d : x.shape) { n *= (size_t)d; shape += (shape.empty() ? "" : ", ") + std::to_string(d); }
        const size_t begin = data.size();
        for (size_t i = 0; i < n; i++) {
            const float v = (float)((int)(i % 7) - 3) * 0.125f;
            const uint8_t * b = (const uint8_t *)&v;
            data.insert(data.end(), b, b + 4);
        }
        header += ", \"model.encoder." + std::string(x.name) + "\": {\"dtype\": \"F32\", \"shape\": [" + shape +
                  "], \"data_offsets\": [" + std::to_string(begin) + ", " + std::to_string(data.size()) + "]}";
        index += std::string(&x == &ts[0] ? "" : ", ") + "\"model.encoder." + x.name + "\": \"model-00001-of-00001.safetensors\"";
    }
    header += "}";
    index += "}}";
    while (header.size() % 8) header += ' ';
    std::vector<uint8_t> out(8);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)header.size() >> 8 * i);
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

static int remove_one(const char * path, const struct stat *, int, struct FTW *) { return remove(path); }
static void remove_dirs() {
    for (const std::string & d : g_dir) if (!d.empty()) nftw(d.c_str(), remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const char * tmp = getenv("TMPDIR");
    const std::string config = tiny_config();
    std::string index;
    const std::vector<uint8_t> st = tiny_safetensors(index);
    if (const char * seeds = getenv("FUZZ_HF_SEEDS")) {     // the seed corpus: each valid file behind its byte
        const std::string files[3] = {std::string((const char *)st.data(), st.size()), config, index};
        for (int k = 0; k < 3; k++) {
            const std::string seed = std::string(1, (char)k) + files[k];
            put_file(std::string(seeds) + "/" + (k == 0 ? "safetensors" : k == 1 ? "config" : "index") + ".seed", seed.data(), seed.size());
        }
        exit(0);
    }
    for (int k = 0; k < 3; k++) {
        std::string t = std::string(tmp && *tmp ? tmp : "/tmp") + "/fuzz-hf-XXXXXX";
        if (!mkdtemp(&t[0])) abort();
        g_dir[k] = t;
        if (k != 1) put_file(t + "/config.json", config.data(), config.size());
        if (k != 0) put_file(t + (k == 1 ? "/model.safetensors" : "/model-00001-of-00001.safetensors"), st.data(), st.size());
    }
    atexit(remove_dirs);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size == 0) return 0;
    static const char * names[3] = {"/model.safetensors", "/config.json", "/model.safetensors.index.json"};
    const int k = data[0] % 3;
    put_file(g_dir[k] + names[k], data + 1, size - 1);
    fuzz_load_path(g_dir[k].c_str());
    return 0;
}
