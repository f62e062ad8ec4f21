// whisper-audio.h - Whisper audio encoder embeddings from C or C++.
//
//   whisper_audio_model * model = whisper_audio_model_load("model.gguf");
//   whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
//   whisper_audio_encoder * enc = whisper_audio_encoder_init(model, ep);
//   float * pcm; size_t n;                                   // 16 kHz mono
//   whisper_audio_decode_file("speech.wav", &pcm, &n, NULL);
//   size_t n_win = whisper_audio_n_windows(n);               // 30 s windows
//   float * emb = malloc(n_win * 1500 * d_model * sizeof(float));
//   whisper_audio_encode_pcm(enc, pcm, n, emb);              // [n_win, 1500, d_model]
//
// Every function that can fail returns NULL, false or a negative number, and
// whisper_audio_last_error() then says why (per thread). Nothing here exits the process:
// NULL arguments, out-of-range values, out of memory and threads that cannot start are all
// such failures.
//
// Threads and lifetimes:
// - A model is read-only once loaded: any number of threads may use it at once (hparams,
//   mel_filters, log_mel*, encoder_init). Its memory holds the encoder's weights (read
//   from the file at load; the file may then change or go). Encoders copy what they need,
//   so it may be freed as soon as its encoders are made; pointers it returned go with it.
// - An encoder runs one call at a time: a second thread's encode or profile call while one
//   runs fails ("busy") instead of racing it. Different encoders may run at once. Free an
//   encoder only when no call on it is running.
// - A stream is for one thread at a time.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WHISPER_AUDIO_VERSION_MAJOR 0   // the shared library's SONAME: libwhisper-audio.so.MAJOR
#define WHISPER_AUDIO_VERSION_MINOR 1
#define WHISPER_AUDIO_VERSION_PATCH 0
#define WHISPER_AUDIO_VERSION "0.1.0"

// Built with -fvisibility=hidden, the library exports these functions alone (vt stays inside).
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define WHISPER_AUDIO_SAMPLE_RATE 16000
#define WHISPER_AUDIO_N_FFT       400
#define WHISPER_AUDIO_HOP         160
#define WHISPER_AUDIO_N_SAMPLES   480000   // one 30 s window
#define WHISPER_AUDIO_N_FRAMES    3000     // mel frames per window
#define WHISPER_AUDIO_N_BINS      201      // n_fft / 2 + 1
#define WHISPER_AUDIO_MIN_RATE    1000     // the sample rates audio may have (files, the resampler)
#define WHISPER_AUDIO_MAX_RATE    1000000

typedef struct whisper_audio_model   whisper_audio_model;
typedef struct whisper_audio_encoder whisper_audio_encoder;

// The type of the encoder's matrices (conv kernels and linear weights) in the model file;
// biases, LayerNorm parameters, the positional embedding and the mel bank are always f32.
enum whisper_audio_weight_type {
    WHISPER_AUDIO_WEIGHT_F32,
    WHISPER_AUDIO_WEIGHT_F16,
    WHISPER_AUDIO_WEIGHT_BF16,
    WHISPER_AUDIO_WEIGHT_COUNT,
};

// The audio LLM whose tower and projector the model file holds (llama.cpp's mmproj
// clip.projector_type, our GGUF's whisper.projector.type), or none: a Whisper encoder alone.
enum whisper_audio_projector {
    WHISPER_AUDIO_PROJECTOR_NONE,
    WHISPER_AUDIO_PROJECTOR_QWEN2A,    // Qwen2-Audio: padded tail masked in attention, average pooling by 2,
                                       // the tower's LayerNorm, then one linear layer
    WHISPER_AUDIO_PROJECTOR_VOXTRAL,   // Voxtral: 4 frames stacked, linear, GELU, linear
    WHISPER_AUDIO_PROJECTOR_ULTRAVOX,  // Ultravox: unpadded input, 8 frames stacked, RMSNorm, linear, SwiGLU,
                                       // RMSNorm, linear (v0.4: the second RMSNorm after the last linear)
    WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO,  // Audio Flamingo 3 (llama.cpp's name for its tower): Qwen2-Audio's
                                            // tower over each 30 s window, then linear, GELU, linear; Music
                                            // Flamingo's too (hparams.n_time_rot > 0): a rotary time embedding
                                            // by each row's time in its input before the projector
    WHISPER_AUDIO_PROJECTOR_GLMASR,    // GLM-ASR (transformers' layout): RoPE in place of the positional embedding,
                                       // no mask, each 30 s window; 4 positions stacked, linear, GELU, linear
    WHISPER_AUDIO_PROJECTOR_QWEN25O,   // Qwen2.5-Omni: its first 30 s, the encoder per chunk of n_chunk mel frames
                                       // (conv stem and block-diagonal attention), average pooling by 2, ln_post, proj
    WHISPER_AUDIO_PROJECTOR_MINICPMO,  // MiniCPM-o 2.6: an input of at most 30 s unpadded, longer ones in 30 s windows;
                                       // block-causal attention (n_causal positions a block), the final LayerNorm,
                                       // linear, ReLU, linear, average pooling by 2
    WHISPER_AUDIO_PROJECTOR_KIMIAUDIO, // Kimi-Audio (its continuous path): Whisper-large-v3's encoder over each 30 s window,
                                       // 4 positions stacked, its VQ adaptor: linear, SiLU, linear, LayerNorm
    WHISPER_AUDIO_PROJECTOR_QWEN3A,    // Qwen3-Omni's audio tower (AuT): one log-mel over the whole input, three
                                       // stride-2 Conv2d per chunk of n_chunk frames, a linear, positions per chunk,
                                       // attention within windows of n_attn_window frames, ln_post, linear, GELU, linear
    WHISPER_AUDIO_PROJECTOR_STEPAUDIO2, // Step-Audio 2: 25 s windows, each its own log-mel of its audio and 479 zeros
                                        // (unpadded; a longer input's tail zero-padded to a whole window's frames), keys
                                        // masked by its length rule, average pooling by 2, LayerNorm; its adapter:
                                        // conv (kernel 3, stride 2) + GELU, linear, ReLU, linear
    WHISPER_AUDIO_PROJECTOR_MERALION,  // MERaLiON-2: its first 300 s in 30 s windows, each normalised (zero mean, unit
                                       // variance) and padded, not masked; ln_speech, 15 positions stacked, linear, SiLU,
                                       // silu(gate_proj) * pool_proj, out_proj
    WHISPER_AUDIO_PROJECTOR_QWEN3ASR,  // Qwen3-ASR: Qwen3-Omni's AuT encoder and computation (its projector outside the
                                       // encoder: multi_modal_projector.linear_1, GELU, linear_2); an input shorter than
                                       // 8000 samples zero-padded to them, a clip shorter than a chunk run as a whole one
    WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME,  // Voxtral Realtime: a causal encoder (conv stem padded on the left, RMSNorm,
                                               // SwiGLU, RoPE, attention over the last n_window positions, q/k/v n_head x
                                               // head_dim wide), run over the whole input in steps with its state carried;
                                               // its processor's zeros before and after the audio; 4 positions stacked,
                                               // linear, GELU, linear

