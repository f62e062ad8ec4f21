# tests/gpu/audio-env.sh - sourced, not run: `. tests/gpu/audio-env.sh build/carry/audio`.
# Points the build and the programs at the decoders and wheels that tests/gpu/make-audio-carry.sh
# put in that folder (carried to a GPU machine that has neither), wherever the folder lies:
#   the build   CPATH (gcc reads it as more -I folders) reaches the carried headers; LDLIBS=-L...
#               (the Makefile appends its own to it) the libraries, ahead of the system's folders
#               (gcc's LIBRARY_PATH would come after them); OGG=1 FLAC=1 MP3=1 OPUS=1 (the
#               Makefile's switches, lists.mk) turn on each format whose header is there: the
#               Makefile looks for headers under /usr/include alone. PKG_CONFIG_PATH too, for
#               whoever asks pkg-config.
#   running     LD_LIBRARY_PATH reaches the carried libraries (main, bench, test-all, the
#               shared library under Python).
#   Python      soundfile, cffi and pycparser from the carried wheels, installed into
#               DIR/site-cpython-3XY (pip --no-index: no network; WA_AUDIO_SITE=... elsewhere) and
#               put on PYTHONPATH.
# Prints one line of what it set; a format whose header is not in the folder stays off.
wa_audio_env() {
    local dir r lib inc site fmts=""
    dir=$(cd "$1" 2>/dev/null && pwd) || { echo "audio-env: no folder $1" >&2; return 1; }
    r=$dir/root/usr
    lib=$r/lib/x86_64-linux-gnu
    inc=$r/include:$r/include/opus:$r/include/x86_64-linux-gnu   # opusfile.h includes <opus_multistream.h>;
                                                                 # Debian keeps mpg123.h under the multiarch folder
    export CPATH=$inc${CPATH:+:$CPATH}
    export LDLIBS="-L$lib${LDLIBS:+ $LDLIBS}"
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    [ -f "$r/include/vorbis/vorbisfile.h" ] && export OGG=1 && fmts="$fmts OGG"
    [ -f "$r/include/FLAC/stream_decoder.h" ] && export FLAC=1 && fmts="$fmts FLAC"
    [ -f "$r/include/x86_64-linux-gnu/mpg123.h" ] && export MP3=1 && fmts="$fmts MP3"
    [ -f "$r/include/opus/opusfile.h" ] && export OPUS=1 && fmts="$fmts OPUS"
    # one folder per Python (cache_tag: cpython-312): a wheel of cffi fits one version
    site=${WA_AUDIO_SITE:-$dir/site-$(python3 -c 'import sys; print(sys.implementation.cache_tag)')}
    if ! [ -f "$site/soundfile.py" ] && ls "$dir"/wheels/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check --root-user-action=ignore \
            --find-links "$dir/wheels" --target "$site" soundfile cffi pycparser ||
            echo "audio-env: the wheels did not install: transformers' side decodes WAV alone" >&2
    fi
    [ -f "$site/soundfile.py" ] && export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
    echo "audio-env: $dir: formats$fmts; soundfile $([ -f "$site/soundfile.py" ] && echo "in $site" || echo missing)"
}
wa_audio_env "${1:-build/carry/audio}"
