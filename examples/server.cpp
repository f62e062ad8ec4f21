// whisper-audio-server: Whisper encoder embeddings and audio-LLM tokens over HTTP, batched
// across requests.
//
//   ./whisper-audio-server -m model.gguf [--host 127.0.0.1] [--port 8080]
//   curl --data-binary @speech.wav http://127.0.0.1:8080/v1/audio/embeddings
//
// A thin client of the C API, as main is: the library's pipeline decides the rows (windows,
// positions, pooled vectors or a tower's tokens) and batches them. HTTP workers (cpp-httplib,
// given a connection once its request head has come whole: the connection layer below) read
// and decode the request's audio within the limits, queue it and wait; one dispatcher thread owns the
// pipelines (their calls are for one thread) and keeps each running: it pushes and ends each
// queued request's inputs into the pipeline of its options as they come (windows of different
// requests share batches), flushes a short batch when an encoder is about to run out of work,
// polls the rows and answers each request once its inputs are complete.
//
// Parts: command line -> JSON and base64 -> requests and options -> the dispatcher -> HTTP (its
// connections, read outside the worker pool, and the endpoints) -> main.
#include "whisper-audio.h"
#include "npy.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

// =====================================================================================
// command line
// =====================================================================================

struct server_params {
    std::string model;
    std::string alias;            // the model's name in responses (default: the file's name)
    std::string host = "127.0.0.1";
    int port = 8080;              // 0: a free port, printed
    std::string device = "auto";
    std::vector<int> gpus;        // --device cuda:0,1
    std::string dtype = "f16";
    int n_threads = 0;
    int batch = 8;
    int batch_wait_ms = 0;        // how long a lone request may wait for others to share its batch
    int http_threads = 64;
    int max_body_mb = 100;
    int max_audio_s = 3600;       // of one input, decoded
    int max_request_audio_s = 3600;   // of one request, its inputs together
    int max_audio_mb = 1024;      // decoded audio held by all requests at once (16 kHz floats)
    int max_queue = 256;          // requests waiting for the dispatcher
    int max_inputs = 64;          // inputs in one request (a JSON "input" list)
    int max_pipelines = 4;        // option sets with a pipeline at once
    int timeout_s = 30;           // a request's read (whole body) and write limits
    int head_timeout_s = 10;      // a request's head (request line and headers), whole
    int min_body_rate_kb = 16;    // KB/s a body must keep up after its first 5 s (0: no minimum)
    int max_streams = 2;          // live streams at once (each its own encoder)
    std::string api_key;
};

static void print_usage(const char * argv0) {
    fprintf(stderr,
            "usage: %s -m MODEL [options]\n"
            "\n"
            "Serves Whisper encoder embeddings (or an audio-LLM tower's tokens) over HTTP:\n"
            "  POST /v1/audio/embeddings   audio as the body, multipart file=, or JSON {\"input\": \"<base64>\"}\n"
            "  POST /v1/audio/embeddings/stream   live audio as a (chunked) body: each window's rows as a JSON\n"
            "                              line as soon as its last sample is in (?format=s16le|f32le: raw PCM)\n"
            "  GET  /health, /v1/models, /metrics\n"
            "\n"
            "options:\n"
            "  -h, --help            show this help and exit\n"
            "  --version             print the version and exit\n"
            "  -m, --model PATH      model file (as main's -m)\n"
            "  --alias NAME          the model's name in responses (default: the file's name)\n"
            "  --host HOST           address to listen on (default: 127.0.0.1)\n"
            "  --port N              port (default: 8080; 0 picks a free one and prints it)\n"
            "  --device D            cpu, cuda, auto (default) or cuda:0,1 (each GPU takes the next batch)\n"
            "  --dtype T             CUDA compute type: f16 (default), bf16 or fp8; on the CPU f32, but\n"
            "                        bf16: GEMMs in bf16 on AMX where the CPU has them\n"
            "  -t, --threads N       CPU threads for log-mel and the CPU backend\n"
            "  -b, --batch N         30 s windows per encoder call, at most (default: 8)\n"
            "  --batch-wait-ms N     how long a short batch waits for other requests to share it\n"
            "                        (default: 0: it goes when an encoder is about to run out of work)\n"
            "  --http-threads N      HTTP worker threads: requests handled at once (default: 64)\n"
            "  --max-body-mb N       largest request body (default: 100)\n"
            "  --max-audio-s N       longest audio in one input, decoded (default: 3600); decoding stops there (413)\n"
            "  --max-request-audio-s N  audio in one request, its inputs together (default: 3600; 413 past it)\n"
            "  --max-audio-mb N      decoded audio held by all requests at once, in MB of 16 kHz float samples\n"
            "                        (default: 1024, 4.6 hours); past it 503 with Retry-After\n"
            "  --max-queue N         requests waiting to be encoded; beyond it 503 (default: 256)\n"
            "  --max-inputs N        inputs in one request (default: 64)\n"
            "  --max-pipelines N     option sets served at once, each with its own encoder (default: 4)\n"
            "  --max-streams N       live streams (POST /v1/audio/embeddings/stream) at once, each with its\n"
            "                        own encoder (default: 2; beyond it 503)\n"
            "  --timeout N           seconds a client has to send its request body, and each write (default: 30)\n"
            "  --head-timeout N      seconds a client has to send a request's head, whole (default: 10; then 408)\n"
            "  --min-body-rate N     KB/s a request body must keep up after its first 5 s (default: 16; 0: none)\n"
            "  --api-key KEY         require 'Authorization: Bearer KEY' (as llama-server; /health is open)\n",
            argv0);
}

static bool parse_int(const char * s, int lo, int hi, int * out) {
    char * end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

// --device: cpu, auto, cuda, cuda:N[,M...]
static bool parse_device(const std::string & s, server_params & p) {
    p.gpus.clear();
    if (s == "cpu" || s == "auto" || s == "cuda") { p.device = s; return true; }
    if (s.rfind("cuda:", 0) != 0) return false;
    p.device = "cuda";
    std::string list = s.substr(5) + ",";
    for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
        int g;
        if (!parse_int(list.substr(at, comma - at).c_str(), 0, 1023, &g) ||
            std::find(p.gpus.begin(), p.gpus.end(), g) != p.gpus.end())
            return false;
        p.gpus.push_back(g);
    }
    return !p.gpus.empty();
}

// 0 to go on, 1 after -h or --version, -1 on a bad argument (message printed).
static int parse_args(int argc, char ** argv, server_params & p) {
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        const char * v = nullptr;
        auto value = [&]() -> bool {
            if (i + 1 >= argc) { fprintf(stderr, "error: %s needs a value\n", arg.c_str()); return false; }
            v = argv[++i];
            return true;
        };
        auto number = [&](int lo, int hi, int * dst) -> bool {
            if (!value()) return false;
            if (parse_int(v, lo, hi, dst)) return true;
            fprintf(stderr, "error: bad value '%s' for %s (%d to %d)\n", v, arg.c_str(), lo, hi);
            return false;
        };
        bool ok = true;
        if (arg == "-h" || arg == "--help") { print_usage(argv[0]); return 1; }
        else if (arg == "--version") { printf("whisper-audio-server %s\n", whisper_audio_version()); return 1; }
        else if (arg == "-m" || arg == "--model") ok = value() && (p.model = v, true);
        else if (arg == "--alias") ok = value() && (p.alias = v, true);
        else if (arg == "--host") ok = value() && (p.host = v, true);
        else if (arg == "--api-key") ok = value() && (p.api_key = v, true);
        else if (arg == "--port") ok = number(0, 65535, &p.port);
        else if (arg == "-t" || arg == "--threads") ok = number(1, 4096, &p.n_threads);
        else if (arg == "-b" || arg == "--batch") ok = number(1, WHISPER_AUDIO_MAX_BATCH, &p.batch);
        else if (arg == "--batch-wait-ms") ok = number(0, 10000, &p.batch_wait_ms);
        else if (arg == "--http-threads") ok = number(1, 4096, &p.http_threads);
        else if (arg == "--max-body-mb") ok = number(1, 1 << 20, &p.max_body_mb);
        else if (arg == "--max-audio-s") ok = number(1, 4 * 3600, &p.max_audio_s);
        else if (arg == "--max-queue") ok = number(1, 1 << 20, &p.max_queue);
        else if (arg == "--max-inputs") ok = number(1, 1 << 16, &p.max_inputs);
        else if (arg == "--max-pipelines") ok = number(1, 64, &p.max_pipelines);
        else if (arg == "--max-streams") ok = number(1, 64, &p.max_streams);
        else if (arg == "--timeout") ok = number(1, 3600, &p.timeout_s);
        else if (arg == "--head-timeout") ok = number(1, 3600, &p.head_timeout_s);
        else if (arg == "--min-body-rate") ok = number(0, 1 << 20, &p.min_body_rate_kb);
        else if (arg == "--max-request-audio-s") ok = number(1, 64 * 3600, &p.max_request_audio_s);
        else if (arg == "--max-audio-mb") ok = number(1, 1 << 24, &p.max_audio_mb);
        else if (arg == "--device") {
            ok = value() && parse_device(v, p);
            if (!ok && v) fprintf(stderr, "error: bad value '%s' for --device (cpu, auto, cuda or cuda:0,1)\n", v);
        } else if (arg == "--dtype") {
            ok = value() && (strcmp(v, "f16") == 0 || strcmp(v, "bf16") == 0 || strcmp(v, "fp8") == 0);
            if (ok) p.dtype = v;
            else if (v) fprintf(stderr, "error: bad value '%s' for --dtype (f16, bf16 or fp8)\n", v);
        } else {
            fprintf(stderr, "error: unknown argument '%s'\n", arg.c_str());
            print_usage(argv[0]);
            return -1;
        }
        if (!ok) return -1;
    }
    if (p.model.empty()) { fprintf(stderr, "error: no model given (-m MODEL)\n"); print_usage(argv[0]); return -1; }
    return 0;
}

// =====================================================================================
// JSON and base64: the little the requests and responses need
// =====================================================================================
//
// A request's JSON is parsed by this small recursive-descent parser (RFC 8259, nesting at most
// 32 deep, strings as UTF-8); responses are written by hand. Floats go out as the shortest text
// that reads back to the same float (std::to_chars), so a JSON client gets main's values bit for bit.

struct json {
    enum kind { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT } type = NUL;
    bool b = false;
    double num = 0;
    std::string str;
    std::vector<json> items;                              // ARRAY
    std::vector<std::pair<std::string, json>> fields;     // OBJECT, in order

    const json * get(const std::string & key) const {
        for (const auto & f : fields) if (f.first == key) return &f.second;
        return nullptr;
    }
};

struct json_parser {
    const char * s;
    const char * end;
    std::string error;

