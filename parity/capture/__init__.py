"""Readers of captured raw records: jsonl, tfrecord (tf.Example), parquet and csv.

Each reader streams a file as `ReadBatch`es of at most `batch_size` records. A record that cannot be read or
does not fit the schema is not an error: it is returned as `Quarantined` with its location and the reason, so
that every record of the file is counted exactly once, either read or quarantined. Errors that concern a file
as a whole (missing, no schema where one is required, a CSV header that lacks schema columns) raise
`InputError`.

Locations name the file as the caller displays it (`display_path`) and the record's place in it:
`capture/trips.jsonl:12` (jsonl, csv: the 1-based line number), `capture/trips.tfrecord:record 12`
(tfrecord: the 0-based record index; `:offset 1234` for a framing error at that byte),
`capture/trips.parquet:row 12` (parquet: the 0-based row index).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from parity.capture.items import (MAX_NESTING, MAX_RECORD_BYTES, TOO_DEEP, Chunk, Quarantined, ReadItem, is_gzip,
                                  open_capture, too_deep)
from parity.capture.schema import FieldType
from parity.choices import FORMATS
from parity.errors import InputError
from parity.storage import capture_listing
from parity.storage.context import Storage

__all__ = ["FORMATS", "MAX_NESTING", "TOO_DEEP", "Chunk", "Quarantined", "ReadBatch", "detect_format",
           "is_gzip", "list_capture_files", "open_capture", "read_file", "reason_kind", "sniff_format", "too_deep"]


_EXTENSIONS = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".jsonl.gz": "jsonl",
    ".json.gz": "jsonl",
    ".ndjson.gz": "jsonl",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
    ".tfrecord.gz": "tfrecord",
    ".tfrecords.gz": "tfrecord",
    ".parquet": "parquet",
    ".csv": "csv",
}
_NEEDS_SCHEMA = {"tfrecord": "TFRecord", "csv": "CSV"}  # formats whose values carry no types of their own


@dataclass
class ReadBatch:
    """Up to `batch_size` records of one file, with their locations, and the entries quarantined meanwhile."""

    records: list[dict] = field(default_factory=list)
    locations: list[str] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    # The records' canonical bytes and fingerprints, one per record, when the reader computed them from
    # columns (the Parquet reader, `parity.encoding.columnar`); empty otherwise, and the read step encodes the records.
    encoded: list[bytes] = field(default_factory=list)
    fingerprints: list[int] = field(default_factory=list)


def list_capture_files(pattern: str, base_dir: str, storage: Storage = Storage()) -> list[str]:
    """The files a capture `path` names, sorted, local or a URL alike (`parity.storage.capture_listing`), leaving
    out parity's own output folders and fingerprint sets.

    Args:
        pattern: a file, a folder (its files, not its subfolders nor hidden files: an ExampleGen split such as
            `Split-train/`) or a glob (`**` allowed), relative to `base_dir` unless absolute.
        base_dir: the folder of the config file.
        storage: the run's storage context, for a URL.

    Raises:
        InputError: nothing matches, a local match is a FIFO or a device, or a URL cannot be listed; the message
            names the pattern.
    """
    return capture_listing.capture_files(pattern, base_dir, storage)


def detect_format(path: str, storage: Storage = Storage()) -> str:
    """The capture format a file name's extension implies: jsonl, tfrecord, parquet or csv.

    Raises:
        InputError: the extension is not one parity knows; the message says to set `capture.format`.
    """
    name = os.path.basename(path).lower()
    for extension, fmt in sorted(_EXTENSIONS.items(), key=lambda item: -len(item[0])):
        if name.endswith(extension):
            return fmt
    sniffed = sniff_format(path, storage)
    if sniffed is not None:
        return sniffed
    known = ", ".join(sorted(_EXTENSIONS))
    raise InputError(
        f"cannot tell the format of {path!r} from its extension (known: {known}) nor from its first bytes; "
        f"set capture.format to one of {', '.join(FORMATS)}"
    )


def sniff_format(path: str, storage: Storage = Storage()) -> str | None:
    """The binary format a file's first bytes show (gzip-compressed or not), or None: a TFRecord's first record
    header (its length's masked CRC-32C checks) or Parquet's `PAR1`. ExampleGen names its shards
    `data_tfrecord-00000-of-00012.gz`, an extension that says nothing of the records."""
    import struct
    import zlib

    try:
        with open_capture(path, storage) as handle:
            head = handle.read(16)
    except (OSError, EOFError, zlib.error):
        return None
    if head[:4] == b"PAR1":
        return "parquet"
    if len(head) >= 12:
        from parity.capture.tfrecord import masked_crc32c

        if masked_crc32c(head[:8]) == struct.unpack("<I", head[8:12])[0]:
            return "tfrecord"
    return None  # text formats are not guessed: a .txt of anything would pass for JSON Lines or CSV


def read_file(
    path: str,
    fmt: str,
    schema: dict[str, FieldType] | None,
    batch_size: int,
    display_path: str,
    max_record_bytes: int = MAX_RECORD_BYTES,
    storage: Storage = Storage(),
) -> Iterator[ReadBatch]:
    """Stream one capture file as batches of records and quarantined entries.

    Args:
        path: the file to read.
        fmt: one of `FORMATS`.
        schema: field types; required for tfrecord and csv, optional for jsonl and parquet.
        batch_size: the most records a batch holds (quarantined entries count toward it too).
        display_path: the file's name in locations, e.g. the path relative to the config file.
        max_record_bytes: `capture.max_record_bytes`; a record longer than `raw_limit` of it as read is
            quarantined unread (jsonl, csv, tfrecord), so that one huge line never fills memory.
        storage: the run's storage context, for a URL.

    Raises:
        InputError: the file cannot be opened, or the format needs a schema and has none.
        ValueError: `fmt` is unknown or `batch_size` is below 1.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown capture format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if schema is None and fmt in _NEEDS_SCHEMA:
        raise InputError(
            f"{display_path}: reading {_NEEDS_SCHEMA[fmt]} captures needs field types; add `capture.schema` "
            "(e.g. {trip_id: int64, fare: float64, zone: string})"
        )
    if not storage.isfile(path):  # checked here, so that the error comes before the first batch is asked for
        raise InputError(f"cannot read capture file {path}: not an existing file")
    reader = importlib.import_module(f"parity.capture.{fmt}")
    items = reader.read(path, schema, display_path, batch_size, max_record_bytes=max_record_bytes, storage=storage)
    return _batches(items, batch_size)


def _batches(items: Iterable[ReadItem], batch_size: int) -> Iterator[ReadBatch]:
    batch = ReadBatch()
    for item in items:
        if type(item) is Chunk:  # its records in slices that fill the batches as one item at a time would
            records, locations = item.records, item.locations
            start = 0
            while start < len(records):
                end = start + batch_size - len(batch.records) - len(batch.quarantined)
                batch.records.extend(records[start:end])
                batch.locations.extend(locations[start:end])
                start = end
                if len(batch.records) + len(batch.quarantined) >= batch_size:
                    yield batch
                    batch = ReadBatch()
            continue
        if isinstance(item, Quarantined):
            batch.quarantined.append(item)
        else:
            batch.records.append(item[0])
            batch.locations.append(item[1])
            if len(item) > 2:
                batch.encoded.append(item[2])
                batch.fingerprints.append(item[3])
        # quarantined entries count too, so that a file of bad records does not pile up in one batch
        if len(batch.records) + len(batch.quarantined) >= batch_size:
            yield batch
            batch = ReadBatch()
    if batch.records or batch.quarantined:
        yield batch


_POSITION = re.compile(r"^record \d+: |\s+(?:at|after) (?:line \d+, )?(?:byte|line|row) \d+")


def reason_kind(reason: str) -> str:
    """The kind of a quarantine reason, for counting: its head without positions, at most 80 characters.

    `invalid UTF-8 at line 2, byte 7: ...` and `invalid UTF-8 at byte 13: ...` are both `invalid UTF-8`;
    `record 3: data CRC mismatch` is `data CRC mismatch`; `field 'fare': expected float64, got 'x'` is
    `field 'fare'`.
    """
    return _POSITION.sub("", reason).split(":", 1)[0].strip()[:80]
