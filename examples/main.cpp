// main: audio files in, Whisper encoder embeddings out (.npy).
//
//   ./main -m model.gguf -f audio.wav [-f more.ogg ...] -o emb.npy
//
// Each file is cut into 30 s windows (the last one zero-padded, as transformers does);
// the windows of all files, in the order given, share batches. Audio is decoded, log-mel'd
// and encoded a batch at a time, and the output is written as it comes, so memory does
// not grow with the length or the number of the inputs.
//
// Parts, in the order main() runs them: command line -> output files -> inputs (each
// header checked up front, then opened one at a time) -> the run (batch by batch) -> summary.
#include "whisper-audio.h"
#include "npy.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#ifdef WHISPER_AUDIO_PNG
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#endif

// =====================================================================================
// messages: errors always (and the last one kept for --json), the rest unless -q
// =====================================================================================

static int g_verbosity = 1;            // 0: -q (errors only), 1: the default, 2: -v
static std::string g_last_error;       // the last error's message, for --json's document
static bool g_json_printed = false;    // --json's document is out (a run stopped half-way prints its own)
static bool g_line_open = false;       // a progress line is on the terminal, to end before another

static void end_progress_line() {
    if (g_line_open) fputc('\n', stderr);
    g_line_open = false;
}

static void print_error(const char * fmt, ...) __attribute__((format(printf, 1, 2)));
static void print_error(const char * fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    end_progress_line();
    fprintf(stderr, "error: %s", msg);
    g_last_error = msg;
    while (!g_last_error.empty() && g_last_error.back() == '\n') g_last_error.pop_back();
}

// A note or a warning: on stderr unless -q.
static void note(const char * fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char * fmt, ...) {
    if (g_verbosity < 1) return;
    end_progress_line();
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

// =====================================================================================
// command line
// =====================================================================================

struct params {
    std::string model;
    std::vector<std::string> files;
    std::vector<std::string> lists;   // the --list files (read, never to be written)
    std::string output;           // empty: no output file
    std::string outtype = "f32";
    std::string png;
    std::string save_gguf;        // --save-gguf: write the model as our GGUF, and nothing else
    int n_threads = 0;            // 0: the library's default
    int batch = 8;
    std::string device = "auto";  // auto, cpu, cuda
    std::vector<int> gpus;        // cuda:0,1: these; cuda:all (empty, all_gpus); cuda: device 0
    bool all_gpus = false;
    std::string dtype = "f16";
    int layer = -1;               // -1: the last layer
    bool final_ln = true;
    bool pool_mean = false;
    bool no_pad = false;
    bool projector = true;        // an audio-LLM model: its tokens (false: the tower's own output)
    bool json = false;
    int progress = -1;            // -1: on a terminal only; 0: --no-progress; 1: --progress (lines on a pipe too)
    bool keep_going = false;      // a file that fails is reported and skipped (exit 3)
    bool keep_ext = false;        // -o DIR/: DIR/x.wav.npy, not DIR/x.npy
    bool stream = false;          // --stream: one live input, each window's rows written as they come
    std::string raw;              // --raw: headerless 16 kHz mono PCM, s16le or f32le
    int follow_ms = 0;            // --follow: the input is a file that grows; it ends after this long unchanged
};

// More inputs than this: one line for all of them, not one each (-v lists each).
static const int LIST_INPUTS = 16;

// The audio LLMs the library knows, from its own list (whisper_audio_projector_name walks the
// enum to its end), so that --help names every one without a second list here.
static std::string projector_names() {
    std::string s;
    for (int t = WHISPER_AUDIO_PROJECTOR_NONE + 1;; t++) {
        const char * name = whisper_audio_projector_name((enum whisper_audio_projector)t);
        if (!name) break;
        const std::string item = std::string(s.empty() ? "" : ", ") + name;
        const size_t line = s.size() - (s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
        if (s.empty() || line + item.size() > 100) s += std::string(s.empty() ? "" : ",\n") + std::string(23, ' ') + name;
        else s += item;
    }
    return s;
}

static void print_usage(const char * argv0) {
    const std::string towers = projector_names();
    fprintf(stderr,
            "usage: %s -m MODEL [options] AUDIO [AUDIO ...]    (or -f AUDIO, --list FILE)\n"
            "       %s -m MODEL --save-gguf OUT\n"
            "\n"
            "Whisper encoder embeddings of audio files. By default one float32 .npy [n_windows, 1500, d_model]:\n"
            "every file is cut into 30 s windows (the last one zero-padded), one row per window. An audio-LLM\n"
            "model gives per input the tokens the model feeds its LLM: [n_tokens, llm_dim] (its file says how).\n"
            "\n"
            "options (a value as the next argument or as --opt=value; '--' ends the options):\n"
            "  -h, --help           show this help and exit\n"
            "  --version            print the version and exit\n"
            "  -m, --model PATH     model: .gguf (convert/convert-hf-to-gguf.py), whisper.cpp's ggml-*.bin, a Hugging\n"
            "                       Face directory (config.json + model.safetensors, sharded or not: Whisper or any\n"
            "                       audio LLM of docs/models.md), a CTranslate2 / faster-whisper directory or\n"
            "                       llama.cpp's audio mmproj (found by content); or a Hugging Face repo id\n"
            "                       (openai/whisper-base) from the local Hugging Face cache ($HF_HUB_CACHE,\n"
            "                       $HF_HOME/hub, ~/.cache/huggingface/hub)\n"
            "  -f, --file FILE      audio file: WAV, FLAC, MP3, Ogg Vorbis or Opus (found by content), any rate\n"
            "                       and channels; '-' reads standard input; repeat for several files (an\n"
            "                       argument that is not an option is an audio file too)\n"
            "  --list FILE          read audio file names from FILE, one per line\n"
            "  -o, --output PATH    write the embeddings to PATH ('-': standard output), or one .npy per input\n"
            "                       when PATH ends in '/' or is a directory: DIR/<input's path>.npy, the path\n"
            "                       taken below the inputs' common directory, its extension replaced\n"
            "  --keep-ext           with -o DIR/: keep the input's extension, DIR/x.wav.npy (so that x.wav and\n"
            "                       x.mp3 in one directory get an output each)\n"
            "  --keep-going         a file that fails (its header, its decoding, non-finite output) is reported\n"
            "                       on one line (and in --json's \"failed\") and skipped; the others are written;\n"
            "                       the exit status is 3 when some failed\n"
            "  --outtype T          f32 (default) or f16 for the .npy\n"
            "  --layer N            the hidden state after encoder layer N (0-based), without the final LayerNorm\n"
            "  --no-final-ln        the last layer's output before the final LayerNorm\n"
            "  --pool mean          one vector per window: the mean over the positions that cover audio\n"
            "  --no-pad             encode the last window (or a clip under 30 s) without its zero padding; each\n"
            "                       input becomes one [n_positions, d_model] array\n"
            "  --no-projector       an audio-LLM model (our GGUF, llama.cpp's mmproj or its directory): the audio\n"
            "                       tower's own output instead of the tokens it feeds the LLM; the towers:\n"
            "%s\n"
            "  --json               print a machine-readable summary on stdout (the human one goes to stderr)\n"
            "  --png FILE           draw the first window's log-mel and embedding as a PNG image\n"
            "  -t, --threads N      CPU threads for log-mel and the CPU backend, and the decoding workers\n"
            "                       (default: up to 8; at most the hardware's)\n"
            "  -b, --batch N        30 s windows per encoder call, at most (default: 8, at most 256); when the\n"
            "                       inputs' lengths are known the batches are evened out (120 windows at -b 32: 4 x 30)\n"
            "  --device D           cpu, cuda, auto (default: CUDA when a GPU is present), or several GPUs:\n"
            "                       cuda:0,1 or cuda:all (each takes the next batch; rows stay in input order)\n"
            "  --dtype T            CUDA compute type: f16, bf16 or fp8 (bf16 with the linear layers of\n"
            "                       every block but the first and the last in FP8 e4m3; compute capability\n"
            "                       8.9+) (default: f16). The CPU computes in f32, but with bf16: its GEMMs\n"
            "                       in bf16 on AMX tiles where it has them\n"
            "  --no-progress        no progress line on stderr (it shows only on a terminal anyway)\n"
            "  --progress           the progress line on a pipe or a log too: a line every 10 s\n"
            "  -q, --quiet          errors only: no notes, warnings, progress or summary (--json still prints)\n"
            "  -v, --verbose        a line per input even for more than %d inputs\n"
            "  --stream             live audio: one input (-f - or a file) read as it arrives, each window's rows\n"
            "                       written as it completes (within a forward of its last sample): -o gets one\n"
            "                       .npy array [n_rows, d] per window, appended and flushed (read them with\n"
            "                       np.load(f) in a loop), --json a line per window; refused for a model whose\n"
            "                       windows depend on later audio (voxtral, ultravox, qwen3a, qwen3asr)\n"
            "  --raw F              with --stream: the input is headerless 16 kHz mono PCM, s16le or f32le\n"
            "                       (ffmpeg -f s16le -ac 1 -ar 16000 -), not audio found by content\n"
            "  --follow S           --stream of a file that grows (tail -f): at its end wait for more; it ends\n"
            "                       once the file has not grown for S seconds\n"
            "  --save-gguf OUT      write the model (any of -m's formats) as our GGUF, what\n"
            "                       convert/convert-hf-to-gguf.py writes, and exit: its matrices as loaded\n"
            "                       (q8_0/q5/q4 blocks kept), so it gives the same output, bit for bit\n"
            "\n"
            "Outputs appear whole or not at all: each is written under a temporary name beside it and\n"
            "renamed into place when complete. With one .npy per input, each is complete when its input\n"
            "is; an error later keeps them and names the input that failed.\n"
            "\n"
            "exit status: 0 done; 1 an error stopped the run; 2 a bad command line or model option; 3 with\n"
            "--keep-going, some inputs failed (the others were written).\n",
            argv0, argv0, towers.c_str(), LIST_INPUTS);
}

static bool parse_int(const char * s, int lo, int hi, int * out) {
    char * end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

// One path per line, as it is (blanks at its end are part of the name; a CR before the LF is
// not); lines of blanks alone and lines starting with '#' are skipped.
static bool read_list(const char * path, std::vector<std::string> & files) {
    FILE * f = fopen(path, "r");
    if (!f) { print_error("cannot open list '%s': %s\n", path, strerror(errno)); return false; }
    char * line = nullptr;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        std::string s(line, (size_t)n);
        if (!s.empty() && s.back() == '\n') s.pop_back();
        if (!s.empty() && s.back() == '\r') s.pop_back();
        if (s.find_first_not_of(" \t") != std::string::npos && s[0] != '#') files.push_back(s);
    }
    const bool ok = !ferror(f);
    if (!ok) print_error("reading list '%s' failed: %s\n", path, strerror(errno));
    free(line);
    fclose(f);
    return ok;
}

// --device: cpu, auto, cuda, cuda:N[,M...] or cuda:all
static bool parse_device(const char * v, params & p) {
    const std::string s = v;
    p.gpus.clear();
    p.all_gpus = false;
    if (s == "cpu" || s == "auto" || s == "cuda") { p.device = s; return true; }
    if (s.rfind("cuda:", 0) == 0) {
        p.device = "cuda";
        if (s == "cuda:all") { p.all_gpus = true; return true; }
        std::string list = s.substr(5) + ",";
        for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
            int g;
            if (!parse_int(list.substr(at, comma - at).c_str(), 0, 1023, &g) ||
                std::find(p.gpus.begin(), p.gpus.end(), g) != p.gpus.end()) {
                p.gpus.clear();
                break;
            }
            p.gpus.push_back(g);
        }
        if (!p.gpus.empty()) return true;
    }
    print_error("bad value '%s' for --device (cpu, auto, cuda, cuda:0,1 or cuda:all)\n", v);
    return false;
}

// The options that take no value (each --opt=value form is refused for them).
static const char * const FLAGS[] = {"-h", "--help", "--version", "--no-progress", "--progress", "--no-final-ln", "--no-pad",
                                     "--no-projector", "--json", "--keep-going", "--keep-ext", "-q", "--quiet", "-v", "--verbose",
                                     "--stream"};

static bool is_dir_output(const std::string & p);

// Returns 0 to go on, 1 after -h or --version, -1 on a bad argument (message printed).
// Options take their value as the next argument or as --opt=value; an argument that is not
// an option (or '-', or anything after '--') is an audio file, as with -f.
static int parse_args(int argc, char ** argv, params & p) {
    bool options_end = false;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (options_end || arg == "-" || arg.empty() || arg[0] != '-') { p.files.push_back(arg); continue; }
        if (arg == "--") { options_end = true; continue; }
        const char * v = nullptr;
        std::string inline_value;            // --opt=value
        bool has_inline = false;
        const size_t eq = arg.find('=');
        if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            inline_value = arg.substr(eq + 1);
            arg.resize(eq);
            has_inline = true;
            for (const char * f : FLAGS)
                if (arg == f) { print_error("%s takes no value (got '%s')\n", arg.c_str(), inline_value.c_str()); return -1; }
        }
        auto value = [&]() -> bool {
            if (has_inline) { v = inline_value.c_str(); return true; }
            if (i + 1 >= argc) { print_error("%s needs a value\n", arg.c_str()); return false; }
            v = argv[++i];
            return true;
        };
        auto choice = [&](std::string & dst, std::initializer_list<const char *> allowed) -> bool {
            if (!value()) return false;
            for (const char * a : allowed) if (strcmp(v, a) == 0) { dst = v; return true; }
            print_error("bad value '%s' for %s\n", v, arg.c_str());
            return false;
        };
        if (arg == "-h" || arg == "--help") { print_usage(argv[0]); return 1; }
        else if (arg == "--version") { printf("whisper-audio %s\n", whisper_audio_version()); return 1; }
        else if (arg == "--no-progress") p.progress = 0;
        else if (arg == "--progress") p.progress = 1;
        else if (arg == "--no-final-ln") p.final_ln = false;
        else if (arg == "--no-pad") p.no_pad = true;
        else if (arg == "--no-projector") p.projector = false;
        else if (arg == "--json") p.json = true;
        else if (arg == "--keep-going") p.keep_going = true;
        else if (arg == "--keep-ext") p.keep_ext = true;
        else if (arg == "--stream") p.stream = true;
        else if (arg == "--raw") { if (!choice(p.raw, {"s16le", "f32le"})) return -1; }
        else if (arg == "--follow") {
            if (!value()) return -1;
            char * end = nullptr;
            const double sec = strtod(v, &end);
            if (end == v || *end || !(sec >= 0.01 && sec <= 86400)) {
                print_error("bad value '%s' for --follow: seconds the file may stay unchanged, 0.01 to 86400\n", v);
                return -1;
            }
            p.follow_ms = (int)lround(sec * 1000.0);
            p.stream = true;
        }
        else if (arg == "-q" || arg == "--quiet") g_verbosity = 0;
        else if (arg == "-v" || arg == "--verbose") g_verbosity = 2;
        else if (arg == "-m" || arg == "--model") { if (!value()) return -1; p.model = v; }
        else if (arg == "-f" || arg == "--file") { if (!value()) return -1; p.files.push_back(v); }
        else if (arg == "--list") { if (!value() || !read_list(v, p.files)) return -1; p.lists.push_back(v); }
        else if (arg == "-o" || arg == "--output" || arg == "--png" || arg == "--save-gguf") {
            if (!value()) return -1;
            if (!*v) { print_error("%s was given an empty path\n", arg.c_str()); return -1; }
            (arg == "--png" ? p.png : arg == "--save-gguf" ? p.save_gguf : p.output) = v;
        }
        else if (arg == "--outtype") { if (!choice(p.outtype, {"f32", "f16"})) return -1; }
        else if (arg == "--device") { if (!value() || !parse_device(v, p)) return -1; }
        else if (arg == "--dtype") { if (!choice(p.dtype, {"f16", "bf16", "fp8"})) return -1; }
        else if (arg == "--pool") { std::string m; if (!choice(m, {"mean"})) return -1; p.pool_mean = true; }
        else if (arg == "-t" || arg == "--threads" || arg == "-b" || arg == "--batch" || arg == "--layer") {
            int * dst = arg == "--layer" ? &p.layer : (arg == "-b" || arg == "--batch") ? &p.batch : &p.n_threads;
            if (!value() || !parse_int(v, arg == "--layer" ? 0 : 1, 4096, dst)) {
                if (v) print_error("bad value '%s' for %s\n", v, arg.c_str());
                return -1;
            }
        } else {
            print_error("unknown argument '%s'\n", argv[i]);
            print_usage(argv[0]);
            return -1;
        }
    }
    if (p.model.empty()) { print_error("no model given (-m MODEL)\n"); print_usage(argv[0]); return -1; }
    if (!p.save_gguf.empty() && (!p.files.empty() || !p.output.empty() || !p.png.empty())) {
        print_error("--save-gguf writes the model alone: give it no -f, --list, -o or --png\n");
        return -1;
    }
    if (!p.save_gguf.empty()) return 0;
    if (p.files.empty()) { print_error("no audio file given (-f AUDIO, or AUDIO after the options)\n"); print_usage(argv[0]); return -1; }
    if (!p.raw.empty() && !p.stream) {
        print_error("--raw reads headerless PCM as it comes: add --stream\n");
        return -1;
    }
    if (p.stream) {
        const char * why = p.files.size() != 1 ? "one input (standard input '-' or a file)"
                         : !p.png.empty() ? "no --png" : p.keep_going ? "no --keep-going" : !p.lists.empty() ? "no --list"
                         : is_dir_output(p.output) ? "-o a file or '-', not a directory"
                         : p.follow_ms > 0 && p.files[0] == "-" ? "--follow of a file: standard input ends when its writer closes it"
                         : nullptr;
        if (why) { print_error("--stream%s takes %s\n", p.follow_ms > 0 ? " (--follow)" : "", why); return -1; }
    }
    // -o naming the file that is already standard output (/dev/stdout, /proc/self/fd/1) is -o -:
    // the array alone goes there, the summary to stderr
    struct stat out_st, fd1_st;
    if (!p.output.empty() && p.output != "-" && stat(p.output.c_str(), &out_st) == 0 && !S_ISDIR(out_st.st_mode) &&
        fstat(1, &fd1_st) == 0 && out_st.st_dev == fd1_st.st_dev && out_st.st_ino == fd1_st.st_ino)
        p.output = "-";
    if (p.output == "-" && p.json) {
        print_error("-o - writes the array to standard output, which --json needs for itself\n");
        return -1;
    }
    if (p.output == "-" && isatty(1)) {
        print_error("-o - would write binary .npy data to a terminal; redirect it to a file or a pipe\n");
        return -1;
    }