    bool fail(const char * what) {
        if (error.empty()) error = std::string(what) + " at byte " + std::to_string(pos());
        return false;
    }
    size_t pos() const { return (size_t)(end - s) ; }
    void ws() { while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++; }
    bool lit(const char * w) {
        const size_t n = strlen(w);
        if ((size_t)(end - s) < n || memcmp(s, w, n) != 0) return false;
        s += n;
        return true;
    }
    static void utf8(std::string & o, uint32_t cp) {
        if (cp < 0x80) o += (char)cp;
        else if (cp < 0x800) { o += (char)(0xc0 | cp >> 6); o += (char)(0x80 | (cp & 0x3f)); }
        else if (cp < 0x10000) { o += (char)(0xe0 | cp >> 12); o += (char)(0x80 | (cp >> 6 & 0x3f)); o += (char)(0x80 | (cp & 0x3f)); }
        else { o += (char)(0xf0 | cp >> 18); o += (char)(0x80 | (cp >> 12 & 0x3f)); o += (char)(0x80 | (cp >> 6 & 0x3f)); o += (char)(0x80 | (cp & 0x3f)); }
    }
    bool hex4(uint32_t & v) {
        if (end - s < 4) return false;
        v = 0;
        for (int k = 0; k < 4; k++) {
            const char c = *s++;
            v <<= 4;
            if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
            else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
            else return false;
        }
        return true;
    }
    bool string(std::string & o) {
        s++;                                              // the opening quote
        while (s < end && *s != '"') {
            const unsigned char c = (unsigned char)*s;
            if (c < 0x20) return fail("a control character in a string");
            if (c != '\\') {                              // a run of plain bytes at once (base64 audio)
                const char * run = s;
                while (s < end && *s != '"' && *s != '\\' && (unsigned char)*s >= 0x20) s++;
                o.append(run, s);
                continue;
            }
            if (++s >= end) break;
            const char e = *s++;
            uint32_t cp;
            switch (e) {
                case '"': o += '"'; break;
                case '\\': o += '\\'; break;
                case '/': o += '/'; break;
                case 'b': o += '\b'; break;
                case 'f': o += '\f'; break;
                case 'n': o += '\n'; break;
                case 'r': o += '\r'; break;
                case 't': o += '\t'; break;
                case 'u':
                    if (!hex4(cp)) return fail("a bad \\u escape");
                    if (cp >= 0xd800 && cp <= 0xdbff) {   // a surrogate pair
                        uint32_t lo;
                        if (!lit("\\u") || !hex4(lo) || lo < 0xdc00 || lo > 0xdfff) return fail("a lone surrogate");
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                        return fail("a lone surrogate");
                    }
                    utf8(o, cp);
                    break;
                default: return fail("a bad escape");
            }
        }
        if (s >= end) return fail("an unterminated string");
        s++;
        return true;
    }
    bool value(json & v, int depth) {
        if (depth > 32) return fail("nesting deeper than 32");
        ws();
        if (s >= end) return fail("unexpected end");
        const char c = *s;
        if (c == '{') {
            v.type = json::OBJECT;
            s++;
            ws();
            if (s < end && *s == '}') { s++; return true; }
            for (;;) {
                ws();
                if (s >= end || *s != '"') return fail("expected a field name");
                std::string key;
                if (!string(key)) return false;
                ws();
                if (s >= end || *s != ':') return fail("expected ':'");
                s++;
                v.fields.emplace_back(std::move(key), json());
                if (!value(v.fields.back().second, depth + 1)) return false;
                ws();
                if (s < end && *s == ',') { s++; continue; }
                if (s < end && *s == '}') { s++; return true; }
                return fail("expected ',' or '}'");
            }
        }
        if (c == '[') {
            v.type = json::ARRAY;
            s++;
            ws();
            if (s < end && *s == ']') { s++; return true; }
            for (;;) {
                v.items.emplace_back();
                if (!value(v.items.back(), depth + 1)) return false;
                ws();
                if (s < end && *s == ',') { s++; continue; }
                if (s < end && *s == ']') { s++; return true; }
                return fail("expected ',' or ']'");
            }
        }
        if (c == '"') { v.type = json::STRING; return string(v.str); }
        if (lit("true")) { v.type = json::BOOL; v.b = true; return true; }
        if (lit("false")) { v.type = json::BOOL; v.b = false; return true; }
        if (lit("null")) { v.type = json::NUL; return true; }
        if (c == '-' || (c >= '0' && c <= '9')) {
            const char * start = s;
            if (*s == '-') s++;
            while (s < end && ((*s >= '0' && *s <= '9') || *s == '.' || *s == 'e' || *s == 'E' || *s == '+' || *s == '-')) s++;
            const auto r = std::from_chars(start, s, v.num);
            if (r.ec != std::errc() || r.ptr != s) return fail("a bad number");
            v.type = json::NUMBER;
            return true;
        }
        return fail("unexpected character");
    }
    bool parse(const std::string & text, json & out) {
        s = text.data();
        end = s + text.size();
        if (!value(out, 0)) return false;
        ws();
        return s == end || fail("text after the value");
    }
};

// A JSON string literal's contents: quotes, backslashes and control characters escaped, and
// bytes that are not UTF-8 (a file name in Latin-1) as U+FFFD, so that the answer is valid JSON
// whatever the name.
static std::string json_escape(const std::string & s) {
    std::string o;
    o.reserve(s.size() + 2);
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { o += '\\'; o += (char)c; i++; continue; }
        if (c < 0x20) { char b[8]; snprintf(b, sizeof(b), "\\u%04x", c); o += b; i++; continue; }
        if (c < 0x80) { o += (char)c; i++; continue; }
        // a UTF-8 sequence: its length from the lead byte, then continuation bytes, no overlong
        // forms, no surrogates, nothing past U+10FFFF
        const size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        bool good = len > 0 && i + len <= s.size();
        uint32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t k = 1; good && k < len; k++) {
            const unsigned char d = (unsigned char)s[i + k];
            good = (d & 0xc0) == 0x80;
            cp = cp << 6 | (d & 0x3f);
        }
        good = good && !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
        if (good) { o.append(s, i, len); i += len; }
        else { o += "\xef\xbf\xbd"; i++; }
    }
    return o;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void base64_encode(const uint8_t * d, size_t n, std::string & o) {
    o.reserve(o.size() + (n + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        const uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
        o += B64[v >> 18]; o += B64[v >> 12 & 63]; o += B64[v >> 6 & 63]; o += B64[v & 63];
    }
    if (i < n) {
        const uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0);
        o += B64[v >> 18]; o += B64[v >> 12 & 63];
        o += i + 1 < n ? B64[v >> 6 & 63] : '=';
        o += '=';
    }
}

// Standard base64 (RFC 4648), '=' padding optional, line breaks allowed; a "data:...;base64,"
// prefix is skipped. false for anything else.
static bool base64_decode(const std::string & in, std::string & out) {
    size_t i = 0;
    if (in.rfind("data:", 0) == 0) {
        const size_t comma = in.find(',');
        if (comma == std::string::npos || in.compare(comma - 7, 7, ";base64") != 0) return false;
        i = comma + 1;
    }
    out.clear();
    out.reserve(in.size() / 4 * 3);
    uint32_t acc = 0;
    int bits = 0;
    size_t pad = 0;
    for (; i < in.size(); i++) {
        const char c = in[i];
        if (c == '\n' || c == '\r') continue;
        if (c == '=') { pad++; continue; }
        if (pad) return false;                         // data after the padding
        const char * at = (const char *)memchr(B64, c, 64);
        if (!at || !c) return false;
        acc = acc << 6 | (uint32_t)(at - B64);
        bits += 6;
        if (bits >= 8) { bits -= 8; out += (char)(acc >> bits & 0xff); }
    }
    return pad <= 2 && bits < 6 && (acc & ((1u << bits) - 1)) == 0;
}

// =====================================================================================
// requests: options, inputs, the rows that come back
// =====================================================================================

// A request's options, named as main's flags; requests with equal options share a pipeline.
struct options {
    int layer = -1;               // --layer N
    bool final_ln = true;         // --no-final-ln
    bool pool_mean = false;       // --pool mean
    bool no_pad = false;          // --no-pad
    bool projector = true;        // --no-projector
    bool f16 = false;             // --outtype f16

    bool operator<(const options & o) const {
        return std::tie(layer, final_ln, pool_mean, no_pad, projector, f16) <
               std::tie(o.layer, o.final_ln, o.pool_mean, o.no_pad, o.projector, o.f16);
    }
    std::string name() const {
        return "layer=" + std::to_string(layer) + (final_ln ? "" : ",no_final_ln") + (pool_mean ? ",pool=mean" : "") +
               (no_pad ? ",no_pad" : "") + (projector ? "" : ",no_projector") + (f16 ? ",f16" : ",f32");
    }
};

// A request's decoded audio, in blocks that never move once made (no reallocation, so that what
// the budget charges is what is held): 64 Ki samples first, each next one twice the last, up to
// 1 Mi (65 s), so that a short clip holds little and a long one few blocks.
struct pcm_blocks {
    static constexpr size_t FIRST = (size_t)1 << 16, LAST = (size_t)1 << 20;
    std::vector<std::unique_ptr<float[]>> b;
    std::vector<size_t> cap;              // each block's samples
    size_t n = 0;                         // samples in all
    size_t held = 0;                      // the blocks' samples in all

    size_t size() const { return n; }
    size_t next_block() const { return b.empty() ? FIRST : std::min(LAST, 2 * cap.back()); }
    void add_block() {
        const size_t k = next_block();
        b.emplace_back(new float[k]);     // not touched: its pages come as samples are written
        cap.push_back(k);
        held += k;
    }
    // where the next samples go, and how many fit there (0: a block is needed)
    float * tail(size_t * room) {
        *room = held - n;
        return *room ? b.back().get() + (cap.back() - *room) : nullptr;
    }
    // the contiguous samples from off on, at most max of them, in *len
    const float * at(size_t off, size_t max, size_t * len) const {
        size_t start = 0, k = 0;
        while (off >= start + cap[k]) start += cap[k++];
        *len = std::min({max, cap[k] - (off - start), n - off});
        return b[k].get() + (off - start);
    }
    void clear() { b.clear(); cap.clear(); n = held = 0; }
};

// The decoded audio that all requests hold at once (--max-audio-mb), in samples: charged a block
// at a time as a request decodes, given back when the request goes.
struct audio_budget {
    std::atomic<size_t> used{0};
    size_t limit = 0;
    bool take(size_t k) {
        size_t cur = used.load();
        do {
            if (cur + k > limit) return false;
        } while (!used.compare_exchange_weak(cur, cur + k));
        return true;
    }
    void give(size_t k) { used -= k; }
};

// One input's audio and, once encoded, its rows.
struct input {
    pcm_blocks pcm;                       // 16 kHz mono
    std::string warning;                  // the decoder's (cut short: decoded what is there)
    size_t samples = 0;                   // decoded (pcm may keep fewer: Qwen2-Audio's first 30 s)
    std::vector<uint8_t> data;            // the rows, f32 or f16, as main writes them (filled bytes of it)
    size_t filled = 0;
    size_t n_rows = 0;                    // the first dimension of its array
    size_t windows = 0;                   // row records (windows, or a tower's chunks)
    bool finite = true;
};

// A request as the dispatcher sees it: the HTTP worker fills it, queues it and waits on done.
struct request {
    options opt;
    std::vector<input> inputs;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error;                    // set when encoding failed
    size_t pending = 0;                   // inputs not yet complete (the dispatcher's)
    std::atomic<bool> cancelled{false};   // its client left: its windows are released
    audio_budget * budget = nullptr;      // what its decoded audio is charged to, given back when it goes
    size_t charged = 0;
    bool charge(size_t k) {
        if (!budget->take(k)) return false;
        charged += k;
        return true;
    }
    ~request() { if (budget) budget->give(charged); }
};

// =====================================================================================
// the dispatcher: one thread owns the pipelines, requests share their batches
// =====================================================================================

struct metrics {
    std::atomic<long long> requests{0}, requests_failed{0}, inputs{0}, windows{0}, batches{0}, flushes{0};
    std::atomic<long long> rejected_busy{0}, rejected_budget{0}, cancelled{0};
    std::atomic<double> audio_s{0}, latency_s_sum{0};
    // the dispatcher thread's time: pushing audio (cutting windows, waiting for a free batch),
    // copying rows out (on_rows), and polling (waiting for rows included)
    std::atomic<double> push_s{0}, rows_s{0}, poll_s{0};
    // request latency histogram (seconds, cumulative buckets as Prometheus has them)
    static constexpr double BUCKETS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    std::atomic<long long> latency_bucket[sizeof(BUCKETS) / sizeof(BUCKETS[0]) + 1]{};
    std::atomic<long long> batch_windows{0};   // windows in all batches (for the batch fill)

    static void add(std::atomic<double> & a, double v) {
        double cur = a.load();
        while (!a.compare_exchange_weak(cur, cur + v)) {}
    }
    void observe_latency(double s) {
        add(latency_s_sum, s);
        size_t k = 0;
        while (k < sizeof(BUCKETS) / sizeof(BUCKETS[0]) && s > BUCKETS[k]) k++;
        latency_bucket[k]++;
    }
};
constexpr double metrics::BUCKETS[];

struct dispatcher {
    const server_params & sp;
    whisper_audio_model * model;
    const whisper_audio_hparams & hp;
    metrics & m;
    using clock = std::chrono::steady_clock;

