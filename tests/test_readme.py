"""The README and the manual (docs/) describe this repository: the documents and sections
they name exist, and the compatibility chapter does not call unimplemented what the manual
documents as done."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
# A link's target: a path (relative to its document), an anchor, or both; not a URL.
LINK = re.compile(r"\]\((?![a-z]+:)([^)\s#]*)(?:#([^)\s]*))?\)")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(document: Path) -> set[str]:
    tokens = MarkdownIt().parse(document.read_text())
    return {
        _slug(inline.content)
        for opening, inline in itertools.pairwise(tokens)
        if opening.type == "heading_open"
    }


def test_the_documents_named_are_in_the_repository() -> None:
    named = set()
    for document in DOCUMENTS:
        for name in re.findall(r"`((?:[\w.-]+/)*[\w-]+\.md)`", document.read_text()):
            named.add(name)
    assert named, "the documents name no documents"
    assert [n for n in sorted(named) if not (ROOT / n).exists()] == []


def test_links_between_documents_reach_their_sections() -> None:
    broken = []
    for document in DOCUMENTS:
        for path, anchor in LINK.findall(document.read_text()):
            target = (document.parent / path).resolve() if path else document
            if not target.exists():
                broken.append(f"{document.relative_to(ROOT)}: {path}")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{document.relative_to(ROOT)}: {path}#{anchor}")
    assert broken == []


def test_the_readme_leads_to_every_chapter_of_the_manual() -> None:
    readme = README.read_text()
    index = (ROOT / "docs" / "README.md").read_text()
    for chapter in DOCUMENTS[1:]:
        if chapter.name != "README.md":
            assert f"(docs/{chapter.name})" in readme, chapter.name
            assert f"({chapter.name})" in index, chapter.name


def test_compatibility_does_not_call_documented_features_unimplemented() -> None:
    compatibility = (ROOT / "docs" / "compatibility.md").read_text()
    assert "Not implemented yet" not in compatibility
    elsewhere = "".join(d.read_text() for d in DOCUMENTS if d.name != "compatibility.md")
    for feature in ("Policies", "topic permissions", "x-queue-mode: lazy"):
        assert feature in elsewhere, feature
        assert feature in compatibility, feature
