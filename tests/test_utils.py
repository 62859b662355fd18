"""Shared helpers: located errors, atomic artifacts, cache keys, model and precision resolution."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from densex.utils.cache import artifact_dir, content_key, hash_file
from densex.utils.io import DataError, atomic_open, numbered_jsonl, read_jsonl, write_jsonl
from densex.utils.models import resolve_model, resolve_precision


def test_read_jsonl_names_file_line_and_field(tmp_path):
    path = tmp_path / "units.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n\n{"id": "b", "text": ""}\n')
    with pytest.raises(DataError) as e:
        list(read_jsonl(path, nonempty=("text",)))
    assert (e.value.path, e.value.line, e.value.field) == (str(path), 3, "text")
    assert str(e.value) == f"{path}:3: field 'text': empty"

    path.write_text('{"id": "a"}\n{"id": \n[1, 2]\n{"x": 1}\n')
    with pytest.raises(DataError, match=r":2: invalid JSON"):
        list(read_jsonl(path))
    with pytest.raises(DataError, match=r":4: field 'id': missing"):
        list(
            numbered_jsonl(
                path, on_error=lambda e: None if e.line in (2, 3) else _raise(e), required=("id",)
            )
        )


def _raise(error: Exception) -> None:
    raise error


def test_numbered_jsonl_hands_every_bad_line_to_on_error(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": 1}\nnot json\n[1]\n{"id": 2}\n{}\n')
    errors: list[DataError] = []
    rows = list(numbered_jsonl(path, on_error=errors.append, required=("id",)))
    assert [lineno for lineno, _ in rows] == [1, 4]
    assert [(e.line, e.field) for e in errors] == [(2, None), (3, None), (5, "id")]


def test_atomic_open_leaves_the_old_artifact_on_failure(tmp_path):
    path = tmp_path / "out" / "results.jsonl"
    write_jsonl(path, [{"a": "é"}])
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write("partial")
        raise RuntimeError("crash mid-write")
    assert json.loads(path.read_text()) == {"a": "é"}  # non-ASCII kept, old content intact
    assert [p.name for p in path.parent.iterdir()] == ["results.jsonl"]  # no temp file left


def test_cache_keys_follow_content(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text("x\n")
    h1 = hash_file(a)
    a.write_text("y\n")
    assert hash_file(a) != h1
    assert content_key(x=1, y=[1, 2]) == content_key(y=[1, 2], x=1)
    assert content_key(x=1) != content_key(x=2)
    assert (
        artifact_dir(tmp_path, "embeddings", "a/b", key="k")
        == tmp_path / "embeddings" / "a_b" / "k"
    )


def test_resolve_model_paths_and_aliases(tmp_path, minilm_path):
    assert resolve_model("packaged:minilm") == minilm_path
    assert resolve_model(str(tmp_path)) == str(tmp_path.resolve())
    assert resolve_model("facebook/contriever") == "facebook/contriever"  # a hub id
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model("./no/such/model")


def test_resolve_precision_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU fallback")
    assert resolve_precision("auto") == "32-true"
    assert resolve_precision("bf16-mixed") == "bf16-mixed"
    assert resolve_precision(16) == 16


HEAP_PROBE = """
import ctypes, sys
from densex.utils.malloc import set_heap_thresholds
if sys.argv[1] == "set":
    assert set_heap_thresholds(1 << 20, 1 << 20)
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(8 << 20))  # glibc's dynamic threshold rises to 8 MiB after this free
p = libc.malloc(2 << 20)
lo, hi = (int(x, 16) for x in next(
    ln for ln in open("/proc/self/maps") if "[heap]" in ln).split()[0].split("-"))
print("heap" if lo <= p < hi else "mapped")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_heap_thresholds_send_large_blocks_to_their_own_mapping():
    """After a large free, glibc serves 2 MiB from the heap (where freed space stays resident);
    with `set_heap_thresholds(1 MiB)` it maps them, so freeing returns them to the OS."""
    run = [sys.executable, "-c", HEAP_PROBE]
    out = {
        m: subprocess.run([*run, m], capture_output=True, text=True, check=True).stdout
        for m in ("default", "set")
    }
    assert out == {"default": "heap\n", "set": "mapped\n"}