    // an input in a pipeline: its request, which is done once all of its inputs are
    struct route {
        std::shared_ptr<request> req;
        input * in;
    };
    // an input queued for its pipeline, pushed a window's samples at a time from off on
    struct queued_input {
        std::shared_ptr<request> req;
        input * in;
        size_t off = 0;
    };
    // a pipeline per option set in use, least recently used first out; it runs continuously:
    // inputs are pushed as requests come, a short batch is flushed when an encoder is about to
    // run out of work, and polled rows go to their inputs
    struct pipe_entry {
        dispatcher * d = nullptr;
        options opt;
        whisper_audio_pipeline * pipe = nullptr;
        std::vector<whisper_audio_encoder *> encs;   // owned by the pipeline while it lives
        int64_t next_input = 0;                      // inputs pushed so far (on_rows counts from 0)
        int64_t done = 0;                            // inputs complete (poll's count)
        int64_t flushed = 0;                         // inputs pushed before the last flush
        std::map<int64_t, route> routes;             // inputs pushed (or being pushed) and not complete
        std::deque<queued_input> to_push;            // inputs to push; the first is input next_input
        bool idle() const { return routes.empty() && to_push.empty(); }
        clock::time_point unflushed_since;           // the oldest input pushed after the last flush
        long long batches_seen = 0, windows_seen = 0;   // the encoders' counts already in the metrics
        uint64_t last_used = 0;
        bool tokens = false;
        int batch = 0;                               // windows a batch holds (whisper_audio_pipeline_batch)
    };
    std::map<options, pipe_entry> pipes;
    uint64_t tick = 0;
    std::string backend = "?";
    std::string dtype = "?";       // what the GEMMs compute in (f32 or bf16 on the CPU)
    int n_threads_used = 0;

    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<request>> queue;
    std::vector<std::shared_ptr<request>> cancels;   // requests whose clients left
    bool stopping = false;
    std::thread thread;

    dispatcher(const server_params & p, whisper_audio_model * mdl, metrics & mt)
        : sp(p), model(mdl), hp(*whisper_audio_model_hparams(mdl)), m(mt) {}

    // The encoder and pipeline parameters of an option set.
    whisper_audio_encoder_params encoder_params(const options & o, int gpu) const {
        whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
        ep.device = sp.device == "cpu" ? WHISPER_AUDIO_DEVICE_CPU : sp.device == "cuda" ? WHISPER_AUDIO_DEVICE_GPU
                                                                                        : WHISPER_AUDIO_DEVICE_AUTO;
        ep.dtype = sp.dtype == "fp8" ? WHISPER_AUDIO_DTYPE_FP8 : sp.dtype == "bf16" ? WHISPER_AUDIO_DTYPE_BF16 : WHISPER_AUDIO_DTYPE_F16;
        if (sp.n_threads > 0) ep.n_threads = sp.n_threads;
        ep.max_batch = sp.batch;
        ep.output_layer = o.layer;
        ep.final_ln = o.final_ln;
        ep.projector = o.projector;
        ep.gpu_device = gpu;
        return ep;
    }
    static whisper_audio_pipeline_params pipeline_params(const options & o) {
        whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
        pp.pool = o.pool_mean ? WHISPER_AUDIO_POOL_MEAN : WHISPER_AUDIO_POOL_NONE;
        pp.no_pad = o.no_pad;
        pp.f16 = o.f16;
        // the library's batch rule (whisper_audio_batch_for_windows): one pipeline serves the
        // requests as they come, so no count of windows is known when it is made: n_windows 0,
        // --batch as given, as main for inputs of no length known ahead. A lone request's short
        // batch is flushed and runs as the library's smallest graph that holds it.
        pp.n_windows = 0;
        return pp;
    }
    bool tokens(const options & o) const {
        return whisper_audio_rows_are_tokens(model, encoder_params(o, 0), pipeline_params(o));
    }

    static bool on_rows(const whisper_audio_rows * r, void * user) {
        pipe_entry * e = (pipe_entry *)user;
        const auto t0 = clock::now();
        struct timed {                    // the callback's time into the metrics, however it returns
            clock::time_point t0; metrics & m;
            ~timed() { metrics::add(m.rows_s, std::chrono::duration<double>(clock::now() - t0).count()); }
        } tm{t0, e->d->m};
        auto it = e->routes.find(r->input);
        if (it == e->routes.end()) return false;      // an input not pushed here: a bug
        input & in = *it->second.in;
        const size_t n = (size_t)r->n_rows * r->n_state;
        const size_t bytes = n * (r->f16 ? 2 : 4);
        const uint8_t * src = (const uint8_t *)r->data;
        // into the buffer the HTTP worker sized (its pages touched there, not on this thread)
        if (in.filled + bytes > in.data.size()) in.data.resize(in.filled + bytes);
        memcpy(in.data.data() + in.filled, src, bytes);
        in.filled += bytes;
        // a value is not finite when its exponent bits are all ones; counted on the bits into a
        // local, which the compiler vectorises (a float compare folded into a bool does not:
        // 1.4 ms against 0.27 for a large-v3 window's 1.9 M floats)
        size_t bad = 0;
        if (r->f16) {
            const uint16_t * h = (const uint16_t *)r->data;
            for (size_t i = 0; i < n; i++) bad += (h[i] & 0x7c00u) == 0x7c00u;
        } else {
            uint32_t u;
            for (size_t i = 0; i < n; i++) {
                memcpy(&u, src + 4 * i, 4);
                bad += (u & 0x7f800000u) == 0x7f800000u;
            }
        }
        in.finite &= bad == 0;
        in.windows++;
        e->d->m.windows++;
        return true;
    }

    static void free_entry(pipe_entry & e) {
        whisper_audio_pipeline_free(e.pipe);
        for (whisper_audio_encoder * enc : e.encs) whisper_audio_encoder_free(enc);
        e.pipe = nullptr;
        e.encs.clear();
    }

    // The pipeline of an option set, made (its encoders and graphs) on first use; NULL with the
    // library's message in err.
    pipe_entry * get(const options & o, std::string & err) {
        auto it = pipes.find(o);
        if (it != pipes.end()) { it->second.last_used = ++tick; return &it->second; }
        while ((int)pipes.size() >= sp.max_pipelines) {          // room: the least recently used idle one goes
            auto lru = pipes.end();
            for (auto i = pipes.begin(); i != pipes.end(); ++i)
                if (i->second.idle() && (lru == pipes.end() || i->second.last_used < lru->second.last_used)) lru = i;
            if (lru == pipes.end()) break;                       // every one busy: one more for now
            fprintf(stderr, "server: releasing the pipeline for %s\n", lru->first.name().c_str());
            free_entry(lru->second);
            pipes.erase(lru);
        }
        pipe_entry & e = pipes[o];                 // its address is the pipeline's user pointer: made in place
        e.d = this;
        e.opt = o;
        std::vector<int> gpus = sp.gpus;
        if (gpus.empty()) gpus.push_back(0);
        for (int g : gpus) {
            whisper_audio_encoder * enc = whisper_audio_encoder_init(model, encoder_params(o, g));
            if (!enc) { err = whisper_audio_last_error(); free_entry(e); pipes.erase(o); return nullptr; }
            e.encs.push_back(enc);
        }
        backend = whisper_audio_encoder_backend(e.encs[0]);
        dtype = whisper_audio_encoder_dtype(e.encs[0]);
        n_threads_used = whisper_audio_encoder_n_threads(e.encs[0]);
        whisper_audio_pipeline_params pp = pipeline_params(o);
        pp.on_rows = on_rows;
        pp.user = &e;
        e.pipe = whisper_audio_pipeline_init(e.encs.data(), (int)e.encs.size(), pp);
        if (!e.pipe) { err = whisper_audio_last_error(); free_entry(e); pipes.erase(o); return nullptr; }
        e.tokens = whisper_audio_pipeline_tokens(e.pipe);
        e.batch = whisper_audio_pipeline_batch(e.pipe);
        e.last_used = ++tick;
        fprintf(stderr, "server: pipeline for %s ready (%s, batch %d)\n", o.name().c_str(), backend.c_str(), e.batch);
        return &e;
    }

    // Queues a request; false when the queue is full or the server stops.
    bool submit(std::shared_ptr<request> r) {
        {
            std::lock_guard<std::mutex> lock(mu);
            if (stopping || (int)queue.size() >= sp.max_queue) return false;
            r->pending = r->inputs.size();
            queue.push_back(std::move(r));
        }
        cv.notify_one();
        return true;
    }
    // The client of a queued or pushed request has gone: its windows are released.
    void cancel(std::shared_ptr<request> r) {
        r->cancelled = true;
        {
            std::lock_guard<std::mutex> lock(mu);
            cancels.push_back(std::move(r));
        }
        cv.notify_one();
    }
    size_t depth() {
        std::lock_guard<std::mutex> lock(mu);
        return queue.size();
    }

    static void finish_request(request & r, const std::string & error) {
        std::lock_guard<std::mutex> lock(r.mu);
        if (r.done) return;
        r.error = error;
        r.done = true;
        r.cv.notify_all();
    }

    // The pipeline stops at its first failure: every request with an input in it fails, and the
    // pipeline is made anew for the next.
    void fail_entry(const options & o, const std::string & err) {
        fprintf(stderr, "server: encoding failed: %s\n", err.c_str());
        pipe_entry & e = pipes[o];
        for (auto & kv : e.routes) finish_request(*kv.second.req, "encoding failed: " + err);
        for (auto & q : e.to_push) finish_request(*q.req, "encoding failed: " + err);
        free_entry(e);
        pipes.erase(o);
    }

    // A request's inputs queued for the pipeline of its options.
    void push_request(const std::shared_ptr<request> & r) {
        if (r->cancelled) { finish_request(*r, "the client disconnected"); return; }
        std::string err;
        pipe_entry * e = get(r->opt, err);
        if (!e) { finish_request(*r, err); return; }
        for (input & in : r->inputs) e->to_push.push_back(queued_input{r, &in, 0});
    }

    // Pushes queued inputs, ending each once all of its samples are in, a batch's windows of
    // samples at most a call: a long input goes in pieces, so that between them the loop polls
    // rows, takes new requests and sees cancellations, rather than blocking in one push while the
    // whole input is cut; short ones go together (and share the batch a flush sends).
    bool feed(pipe_entry & e) {
        if (e.to_push.empty()) return true;
        const auto t0 = clock::now();
        const double rows0 = m.rows_s.load();
        const bool ok = feed_inputs(e);
        metrics::add(m.push_s, std::chrono::duration<double>(clock::now() - t0).count() - (m.rows_s.load() - rows0));
        return ok;
    }
    bool feed_inputs(pipe_entry & e) {
        size_t budget = (size_t)sp.batch * WHISPER_AUDIO_N_SAMPLES;
        while (!e.to_push.empty() && budget > 0) {
            queued_input & q = e.to_push.front();
            if (q.off == 0) {
                if (e.next_input == e.flushed) e.unflushed_since = clock::now();
                e.routes[e.next_input] = route{q.req, q.in};
            }
            size_t n = 0;
            const float * piece = q.off < q.in->pcm.size() ? q.in->pcm.at(q.off, budget, &n) : nullptr;
            if (!whisper_audio_pipeline_push(e.pipe, piece, n)) { fail_entry(e.opt, whisper_audio_last_error()); return false; }
            q.off += n;
            budget -= n;
            if (q.off < q.in->pcm.size()) {          // the rest of a block, or of the next, while the budget lasts
                if (budget == 0) break;
                continue;
            }
            if (!whisper_audio_pipeline_end_input(e.pipe)) { fail_entry(e.opt, whisper_audio_last_error()); return false; }
            e.next_input++;
            e.to_push.pop_front();
        }
        return true;
    }

    // A cancelled request's inputs: those not pushed yet are forgotten, the one being pushed is
    // dropped, and of the ended ones the windows not yet in a batch go and the rest run with
    // their rows skipped; the pushed ones complete as usual (poll counts them).
    void release(const std::shared_ptr<request> & r) {
        m.cancelled++;
        auto it = pipes.find(r->opt);
        if (it == pipes.end()) return;
        pipe_entry & e = it->second;
        for (size_t i = e.to_push.size(); i-- > 0;) {
            if (e.to_push[i].req != r) continue;
            if (i == 0 && e.to_push[0].off > 0) {            // being pushed: input next_input
                if (!whisper_audio_pipeline_drop_input(e.pipe)) { fail_entry(r->opt, whisper_audio_last_error()); return; }
                e.next_input++;
            } else {
                r->pending--;
            }
            e.to_push.erase(e.to_push.begin() + (long)i);
        }
        for (auto & kv : e.routes) {
            if (kv.second.req != r || kv.first >= e.next_input) continue;
            if (!whisper_audio_pipeline_cancel_input(e.pipe, kv.first)) { fail_entry(r->opt, whisper_audio_last_error()); return; }
        }
    }

    // Input k is complete: its array's first dimension, as main's .npy (windows, or its rows:
    // positions, tokens), and its request answered once all of its inputs are.
    void complete(pipe_entry & e, int64_t k) {
        auto it = e.routes.find(k);
        if (it == e.routes.end()) return;
        route rt = it->second;
        e.routes.erase(it);
        const options & o = e.opt;
        input & in = *rt.in;
        const bool rows_are_rows = e.tokens || (o.no_pad && !o.pool_mean);
        const size_t width = (size_t)whisper_audio_pipeline_row_width(e.pipe);
        in.data.resize(in.filled);
        const size_t values = in.data.size() / (o.f16 ? 2 : 4);
        in.n_rows = rows_are_rows ? values / width : in.windows;
        in.pcm.clear();
        if (--rt.req->pending == 0) {
            bool finite = true;
            for (const input & i : rt.req->inputs) finite &= i.finite;
            finish_request(*rt.req, finite ? "" : "the encoder output holds non-finite values");
        }
    }

