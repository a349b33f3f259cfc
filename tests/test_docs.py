"""The documentation is checked like code: the generated reference pages are current, every
relative link and every repository path written in the docs exists, every `zoflash` command and
flag shown exists, and the README's quick start runs as written.

The site's own build (`make docs-site`, part of `make test`) is strict too: broken anchors,
unlisted pages and stale generated pages fail it."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import ROOT

from zoflash.cli.main import cli

README = ROOT / "README.md"
# the pages a user reads: links, paths and commands are checked
USER_PAGES = [
    README,
    ROOT / "CHANGELOG.md",
    ROOT / "tests" / "fixtures" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
# the research records: links and paths only (a record keeps the command it ran, even if a flag has changed since)
RECORDS = sorted((ROOT / "research").glob("*.md"))

_spec = importlib.util.spec_from_file_location("docs_site", ROOT / "tools" / "docs_site.py")
assert _spec and _spec.loader
docs_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_site)

FENCE = re.compile(r"^(```|~~~)([\w-]*)[^\n]*\n(.*?)^\1", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
# repository paths as the docs write them: from the repository's root, or inside the package
TOP = ("host/", "tests/", "docs/", "examples/", "benchmarks/", "firmware_templates/", "boards/", "research/", "tools/")
TOP_FILES = ("Makefile", "pyproject.toml", "mkdocs.yml", "setup.py", "README.md", "CHANGELOG.md", "NOTICE", "LICENSE")
PLACEHOLDER = re.compile(r"[<>*{}$\s|]|\.\.\.|/[A-Z]+(/|$)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def _where(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_generated_pages_are_current():
    stale = docs_site.stale_pages()
    assert not stale, f"stale generated pages: {stale}; run `make docs`"


@pytest.mark.parametrize("page", USER_PAGES + RECORDS, ids=_where)
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#", target):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{_where(page)} links to files that do not exist: {broken}"


def _repo_path(span: str) -> str | None:
    """The repository path a code span names, or None when it names none (or a pattern)."""
    span = span.strip().rstrip(".,;:")
    span = re.sub(r":\d+(-\d+)?$", "", span).split("#")[0]
    if PLACEHOLDER.search(span) or span.startswith(("generated/", "build/")):
        return None
    if span.startswith(TOP) or span in TOP_FILES:
        return span
    if span.startswith("zoflash/") and "/" in span[len("zoflash/") :]:
        return "host/" + span
    return None


@pytest.mark.parametrize("page", USER_PAGES + RECORDS, ids=_where)
def test_documented_paths_exist(page):
    text = page.read_text()
    missing = sorted(
        {p for span in CODE_SPAN.findall(_prose(text)) if (p := _repo_path(span)) and not (ROOT / p).exists()}
    )
    assert not missing, f"{_where(page)} names paths that do not exist: {missing}"


def _commands(text: str) -> list[str]:
    """Every `zoflash ...` command line: in shell code blocks (continuations joined) and code spans."""
    lines = []
    for _fence, lang, body in FENCE.findall(text):
        if lang not in ("", "sh", "bash", "console", "shell"):
            continue
        body = body.replace("\\\n", " ")
        lines += [ln for ln in body.splitlines()]
    lines += CODE_SPAN.findall(_prose(text))
    out = []
    for line in lines:
        line = re.sub(r"^\s*(\$|#)?\s*", "", line).split(" #")[0]
        for part in re.split(r"&&|;|\|\s", line):
            part = part.strip()
            if part.startswith("zoflash ") or part == "zoflash":
                out.append(part)
    return out


def _flags(command: click.Command) -> set[str]:
    flags = {"--help", "-h"}
    for p in command.params:
        flags.update(o for o in p.opts + p.secondary_opts if o.startswith("-"))
    return flags


def _check_command(line: str) -> str | None:
    """What is wrong with one documented command line, or None."""
    try:
        words = shlex.split(line.replace("|", " | "))
    except ValueError:
        words = line.split()
    command: click.Command = cli
    flags = _flags(cli)
    for word in words[1:]:
        token = word.strip("[]()").split("=")[0]
        if isinstance(command, click.Group) and token in command.commands:
            command = command.commands[token]
            flags |= _flags(command)
            continue
        if isinstance(command, click.Group) and command is cli and re.fullmatch(r"[a-z][a-z-]+", token):
            return f"`{line}`: no command '{token}' (commands: {', '.join(cli.commands)})"
        is_flag = token.startswith("-") and token not in ("-", "--") and not re.fullmatch(r"-?\d[\d.e-]*", token)
        if is_flag and token not in flags:
            return f"`{line}`: '{command.name}' has no option {token}"
    return None


@pytest.mark.parametrize("page", USER_PAGES, ids=_where)
def test_documented_commands_and_flags_exist(page):
    problems = [p for line in _commands(page.read_text()) if (p := _check_command(line))]
    assert not problems, f"{_where(page)}:\n" + "\n".join(problems)


def test_the_checker_catches_a_wrong_command_and_flag():
    assert _check_command("zoflash simulate --model m.tflite --data d.npz --budget 1") is None
    assert _check_command("zoflash boards show stm32n6") is None
    assert "no command 'simulatte'" in _check_command("zoflash simulatte --model m.tflite")
    assert "has no option --bugdet" in _check_command("zoflash simulate --model m.tflite --bugdet 1")
    assert _repo_path("host/zoflash/spec/options.py") == "host/zoflash/spec/options.py"
    assert _repo_path("firmware_templates/runtime/<part>/") is None
    assert _commands("```sh\nzoflash run --board X \\\n  --steps 3\n```\n") == ["zoflash run --board X    --steps 3"]


def test_readme_stays_short_and_starts_with_what_and_how_to_install():
    text = README.read_text()
    assert len(text) <= 12_000, f"README.md is {len(text)} characters; keep it under 12,000 (details go to docs/)"
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:2] == ["Install", "Quick start"], headings
    assert "pip install" in text and "apt-get install" in text


def _quick_start() -> list[str]:
    section = README.read_text().split("\n## Quick start\n", 1)[1]
    body = FENCE.search(section).group(3)
    return [ln for ln in body.replace("\\\n", " ").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.tflm
def test_readme_quick_start_runs_as_written(tmp_path):
    """Every command of the README's quick start, in a fresh folder that has the checkout's examples,
    with the training budgets cut tenfold (the same commands and flags, a shorter run: the full
    budget on the emulator is what `make demo` runs)."""
    written = _quick_start()
    assert any(c.startswith("zoflash run --board mps3-an547") for c in written)
    commands = [c.replace("--budget 400000", "--budget 40000") for c in written]
    assert sum(c != w for c, w in zip(commands, written)) == 2, "the quick start's two training budgets moved"
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    assert shutil.which("zoflash", path=env["PATH"]), "the zoflash command is not installed in this environment"
    outputs = []
    for command in commands:
        done = subprocess.run(
            shlex.split(command),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, (
            f"`{command}` failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
        outputs.append(done.stdout + done.stderr)
    assert outputs[-1].startswith("IDENTICAL"), outputs[-1]
    assert (tmp_path / "adapted.tflite").is_file()
