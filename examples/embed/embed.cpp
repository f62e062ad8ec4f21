// embed: what another project writes to get Whisper embeddings with whisper-audio's two source
// files (vt.cpp, whisper-audio.cpp, and the headers beside them: vt.h, vt-cpu.h,
// vt-cpu-kernels.h, whisper-audio.h, whisper-audio-arch.h, whisper-audio-impl.h) dropped into its
// tree. Built by one plain compiler command:
//
//   g++ -std=c++17 -O3 -I. examples/embed/embed.cpp vt.cpp whisper-audio.cpp -o embed -pthread
//
// The two files take 16 kHz mono PCM, here raw float32 samples (AUDIO.f32: `ffmpeg -i x.mp3 -ar
// 16000 -ac 1 -f f32le x.f32`). With the second set, whisper-audio-input.cpp and
// whisper-audio-formats.cpp compiled in with -DWHISPER_AUDIO_INPUT -DWHISPER_AUDIO_FORMATS, any
// audio file goes through whisper_audio_decode_file and any model format loads (README,
// "Embedding"; for the GPU add vt-cuda.cu through nvcc).
#include "whisper-audio.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

// A raw float32 file's samples (malloc'ed), or NULL with a message.
static float * read_f32(const char * path, size_t * n) {
    FILE * f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "error: %s: cannot open\n", path); return NULL; }
    size_t cap = 1 << 16, len = 0;
    float * pcm = (float *)malloc(cap * sizeof(float));
    for (size_t got; pcm && (got = fread(pcm + len, sizeof(float), cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            float * grown = (float *)realloc(pcm, (cap *= 2) * sizeof(float));
            if (!grown) { free(pcm); pcm = NULL; }
            else pcm = grown;
        }
    }
    fclose(f);
    if (!pcm) fprintf(stderr, "error: %s: out of memory\n", path);
    *n = len;
    return pcm;
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL AUDIO (AUDIO.f32: raw float32 16 kHz mono samples)\n", argv[0]);
        return 2;
    }
    whisper_audio_model * model = whisper_audio_model_load(argv[1]);
    if (!model) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }

    float * pcm = NULL;
    size_t n = 0;
    const size_t len = strlen(argv[2]);
    if (len > 4 && strcmp(argv[2] + len - 4, ".f32") == 0) {
        pcm = read_f32(argv[2], &n);
    } else if (!whisper_audio_decode_file(argv[2], &pcm, &n, NULL)) {
        fprintf(stderr, "error: %s\n", whisper_audio_last_error());
    }
    if (!pcm) { whisper_audio_model_free(model); return 1; }

    whisper_audio_encoder_params params = whisper_audio_encoder_default_params();
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, params);
    if (!enc) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }

    const int d = whisper_audio_model_hparams(model)->n_state;
    const size_t n_win = whisper_audio_n_windows(n);
    float * emb = (float *)malloc(n_win * 1500 * d * sizeof(float));
    if (!emb || !whisper_audio_encode_pcm(enc, pcm, n, emb)) {
        fprintf(stderr, "error: %s\n", emb ? whisper_audio_last_error() : "out of memory");
        return 1;
    }
    printf("%s: %zu samples -> [%zu, 1500, %d] on %s; emb[0][0][0..3] = %.5f %.5f %.5f %.5f\n", argv[2], n, n_win, d,
           whisper_audio_encoder_backend(enc), emb[0], emb[1], emb[2], emb[3]);

    free(emb);
    whisper_audio_pcm_free(pcm);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
    return 0;
}