    // Flushes a short batch when an encoder is about to run out of work (within FLUSH_LEAD_MS:
    // the loop's pace and a batch's upload, which overlaps the batch before it), after
    // --batch-wait-ms for company if set. While the encoders are busy the
    // batch keeps filling with the requests that come, so at load the batches go full; a lone
    // request finds them idle and goes at once. (Flushing whenever fewer than two batches were in
    // flight gave each batch the clients answered from the batch two before it: half-full
    // batches at load.)
    static constexpr double FLUSH_LEAD_MS = 3.0;
    void maybe_flush(pipe_entry & e) {
        if (e.next_input == e.flushed || e.routes.empty()) return;
        if (!e.to_push.empty() && e.to_push.front().off > 0) return;    // only between inputs
        if (sp.batch_wait_ms > 0 && clock::now() - e.unflushed_since < std::chrono::milliseconds(sp.batch_wait_ms)) return;
        if (whisper_audio_pipeline_busy_ms(e.pipe) > FLUSH_LEAD_MS) return;
        if (!whisper_audio_pipeline_flush(e.pipe)) { fail_entry(e.opt, whisper_audio_last_error()); return; }
        e.flushed = e.next_input;
        m.flushes++;
    }

    // Rows ready to their inputs; false when the pipeline failed (its requests answered).
    bool poll(pipe_entry & e, int timeout_ms) {
        const auto t0 = clock::now();
        const double rows0 = m.rows_s.load();
        const int64_t done = whisper_audio_pipeline_poll(e.pipe, timeout_ms);
        metrics::add(m.poll_s, std::chrono::duration<double>(clock::now() - t0).count() - (m.rows_s.load() - rows0));
        if (done < 0) { fail_entry(e.opt, whisper_audio_last_error()); return false; }
        for (int64_t k = e.done; k < done; k++) complete(e, k);
        e.done = done;
        long long batches = 0, windows = 0;
        for (whisper_audio_encoder * enc : e.encs) {
            const whisper_audio_timings t = whisper_audio_encoder_timings(enc);
            batches += t.n_batches;
            windows += t.n_windows;
        }
        m.batches += batches - e.batches_seen;
        m.batch_windows += windows - e.windows_seen;
        e.batches_seen = batches;
        e.windows_seen = windows;
        return true;
    }

    void loop() {
        for (;;) {
            std::vector<std::shared_ptr<request>> taken, gone;
            bool busy = false;
            for (auto & p : pipes) busy |= !p.second.idle();
            {
                std::unique_lock<std::mutex> lock(mu);
                if (!busy) cv.wait(lock, [&] { return stopping || !queue.empty() || !cancels.empty(); });
                if (!busy && queue.empty() && stopping) return;      // nothing left
                taken.assign(queue.begin(), queue.end());
                queue.clear();
                gone.swap(cancels);
            }
            for (auto & r : taken) push_request(r);
            for (auto & r : gone) release(r);
            gone.clear();
            // each pipeline: a window of its next input pushed, a short batch flushed when due,
            // then its rows; the first one waits up to 1 ms for its next batch when nothing came
            // in and nothing is left to push (the loop's pace while busy)
            std::vector<options> busy_now;
            bool pushing = false;
            for (auto & p : pipes) {
                if (!p.second.idle()) busy_now.push_back(p.first);
                pushing |= !p.second.to_push.empty();
            }
            int wait_ms = taken.empty() && !pushing ? 1 : 0;
            for (const options & o : busy_now) {
                auto it = pipes.find(o);
                if (it == pipes.end() || !feed(it->second)) continue;
                maybe_flush(it->second);
                it = pipes.find(o);
                if (it == pipes.end()) continue;
                poll(it->second, wait_ms);
                wait_ms = 0;
            }
        }
    }

    void start() { thread = std::thread([this] { loop(); }); }
    // Encodes what is queued and in flight, then the thread ends.
    void stop() {
        { std::lock_guard<std::mutex> lock(mu); stopping = true; }
        cv.notify_all();
        if (thread.joinable()) thread.join();
        for (auto & p : pipes) free_entry(p.second);
        pipes.clear();
    }
};

// =====================================================================================
// HTTP: the endpoints
// =====================================================================================

struct http_error {
    int status;
    std::string message;
};

static std::string error_json(int status, const std::string & message) {
    const char * type = status == 401 ? "authentication_error" : status == 503 ? "unavailable_error"
                      : status >= 500 ? "server_error" : "invalid_request_error";
    return "{\"error\": {\"code\": " + std::to_string(status) + ", \"message\": \"" + json_escape(message) +
           "\", \"type\": \"" + type + "\"}}\n";
}

static void set_error(httplib::Response & res, int status, const std::string & message) {
    res.status = status;
    res.set_content(error_json(status, message), "application/json");
}

// An option's value from a query parameter, a multipart field or a JSON field, into o; an
// encoding_format into fmt. false with the message for an unknown name or a bad value.
static bool set_option(options & o, std::string & fmt, const std::string & key, const json & v, std::string & err) {
    auto as_bool = [&](bool & dst) {
        if (v.type == json::BOOL) { dst = v.b; return true; }
        if (v.type == json::STRING && (v.str == "true" || v.str == "1")) { dst = true; return true; }
        if (v.type == json::STRING && (v.str == "false" || v.str == "0")) { dst = false; return true; }
        err = "'" + key + "' must be true or false";
        return false;
    };
    if (key == "no_pad") return as_bool(o.no_pad);
    if (key == "final_ln") return as_bool(o.final_ln);
    if (key == "projector") return as_bool(o.projector);
    if (key == "layer") {
        int n = -2;
        if (v.type == json::NUMBER && v.num == std::floor(v.num) && v.num >= -1 && v.num <= 4096) n = (int)v.num;
        else if (v.type == json::STRING && !parse_int(v.str.c_str(), -1, 4096, &n)) n = -2;
        if (n < -1) { err = "'layer' must be an encoder layer's index (0-based), or -1 for the last"; return false; }
        o.layer = n;
        return true;
    }
    const std::string s = v.type == json::STRING ? v.str : v.type == json::NUL ? "null" : "";
    if (key == "pool") {
        if (s == "mean" || s == "none" || s == "null") { o.pool_mean = s == "mean"; return true; }
        err = "'pool' must be \"mean\" or \"none\"";
        return false;
    }
    if (key == "outtype") {
        if (s == "f32" || s == "f16") { o.f16 = s == "f16"; return true; }
        err = "'outtype' must be \"f32\" or \"f16\"";
        return false;
    }
    if (key == "encoding_format") {
        if (s == "float" || s == "base64") { fmt = s; return true; }
        err = "'encoding_format' must be \"float\" or \"base64\"";
        return false;
    }
    if (key == "model" || key == "user") return true;        // OpenAI clients send them; one model is served
    err = "unknown option '" + key + "' (layer, pool, no_pad, final_ln, projector, outtype, encoding_format)";
    return false;
}

static json json_string(const std::string & s) {
    json v;
    v.type = json::STRING;
    v.str = s;
    return v;
}

// The rules main applies to its flags, for a request's options; "" when they hold.
static std::string check_options(const options & o, const whisper_audio_hparams & hp) {
    if (o.layer >= hp.n_layer)
        return "layer " + std::to_string(o.layer) + ": the model has layers 0 to " + std::to_string(hp.n_layer - 1);
    const bool encoder_options = o.layer >= 0 || !o.final_ln || o.pool_mean || o.no_pad;
    if (!o.projector && hp.projector == WHISPER_AUDIO_PROJECTOR_NONE)
        return "projector false: the model is a Whisper encoder without an audio-LLM projector";
    if (!o.projector && encoder_options)
        return "projector false gives the audio tower's output; layer, final_ln, pool and no_pad the Whisper encoder's: choose one";
    return "";
}

// =====================================================================================
// HTTP connections: request heads read outside the worker pool
// =====================================================================================
//
// cpp-httplib 0.11 gives each accepted connection a worker of its pool at once, and the worker
// waits for the request's head with a timeout per read: a client that sends a header line
// every few seconds holds a worker for as long as it likes, and --http-threads such clients
// hold them all (70 of them left /health unanswered for 43 s and more). What the library lets
// us change: its listening thread hands each accepted socket to process_and_close_socket (a
// virtual that a subclass overrides) through the task queue (new_task_queue), and
// process_request (protected) serves one request from any Stream.
//
// The remedies weighed: a deadline for the whole head alone still lets --http-threads slow
// clients hold every worker for the deadline, and again as they reconnect; more threads cost
// the server more than the attacker; a connection cap per client address does nothing against
// many addresses, and behind a proxy (or on loopback) every client is one address; a worker
// kept for /health cannot know a request is /health before its head is read, which is the
// problem. So the heads are read outside the pool: the listening thread gives each socket to
// one thread (`heads`, epoll) that watches every connection until its whole head (request
// line and headers, at most HEAD_MAX bytes) is in the kernel's buffer, as a MSG_PEEK shows;
// only then does a worker take it, and it reads the head at once. A slow head costs a socket
// and a few bytes, never a thread; its deadline (--head-timeout, the whole head) ends it with
// a 408, and past MAX_PENDING waiting heads the oldest is closed, so that a new client gets in
// while file descriptors last. A GET of /health, /metrics or the models goes to a worker of its
// own (LIGHT_THREADS), so that it answers while every worker is busy encoding. A body is read
// by its worker under a whole-body deadline (--timeout) and a minimum rate after its first
// BODY_GRACE_S (--min-body-rate): a trickled body gives its worker back within seconds.

struct connection {
    int fd = -1;
    std::chrono::steady_clock::time_point since;   // the start of the wait for its next head
    bool any = false;                              // a byte of that head has come
    int served = 0;                                // requests answered on it
};

// The socket as cpp-httplib's Stream: reads wait at most until the head's or the body's
// deadline, writes at most the write timeout; a read past a deadline fails, and says why.
struct connection_stream : httplib::Stream {
    using clock = std::chrono::steady_clock;
    static constexpr double BODY_GRACE_S = 5;   // a client that pauses before its body (a loaded machine) is not cut
    int fd;
    clock::time_point head_deadline, body_start;
    bool in_body = false;
    size_t body_bytes = 0;
    double body_timeout_s = 30, min_rate = 0;      // bytes per second after BODY_GRACE_S (0: none)
    int write_timeout_ms = 30000;
    const char * too_slow = nullptr;               // the rule a read broke

