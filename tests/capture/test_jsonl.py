import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.capture import ReadBatch, read_file
from parity.errors import InputError
from parity.capture.schema import parse_schema

SCHEMA = parse_schema({"trip_id": "int64", "fare": "float64", "zone": "string", "tags": "list<string>"})


def _write(tmp_path, data: bytes, name: str = "trips.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _read(path, schema=None, batch_size=100):
    batches = list(read_file(path, "jsonl", schema, batch_size, "capture/trips.jsonl"))
    assert all(isinstance(batch, ReadBatch) for batch in batches)
    records = [r for b in batches for r in b.records]
    locations = [loc for b in batches for loc in b.locations]
    quarantined = [q for b in batches for q in b.quarantined]
    return records, locations, quarantined


def test_records_are_read_with_json_types_and_one_based_line_locations(tmp_path):
    path = _write(tmp_path, b'{"trip_id": 1, "fare": 2.5}\n{"trip_id": 2, "zone": "JFK", "ok": true}\n')
    records, locations, quarantined = _read(path)
    assert records == [{"trip_id": 1, "fare": 2.5}, {"trip_id": 2, "zone": "JFK", "ok": True}]
    assert locations == ["capture/trips.jsonl:1", "capture/trips.jsonl:2"]
    assert quarantined == []


def test_integers_beyond_two_to_the_53_stay_exact_ints_without_a_schema(tmp_path):
    path = _write(tmp_path, b'{"id": 9007199254740993}\n')
    records, _, _ = _read(path)
    assert records == [{"id": 9007199254740993}]
    assert type(records[0]["id"]) is int


def test_blank_lines_are_skipped_and_do_not_shift_line_numbers(tmp_path):
    path = _write(tmp_path, b'\n{"trip_id": 1}\n   \n\r\n{"trip_id": 2}\n')
    records, locations, quarantined = _read(path)
    assert len(records) == 2 and quarantined == []
    assert locations == ["capture/trips.jsonl:2", "capture/trips.jsonl:5"]


def test_invalid_json_line_is_quarantined_with_its_line_number(tmp_path):
    path = _write(tmp_path, b'{"trip_id": 1}\n{"fare": }\n{"trip_id": 3}\n')
    records, locations, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [1, 3]
    assert len(quarantined) == 1
    entry = quarantined[0]
    assert entry.location == "capture/trips.jsonl:2"
    assert entry.reason == "invalid JSON: Expecting value at column 10"
    assert entry.preview == '{"fare": }'


@pytest.mark.parametrize(
    ("line", "kind"), [(b"[1, 2]", "an array"), (b'"text"', "a string"), (b"42", "a number"), (b"null", "null")]
)
def test_a_line_that_is_not_a_json_object_is_quarantined(tmp_path, line, kind):
    path = _write(tmp_path, line + b"\n")
    records, _, quarantined = _read(path)
    assert records == []
    assert quarantined[0].reason == f"expected a JSON object, got {kind}"


def test_a_non_utf8_line_is_quarantined_and_the_rest_of_the_file_is_read(tmp_path):
    path = _write(tmp_path, b'{"zone": "caf\xe9"}\n{"zone": "ok"}\n')
    records, locations, quarantined = _read(path)
    assert records == [{"zone": "ok"}]
    assert locations == ["capture/trips.jsonl:2"]
    assert quarantined[0].location == "capture/trips.jsonl:1"
    assert quarantined[0].reason == "invalid UTF-8 at byte 13: invalid continuation byte"
    assert quarantined[0].preview == repr(b'{"zone": "caf\xe9"}')


def test_a_value_that_does_not_fit_the_schema_is_quarantined_naming_field_type_and_value(tmp_path):
    path = _write(tmp_path, b'{"trip_id": 1, "fare": "abc"}\n{"trip_id": 2, "tags": ["a", 3]}\n')
    records, _, quarantined = _read(path, SCHEMA)
    assert records == []
    assert [q.reason for q in quarantined] == [
        "field 'fare': expected float64, got 'abc'",
        "field 'tags': element 1: expected string, got 3",
    ]


def test_with_a_schema_fields_are_coerced_missing_ones_are_none_and_others_are_kept(tmp_path):
    path = _write(tmp_path, b'{"extra": {"a": 1}, "trip_id": 7.0, "fare": 3, "tags": []}\n')
    records, _, _ = _read(path, SCHEMA)
    assert records == [{"trip_id": 7, "fare": 3.0, "zone": None, "tags": [], "extra": {"a": 1}}]
    assert type(records[0]["trip_id"]) is int and type(records[0]["fare"]) is float


def test_a_utf8_byte_order_mark_on_the_first_line_is_ignored(tmp_path):
    path = _write(tmp_path, b'\xef\xbb\xbf{"trip_id": 1}\n')
    records, _, quarantined = _read(path)
    assert records == [{"trip_id": 1}] and quarantined == []


def test_the_last_line_without_a_newline_is_read(tmp_path):
    path = _write(tmp_path, b'{"trip_id": 1}\n{"trip_id": 2}')
    records, _, _ = _read(path)
    assert len(records) == 2


def test_batches_hold_at_most_batch_size_records_and_every_line_is_counted_once(tmp_path):
    lines = []
    for i in range(53):
        lines.append(b"not json" if i % 10 == 0 else b'{"trip_id": %d}' % i)
    path = _write(tmp_path, b"\n".join(lines) + b"\n")
    batches = list(read_file(path, "jsonl", SCHEMA, 7, "capture/trips.jsonl"))
    assert all(len(b.records) <= 7 for b in batches)
    assert all(len(b.records) == len(b.locations) for b in batches)
    records = sum(len(b.records) for b in batches)
    quarantined = sum(len(b.quarantined) for b in batches)
    assert (records, quarantined) == (47, 6)
    all_locations = [loc for b in batches for loc in b.locations] + [q.location for b in batches for q in b.quarantined]
    assert sorted(all_locations, key=lambda loc: int(loc.rsplit(":", 1)[1])) == [
        f"capture/trips.jsonl:{n}" for n in range(1, 54)
    ]


def test_a_missing_file_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read capture file"):
        list(read_file(str(tmp_path / "nope.jsonl"), "jsonl", None, 10, "nope.jsonl"))


def test_a_long_line_preview_is_at_most_120_characters(tmp_path):
    path = _write(tmp_path, b'{"zone": "' + b"x" * 500 + b"\n")
    _, _, quarantined = _read(path)
    assert len(quarantined[0].preview) == 120
    assert quarantined[0].preview.startswith('{"zone": "xxx')


_JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70) | st.floats()
                 | st.text(st.characters(exclude_categories=()), max_size=6))
