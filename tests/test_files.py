"""atomic_write: the target appears complete or not at all; no temp file survives."""

from __future__ import annotations

import os

import pytest

from placeto_jax.files import atomic_write


def test_writes_and_replaces(tmp_path):
    path = tmp_path / "out.bin"
    with atomic_write(path) as file:
        file.write(b"one")
    with atomic_write(path) as file:
        file.write(b"two")
    assert path.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_error_in_the_body_leaves_the_old_file(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(path) as file:
        file.write(b"partial")
        raise RuntimeError("boom")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_missing_directory_names_the_target(tmp_path):
    target = tmp_path / "no" / "out.bin"
    with pytest.raises(FileNotFoundError) as info, atomic_write(target):
        pass
    assert info.value.filename == str(target)
    assert os.listdir(tmp_path) == []


def test_write_json_creates_the_folder_and_leaves_no_file_for_a_bad_payload(tmp_path):
    import json

    from placeto_jax.files import write_json

    path = tmp_path / "new" / "out.json"
    write_json(path, {"a": [1, 2.5]})
    assert json.loads(path.read_text()) == {"a": [1, 2.5]}
    bad = tmp_path / "bad.json"
    with pytest.raises(TypeError):
        write_json(bad, {"a": object()})
    assert not bad.exists() and sorted(os.listdir(tmp_path)) == ["new"]
