# The Python package's mirror of whisper-audio.h against the header itself: a tiny C probe,
# compiled here with the system compiler against the header, prints each mirrored struct's
# size, alignment and fields (offset, size, kind) and the enum values and constants the package
# restates, as JSON; the ctypes classes must agree with it field for field. The header's own
# struct and enum member lists are read from its text, so a field or value added to the header
# and not to the package fails here too. Run by make test-python (in build/venv):
#
#   build/venv/bin/python -m pytest tests/python/test_abi.py
import ctypes
import json
import os
import re
import shutil
import subprocess

import pytest

import whisper_audio as wa

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "whisper-audio.h")

# every ctypes.Structure in the package: the C struct it mirrors
STRUCTS = {"_Hparams": "whisper_audio_hparams", "_Info": "whisper_audio_info",
           "_EncoderParams": "whisper_audio_encoder_params", "_Rows": "whisper_audio_rows",
           "_PipelineParams": "whisper_audio_pipeline_params", "_ReaderParams": "whisper_audio_reader_params"}
# every enum the package restates (a _CEnum: a member per C member, its int() the C value):
# the C enum and the prefix of its members
ENUMS = {"Device": ("whisper_audio_device", "WHISPER_AUDIO_DEVICE_"),
         "DType": ("whisper_audio_dtype", "WHISPER_AUDIO_DTYPE_"),
         "Pool": ("whisper_audio_pool", "WHISPER_AUDIO_POOL_"),
         "WeightType": ("whisper_audio_weight_type", "WHISPER_AUDIO_WEIGHT_"),
         "Projector": ("whisper_audio_projector", "WHISPER_AUDIO_PROJECTOR_")}
# every integer constant the package restates
CONSTANTS = {"SAMPLE_RATE": "WHISPER_AUDIO_SAMPLE_RATE", "_N_SAMPLES": "WHISPER_AUDIO_N_SAMPLES",
             "_N_FRAMES": "WHISPER_AUDIO_N_FRAMES", "_MAX_BATCH": "WHISPER_AUDIO_MAX_BATCH",
             "_MIN_RATE": "WHISPER_AUDIO_MIN_RATE", "_MAX_RATE": "WHISPER_AUDIO_MAX_RATE",
             "_POST_CONV": "WHISPER_AUDIO_POST_CONV"}

# a field's kind, in C by _Generic, in Python by its ctypes type: integer, floating, bool, pointer
KIND_C = ('#define KIND(x) _Generic((x), _Bool: "b", float: "f", double: "f", char: "i", signed char: "i", '
          'unsigned char: "i", short: "i", unsigned short: "i", int: "i", unsigned: "i", long: "i", '
          'unsigned long: "i", long long: "i", unsigned long long: "i", default: "p")')
KIND_PY = {ctypes.c_bool: "b", ctypes.c_float: "f", ctypes.c_double: "f", ctypes.c_char: "i",
           ctypes.c_byte: "i", ctypes.c_ubyte: "i", ctypes.c_short: "i", ctypes.c_ushort: "i",
           ctypes.c_int: "i", ctypes.c_uint: "i", ctypes.c_long: "i", ctypes.c_ulong: "i",
           ctypes.c_longlong: "i", ctypes.c_ulonglong: "i", ctypes.c_void_p: "p", ctypes.c_char_p: "p"}


def py_kind(t):
    if issubclass(t, ctypes.Array):
        return py_kind(t._type_)
    if issubclass(t, (ctypes._Pointer, ctypes._CFuncPtr)):
        return "p"
    return KIND_PY[t]


def header_text():
    with open(HEADER) as f:
        return re.sub(r"//[^\n]*", "", f.read())


def header_fields(struct):
    """The header's field names of typedef struct <struct> { ... }, in order."""
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), header_text(), re.S)
    assert m, f"no typedef struct {struct} in whisper-audio.h"
    names = []
    for decl in m.group(1).split(";"):
        if decl.strip():
            names += [re.match(r"\s*(\w+)", d[::-1]).group(1)[::-1]
                      for d in (re.sub(r"\[[^\]]*\]\s*$", "", x.strip()) for x in decl.split(","))]
    return names