_JSON_VALUES = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)


def _json_lines(value) -> list[bytes]:
    """The line a writer could give this value: ASCII-escaped and raw UTF-8 (where it encodes), and spaced."""
    lines = [json.dumps(value).encode(), json.dumps(value, separators=(",", ":")).encode()]
    try:
        lines.append(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    except UnicodeEncodeError:
        pass
    return lines


_NUMBER_TEXT = st.builds(lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
                         st.sampled_from(["", "-"]), st.from_regex(r"\A(0|[1-9][0-9]{0,20})\Z"),
                         st.just("") | st.from_regex(r"\A\.[0-9]{1,22}\Z"),
                         st.just("") | st.integers(-400, 400).map(lambda e: f"e{e}"))
_NUMBER_LINES = _NUMBER_TEXT.map(lambda text: (f'{{"x": {text}, "y": [{text}]}}'.encode(),))


@settings(max_examples=600, deadline=None)
@given(_JSON_VALUES | st.dictionaries(st.text(max_size=3), _JSON_VALUES, max_size=4)
       | st.binary(max_size=24).map(lambda b: (b,)) | _NUMBER_LINES)
def test_lines_read_the_same_as_json_reads_them_whichever_parser_takes_them(value):
    from parity.capture import jsonl

    lines = list(value) if isinstance(value, tuple) else _json_lines(value)
    for raw in lines:
        expected, reason = jsonl._json_value(raw)
        got = jsonl._parse_line(raw)
        if reason is not None:
            assert got == reason
        elif not isinstance(expected, dict):
            assert got.startswith("expected a JSON object")
        else:
            assert repr(got) == repr(expected) and _types(got) == _types(expected)


def _types(value) -> list:
    if isinstance(value, dict):
        return [type(value)] + [t for k, v in value.items() for t in [type(k)] + _types(v)]
    if isinstance(value, list):
        return [list] + [t for v in value for t in _types(v)]
    return [type(value)]


_REPEATED = ("the JSON object holds it {n} times, and a record is never resolved to one of its values; write each "
             "field once")


@pytest.mark.parametrize("line, reason", [
    (b'{"id": 1, "v": 1, "v": 2}', "repeated field 'v': " + _REPEATED.format(n=2)),
    (b'{"id": 1, "id": 2}', "repeated field 'id': " + _REPEATED.format(n=2)),
    (b'{"id": 1, "\\u0069d": 2}', "repeated field 'id': " + _REPEATED.format(n=2)),  # the same key, escaped
    (b'{"id": 1, "v": NaN, "v": 1}', "repeated field 'v': " + _REPEATED.format(n=2)),  # json's path, not orjson's
    (b'{"id": 1, "a": {"b": [0, {"c": 1, "c": 2, "c": 3}]}}', "field 'a': at ['b'][1]: repeated key 'c': "
     + _REPEATED.format(n=3)),
])
def test_a_line_repeating_a_key_is_quarantined_naming_the_key_never_resolved_to_one_value(tmp_path, line, reason):
    # CONTRACT section 8, "Readers" (issue 40, item 1): json and orjson kept the last value, silently
    path = _write(tmp_path, b'{"id": 0, "v": 1}\n' + line + b"\n")
    records, _, quarantined = _read(path)
    assert records == [{"id": 0, "v": 1}]
    assert [(q.location, q.reason) for q in quarantined] == [("capture/trips.jsonl:2", reason)]


def test_colons_inside_strings_and_equal_keys_in_different_objects_are_no_repeated_key(tmp_path):
    line = b'{"t": "2024-01-01T00:00:00", "a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}]}'
    records, _, quarantined = _read(_write(tmp_path, line + b"\n"))
    assert quarantined == []
    assert records == [json.loads(line)]


@settings(max_examples=150, deadline=None)
@given(bad=st.lists(st.sampled_from([None, "json", "schema", "blank"]), min_size=0, max_size=40),
       block=st.integers(1, 90), batch_size=st.integers(1, 9))
def test_chunks_of_clean_lines_fill_the_batches_one_record_at_a_time_would(tmp_path_factory, bad, block, batch_size):
    import pytest as _pytest

    from parity.capture import Chunk, Quarantined, _batches
    from parity.capture import jsonl

    lines = [{None: b'{"trip_id": %d, "fare": 1.5}' % i, "json": b"not json", "schema": b'{"trip_id": "x"}',
              "blank": b""}[kind] for i, kind in enumerate(bad)]
    path = _write(tmp_path_factory.mktemp("chunks"), b"\n".join(lines) + b"\n")
    with _pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl, "BLOCK", block)  # blocks that cut lines anywhere, and hold one to a few of them
        items = list(jsonl.read(path, SCHEMA, "capture/trips.jsonl"))
    one_by_one = [pair for item in items
                  for pair in (zip(item.records, item.locations) if type(item) is Chunk else [item])]

    def shapes(batches):
        return [(b.records, b.locations, b.quarantined) for b in batches]
    assert shapes(_batches(iter(items), batch_size)) == shapes(_batches(iter(one_by_one), batch_size))
    clean = [i for i, kind in enumerate(bad) if kind is None]
    assert [item[0]["trip_id"] for item in one_by_one if type(item) is tuple] == clean
    assert [item.location for item in one_by_one if type(item) is Quarantined] == [
        f"capture/trips.jsonl:{i + 1}" for i, kind in enumerate(bad) if kind in ("json", "schema")]
    if all(kind is None for kind in bad):
        assert all(type(item) is Chunk for item in items)