    connection_stream(int f, const server_params & sp) : fd(f) {
        head_deadline = clock::now() + std::chrono::seconds(sp.head_timeout_s);
        body_timeout_s = sp.timeout_s;
        min_rate = sp.min_body_rate_kb * 1024.0;
        write_timeout_ms = sp.timeout_s * 1000;
    }
    void start_body() { in_body = true; body_start = clock::now(); body_bytes = 0; }
    // ms until the next byte must have come (<= 0: too late), and the rule that says so
    int read_wait_ms(const char ** rule) const {
        const auto now = clock::now();
        auto ms = [&](clock::time_point t) { return (int)std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count(); };
        if (!in_body) { *rule = "head"; return ms(head_deadline); }
        *rule = "timeout";
        int wait = ms(body_start + std::chrono::milliseconds((long long)(body_timeout_s * 1000)));
        if (min_rate > 0) {
            const int rate_wait = ms(body_start + std::chrono::milliseconds((long long)((BODY_GRACE_S + body_bytes / min_rate) * 1000)));
            if (rate_wait < wait) { wait = rate_wait; *rule = "rate"; }
        }
        return wait;
    }
    bool wait_for(short events, int ms) const {
        pollfd p{fd, events, 0};
        int rc;
        while ((rc = ::poll(&p, 1, std::max(ms, 0))) < 0 && errno == EINTR) {}
        return rc > 0;
    }
    bool is_readable() const override {
        const char * rule = nullptr;
        return wait_for(POLLIN, read_wait_ms(&rule));
    }
    bool is_writable() const override { return wait_for(POLLOUT, write_timeout_ms); }
    ssize_t read(char * ptr, size_t size) override {
        const char * rule = nullptr;
        const int ms = read_wait_ms(&rule);
        if (ms <= 0 || !wait_for(POLLIN, ms)) { too_slow = rule; return -1; }
        ssize_t n;
        while ((n = ::recv(fd, ptr, size, 0)) < 0 && errno == EINTR) {}
        if (n > 0 && in_body) body_bytes += (size_t)n;
        return n;
    }
    ssize_t write(const char * ptr, size_t size) override {
        if (!wait_for(POLLOUT, write_timeout_ms)) return -1;
        ssize_t n;
        while ((n = ::send(fd, ptr, size, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
        return n;
    }
    static void ip_and_port(const sockaddr_storage & a, std::string & ip, int & port) {
        char host[INET6_ADDRSTRLEN] = "";
        if (a.ss_family == AF_INET) {
            const sockaddr_in & v4 = (const sockaddr_in &)a;
            inet_ntop(AF_INET, &v4.sin_addr, host, sizeof(host));
            port = ntohs(v4.sin_port);
        } else if (a.ss_family == AF_INET6) {
            const sockaddr_in6 & v6 = (const sockaddr_in6 &)a;
            inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof(host));
            port = ntohs(v6.sin6_port);
        }
        ip = host;
    }
    void get_remote_ip_and_port(std::string & ip, int & port) const override {
        sockaddr_storage a{};
        socklen_t len = sizeof(a);
        if (getpeername(fd, (sockaddr *)&a, &len) == 0) ip_and_port(a, ip, port);
    }
    void get_local_ip_and_port(std::string & ip, int & port) const override {
        sockaddr_storage a{};
        socklen_t len = sizeof(a);
        if (getsockname(fd, (sockaddr *)&a, &len) == 0) ip_and_port(a, ip, port);
    }
    socket_t socket() const override { return fd; }
};

// The stream of the request this thread serves (a handler sees its socket and its deadlines).
static thread_local connection_stream * t_stream = nullptr;

// cpp-httplib's listening thread runs each accepted socket's task on itself: it only hands the
// socket to the heads thread.
struct inline_queue : httplib::TaskQueue {
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
};

struct http_server : httplib::Server {
    using clock = std::chrono::steady_clock;
    static constexpr size_t HEAD_MAX = 64 << 10;   // a head's bytes (cpp-httplib reads lines of 8 KB)
    static constexpr int LIGHT_THREADS = 2;
    const server_params & sp;
    size_t max_pending = 4096;
    std::unique_ptr<httplib::ThreadPool> pool, light;

    std::mutex mu;
    std::map<int, connection *> pending;           // waiting for their heads, by socket
    int ep = -1;                                   // epoll, edge-triggered: a wake-up for each arrival
    bool stopped = false;
    std::thread heads;

    explicit http_server(const server_params & p) : sp(p) {
        new_task_queue = [] { return new inline_queue(); };
    }

    void start() {
        // as many waiting heads as file descriptors allow, leaving room for the rest of the server
        rlimit rl{};
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            if (rl.rlim_cur < rl.rlim_max) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); getrlimit(RLIMIT_NOFILE, &rl); }
            max_pending = (size_t)std::max<rlim_t>(64, std::min<rlim_t>(rl.rlim_cur, 1 << 17) - 256);
        }
        pool.reset(new httplib::ThreadPool((size_t)sp.http_threads));
        light.reset(new httplib::ThreadPool(LIGHT_THREADS));
        ep = epoll_create1(EPOLL_CLOEXEC);
        heads = std::thread([this] { watch(); });
    }

    // After the listener has stopped: the waiting heads closed, the requests being served finished.
    void finish() {
        {
            std::lock_guard<std::mutex> lock(mu);
            stopped = true;
        }
        if (heads.joinable()) heads.join();
        for (auto & kv : pending) drop(kv.second);
        pending.clear();
        if (pool) pool->shutdown();
        if (light) light->shutdown();
        if (ep >= 0) close(ep);
    }

    static void drop(connection * c) {
        ::shutdown(c->fd, SHUT_RDWR);
        ::close(c->fd);
        delete c;
    }

    bool process_and_close_socket(socket_t sock) override {
        connection * c = new connection();
        c->fd = sock;
        c->since = clock::now();
        wait_head(c);
        return true;
    }

    // The connection waits for its next head among the others.
    void wait_head(connection * c) {
        std::lock_guard<std::mutex> lock(mu);
        if (stopped) { drop(c); return; }
        if (pending.size() >= max_pending) {       // the oldest waiting head makes room
            auto oldest = pending.begin();
            for (auto i = pending.begin(); i != pending.end(); ++i) if (i->second->since < oldest->second->since) oldest = i;
            epoll_ctl(ep, EPOLL_CTL_DEL, oldest->first, nullptr);
            drop(oldest->second);
            pending.erase(oldest);
        }
        pending[c->fd] = c;
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
        ev.data.fd = c->fd;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) { pending.erase(c->fd); drop(c); }
    }

    // A bad or late head's answer, written without waiting (the client may read nothing), then closed.
    static void refuse(connection * c, int status, const char * reason, const std::string & message) {
        const std::string body = error_json(status, message);
        const std::string msg = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
        (void)!::send(c->fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        drop(c);
    }

    // The heads thread: a connection whose head has come whole goes to a worker; one past its
    // deadline, closed or over HEAD_MAX goes.
    void watch() {
        std::vector<epoll_event> evs(256);
        std::vector<char> peek(HEAD_MAX);
        auto last_sweep = clock::now();
        for (;;) {
            const int n = epoll_wait(ep, evs.data(), (int)evs.size(), 100);
            std::lock_guard<std::mutex> lock(mu);
            if (stopped) return;
            for (int i = 0; i < n; i++) {
                auto it = pending.find(evs[i].data.fd);
                if (it == pending.end()) continue;
                connection * c = it->second;
                const ssize_t got = ::recv(c->fd, peek.data(), peek.size(), MSG_PEEK | MSG_DONTWAIT);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                    forget(it);
                    drop(c);
                    continue;
                }
                if (got < 0) continue;
                if (!c->any && c->served > 0) c->since = clock::now();   // a kept-alive connection's next head begins
                c->any = true;
                const char * p = peek.data();
                const char * end = p + got;
                bool whole = false;                // an empty line ends the head ("\n\n" or "\n\r\n")
                for (const char * q = p; (q = (const char *)memchr(q, '\n', (size_t)(end - q))) != nullptr; q++) {
                    if ((q + 1 < end && q[1] == '\n') || (q + 2 < end && q[1] == '\r' && q[2] == '\n')) { whole = true; break; }
                }
                if (whole) {
                    const bool is_light = got >= 4 && memcmp(p, "GET ", 4) == 0 &&
                                          (starts(p, end, "GET /health") || starts(p, end, "GET /metrics") ||
                                           starts(p, end, "GET /v1/models") || starts(p, end, "GET /models"));
                    forget(it);
                    (is_light ? light : pool)->enqueue([this, c] { serve(c); });
                } else if ((size_t)got >= HEAD_MAX) {
                    forget(it);
                    refuse(c, 431, "Request Header Fields Too Large", "the request's head is larger than 64 KB");
                } else if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                    forget(it);                    // gone before its head was whole
                    drop(c);
                }
            }
            const auto now = clock::now();
            if (now - last_sweep < std::chrono::milliseconds(100)) continue;
            last_sweep = now;
            for (auto it = pending.begin(); it != pending.end();) {
                connection * c = it->second;
                const bool idle = c->served > 0 && !c->any;   // kept alive, nothing sent yet
                const auto limit = std::chrono::seconds(idle ? (long)keep_alive_timeout_sec_ : (long)sp.head_timeout_s);
                if (now - c->since < limit) { ++it; continue; }
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
                it = pending.erase(it);
                if (idle) drop(c);
                else refuse(c, 408, "Request Timeout", "the request's head took longer than --head-timeout " +
                                                       std::to_string(sp.head_timeout_s) + " s");
            }
        }
    }
    static bool starts(const char * p, const char * end, const char * what) {
        const size_t n = strlen(what);
        return (size_t)(end - p) > n && memcmp(p, what, n) == 0 && (p[n] == ' ' || p[n] == '?');
    }
    void forget(std::map<int, connection *>::iterator it) {
        epoll_ctl(ep, EPOLL_CTL_DEL, it->first, nullptr);
        pending.erase(it);
    }

    // On a worker: one request, its head already whole in the kernel's buffer; then the
    // connection waits for its next head, or closes.
    void serve(connection * c) {
        connection_stream strm(c->fd, sp);
        t_stream = &strm;
        bool closed = false;
        const bool last = c->served + 1 >= (int)keep_alive_max_count_;
        const bool ok = process_request(strm, last, closed, [&](httplib::Request &) { strm.start_body(); });
        t_stream = nullptr;
        c->served++;
        if (!ok || closed || last || strm.too_slow) { drop(c); return; }
        c->since = clock::now();
        c->any = false;
        wait_head(c);
    }
};

struct server {
    server_params sp;
    whisper_audio_model * model = nullptr;
    std::unique_ptr<dispatcher> disp;
    metrics m;
    std::string model_name;
    std::atomic<bool> ready{false}, stopping{false};
    std::atomic<int> in_flight{0};
    audio_budget budget;                  // --max-audio-mb, in samples
    http_server http{sp};
    int listen_fd = -1;                   // the listening socket (setup's hook)
    std::chrono::steady_clock::time_point t_start = std::chrono::steady_clock::now();

    // ---- the body: raw audio, multipart file=, or JSON -----------------------------------

    // Reads the request body (at most --max-body-mb, within --timeout) into audio items and options.
    void read_request(const httplib::Request & req, const httplib::ContentReader & reader, options & o,
                      std::string & fmt, std::vector<std::string> & audio) {
        const size_t limit = (size_t)sp.max_body_mb << 20;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(sp.timeout_s);
        std::string err;
        bool too_big = false, too_slow = false;
        auto guard = [&](size_t have, size_t more) {
            if (have + more > limit) { too_big = true; return false; }
            if (std::chrono::steady_clock::now() > deadline) { too_slow = true; return false; }
            return true;
        };
        // query options first; body fields may override them
        for (const auto & q : req.params)
            if (!set_option(o, fmt, q.first, json_string(q.second), err)) throw http_error{400, err};
        const std::string declared = req.get_header_value("Content-Length");
        if (!declared.empty() && (declared.size() > 15 || strtoull(declared.c_str(), nullptr, 10) > limit))
            throw http_error{413, "the request body is larger than --max-body-mb " + std::to_string(sp.max_body_mb) + " MB"};
        bool read_ok;
        std::string body;
        if (req.is_multipart_form_data()) {
            std::map<std::string, std::string> fields;
            std::string * cur = nullptr;
            size_t total = 0;
            bool has_file = false;
            read_ok = reader(
                [&](const httplib::MultipartFormData & part) {
                    if (part.name == "file") { audio.emplace_back(); cur = &audio.back(); has_file = true; }
                    else cur = &fields[part.name];
                    return true;
                },
                [&](const char * d, size_t n) {
                    if (!guard(total, n)) return false;
                    total += n;
                    cur->append(d, n);
                    return true;
                });
            if (read_ok && !too_big && !too_slow) {
                for (const auto & f : fields)
                    if (!set_option(o, fmt, f.first, json_string(f.second), err)) throw http_error{400, err};
                if (!has_file) throw http_error{400, "the multipart body has no 'file' part (the audio)"};
            }
        } else {
            read_ok = reader([&](const char * d, size_t n) {
                if (!guard(body.size(), n)) return false;
                body.append(d, n);
                return true;
            });
        }
        if (too_big) throw http_error{413, "the request body is larger than --max-body-mb " + std::to_string(sp.max_body_mb) + " MB"};
        const char * slow = t_stream ? t_stream->too_slow : nullptr;
        if (too_slow || (slow && strcmp(slow, "timeout") == 0))
            throw http_error{408, "the request body took longer than --timeout " + std::to_string(sp.timeout_s) + " s"};
        if (slow && strcmp(slow, "rate") == 0)
            throw http_error{408, "the request body came slower than --min-body-rate " + std::to_string(sp.min_body_rate_kb) + " KB/s"};
        if (!read_ok) throw http_error{400, "the request body could not be read (cut short?)"};
        if (req.is_multipart_form_data()) return;
        const std::string ct = req.get_header_value("Content-Type");
        if (ct.rfind("application/json", 0) == 0) {
            json j;
            json_parser jp;
            if (!jp.parse(body, j)) throw http_error{400, "bad JSON: " + jp.error};
            if (j.type != json::OBJECT) throw http_error{400, "the JSON body must be an object with an \"input\""};
            const json * input = nullptr;
            for (const auto & f : j.fields) {
                if (f.first == "input") { input = &f.second; continue; }
                if (!set_option(o, fmt, f.first, f.second, err)) throw http_error{400, err};
            }
            if (!input) throw http_error{400, "the JSON body has no \"input\" (base64 audio, or a list of them)"};
            std::vector<const json *> items;
            if (input->type == json::STRING) items.push_back(input);
            else if (input->type == json::ARRAY) for (const json & x : input->items) items.push_back(&x);
            if (items.empty()) throw http_error{400, "\"input\" must be a base64 string or a non-empty list of them"};
            for (size_t i = 0; i < items.size(); i++) {
                audio.emplace_back();
                if (items[i]->type != json::STRING || !base64_decode(items[i]->str, audio.back()))
                    throw http_error{400, "\"input\"" + (input->type == json::ARRAY ? "[" + std::to_string(i) + "]" : std::string()) +
                                          " is not base64 audio"};
            }
        } else {
            // raw audio, whatever the Content-Type says (curl --data-binary sends form-urlencoded)
            audio.push_back(std::move(body));
        }
    }

