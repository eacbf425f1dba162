"""Bad configs: `parity check` exits 2 with the file, the field path, the bad value and what is accepted."""
from __future__ import annotations

import os

import pytest

from parity.config import load_config
from parity.errors import ConfigError
from robust_helpers import run_cli

HEAD = "version: 1\ncapture: {path: cap.jsonl, key: [id]}\n"
CASES = {
    # name: (config text, fragments of the message after "<file>: ")
    "unknown-field": (HEAD + "sides:\n  a: {windw: {type: fixed}}\n  b: {}\n",
                      ["sides.a.windw: unknown field 'windw'", "expected one of capture, timestamp, window"]),
    "unknown-top-level-field": (HEAD + "sides: {a: {}, b: {}}\ntolerence: {}\n",
                                ["tolerence: unknown field 'tolerence'", "expected one of version, name"]),
    "wrong-type-integer": (HEAD + "sides:\n  a: {shard: {count: many}}\n  b: {}\n",
                           ["sides.a.shard.count: expected an integer, got 'many'"]),
    "wrong-type-mapping": (HEAD + "sides:\n  a: {window: fixed}\n  b: {}\n",
                           ["sides.a.window: expected a mapping with keys type, size", "got 'fixed'"]),
    "wrong-type-boolean": (HEAD + "sides: {a: {}, b: {}}\nreport: {redact: 'yes please'}\n",
                           ["report.redact: expected true or false, got 'yes please'"]),
    "bad-duration": (HEAD + "sides:\n  a: {window: {type: fixed, size: 1 hour}}\n  b: {}\n",
                     ["sides.a.window.size: bad duration '1 hour'", "like 90s, 15m, 1h, 1d"]),
    "negative-duration": (HEAD + "sides:\n  a: {window: {type: fixed, size: -5m}}\n  b: {}\n",
                          ["sides.a.window.size: bad duration '-5m'"]),
    "unknown-coder": (HEAD + "sides:\n  a: {coder: {type: pikle}}\n  b: {}\n",
                      ["sides.a.coder.type: unknown coder 'pikle'; expected one of json, tfexample, avro, pickle, "
                       "arrow"]),
    "unknown-hash": (HEAD + "sides:\n  a: {shard: {hash: sha1}}\n  b: {}\n",
                     ["sides.a.shard.hash: unknown hash 'sha1'; expected one of xxh3, crc32, md5, python"]),
    "unknown-window-type": (HEAD + "sides:\n  a: {window: {type: tumbling, size: 1h}}\n  b: {}\n",
                            ["sides.a.window.type: unknown window type 'tumbling'; expected one of fixed, sliding, "
                             "session, global"]),
    "unknown-time-unit": (HEAD + "sides:\n  a: {timestamp: {field: t, unit: sec}}\n  b: {}\n",
                          ["sides.a.timestamp.unit: unknown time unit 'sec'; expected one of s, ms, us, ns, iso8601"]),
    "unknown-time-zone": (HEAD + "sides:\n  a: {timestamp: {field: t, tz: Mars/Base}}\n  b: {}\n",
                          ["sides.a.timestamp.tz: unknown time zone 'Mars/Base'", "IANA name"]),
    "unknown-aggregate-op": (HEAD + "sides:\n  a: {shard: {aggregates: {x: {op: median, field: v}}}}\n  b: {}\n",
                             ["sides.a.shard.aggregates.x.op: unknown aggregate op 'median'; expected one of count"]),
    "unknown-capture-format": ("version: 1\ncapture: {path: cap.jsonl, format: xml}\nsides: {a: {}, b: {}}\n",
                               ["capture.format: unknown format 'xml'; expected one of jsonl, tfrecord, parquet, csv"]),
    "unknown-schema-type": ("version: 1\ncapture: {path: cap.jsonl, schema: {id: integer}}\nsides: {a: {}, b: {}}\n",
                            ["capture.schema.id: unknown type 'integer'; expected one of int64, int32"]),
    "max-quarantined-out-of-range": ("version: 1\ncapture: {path: cap.jsonl, max_quarantined: 5}\n"
                                     "sides: {a: {}, b: {}}\n",
                                     ["capture.max_quarantined: expected a number from 0 to 1 (a share of the "
                                      "side's records), got 5"]),
    "max-record-bytes-zero": ("version: 1\ncapture: {path: cap.jsonl, max_record_bytes: 0}\nsides: {a: {}, b: {}}\n",
                              ["capture.max_record_bytes: expected an integer >= 1, got 0"]),
    "missing-capture-path": ("version: 1\ncapture: {key: [id]}\nsides: {a: {}, b: {}}\n",
                             ["capture.path: missing; give the captured records' file or glob"]),
    "wrong-version": ("version: 2\nsides: {a: {}, b: {}}\n", ["version: unsupported version 2; expected 1"]),
    "one-side": (HEAD + "sides:\n  a: {}\n", ["sides: expected exactly two named sides"]),
    "not-a-mapping": ("- 1\n- 2\n", [": expected a mapping with keys version, name, capture, sides"]),
    "not-yaml": ("version: 1\n  capture: [\n", ["not valid YAML: mapping values are not allowed here"]),
    "bad-module-reference": (HEAD + "sides:\n  a: {transform: {python: 'my module'}}\n  b: {}\n",
                             ["sides.a.transform.python: expected a 'module:attr' reference, got 'my module'"]),
    "saved-transform-not-a-folder": (HEAD + "sides:\n  a: {transform: {saved: nothere}}\n  b: {}\n",
                                     ["sides.a.transform.saved: 'nothere' is not a directory",
                                      "expected an exported TFT output dir with transform_fn/"]),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_bad_config_exits_two_naming_the_file_the_field_and_what_is_accepted(kind, tmp_path, capsys):
    text, fragments = CASES[kind]
    config = tmp_path / "parity.yaml"
    config.write_text(text)
    (tmp_path / "cap.jsonl").write_text('{"id": 1, "t": 5}\n')
    code, _, errors = run_cli(["check", str(config), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {config}: "), errors
    for fragment in fragments:
        assert fragment in errors, errors
    assert not os.path.exists(tmp_path / "out"), "a bad config must stop the run before anything is written"


def test_a_missing_config_file_exits_two_naming_it(tmp_path, capsys):
    code, _, errors = run_cli(["check", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2
    assert f"{tmp_path / 'nope.yaml'}: no such config file; pass the path of a parity YAML config" in errors


def test_a_duplicate_yaml_key_is_refused_naming_it(tmp_path):
    config = tmp_path / "parity.yaml"
    config.write_text(HEAD + "sides:\n  a:\n    window: {type: fixed, size: 1h}\n    window: {type: fixed, size: 2h}\n"
                      "  b: {}\n")
    with pytest.raises(ConfigError, match=r"parity.yaml: .*duplicate key 'window'"):
        load_config(str(config))