def header_enum(enum):
    """The header's members of enum <enum>: {name: the alias it equals, or None}."""
    m = re.search(r"enum %s \{(.*?)\};" % enum, header_text(), re.S)
    assert m, f"no enum {enum} in whisper-audio.h"
    members = {}
    for item in m.group(1).split(","):
        if item.strip():
            name, _, value = (s.strip() for s in item.partition("="))
            members[name] = value if re.fullmatch(r"[A-Z_][A-Z0-9_]*", value) else None
    return members


def probe_source():
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "whisper-audio.h"', KIND_C,
             "int main(void) {", '    printf("{\\"structs\\": {");']
    for i, (py, c) in enumerate(STRUCTS.items()):
        lines.append("    { %s s; (void)s;" % c)
        lines.append('      printf("%s\\"%s\\": {\\"size\\": %%zu, \\"align\\": %%zu, \\"fields\\": {", sizeof(%s), _Alignof(%s));'
                     % ("," if i else "", c, c, c))
        for j, (name, t) in enumerate(getattr(wa, py)._fields_):
            count = "sizeof s.%s / sizeof s.%s[0]" % (name, name) if issubclass(t, ctypes.Array) else "(size_t)0"
            elem = "s.%s[0]" % name if issubclass(t, ctypes.Array) else "s.%s" % name
            lines.append('      printf("%s\\"%s\\": [%%zu, %%zu, \\"%%s\\", %%zu]", offsetof(%s, %s), sizeof s.%s, KIND(%s), %s);'
                         % ("," if j else "", name, c, name, name, elem, count))
        lines.append('      printf("}}"); }')
    lines.append('    printf("}, \\"values\\": {");')
    names = [c for e, (enum, prefix) in ENUMS.items() for c in enum_names(e, prefix)] + list(CONSTANTS.values())
    for i, c in enumerate(names):
        lines.append('    printf("%s\\"%s\\": %%lld", (long long)(%s));' % ("," if i else "", c, c))
    lines += ['    printf("}}\\n");', "    return 0;", "}"]
    return "\n".join(lines) + "\n"


def enum_names(py, prefix):
    """The C names of the package enum's members, aliases included (Device.GPU: WHISPER_AUDIO_DEVICE_GPU)."""
    return [prefix + name for name in getattr(wa, py).__members__]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc, gcc or clang) for the header probe")
    d = tmp_path_factory.mktemp("abi")
    src, exe = d / "probe.c", d / "probe"
    src.write_text(probe_source())
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", ROOT, str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"the probe does not compile against whisper-audio.h (a field the package names " \
                              f"that the header lacks?):\n{r.stderr}"
    return json.loads(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)


def test_the_tables_cover_every_mirror():
    # a new ctypes struct, enum dict or constant in the package needs a row here (and so a check)
    structs = {n for n, v in vars(wa).items() if isinstance(v, type) and issubclass(v, ctypes.Structure)}
    assert structs == set(STRUCTS)
    enums = {n for n, v in vars(wa).items() if isinstance(v, type) and issubclass(v, wa._CEnum) and v is not wa._CEnum}
    assert enums == set(ENUMS)
    assert not [n for n, v in vars(wa).items() if isinstance(v, dict) and v and all(type(x) is int for x in v.values())], \
        "an enum restated as a dict: make it a _CEnum (and a row of ENUMS)"
    constants = {n for n, v in vars(wa).items() if re.fullmatch(r"_?[A-Z][A-Z0-9_]*", n) and type(v) is int}
    assert constants == set(CONSTANTS)


@pytest.mark.parametrize("py", list(STRUCTS))
def test_struct_layout(probe, py):
    cls, c = getattr(wa, py), STRUCTS[py]
    got = probe["structs"][c]
    assert [name for name, _ in cls._fields_] == header_fields(c), f"{py}'s fields are not {c}'s"
    for name, t in cls._fields_:
        offset, size, kind, count = got["fields"][name]
        field = getattr(cls, name)
        assert (field.offset, field.size, py_kind(t)) == (offset, size, kind), f"{py}.{name} against {c}.{name}"
        if issubclass(t, ctypes.Array):
            assert t._length_ == count, f"{py}.{name}: {t._length_} elements, {c}.{name} has {count}"
    assert (ctypes.sizeof(cls), ctypes.alignment(cls)) == (got["size"], got["align"]), f"{py} against {c}"


