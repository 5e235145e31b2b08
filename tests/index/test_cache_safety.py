"""The plan cache against what an adversary leaves in its folder or does to its sources: bytes changed in
place (same size), a FIFO where an entry should be, a source rewritten with its size and mtime kept, and a
cache folder the index command cannot write. Never a wrong plan, never a hang."""
import json
import os

import numpy as np
import pytest

from speechiter.index import store
from speechiter.index.__main__ import main as index_main

from tests.index.test_plan_cache import OLD, build, cache, entries, plans, write_corpus  # noqa: F401


def _data_start(data: bytes) -> int:
    size = int.from_bytes(data[8:16], "little")
    return -(-(16 + size) // 64) * 64


@pytest.mark.parametrize("kind", ["idx2", "num", "sort", "view"])
def test_bytes_changed_in_place_are_never_a_wrong_plan(tmp_path, cache, kind):  # noqa: F811
    root = write_corpus(tmp_path / "corpus", seed=1)
    expected = plans(build(root))
    damaged = entries(cache, kind)
    assert damaged
    for name in damaged:
        path = cache / name
        data = bytearray(path.read_bytes())
        start = _data_start(data)
        header = json.loads(data[16:16 + int.from_bytes(data[8:16], "little")])
        for dtype, shape, offset in header["arrays"].values():  # reverse each array's bytes: same size, same
            a, b = start + offset, start + offset + int(np.prod(shape)) * np.dtype(dtype).itemsize  # kinds of bytes
            data[a:b] = data[a:b][::-1] if b - a > 8 else data[a:b]
        path.write_bytes(bytes(data))
        assert len(data) == os.path.getsize(path)
        assert store.open_entry(str(path), header["key"]) is None
    assert plans(build(root)) == expected
    for name in damaged:  # written again
        data = (cache / name).read_bytes()
        assert store.open_entry(str(cache / name), json.loads(data[16:16 + int.from_bytes(data[8:16], "little")])
                                ["key"]) is not None


@pytest.mark.timeout(60)
def test_a_fifo_in_place_of_an_entry_is_not_waited_on(tmp_path, cache):  # noqa: F811
    root = write_corpus(tmp_path / "corpus")
    expected = plans(build(root))
    names = entries(cache)
    for name in names:
        (cache / name).unlink()
        os.mkfifo(cache / name)
    assert plans(build(root)) == expected
    assert all((cache / name).is_file() for name in names)  # replaced by entries


def test_a_source_rewritten_with_its_size_and_mtime_kept_is_parsed_again(tmp_path, cache):  # noqa: F811
    root = write_corpus(tmp_path / "corpus")
    before = plans(build(root))
    path = root / "idx2wav_len"
    lines = path.read_text().split("\n")
    lines[0], lines[1] = f"{lines[0].split()[0]} {lines[1].split()[1]}", f"{lines[1].split()[0]} {lines[0].split()[1]}"
    text = "\n".join(lines)
    assert len(text) == path.stat().st_size
    path.write_text(text)
    os.utime(path, (OLD, OLD))  # the mtime it had
    after = plans(build(root))
    os.environ["SPEECHITER_INDEX"] = "0"
    try:
        assert after == plans(build(root)) != before
    finally:
        del os.environ["SPEECHITER_INDEX"]


def test_the_index_command_fails_when_it_cannot_write(tmp_path, make_recipe, capsys):
    root = write_corpus(tmp_path / "corpus")
    recipe = make_recipe(root, batch_len=60000)
    blocker = tmp_path / "file"
    blocker.write_text("a file: no folder can be made under it, even by root")
    for _ in range(2):  # the second run of the same process fails too
        assert index_main([str(recipe), "--cache_dir", str(blocker / "cache")]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == (f"python -m speechiter.index: error: cannot write the plan cache in {blocker / 'cache'}"
                                f" (Not a directory); give --cache_dir a folder this user can create and write\n")
