"""The storage context (parity/storage/context.py): a frozen, picklable value that every reader and writer is given,
never a process-wide setting. Local paths here; the S3 side (two contexts with other endpoints in one process,
Beam's S3IO and FileSystems left alone after a check into S3) is tests/cluster/test_s3_clients.py."""
from __future__ import annotations

import dataclasses
import os
import pickle
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from parity.storage import s3_clients, urls
from parity.storage.context import Storage


def test_a_storage_context_is_frozen_picklable_and_equal_by_its_options():
    storage = Storage.of(["--s3_endpoint_url=http://127.0.0.1:9", "--s3_read_timeout=3"])

    assert storage == Storage(("--s3_endpoint_url=http://127.0.0.1:9", "--s3_read_timeout=3"))
    assert pickle.loads(pickle.dumps(storage)) == storage
    assert hash(storage) == hash(Storage.of(list(storage.options)))
    assert Storage.of(None) == Storage() and Storage().options == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        storage.options = ()  # type: ignore[misc]


def test_a_context_reads_writes_lists_and_removes_local_files(tmp_path):
    storage = Storage()
    base = str(tmp_path / "set")
    storage.makedirs(os.path.join(base, "a", "deeper"))  # local folders first, as on a store they need none
    storage.write_text(os.path.join(base, "a", "one.json"), "1\n")
    storage.write_bytes(os.path.join(base, "a", "two.bin"), b"\x00\x01")
    with storage.open_write(os.path.join(base, "a", "deeper", "three.txt")) as target:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write("3")
    storage.write_text(os.path.join(base, "a", ".hidden"), "h")

    assert storage.read_text(os.path.join(base, "a", "one.json")) == "1\n"
    assert storage.read_bytes(os.path.join(base, "a", "two.bin")) == b"\x00\x01"
    assert storage.isfile(os.path.join(base, "a", "one.json")) and storage.isdir(os.path.join(base, "a"))
    assert storage.exists(base) and not storage.exists(os.path.join(base, "none"))
    assert storage.list_names(os.path.join(base, "a")) == [".hidden", "deeper", "one.json", "two.bin"]
    assert storage.list_folder(os.path.join(base, "a")) == [os.path.join(base, "a", n) for n in ("one.json", "two.bin")]
    assert storage.match(os.path.join(base, "**", "*.txt")) == [os.path.join(base, "a", "deeper", "three.txt")]
    assert len(storage.list_tree(base)) == 4
    assert storage.readable(os.path.join(base, "a", "one.json")) == os.path.join(base, "a", "one.json")
    assert storage.local_copy(base) == base  # a local path is its own local copy
    storage.delete([os.path.join(base, "a", "one.json"), os.path.join(base, "a", "gone.json")])
    assert not storage.exists(os.path.join(base, "a", "one.json"))
    storage.remove(base)
    assert not os.path.exists(base)


def test_no_module_keeps_a_current_run_setting_and_the_path_helpers_take_no_options():
    for name in ("configure", "options", "_options", "_built", "open_read", "write_bytes"):
        assert not hasattr(urls, name), name
    for name in ("use_options", "_run_options", "storage_options", "_made", "_ours", "_reuse_clients"):
        assert not hasattr(s3_clients, name), name
    assert urls.child("s3://b/run", "sides", "x") == "s3://b/run/sides/x"
    assert urls.glob_prefix("s3://b/runs/*/x.parquet") == "s3://b/runs/"
    assert urls.glob_regex("s3://b/**/*.json").fullmatch("s3://b/a/c/d.json")
    assert not urls.glob_regex("s3://b/*.json").fullmatch("s3://b/a/d.json")


@pytest.mark.parametrize("pattern", ["**/*.jsonl", "*", "**", "*/*.jsonl", "cap/**/*.jsonl", ".cache/*",
                                     "cap/.*", "**/.*", "c?p/*.jsonl", "[c.]*/*", "cap/**"])
def test_a_url_glob_matches_the_files_the_local_glob_matches(tmp_path, pattern):
    import glob

    names = ["a.jsonl", ".a.jsonl", "cap/b.jsonl", "cap/.b.jsonl", "cap/sub/c.jsonl", "cap/.tmp/d.jsonl",
             ".cache/e.jsonl", ".cache/sub/f.jsonl", "cap/sub/.hid/g.jsonl"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}\n")
    local = sorted(os.path.relpath(p, tmp_path) for p in glob.glob(str(tmp_path / pattern), recursive=True)
                   if os.path.isfile(p))
    regex = urls.glob_regex(f"s3://b/{pattern}")

    assert sorted(name for name in names if regex.fullmatch(f"s3://b/{name}")) == local


def test_a_tap_takes_the_object_store_options_of_its_pipeline_and_no_others():
    from parity.taps import _store_options

    options = PipelineOptions(["--runner=DirectRunner", "--s3_endpoint_url=http://127.0.0.1:9", "--s3_disable_ssl",
                               "--s3_read_timeout=9", "--job_name=users"])

    assert _store_options(options) == ("--s3_disable_ssl", "--s3_endpoint_url=http://127.0.0.1:9",
                                       "--s3_read_timeout=9")
    assert _store_options(None) == ()


def _parity_state() -> list[str]:
    """parity's module attributes that hold a storage context with options or a PipelineOptions."""
    return sorted(f"{name}.{attr}" for name, module in list(sys.modules.items())
                  if name.startswith("parity") and module is not None
                  for attr, value in vars(module).items()
                  if (isinstance(value, Storage) and value.options) or isinstance(value, PipelineOptions))


def test_two_taps_in_one_pipeline_carry_their_own_storage_and_leave_beams_s3io_and_parity_modules_alone(tmp_path):
    """One tap takes its pipeline's store options, the other its own `storage_options`: each DoFn carries its own
    context, and neither changes what the other (or anything else in the process) uses."""
    import apache_beam as beam
    from apache_beam.io.aws import s3io
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from parity.beam import TapStage, finalize
    from parity.sets.fingerprint_set import read_set

    init = s3io.S3IO.__init__
    options = PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:9", "--s3_read_timeout=4"])
    set_dir, other_dir = str(tmp_path / "taps"), str(tmp_path / "other")
    fns = []

    class TapFns(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):  # type: ignore[no-untyped-def]
            if isinstance(node.transform, beam.ParDo) and type(node.transform.fn).__module__ == "parity.taps":
                fns.append(node.transform.fn)

    with beam.Pipeline(runner=FnApiRunner(), options=options) as pipeline:
        rows = pipeline | beam.Create([{"id": i} for i in range(7)])
        _ = rows | "Tap" >> TapStage("input", set_dir, key_fields=["id"])
        _ = rows | "OtherTap" >> TapStage("input", other_dir, key_fields=["id"],
                                          storage_options=["--s3_endpoint_url=http://127.0.0.1:8"])
        pipeline.visit(TapFns())
    finalize(set_dir, key=["id"])
    finalize(other_dir, key=["id"], storage_options=["--s3_endpoint_url=http://127.0.0.1:8"])

    assert [fn._storage for fn in fns] == [Storage(("--s3_endpoint_url=http://127.0.0.1:9", "--s3_read_timeout=4")),
                                           Storage(("--s3_endpoint_url=http://127.0.0.1:8",))]
    assert read_set(set_dir).num_rows == 7 and read_set(other_dir).num_rows == 7
    assert s3io.S3IO.__init__ is init
    assert _parity_state() == []