    // The same values named for what they say: the audio tower the file holds (its projector is a
    // part of it). Either name may be used; whisper_audio_tower is the enum's other name.
    WHISPER_AUDIO_TOWER_NONE = WHISPER_AUDIO_PROJECTOR_NONE,
    WHISPER_AUDIO_TOWER_QWEN2A = WHISPER_AUDIO_PROJECTOR_QWEN2A,
    WHISPER_AUDIO_TOWER_VOXTRAL = WHISPER_AUDIO_PROJECTOR_VOXTRAL,
    WHISPER_AUDIO_TOWER_ULTRAVOX = WHISPER_AUDIO_PROJECTOR_ULTRAVOX,
    WHISPER_AUDIO_TOWER_MUSICFLAMINGO = WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO,
    WHISPER_AUDIO_TOWER_GLMASR = WHISPER_AUDIO_PROJECTOR_GLMASR,
    WHISPER_AUDIO_TOWER_QWEN25O = WHISPER_AUDIO_PROJECTOR_QWEN25O,
    WHISPER_AUDIO_TOWER_MINICPMO = WHISPER_AUDIO_PROJECTOR_MINICPMO,
    WHISPER_AUDIO_TOWER_KIMIAUDIO = WHISPER_AUDIO_PROJECTOR_KIMIAUDIO,
    WHISPER_AUDIO_TOWER_QWEN3A = WHISPER_AUDIO_PROJECTOR_QWEN3A,
    WHISPER_AUDIO_TOWER_STEPAUDIO2 = WHISPER_AUDIO_PROJECTOR_STEPAUDIO2,
    WHISPER_AUDIO_TOWER_MERALION = WHISPER_AUDIO_PROJECTOR_MERALION,
    WHISPER_AUDIO_TOWER_QWEN3ASR = WHISPER_AUDIO_PROJECTOR_QWEN3ASR,
    WHISPER_AUDIO_TOWER_VOXTRAL_REALTIME = WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME,
};
typedef enum whisper_audio_projector whisper_audio_tower;

typedef struct whisper_audio_hparams {
    int   n_mels;     // whisper.encoder.mels_count: 80, or 128 for large-v3
    int   n_ctx;      // whisper.encoder.context_length: 1500 positions
    int   n_state;    // whisper.encoder.embedding_length: d_model
    int   n_head;     // whisper.encoder.attention.head_count
    int   n_layer;    // whisper.encoder.block_count
    int   n_ff;       // whisper.encoder.feed_forward_length
    float eps;        // whisper.encoder.attention.layer_norm_epsilon
    enum whisper_audio_weight_type weight_type;  // the matrices' (encoder.layers.0.fc2.weight's)
    enum whisper_audio_projector projector;      // whisper.projector.type; NONE for a Whisper model
    int   n_llm;          // whisper.projector.embedding_length: the LLM's width, a token's; 0 without a projector
    int   n_proj_ff;      // Ultravox: linear_1's output width (SwiGLU halves it); GLM-ASR's, Step-Audio 2's
                          // linear_1 / linear1 width; 0 otherwise
    int   stack_factor;   // whisper.projector.stack_factor: frames per token (Voxtral 4, Ultravox 8), else 1
    float proj_eps;       // whisper.projector.layer_norm_epsilon: Ultravox's RMSNorm eps (1e-6), Kimi-Audio's LayerNorm, MERaLiON-2's ln_speech (1e-5)
    int   n_rot;          // whisper.encoder.rope.dimension_count: the dims of each head RoPE turns (GLM-ASR:
                          // head_dim / 2), in place of the positional embedding; 0: none (Whisper's)
    float rope_theta;     // whisper.encoder.rope.freq_base (GLM-ASR 10000); 0 without RoPE
    int   n_chunk;        // whisper.encoder.chunk_length: mel frames of a chunk that the conv stem and attention
                          // keep to (Qwen2.5-Omni: n_window * 2 = 200; Qwen3-Omni 100); 0: the whole window (Whisper's)
    int   n_causal;       // whisper.encoder.attention.causal_chunk: positions of a block of block-causal attention
                          // (MiniCPM-o: audio_chunk_length 1 s = 50); 0: none
    int   n_conv;         // whisper.encoder.conv2d.channels: the channels of Qwen3-Omni's Conv2d stem
                          // (downsample_hidden_size, 480) in place of Whisper's conv1d; 0: Whisper's stem
    int   n_attn_window;  // whisper.encoder.attention.window_length: mel frames of an attention window
                          // (Qwen3-Omni's n_window_infer, 800), a multiple of n_chunk; 0: none
    int   n_time_rot;     // whisper.projector.time_rope.dimension_count: Music Flamingo's rotary time embedding
                          // before its projector, the channels each of its two axes turns (int(d_model x
                          // partial_rotary_factor 0.2)); 0: none (Audio Flamingo 3, whose projector type it shares)
    float time_rope_theta; // whisper.projector.time_rope.freq_base: its rope_theta (1200); 0 without it
    float time_rope_step;  // whisper.projector.time_rope.step: seconds between its rows (audio_frame_step x 4 = 0.04)
    int   head_dim;       // whisper.encoder.attention.key_length: the width of a head of q, k and v (Voxtral Realtime
                          // 64, its q/k/v n_head x 64 = 2048 wide where the model is 1280); 0: n_state / n_head
    int   n_window;       // whisper.encoder.attention.sliding_window: Voxtral Realtime's causal attention over the last
                          // n_window positions (750), which makes its encoder (RMSNorm, SwiGLU, causal conv stem); 0: none
    int   pad_left;       // whisper.projector.pad_left_tokens: tokens of zeros (1280 samples each) its processor puts
    int   pad_right;      // before the audio (32), and past its last whole token (whisper.projector.pad_right_tokens:
                          // delay 6 + 1 + 10 = 17); 0 for the other towers
} whisper_audio_hparams;

