"""List functions over ``--max`` lines (60) and modules over ``--module-max`` lines (300).

A module may be longer when its docstring says why, in a paragraph starting with
``Why this module is long:``; such modules are listed apart and do not count.

Usage: python scripts/long_functions.py [--max 60] [--module-max 300] [--check] [paths...]
Prints ``lines path:line qualified.name`` longest first, then the modules; with ``--check``
exits 1 when a function or an unexplained module is over its limit (``make lint``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REASON = "Why this module is long:"


def _python_files(paths: list[Path]) -> list[Path]:
    return [f for root in paths for f in ([root] if root.is_file() else sorted(root.rglob("*.py")))]


def long_functions(paths: list[Path], limit: int) -> list[tuple[int, str, int, str]]:
    """Return (lines, file, first line, qualified name) of every def longer than ``limit``."""
    found: list[tuple[int, str, int, str]] = []
    for path in _python_files(paths):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

        def walk(node: ast.AST, prefix: str, path: Path = path) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{child.name}"
                    start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    size = child.end_lineno - start + 1
                    if size > limit:
                        found.append((size, str(path), child.lineno, name))
                    walk(child, name + ".")
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}{child.name}.")

        walk(tree, "")
    return sorted(found, reverse=True)


def long_modules(paths: list[Path], limit: int) -> list[tuple[int, str, bool]]:
    """Return (lines, file, reason stated) of every module longer than ``limit``."""
    found = []
    for path in _python_files(paths):
        text = path.read_text(encoding="utf-8")
        size = len(text.splitlines())
        if size > limit:
            doc = ast.get_docstring(ast.parse(text)) or ""
            found.append((size, str(path), REASON in doc))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=60, help="longest allowed function, in lines")
    parser.add_argument("--module-max", type=int, default=300, help="longest module, in lines")
    parser.add_argument("--check", action="store_true", help="exit 1 when something is over")
    parser.add_argument("paths", nargs="*", default=["src"])
    args = parser.parse_args()
    paths = [Path(p) for p in args.paths]
    rows = long_functions(paths, args.max)
    for size, path, line, name in rows:
        print(f"{size:4d} {path}:{line} {name}")
    print(f"{len(rows)} functions over {args.max} lines")
    modules = long_modules(paths, args.module_max)
    for size, path, reason in modules:
        print(f"{size:4d} {path}{'  (reason stated)' if reason else ''}")
    bare = sum(not reason for _, _, reason in modules)
    print(f"{len(modules)} modules over {args.module_max} lines, {bare} without a reason stated")
    if args.check and (rows or bare):
        sys.exit(1)


if __name__ == "__main__":
    main()
