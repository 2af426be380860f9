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


def test_a_symlink_is_followed_and_its_target_replaced(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with atomic_write(link) as file:
        file.write(b"new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with atomic_write(fifo) as file:
        file.write(b"through")
    reader.join(timeout=10)
    assert got == [b"through"] and fifo.is_fifo()


def _char_device(path, minor: int):
    """A character device node at `path` with the memory devices' major 1 and `minor` (3:
    /dev/null, 7: /dev/full); the test is skipped where that needs a root it does not have."""
    import os
    import stat

    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def test_a_character_device_is_written_through_not_replaced(tmp_path):
    null = _char_device(tmp_path / "null", 3)
    with atomic_write(null) as file:
        file.write(b"gone")
    assert null.is_char_device()
    assert list(tmp_path.iterdir()) == [null]  # no temp file, no regular file in its place


def test_dash_is_standard_output_and_a_directory_is_refused(tmp_path, capfd):
    with atomic_write("-") as file:
        file.write(b"to stdout\n")
    assert capfd.readouterr().out == "to stdout\n"
    with pytest.raises(IsADirectoryError, match=str(tmp_path)), atomic_write(tmp_path):
        pass


def test_a_full_device_is_one_error_naming_the_path(tmp_path):
    full = _char_device(tmp_path / "full", 7)
    expected = pytest.raises(OSError, match=f"No space left on device: '{full}'")
    with expected, atomic_write(full) as file:
        file.write(b"x" * 10)
        file.flush()
    assert full.is_char_device()