const char * whisper_audio_last_error(void);
// The library's version, "MAJOR.MINOR.PATCH": WHISPER_AUDIO_VERSION of the build that runs.
const char * whisper_audio_version(void);

// ---- model file --------------------------------------------------------------------

// Checks the whole file and reads the encoder's tensors into memory: the file is not used after.
// path: a model file, a Hugging Face or CTranslate2 directory, or a repo id in the local Hugging Face cache.
whisper_audio_model *         whisper_audio_model_load(const char * path);
void                          whisper_audio_model_free(whisper_audio_model * model);
const whisper_audio_hparams * whisper_audio_model_hparams(const whisper_audio_model * model);
// "f32", "f16" or "bf16"; NULL for a value outside the enum.
const char *                  whisper_audio_weight_type_name(enum whisper_audio_weight_type type);
const float *                 whisper_audio_model_mel_filters(const whisper_audio_model * model); // [n_mels, 201]
// Writes the model as our GGUF (what convert/convert-hf-to-gguf.py writes: its keys, tensor
// names, order and 32-byte alignment), whichever format it was loaded from: our GGUF,
// whisper.cpp's ggml-*.bin, a CTranslate2 directory or llama.cpp's mmproj. The matrices keep
// the type the model holds (f16, bf16 or f32; CTranslate2's int8/int16 as the f32 they were
// dequantised to), except ggml's block types (q8_0, q5_x, q4_x), which are written as the
// blocks: those alone are read again from the model's file, which must still hold what was
// loaded (checked). The file loads back to the same weights, bit for bit. path follows main's
// rules: a temporary beside it (mkstemp) renamed over it when complete, a symlink followed, a
// FIFO or a device written straight through, never the model's own file.
bool                          whisper_audio_model_save_gguf(const whisper_audio_model * model, const char * path);

// ---- audio -------------------------------------------------------------------------

typedef struct whisper_audio_info {
    int     sample_rate;      // of the file
    int     channels;
    int     bits_per_sample;  // 0 where it does not apply
    char    format[32];       // "wav pcm s16", "wav float32", "flac", "ogg flac", "mp3",
                              // "ogg vorbis", "ogg opus", ...
    int64_t frames;           // samples per channel in the file; -1 when not known ahead
} whisper_audio_info;

// Decodes an audio file ("-": standard input) to 16 kHz mono float (channels averaged,
// resampled when needed). The format comes from the content, never the name: WAV (PCM u8,
// s16, s24, s32, float32/64; RF64), and where this build has the library for it (each one
// optional, found by the build), Ogg Vorbis (libvorbisfile), FLAC and Ogg FLAC (libFLAC),
// MP3 (libmpg123) and Ogg Opus (opusfile, decoded at 48 kHz). Anything else fails with a
// message that names the format and the ffmpeg command that converts it.
// *pcm is malloc'ed: release it with whisper_audio_pcm_free. info may be NULL.
bool whisper_audio_decode_file(const char * path, float ** pcm, size_t * n, whisper_audio_info * info);
bool whisper_audio_decode_memory(const void * data, size_t size, float ** pcm, size_t * n, whisper_audio_info * info);
void whisper_audio_pcm_free(float * pcm);
// After a decode_file or decode_memory on this thread that succeeded: NULL, or the one-line
// warning that the input was not the length its header says (whisper_audio_stream_warning's:
// cut short, an Ogg stream without its last page); the samples that are there were decoded.
// Valid until the next decode on this thread.
const char * whisper_audio_decode_warning(void);

// Streaming decode, for long audio in bounded memory: the same decoding, resampling and
// channel mixing as whisper_audio_decode_file, a block at a time. path "-" reads standard
// input; every format streams from a pipe (only a WAV whose data chunk comes before its fmt
// chunk needs a file). info->frames is -1 when the length is not known ahead (a pipe, a
// streaming WAV, Ogg Vorbis and Opus, an MP3 without a Xing/LAME tag).
typedef struct whisper_audio_stream whisper_audio_stream;
whisper_audio_stream * whisper_audio_stream_open(const char * path, whisper_audio_info * info);
// The same over encoded audio in memory (not copied: it must outlive the stream).
whisper_audio_stream * whisper_audio_stream_open_memory(const void * data, size_t size, whisper_audio_info * info);
// Reads up to max samples of 16 kHz mono into out: the count, 0 at the end (or when max is
// 0), -1 on error.
int64_t whisper_audio_stream_read(whisper_audio_stream * s, float * out, size_t max);
void    whisper_audio_stream_close(whisper_audio_stream * s);
// Once a read has returned 0 (the end): NULL, or a one-line warning that the input was not
// the length its header says (a WAV, FLAC or MP3 cut short, a FLAC whose STREAMINFO says
// less, an Ogg Vorbis or Opus stream without its last page): what the file holds was decoded
// all the same. Valid until the stream is closed.
const char * whisper_audio_stream_warning(const whisper_audio_stream * s);

// Live audio, as it is recorded: a pipe (ffmpeg's or arecord's output on standard input) or a file
// that grows (tail -f). Each read returns the samples that have arrived, waiting only for the first
// of them, never for max; the samples are those of the whole input decoded at once, bit for bit.
// The format is found from the content (a WAV's data chunk runs to the input's end, whatever sizes
// its header holds: a live writer puts them there before it knows them; an Ogg, FLAC or MP3 input
// comes as its decoder reads it), or raw says it: headerless PCM, "s16le" or "f32le" (ffmpeg's -f
// names), interleaved, of raw_rate Hz (0: 16000) and raw_channels (0: 1).
typedef struct whisper_audio_live_params {
    const char * raw;         // NULL, "s16le" or "f32le"
    int raw_rate;
    int raw_channels;
    int follow_ms;            // > 0: path is a file that grows; at its end a read waits for more, and the
                              // input ends once the file has not grown for follow_ms (0: it ends at its end)
} whisper_audio_live_params;
whisper_audio_live_params whisper_audio_live_default_params(void);
// path "-": standard input (follow_ms must be 0: a pipe ends when its writer closes it).
// info->frames is -1 (a live input's length is not known ahead).
whisper_audio_stream * whisper_audio_stream_open_live(const char * path, whisper_audio_live_params params,
                                                      whisper_audio_info * info);