#ifndef WHISPER_AUDIO_PNG
    if (!p.png.empty()) { print_error("--png needs stb_image_write (Debian's libstb-dev) at build time\n"); return -1; }
#endif
    return 0;
}

// =====================================================================================
// output files: never half-written, never one we did not make deleted
// =====================================================================================
//
// A regular file is written under a unique temporary name beside it (mkstemp: two runs
// never share one, and a user's own "x.npy.tmp" is never touched) and renamed over the
// target only when complete, so an error, a signal or a concurrent run leaves either the
// old file or a whole new one. A symlink is followed: the file it points to is replaced,
// the link stays. Anything that cannot be renamed over (standard output, a FIFO, a device)
// is written straight through.

// The temporaries that exist now, for the signal handler to remove. A fixed table of
// fixed buffers, so that the handler reads nothing that is being freed; slots are taken
// round-robin, so a slot is not reused while a handler on another thread may read it.
static const int MAX_TEMPS = 16;
static char g_temp_path[MAX_TEMPS][PATH_MAX];
static std::atomic<int> g_temp_used[MAX_TEMPS];
static int g_temp_next = 0;
static const int CLEANUP_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

static void on_signal(int sig) {
    for (int i = 0; i < MAX_TEMPS; i++)
        if (g_temp_used[i].load()) unlink(g_temp_path[i]);
    signal(sig, SIG_DFL);       // then die of the signal, as the caller expects
    raise(sig);
}

static void install_signal_handlers() {
    for (int sig : CLEANUP_SIGNALS) {
        struct sigaction sa{};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        for (int s : CLEANUP_SIGNALS) sigaddset(&sa.sa_mask, s);
        sigaction(sig, &sa, nullptr);
    }
}

static int temp_register(const std::string & path) {
    for (int k = 0; k < MAX_TEMPS; k++) {
        const int i = (g_temp_next + k) % MAX_TEMPS;
        if (g_temp_used[i].load()) continue;
        memcpy(g_temp_path[i], path.c_str(), path.size() + 1);
        g_temp_used[i].store(1);
        g_temp_next = i + 1;
        return i;
    }
    return -1;
}

static void temp_forget(int slot) {
    if (slot >= 0) g_temp_used[slot].store(0);
}

static mode_t g_new_file_mode = 0644;   // 0666 & ~umask, as fopen would create it

struct output_file {
    std::string path;       // the target, a symlink resolved to the file it points to
    std::string tmp;        // our temporary beside it; empty when written straight through
    FILE * f = nullptr;
    int slot = -1;          // in the signal handler's table
    bool committed = false;

    bool seekable() const { return !tmp.empty(); }

    // Opens target for writing; false with a message.
    bool open(const std::string & target) {
        path = target;
        if (target == "-") { f = stdout; return true; }
        struct stat st;
        if (lstat(target.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
            char * real = realpath(target.c_str(), nullptr);
            struct stat to;
            if (!real && stat(target.c_str(), &to) == 0 && !S_ISREG(to.st_mode) && !S_ISDIR(to.st_mode)) {
                // a link to what has no path (/dev/stdout -> /proc/self/fd/1 -> pipe:[...]): write through
                f = fopen(target.c_str(), "wb");
                if (!f) { print_error("cannot write '%s': %s\n", target.c_str(), strerror(errno)); return false; }
                return true;
            }
            if (!real) {
                print_error("'%s' is a symlink that does not lead to a file: %s\n", target.c_str(), strerror(errno));
                return false;
            }
            path = real;
            free(real);
        }
        const bool exists = stat(path.c_str(), &st) == 0;
        if (exists && S_ISDIR(st.st_mode)) { print_error("'%s' is a directory\n", path.c_str()); return false; }
        if (exists && !S_ISREG(st.st_mode)) {           // a FIFO, a device: write through
            f = fopen(path.c_str(), "wb");
            if (!f) { print_error("cannot write '%s': %s\n", path.c_str(), strerror(errno)); return false; }
            return true;
        }
        if (path.size() + 8 >= PATH_MAX) { print_error("'%s': path too long\n", path.c_str()); return false; }
        std::string name = path + ".XXXXXX";
        const int fd = mkstemp(&name[0]);
        if (fd < 0) {
            print_error("cannot create a temporary file beside '%s': %s\n", path.c_str(), strerror(errno));
            return false;
        }
        tmp = name;
        slot = temp_register(tmp);
        // the new file keeps the mode of the one it replaces, else gets the usual one
        if (fchmod(fd, exists ? (st.st_mode & 07777) : g_new_file_mode) != 0 || slot < 0 || !(f = fdopen(fd, "wb"))) {
            print_error("cannot write '%s': %s\n", tmp.c_str(), slot < 0 ? "too many open outputs" : strerror(errno));
            if (!f) close(fd);
            discard();
            return false;
        }
        return true;
    }

    // Flushes, closes and renames into place; false with a message (the temporary removed).
    bool commit() {
        const bool is_stdout = f == stdout;
        bool ok = fflush(f) == 0 && !ferror(f);
        int err = errno;
        if (!is_stdout) {
            ok = (fclose(f) == 0) && ok;
            if (!ok && err == 0) err = errno;
        }
        f = nullptr;
        if (ok && seekable() && rename(tmp.c_str(), path.c_str()) != 0) { ok = false; err = errno; }
        if (!ok) {
            print_error("writing '%s' failed: %s\n", path.c_str(), strerror(err));
            discard();
            return false;
        }
        temp_forget(slot);
        slot = -1;
        committed = true;
        return true;
    }

    // Closes and removes our temporary; what was at the target stays as it was.
    void discard() {
        if (f && f != stdout) fclose(f);
        f = nullptr;
        if (!tmp.empty() && !committed) unlink(tmp.c_str());
        temp_forget(slot);
        slot = -1;
    }

    ~output_file() { if (!committed) discard(); }
};

// A .npy written as rows come: a fixed-size header with room for any shape, rewritten at
// the end. A target that cannot seek gets the final row count up front when it is known
// (promised, checked at the end), or else the rows go to an anonymous spool file first.
struct npy_writer;

// Rows written behind the pipeline's thread: emit copies a window's rows here and returns, so
// that the device's next batches run while the disk takes these (at the H200's speed a
// large-v3 window is 7.7 MB every 4 ms). One thread writes the blocks in order, at most
// MAX_QUEUED bytes ahead (a push waits beyond that); a writer's error (errno, under mu) is kept
// and returned by its next push or drain.
struct write_behind {
    static const size_t MAX_QUEUED = (size_t)256 << 20;
    struct block { npy_writer * w; std::vector<char> bytes; };
    std::mutex mu;
    std::condition_variable changed;
    std::deque<block> queue;
    size_t queued = 0;                  // bytes in queue
    bool writing = false, stop = false;
    std::thread thread;

