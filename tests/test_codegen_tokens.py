"""C tokens made from untrusted model text cannot inject code."""

import re
import subprocess

import numpy as np
import pytest

from zoflash.compiler.codegen import c_array, c_comment, c_float, c_identifier, c_int, c_string

HOSTILE = [
    "x */ int evil; /*",
    "a\nb",
    '"quoted"',
    "back\\slash",
    "??/ trigraph",
    "ünïcode",
    "*/\n#include <stdio.h>",
    "\x00nul",
    "/* nested",
    "tab\there",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_comment_and_string_are_inert(text):
    comment = c_comment(text)
    assert "*/" not in comment and "/*" not in comment and "\n" not in comment
    s = c_string(text)
    assert s.startswith('"') and s.endswith('"') and '"' not in s[1:-1] and "\n" not in s and "?" not in s


@pytest.mark.parametrize("text", HOSTILE + ["123abc", "", "Model-Name.v2"])
def test_identifier_is_valid_c(text):
    assert re.fullmatch(r"[a-z_][a-z0-9_]*", c_identifier(text))


@pytest.mark.cc
def test_hostile_names_compile_and_round_trip(tmp_path):
    body = "\n".join(f"/* {c_comment(t)} */ const char *s{i} = {c_string(t)};" for i, t in enumerate(HOSTILE))
    prints = "\n".join(f"    fputs(s{i}, stdout); fputc(0, stdout);" for i in range(len(HOSTILE)))
    src = tmp_path / "t.c"
    src.write_text(f"#include <stdio.h>\n{body}\nint main(void) {{\n{prints}\n    return 0;\n}}\n")
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "t"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, check=True).stdout.split(b"\0")[:-1]
    # C strings end at NUL, so compare up to it
    assert out == [t.encode().split(b"\0")[0] for t in HOSTILE]


def test_literals():
    assert c_int(-(2**31)) == "(-2147483647 - 1)"
    assert c_int(5) == "5"
    for v in [0.1, 1 / 256, 3.4028235e38, 1e-45, 0.0, -2.5]:
        text = c_float(v)
        assert np.float32(float(text[:-1])) == np.float32(v)
    assert c_array(np.arange(20), per_line=8).count("\n") == 2