// Many inputs decoded ahead of the caller, for corpora: n_workers threads decode the files
// (several at once, each one start to end through a stream, a long PCM WAV or native FLAC
// file in 65 s segments on several workers; "-": standard input) into
// buffers of at most max_buffered samples in all; the caller reads input 0 to its end, then
// input 1, ... The samples are the stream's, bit for bit, whatever the number of workers.
typedef struct whisper_audio_reader whisper_audio_reader;
typedef struct whisper_audio_reader_params {
    int    n_workers;         // decoding threads (0: one per core, at most 8), started as needed:
                              // one an input, and the segments of a long FLAC or resampled WAV the rest
    size_t max_samples;       // of each input, decode at most this many samples (0: all of it)
    size_t max_buffered;      // samples held ahead of the caller: of the input it reads, and of the
                              // later ones in all (default 2^24 each: 64 MiB)
} whisper_audio_reader_params;
whisper_audio_reader_params whisper_audio_reader_default_params(void);
whisper_audio_reader * whisper_audio_reader_init(const char * const * paths, size_t n, whisper_audio_reader_params params);
// Up to max samples of input k into out: the count, 0 at its end, -1 on its error (the message
// names the input; the samples before the error came first). k is the input being read or a
// later one: reading a later one drops the rest of those before it.
int64_t whisper_audio_reader_read(whisper_audio_reader * r, size_t k, float * out, size_t max);
// Input k's header (waits until a worker has opened it); false with its error if it did not open.
bool whisper_audio_reader_info(whisper_audio_reader * r, size_t k, whisper_audio_info * info);
// Once input k's read has returned 0: NULL or its whisper_audio_stream_warning. Valid until free.
const char * whisper_audio_reader_warning(whisper_audio_reader * r, size_t k);
// Decoding and resampling time so far, summed over the workers.
double whisper_audio_reader_busy_ms(whisper_audio_reader * r);
void   whisper_audio_reader_free(whisper_audio_reader * r);

// Band-limited resampling of mono float audio from rate_in to rate_out (malloc'ed result).
// Each rate must be WHISPER_AUDIO_MIN_RATE to _MAX_RATE (the rates the decoders accept); others are an error.
bool whisper_audio_resample(const float * in, size_t n_in, int rate_in, int rate_out,
                            float ** out, size_t * n_out);

// Log-mel of one 30 s window as transformers' WhisperFeatureExtractor: the first
// min(n, 480000) samples of pcm, zero-padded to 480000. out: [n_mels, 3000].
// The samples read must be finite and within +-1e4 (audio is in [-1, 1]); otherwise an error
// that names the first bad one (the log-mel windows and whisper_audio_encode_pcm too).
bool whisper_audio_log_mel(const whisper_audio_model * model, const float * pcm, size_t n, float * out);
// The same with a caller's mel bank: filters [n_mels, 201] (the model file's mel_filters).
bool whisper_audio_log_mel_filters(const float * filters, int n_mels, const float * pcm, size_t n, float * out);
// Log-mel of n_windows (>= 1) consecutive 30 s windows of pcm (window i: samples [480000 i,
// 480000 (i + 1)), the last zero-padded past n), on up to n_threads threads (as the
// encoder's n_threads; fewer when the system refuses more).
// out: [n_windows, n_mels, 3000].
bool whisper_audio_log_mel_windows(const whisper_audio_model * model, const float * pcm, size_t n, int n_windows,
                                   float * out, int n_threads);

// ---- encoder -----------------------------------------------------------------------

enum whisper_audio_device {
    WHISPER_AUDIO_DEVICE_AUTO,  // a GPU when one is present, else the CPU
    WHISPER_AUDIO_DEVICE_CPU,
    WHISPER_AUDIO_DEVICE_GPU,   // the GPU backend this build has: CUDA (gpu_device picks the GPU)
    WHISPER_AUDIO_DEVICE_CUDA = WHISPER_AUDIO_DEVICE_GPU,   // the earlier name of _GPU, kept
};

enum whisper_audio_dtype {      // compute type on CUDA; on the CPU f32, but for _BF16 (below)
    WHISPER_AUDIO_DTYPE_F16,
    WHISPER_AUDIO_DTYPE_BF16,   // on the CPU: the GEMMs of linears and convs in bf16 (f32 accumulation)
                                // on AMX tiles where the CPU has them (whisper_audio_cpu_bf16_isa),
                                // the rest in f32; f32 where it has not
    WHISPER_AUDIO_DTYPE_FP8,    // bf16, with the linear layers' GEMMs in FP8 e4m3 (weights scaled
                                // per output channel at load, inputs per token; compute
                                // capability 8.9+, e.g. Hopper) in every block but the first and
                                // the last; the conv stem and attention in bf16
};

typedef struct whisper_audio_encoder_params {
    enum whisper_audio_device device;
    enum whisper_audio_dtype  dtype;
    int n_threads;              // CPU threads (also used for the log-mel); <= 0: as many as the
                                // hardware runs (llama.cpp's -t), and never more than that
    int gpu_device;             // GPU index, 0..whisper_audio_device_count(WHISPER_AUDIO_DEVICE_GPU) - 1
    int max_batch;              // windows per encoder call, 1..WHISPER_AUDIO_MAX_BATCH; memory
                                // follows the largest batch actually encoded
    int output_layer;           // -1: the last layer; N: the hidden state after layer N
                                // (0-based); WHISPER_AUDIO_POST_CONV: the input of layer 0
    bool final_ln;              // apply the final LayerNorm (only with output_layer -1)
    bool projector;             // the token calls (whisper_audio_encode_tokens): true, what the model
                                // feeds its LLM; false, the tower's own output. The tower's own norms
                                // always run there (final_ln is for the plain calls)
} whisper_audio_encoder_params;

