import os

import pytest

from parity.capture import detect_format, list_capture_files, read_file
from parity.errors import InputError


def test_a_glob_relative_to_the_base_dir_lists_matching_files_sorted(tmp_path):
    (tmp_path / "capture").mkdir()
    for name in ("b.jsonl", "a.jsonl", "c.csv", "a10.jsonl"):
        (tmp_path / "capture" / name).write_text("")
    files = list_capture_files("capture/*.jsonl", str(tmp_path))
    assert [os.path.basename(f) for f in files] == ["a.jsonl", "a10.jsonl", "b.jsonl"]


def test_a_recursive_glob_finds_files_in_subfolders_and_skips_folders(tmp_path):
    (tmp_path / "day=1").mkdir()
    (tmp_path / "day=1" / "x.jsonl").write_text("")
    (tmp_path / "dir.jsonl").mkdir()
    files = list_capture_files("**/*.jsonl", str(tmp_path))
    assert files == [str(tmp_path / "day=1" / "x.jsonl")]


def test_a_single_file_and_an_absolute_path_are_accepted(tmp_path):
    (tmp_path / "one.parquet").write_bytes(b"")
    assert list_capture_files("one.parquet", str(tmp_path)) == [str(tmp_path / "one.parquet")]
    assert list_capture_files(str(tmp_path / "one.parquet"), "/elsewhere") == [str(tmp_path / "one.parquet")]


def test_a_literal_file_name_with_glob_characters_is_found(tmp_path):
    (tmp_path / "part[1].csv").write_text("")
    assert list_capture_files("part[1].csv", str(tmp_path)) == [str(tmp_path / "part[1].csv")]


def test_a_pattern_matching_nothing_raises_input_error_naming_the_pattern(tmp_path):
    with pytest.raises(InputError, match=r"capture path 'capture/\*.jsonl' matches no file"):
        list_capture_files("capture/*.jsonl", str(tmp_path))
    with pytest.raises(InputError, match="capture path 'trips.jsonl' does not exist"):
        list_capture_files("trips.jsonl", str(tmp_path))


def test_an_empty_folder_as_capture_path_raises_input_error(tmp_path):
    (tmp_path / "capture").mkdir()
    (tmp_path / "capture" / "sub").mkdir()
    with pytest.raises(InputError, match=r"is a folder with no files"):
        list_capture_files("capture", str(tmp_path))


def test_a_folder_as_capture_path_gives_its_files_as_an_examplegen_split_folder_is_read(tmp_path):
    split = tmp_path / "Split-train"
    split.mkdir()
    for name in ("data_tfrecord-00001-of-00002.gz", "data_tfrecord-00000-of-00002.gz", ".hidden"):
        (split / name).write_bytes(b"")
    (split / "nested").mkdir()
    assert list_capture_files("Split-train", str(tmp_path)) == [
        str(split / "data_tfrecord-00000-of-00002.gz"), str(split / "data_tfrecord-00001-of-00002.gz")]


def test_examplegen_shards_are_told_tfrecord_and_gzip_from_their_bytes_not_their_name(tmp_path):
    import gzip

    from parity.capture import is_gzip, sniff_format
    from parity.capture.tfrecord import masked_crc32c

    payload = b"\x0a\x00"  # an empty tf.Example
    header = len(payload).to_bytes(8, "little")
    frame = header + masked_crc32c(header).to_bytes(4, "little") + payload + masked_crc32c(payload).to_bytes(4, "little")
    shard = tmp_path / "data_tfrecord-00000-of-00001.gz"
    shard.write_bytes(gzip.compress(frame, mtime=0))
    plain = tmp_path / "records.gz"  # named .gz, but not compressed
    plain.write_bytes(frame)
    assert detect_format(str(shard)) == "tfrecord" and is_gzip(str(shard))
    assert sniff_format(str(plain)) == "tfrecord" and not is_gzip(str(plain))
    (tmp_path / "rows.data").write_bytes(b'{"a": 1}\n')  # text formats are not guessed
    with pytest.raises(InputError, match="nor from its first bytes"):
        detect_format(str(tmp_path / "rows.data"))


def test_input_error_exits_with_code_two():
    assert InputError("x").exit_code == 2


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("a.jsonl", "jsonl"), ("a.json", "jsonl"), ("a.ndjson", "jsonl"), ("a.tfrecord", "tfrecord"),
     ("a.tfrecords", "tfrecord"), ("dir/a.TFRecord.gz", "tfrecord"), ("a.tfrecords.gz", "tfrecord"),
     ("a.parquet", "parquet"), ("a.csv", "csv"), ("a.jsonl.gz", "jsonl"), ("a.json.gz", "jsonl"),
     ("a.ndjson.gz", "jsonl")],
)
def test_the_format_is_detected_from_the_extension(name, fmt):
    assert detect_format(name) == fmt


@pytest.mark.parametrize("name", ["a.txt", "a.csv.gz", "a"])
def test_an_unknown_extension_raises_input_error_telling_to_set_capture_format(name):
    with pytest.raises(InputError, match="set capture.format to one of jsonl, tfrecord, parquet, csv"):
        detect_format(name)


def test_read_file_rejects_an_unknown_format_and_a_batch_size_below_one(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("{}\n")
    with pytest.raises(ValueError, match="unknown capture format 'xml'"):
        read_file(str(path), "xml", None, 10, "a.jsonl")
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        read_file(str(path), "jsonl", None, 0, "a.jsonl")


@pytest.mark.parametrize(("name", "fmt"), [("a.csv", "csv"), ("a.tfrecord", "tfrecord")])
def test_read_file_raises_input_error_at_once_when_csv_or_tfrecord_has_no_schema(tmp_path, name, fmt):
    path = tmp_path / name
    path.write_bytes(b"")
    with pytest.raises(InputError, match=r"add `capture.schema`"):
        read_file(str(path), fmt, None, 10, name)


def test_read_file_raises_input_error_at_once_for_a_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read capture file .*gone.jsonl: not an existing file"):
        read_file(str(tmp_path / "gone.jsonl"), "jsonl", None, 10, "gone.jsonl")
