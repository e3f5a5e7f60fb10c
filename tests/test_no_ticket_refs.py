"""The product speaks of concepts, not of documents its reader does not have.

Code, docs and generated files name what they mean ("the 47-minute outage",
"the reliability accounting", docs/design.md#...) instead of the numbers of the
issues, specifications ("seed 000") or work sessions ("stop 21") they came from.
A reference of that kind added anywhere in the product fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The product: its code, its docs and what is generated from or shipped with it.
SCANNED = (
    "app",
    "agents",
    "tables",
    "bench",
    "docs",
    "schemas",
    "ops",
    "README.md",
    "providers.example.yaml",
    "pyproject.toml",
)
SUFFIXES = {".py", ".md", ".json", ".yaml", ".yml", ".toml", ".txt", ".html", ".css", ".js"}
REFERENCE = re.compile(r"\b(?:stops? \d+|issues? \d+|seeds? 00\d)\b", re.IGNORECASE)
#: Lines exempt by their exact text (path, line): none today. An entry lets a file being
#: changed elsewhere keep one line until its change lands; nothing new slips in beside it.
PENDING: set[tuple[str, str]] = set()


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
            )
    return files


def test_the_scan_sees_the_product() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    for expected in ("app/settings.py", "docs/design.md", "README.md", "bench/outage.py"):
        assert expected in names, expected


def test_the_pattern_catches_what_it_must() -> None:
    for text in (
        "issue 12",
        "Issue 13 §3",
        "issues 4 and 17",
        "seed 003's table",
        "seeds 000 and 004",
        "Seed 000 §6",
        "stop 21's runs",
        "stops 20 to 24",
    ):
        assert REFERENCE.search(text), text
    for text in ("httpx issue #3215", "CB_MODE=seed000", "seed000-ucb1/2", "SIGSTOP at 30 s"):
        assert not REFERENCE.search(text), text


def test_no_issue_specification_or_session_numbers() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in scanned_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if REFERENCE.search(line)
        and (path.relative_to(ROOT).as_posix(), line.strip()) not in PENDING
    ]
    assert not found, "name the concept instead (docs/design.md):\n" + "\n".join(found)
