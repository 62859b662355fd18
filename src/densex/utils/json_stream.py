"""One JSON array or object written item by item, atomically: `JsonStream`.

The bytes equal `utils.io.write_json(path, obj, indent=None)`'s, without holding `obj` in
memory (evaluation's per-question retrieval files); `.gz` paths are gzip-compressed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from densex.utils.io import atomic_open

__all__ = ["JsonStream"]


class JsonStream:
    """One JSON array (`"["`) or object (`"{"`) written item by item, atomically (gzip for
    `.gz`): the same bytes `write_json(path, obj, indent=None)` gives, without holding `obj`.

        with JsonStream(path, "[") as out:
            for row in rows:
                out.item(row)           # objects: out.item(value, key=...)
    """

    def __init__(self, path: str | os.PathLike, opener: str = "[") -> None:
        if opener not in ("[", "{"):
            raise ValueError(f"opener must be '[' or '{{', got {opener!r}")
        self.path, self.opener, self.count = Path(path), opener, 0
        self._ctx = atomic_open(self.path)

    def __enter__(self) -> JsonStream:
        self._f = self._ctx.__enter__()
        self._f.write(self.opener)
        return self

    def item(self, value: Any, key: str | None = None) -> None:
        """Append one element (`key` required for an object, refused for an array)."""
        if (key is None) != (self.opener == "["):
            raise ValueError("an object's items need a key; an array's take none")
        sep = ", " if self.count else ""
        head = "" if key is None else json.dumps(key, ensure_ascii=False) + ": "
        self._f.write(sep + head + json.dumps(value, ensure_ascii=False))
        self.count += 1

    def __exit__(self, *exc: Any) -> bool | None:
        if exc[0] is None:
            self._f.write("]\n" if self.opener == "[" else "}\n")
        return self._ctx.__exit__(*exc)