#define WHISPER_AUDIO_POST_CONV (-2)
#define WHISPER_AUDIO_MAX_BATCH 256   // windows per encoder call, at most

whisper_audio_encoder_params whisper_audio_encoder_default_params(void);

whisper_audio_encoder * whisper_audio_encoder_init(const whisper_audio_model * model,
                                                   whisper_audio_encoder_params params);
void         whisper_audio_encoder_free(whisper_audio_encoder * enc);
const char * whisper_audio_encoder_backend(const whisper_audio_encoder * enc); // "cpu", "cuda (...)"
// The type its GEMMs compute in: "f32" or "bf16" on the CPU, "f16", "bf16" or "fp8" on CUDA.
const char * whisper_audio_encoder_dtype(const whisper_audio_encoder * enc);
// The CPU threads the encoder uses: params.n_threads as resolved (<= 0 or more than the
// hardware runs: the hardware's count).
int whisper_audio_encoder_n_threads(const whisper_audio_encoder * enc);
size_t       whisper_audio_encoder_memory(const whisper_audio_encoder * enc);  // backend bytes

// ---- windows, positions, pooling: the rules that turn audio into rows -------------
// (main follows them; every caller gets the same rows from the same audio)

// Number of 30 s windows for n samples of 16 kHz audio (at least 1).
size_t whisper_audio_n_windows(size_t n_samples);
// Encoder positions that hold audio in a window of n samples (at most 480000; the rest is
// padding): ceil(n / 320), each position covering two 160-sample mel frames. 0 for n = 0.
// An unpadded window (--no-pad) is encoded from the first 2 * this many mel frames.
int    whisper_audio_n_positions(size_t n_samples);
// Positions in all of n samples of audio: 1500 per full window, then the last window's.
// The rows of --no-pad (one per position); n_windows rows otherwise.
size_t whisper_audio_n_positions_total(size_t n_samples);
// The mean of a window's embeddings [n_pos, n_state] over the positions that hold audio
// (whisper_audio_n_positions(n_samples), at least 1, at most n_pos): out [n_state].
bool   whisper_audio_pool_mean(const float * emb, int n_pos, int n_state, size_t n_samples, float * out);

// Encodes n_windows log-mel windows [n_windows, n_mels, 3000] to [n_windows, 1500, n_state],
// in batches of up to max_batch.
bool whisper_audio_encode_mel(whisper_audio_encoder * enc, const float * mel, int n_windows, float * out);

// The same for windows of n_frames mel frames (even, 2..3000): mel [n_windows, n_mels,
// n_frames] -> out [n_windows, n_frames / 2, n_state], the positional embedding's first
// n_frames / 2 rows. For audio shorter than 30 s without the padding (--no-pad): the log-mel
// of the padded window, its first 2 * ceil(samples / 320) frames kept.
bool whisper_audio_encode_mel_frames(whisper_audio_encoder * enc, const float * mel, int n_windows, int n_frames,
                                     float * out);

// Every hidden state of the encoder from one forward, as transformers' WhisperEncoder returns
// them with output_hidden_states=True: n_layer + 1 states, state 0 the input of layer 0 (the
// conv stem + positional embedding: output_layer WHISPER_AUDIO_POST_CONV), state i for i in
// 1..n_layer - 1 the output of layer i - 1 (output_layer i - 1), state n_layer the last layer
// through the final LayerNorm (output_layer -1, final_ln: transformers puts last_hidden_state
// there, not the last layer's own output). mel [n_windows, n_mels, n_frames], n_frames as
// whisper_audio_encode_mel_frames -> out [n_layer + 1, n_windows, n_frames / 2, n_state]. The
// encoder must be one of the last layer (output_layer -1, final_ln true); on the CPU each state
// equals, bit for bit, what an encoder made for that output_layer gives. The encoder keeps the
// graph of its full batch (its memory holds n_layer + 1 states of max_batch windows).
bool whisper_audio_encode_mel_hidden_states(whisper_audio_encoder * enc, const float * mel, int n_windows, int n_frames,
                                            float * out);

// Log-mel and encode of 16 kHz mono audio of any length: out [n_windows, 1500, n_state].
bool whisper_audio_encode_pcm(whisper_audio_encoder * enc, const float * pcm, size_t n, float * out);

// ---- pipeline: audio in as it comes, rows out in input order ---------------------------
//
// For long audio and many files at the device's speed: push 16 kHz mono audio as it is
// decoded, end each input, and the rows come back through on_rows. The pipeline cuts the
// windows and batches (max_batch windows, or fewer of equal size when n_windows is given: see
// there; the inputs one after another sharing batches; with
// no_pad an input's short last window unpadded, in a batch of windows of its length), makes the
// log-mel (on the GPU for a CUDA encoder), runs the forward and the download (f32, or f16
// converted on the GPU) with two batches in flight per encoder, and pools. With several encoders
// (one per GPU, or any mix) each takes the next batch; the rows are the same as with one.
//
// The library decides what an input gives (whisper_audio_rows_are_tokens): for an audio-LLM
// model (hparams.projector != NONE) whose encoders take the last layer (output_layer -1,
// final_ln) without pooling or no_pad, the tokens it feeds its LLM (params.projector true) or
// the tower's own rows (false), cut by the model's rules below ("audio LLMs"); else Whisper
// windows, positions or pooled rows. whisper_audio_encode_pcm and whisper_audio_encode_tokens
// are one input through a pipeline of their encoder.
enum whisper_audio_pool {
    WHISPER_AUDIO_POOL_NONE,
    WHISPER_AUDIO_POOL_MEAN,    // a row per window: the mean over the positions that hold audio
};

// A record of rows: one per window, in input order. For a tower's tokens one per chunk of the
// input (the model's 30 s windows or chunks of 3000 mel frames): window is the chunk's index,
// samples the audio in it, audio_positions the encoder positions that hold audio (those
// attended to where the model masks), n_rows its tokens (0 for a Qwen2-Audio input of at most
// 320 samples: the model gives none), n_state the token's width (whisper_audio_token_dim).
typedef struct whisper_audio_rows {
    int64_t input;              // 0-based, in the order the inputs were pushed
    int64_t window;             // 0-based, within the input
    size_t  samples;            // of audio in the window (the rest of its 480000 is padding)
    int     audio_positions;    // positions that hold audio: whisper_audio_n_positions(samples)
    int     n_rows;             // 1500; fewer for a no_pad window (its positions); 1 pooled; a chunk's tokens
    int     n_state;            // a row's width
    bool    f16;                // data holds IEEE half floats (uint16_t), else float
    const void * data;          // [n_rows, n_state], valid until the callback returns
} whisper_audio_rows;

