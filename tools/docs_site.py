"""The documentation site: the reference pages generated from the code, and the MkDocs hooks.

    python tools/docs_site.py --write   # regenerate the generated pages (`make docs`)
    python tools/docs_site.py --check   # exit 1 naming each stale page

As MkDocs hooks (mkdocs.yml `hooks:`), this module:
- fails the build when a generated page is stale, so the site never shows old tables;
- serves the README as the home page and the research records (research/, outside docs/ because
  they are not user documentation) under research/;
- rewrites the links of every page from repository paths to site paths, so that each page reads
  right both on the site and as a file in the repository; a link to a repository file that is
  not on the site becomes its path in code font.
"""

from __future__ import annotations

import os
import posixpath
import re
import sys
from collections.abc import Callable
from pathlib import Path

from zoflash.compiler import c_api_docs
from zoflash.compiler.ops import docs as ops_docs
from zoflash.spec import options, wire_docs
from zoflash.targets import boards

ROOT = Path(__file__).resolve().parent.parent

# repository path -> the function that renders it
GENERATED_PAGES: dict[str, Callable[[], str]] = {
    "docs/ops.md": ops_docs.markdown,
    "docs/options.md": options.markdown,
    "docs/reference/boards.md": boards.markdown,
    "docs/reference/telemetry.md": wire_docs.markdown,
    "docs/reference/c-api.md": c_api_docs.markdown,
}

# pages from outside docs/: site path -> repository path
HOME = ("index.md", "README.md")
RESEARCH = "research"


def stale_pages(root: Path = ROOT) -> list[str]:
    """The generated pages whose file differs from what the code renders now."""
    stale = []
    for path, render in GENERATED_PAGES.items():
        file = root / path
        if not file.is_file() or file.read_text() != render():
            stale.append(path)
    return stale


def write_pages(root: Path = ROOT) -> list[str]:
    """Regenerate every generated page; returns the ones that changed."""
    changed = stale_pages(root)
    for path in changed:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(GENERATED_PAGES[path]())
    return changed


# ---------------------------------------------------------------------------- links


def site_path(repo_path: str, extra: dict[str, str]) -> str | None:
    """Where a repository file is on the site, or None when the site does not have it."""
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/") :]
    return {repo: site for site, repo in extra.items()}.get(repo_path)


_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)", re.M)


def rewrite_links(markdown: str, page_repo: str, page_site: str, extra: dict[str, str]) -> str:
    """The page's relative links, from repository paths to site paths (fenced code untouched)."""

    def one(m: re.Match) -> str:
        bang, text, target = m.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        repo = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo), path))
        site = site_path(repo, extra)
        if site is None:
            shown = text.strip("`")
            return f"`{repo}`" if shown in (repo, path, posixpath.basename(repo)) else f"{text} (`{repo}`)"
        rel = posixpath.relpath(site, posixpath.dirname(page_site) or ".")
        return f"{bang}[{text}]({rel}{'#' + anchor if anchor else ''})"

    parts = _FENCE.split(markdown)
    # split keeps the fence markers: text, marker, code, marker, text, ...; rewrite the text parts only
    out, inside = [], False
    for i, part in enumerate(parts):
        if i % 2 == 1:  # a fence marker
            out.append(part)
            inside = not inside
            continue
        out.append(part if inside else _LINK.sub(one, part))
    return "".join(out)


# ---------------------------------------------------------------------------- MkDocs hooks


def _extra_pages() -> dict[str, str]:
    pages = dict([HOME])
    for f in sorted((ROOT / RESEARCH).iterdir()):
        if f.suffix in (".md", ".png"):
            pages[f"{RESEARCH}/{f.name}"] = f"{RESEARCH}/{f.name}"
    return pages


def on_config(config):
    from mkdocs.exceptions import Abort

    stale = stale_pages()
    if stale:
        raise Abort(f"generated page(s) out of date: {', '.join(stale)}; run `make docs` and commit them")
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for site, repo in _extra_pages().items():
        if files.get_file_from_path(site) is None:
            files.append(File.generated(config, site, abs_src_path=str(ROOT / repo)))
    return files


def on_page_markdown(markdown, page, config, files):
    extra = _extra_pages()
    site = page.file.src_uri
    repo = extra.get(site, f"docs/{site}")
    return rewrite_links(markdown, repo, site, extra)


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        for path in write_pages():
            print(f"wrote {path}")
        return 0
    if argv == ["--check"]:
        stale = stale_pages()
        for path in stale:
            print(f"{path} is out of date: run `make docs`", file=sys.stderr)
        return 1 if stale else 0
    print("usage: python tools/docs_site.py --write | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
