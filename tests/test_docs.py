"""The README stays a front page and the documentation site stays whole (fast; no build).

The README is at most 250 lines; every page under docs/ is in mkdocs.yml's navigation and
every page the navigation names exists; every link from the README into docs/ names a page
that exists; no page tells the reader to run `huggingface-cli` (huggingface_hub 2.x ships
`hf`) or cites internal issue numbers and session narrative ("this round"). The strict site
build itself (`make docs`) runs in CI.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README_MAX_LINES = 250


def nav_pages(nav: list) -> list[str]:
    """The page paths of an mkdocs `nav` (nested sections flattened)."""
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def mkdocs_config() -> dict:
    # mkdocs.yml is plain YAML (no !!python tags): safe_load reads it
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/"
    )
    text = "\n".join(lines)
    for must in ("make demo", "make test", "## After `make demo`", "logs/demo/multiruns/"):
        assert must in text, f"README.md lost {must!r}"


def test_every_docs_page_is_in_the_nav_and_every_nav_page_exists() -> None:
    cfg = mkdocs_config()
    assert cfg.get("strict") is True and cfg.get("docs_dir", "docs") == "docs"
    nav = nav_pages(cfg["nav"])
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == on_disk, (
        f"not in mkdocs.yml's nav: {sorted(set(on_disk) - set(nav))}; "
        f"in the nav but missing: {sorted(set(nav) - set(on_disk))}"
    )
    assert len(nav) == len(set(nav)), "a page appears twice in the nav"


def test_readme_links_into_docs_resolve() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links to no docs page"
    missing = sorted({t for t in targets if not (REPO / t).exists()})
    assert not missing, f"README.md links to missing pages: {missing}"
    linked = {t for t in targets if t.endswith(".md")}
    pages = {f"docs/{p}" for p in nav_pages(mkdocs_config()["nav"])}
    assert pages - {"docs/index.md"} <= linked, f"the README's map misses {sorted(pages - linked)}"


# session narrative and internal references a reader who was never here cannot follow
NARRATIVE = re.compile(r"\bissues? #?\d+|\bthis (?:round|session)\b", re.IGNORECASE)


@pytest.mark.parametrize("path", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_pages_speak_to_a_new_reader(path: str) -> None:
    file = REPO / path if path == "README.md" else DOCS / path
    lines = file.read_text(encoding="utf-8").splitlines()
    cli = [i for i, line in enumerate(lines, 1) if "huggingface-cli" in line]
    assert not cli, (
        f"{path}:{cli}: huggingface_hub 2.x ships `hf`, not `huggingface-cli`: use `hf download`"
    )
    narrative = [
        (i, m.group(0)) for i, line in enumerate(lines, 1) for m in NARRATIVE.finditer(line)
    ]
    assert not narrative, f"{path}: internal references or session narrative {narrative}"
