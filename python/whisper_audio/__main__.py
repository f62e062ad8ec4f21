"""The `whisper-audio` command and `python -m whisper_audio`: main's command line.

Runs the `main` binary the wheel carries beside the package (whisper_audio/whisper-audio), in
place of this process, with the same arguments: its options, output, messages and exit status
are main's (`whisper-audio --help`). WHISPER_AUDIO_MAIN names another build of it (make's
build/main, for example), as WHISPER_AUDIO_LIBRARY does the library.
"""

import os
import sys
from typing import List, Optional


def main_binary() -> str:
    """The path of the main binary this package runs: $WHISPER_AUDIO_MAIN, else the packaged one."""
    return os.environ.get("WHISPER_AUDIO_MAIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                "whisper-audio")


def main(argv: Optional[List[str]] = None) -> int:
    """Replaces this process with main, given argv (default: this command's arguments). Returns
    only when main cannot be started: 127 (not there) or 126 (not executable), with a message."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = main_binary()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(path, ["whisper-audio"] + args)
    except FileNotFoundError:
        print(f"whisper-audio: {path}: no such file: this installation of whisper_audio has no main binary "
              f"(a wheel carries it; from a source tree, build it with make and set WHISPER_AUDIO_MAIN=build/main)",
              file=sys.stderr)
        return 127
    except OSError as e:
        print(f"whisper-audio: cannot run {path}: {e.strerror}", file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main())