    // ---- POST /v1/audio/embeddings --------------------------------------------------------

    // Decodes an input's encoded bytes into in.pcm (its first `used` samples kept; the rest
    // counted), stopping at a limit rather than after it: --max-audio-s of the input, what is
    // left of --max-request-audio-s for the request, and the server's --max-audio-mb, charged a
    // block at a time as samples come. A header's length is never trusted ahead (it may lie):
    // the decoder's samples are. An input cut short decodes what is there, with main's warning.
    void decode_input(const std::string & bytes, input & in, size_t used, size_t request_left, request & r,
                      const std::string & where, httplib::Response & res) {
        whisper_audio_info info;
        std::unique_ptr<whisper_audio_stream, void (*)(whisper_audio_stream *)> st(
            whisper_audio_stream_open_memory(bytes.data(), bytes.size(), &info), whisper_audio_stream_close);
        if (!st) throw http_error{400, where + whisper_audio_last_error()};
        const size_t input_max = (size_t)sp.max_audio_s * WHISPER_AUDIO_SAMPLE_RATE;
        const size_t limit = std::min(input_max, request_left);
        std::vector<float> past;                  // samples past `used`: counted, not kept
        while (in.samples <= limit) {
            size_t room = 0;
            float * dst = nullptr;
            if (in.samples < used) {
                dst = in.pcm.tail(&room);
                if (!dst) {
                    if (r.charged + in.pcm.next_block() > budget.limit)   // more than the whole budget: no retry helps
                        throw http_error{413, where + "the request's decoded audio is larger than --max-audio-mb " +
                                              std::to_string(sp.max_audio_mb) + " MB (decoding stopped there)"};
                    if (!r.charge(in.pcm.next_block())) {
                        m.rejected_budget++;
                        res.set_header("Retry-After", "2");
                        throw http_error{503, "the server holds its --max-audio-mb " + std::to_string(sp.max_audio_mb) +
                                              " MB of decoded audio for other requests; retry later"};
                    }
                    in.pcm.add_block();
                    dst = in.pcm.tail(&room);
                }
                room = std::min(room, used - in.samples);
            } else {
                past.resize(1 << 16);
                dst = past.data();
                room = past.size();
            }
            const int64_t got = whisper_audio_stream_read(st.get(), dst, std::min(room, limit + 1 - in.samples));
            if (got < 0) throw http_error{400, where + whisper_audio_last_error()};
            if (got == 0) break;
            if (in.samples < used) in.pcm.n += (size_t)got;
            in.samples += (size_t)got;
        }
        if (in.samples == 0) throw http_error{400, where + "no audio samples"};
        if (in.samples > input_max)
            throw http_error{413, where + "the audio is longer than --max-audio-s " + std::to_string(sp.max_audio_s) +
                                  " s (decoding stopped there)"};
        if (in.samples > request_left)
            throw http_error{413, where + "the request's audio is longer than --max-request-audio-s " +
                                  std::to_string(sp.max_request_audio_s) + " s, its inputs together (decoding stopped there)"};
        const char * w = whisper_audio_stream_warning(st.get());
        if (w) in.warning = w;
    }

    // The bytes of an input's rows where the rules say them ahead (Whisper's windows, positions
    // or pooled vectors; 0 for a tower's tokens, which grow as they come): the buffer is made
    // and its pages touched on the HTTP worker, so that the dispatcher only copies into it.
    size_t expected_bytes(const options & o, bool tokens, size_t n) const {
        if (tokens) return 0;
        const whisper_audio_hparams & hp = *whisper_audio_model_hparams(model);
        const size_t rows = o.pool_mean ? whisper_audio_n_windows(n)
                          : o.no_pad ? whisper_audio_n_positions_total(n)
                          : whisper_audio_n_windows(n) * (size_t)hp.n_ctx;
        return rows * (size_t)hp.n_state * (o.f16 ? 2 : 4);
    }

