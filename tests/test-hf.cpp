// Hugging Face directories through the C API: what main cannot show. Everything else (the
// converter's GGUF bit for bit, damaged directories, the Hugging Face cache) is
// tests/test-hf-dir.py, through main.
#include <doctest/doctest.h>

#include "test-util.h"
#include "whisper-audio.h"

#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

TEST_CASE("whisper_audio_model_save_gguf never writes over a Hugging Face directory's files") {
    // micro-80 as one shard named by an index (every tensor of its header in it)
    const std::string parent = test_tmp("hf-sharded"), dir = parent + "/micro-80";
    REQUIRE((mkdir(parent.c_str(), 0755) == 0 && mkdir(dir.c_str(), 0755) == 0));
    const std::vector<uint8_t> st = read_bytes(test_data("micro-80/model.safetensors"));
    const std::vector<uint8_t> cfg = read_bytes(test_data("micro-80/config.json"));
    REQUIRE((st.size() > 8 && !cfg.empty()));
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | st[i];
    const std::string header(st.begin() + 8, st.begin() + 8 + n), shard = "model-00001-of-00001.safetensors";
    std::string index = "{\"metadata\": {}, \"weight_map\": {";
    for (size_t at = 0; (at = header.find("\"dtype\"", at)) != std::string::npos; at++) {   // "name": {"dtype": ...
        const size_t end = header.rfind('"', header.rfind('{', at) - 1), open = header.rfind('"', end - 1);
        index += (index.back() == '{' ? "\"" : ", \"") + header.substr(open + 1, end - open - 1) + "\": \"" + shard + "\"";
    }
    index += "}}";
    const std::vector<std::string> files = {dir + "/config.json", dir + "/" + shard, dir + "/model.safetensors.index.json"};
    write_bytes(files[0], cfg);
    write_bytes(files[1], st);
    write_bytes(files[2], std::vector<uint8_t>(index.begin(), index.end()));

    whisper_audio_model * m = whisper_audio_model_load(dir.c_str());
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    for (const std::string & f : files) {
        CAPTURE(f);
        const std::vector<uint8_t> before = read_bytes(f);
        CHECK(!whisper_audio_model_save_gguf(m, f.c_str()));
        CHECK_MESSAGE(std::string(whisper_audio_last_error()).find("the model's own file") != std::string::npos, whisper_audio_last_error());
        CHECK(read_bytes(f) == before);
    }
    // anywhere else: the file the converter writes of micro-80 with --outtype f32
    const std::string out = test_tmp("hf-sharded.gguf");
    REQUIRE_MESSAGE(whisper_audio_model_save_gguf(m, out.c_str()), whisper_audio_last_error());
    const std::vector<uint8_t> converted = read_bytes("build/micro-80-f32.gguf");
    REQUIRE(!converted.empty());
    CHECK(read_bytes(out) == converted);
    whisper_audio_model_free(m);
    for (const std::string & f : files) remove(f.c_str());
    remove(out.c_str());
    rmdir(dir.c_str());
    rmdir(parent.c_str());
}