    int push(npy_writer * w, const void * data, size_t n);
    int drain(npy_writer * w);          // waits until every block pushed is written
    void run();
    ~write_behind() {
        { std::lock_guard<std::mutex> lock(mu); stop = true; }
        changed.notify_all();
        if (thread.joinable()) thread.join();
    }
};

struct npy_writer {
    output_file out;
    write_behind * behind = nullptr;    // rows written by its thread (else here)
    int write_errno = 0;                // the first failed write's errno (behind's thread, under its mu)
    bool f16 = false;
    std::vector<size_t> row_shape;      // the dimensions after the first
    size_t rows = 0;                    // the first dimension so far
    long long promised = -1;            // rows in the header already written to a stream
    FILE * spool = nullptr;
    bool is_open = false;

    FILE * dst() const { return spool ? spool : out.f; }

    // expected_rows: the final count when known (else -1), for a target that cannot seek.
    bool open(const std::string & target, bool half, const std::vector<size_t> & shape, long long expected_rows) {
        f16 = half;
        row_shape = shape;
        if (!out.open(target)) return false;
        is_open = true;
        if (!out.seekable()) {
            if (expected_rows >= 0) promised = expected_rows;
            else if (!(spool = tmpfile())) {
                print_error("cannot create a spool file for '%s': %s\n", out.path.c_str(), strerror(errno));
                return false;
            }
        }
        if (!write_header(promised >= 0 ? (size_t)promised : 0)) return fail_write();
        return true;
    }
    bool write_header(size_t n_rows) {
        std::vector<size_t> shape{n_rows};
        shape.insert(shape.end(), row_shape.begin(), row_shape.end());
        const std::string h = npy_header(shape, f16);
        return fwrite(h.data(), 1, h.size(), dst()) == h.size();
    }
    bool fail_write(int e = 0) {
        print_error("writing '%s' failed: %s\n", out.path.c_str(), strerror(e ? e : errno));
        return false;
    }
    // The rows written behind, or their error.
    bool sync() {
        const int e = behind ? behind->drain(this) : 0;
        return e == 0 || fail_write(e);
    }
    // rows already in the file's type (f16 or f32)
    bool append(const void * data, size_t n_rows) {
        size_t n = n_rows;
        for (size_t d : row_shape) n *= d;
        rows += n_rows;
        if (behind) {
            const int e = behind->push(this, data, n * (f16 ? 2 : 4));
            return e == 0 || fail_write(e);
        }
        return fwrite(data, f16 ? 2 : 4, n, dst()) == n || fail_write();
    }
    bool finish() {
        if (!sync()) { abandon(); return false; }
        is_open = false;
        if (promised >= 0 && rows != (size_t)promised) {
            print_error("'%s': %zu rows written after a header that promised %lld (an input's length "
                    "differed from what its header said)\n", out.path.c_str(), rows, promised);
            out.discard();
            return false;
        }
        bool ok = true;
        if (spool) {                    // the header with the count, then the spool's rows, to the stream
            ok = fseek(spool, 0, SEEK_SET) == 0 && write_header(rows) && fseek(spool, 0, SEEK_SET) == 0;
            char buf[1 << 16];
            size_t k;
            while (ok && (k = fread(buf, 1, sizeof(buf), spool)) > 0) ok = fwrite(buf, 1, k, out.f) == k;
            ok = ok && !ferror(spool);
            fclose(spool);
            spool = nullptr;
        } else if (out.seekable()) {
            ok = fseek(out.f, 0, SEEK_SET) == 0 && write_header(rows);
        }
        if (!ok) { fail_write(); out.discard(); return false; }
        return out.commit();
    }
    void abandon() {
        if (behind) behind->drain(this);
        is_open = false;
        if (spool) { fclose(spool); spool = nullptr; }
        out.discard();
    }
    // Back to its first n_rows (--keep-going: a failed input's rows taken back); a file or the
    // spool only (a stream was promised no count).
    bool truncate_to(size_t n_rows) {
        size_t row = f16 ? 2 : 4;
        for (size_t d : row_shape) row *= d;
        const off_t at = (off_t)(NPY_HEADER_BYTES + n_rows * row);
        FILE * f = dst();
        rows = n_rows;
        if (!sync()) return false;
        return (fflush(f) == 0 && ftruncate(fileno(f), at) == 0 && fseeko(f, at, SEEK_SET) == 0) || fail_write();
    }
};

int write_behind::push(npy_writer * w, const void * data, size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    if (w->write_errno || n == 0) return w->write_errno;   // (no rows: a Qwen2-Audio input of <= 320 samples)
    if (!thread.joinable()) thread = std::thread([this] { run(); });
    changed.wait(lock, [&] { return queued + n <= MAX_QUEUED || queue.empty(); });
    queue.push_back({w, std::vector<char>((const char *)data, (const char *)data + n)});
    queued += n;
    changed.notify_all();
    return 0;
}

int write_behind::drain(npy_writer * w) {
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] { return queue.empty() && !writing; });
    return w->write_errno;
}

void write_behind::run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
        changed.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;      // stop, with everything written
        block b = std::move(queue.front());
        queue.pop_front();
        writing = true;
        const bool failed_before = b.w->write_errno != 0;
        lock.unlock();
        int e = 0;
        if (!failed_before && fwrite(b.bytes.data(), 1, b.bytes.size(), b.w->dst()) != b.bytes.size()) e = errno ? errno : EIO;
        lock.lock();
        if (e) b.w->write_errno = e;
        writing = false;
        queued -= b.bytes.size();
        changed.notify_all();
    }
}

// --------------------------------------------------------------------------- paths

// The parts of a path, made absolute from the working directory and normalised
// lexically ("/a/./b/../c" -> {"a", "c"}), so that "x.wav", "./x.wav" and "d/../x.wav" agree.
static std::vector<std::string> path_parts(const std::string & path) {
    std::string full = path;
    if (path.empty() || path[0] != '/') {
        char cwd[PATH_MAX];
        full = std::string(getcwd(cwd, sizeof(cwd)) ? cwd : ".") + "/" + path;
    }
    std::vector<std::string> parts;
    size_t i = 0;
    while (i <= full.size()) {
        size_t j = full.find('/', i);
        if (j == std::string::npos) j = full.size();
        const std::string part = full.substr(i, j - i);
        if (part == "..") { if (!parts.empty()) parts.pop_back(); }
        else if (!part.empty() && part != ".") parts.push_back(part);
        i = j + 1;
    }
    return parts;
}

// The .npy of each input in the output directory dir: the input's path below the inputs'
// deepest common directory, its extension replaced ("a/x.wav", "b/x.wav" -> dir/a/x.npy,
// dir/b/x.npy; inputs of one directory -> dir/x.npy), or with keep_ext kept (dir/x.wav.npy).
// Standard input is dir/stdin.npy.
static std::vector<std::string> output_names(const std::string & dir, const std::vector<std::string> & files, bool keep_ext) {
    std::vector<std::vector<std::string>> parts;
    for (const std::string & f : files)
        if (f != "-") parts.push_back(path_parts(f));
    size_t common = SIZE_MAX;                   // the common directory's depth
    for (const auto & p : parts) {
        size_t k = 0;
        while (k + 1 < p.size() && k + 1 < parts[0].size() && p[k] == parts[0][k]) k++;
        common = std::min(common, k);
    }
    std::vector<std::string> names;
    size_t next = 0;
    for (const std::string & f : files) {
        std::string rel = "stdin";
        if (f != "-") {
            const std::vector<std::string> & p = parts[next++];
            rel.clear();
            for (size_t k = common; k < p.size(); k++) rel += (rel.empty() ? "" : "/") + p[k];
            const size_t dot = rel.find_last_of('.'), slash = rel.find_last_of('/');
            if (!keep_ext && dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)) rel.resize(dot);
        }
        names.push_back(dir + (dir.back() == '/' ? "" : "/") + rel + ".npy");
    }
    return names;
}

// The directories make_parent_dirs made, in the order made: a run that fails removes those
// still empty (remove_made_dirs), so that it leaves nothing behind.
static std::vector<std::string> g_made_dirs;

static void remove_made_dirs() {
    for (size_t i = g_made_dirs.size(); i-- > 0;) rmdir(g_made_dirs[i].c_str());   // only empty ones go
    g_made_dirs.clear();
}

// mkdir -p for the directory that holds path.
static bool make_parent_dirs(const std::string & path) {
    for (size_t i = 1; i < path.size(); i++) {
        if (path[i] != '/') continue;
        const std::string dir = path.substr(0, i);
        struct stat st;
        if (stat(dir.c_str(), &st) == 0) {
            if (S_ISDIR(st.st_mode)) continue;
            print_error("cannot make directory '%s': a file of that name exists\n", dir.c_str());
            return false;
        }
        if (mkdir(dir.c_str(), 0777) == 0) {
            g_made_dirs.push_back(dir);
        } else if (errno != EEXIST) {
            print_error("cannot make directory '%s': %s\n", dir.c_str(), strerror(errno));
            return false;
        }
    }
    return true;
}

static bool is_dir_output(const std::string & p) {
    struct stat st;
    return !p.empty() && p != "-" && (p.back() == '/' || (stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)));
}

// What a path names, so that two spellings of one file compare equal: an existing file by
// device and inode (symlinks followed, hard links alike), one still to be made by its
// directory's real path and its name.
struct file_id {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    std::string path;            // when it does not exist
    bool is_chr = false;         // a character device (/dev/null): written twice without harm

    bool operator==(const file_id & o) const {
        return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : path == o.path);
    }
};

static file_id file_id_of(const std::string & path) {
    file_id id;
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
        id.exists = true;
        id.dev = st.st_dev;
        id.ino = st.st_ino;
        id.is_chr = S_ISCHR(st.st_mode);
        return id;
    }
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (char * real = realpath(dir.c_str(), nullptr)) {
        id.path = std::string(real) + "/" + name;
        free(real);
    } else {                     // a directory still to be made: the lexical path
        for (const std::string & part : path_parts(path)) id.path += "/" + part;
    }
    return id;
}