    // Waits for the request's answer; false when its client disconnects first. cpp-httplib 0.11
    // shows a disconnect only to a streamed response, after the status is sent; the worker's
    // stream knows the socket, polled for the peer's hang-up while the request waits. (A client
    // that half-closes its side after sending counts as gone, as for nginx.)
    static bool wait_or_client_gone(request & r) {
        const int fd = t_stream ? t_stream->fd : -1;
        std::unique_lock<std::mutex> lock(r.mu);
        while (!r.cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return r.done; })) {
            if (fd < 0) continue;
            pollfd p{fd, POLLRDHUP, 0};
            if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
        }
        return true;
    }

    void embeddings(const httplib::Request & req, httplib::Response & res, const httplib::ContentReader & reader) {
        const auto t0 = std::chrono::steady_clock::now();
        in_flight++;
        m.requests++;
        try {
            if (stopping) throw http_error{503, "the server is shutting down"};
            if (!ready) throw http_error{503, "the model is loading"};
            auto r = std::make_shared<request>();
            std::string fmt = "float";
            std::vector<std::string> audio;
            read_request(req, reader, r->opt, fmt, audio);
            if ((int)audio.size() > sp.max_inputs)
                throw http_error{400, std::to_string(audio.size()) + " inputs: at most --max-inputs " + std::to_string(sp.max_inputs)};
            const std::string accept = req.get_header_value("Accept");
            const bool npy = accept.find("application/x-npy") != std::string::npos;
            if (npy && audio.size() != 1) throw http_error{400, "Accept: application/x-npy returns one array: send one input"};
            const std::string bad = check_options(r->opt, *whisper_audio_model_hparams(model));
            if (!bad.empty()) throw http_error{400, bad};
            const bool tokens = disp->tokens(r->opt);
            const size_t used = whisper_audio_samples_used(model, tokens);
            r->budget = &budget;
            r->inputs.resize(audio.size());
            size_t request_left = (size_t)sp.max_request_audio_s * WHISPER_AUDIO_SAMPLE_RATE;
            for (size_t i = 0; i < audio.size(); i++) {
                const std::string where = audio.size() > 1 ? "input " + std::to_string(i) + ": " : "";
                if (audio[i].empty()) throw http_error{400, where + "no audio: the body is empty"};
                input & in = r->inputs[i];
                decode_input(audio[i], in, used, request_left, *r, where, res);
                std::string().swap(audio[i]);
                request_left -= in.samples;
                in.data.resize(expected_bytes(r->opt, tokens, std::min(in.samples, used)));
                if (!in.warning.empty()) fprintf(stderr, "server: warning: %s%s\n", where.c_str(), in.warning.c_str());
            }
            if (!disp->submit(r)) {
                m.rejected_busy++;
                res.set_header("Retry-After", "1");
                throw http_error{503, stopping ? "the server is shutting down" : "the queue is full (--max-queue " + std::to_string(sp.max_queue) + "); retry later"};
            }
            if (!wait_or_client_gone(*r)) {
                disp->cancel(r);
                throw http_error{499, "the client disconnected before the answer"};
            }
            if (!r->error.empty()) throw http_error{500, r->error};
            respond(r, npy, fmt, tokens, res);
            double audio_s = 0;
            for (const input & in : r->inputs) audio_s += (double)in.samples / WHISPER_AUDIO_SAMPLE_RATE;
            metrics::add(m.audio_s, audio_s);
            m.inputs += (long long)r->inputs.size();
        } catch (const http_error & e) {
            m.requests_failed++;
            set_error(res, e.status, e.message);
        } catch (const std::bad_alloc &) {
            m.requests_failed++;
            set_error(res, 500, "out of memory");
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        m.observe_latency(s);
        char ms[32];
        snprintf(ms, sizeof(ms), "%.1f", s * 1000);
        res.set_header("X-Processing-Ms", ms);
        in_flight--;
    }

    // ---- POST /v1/audio/embeddings/stream ---------------------------------------------------
    //
    // A live input: the body (chunked, or of a length) is raw PCM (?format=s16le or f32le: 16 kHz
    // mono) or audio found by content (a WAV stream), decoded as it comes by the library's live
    // stream (whisper_audio_stream_open_live, reading a pipe that the body is written into), into a
    // streaming pipeline of the stream's own encoder. The answer is chunked JSON Lines
    // (application/x-ndjson), sent while the body still comes: a line per window as soon as its rows
    // are out, its rows base64 (f32, or f16 with outtype f16), then a last line {"object": "done"},
    // or {"error": {...}} when the stream fails after its status was sent (a limit, bad audio).
    // Limits: --max-streams at once (503), --max-body-mb of body and --max-audio-s of audio (the
    // stream stops there with an error line), --min-body-rate, and --max-audio-s + --timeout for the
    // whole body in place of --timeout (a live body lasts as long as its audio).
    std::atomic<int> streams{0};

    struct live_stream {
        whisper_audio_encoder * enc = nullptr;
        whisper_audio_pipeline * pipe = nullptr;
        whisper_audio_live_params lp = whisper_audio_live_default_params();
        std::string raw;
        httplib::DataSink * sink = nullptr;
        size_t window_end = 0, windows = 0;
        bool write_failed = false;
        ~live_stream() {
            whisper_audio_pipeline_free(pipe);
            whisper_audio_encoder_free(enc);
        }
        bool write_line(const std::string & line) {
            write_failed = write_failed || !sink->write(line.data(), line.size());
            return !write_failed;
        }
        static bool on_rows(const whisper_audio_rows * r, void * user) {
            live_stream * ls = (live_stream *)user;
            ls->window_end += r->samples;
            ls->windows++;
            std::string line = "{\"object\": \"embedding.window\", \"window\": " + std::to_string(r->window) +
                               ", \"samples\": " + std::to_string(r->samples) + ", \"end_s\": " +
                               std::to_string((double)ls->window_end / WHISPER_AUDIO_SAMPLE_RATE) +
                               ", \"audio_positions\": " + std::to_string(r->audio_positions) + ", \"shape\": [" +
                               std::to_string(r->n_rows) + ", " + std::to_string(r->n_state) + "], \"dtype\": \"" +
                               (r->f16 ? "float16" : "float32") + "\", \"embedding\": \"";
            base64_encode((const uint8_t *)r->data, (size_t)r->n_rows * r->n_state * (r->f16 ? 2 : 4), line);
            line += "\"}\n";
            return ls->write_line(line);
        }
    };

    void stream_embeddings(const httplib::Request & req, httplib::Response & res, const httplib::ContentReader & reader) {
        m.requests++;
        bool counted = false;
        try {
            if (stopping) throw http_error{503, "the server is shutting down"};
            if (!ready) throw http_error{503, "the model is loading"};
            options o;
            std::string fmt = "base64", err;
            auto ls = std::make_shared<live_stream>();
            for (const auto & q : req.params) {
                if (q.first == "format") {
                    if (q.second != "s16le" && q.second != "f32le")
                        throw http_error{400, "'format' must be s16le or f32le (raw 16 kHz mono PCM), or left out (found by content)"};
                    ls->raw = q.second;
                    continue;
                }
                if (!set_option(o, fmt, q.first, json_string(q.second), err)) throw http_error{400, err};
            }
            if (fmt != "base64") throw http_error{400, "a stream's rows come as base64 (encoding_format base64)"};
            const std::string bad = check_options(o, *whisper_audio_model_hparams(model));
            if (!bad.empty()) throw http_error{400, bad};
            whisper_audio_pipeline_params pp = dispatcher::pipeline_params(o);
            pp.stream = true;
            const whisper_audio_encoder_params ep = disp->encoder_params(o, sp.gpus.empty() ? 0 : sp.gpus[0]);
            if (!whisper_audio_can_stream(model, ep, pp)) throw http_error{400, whisper_audio_last_error()};
            if (streams.fetch_add(1) >= sp.max_streams) {
                streams--;
                res.set_header("Retry-After", "1");
                throw http_error{503, "--max-streams " + std::to_string(sp.max_streams) + " live streams run already; retry later"};
            }
            counted = true;
            if (!(ls->enc = whisper_audio_encoder_init(model, ep))) throw http_error{500, whisper_audio_last_error()};
            pp.on_rows = live_stream::on_rows;
            pp.user = ls.get();
            if (!(ls->pipe = whisper_audio_pipeline_init(&ls->enc, 1, pp))) throw http_error{500, whisper_audio_last_error()};
            ls->lp.raw = ls->raw.empty() ? nullptr : ls->raw.c_str();
            if (t_stream) t_stream->body_timeout_s = (double)sp.max_audio_s + sp.timeout_s;
            counted = false;                  // the provider's releaser gives the slot back
            res.set_chunked_content_provider("application/x-ndjson",
                [this, ls, reader](size_t, httplib::DataSink & sink) {
                    ls->sink = &sink;
                    run_live(*ls, reader);
                    sink.done();
                    return true;
                },
                [this](bool) { streams--; });
        } catch (const http_error & e) {
            if (counted) streams--;
            m.requests_failed++;
            set_error(res, e.status, e.message);
        } catch (const std::bad_alloc &) {
            if (counted) streams--;
            m.requests_failed++;
            set_error(res, 500, "out of memory");
        }
    }

    // Three threads: this one writes the body into a pipe as it comes; a decoder reads the pipe
    // (the library's live stream) into a queue; a feeder pushes the queue into the pipeline and,
    // while nothing is there, polls it (5 ms), so that a window's rows go out within a poll of their
    // forward whether or not more body comes. A failure ends the stream with an error line.
    void run_live(live_stream & ls, const httplib::ContentReader & reader) {
        int fds[2];
        if (pipe(fds) != 0) { ls.write_line(error_json(500, std::string("pipe: ") + strerror(errno))); return; }
        std::mutex mu;
        std::condition_variable cv;
        std::vector<float> queued;
        bool decoded = false;                 // the decoder is done (the input's end, or its error)
        std::atomic<bool> stop{false};        // the feeder failed: the body is not read further
        std::string decode_error, failure;    // failure: a limit or the pipeline, the error line's message
        int failure_status = 400;
        bool at_limit = false;                // the audio stopped at --max-audio-s or a shutdown: what came before is encoded
        const int fd = t_stream ? t_stream->fd : -1;
        const size_t audio_max = (size_t)sp.max_audio_s * WHISPER_AUDIO_SAMPLE_RATE;
        const std::string path = "/dev/fd/" + std::to_string(fds[0]);
        std::thread decoder([&] {
            whisper_audio_info info;
            whisper_audio_stream * st = whisper_audio_stream_open_live(path.c_str(), ls.lp, &info);
            std::vector<float> buf(1 << 14);
            int64_t n = st ? 0 : -1;
            while (st && !stop && (n = whisper_audio_stream_read(st, buf.data(), buf.size())) > 0) {
                std::lock_guard<std::mutex> lock(mu);
                queued.insert(queued.end(), buf.begin(), buf.begin() + n);
                cv.notify_all();
            }
            whisper_audio_stream_close(st);
            close(fds[0]);                    // what the body still sends goes nowhere: its writes fail, not wait
            std::lock_guard<std::mutex> lock(mu);
            if (n < 0) decode_error = whisper_audio_last_error();
            decoded = true;
            cv.notify_all();
        });
        size_t samples = 0;
        std::thread feeder([&] {
            std::vector<float> got;
            auto fail = [&](int status, const std::string & msg) {
                failure_status = status;
                failure = ls.write_failed ? "" : msg;
                stop = true;
            };
            for (;;) {
                bool end;
                {
                    std::unique_lock<std::mutex> lock(mu);
                    got.swap(queued);
                    queued.clear();
                    end = decoded && got.empty();
                }
                if (end) break;
                if (stopping) {               // the server stops: the rows so far, then the error; the body's read ends
                    at_limit = true;
                    fail(503, "the server is shutting down (the stream stopped there)");
                    if (fd >= 0) ::shutdown(fd, SHUT_RD);
                    return;
                }
                if (got.empty()) {
                    if (whisper_audio_pipeline_poll(ls.pipe, 5) < 0) { fail(500, whisper_audio_last_error()); return; }
                    continue;
                }
                if (samples + got.size() > audio_max) {       // up to the limit, its windows' rows out, then the error
                    const size_t k = audio_max - samples;
                    if (k > 0 && !whisper_audio_pipeline_push(ls.pipe, got.data(), k)) { fail(500, whisper_audio_last_error()); return; }
                    samples += k;
                    at_limit = true;
                    fail(413, "the audio is longer than --max-audio-s " + std::to_string(sp.max_audio_s) + " s (the stream stopped there)");
                    return;
                }
                if (!whisper_audio_pipeline_push(ls.pipe, got.data(), got.size())) { fail(500, whisper_audio_last_error()); return; }
                samples += got.size();
            }
        });
        const size_t body_max = (size_t)sp.max_body_mb << 20;
        size_t body = 0;
        bool too_big = false;
        const bool read_ok = reader([&](const char * d, size_t n) {
            if (stop) return false;
            if (body + n > body_max) { too_big = true; return false; }
            body += n;
            for (size_t at = 0; at < n;) {    // the decoder may have stopped (bad audio): then the rest goes nowhere
                const ssize_t k = write(fds[1], d + at, n - at);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) break;
                at += (size_t)k;
            }
            return true;
        });
        close(fds[1]);                        // the input's end
        decoder.join();
        feeder.join();
        const char * slow = t_stream ? t_stream->too_slow : nullptr;
        if (at_limit && !ls.write_failed && !(whisper_audio_pipeline_end_input(ls.pipe) && whisper_audio_pipeline_finish(ls.pipe))) {
            failure_status = 500;
            failure = ls.write_failed ? "" : whisper_audio_last_error();
        }
        if (!failure.empty() || ls.write_failed) {
        } else if (too_big) {
            failure_status = 413;
            failure = "the stream's body is larger than --max-body-mb " + std::to_string(sp.max_body_mb) + " MB (it stopped there)";
        } else if (slow) {
            failure_status = 408;
            failure = strcmp(slow, "rate") == 0 ? "the stream's body came slower than --min-body-rate " + std::to_string(sp.min_body_rate_kb) + " KB/s"
                                                : "the stream's body took longer than --max-audio-s + --timeout";
        } else if (!read_ok && !stop) {
            failure = "the request body could not be read (cut short?)";
        } else if (!decode_error.empty()) {
            failure = decode_error;
        } else if (samples == 0) {
            failure = "no audio samples";
        } else if (!(whisper_audio_pipeline_end_input(ls.pipe) && whisper_audio_pipeline_finish(ls.pipe))) {
            failure_status = 500;
            failure = ls.write_failed ? "" : whisper_audio_last_error();
        }
        metrics::add(m.audio_s, (double)samples / WHISPER_AUDIO_SAMPLE_RATE);
        if (ls.write_failed) { m.cancelled++; return; }   // the client has gone
        if (!failure.empty()) {
            m.requests_failed++;
            ls.write_line(error_json(failure_status, failure));
            return;
        }
        m.inputs++;
        ls.write_line("{\"object\": \"done\", \"samples\": " + std::to_string(samples) + ", \"windows\": " +
                      std::to_string(ls.windows) + "}\n");
    }

    // The rows as main's .npy, or as OpenAI's embeddings list.
    void respond(const std::shared_ptr<request> & rp, bool npy, const std::string & fmt, bool tokens, httplib::Response & res) {
        const request & r = *rp;
        const whisper_audio_hparams & hp = *whisper_audio_model_hparams(model);
        const options & o = r.opt;
        const size_t d = tokens ? (size_t)whisper_audio_token_dim(model, o.projector) : (size_t)hp.n_state;
        // an input cut short was decoded as main decodes it, and main's warning goes with the
        // answer: in a header (a .npy has no room for it) and in its JSON entry
        for (size_t i = 0; i < r.inputs.size(); i++) {
            if (r.inputs[i].warning.empty()) continue;
            std::string w = (r.inputs.size() > 1 ? "input " + std::to_string(i) + ": " : "") + r.inputs[i].warning;
            for (char & c : w) if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f) c = '?';
            res.set_header("X-Audio-Warning", w);
            break;
        }
        auto shape_of = [&](const input & in) {
            std::vector<size_t> s{in.n_rows};
            if (!tokens && !o.pool_mean && !o.no_pad) s.push_back((size_t)hp.n_ctx);
            s.push_back(d);
            return s;
        };
        if (npy) {                  // main's header (npy.h), byte for byte
            const input & in = r.inputs[0];
            auto head = std::make_shared<std::string>(npy_header(shape_of(in), o.f16));
            // the rows go from the request's own buffer to the socket (a large answer copied
            // once less); httplib asks from an offset on, until the whole length is written
            res.set_content_provider(head->size() + in.data.size(), "application/x-npy",
                                     [rp, head](size_t off, size_t len, httplib::DataSink & sink) {
                const std::vector<uint8_t> & data = rp->inputs[0].data;
                if (off < head->size()) {
                    const size_t k = std::min(len, head->size() - off);
                    if (!sink.write(head->data() + off, k)) return false;
                    off += k;
                    len -= k;
                }
                return len == 0 || sink.write((const char *)data.data() + (off - head->size()), len);
            });
            return;
        }
        std::string out = "{\"object\": \"list\", \"data\": [";
        size_t windows = 0, rows = 0;
        double seconds = 0;
        for (size_t i = 0; i < r.inputs.size(); i++) {
            const input & in = r.inputs[i];
            windows += in.windows;
            rows += in.n_rows;
            seconds += (double)in.samples / WHISPER_AUDIO_SAMPLE_RATE;
            std::string shape;
            for (size_t x : shape_of(in)) shape += (shape.empty() ? "" : ", ") + std::to_string(x);
            out += std::string(i ? ", " : "") + "{\"object\": \"embedding\", \"index\": " + std::to_string(i) +
                   ", \"shape\": [" + shape + "], \"dtype\": \"" + (o.f16 ? "float16" : "float32") + "\", \"embedding\": ";
            if (fmt == "base64") {
                out += '"';
                base64_encode(in.data.data(), in.data.size(), out);
                out += '"';
            } else {
                const size_t n = in.data.size() / (o.f16 ? 2 : 4);
                out.reserve(out.size() + n * 12);
                out += '[';
                char buf[32];
                std::vector<float> block(o.f16 ? std::min<size_t>(n, 4096) : 0);
                for (size_t k = 0; k < n; k++) {
                    float v;
                    if (o.f16) {
                        if (k % 4096 == 0) whisper_audio_f16_to_f32((const uint16_t *)in.data.data() + k, block.data(), std::min<size_t>(4096, n - k));
                        v = block[k % 4096];
                    } else {
                        memcpy(&v, in.data.data() + 4 * k, 4);
                    }
                    const auto rc = std::to_chars(buf, buf + sizeof(buf), v);
                    if (k) out += ',';
                    out.append(buf, rc.ptr);
                }
                out += ']';
            }
            if (!in.warning.empty()) out += ", \"warning\": \"" + json_escape(in.warning) + "\"";
            out += '}';
        }
        // the model's name has any length (a path or --alias): appended, never formatted into a fixed buffer
        char usage[160];
        snprintf(usage, sizeof(usage), "\", \"usage\": {\"prompt_tokens\": 0, \"total_tokens\": 0, "
                 "\"audio_seconds\": %.6f, \"windows\": %zu, \"rows\": %zu}}\n", seconds, windows, rows);
        out += "], \"model\": \"" + json_escape(model_name) + usage;
        res.set_content(std::move(out), "application/json");
    }

    // ---- GET /health, /v1/models, /metrics ------------------------------------------------

    void health(httplib::Response & res) {
        if (ready && !stopping) res.set_content("{\"status\": \"ok\"}\n", "application/json");
        else set_error(res, 503, stopping ? "shutting down" : "loading model");
    }

    void models(httplib::Response & res) {
        if (!ready) { set_error(res, 503, "loading model"); return; }
        const whisper_audio_hparams & hp = *whisper_audio_model_hparams(model);
        const bool cpu = disp->backend == "cpu";
        std::string device = sp.device;
        for (size_t i = 0; i < sp.gpus.size(); i++) device += (i ? "," : ":") + std::to_string(sp.gpus[i]);
        // the strings (a device list of any length, the backend's name) appended, the numbers formatted
        char nums[512];
        snprintf(nums, sizeof(nums),
                 "{\"n_mels\": %d, \"n_ctx\": %d, \"n_state\": %d, \"n_head\": %d, \"n_layer\": %d, \"n_ff\": %d, "
                 "\"weights\": \"%s\", \"projector\": \"%s\", \"n_llm\": %d, \"token_dim\": %d, ",
                 hp.n_mels, hp.n_ctx, hp.n_state, hp.n_head, hp.n_layer, hp.n_ff, whisper_audio_weight_type_name(hp.weight_type),
                 whisper_audio_projector_name(hp.projector), hp.n_llm,
                 hp.projector == WHISPER_AUDIO_PROJECTOR_NONE ? hp.n_state : whisper_audio_token_dim(model, true));
        const std::string meta = nums + std::string("\"backend\": \"") + json_escape(disp->backend) + "\", \"device\": \"" +
                                 json_escape(device) + "\", \"dtype\": \"" + json_escape(cpu ? disp->dtype : sp.dtype) +
                                 "\", \"threads\": " + std::to_string(disp->n_threads_used) + ", \"batch\": " +
                                 std::to_string(sp.batch) + ", \"version\": \"" + json_escape(whisper_audio_version()) + "\"}";
        res.set_content("{\"object\": \"list\", \"data\": [{\"id\": \"" + json_escape(model_name) +
                        "\", \"object\": \"model\", \"owned_by\": \"whisper-audio\", \"meta\": " + meta + "}]}\n",
                        "application/json");
    }

    void metrics_text(httplib::Response & res) {
        std::string o;
        auto line = [&](const char * name, const char * type, const char * help, double v) {
            char b[256];
            snprintf(b, sizeof(b), "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
            o += b;
        };
        const double batches = (double)m.batches.load();
        line("whisper_audio_requests_total", "counter", "embedding requests received", (double)m.requests.load());
        line("whisper_audio_requests_failed_total", "counter", "embedding requests answered with an error", (double)m.requests_failed.load());
        line("whisper_audio_requests_rejected_total", "counter", "requests refused with 503 (queue full)", (double)m.rejected_busy.load());
        line("whisper_audio_requests_over_budget_total", "counter", "requests refused with 503 (--max-audio-mb of decoded audio held)",
             (double)m.rejected_budget.load());
        line("whisper_audio_decoded_audio_bytes", "gauge", "decoded audio held by requests (bytes of 16 kHz floats)",
             (double)budget.used.load() * sizeof(float));
        line("whisper_audio_requests_cancelled_total", "counter", "requests whose client left before the answer (windows released)", (double)m.cancelled.load());
        line("whisper_audio_inputs_total", "counter", "audio inputs encoded", (double)m.inputs.load());
        line("whisper_audio_audio_seconds_total", "counter", "seconds of audio encoded", m.audio_s.load());
        line("whisper_audio_windows_total", "counter", "windows (or a tower's chunks) encoded", (double)m.windows.load());
        line("whisper_audio_batches_total", "counter", "encoder batches run", batches);
        line("whisper_audio_batch_fill", "gauge", "windows per batch over the batch size, on average",
             batches > 0 ? (double)m.batch_windows.load() / batches / sp.batch : 0.0);
        line("whisper_audio_flushes_total", "counter", "short batches sent before they were full", (double)m.flushes.load());
        line("whisper_audio_queue_depth", "gauge", "requests waiting for the dispatcher", (double)disp->depth());
        line("whisper_audio_requests_in_flight", "gauge", "embedding requests being handled", (double)in_flight.load());
        o += "# HELP whisper_audio_dispatcher_seconds_total the dispatcher thread's time: pushing audio, copying rows out, polling (waits included)\n"
             "# TYPE whisper_audio_dispatcher_seconds_total counter\n";
        const std::pair<const char *, double> parts[] = {{"push", m.push_s.load()}, {"rows", m.rows_s.load()}, {"poll", m.poll_s.load()}};
        for (const auto & pt : parts) {
            char b[128];
            snprintf(b, sizeof(b), "whisper_audio_dispatcher_seconds_total{part=\"%s\"} %.6f\n", pt.first, pt.second);
            o += b;
        }
        o += "# HELP whisper_audio_request_seconds embedding request latency\n# TYPE whisper_audio_request_seconds histogram\n";
        long long cum = 0;
        const size_t nb = sizeof(metrics::BUCKETS) / sizeof(metrics::BUCKETS[0]);
        for (size_t k = 0; k <= nb; k++) {
            cum += m.latency_bucket[k].load();
            char b[128];
            if (k < nb) snprintf(b, sizeof(b), "whisper_audio_request_seconds_bucket{le=\"%g\"} %lld\n", metrics::BUCKETS[k], cum);
            else snprintf(b, sizeof(b), "whisper_audio_request_seconds_bucket{le=\"+Inf\"} %lld\n", cum);
            o += b;
        }
        char b[128];
        snprintf(b, sizeof(b), "whisper_audio_request_seconds_sum %.6f\nwhisper_audio_request_seconds_count %lld\n", m.latency_s_sum.load(), cum);
        o += b;
        res.set_content(o, "text/plain; version=0.0.4");
    }

    // ---- routes, auth, logging ------------------------------------------------------------

    void setup() {
        // cpp-httplib 0.11 (a compiled library) listens with a backlog of 5: a burst of clients
        // past it waits for the kernel's SYN retries (1 s, then 3 s: run B's 2.1 s p99 with 64
        // clients). Its socket-options hook shows us the listening socket; once bound, listen()
        // again sets a deep backlog (the kernel caps it at net.core.somaxconn).
        http.set_socket_options([this](socket_t sock) {
            httplib::default_socket_options(sock);
            listen_fd = sock;
        });
        http.set_payload_max_length(((size_t)sp.max_body_mb << 20) + (1 << 16));   // a multipart's framing too
        http.set_read_timeout(sp.timeout_s, 0);
        http.set_write_timeout(sp.timeout_s, 0);
        http.set_keep_alive_timeout(5);
        // --api-key: every endpoint but /health and /v1/models (llama-server's public ones) needs it
        http.set_pre_routing_handler([this](const httplib::Request & req, httplib::Response & res) {
            if (sp.api_key.empty() || req.path == "/health" || req.path == "/v1/models" || req.path == "/models")
                return httplib::Server::HandlerResponse::Unhandled;
            const std::string auth = req.get_header_value("Authorization");
            const std::string want = "Bearer " + sp.api_key;
            unsigned diff = auth.size() != want.size();
            for (size_t i = 0; i < std::min(auth.size(), want.size()); i++) diff |= (unsigned)(auth[i] ^ want[i]);
            if (diff == 0) return httplib::Server::HandlerResponse::Unhandled;
            res.set_header("WWW-Authenticate", "Bearer");
            set_error(res, 401, "invalid or missing API key ('Authorization: Bearer KEY')");
            return httplib::Server::HandlerResponse::Handled;
        });
        http.Post("/v1/audio/embeddings", [this](const httplib::Request & req, httplib::Response & res, const httplib::ContentReader & reader) {
            embeddings(req, res, reader);
        });
        http.Post("/v1/audio/embeddings/stream", [this](const httplib::Request & req, httplib::Response & res,
                                                        const httplib::ContentReader & reader) {
            stream_embeddings(req, res, reader);
        });
        http.Get("/health", [this](const httplib::Request &, httplib::Response & res) { health(res); });
        http.Get("/v1/models", [this](const httplib::Request &, httplib::Response & res) { models(res); });
        http.Get("/models", [this](const httplib::Request &, httplib::Response & res) { models(res); });
        http.Get("/metrics", [this](const httplib::Request &, httplib::Response & res) { metrics_text(res); });
        http.set_error_handler([](const httplib::Request & req, httplib::Response & res) {
            if (!res.body.empty()) return;                        // ours already
            const std::string msg = res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                                  : res.status == 413 ? "the request body is larger than --max-body-mb"
                                  : res.status == 400 ? "bad request" : "error";
            res.set_content(error_json(res.status, msg), "application/json");
        });
        http.set_exception_handler([](const httplib::Request &, httplib::Response & res, std::exception_ptr ep) {
            std::string what = "internal error";
            try { std::rethrow_exception(ep); } catch (const std::exception & e) { what = e.what(); } catch (...) {}
            set_error(res, 500, what);
        });
        http.set_logger([](const httplib::Request & req, const httplib::Response & res) {
            const std::string ms = res.get_header_value("X-Processing-Ms");
            // a .npy answer streams from a content provider: its length, not the empty body's
            const size_t bytes = res.body.empty() ? res.content_length_ : res.body.size();
            fprintf(stderr, "server: %s %s %d %zu bytes%s%s\n", req.method.c_str(), req.path.c_str(), res.status,
                    bytes, ms.empty() ? "" : " ", ms.empty() ? "" : (ms + " ms").c_str());
        });
    }
};

