"""docs/ states the rules; the experiment logs live in research/ (research/README.md).  A docs page
may link a record for the reason of a rule, but holds no results table or "tried" history itself,
and every record carries its question, command, result and decision."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RESEARCH = ROOT / "research"
HEADINGS = ("## Question", "## Command", "## Result", "## Decision")
# results of paired seeds are printed as mean ± std (or +-); only the benchmark page holds measurements
RESULT_ROW = re.compile(r"^\|.*(±|\s\+-\s)", re.M)
HISTORY = re.compile(r"\bnot kept\b|\btried\b|\bprototyped\b", re.I)
LINK = re.compile(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)")


def records() -> list[Path]:
    return sorted(p for p in RESEARCH.glob("*.md") if p.name != "README.md")


def test_no_experiment_logs_under_docs():
    names = [p.name for p in DOCS.rglob("*") if re.search(r"experiment|survey", p.name, re.I)]
    assert not names, f"experiment logs belong in research/: {names}"
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        history = HISTORY.findall(text)
        assert not history, f"{page.name}: {history}: move the history to a research/ record and link it"
        if page.name not in ("benchmarks.md", "science.md"):  # measurements; the Science page's summary
            rows = RESULT_ROW.findall(text)
            assert not rows, f"{page.name} has a results table (mean ± std): it belongs in a research/ record"


def test_every_record_has_the_four_headings_in_order():
    assert records(), "no research records found"
    for record in records():
        text = record.read_text()
        at = [text.find(f"\n{h}\n") for h in HEADINGS]
        assert -1 not in at, f"{record.name} lacks {[h for h, i in zip(HEADINGS, at) if i < 0]}"
        assert at == sorted(at), f"{record.name}: the headings must come in the order {HEADINGS}"


def test_the_index_lists_every_record():
    index = (RESEARCH / "README.md").read_text()
    missing = [r.name for r in records() if f"({r.name})" not in index]
    assert not missing, f"research/README.md does not list {missing}"


def test_relative_links_of_docs_and_records_resolve():
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in [*DOCS.glob("*.md"), *RESEARCH.glob("*.md"), ROOT / "README.md"]
        for target in LINK.findall(page.read_text())
        if not (page.parent / target).exists()
    ]
    assert not broken, broken