@pytest.mark.parametrize("py", list(ENUMS))
def test_enum_values(probe, py):
    enum, prefix = ENUMS[py]
    mirror = getattr(wa, py)
    for name, c in zip(mirror.__members__, enum_names(py, prefix)):
        member = mirror[name]
        assert int(member) == probe["values"][c], f"{py}.{name} against {c}"
        if member.name == name:                         # (not an alias: Device.GPU is Device.CUDA)
            # (a dot aside: llama.cpp's qwen2.5o is QWEN25O, a C name having none)
            assert name.lower() == str(member).replace(".", ""), f"{py}.{name}: its string is not its name"
    # every member of the C enum (but a _COUNT) has a name in the package; an alias counts
    # through the member it equals
    members = header_enum(enum)
    names = set(enum_names(py, prefix))
    for name, alias in members.items():
        if alias is None and not name.endswith("_COUNT"):
            assert name in names or any(members.get(n) == name for n in names), f"{name} has no name in {py}"


def test_constants(probe):
    for py, c in CONSTANTS.items():
        assert getattr(wa, py) == probe["values"][c], f"{py} against {c}"


# ---- functions: the package's ctypes declarations against the header's prototypes --------

def c_kind(decl, strip_name):
    """A C parameter or return type -> its ABI kind: p (any pointer), i4 (int, an enum), u8
    (size_t), i8 (int64_t), b (bool), f (float), void, or struct:NAME (a struct by value)."""
    decl = " ".join(decl.split())
    if "*" in decl:
        return "p"
    words = decl.split()
    if strip_name and len(words) > 1:
        words = words[:-1]                              # the parameter's name
    words = [w for w in words if w != "const"]
    if words[0] == "enum":
        return "i4"
    kinds = {"int": "i4", "size_t": "u8", "int64_t": "i8", "bool": "b", "float": "f", "void": "void"}
    if words[0] in kinds:
        return kinds[words[0]]
    return "struct:" + words[0]


def py_arg_kind(t):
    if t is None:
        return "void"
    if isinstance(t, type) and issubclass(t, ctypes.Structure):
        return "struct:" + STRUCTS[t.__name__]
    if t in (ctypes.c_void_p, ctypes.c_char_p) or issubclass(t, (ctypes._Pointer, ctypes._CFuncPtr)):
        return "p"
    kinds = {ctypes.c_int: "i4", ctypes.c_size_t: "u8", ctypes.c_int64: "i8", ctypes.c_bool: "b", ctypes.c_float: "f"}
    assert t in kinds, f"no ABI kind for {t}"
    return kinds[t]


def header_prototypes():
    """{function name: (return kind, [parameter kinds])} of every function whisper-audio.h declares."""
    text = re.sub(r"#[^\n]*", "", header_text())
    protos = {}
    for m in re.finditer(r"(?:^|(?<=[;{}]))\s*([A-Za-z_][\w\s\*]*?)\b(whisper_audio_\w+)\s*\(([^()]*)\)\s*;", text, re.S):
        ret, name, params = m.group(1), m.group(2), m.group(3).strip()
        if "typedef" in ret:
            continue
        args = [] if params in ("", "void") else [c_kind(p, True) for p in params.split(",")]
        protos[name] = (c_kind(ret, False), args)
    return protos


def test_function_declarations_match_the_header():
    # sizes and signedness matter through ctypes: a size_t declared c_int is cut at 2 GB, an
    # argument too many or too few reads garbage; a function the package names must be declared
    protos = header_prototypes()
    assert "whisper_audio_encode_mel_hidden_states" in protos and "whisper_audio_resample" in protos
    declared = {n: f for n, f in vars(wa._lib).items() if n.startswith("whisper_audio_")}
    assert len(declared) >= 30
    for name, f in declared.items():
        assert name in protos, f"{name}: not in whisper-audio.h"
        ret, args = protos[name]
        assert py_arg_kind(f.restype) == ret, f"{name}: returns {ret} in C, {f.restype} in the package"
        assert [py_arg_kind(a) for a in f.argtypes] == args, f"{name}: parameters {args} in C, {f.argtypes} in the package"


def test_every_header_function_is_exported():
    for name in header_prototypes():
        assert hasattr(wa._lib, name), f"{name}: in whisper-audio.h, not exported by the library"


def test_enum_strings_are_the_library_names():
    # WeightType and Projector are named as the library names them (hparams, main's --json)
    for member in wa.WeightType:
        assert wa._lib.whisper_audio_weight_type_name(int(member)).decode() == member
    for member in wa.Projector:
        assert wa._lib.whisper_audio_projector_name(int(member)).decode() == member
