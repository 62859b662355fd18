"""File I/O shared by every stage.

Two promises the whole pipeline relies on:
- bad input fails with a `DataError` naming the file, line and field (never a silent drop);
- artifacts appear only complete: written under a temporary name, then renamed.

Every input file is read through `numbered_lines` (line-based files: JSONL, TSV, qrels,
collections; `.gz`/`.bz2` too) or `read_json` (one JSON document), which read bytes and
decode them here, so invalid UTF-8, a NUL, a truncated gzip or a random binary file ends in
one located `DataError` (`FILE:LINE: invalid UTF-8 byte 0xNN at byte offset N`), never a
`UnicodeDecodeError` from the middle of a library.

Why this module is long: it is the one place both promises are kept, for every stage: the
readers of untrusted bytes and the atomic writer, with the error types they raise
(`DataError`, `DiskFull` for a full file system), which every other module of `utils` imports
from here; splitting them would leave two modules each importing the other's errors.
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import errno
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any


class DataError(ValueError):
    """Malformed input, located precisely: ``file:line: field: message``."""

    def __init__(self, path: str | os.PathLike, line: int | None, field: str | None, message: str):
        self.path, self.line, self.field, self.message = str(path), line, field, message
        where = self.path + (f":{line}" if line is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")


def open_bytes(path: str | os.PathLike) -> IO[bytes]:
    """`path` opened for reading bytes, decompressed when its name ends in `.gz` or `.bz2`."""
    name = str(path)
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".bz2"):
        return bz2.open(path, "rb")
    return open(path, "rb")


def _existing_file(path: Path) -> None:
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    if path.is_dir():
        raise DataError(path, None, None, "a directory, expected a file")


def numbered_lines(
    path: str | os.PathLike, on_error: Callable[[DataError], None] | None = None
) -> Iterator[tuple[int, str]]:
    """Yield `(line number, text)` for each line of a text file (`.gz`/`.bz2` decompressed),
    the one reader of untrusted bytes every line-based input goes through.

    The file is read as bytes and decoded a line at a time, so a bad line never stops the
    lines before it: invalid UTF-8 or a NUL byte is a `DataError` starting
    `FILE:LINE: invalid UTF-8 byte 0xNN at byte offset N` (or `NUL byte at ...`), raised or
    handed to `on_error` and the line skipped. A truncated or corrupt compressed stream is
    always raised (what follows it cannot be read), naming the line it stopped at.
    """
    path = Path(path)
    _existing_file(path)
    with open_bytes(path) as f:
        offset, lineno = 0, 0
        while True:
            try:
                raw = f.readline()
            except (OSError, EOFError, zlib.error) as e:
                why = f"truncated or corrupt compressed data ({e}); the lines before it were read"
                raise DataError(path, lineno + 1, None, why) from None
            if not raw:
                return
            lineno += 1
            start, offset = offset, offset + len(raw)
            try:
                text = decode_line(raw, path, lineno, start)
            except DataError as e:
                if on_error is None:
                    raise
                on_error(e)
                continue
            yield lineno, text


def numbered_jsonl(
    path: str | os.PathLike,
    on_error: Callable[[DataError], None] | None = None,
    required: Sequence[str] = (),
    nonempty: Sequence[str] = (),
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line number, object)` for each JSON object of a JSONL file (`.gz`/`.bz2`
    decompressed; bytes decoded by `numbered_lines`), checking fields.

    Blank lines are allowed. A malformed line or field becomes a located `DataError`, which is
    raised, or handed to `on_error` (e.g. a counter for `on_error: skip` configs) and the line
    skipped: the caller decides, nothing is dropped silently.
    """
    for lineno, line in numbered_lines(path, on_error):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise DataError(
                    path, lineno, None, f"expected a JSON object, got {type(row).__name__}"
                )
            check_fields(row, path, lineno, required, nonempty)
        except (json.JSONDecodeError, DataError) as e:
            error = (
                e
                if isinstance(e, DataError)
                else DataError(path, lineno, None, f"invalid JSON ({e.msg} at column {e.colno})")
            )
            if on_error is None:
                raise error from None
            on_error(error)
            continue
        yield lineno, row


def decode_line(raw: bytes, path: str | os.PathLike, line: int | None, start: int = 0) -> str:
    """UTF-8 text of one line (or document) of bytes; a `DataError` with the line and the file
    byte offset of the first invalid byte or NUL otherwise (`start`: the bytes' offset in the
    file; for a whole document, `line` None is found by counting newlines)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad, at = raw[e.start : e.start + 1].hex(), e.start
        why = f"invalid UTF-8 byte 0x{bad} at byte offset {start + at}"
    else:
        at = raw.find(b"\x00")
        if at < 0:
            return text
        why = f"NUL byte at byte offset {start + at} (a binary file?)"
    line = line if line is not None else raw.count(b"\n", 0, at) + 1
    raise DataError(path, line, None, why)


def csv_rows(
    path: str | os.PathLike, required: Sequence[str] = ()
) -> Iterator[tuple[int, dict[str, str]]]:
    """`(line number, row)` of a CSV file with a header line; a missing file or `required`
    column is a located `DataError` (line 1 for a column)."""
    reader = csv.DictReader(text for _, text in numbered_lines(path))
    for name in required:
        if name not in (reader.fieldnames or []):
            raise DataError(path, 1, name, "missing column")
    yield from enumerate(reader, start=2)


def read_jsonl(
    path: str | os.PathLike,
    required: Sequence[str] = (),
    nonempty: Sequence[str] = (),
) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file; the first bad line raises a located `DataError`.

    `required` fields must be present; `nonempty` fields must also be non-empty.
    """
    for _, row in numbered_jsonl(path, required=required, nonempty=nonempty):
        yield row