// Called once per window, in input order, on the thread inside push, end_input or finish.
// Returning false stops the pipeline: that call and every later one fail.
typedef bool (*whisper_audio_rows_fn)(const whisper_audio_rows * rows, void * user);

typedef struct whisper_audio_pipeline_params {
    enum whisper_audio_pool pool;
    bool no_pad;                // encode an input's short last window without its padding
    bool f16;                   // rows as IEEE half (round to nearest even)
    whisper_audio_rows_fn on_rows;
    void * user;                // passed to on_rows
    size_t n_windows;           // the windows all the inputs will give (whisper_audio_n_windows of
                                // each input's samples, summed), when the caller knows them ahead, as
                                // main does from the files' headers; 0: not known. With it the
                                // batches are evened out: as many as max_batch needs, each of
                                // whisper_audio_pipeline_batch windows (120 windows at max_batch 32
                                // go as 4 x 30, not 3 x 32 and a last 24, which on the GPU runs as a
                                // graph of 32: a captured graph has one shape), and the buffers and
                                // graphs are of that batch. A wrong count costs speed, never rows
    bool stream;                // live audio: each window goes to an encoder alone the moment its last
                                // sample is pushed (or its input ends), never waiting for a batch to
                                // fill, and its rows come through on_rows in the next push or poll
                                // (n_windows is ignored). The rows are those of the same audio pushed
                                // at once (bit for bit on the CPU). A model whose windows depend on
                                // later audio is refused at init: whisper_audio_can_stream
} whisper_audio_pipeline_params;

typedef struct whisper_audio_pipeline whisper_audio_pipeline;

whisper_audio_pipeline_params whisper_audio_pipeline_default_params(void);
// The encoders (of one model, with the same output layer and max_batch) belong to the
// pipeline until it is freed: their own calls fail as busy meanwhile, and their graphs are kept
// for the pipeline's batch.
whisper_audio_pipeline * whisper_audio_pipeline_init(whisper_audio_encoder * const * encoders, int n_encoders,
                                                     whisper_audio_pipeline_params params);
// Appends samples to the current input (it blocks while every batch buffer is in use).
bool whisper_audio_pipeline_push(whisper_audio_pipeline * p, const float * pcm, size_t n);
// Ends the current input (it must have samples); the next push starts the next input.
bool whisper_audio_pipeline_end_input(whisper_audio_pipeline * p);
// Drops the current input (with or without samples pushed: a file that failed to decode half
// way): on_rows is called for none of its windows, the samples not yet encoded are discarded,
// and the next push starts the next input, so that its index counts the dropped one (input
// k dropped, the next rows are input k + 1's).
bool whisper_audio_pipeline_drop_input(whisper_audio_pipeline * p);
// Encodes what is left and returns once every row has gone to on_rows; more inputs may follow.
bool whisper_audio_pipeline_finish(whisper_audio_pipeline * p);
// For a caller that keeps a pipeline going while inputs arrive (a server), between inputs:
// flush hands the batch being filled to the encoders now, short as it is, rather than waiting
// for more windows to fill it (the rows come through on_rows as always).
bool whisper_audio_pipeline_flush(whisper_audio_pipeline * p);
// When to flush: the milliseconds until an encoder is expected to run out of batches (those it
// runs and those waiting for it), from the times of its latest batches of the same size; 0 when
// one is idle (or none has run yet). A caller that flushes when this is near 0 keeps the
// encoders busy with batches as full as the audio coming allows. -1 for a NULL pipeline.
double whisper_audio_pipeline_busy_ms(whisper_audio_pipeline * p);
// Hands the rows that are ready to on_rows on this thread; with none ready, waits up to
// timeout_ms (0: not at all) for the next batch's. Returns how many inputs, from the first, are
// complete (every row handed out; a cancelled or dropped input counts once its windows are
// gone), or -1 on failure.
int64_t whisper_audio_pipeline_poll(whisper_audio_pipeline * p, int timeout_ms);
// An ended input the caller no longer wants (its client left): its windows not yet handed to an
// encoder are dropped, the rest encoded and their rows skipped. The current input:
// whisper_audio_pipeline_drop_input.
bool whisper_audio_pipeline_cancel_input(whisper_audio_pipeline * p, int64_t input);
// Stops the workers (queued windows are dropped) and releases the encoders.
void whisper_audio_pipeline_free(whisper_audio_pipeline * p);
// Whether a pipeline of these parameters over this model can stream (params.stream): every
// Whisper-class model whose windows hold their own audio alone (Whisper's 30 s windows, and the
// towers that cut windows with their own log-mel: Qwen2-Audio, Audio Flamingo 3, Music Flamingo,
// GLM-ASR, Qwen2.5-Omni, MiniCPM-o, Kimi-Audio, Step-Audio 2, MERaLiON-2). A tower whose tokens take
// one log-mel over the whole input (Voxtral, Ultravox, Qwen3-Omni, Qwen3-ASR: its dynamic-range clamp
// is the whole input's max, so no window's tokens are known before the input ends) cannot: false,
// with the error saying why.
bool whisper_audio_can_stream(const whisper_audio_model * model, whisper_audio_encoder_params ep,
                              whisper_audio_pipeline_params pp);
// Whether the pipeline's rows are a tower's tokens, and a row's width (n_state, or token_dim).
bool whisper_audio_pipeline_tokens(const whisper_audio_pipeline * p);
int  whisper_audio_pipeline_row_width(const whisper_audio_pipeline * p);
// The windows a batch of the pipeline holds: the encoders' max_batch, or with n_windows given
// ceil(n_windows / n_batches) for n_batches = ceil(n_windows / max_batch) (12 windows at
// max_batch 8: 6). 0 for a NULL pipeline.
int  whisper_audio_pipeline_batch(const whisper_audio_pipeline * p);
// The same rule before any pipeline exists: the batch a pipeline of encoders of max_batch runs
// with params.n_windows = n_windows (0: max_batch). For a caller that keeps a pipeline between
// runs (Python's encode calls) and makes a new one only when a run's batch differs; 0 for
// max_batch < 1.
int  whisper_audio_batch_for_windows(int max_batch, size_t n_windows);

