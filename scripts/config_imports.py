"""Fail when a module below `pipelines/` imports the config libraries, or names the config
types, without saying why.

The layers below `densex.pipelines` take typed specs or plain values, never the config tree
(docs/architecture.md, "Typed at the edge"): only the entry pipelines read the composed Hydra
config. A module below them may still import `omegaconf` or `hydra` where it must (the one
conversion module, a Hydra callback, Hydra's runtime state), and then says why on the import
line or the line above it, in a marker comment:

    from omegaconf import OmegaConf  # config-import: resolves a group node into plain values

A module below them that names `DictConfig` or `Mapping[str, Any]` (a config node, or the
untyped mapping configuration used to travel as) says why once, on a line with
`# config-types: <why>` (`utils/config.py`, the conversion; `utils/records.py`, the type of
a data row).

Usage: python scripts/config_imports.py [--check] [src/densex]
Prints `path:line: ...` for each import or module without a reason, then those with one;
with `--check` exits 1 when any has none (`make lint`).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

MARKER = "# config-import:"
TYPES_MARKER = "# config-types:"
CONFIG_TYPES = ("DictConfig", "Mapping[str, Any]")
LIBRARIES = ("omegaconf", "hydra")
EDGE = "pipelines"  # the package that converts the config (and everything above it)
ABOVE_EDGE = ("integrations",)  # layers above `pipelines/` may read the config too


def _imported(node: ast.AST) -> list[str]:
    """The config libraries an import statement imports (top-level package names)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module]
    else:
        return []
    return sorted({n.split(".")[0] for n in names} & set(LIBRARIES))


def _reason(lines: list[str], lineno: int, end_lineno: int) -> str | None:
    """The marker's reason on the statement's lines or the line above, None when absent or
    empty."""
    for text in lines[max(lineno - 2, 0) : end_lineno]:
        if MARKER in text:
            reason = text.split(MARKER, 1)[1].strip()
            return reason or None
    return None


def config_imports(root: Path) -> list[tuple[str, int, str, str | None]]:
    """(path, line, library, reason or None) of every config-library import in the modules
    of `root` (the `densex` package) below `pipelines/`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        top = path.relative_to(root).parts[0]
        if top in (EDGE, *ABOVE_EDGE):
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, filename=str(path))):
            for lib in _imported(node):
                end = getattr(node, "end_lineno", node.lineno) or node.lineno
                found.append((str(path), node.lineno, lib, _reason(lines, node.lineno, end)))
    return sorted(found)


def config_type_modules(root: Path) -> list[tuple[str, str | None]]:
    """(path, reason or None) of each module below `pipelines/` that names a config type."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in (EDGE, *ABOVE_EDGE):
            continue
        text = path.read_text(encoding="utf-8")
        if not any(t in text for t in CONFIG_TYPES):
            continue
        marked = [
            ln.split(TYPES_MARKER, 1)[1].strip() for ln in text.splitlines() if TYPES_MARKER in ln
        ]
        found.append((str(path), next((r for r in marked if r), None)))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="src/densex", type=Path)
    ap.add_argument("--check", action="store_true", help="exit 1 on an import without a reason")
    args = ap.parse_args(argv)
    found = config_imports(args.root)
    missing = [f for f in found if f[3] is None]
    for path, line, lib, _ in missing:
        print(f"{path}:{line}: imports {lib} below pipelines/ without a reason "
              f"(take a typed spec or plain values, or add `{MARKER} <why>`)")  # fmt: skip
    typed = config_type_modules(args.root)
    untyped = [path for path, reason in typed if reason is None]
    for path in untyped:
        print(f"{path}: names {' or '.join(CONFIG_TYPES)} below pipelines/ without a reason "
              f"(take a typed spec, plain values or `utils.records.Record`, or add "
              f"`{TYPES_MARKER} <why>`)")  # fmt: skip
    for path, line, lib, reason in found:
        if reason is not None:
            print(f"ok {path}:{line}: {lib} ({reason})")
    for path, reason in typed:
        if reason is not None:
            print(f"ok {path}: config types ({reason})")
    return 1 if args.check and (missing or untyped) else 0


if __name__ == "__main__":
    sys.exit(main())