def test_a_file_read_in_blocks_gives_the_items_the_line_by_line_reader_gives(tmp_path):
    from parity.capture import jsonl
    from parity.capture.items import raw_limit

    lines = [b'\xef\xbb\xbf{"trip_id": 0, "fare": 1.5}', b'{"trip_id": 1, "fare": 2}', b"  ", b'{"trip_id": 2}',
             b'{"trip_id": 3, "trip_id": 4}', b'{"trip_id": 5, "fare": 1e400}', b'{"trip_id": 6, "x": [[[1]]]}',
             b'{"trip_id": 7, "fare": 9223372036854775808}', b'{"trip_id": 8, "x": {"a": 1}}', b"[1]",
             b'{"trip_id": "x"}', b"\xff", b'{"trip_id": 9, "fare": 0.5}\r', b"", b'{"trip_id": 10}']
    path = _write(tmp_path, b"\n".join(lines))
    limit = raw_limit(16 << 20)
    for block in (1, 7, 64, 1 << 16):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(jsonl, "BLOCK", block)
            in_blocks = list(jsonl.read(path, SCHEMA, "t.jsonl"))
        with open(path, "rb") as handle:
            by_line = list(jsonl._read_lines(handle, SCHEMA, "t.jsonl", limit, 16 << 20))
        assert _flat(in_blocks) == _flat(by_line)
    assert len(_flat(by_line)) == 13  # the two blank lines are not records


def _flat(items):
    from parity.capture import Chunk
    return [pair for item in items for pair in (zip(item.records, item.locations) if type(item) is Chunk else [item])]


def test_a_jsonl_file_that_starts_with_gzips_magic_but_is_no_gzip_stream_is_read_as_the_plain_text_it_is(tmp_path):
    path = _write(tmp_path, b'\x1f\x8b\n{}\n{"trip_id": 3}\n')
    records, locations, quarantined = _read(path)
    assert records == [{}, {"trip_id": 3}]
    assert locations == ["capture/trips.jsonl:2", "capture/trips.jsonl:3"]
    assert [(q.location, q.reason) for q in quarantined] == [
        ("capture/trips.jsonl:1", "invalid UTF-8 at byte 1: invalid start byte")]