def check_fields(
    row: dict[str, Any],
    path: str | os.PathLike,
    line: int | None,
    required: Sequence[str] = (),
    nonempty: Sequence[str] = (),
) -> None:
    """Raise a located `DataError` if a required field is missing or a non-empty one is empty."""
    for name in required:
        if name not in row:
            raise DataError(path, line, name, "missing")
    for name in nonempty:
        value = row.get(name)
        if value is None:
            raise DataError(path, line, name, "missing")
        if (isinstance(value, str) and not value.strip()) or (
            isinstance(value, (list, tuple, dict)) and len(value) == 0
        ):
            raise DataError(path, line, name, "empty")


def tmp_tag() -> str:
    """`<host>-<pid>` in `atomic_open`'s temp names, so `utils.integrity.remove_orphans` can tell
    a dead run's temp file from a live writer's (the jobs of a sweep share the cache)."""
    host = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}"


def umask() -> int:
    """The process umask (read without changing it where /proc allows, else set and restored)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")  # numpy's write to a full disk


class DiskFull(DataError):
    """A write ran out of space: `path`, the bytes the run needs (`needed`: the planner's
    estimate, when known) and the bytes free on that file system."""

    def __init__(self, path: str | os.PathLike, free: int, needed: int | None = None) -> None:
        self.free, self.needed = int(free), needed
        need = f"needs {_size(needed)} (the planner's estimate)" if needed else "needs more"
        super().__init__(
            path, None, None,
            f"no space left on device: the run {need}, {_size(free)} free there; free some "
            "space or point paths.cache_dir at a larger disk, then rerun (complete artifacts "
            "are reused, no partial one is kept)",
        )  # fmt: skip


def _size(n: int) -> str:
    return f"{n:,} bytes ({n / 1e6:.1f} MB)"


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` is a full file system: ENOSPC or EDQUOT, or numpy's short write
    (`OSError: 82944 requested and 65504 written`, no errno)."""
    if isinstance(error, DiskFull):
        return True
    if not isinstance(error, OSError):
        return False
    return error.errno in (errno.ENOSPC, errno.EDQUOT) or bool(_SHORT_WRITE.search(str(error)))


def free_space(path: str | os.PathLike) -> int:
    """Bytes free to this user on the file system of `path` (its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return int(shutil.disk_usage(p).free)


@contextlib.contextmanager
def disk_full_reported(
    where: str | os.PathLike, needed: Callable[[], int | None]
) -> Iterator[None]:
    """A full disk anywhere in the block ends in one `DiskFull`: the file being written (else
    `where`), `needed()` bytes (an estimate; None when it cannot be made) and the space free."""
    try:
        yield
    except BaseException as e:
        if not is_disk_full(e):
            raise
        path = e.path if isinstance(e, DiskFull) else (getattr(e, "filename", None) or where)
        try:
            need = needed()
        except Exception:  # noqa: BLE001 - an estimate must not hide the disk-full error
            need = None
        raise DiskFull(path, free_space(path), need) from e


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[IO]:
    """Open a temporary file beside `path`; rename it over `path` only if the block succeeds.

    The file gets the mode a plain `open` would give it (0644 under umask 022; the temporary
    file's private 0600 is not kept), and a `path` ending in `.gz` is written gzip-compressed
    (no name or time in the header, so equal content gives equal bytes). A full disk removes
    the temporary file and raises `DiskFull` naming `path` and the space left.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{tmp_tag()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~umask())
        kwargs = {} if "b" in mode else {"encoding": encoding}
        if path.name.endswith(".gz"):
            with open(tmp, "wb") as raw:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                    f = gz if "b" in mode else io.TextIOWrapper(gz, **kwargs)
                    yield f
                    f.flush()
                    if f is not gz:
                        f.detach()
                raw.flush()
                os.fsync(raw.fileno())
        else:
            with open(tmp, mode, **kwargs) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(e) and not isinstance(e, DiskFull):
            raise DiskFull(path, free_space(path.parent)) from e
        raise


def mkdtemp(parent: str | os.PathLike, prefix: str) -> Path:
    """A temporary directory in `parent` (to be renamed into place) with the mode a plain
    `mkdir` gives (0755 under umask 022), not `tempfile.mkdtemp`'s private 0700."""
    # named like `atomic_open`'s temp files (`<prefix><host>-<pid>.<random>.tmp`), so
    # `utils.integrity.remove_orphans` can tell a dead run's directory from a live writer's
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{tmp_tag()}.", suffix=".tmp", dir=parent))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> IO[str]:
    """Open a text file for reading, gzip-decompressed when its name ends in `.gz`."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding=encoding)
    return open(path, encoding=encoding)


def jsonl_line(row: dict[str, Any]) -> str:
    """One JSONL line as every file of the project writes it (UTF-8, non-ASCII kept)."""
    return json.dumps(row, ensure_ascii=False) + "\n"


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows atomically as JSONL (`jsonl_line`); return the number written."""
    n = 0
    with atomic_open(path) as f:
        for row in rows:
            f.write(jsonl_line(row))
            n += 1
    return n


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """Write one JSON document atomically (gzip-compressed when `path` ends in `.gz`)."""
    with atomic_open(path) as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read one JSON document (`.gz` decompressed), with a located error if it is malformed:
    invalid UTF-8 or a NUL as `decode_line` reports it, a truncated gzip, invalid JSON."""
    path = Path(path)
    _existing_file(path)
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(path, None, None, f"truncated or corrupt gzip data ({e})") from None
    text = decode_line(data, path, None)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, None, f"invalid JSON ({e.msg} at column {e.colno})") from e


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_manifest(path: str | os.PathLike, **info: Any) -> None:
    """Write the manifest that sits beside an artifact (counts, hashes, config)."""
    write_json(path, info)