// The earlier name of whisper_audio_device_count(WHISPER_AUDIO_DEVICE_GPU), kept.
int whisper_audio_cuda_device_count(void);
// ---- audio LLMs: the tokens a Qwen2-Audio, Voxtral, Ultravox or Audio Flamingo 3 model feeds its LLM
// For a model with a projector (hparams.projector != NONE). An input of n samples gives the
// rows the model's own processor and code give for it:
//   Qwen2-Audio: its first 30 s (the processor truncates there: whisper_audio_samples_used) as
//     one padded window, attention masked past the ceil(ceil(n / 160) / 2) positions holding
//     audio (transformers' feature_attention_mask), pooled by 2: the first floor(positions / 2)
//     tokens (0 for n <= 320).
//   Voxtral: padded to a multiple of 30 s, one log-mel over all of it, 375 tokens per 30 s
//     (1500 positions stacked by 4).
//   Ultravox: F = ceil(n / 160) mel frames (at least 2) of the audio padded to a hop, one
//     log-mel over all of it; up to 3000 frames run unpadded (the positional embedding sliced),
//     more are cut into chunks of 3000, the last padded and masked. A chunk of f frames gives
//     ceil(f / 16) tokens (its ceil(f / 2) positions stacked by 8, the last zero-padded).
//   Audio Flamingo 3: its first 600 s (the processor's max_audio_len) cut into 30 s windows, each
//     padded, with its own log-mel and mask, as Qwen2-Audio's one: a window of w samples gives
//     floor(ceil(ceil(w / 160) / 2) / 2) tokens (750 for a whole one).
//   GLM-ASR: its first 630 s (21 windows: the processor's max_audio_len 655 s in 30 s windows),
//     each padded to 30 s with its own log-mel, not masked: floor(ceil(ceil(w / 160) / 2) / 4)
//     tokens (4 positions stacked; 375 for a whole window).
//   MiniCPM-o 2.6: all of it. An input of at most 30 s runs at its own ceil(n / 160) frames (the
//     padded window's log-mel cut there); a longer one in 30 s windows, each its own log-mel, the
//     last one's frames past its audio zero and its keys masked at its frame count (its code's
//     padding mask), attention block-causal (hparams.n_causal positions a block); a window of w
//     samples gives floor(ceil(ceil(w / 160) / 2) / 2) tokens (750 for a whole one).
//   Kimi-Audio: all of it in 30 s windows (WhisperEncoder.tokenize_waveform's segments), each padded
//     to 30 s with its own log-mel, not masked; a window of w samples gives token_len =
//     (w - 1) // 1280 + 1 tokens (375 for a whole one), each from 4 positions stacked, through the
//     VQ adaptor (linear, SiLU, linear, LayerNorm): what its LLM adds to the discrete tokens' embeddings.
//   Step-Audio 2: all of it in 25 s windows (StepAudio2.apply_chat_template's chunks), each its own
//     log-mel of its audio and 479 zero samples, (w + 479) // 160 frames (2502 for a whole one), wav_lens
//     = frames - 2 = ceil(w / 160) = L; an input of one window runs at its own frames, a longer one's
//     windows as padding_mels batches them (the tail's frames past its audio zero, 2502 in all), the keys
//     masked past conv2's sampling of the L frames; E = (L + 1) // 2 // 2 pooled positions, through the
//     adapter (its conv of stride 2): (E - 1) // 2 + 1 tokens (313 for a whole window, 0 for E = 0).
//   MERaLiON-2: its first 300 s (the processor's 10 chunks of 30 s), each 30 s window normalised
//     to zero mean and unit variance over its samples (the feature extractor's do_normalize), then
//     padded to 30 s with its own log-mel, not masked: 100 tokens a window, whatever its length
//     (1500 positions through ln_speech, stacked by 15, the speech adapter).
// With projector false the rows are the tower's own output: Qwen2-Audio's and Audio Flamingo 3's
// pooled and normalised positions (as many as their tokens), GLM-ASR's positions holding audio
// (ceil(ceil(w / 160) / 2) per window), MiniCPM-o's the same (its apm's last hidden state), Kimi-Audio's
// token_len * 4 positions per window, Step-Audio 2's E pooled positions (after_norm's) per window,
// Voxtral's and MERaLiON-2's 1500 per 30 s and Ultravox's
// ceil(f / 2) positions per chunk, each n_state wide.
// Voxtral and Ultravox take one log-mel over a whole input (its dynamic-range clamp is the
// input's max), so the pipeline holds such an input until it ends (at most 4 hours, 922 MB),
// and one of more than one chunk takes a first pass on the device for that max.

// Whether a pipeline of these parameters over this model gives its tokens (see the pipeline).
bool whisper_audio_rows_are_tokens(const whisper_audio_model * model, whisper_audio_encoder_params ep,
                                   whisper_audio_pipeline_params pp);
// The most samples of an input the model uses: 480000 for Qwen2-Audio's tokens (its first
// 30 s), 9600000 for Audio Flamingo 3's (600 s), 19200000 for Music Flamingo's (1200 s), 10080000 for
// GLM-ASR's (630 s), 4800000 for MERaLiON-2's (300 s), SIZE_MAX otherwise (tokens false: the Whisper rules, which use all). A caller may stop
// reading an input there.
size_t whisper_audio_samples_used(const whisper_audio_model * model, bool tokens);
// "qwen2a", "voxtral", "ultravox", "musicflamingo" (Audio Flamingo 3, Music Flamingo) (llama.cpp's clip.projector_type),
// "glmasr" (ours: GLM-ASR in transformers' layout), "qwen2.5o", "minicpmo", "kimiaudio", "stepaudio2" (ours), "qwen3a",
// "meralion" (llama.cpp's), "qwen3asr" (ours), "none"; NULL outside the enum.
const char * whisper_audio_projector_name(enum whisper_audio_projector type);
// The same function named for what it names: the tower (a macro, so no second symbol).
#define whisper_audio_tower_name whisper_audio_projector_name
// The rows (tokens) of an input of n samples. 0 with the error set for a model without a projector.
size_t whisper_audio_n_tokens(const whisper_audio_model * model, size_t n_samples, bool projector);
// The width of a row: n_llm with the projector, n_state without.
int    whisper_audio_token_dim(const whisper_audio_model * model, bool projector);

