# tests/test-parts.py, which runs each part of `make test` and prints its last line: the line
# must follow from the parts' exit status and their own closing lines (a part that fails, or
# exits 0 without its closing line, is a failed part and fails the summary), in the order they ran.
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = os.path.join(ROOT, "tests", "test-parts.py")


def run_part(folder, name, script, rc=0):
    """A fake part: python printing script's lines to stdout and stderr, then exiting rc."""
    code = f"import sys\nprint({script!r})\nprint('to stderr', file=sys.stderr)\nsys.exit({rc})"
    return subprocess.run([sys.executable, PARTS, "run", str(folder), name, sys.executable, "-c", code],
                          capture_output=True, text=True)


def summary(folder):
    r = subprocess.run([sys.executable, PARTS, "summary", str(folder)], capture_output=True, text=True)
    return r.returncode, r.stdout.strip()


def test_every_part_passed(tmp_path):
    lines = {
        "embed": "test-embed: 9 checks passed (model alone, with files)",
        "server": "test-server: all 13 checks passed in 39.1 s",
        "converter": "test-convert: 23 passed, 0 failed, 1 skipped",
        "ct2": "ok   a check\n39 passed, 0 failed",
        "doctest": "[doctest] test cases:     130 |     130 passed | 0 failed | 19 skipped\n"
                   "[doctest] the CUDA tests: skipped: no CUDA device (no driver)",
        "real-weights": "SKIP: cannot download x from PyPI: ['no network']",
        "install": "test-install: 12 checks passed",
        "deps": "test-deps: ok: make deps waits",
        "aarch64": "test-aarch64: 20 doctest cases passed under qemu-aarch64 in 81 s (kernel sets checked against "
                   "float64: neon plain)",
        "python": "84 passed, 2 skipped in 33.72s",
        "docs": "ok   README.md:11 [sh]\ntest-docs: 10 blocks passed, 19 skipped, 0 failed",
    }
    for name, text in lines.items():
        r = run_part(tmp_path, name, text)
        assert r.returncode == 0
        assert text.splitlines()[-1] in r.stdout and "to stderr" in r.stdout       # shown, stderr too
        assert "to stderr" in (tmp_path / f"{name}.log").read_text()              # and kept
    rc, line = summary(tmp_path)
    assert rc == 0
    assert line == ("make test: 11 parts passed (embed 9 checks (model alone, with files); server 13 checks; converter 23 passed, 1 skipped; "
                    "ct2 39 passed; doctest 130 passed, 19 skipped (no CUDA device); real-weights skipped (PyPI "
                    "unreachable); install 12 checks; deps ok; aarch64 20 passed (neon plain); python 84 passed, 2 skipped; "
                    "docs 10 blocks passed, 19 skipped)")


def test_the_aarch64_part_skips_or_fails_by_its_line(tmp_path):
    # skipped where the cross compiler or qemu is missing; a failed run has no passing line
    run_part(tmp_path, "aarch64", "test-aarch64: skipped: no qemu-aarch64 (make deps installs qemu-user)")
    rc, line = summary(tmp_path)
    assert rc == 0 and line == "make test: 1 parts passed (aarch64 skipped (no qemu-aarch64))"
    run_part(tmp_path, "aarch64", "test-aarch64: FAILED (1 of the doctest cases failed, exit 1; build-aarch64/test-aarch64.log)")
    rc, line = summary(tmp_path)
    assert rc == 1 and "aarch64 FAILED (no closing line)" in line


def test_a_failed_part_fails_the_summary(tmp_path):
    assert run_part(tmp_path, "ct2", "39 passed, 0 failed").returncode == 0
    r = run_part(tmp_path, "doctest", "[doctest] test cases: 3 | 2 passed | 1 failed | 0 skipped", rc=3)
    assert r.returncode == 3                                                      # the part's own status
    assert run_part(tmp_path, "server", "test-server: all 13 checks passed in 1 s").returncode == 0
    rc, line = summary(tmp_path)
    assert rc == 1
    assert line.startswith("make test: 1 of 3 parts failed: doctest (ct2 39 passed; doctest FAILED (exit 3); "
                           "server 13 checks;")


def test_a_part_without_its_closing_line_has_not_passed(tmp_path):
    # exit 0 is not enough: a doctest that ran no case, a pytest that collected nothing, an
    # unknown part, a closing line that reports failures
    run_part(tmp_path, "doctest", "[doctest] nothing")
    run_part(tmp_path, "python", "no tests ran in 0.01s")
    run_part(tmp_path, "mystery", "all good")
    run_part(tmp_path, "ct2", "38 passed, 1 failed")
    rc, line = summary(tmp_path)
    assert rc == 1
    assert line.startswith("make test: 4 of 4 parts failed: doctest, python, mystery, ct2 (doctest FAILED (no closing "
                           "line); python FAILED (no closing line); mystery FAILED (no closing line); ct2 FAILED (no "
                           "closing line);")


def test_no_parts(tmp_path):
    rc, line = summary(tmp_path)
    assert rc == 1 and line.startswith("make test: no parts ran")


def test_a_command_that_cannot_start(tmp_path):
    r = subprocess.run([sys.executable, PARTS, "run", str(tmp_path), "deps", str(tmp_path / "no-such-command")],
                       capture_output=True, text=True)
    assert r.returncode == 127 and "cannot run" in r.stdout
    rc, line = summary(tmp_path)
    assert rc == 1 and "deps FAILED (exit 127)" in line
