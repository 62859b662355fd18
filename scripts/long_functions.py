"""List functions longer than a limit (default 60 lines) under the given folders.

Usage: python scripts/long_functions.py [--max 60] [paths...]   (default path: src)
Prints ``lines path:line qualified.name`` longest first and the count; exits 0.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def long_functions(paths: list[Path], limit: int) -> list[tuple[int, str, int, str]]:
    """Return (lines, file, first line, qualified name) of every def longer than ``limit``."""
    found: list[tuple[int, str, int, str]] = []
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=60, help="longest allowed function, in lines")
    parser.add_argument("paths", nargs="*", default=["src"])
    args = parser.parse_args()
    rows = long_functions([Path(p) for p in args.paths], args.max)
    for size, path, line, name in rows:
        print(f"{size:4d} {path}:{line} {name}")
    print(f"{len(rows)} functions over {args.max} lines")


if __name__ == "__main__":
    main()
