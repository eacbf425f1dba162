"""The canonical encoding v1 against its golden vectors (fixtures/canonical/vectors.json).

A missing or stale golden file fails here; it is never written by a test. Regenerate deliberately with
``PARITY_REGEN_GOLDEN=1 python fixtures/canonical/make_vectors.py`` (and bump ``ENCODING_VERSION`` if
any bytes change).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from parity.encoding.canonical import ENCODING_VERSION, decode, encode, to_json
from parity.encoding.fingerprint import fingerprint, fingerprint_bytes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "canonical"
TAGS = "NTFifgsbldetDm"


def _load_script():
    spec = importlib.util.spec_from_file_location("make_vectors", FIXTURES / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _load_script()


def _golden() -> list[dict]:
    path = FIXTURES / "vectors.json"
    if not path.exists():
        pytest.fail(f"{path} is missing; generate it with "
                    f"PARITY_REGEN_GOLDEN=1 python {FIXTURES / 'make_vectors.py'}")
    return json.loads(path.read_text(encoding="ascii"))


GOLDEN = _golden() if (FIXTURES / "vectors.json").exists() else []


def test_golden_file_exists_and_matches_the_script_vector_list():
    names = [v["name"] for v in _golden()]
    assert names == [name for name, _ in SCRIPT.VECTORS]
    assert len(set(names)) == len(names)


def test_golden_vectors_cover_every_tag_and_number_at_least_forty():
    vectors = _golden()
    assert len(vectors) >= 40
    first_tags = {bytes.fromhex(v["bytes"])[:1].decode("ascii") for v in vectors}
    assert set(TAGS) <= first_tags


def test_encoding_version_is_the_one_the_vectors_pin():
    assert ENCODING_VERSION == "parity.canonical/1"


@pytest.mark.parametrize("vector", GOLDEN, ids=[v["name"] for v in GOLDEN])
def test_value_encodes_to_exactly_the_golden_bytes(vector):
    value = SCRIPT.build_value(vector["value"])
    assert encode(value).hex() == vector["bytes"]


@pytest.mark.parametrize("vector", GOLDEN, ids=[v["name"] for v in GOLDEN])
def test_value_fingerprint_is_the_golden_xxh3_64(vector):
    value = SCRIPT.build_value(vector["value"])
    assert f"{fingerprint(value):016x}" == vector["xxh3_64"]
    assert f"{fingerprint_bytes(bytes.fromhex(vector['bytes'])):016x}" == vector["xxh3_64"]


@pytest.mark.parametrize("vector", GOLDEN, ids=[v["name"] for v in GOLDEN])
def test_golden_bytes_decode_to_a_value_that_encodes_back_to_them(vector):
    data = bytes.fromhex(vector["bytes"])
    assert encode(decode(data)) == data


@pytest.mark.parametrize("vector", GOLDEN, ids=[v["name"] for v in GOLDEN])
def test_value_json_view_is_the_golden_json(vector):
    value = SCRIPT.build_value(vector["value"])
    rendered = json.dumps(to_json(value), sort_keys=False, ensure_ascii=True, allow_nan=False)
    assert rendered == json.dumps(vector["json"], sort_keys=False, ensure_ascii=True, allow_nan=False)


def test_make_vectors_refuses_to_overwrite_the_golden_file(monkeypatch, capsys):
    monkeypatch.delenv("PARITY_REGEN_GOLDEN", raising=False)
    before = (FIXTURES / "vectors.json").read_bytes()
    assert SCRIPT.main() == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (FIXTURES / "vectors.json").read_bytes() == before
