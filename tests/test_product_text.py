"""The product speaks of what it does, not of the tracker that planned it: no tracked file
(code, templates, board files, tests, benchmarks, docs, CHANGELOG.md) names an issue by number."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"\bissues?[ -]?#?\d+", re.IGNORECASE)


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [ROOT / name for name in out.decode().split("\0") if name]


def markers(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if MARKER.search(line)]


def test_the_pattern_finds_the_markers_it_is_for():
    # each example is split in two so that this file does not hold a marker itself
    for head, tail in (
        ("see issue", " 13"),
        ("Issue", " #5"),
        ("(issue", "-10 models)"),
        ("issues", " 12 and 13"),
        ("ISSUE", " 7"),
        ("issue", "#9"),
    ):
        assert markers(head + tail), head + tail
    for head, tail in (("an issue", " tracker"), ("the issue's", " goal"), ("issues", " = []"), ("tissue", " 3")):
        assert not markers(head + tail), head + tail


def test_no_tracked_file_names_an_issue_by_number():
    found = []
    for path in tracked_files():
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary: models, data sets, images
            continue
        for n, line in markers(data.decode("utf-8", errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{n}: {line[:120]}")
    assert not found, "name the capability instead of the issue number:\n" + "\n".join(found)
