"""The one atomic write (`parity.storage.files.replacing`): whole or not at all, from any number of threads,
and on disk before the new name is."""
from __future__ import annotations

import os
import threading

from parity.storage import files


def test_threads_writing_one_path_at_once_each_write_it_whole_and_leave_no_temporary_file(tmp_path):
    """Before, the temporary name was the process id's alone: a second thread found the first one's temporary
    file, removed it as a dead process's, and one of the two writes failed or was lost."""
    target = tmp_path / "part.bin"
    contents = [bytes([i]) * (256 << 10) for i in range(8)]
    failures: list[BaseException] = []
    start = threading.Barrier(len(contents))

    def write(data: bytes) -> None:
        start.wait()
        try:
            for _ in range(20):
                files.write_bytes(str(target), data)
        except BaseException as exc:  # noqa: BLE001 (any failure of a writer fails the test)
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(data,)) for data in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert target.read_bytes() in contents
    assert sorted(os.listdir(tmp_path)) == ["part.bin"]


def _recording_fsync(monkeypatch) -> list[str]:
    """The real `os.fsync`, recording the path of each descriptor it synced, in order, in the list returned."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_the_bytes_and_the_rename_are_synced_before_the_write_returns(tmp_path, monkeypatch):
    synced = _recording_fsync(monkeypatch)
    files.write_text(str(tmp_path / "report.json"), "{}")
    assert len(synced) == 2 and synced[0].endswith(".tmp") and synced[1] == str(tmp_path), synced
    assert (tmp_path / "report.json").read_text() == "{}"


def test_a_writer_that_raises_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old")
    try:
        with files.replacing(str(target)) as temporary:
            with open(temporary, "w") as handle:
                handle.write("half")
            raise RuntimeError("the writer failed")
    except RuntimeError:
        pass
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["manifest.json"]


def test_a_write_that_need_not_be_durable_is_whole_under_its_name_and_never_synced(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    target = tmp_path / "batch.pkl"
    with files.replacing(str(target), durable=False) as temporary, open(temporary, "wb") as handle:
        handle.write(b"batch")
    assert synced == []
    assert target.read_bytes() == b"batch" and sorted(os.listdir(tmp_path)) == ["batch.pkl"]


def test_a_folder_synced_at_once_has_each_of_its_files_and_then_its_entries_synced(tmp_path, monkeypatch):
    for name in ("a.parquet", "b.parquet"):
        with files.replacing(str(tmp_path / name), durable=False) as temporary, open(temporary, "wb") as handle:
            handle.write(name.encode())
    (tmp_path / "inner").mkdir()  # a folder in it: not a file to sync
    synced = _recording_fsync(monkeypatch)
    files.sync_folder(str(tmp_path))
    assert sorted(synced[:2]) == [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    assert synced[2:] == [str(tmp_path)]
    synced.clear()
    files.sync_folder(str(tmp_path / "missing"))  # nothing written there: nothing to sync, no error
    assert synced == []