// =====================================================================================
// main
// =====================================================================================

int main(int argc, char ** argv) {
    server s;
    const int rc = parse_args(argc, argv, s.sp);
    if (rc != 0) return rc > 0 ? 0 : 2;
    const server_params & sp = s.sp;

    // SIGINT and SIGTERM are taken by one thread (sigwait): blocked here, before any thread
    // starts, so that every thread inherits the mask; SIGPIPE (a client gone) is ignored
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    // listen first (/health says "loading" meanwhile), then the model
    s.budget.limit = ((size_t)sp.max_audio_mb << 20) / sizeof(float);
    s.setup();
    const int port = sp.port == 0 ? s.http.bind_to_any_port(sp.host) : (s.http.bind_to_port(sp.host, sp.port) ? sp.port : -1);
    if (port <= 0) {
        fprintf(stderr, "error: cannot listen on %s:%d: %s\n", sp.host.c_str(), sp.port, strerror(errno));
        return 1;
    }
    if (s.listen_fd >= 0 && ::listen(s.listen_fd, 4096) != 0)
        fprintf(stderr, "server: warning: the listen backlog stays cpp-httplib's 5: %s\n", strerror(errno));
    s.http.start();
    std::thread listener([&] { s.http.listen_after_bind(); });
    fprintf(stderr, "server: listening on http://%s:%d\n", sp.host.c_str(), port);
    fflush(stderr);

    bool ok = true;
    const auto t0 = std::chrono::steady_clock::now();
    s.model = whisper_audio_model_load(sp.model.c_str());
    if (!s.model) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); ok = false; }
    if (ok) {
        const whisper_audio_hparams & hp = *whisper_audio_model_hparams(s.model);
        std::string name = sp.alias.empty() ? sp.model : sp.alias;
        if (sp.alias.empty() && name.find_last_of('/') != std::string::npos) name = name.substr(name.find_last_of('/') + 1);
        s.model_name = name;
        fprintf(stderr, "server: model '%s': n_mels %d, n_state %d, n_layer %d, weights %s, projector %s\n", sp.model.c_str(),
                hp.n_mels, hp.n_state, hp.n_layer, whisper_audio_weight_type_name(hp.weight_type),
                whisper_audio_projector_name(hp.projector));
        s.disp.reset(new dispatcher(sp, s.model, s.m));
        std::string err;
        if (!s.disp->get(options(), err)) {            // the default options' pipeline, graphs captured
            fprintf(stderr, "error: %s\n", err.c_str());
            ok = false;
        }
    }
    if (ok) {
        s.disp->start();
        s.ready = true;
        fprintf(stderr, "server: ready in %.0f ms (%d HTTP threads, batch %d, --batch-wait-ms %d)\n",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                sp.http_threads, sp.batch, sp.batch_wait_ms);
        fflush(stderr);
        // wait for SIGINT or SIGTERM (the listener ending on its own is an error: it stops us too)
        std::thread watcher([&] {
            int sig = 0;
            sigwait(&stop_signals, &sig);
            if (sig != 0) fprintf(stderr, "server: %s: finishing the requests in flight, then exiting\n", strsignal(sig));
            s.stopping = true;
        });
        while (!s.stopping && s.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (!s.stopping) { ok = false; pthread_kill(watcher.native_handle(), SIGTERM); }
        watcher.join();
        // new requests are refused (503) from here; those queued or in flight are answered
        while (s.in_flight > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    s.http.stop();
    listener.join();
    s.http.finish();
    if (s.disp) s.disp->stop();
    s.disp.reset();
    whisper_audio_model_free(s.model);
    fprintf(stderr, "server: stopped\n");
    return ok ? 0 : 1;
}
