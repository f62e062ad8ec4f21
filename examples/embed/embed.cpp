// embed: what another project writes to get Whisper embeddings with whisper-audio's two
// source files (and the headers beside them: vt.h, whisper-audio.h, whisper-audio-arch.h)
// dropped into its tree. Built by one plain compiler command:
//
//   g++ -std=c++17 -O3 -I. examples/embed/embed.cpp vt.cpp whisper-audio.cpp -o embed -pthread
//
// (for the GPU, the README's "Embedding" says what to add: vt-cuda.cu through nvcc).
#include "whisper-audio.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf AUDIO.wav\n", argv[0]);
        return 2;
    }
    whisper_audio_model * model = whisper_audio_model_load(argv[1]);
    if (!model) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }

    float * pcm = NULL;
    size_t n = 0;
    if (!whisper_audio_decode_file(argv[2], &pcm, &n, NULL)) {
        fprintf(stderr, "error: %s\n", whisper_audio_last_error());
        whisper_audio_model_free(model);
        return 1;
    }

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