@pytest.mark.parametrize("name", ["trips.jsonl", "trips.jsonl.gz", "part-00000"])
def test_a_gzipped_jsonl_file_is_decompressed_whatever_its_name(tmp_path, name):
    import gzip

    path = _write(tmp_path, gzip.compress(b'{"trip_id": 1}\n\n{"trip_id": 2}\n', mtime=0), name)
    records, locations, quarantined = _read(path)
    assert records == [{"trip_id": 1}, {"trip_id": 2}] and quarantined == []
    assert locations == ["capture/trips.jsonl:1", "capture/trips.jsonl:3"]


def test_an_empty_gzip_stream_is_a_jsonl_file_of_no_records(tmp_path):
    import gzip

    path = _write(tmp_path, gzip.compress(b"", mtime=0))
    assert _read(path) == ([], [], [])


def _counting_storage() -> tuple:
    """A local storage noting each path it opens for reading."""
    from parity.storage.context import Storage

    opened: list[str] = []

    class Counting(Storage):
        def open_read(self, path: str):
            opened.append(path)
            return super().open_read(path)

    return Counting(), opened


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("where", ["first", "middle", "last-without-newline"])
def test_a_line_over_the_limit_is_read_on_from_where_the_blocks_stopped_opening_the_file_once(tmp_path, compress,
                                                                                             where):
    import gzip

    from parity.capture import jsonl
    from parity.capture.items import raw_limit

    big = b'\xef\xbb\xbf{"trip_id": 99, "zone": "' + b"z" * (raw_limit(1000) + 10) + b'"}'
    lines = [b'{"trip_id": %d, "fare": 1.5}' % i for i in range(40)] + [b"not json", b"", b'{"trip_id": "x"}']
    lines = {"first": [big] + lines, "middle": lines[:20] + [big] + lines[20:], "last-without-newline": lines + [big]}[
        where]
    data = b"\n".join(lines) + (b"" if where == "last-without-newline" else b"\n")
    path = _write(tmp_path, gzip.compress(data, mtime=0) if compress else data)
    with open(_write(tmp_path, data, "plain.jsonl"), "rb") as handle:
        by_line = _flat(jsonl._read_lines(handle, SCHEMA, "t.jsonl", raw_limit(1000), 1000))
    storage, opened = _counting_storage()
    for block in (7, 4096, 1 << 16):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(jsonl, "BLOCK", block)
            in_blocks = _flat(jsonl.read(path, SCHEMA, "t.jsonl", max_record_bytes=1000, storage=storage))
        assert in_blocks == by_line
    assert opened == [path] * 3  # once a read
    assert [q.location for q in by_line if not isinstance(q, tuple) and q.reason.startswith("record too large")] == [
        f"t.jsonl:{lines.index(big) + 1}"]
    assert len(by_line) == 43  # each non-blank line once


@pytest.mark.parametrize("long_line", [False, True], ids=["blocks", "after-a-long-line"])
def test_a_cut_gzip_stream_keeps_every_line_decompressed_before_the_cut_opening_the_file_once(tmp_path, long_line):
    import gzip
    import zlib

    from parity.capture import Quarantined, jsonl
    from parity.capture.items import raw_limit

    lines = [b'{"trip_id": %d, "fare": %d.5}' % (i, i * 7919 % 1000) for i in range(20000)]
    if long_line:
        lines[5] = b'{"trip_id": 5, "zone": "' + b"z" * (raw_limit(1000) + 10) + b'"}'
    packed = gzip.compress(b"\n".join(lines) + b"\n", mtime=0)
    cut = packed[:len(packed) // 2]
    decompressed = zlib.decompressobj(31).decompress(cut)
    whole = decompressed.count(b"\n")  # the lines the cut stream holds whole
    path = _write(tmp_path, cut, "trips.jsonl.gz")
    storage, opened = _counting_storage()

    items = _flat(jsonl.read(path, SCHEMA, "t.jsonl", max_record_bytes=1000, storage=storage))
    records = [item for item in items if isinstance(item, tuple)]
    assert [record["trip_id"] for record, _ in records] == [i for i in range(whole) if not (long_line and i == 5)]
    [*too_large, broken] = [item for item in items if isinstance(item, Quarantined)]
    assert broken.location == f"t.jsonl:{whole + 1}"
    assert broken.reason.startswith("corrupt gzip stream: ") and f"after line {whole};" in broken.reason
    assert [entry.location for entry in too_large] == (["t.jsonl:6"] if long_line else [])
    assert opened == [path]