// A whole input of 16 kHz mono audio (n >= 1) -> out [whisper_audio_n_tokens(n), token_dim]
// (params.projector chooses the rows; output_layer must be -1, final_ln true): one input through
// a pipeline of the encoder.
bool whisper_audio_encode_tokens(whisper_audio_encoder * enc, const float * pcm, size_t n, float * out);
// One window's log-mel [n_mels, n_frames] -> out [rows, token_dim]: n_frames 3000 (Qwen2-Audio,
// Voxtral, Audio Flamingo 3) or 2..3000 (Ultravox: unpadded, or a last chunk padded to 3000;
// MiniCPM-o: fewer than 3000 an input of at most 30 s, 3000 a later window with its frames past
// n_audio_frames zeroed and masked as its code does),
// n_audio_frames of them holding audio (Qwen2-Audio's feature_attention_mask sum, Audio Flamingo
// 3's input_features_mask sum, Ultravox's audio_lens; Voxtral ignores it; Qwen3-Omni: a clip of its first
// n_audio_frames frames, run at that length where it is less than a chunk; Step-Audio 2: 3..3000 frames
// and its wav_lens, n_frames - 2 for a window of its own, keys and rows by its rule; MERaLiON-2 ignores it,
// and its mel is the caller's: of the window normalised as its feature extractor does; Music Flamingo:
// the window is its input's first, window 0 of the rotary time embedding; Qwen3-ASR: as Qwen3-Omni's, but a
// clip shorter than a chunk runs as a whole chunk, its frames past the audio zero). Returns the
// number of rows written, or -1.
int  whisper_audio_encode_mel_tokens(whisper_audio_encoder * enc, const float * mel, int n_frames, int n_audio_frames,
                                     float * out);

// ---- devices, the CPU, f16 rows --------------------------------------------------------
// Backend-neutral: a device is a kind (enum whisper_audio_device) and an index, as
// encoder_params' device and gpu_device.

// Devices of a kind present: GPU, the GPUs this build's GPU backend sees (0 without one, or in
// a build without a GPU backend); CPU, 1; AUTO, those AUTO picks from (the GPUs, or else the
// CPU: 1). -1 with the error set for a value outside the enum.
int  whisper_audio_device_count(enum whisper_audio_device device);
// Bytes in use on the GPU index (0-based), by any process: the driver's figure, as nvidia-smi
// shows it. AUTO is the GPU when one is present. false with the error set for the CPU (no such
// figure), an index not present, or a build without a GPU backend.
bool whisper_audio_device_memory_used(enum whisper_audio_device device, int index, size_t * used);
// The instruction set of the CPU encoder's kernels on this machine: "avx512", "avx2" or
// "plain", picked at run time on x86-64; "neon" or "plain" on aarch64 (NEON is always there);
// the environment variable VT_CPU_ISA asks for a lesser one (to
// measure or test it). NULL with the error set when VT_CPU_ISA names one that is unknown or
// that this CPU cannot run (a CPU encoder then fails to start the same way).
const char * whisper_audio_cpu_isa(void);
// "amx" when the CPU encoder's bf16 mode (WHISPER_AUDIO_DTYPE_BF16) runs its GEMMs in bf16 on
// this machine (AMX-BF16 and AVX512-BF16, the tile state granted by the kernel), else NULL with
// the error saying why (that mode then computes in f32).
const char * whisper_audio_cpu_bf16_isa(void);

// IEEE half floats (uint16_t, as the rows of a pipeline with f16 set) to float and back,
// n values from src to dst (which may not overlap), as ggml's ggml_fp16_to_fp32_row. Exact one
// way; f32 -> f16 rounds to nearest even, as the pipeline does. false with the error set for a
// NULL src or dst when n > 0.
bool whisper_audio_f16_to_f32(const uint16_t * src, float * dst, size_t n);
bool whisper_audio_f32_to_f16(const float * src, uint16_t * dst, size_t n);

// Timings of the encode calls (encode_mel, encode_mel_frames, encode_pcm) since the encoder
// was made or its timings reset, in milliseconds. Each stage's field is its busy time, the
// sum over the batches it ran; wall_ms is the calls' own wall time. In a pipeline (and so in
// encode_pcm) the stages overlap: mel_ms is the CPU log-mel only (on CUDA the log-mel is part
// of the forward), encode_ms the time a worker spent submitting batches and waiting for their
// rows (and pooling them), and upload, compute and download are not taken apart. Read or reset them between calls, not while
// another thread's call runs.
typedef struct whisper_audio_timings {
    double mel_ms;           // the log-mel (encode_pcm only)
    double encode_ms;        // all of the encoder: graph setup + upload + compute + download
    double upload_ms;        // the mel into the backend
    double compute_ms;       // the forward (on CUDA: the graph replay, synchronised)
    double download_ms;      // the embeddings out, as f32
    double wall_ms;          // the encode calls from start to end
    int64_t n_batches;       // encoder runs (each of up to max_batch windows)
    int64_t n_windows;       // windows encoded (a causal tower's steps: each a batch of one)
} whisper_audio_timings;
whisper_audio_timings whisper_audio_encoder_timings(const whisper_audio_encoder * enc);
void                  whisper_audio_encoder_reset_timings(whisper_audio_encoder * enc);  // all to 0

// Profile: runs one batch of n_windows mel windows op by op (no graph replay) and fills
// times[0..n) with each op's name and milliseconds. Returns the number of ops, or -1.
typedef struct whisper_audio_op_time {
    char   name[64];          // the tensor's name: "post_conv", "layer3", or "" for unnamed
    char   op[16];            // "linear", "attention", "layer_norm", "conv1d_k3"
    int    layer;             // -1 outside the layers
    double ms;
} whisper_audio_op_time;
int whisper_audio_encoder_profile(whisper_audio_encoder * enc, const float * mel, int n_windows,
                                  whisper_audio_op_time * times, int max_times);

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