// Refuses, before any work, a run whose outputs would overwrite what it reads (the model,
// a --list file, an input) or each other (-o, --png, the per-file outputs): every spelling
// of one file, through symlinks and hard links, counts as that file.
static bool check_paths(const params & p) {
    struct named { std::string what, path; file_id id; std::string input; };   // input: a per-file output's
    std::vector<named> reads, writes;
    auto add = [](std::vector<named> & v, const std::string & what, const std::string & path, const std::string & input = "") {
        if (!path.empty() && path != "-") v.push_back({what, path, file_id_of(path), input});
    };
    add(reads, "the model", p.model);
    struct stat st;
    if (stat(p.model.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {      // a Hugging Face or CTranslate2 directory: its files
        if (DIR * d = opendir(p.model.c_str())) {
            while (const dirent * e = readdir(d))
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) add(reads, "the model", p.model + "/" + e->d_name);
            closedir(d);
        }
    }
    for (const std::string & l : p.lists) add(reads, "the --list file", l);
    for (const std::string & f : p.files) add(reads, "one of the inputs", f);
    if (is_dir_output(p.output)) {
        const std::vector<std::string> names = output_names(p.output, p.files, p.keep_ext);
        for (size_t i = 0; i < names.size(); i++) add(writes, "an output", names[i], p.files[i]);
    } else {
        add(writes, "the output", p.output);
    }
    add(writes, "the --png image", p.png);
    add(writes, "the --save-gguf output", p.save_gguf);
    for (size_t i = 0; i < writes.size(); i++) {
        for (const named & r : reads) {
            if (!(writes[i].id == r.id)) continue;
            print_error("%s '%s' is %s ('%s'); nothing was written\n", writes[i].what.c_str(),
                    writes[i].path.c_str(), r.what.c_str(), r.path.c_str());
            return false;
        }
        for (size_t k = 0; k < i; k++) {
            if (!(writes[i].id == writes[k].id) || writes[i].id.is_chr) continue;
            if (!writes[i].input.empty() && !writes[k].input.empty()) {
                print_error("'%s' and '%s' would both be written to '%s'; nothing was written%s\n",
                        writes[k].input.c_str(), writes[i].input.c_str(), writes[i].path.c_str(),
                        p.keep_ext || writes[k].input == writes[i].input ? "" : " (--keep-ext keeps their extensions)");
                return false;
            }
            print_error("%s '%s' and %s '%s' are the same file; nothing was written\n", writes[k].what.c_str(),
                    writes[k].path.c_str(), writes[i].what.c_str(), writes[i].path.c_str());
            return false;
        }
    }
    return true;
}

// =====================================================================================
// PNG: the log-mel over the embedding, time running left to right
// =====================================================================================

#ifdef WHISPER_AUDIO_PNG
// A blue-to-yellow ramp for values scaled to [0, 1].
static void colour(float x, uint8_t * rgb) {
    x = std::min(1.0f, std::max(0.0f, x));
    rgb[0] = (uint8_t)(255 * std::min(1.0f, 2.0f * x));
    rgb[1] = (uint8_t)(255 * x);
    rgb[2] = (uint8_t)(255 * std::max(0.0f, 1.0f - 2.0f * x) * 0.8f + 40 * x);
}

static void png_write_to(void * context, void * data, int size) {
    FILE * f = (FILE *)context;
    if (fwrite(data, 1, (size_t)size, f) != (size_t)size && !ferror(f)) errno = EIO;
}

// mel [n_mels, 3000] (two frames to a pixel), emb [n_pos, d]; each panel scaled by its own
// range. Written to out (not yet committed); false with a message.
static bool write_png(output_file & out, const float * mel, int n_mels, const float * emb, int n_pos, int d) {
    const int W = n_pos, gap = 4, H = n_mels + gap + d;
    std::vector<uint8_t> img((size_t)W * H * 3, 255);
    auto range = [](const float * v, size_t n, float & lo, float & hi) {
        lo = INFINITY; hi = -INFINITY;
        for (size_t i = 0; i < n; i++) { lo = std::min(lo, v[i]); hi = std::max(hi, v[i]); }
        if (hi <= lo) hi = lo + 1;
    };
    float lo, hi;
    range(mel, (size_t)n_mels * 2 * n_pos, lo, hi);
    for (int m = 0; m < n_mels; m++)                         // low frequencies at the bottom of the panel
        for (int x = 0; x < W; x++) {
            const float v = 0.5f * (mel[(size_t)m * 3000 + 2 * x] + mel[(size_t)m * 3000 + 2 * x + 1]);
            colour((v - lo) / (hi - lo), &img[((size_t)(n_mels - 1 - m) * W + x) * 3]);
        }
    // the embedding: clip at +-3 standard deviations
    double s = 0, s2 = 0;
    const size_t n = (size_t)n_pos * d;
    for (size_t i = 0; i < n; i++) { s += emb[i]; s2 += (double)emb[i] * emb[i]; }
    const float mean = (float)(s / n), sd = (float)std::sqrt(std::max(1e-12, s2 / n - (s / n) * (s / n)));
    for (int c = 0; c < d; c++)
        for (int x = 0; x < W; x++)
            colour((emb[(size_t)x * d + c] - mean) / (6 * sd) + 0.5f, &img[((size_t)(n_mels + gap + c) * W + x) * 3]);
    errno = 0;
    if (!stbi_write_png_to_func(png_write_to, out.f, W, H, 3, img.data(), W * 3) || ferror(out.f) || fflush(out.f) != 0) {
        print_error("writing '%s' failed: %s\n", out.path.c_str(), errno ? strerror(errno) : "PNG encoder error");
        return false;
    }
    return true;
}
#endif

// =====================================================================================
// inputs
// =====================================================================================

// One input: its header is read up front (so that a bad file stops the run before the
// expensive part) and the file closed again; it is reopened when its turn comes and closed
// when read, so that thousands of inputs hold neither file descriptors nor memory.
// Standard input cannot be reopened and stays open.
struct input {
    std::string path;
    whisper_audio_info info{};
    size_t samples = 0;           // 16 kHz samples read so far
    size_t samples_encoded = 0;   // of them, those the rows cover (an audio LLM may keep fewer)
    size_t first_row = 0, rows = 0, windows = 0;
    std::vector<int> audio_positions;   // per window: the positions that hold audio
    bool warned = false;          // its stream's warning (a length other than its header's) printed
    size_t expected_windows = 0;  // from its header (0: not known)
    bool failed = false;          // --keep-going: skipped, with error the library's message
    std::string error;
};

// The 16 kHz samples a file of known length decodes to (the resampler's rounding), or -1.
static long long samples_16k(const whisper_audio_info & in) {
    if (in.frames < 0) return -1;
    return llround((double)in.frames * WHISPER_AUDIO_SAMPLE_RATE / in.sample_rate);
}

// The line that says what an input is (its header).
static void note_input(const input & in) {
    const whisper_audio_info & i = in.info;
    if (i.frames >= 0)
        note("main: '%s': %s, %d Hz, %d channel%s, %.3f s\n", in.path.c_str(), i.format, i.sample_rate,
                i.channels, i.channels == 1 ? "" : "s", (double)i.frames / i.sample_rate);
    else
        note("main: '%s': %s, %d Hz, %d channel%s, length not known ahead\n", in.path.c_str(), i.format,
                i.sample_rate, i.channels, i.channels == 1 ? "" : "s");
}

// Each input's header; with keep_going one that fails is marked failed (fail(): reported) and
// the others are read, else the first failure stops the run. Standard input is read once, by
// the reader: its header is read (and noted) when its turn comes.
template <typename F> static bool check_inputs(std::vector<input> & inputs, bool keep_going, size_t & n_read, F && fail) {
    size_t stdin_uses = 0;
    n_read = 0;
    const bool each = inputs.size() <= (size_t)LIST_INPUTS || g_verbosity >= 2;
    for (size_t k = 0; k < inputs.size(); k++) {
        input & in = inputs[k];
        if (in.path == "-" && ++stdin_uses > 1) {
            print_error("standard input ('-') can be read only once\n");
            return false;
        }
        if (in.path == "-") {
            in.info.frames = -1;
            continue;
        }
        whisper_audio_stream * s = whisper_audio_stream_open(in.path.c_str(), &in.info);
        if (!s && keep_going) { fail(k, whisper_audio_last_error()); continue; }
        if (!s) { print_error("%s\n", whisper_audio_last_error()); return false; }
        whisper_audio_stream_close(s);
        n_read++;
        if (each) note_input(in);
    }
    return true;
}

// =====================================================================================
// the run: inputs decoded block by block into the library's pipeline, which cuts windows
// and batches, encodes (on every device given) and hands back the rows in input order
// =====================================================================================

struct job {
    const params & p;
    const whisper_audio_hparams & hp;
    whisper_audio_model * model;
    std::vector<whisper_audio_encoder *> encs;   // one per device
    whisper_audio_pipeline * pipe = nullptr;
    int n_threads = 0;                           // the CPU threads used (the encoder's own count)
    std::string dtype;                           // the compute type used: f32 on the CPU
    std::vector<input> inputs;
    bool per_file = false;
    std::vector<std::string> out_names;          // per input, with per_file
    write_behind behind;                         // the writers' rows, written on its thread
    std::vector<npy_writer> writers;             // one per input with per_file, else one or none
    size_t n_committed = 0;                      // per_file: inputs [0, n_committed) are written
    std::vector<size_t> row_shape;
    bool rows_are_positions = false;             // --no-pad: a row per position
    bool tokens = false;                         // an audio-LLM model's tokens (the library decides: whisper_audio_rows_are_tokens)
    size_t width = 0;                            // with tokens: floats in a row
    output_file png;
    bool emit_failed = false;                    // emit stopped the pipeline (its message printed)

    size_t n_windows = 0, n_rows = 0, expected_windows = 0;
    double decode_ms = 0, run_ms = 0, pipeline_ms = 0;   // decode: the headers' check, then the reader's workers' busy time
    double wait_ms = 0;                          // the run waiting on the reader for audio
    double sum = 0, sum2 = 0;
    float vmin = INFINITY, vmax = -INFINITY;
    size_t n_values = 0;
    bool show_progress = false, progress_tty = false;   // the line: redrawn on a terminal, else every 10 s
    bool lengths_known = true;                   // every input's length known ahead (expected_windows is exact)
    double last_progress_s = -1;
    double first_window_s = -1;                  // when the first batch's windows came: the ETA's rate starts there
    size_t first_windows = 0;                    // how many came with it
    std::chrono::steady_clock::time_point t_work;
    size_t n_failed = 0;                         // --keep-going: inputs skipped
    // the totals before the input being emitted (mark_input), so that a failure takes its rows back
    struct totals { double sum, sum2; float vmin, vmax; size_t n_values, n_rows, n_windows; } mark{};
    int64_t mark_input = -1;

    job(const params & p_, whisper_audio_model * m) : p(p_), hp(*whisper_audio_model_hparams(m)), model(m) {}

    size_t d() const { return (size_t)hp.n_state; }

    // The rows an input of n 16 kHz samples makes (-1: not known): windows, or with
    // --no-pad positions.
    long long rows_for(long long n) const {
        if (n < 0) return -1;
        if (tokens) return (long long)whisper_audio_n_tokens(model, (size_t)n, p.projector);
        return (long long)(rows_are_positions ? whisper_audio_n_positions_total((size_t)n) : whisper_audio_n_windows((size_t)n));
    }

    bool plan_outputs();
    bool open_outputs();
    whisper_audio_reader * reader = nullptr;     // the inputs, decoded ahead by its workers
    std::vector<float> buf;                      // a block of decoded audio
    size_t pending = 0;                          // samples of input pending_input in buf, read by start for the PNG
    size_t pending_input = 0;

    bool draw_png(const float * pcm, size_t n, const float * emb = nullptr);
    std::vector<float> png_pcm;                  // the PNG's window, drawn from the pipeline's rows of it
    size_t png_input = SIZE_MAX;                 // ... which input's first window
    double png_ms = 0;                           // the PNG's own work (not the encoders' init)
    bool start();
    bool emit(const whisper_audio_rows & r);
    // x[0, n) into the summary statistics; false if one is NaN or infinite. Blocks of 1024 in
    // four float lanes (GCC's vector types, SSE2's width: the plain loop did not vectorise and
    // took 2-3 ms of the caller's thread per large-v3 window, half the H200's forward; this 0.6 ms
    // on the 2-core Xeon), f32 partial sums of 256 values, then double totals.
    bool add_stats(const float * x, size_t n) {
        typedef float    f4 __attribute__((vector_size(16)));
        typedef uint32_t u4 __attribute__((vector_size(16)));
        const u4 exponent = {0x7f800000u, 0x7f800000u, 0x7f800000u, 0x7f800000u};
        u4 bad = {};                             // lanes that met an all-ones exponent: inf or NaN
        size_t i = 0;
        while (i + 4 <= n) {
            const size_t i1 = std::min(n - (n - i) % 4, i + 1024);
            f4 s = {}, q = {}, lo = {}, hi = {}, v;
            lo += vmin;
            hi += vmax;
            for (; i < i1; i += 4) {
                memcpy(&v, x + i, sizeof(v));
                u4 bits;
                memcpy(&bits, &v, sizeof(bits));
                bad |= (u4)((bits & exponent) == exponent);
                s += v;
                q += v * v;
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            for (int k = 0; k < 4; k++) {
                sum += s[k];
                sum2 += q[k];
                vmin = std::min(vmin, lo[k]);
                vmax = std::max(vmax, hi[k]);
            }
        }
        bool finite = !(bad[0] | bad[1] | bad[2] | bad[3]);
        for (; i < n; i++) {
            const float v = x[i];
            finite = finite && std::fabs(v) <= FLT_MAX;
            sum += v;
            sum2 += (double)v * v;
            vmin = std::min(vmin, v);
            vmax = std::max(vmax, v);
        }
        n_values += n;
        return finite;
    }
    bool commit_inputs_before(size_t k);
    bool fail_input(size_t k, const std::string & msg);
    long long read_samples(size_t k, float * dst, size_t max, std::string & err);
    void progress(bool last);
    bool pipeline_error(const char * what);
    bool run();
    void abandon();
};

static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Plans the outputs and refuses, before any input is opened, what would lose data: two
// inputs that map to one .npy, an output that is one of the inputs.
bool job::plan_outputs() {
    per_file = is_dir_output(p.output);
    std::set<std::pair<dev_t, ino_t>> input_files;
    for (const input & in : inputs) {
        struct stat st;
        if (in.path != "-" && stat(in.path.c_str(), &st) == 0) input_files.insert({st.st_dev, st.st_ino});
    }
    auto overwrites_input = [&](const std::string & target) {
        struct stat st;
        if (target == "-" || stat(target.c_str(), &st) != 0 || !input_files.count({st.st_dev, st.st_ino})) return false;
        print_error("the output '%s' is one of the inputs\n", target.c_str());
        return true;
    };
    if (!p.png.empty() && overwrites_input(p.png)) return false;
    if (per_file) {
        out_names = output_names(p.output, p.files, p.keep_ext);
        std::map<std::string, size_t> seen;
        for (size_t i = 0; i < out_names.size(); i++) {
            auto it = seen.emplace(out_names[i], i);
            if (!it.second) {
                print_error("'%s' and '%s' would both be written to '%s'; nothing was written\n",
                        inputs[it.first->second].path.c_str(), inputs[i].path.c_str(), out_names[i].c_str());
                return false;
            }
            if (overwrites_input(out_names[i])) return false;
        }
        for (const std::string & name : out_names)
            if (!make_parent_dirs(name)) return false;
    }
    return p.output.empty() || per_file || !overwrites_input(p.output);
}

// Opens the output (one array) and the PNG, once the inputs' headers have been read.
bool job::open_outputs() {
    const bool half = p.outtype == "f16";
    if (per_file) {
        writers.resize(inputs.size());         // opened as each input's first row comes
        for (npy_writer & w : writers) w.behind = &behind;
    } else if (!p.output.empty()) {
        // a stream is promised the row count only when no input can fail and take its rows back
        long long expected = p.keep_going ? -1 : 0;
        for (const input & in : inputs) {
            const long long r = rows_for(samples_16k(in.info));
            expected = r < 0 || expected < 0 ? -1 : expected + r;
        }
        writers.resize(1);
        writers[0].behind = &behind;
        if (!writers[0].open(p.output, half, row_shape, expected)) return false;
    }
    if (!p.png.empty() && !png.open(p.png)) return false;
    return true;
}

// Per file: every input before k is complete, so its .npy is renamed into place.
bool job::commit_inputs_before(size_t k) {
    for (; n_committed < k && n_committed < writers.size(); n_committed++)
        if (writers[n_committed].is_open && !writers[n_committed].finish()) return false;
    return true;
}

// --keep-going: input k failed (msg: the library's message, which names the file): reported on
// one line, and whatever of it was written taken back (its own .npy removed, or the one array
// cut back to the rows before it). False when that fails (an output error: the run stops).
bool job::fail_input(size_t k, const std::string & msg) {
    input & in = inputs[k];
    if (in.failed) return true;
    in.failed = true;
    in.error = msg;
    n_failed++;
    end_progress_line();
    fprintf(stderr, "error: %s (skipped: --keep-going)\n", msg.c_str());
    expected_windows -= std::min(expected_windows, in.expected_windows);
    if (in.windows > 0 && mark_input == (int64_t)k) {     // its rows so far: the last ones emitted
        sum = mark.sum; sum2 = mark.sum2; vmin = mark.vmin; vmax = mark.vmax;
        n_values = mark.n_values; n_rows = mark.n_rows; n_windows = mark.n_windows;
        if (!per_file && !writers.empty() && !writers[0].truncate_to(n_rows)) return false;
    }
    if (per_file && k < writers.size() && writers[k].is_open) writers[k].abandon();
    in.windows = in.rows = in.samples_encoded = 0;
    in.audio_positions.clear();
    return true;
}

// The progress line: windows done (of those expected when every length is known), the rate,
// and then the time left. On a terminal redrawn each window; elsewhere (--progress) a line
// every 10 s and the last.
// The first batch carries the start-up (the encoder's graph, the decoders filling it), so a rate
// taken over it predicts far too long a run: the ETA's rate starts at the first window, and no
// ETA is shown before this much work.
static const double ETA_AFTER_S = 3.0;

void job::progress(bool last) {
    const double s = ms_since(t_work) / 1000.0, rate = s > 0 ? n_windows / s : 0.0;
    if (n_windows > 0 && first_window_s < 0) first_window_s = s;
    if (first_window_s >= 0 && s - first_window_s < 0.05) first_windows = n_windows;   // the same batch
    if (!progress_tty && !last && last_progress_s >= 0 && s - last_progress_s < 10) return;
    last_progress_s = s;
    char done[64], eta[64] = "", failed[64] = "";
    if (lengths_known && expected_windows >= n_windows) {
        snprintf(done, sizeof(done), "%zu/%zu windows", n_windows, expected_windows);
        // the rate since the first window: the time before it (the model's graph, the first
        // batch filling) is not repeated for the windows left
        const double steady = n_windows > first_windows && s > first_window_s
                            ? (n_windows - first_windows) / (s - first_window_s) : 0.0;
        if (n_windows == expected_windows || (steady > 0 && s >= ETA_AFTER_S)) {
            const long left = n_windows == expected_windows ? 0 : lround((expected_windows - n_windows) / steady);
            snprintf(eta, sizeof(eta), ", ETA %ld:%02ld:%02ld", left / 3600, left / 60 % 60, left % 60);
        }
    } else {
        snprintf(done, sizeof(done), "%zu windows", n_windows);
    }
    if (n_failed) snprintf(failed, sizeof(failed), ", %zu input%s failed", n_failed, n_failed == 1 ? "" : "s");
    fprintf(stderr, progress_tty ? "\rmain: %s, %.1f windows/s%s%s   " : "main: %s, %.1f windows/s%s%s\n", done, rate, eta, failed);
    g_line_open = progress_tty;
}

// The rows of one encoded window (from the pipeline, in input order), or of an audio-LLM
// model's whole input (its tokens), into the statistics and the writer.
bool job::emit(const whisper_audio_rows & r) {
    input & in = inputs[(size_t)r.input];
    if (in.failed) return true;                  // --keep-going: the rest of a failed input's rows
    if ((size_t)r.input == png_input && r.window == 0) {
        std::vector<float> f32;
        if (r.f16) {
            f32.resize((size_t)r.n_rows * r.n_state);
            whisper_audio_f16_to_f32((const uint16_t *)r.data, f32.data(), f32.size());
        }
        png_input = SIZE_MAX;
        if (!draw_png(png_pcm.data(), png_pcm.size(), r.f16 ? f32.data() : (const float *)r.data)) return false;
    }
    if (per_file && !commit_inputs_before((size_t)r.input)) return false;
    if (mark_input != r.input) {
        mark = {sum, sum2, vmin, vmax, n_values, n_rows, n_windows};
        mark_input = r.input;
    }
    const size_t n = (size_t)r.n_rows * r.n_state;
    bool finite = true;
    if (r.f16) {            // in blocks through f32 (the library's f16 conversion)
        float block[4096];
        for (size_t i = 0; finite && i < n; i += 4096) {
            const size_t k = std::min<size_t>(4096, n - i);
            whisper_audio_f16_to_f32((const uint16_t *)r.data + i, block, k);
            finite = add_stats(block, k);
        }
    } else {
        finite = add_stats((const float *)r.data, n);
    }
    if (!finite) {
        char msg[PATH_MAX + 256];
        snprintf(msg, sizeof(msg), "%s: window %lld of the encoder output holds non-finite values; nothing of it was "
                 "written", in.path.c_str(), (long long)r.window);
        if (!p.keep_going) { print_error("%s\n", msg); return false; }
        in.windows++;                            // so that fail_input takes back the statistics just added
        return fail_input((size_t)r.input, msg);
    }
    const size_t n_out_rows = tokens || rows_are_positions ? (size_t)r.n_rows : 1;
    in.audio_positions.push_back(r.audio_positions);
    if (in.windows == 0) in.first_row = per_file ? 0 : n_rows;
    in.rows += n_out_rows;
    in.windows++;
    in.samples_encoded += r.samples;
    n_rows += n_out_rows;
    n_windows++;
    if (show_progress) progress(false);
    npy_writer * wr = per_file ? &writers[(size_t)r.input] : writers.empty() ? nullptr : &writers[0];
    if (wr && per_file && !wr->is_open &&
        !wr->open(out_names[(size_t)r.input], p.outtype == "f16", row_shape, rows_for(samples_16k(in.info))))
        return false;
    return !wr || wr->append(r.data, n_out_rows);
}

// The first window's log-mel and embedding as a PNG. emb: the window's rows as the pipeline
// gave them; NULL (pooled rows, which are not the window's): encoded here, before the pipeline
// takes the encoders.
bool job::draw_png(const float * pcm, size_t n, const float * emb) {
#ifdef WHISPER_AUDIO_PNG
    const auto t = std::chrono::steady_clock::now();
    const size_t N = WHISPER_AUDIO_N_SAMPLES, F = WHISPER_AUDIO_N_FRAMES;
    const int n_frames = p.no_pad && n < N ? 2 * whisper_audio_n_positions(n) : (int)F;
    std::vector<float> mel((size_t)hp.n_mels * F), packed, own;
    bool ok = whisper_audio_log_mel(model, pcm, n, mel.data());
    if (ok && !emb) {
        packed.resize((size_t)hp.n_mels * n_frames);
        own.resize((size_t)(n_frames / 2) * d());
        for (int m = 0; m < hp.n_mels; m++) std::copy_n(mel.begin() + m * F, n_frames, packed.begin() + (size_t)m * n_frames);
        ok = whisper_audio_encode_mel_frames(encs[0], packed.data(), 1, n_frames, own.data());
        emb = own.data();
    }
    if (!ok) { print_error("%s\n", whisper_audio_last_error()); return false; }
    ok = write_png(png, mel.data(), hp.n_mels, emb, n_frames / 2, (int)d());
    png_ms += ms_since(t);
    return ok;
#else
    (void)pcm; (void)n; (void)emb;
    return false;
#endif
}

// Up to max samples of input k into dst (fewer at its end); -1 on an error (its message in err).
long long job::read_samples(size_t k, float * dst, size_t max, std::string & err) {
    input & in = inputs[k];
    if (in.path == "-" && in.samples == 0 && in.info.sample_rate == 0) {   // standard input: its header now
        if (!whisper_audio_reader_info(reader, k, &in.info)) { err = whisper_audio_last_error(); return -1; }
        note_input(in);
    }
    size_t got = 0;
    while (got < max) {
        const int64_t n = whisper_audio_reader_read(reader, k, dst + got, max - got);
        if (n < 0) { err = whisper_audio_last_error(); return -1; }
        if (n == 0) {                           // the end: a file cut short (or longer than it says) is noted
            const char * w = whisper_audio_reader_warning(reader, k);
            if (w && !in.warned) note("warning: %s\n", w);
            in.warned = true;
            break;
        }
        got += (size_t)n;
    }
    return (long long)got;
}

bool job::pipeline_error(const char * what) {
    if (!emit_failed) print_error("%s: %s\n", what, whisper_audio_last_error());
    return false;
}

// The PNG (while the encoders are free), then the pipeline over the encoders.
bool job::start() {
    // the lengths known ahead: the pipeline evens the batches out (120 windows at -b 32: 4 x 30);
    // with every input failed, still one window's worth, the least. Counted before the PNG's
    // input, which may fail here, as the run planned it
    const size_t n_windows_ahead = lengths_known ? std::max<size_t>(1, expected_windows) : 0;
    buf.resize(1 << 16);                             // 4 s of audio a read
    // the reader: every input decoded ahead on its workers (-t of them), as far as the model
    // uses it and one sample more (to tell whether there is more)
    std::vector<const char *> paths;
    for (const input & in : inputs) paths.push_back(in.path.c_str());
    whisper_audio_reader_params rp = whisper_audio_reader_default_params();
    rp.n_workers = p.n_threads;
    const size_t used = whisper_audio_samples_used(model, tokens);
    rp.max_samples = used == SIZE_MAX ? 0 : used + 1;
    if (!(reader = whisper_audio_reader_init(paths.data(), paths.size(), rp))) return pipeline_error("starting the decoders");
    if (!png.path.empty()) {                         // the first input that decodes (with --keep-going)
        buf.resize(WHISPER_AUDIO_N_SAMPLES);
        for (pending_input = 0; pending_input < inputs.size(); pending_input++) {
            input & in = inputs[pending_input];
            if (in.failed) continue;
            const auto t = std::chrono::steady_clock::now();
            std::string err;
            long long got = read_samples(pending_input, buf.data(), buf.size(), err);
            wait_ms += ms_since(t);
            if (got == 0) err = in.path + ": no audio samples";
            if (got <= 0 && p.keep_going) {
                if (!fail_input(pending_input, err)) return false;
                continue;
            }
            if (got <= 0) { print_error("%s\n", err.c_str()); return false; }
            // full rows: drawn from the pipeline's own rows of the window (emit); pooled: encoded now
            if (p.pool_mean && !draw_png(buf.data(), (size_t)got)) return false;
            if (!p.pool_mean) {
                png_pcm.assign(buf.begin(), buf.begin() + got);
                png_input = pending_input;
            }
            pending = (size_t)got;
            break;
        }
    }
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.pool = p.pool_mean ? WHISPER_AUDIO_POOL_MEAN : WHISPER_AUDIO_POOL_NONE;
    pp.no_pad = p.no_pad;
    pp.f16 = p.outtype == "f16";
    pp.n_windows = n_windows_ahead;
    pp.user = this;
    pp.on_rows = [](const whisper_audio_rows * r, void * user) {
        job * j = (job *)user;
        j->emit_failed = !j->emit(*r);
        return !j->emit_failed;
    };
    if (!(pipe = whisper_audio_pipeline_init(encs.data(), (int)encs.size(), pp))) return pipeline_error("starting the encoders");
    return true;
}

// Each input decoded a block at a time into the pipeline; then every output is finished.
// An input is read only as far as the model uses it (Qwen2-Audio's tokens: its first 30 s).
// With --keep-going an input that fails to decode (or whose rows are not finite) is dropped
// from the pipeline (whisper_audio_pipeline_drop_input: none of its rows come) and the next
// one starts; so is one that failed at the header check, so that the pipeline's input
// numbers stay main's.
bool job::run() {
    t_work = std::chrono::steady_clock::now();
    // on a terminal, a line at once: the first window may take seconds (a large model, a big batch)
    if (show_progress && progress_tty) progress(false);
    const double png_before = png_ms;
    const size_t used = whisper_audio_samples_used(model, tokens);
    for (size_t k = 0; k < inputs.size(); k++) {
        input & in = inputs[k];
        std::string err;
        while (!in.failed) {
            long long got = (long long)pending;
            if (pending && k == pending_input) {
                pending = 0;
            } else {
                const auto t = std::chrono::steady_clock::now();
                // past what the model uses, one sample more only, to tell whether there is more
                got = read_samples(k, buf.data(), in.samples < used ? std::min(buf.size(), used - in.samples) : 1, err);
                wait_ms += ms_since(t);
            }
            if (got < 0) break;
            if (got == 0) break;
            if (in.samples >= used) {
                const long long total = samples_16k(in.info);
                char len[64] = "longer";
                if (total >= 0) snprintf(len, sizeof(len), "%.3f s", (double)total / WHISPER_AUDIO_SAMPLE_RATE);
                note("main: '%s': %s; %s keeps its first %.0f s (its processor's rule): the rest is not read\n",
                        in.path.c_str(), len, whisper_audio_projector_name(hp.projector), (double)used / WHISPER_AUDIO_SAMPLE_RATE);
                break;
            }
            if (!whisper_audio_pipeline_push(pipe, buf.data(), (size_t)got)) return pipeline_error(in.path.c_str());
            in.samples += (size_t)got;
        }
        if (err.empty() && !in.failed && in.samples == 0) err = in.path + ": no audio samples";
        if (!err.empty() && !p.keep_going) { print_error("%s\n", err.c_str()); return false; }
        if (!err.empty() && !fail_input(k, err)) return false;
        if (in.failed) {
            if (!whisper_audio_pipeline_drop_input(pipe)) return pipeline_error(in.path.c_str());
            continue;
        }
        if (!whisper_audio_pipeline_end_input(pipe)) return pipeline_error(in.path.c_str());
    }
    if (!whisper_audio_pipeline_finish(pipe)) return pipeline_error("encoding");
    decode_ms += whisper_audio_reader_busy_ms(reader);
    run_ms = ms_since(t_work) - (png_ms - png_before);   // the PNG drawn from the first window: not the run
    if (show_progress && (n_windows > 0 || n_failed > 0)) {
        if (!progress_tty) progress(true);
        end_progress_line();
    }
    if (per_file && !commit_inputs_before(inputs.size())) return false;
    if (!per_file && !writers.empty() && !writers[0].finish()) return false;
    return png.path.empty() || png.commit();
}

// After an error: every temporary removed; outputs already complete (per file) stay.
void job::abandon() {
    for (npy_writer & w : writers) if (w.is_open) w.abandon();
    png.discard();
    if (per_file && n_committed > 0)
        note("main: the %zu output%s of the inputs before '%s' %s complete and kept\n", n_committed,
                n_committed == 1 ? "" : "s", inputs[std::min(n_committed, inputs.size() - 1)].path.c_str(),
                n_committed == 1 ? "is" : "are");
}

// =====================================================================================
// main
// =====================================================================================

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, no
// surrogates, at most U+10FFFF), or 0.
static size_t utf8_length(const std::string & s, size_t i) {
    const unsigned char c = (unsigned char)s[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; k++) {
        const unsigned char d = (unsigned char)s[i + k];
        if ((d >> 6) != 2) return 0;
        cp = cp << 6 | (d & 0x3f);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

// A JSON string's contents. A byte that is not part of well-formed UTF-8 (a file name in
// another encoding) becomes \udcXX, as Python's os.fsdecode has it (surrogateescape), so the
// JSON stays valid and os.fsencode gives the name's bytes back.
static std::string json_escape(const std::string & s) {
    std::string o;
    for (size_t i = 0; i < s.size();) {
        const char c = s[i];
        const size_t n = utf8_length(s, i);
        char b[8];
        if (n == 0) { snprintf(b, sizeof(b), "\\udc%02x", (unsigned char)c); o += b; i++; continue; }
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if ((unsigned char)c < 0x20 || c == 0x7f) { snprintf(b, sizeof(b), "\\u%04x", (unsigned char)c); o += b; }
        else o.append(s, i, n);
        i += n;
    }
    return o;
}

// --json's list of the inputs that failed: [{"path": ..., "error": the library's message}, ...].
static std::string json_failed(const std::vector<input> & inputs) {
    std::string o;
    for (const input & in : inputs)
        if (in.failed) o += std::string(o.empty() ? "\n  " : ",\n  ") + "{\"path\": \"" + json_escape(in.path) + "\", \"error\": \"" + json_escape(in.error) + "\"}";
    return "[" + o + "]";
}

// --json when the run stopped (status 1 or 2): one document all the same, with the error.
static void print_error_json(int status, const std::vector<input> & inputs) {
    printf("{\"version\": \"%s\", \"status\": %d, \"error\": \"%s\", \"failed\": %s}\n", whisper_audio_version(), status,
           json_escape(g_last_error.empty() ? "unknown error" : g_last_error).c_str(), json_failed(inputs).c_str());
    fflush(stdout);
}

static void print_summary(const job & j, FILE * human, double load_ms, double init_ms, double total_ms) {
    const params & p = j.p;
    const double mean = j.n_values ? j.sum / j.n_values : 0.0;
    const double sd = j.n_values ? std::sqrt(std::max(0.0, j.sum2 / j.n_values - mean * mean)) : 0.0;
    std::string shape = std::to_string(j.n_rows);
    for (size_t x : j.row_shape) shape += ", " + std::to_string(x);
    const bool quiet = g_verbosity < 1, each = j.inputs.size() <= (size_t)LIST_INPUTS || g_verbosity >= 2;
    if (!quiet)
        fprintf(human, "output: %s[%s] %s: mean %.6f, std %.6f, min %.6f, max %.6f\n", j.per_file ? "per file, in all " : "",
                shape.c_str(), p.outtype == "f16" ? "float16" : "float32", mean, sd, j.vmin, j.vmax);
    const std::string where = p.output == "-" ? "standard output" : p.output.empty() ? "nowhere (no -o)" : p.output;
    for (size_t i = 0; i < j.inputs.size() && !quiet && each; i++) {
        const input & in = j.inputs[i];
        if (in.failed) { fprintf(human, "  %s: failed, skipped\n", in.path.c_str()); continue; }
        fprintf(human, "  %s: %.3f s, %zu window%s -> %s rows %zu-%zu\n", in.path.c_str(),
                (double)in.samples / WHISPER_AUDIO_SAMPLE_RATE, in.windows, in.windows == 1 ? "" : "s",
                j.per_file ? j.writers[i].out.path.c_str() : where.c_str(), in.first_row, in.first_row + in.rows - 1);
    }
    double mel_ms = 0, encode_ms = 0;               // summed over the encoders (they overlap)
    for (const whisper_audio_encoder * e : j.encs) {
        const whisper_audio_timings t = whisper_audio_encoder_timings(e);
        mel_ms += t.mel_ms;
        encode_ms += t.encode_ms;
    }
    const double per_window = j.n_windows ? j.run_ms / j.n_windows : 0.0;
    if (!quiet && !each)
        fprintf(human, "  %zu inputs -> %s (-v lists each)\n", j.inputs.size() - j.n_failed, where.c_str());
    if (!quiet && j.n_failed)
        fprintf(human, "main: %zu of %zu inputs failed and were skipped (exit status 3)\n", j.n_failed, j.inputs.size());
    // a run without -o encodes (a check, or a timing) and writes nothing: say so, not only in the rows' lines
    if (!quiet && p.output.empty())
        fprintf(human, "main: no -o given: the embeddings were computed and not written\n");
    if (!quiet) fprintf(stderr, "\ntimings: load %.1f ms, init %.1f ms (of which the pipeline %.1f), decode %.1f ms (the run waited %.1f ms "
            "for it), mel %.1f ms, encode %.1f ms; run %.1f ms (%.2f ms per window, %.1f windows per second), total %.1f ms\n",
            load_ms, init_ms, j.pipeline_ms, j.decode_ms, j.wait_ms, mel_ms, encode_ms, j.run_ms, per_window, per_window > 0 ? 1000.0 / per_window : 0.0,
            total_ms);
    if (!p.json) return;
    const whisper_audio_hparams & hp = j.hp;
    printf("{\"version\": \"%s\", \"status\": %d, \"error\": null, \"model\": \"%s\", \"backend\": \"%s\", \"n_state\": %d, \"n_layer\": %d, \"n_mels\": %d,\n",
           whisper_audio_version(), j.n_failed ? 3 : 0, json_escape(p.model).c_str(), json_escape(whisper_audio_encoder_backend(j.encs[0])).c_str(), hp.n_state, hp.n_layer, hp.n_mels);
    printf(" \"output\": %s, \"outtype\": \"%s\", \"per_file\": %s, \"shape\": [%s], \"windows\": %zu,\n",
           p.output.empty() ? "null" : ("\"" + json_escape(p.output) + "\"").c_str(), p.outtype.c_str(),
           j.per_file ? "true" : "false", shape.c_str(), j.n_windows);
    printf(" \"settings\": {\"layer\": %d, \"final_ln\": %s, \"pool\": %s, \"no_pad\": %s, \"batch\": %d, \"device\": \"%s\", "
           "\"dtype\": \"%s\", \"threads\": %d, \"projector\": %s, \"tokens\": %s},\n",
           p.layer, p.final_ln && p.layer < 0 ? "true" : "false", p.pool_mean ? "\"mean\"" : "null", p.no_pad ? "true" : "false",
           p.batch, p.device.c_str(), json_escape(j.dtype).c_str(), j.n_threads,
           hp.projector == WHISPER_AUDIO_PROJECTOR_NONE ? "null" : ("\"" + std::string(whisper_audio_projector_name(hp.projector)) + "\"").c_str(),
           j.tokens && p.projector ? "true" : "false");
    printf(" \"files\": [");
    for (size_t i = 0, n = 0; i < j.inputs.size(); i++) {
        const input & in = j.inputs[i];
        if (in.failed) continue;
        std::string positions;
        for (int n : in.audio_positions) positions += (positions.empty() ? "" : ", ") + std::to_string(n);
        printf("%s\n  {\"path\": \"%s\", \"format\": \"%s\", \"sample_rate\": %d, \"channels\": %d, \"seconds\": %.6f, "
               "\"seconds_encoded\": %.6f, \"windows\": %zu, \"first_row\": %zu, \"rows\": %zu, \"audio_positions\": [%s]%s%s%s}",
               n++ ? "," : "", json_escape(in.path).c_str(), json_escape(in.info.format).c_str(), in.info.sample_rate,
               in.info.channels, (double)in.samples / WHISPER_AUDIO_SAMPLE_RATE,
               (double)in.samples_encoded / WHISPER_AUDIO_SAMPLE_RATE, in.windows, in.first_row, in.rows,
               positions.c_str(), j.per_file ? ", \"output\": \"" : "", j.per_file ? json_escape(j.writers[i].out.path).c_str() : "",
               j.per_file ? "\"" : "");
    }
    printf("],\n \"failed\": %s,\n \"timings_ms\": {\"load\": %.3f, \"init\": %.3f, \"init_pipeline\": %.3f, \"decode\": %.3f, \"decode_wait\": %.3f, "
           "\"mel\": %.3f, \"encode\": %.3f, \"run\": %.3f, \"png\": %.3f, \"total\": %.3f}}\n", json_failed(j.inputs).c_str(), load_ms,
           init_ms, j.pipeline_ms, j.decode_ms, j.wait_ms, mel_ms, encode_ms,
           j.run_ms, j.png_ms, total_ms);
}

// Everything after the command line; returns the exit code.
// The encoder's parameters from the command line (max_batch: -b, evened out by the pipeline
// when the lengths are known).
static whisper_audio_encoder_params encoder_params_of(const params & p) {
    whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
    ep.device = p.device == "cpu" ? WHISPER_AUDIO_DEVICE_CPU : p.device == "cuda" ? WHISPER_AUDIO_DEVICE_CUDA
                                                                                     : WHISPER_AUDIO_DEVICE_AUTO;
    ep.dtype = p.dtype == "fp8" ? WHISPER_AUDIO_DTYPE_FP8 : p.dtype == "bf16" ? WHISPER_AUDIO_DTYPE_BF16 : WHISPER_AUDIO_DTYPE_F16;
    if (p.n_threads > 0) ep.n_threads = p.n_threads;
    ep.max_batch = p.batch;
    ep.output_layer = p.layer;
    ep.final_ln = p.final_ln;
    ep.projector = p.projector;
    return ep;
}

// One encoder per GPU asked for (cuda:0,1 or cuda:all), else one; false with the message printed.
static bool make_encoders(const params & p, whisper_audio_model * model, std::vector<whisper_audio_encoder *> & encs,
                          std::vector<int> & gpus) {
    whisper_audio_encoder_params ep = encoder_params_of(p);
    gpus = p.gpus;
    if (p.all_gpus) {
        for (int g = 0; g < whisper_audio_cuda_device_count(); g++) gpus.push_back(g);
        if (gpus.empty()) { print_error("--device cuda:all: no CUDA device\n"); return false; }
    }
    if (gpus.empty()) gpus.push_back(0);
    for (size_t i = 0; i < gpus.size(); i++) {
        ep.gpu_device = gpus[i];
        whisper_audio_encoder * e = whisper_audio_encoder_init(model, ep);
        if (!e) { print_error("%s\n", whisper_audio_last_error()); return false; }
        encs.push_back(e);
    }
    return true;
}

static int run_stream(const params & p, whisper_audio_model * model);

static int run_main(const params & p) {
    FILE * human = p.json || p.output == "-" ? stderr : stdout;   // stdout carries only the JSON or the array
    const auto t_start = std::chrono::steady_clock::now();

    // model
    auto t0 = std::chrono::steady_clock::now();
    whisper_audio_model * model = whisper_audio_model_load(p.model.c_str());
    if (!model) { print_error("%s\n", whisper_audio_last_error()); return 1; }
    const double load_ms = ms_since(t0);
    job j(p, model);
    const whisper_audio_hparams & hp = j.hp;
    note("main: model '%s': n_mels %d, n_ctx %d, n_state %d, n_head %d, n_layer %d, n_ff %d, weights %s\n",
            p.model.c_str(), hp.n_mels, hp.n_ctx, hp.n_state, hp.n_head, hp.n_layer, hp.n_ff, whisper_audio_weight_type_name(hp.weight_type));
    if (!p.save_gguf.empty()) {   // the model as our GGUF; a signal waits until the file is whole or gone
        sigset_t block, old;
        sigemptyset(&block);
        for (int sig : CLEANUP_SIGNALS) sigaddset(&block, sig);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        const bool saved = whisper_audio_model_save_gguf(model, p.save_gguf.c_str());
        if (!saved) fprintf(stderr, "error: %s\n", whisper_audio_last_error());
        else fprintf(stderr, "main: wrote '%s': our GGUF of '%s'\n", p.save_gguf.c_str(), p.model.c_str());
        whisper_audio_model_free(model);
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return saved ? 0 : 1;
    }
    if (p.layer >= hp.n_layer) {
        print_error("--layer %d: the model has layers 0 to %d\n", p.layer, hp.n_layer - 1);
        whisper_audio_model_free(model);
        return 2;
    }

    // an audio-LLM model gives its tokens, unless the options ask for the Whisper encoder's own
    // outputs: the library's rule
    const bool encoder_options = p.layer >= 0 || !p.final_ln || p.pool_mean || p.no_pad;
    {
        whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
        ep.output_layer = p.layer;
        ep.final_ln = p.final_ln;
        whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
        pp.pool = p.pool_mean ? WHISPER_AUDIO_POOL_MEAN : WHISPER_AUDIO_POOL_NONE;
        pp.no_pad = p.no_pad;
        j.tokens = whisper_audio_rows_are_tokens(model, ep, pp);
    }
    const char * usage_error = nullptr;
    if (!p.projector && hp.projector == WHISPER_AUDIO_PROJECTOR_NONE) usage_error = "--no-projector: the model is a Whisper encoder without an audio-LLM projector";
    else if (!p.projector && encoder_options) usage_error = "--no-projector gives the audio tower's output; --layer, --no-final-ln, --pool and --no-pad the Whisper encoder's: choose one";
    else if (j.tokens && !p.png.empty()) usage_error = "--png draws Whisper windows; an audio-LLM model's tokens have none (add --no-pad or --layer N for the encoder's)";
    if (usage_error) {
        print_error("%s\n", usage_error);
        whisper_audio_model_free(model);
        return 2;
    }
    if (j.tokens) {
        note("main: an audio-LLM tower (%s): %s, %d wide\n", whisper_audio_projector_name(hp.projector),
                p.projector ? "the tokens it feeds its LLM" : "the tower's own output", whisper_audio_token_dim(model, p.projector));
    }
    if (p.stream) {
        const int status = run_stream(p, model);
        whisper_audio_model_free(model);
        return status;
    }

    if ((p.no_pad || j.tokens) && !p.output.empty() && !is_dir_output(p.output) && p.files.size() > 1) {
        print_error("%s makes one array per input: with %zu inputs, give -o a directory (ending in '/')\n",
                j.tokens ? "an audio-LLM model" : "--no-pad", p.files.size());
        whisper_audio_model_free(model);
        return 2;
    }

    // inputs, outputs: a row is [1500, d] (a window), [d] (pooled), with --no-pad [d] per position,
    // or a token [width]
    j.rows_are_positions = p.no_pad && !p.pool_mean;
    j.width = j.tokens ? (size_t)whisper_audio_token_dim(model, p.projector) : 0;
    j.row_shape = j.tokens ? std::vector<size_t>{j.width}
                : p.pool_mean || j.rows_are_positions ? std::vector<size_t>{j.d()} : std::vector<size_t>{(size_t)hp.n_ctx, j.d()};
    t0 = std::chrono::steady_clock::now();
    for (const std::string & f : p.files) { j.inputs.emplace_back(); j.inputs.back().path = f; }
    size_t n_headers_read = 0;            // standard input's is read when its turn comes: not counted
    bool ok = j.plan_outputs() &&
              check_inputs(j.inputs, p.keep_going, n_headers_read, [&](size_t k, const char * msg) { j.fail_input(k, msg); });
    j.decode_ms = ms_since(t0);
    bool & lengths_known = j.lengths_known;
    for (input & in : j.inputs) {
        const long long n = in.failed ? 0 : samples_16k(in.info);
        if (n >= 0) in.expected_windows = whisper_audio_n_windows(std::min((size_t)n, whisper_audio_samples_used(model, j.tokens)));
        else lengths_known = false;
        j.expected_windows += in.expected_windows;
    }
    if (j.inputs.size() > (size_t)LIST_INPUTS && g_verbosity < 2)
        note("main: %zu inputs, %zu with their headers read%s (-v lists each)\n", j.inputs.size(), n_headers_read,
             lengths_known ? "" : ", some of length not known ahead");
    ok = ok && j.open_outputs();

    // encoder: batches no larger than the work present
    double init_ms = 0.0;
    if (ok) {
        std::vector<int> gpus;
        t0 = std::chrono::steady_clock::now();
        ok = make_encoders(p, model, j.encs, gpus);
        const auto t_pipe = std::chrono::steady_clock::now();
        ok = ok && j.start();                      // the pipeline: its buffers, its graphs captured
        j.pipeline_ms = ms_since(t_pipe) - j.png_ms;   // a pooled run's PNG (drawn in start): its own figure
        init_ms = ms_since(t0) - j.png_ms;          // a pooled run's PNG encodes its window: not init
        for (whisper_audio_encoder * e : j.encs) whisper_audio_encoder_reset_timings(e);   // nor the run's encode
        // what runs, not what was asked: threads as the encoder capped them, f32 on the CPU
        j.n_threads = ok ? whisper_audio_encoder_n_threads(j.encs[0]) : encoder_params_of(p).n_threads;
        j.dtype = ok && strcmp(whisper_audio_encoder_backend(j.encs[0]), "cpu") == 0 ? whisper_audio_encoder_dtype(j.encs[0]) : p.dtype;
        const int batch = whisper_audio_pipeline_batch(j.pipe);   // what runs: the -b, evened out
        if (ok && strcmp(whisper_audio_encoder_backend(j.encs[0]), "cpu") == 0) {
            if (j.dtype == "bf16") {
                note("main: backend cpu, %d threads, batch %d, GEMMs in bf16 (%s)\n", j.n_threads, batch, whisper_audio_cpu_bf16_isa());
            } else {
                if (p.dtype == "bf16")
                    note("main: --dtype bf16 computes in f32 on this CPU: %s\n",
                         whisper_audio_cpu_bf16_isa() ? "?" : whisper_audio_last_error());
                note("main: backend cpu, %d threads, batch %d\n", j.n_threads, batch);
            }
        } else if (ok) {
            std::string devices;
            for (int g : gpus) devices += (devices.empty() ? "" : ",") + std::to_string(g);
            note("main: backend %s, device%s %s, %s, batch %d\n", whisper_audio_encoder_backend(j.encs[0]),
                    gpus.size() > 1 ? "s" : "", devices.c_str(), p.dtype.c_str(), batch);
        }
    }

    j.progress_tty = isatty(2);
    j.show_progress = g_verbosity >= 1 && (p.progress == 1 || (p.progress == -1 && j.progress_tty));
    if (ok) ok = j.run();
    if (!ok) j.abandon();
    if (ok) print_summary(j, human, load_ms, init_ms, ms_since(t_start));
    if (!ok && p.json) { print_error_json(1, j.inputs); g_json_printed = true; }

    whisper_audio_reader_free(j.reader);
    whisper_audio_pipeline_free(j.pipe);
    for (whisper_audio_encoder * e : j.encs) whisper_audio_encoder_free(e);
    whisper_audio_model_free(model);
    return !ok ? 1 : j.n_failed ? 3 : 0;
}

// =====================================================================================
// --stream: one live input, each window's rows out as it completes
// =====================================================================================
//
// A reader thread decodes the input as it arrives (whisper_audio_stream_open_live: a pipe, raw
// PCM, a file that grows) into a queue; this thread pushes what is there into a streaming
// pipeline and, while nothing is, polls it, so that a window's rows are written within a poll
// (5 ms) of their forward. Each window goes out as its own .npy array [n_rows, n_state] (f32 or
// f16), appended to the output and flushed: a .npy cannot grow after its header, a concatenation
// of them can, and numpy reads one array per np.load(f) call from an open file. --json prints a
// line per window (JSON Lines) as it comes.

// The decoded samples between the reader thread and the pipeline, at most LIVE_QUEUE_MAX of them
// waiting (the reader waits beyond that: an input faster than the encoder is held back).
struct live_queue {
    static const size_t LIVE_QUEUE_MAX = (size_t)60 * WHISPER_AUDIO_SAMPLE_RATE;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<float> samples;
    bool ended = false, stop = false;
    std::string error;                       // the reader's, when it failed
};

static void live_read(whisper_audio_stream * s, live_queue * q) {
    std::vector<float> buf(1 << 14);
    for (;;) {
        const int64_t n = whisper_audio_stream_read(s, buf.data(), buf.size());
        std::unique_lock<std::mutex> lock(q->mu);
        if (n <= 0) {
            if (n < 0) q->error = whisper_audio_last_error();
            q->ended = true;
            q->cv.notify_all();
            return;
        }
        q->cv.wait(lock, [&] { return q->samples.size() < live_queue::LIVE_QUEUE_MAX || q->stop; });
        if (q->stop) return;
        q->samples.insert(q->samples.end(), buf.begin(), buf.begin() + n);
        q->cv.notify_all();
    }
}

struct live_run {
    const params & p;
    FILE * out = nullptr;                    // the arrays, or none (no -o)
    std::chrono::steady_clock::time_point t0;
    std::deque<std::pair<size_t, double>> pushed;    // samples pushed in all, and when (s since t0), from
                                                     // the push that ends the last window out
    double ended_s = -1;                     // when the input ended
    size_t window_end = 0;                   // samples up to the end of the last window out
    size_t n_windows = 0, n_rows = 0;
    double max_latency_ms = 0;
    bool failed = false;

    explicit live_run(const params & p_) : p(p_) {}
    double now_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }

    // A window's rows: its array out, flushed; its line. The latency: from the push that carried its
    // last sample to now (from the input's end for a window that ends there: a short last one).
    bool emit(const whisper_audio_rows & r) {
        const double t = now_s();
        window_end += r.samples;
        while (pushed.size() > 1 && pushed.front().first < window_end) pushed.pop_front();   // of earlier windows
        double last_s = pushed.front().first >= window_end ? pushed.front().second : t;
        if (ended_s >= 0 && window_end == pushed.back().first && r.samples < WHISPER_AUDIO_N_SAMPLES) last_s = ended_s;
        const double latency_ms = (t - last_s) * 1000.0;
        max_latency_ms = std::max(max_latency_ms, latency_ms);
        if (out) {
            const std::string h = npy_header({(size_t)r.n_rows, (size_t)r.n_state}, r.f16);
            const size_t n = (size_t)r.n_rows * r.n_state;
            if (fwrite(h.data(), 1, h.size(), out) != h.size() || fwrite(r.data, r.f16 ? 2 : 4, n, out) != n || fflush(out) != 0) {
                print_error("writing '%s' failed: %s\n", p.output.c_str(), strerror(errno));
                return false;
            }
        }
        n_windows++;
        n_rows += (size_t)r.n_rows;
        if (p.json) {
            printf("{\"window\": %lld, \"samples\": %zu, \"audio_positions\": %d, \"rows\": %d, \"width\": %d, \"end_s\": %.3f, "
                   "\"latency_ms\": %.3f}\n", (long long)r.window, r.samples, r.audio_positions, r.n_rows, r.n_state,
                   (double)window_end / WHISPER_AUDIO_SAMPLE_RATE, latency_ms);
            fflush(stdout);
        }
        note("main: window %lld (to %.3f s of audio): %d rows, %.1f ms after its last sample\n", (long long)r.window,
             (double)window_end / WHISPER_AUDIO_SAMPLE_RATE, r.n_rows, latency_ms);
        return true;
    }
};

static int run_stream(const params & p, whisper_audio_model * model) {
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.pool = p.pool_mean ? WHISPER_AUDIO_POOL_MEAN : WHISPER_AUDIO_POOL_NONE;
    pp.no_pad = p.no_pad;
    pp.f16 = p.outtype == "f16";
    pp.stream = true;
    if (!whisper_audio_can_stream(model, encoder_params_of(p), pp)) {
        print_error("--stream: %s\n", whisper_audio_last_error());
        return 2;
    }
    live_run lr(p);
    pp.user = &lr;
    pp.on_rows = [](const whisper_audio_rows * r, void * user) {
        live_run * x = (live_run *)user;
        x->failed = !x->emit(*r);
        return !x->failed;
    };
    whisper_audio_live_params lp = whisper_audio_live_default_params();
    lp.raw = p.raw.empty() ? nullptr : p.raw.c_str();
    lp.follow_ms = p.follow_ms;
    std::vector<whisper_audio_encoder *> encs;
    std::vector<int> gpus;
    whisper_audio_pipeline * pipe = nullptr;
    whisper_audio_stream * s = nullptr;
    live_queue q;
    std::thread reader;
    bool ok = make_encoders(p, model, encs, gpus);
    if (ok && !(pipe = whisper_audio_pipeline_init(encs.data(), (int)encs.size(), pp))) {
        print_error("starting the encoders: %s\n", whisper_audio_last_error());
        ok = false;
    }
    if (ok) note("main: streaming on %s, each window as its last sample comes\n", whisper_audio_encoder_backend(encs[0]));
    for (whisper_audio_encoder * e : encs) whisper_audio_encoder_reset_timings(e);   // the run's windows alone
    if (ok && !p.output.empty()) {       // written in place as it grows: a reader follows it
        lr.out = p.output == "-" ? stdout : fopen(p.output.c_str(), "wb");
        if (!lr.out) { print_error("cannot write '%s': %s\n", p.output.c_str(), strerror(errno)); ok = false; }
    }
    whisper_audio_info info;
    if (ok && !(s = whisper_audio_stream_open_live(p.files[0].c_str(), lp, &info))) {
        print_error("%s\n", whisper_audio_last_error());
        ok = false;
    }
    if (ok) {
        note("main: '%s': %s, %d Hz, %d channel%s, live%s\n", p.files[0].c_str(), info.format, info.sample_rate, info.channels,
             info.channels == 1 ? "" : "s", p.follow_ms > 0 ? " (followed until it stops growing)" : "");
        lr.t0 = std::chrono::steady_clock::now();
        reader = std::thread(live_read, s, &q);
    }
    size_t total = 0;
    std::vector<float> got;
    while (ok) {
        bool ended;
        {
            std::unique_lock<std::mutex> lock(q.mu);
            got.swap(q.samples);
            q.samples.clear();
            ended = q.ended;
            q.cv.notify_all();
        }
        if (!got.empty()) {
            lr.pushed.push_back({total + got.size(), lr.now_s()});
            if (!whisper_audio_pipeline_push(pipe, got.data(), got.size())) {
                if (!lr.failed) print_error("%s: %s\n", p.files[0].c_str(), whisper_audio_last_error());
                ok = false;
            }
            total += got.size();
            continue;
        }
        if (ended) break;
        if (whisper_audio_pipeline_poll(pipe, 5) < 0) {      // the rows that are ready, while the input waits
            if (!lr.failed) print_error("%s\n", whisper_audio_last_error());
            ok = false;
        }
    }
    if (reader.joinable()) {
        bool ended;
        {
            std::lock_guard<std::mutex> lock(q.mu);
            q.stop = true;
            ended = q.ended;
            q.cv.notify_all();
        }
        // stopped by an error while the input goes on: the reader may wait in a read of it for
        // good; the process ends with it (and its stream) left as they are
        if (ended) reader.join();
        else { reader.detach(); s = nullptr; }
    }
    if (ok && !q.error.empty()) { print_error("%s\n", q.error.c_str()); ok = false; }
    if (ok && total == 0) { print_error("%s: no audio samples\n", p.files[0].c_str()); ok = false; }
    if (ok) {
        lr.ended_s = lr.now_s();
        ok = whisper_audio_pipeline_end_input(pipe) && whisper_audio_pipeline_finish(pipe);
        if (!ok && !lr.failed) print_error("%s: %s\n", p.files[0].c_str(), whisper_audio_last_error());
    }
    if (ok) {
        // a window's forward (its log-mel and encoder, download and pooling), the mean over the windows
        double busy_ms = 0;
        int64_t encoded = 0;
        for (whisper_audio_encoder * e : encs) {
            const whisper_audio_timings t = whisper_audio_encoder_timings(e);
            busy_ms += t.mel_ms + t.encode_ms;
            encoded += t.n_windows;
        }
        const double forward_ms = encoded ? busy_ms / encoded : 0.0;
        note("main: %.3f s of audio, %zu windows, %zu rows; the slowest window %.1f ms after its last sample (a forward: "
             "%.1f ms)\n", (double)total / WHISPER_AUDIO_SAMPLE_RATE, lr.n_windows, lr.n_rows, lr.max_latency_ms, forward_ms);
        if (p.json) {
            printf("{\"done\": true, \"samples\": %zu, \"windows\": %zu, \"rows\": %zu, \"max_latency_ms\": %.3f, "
                   "\"forward_ms\": %.3f}\n", total, lr.n_windows, lr.n_rows, lr.max_latency_ms, forward_ms);
            g_json_printed = true;
        }
    }
    if (lr.out && lr.out != stdout && fclose(lr.out) != 0 && ok) {
        print_error("writing '%s' failed: %s\n", p.output.c_str(), strerror(errno));
        ok = false;
    }
    whisper_audio_stream_close(s);
    whisper_audio_pipeline_free(pipe);
    for (whisper_audio_encoder * e : encs) whisper_audio_encoder_free(e);
    return ok ? 0 : 1;
}

int main(int argc, char ** argv) {
    params p;
    const int rc = parse_args(argc, argv, p);
    if (rc < 0) {
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--json") == 0) { print_error_json(2, {}); break; }
    }
    if (rc != 0) return rc > 0 ? 0 : 2;
    if (p.batch > WHISPER_AUDIO_MAX_BATCH) {
        note("main: -b %d: the encoder takes at most %d windows a call; using %d\n", p.batch,
                WHISPER_AUDIO_MAX_BATCH, WHISPER_AUDIO_MAX_BATCH);
        p.batch = WHISPER_AUDIO_MAX_BATCH;
    }
    const mode_t mask = umask(0);
    umask(mask);
    g_new_file_mode = 0666 & ~mask;
    install_signal_handlers();
    int status = 1;
    try {
        if (check_paths(p)) status = run_main(p);
    } catch (const std::bad_alloc &) {          // temporaries are removed as the stack unwinds
        print_error("out of memory (try a smaller -b)\n");
    } catch (const std::exception & e) {
        print_error("%s\n", e.what());
    }
    if (status != 0) remove_made_dirs();       // outputs already kept hold theirs: not empty
    if (status != 0 && status != 3 && p.json && !g_json_printed) print_error_json(status, {});
    return status;
}
