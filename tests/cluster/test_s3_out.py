"""Every path of a run on the test bed's S3 server (moto, through Beam's real S3 filesystem and options): the out
folder, the fingerprint sets and the parts the steps write into them, `parity diff` of sets on S3 into S3,
`parity report --out` to S3, and a `saved` graph on S3. The replays run on the DirectRunner: only the S3 server
is started (tests/cluster/test_s3_paths.py runs the cluster)."""
from __future__ import annotations

import json
import os

import pytest
import yaml

import parity
from parity import cli
from parity import commands as run
from parity.config import load_config
from parity.errors import OutputError
from parity.sets.fingerprint_set import read_set

from tests.cluster.test_s3_paths import scenario_config

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "fixtures", "scenarios", "window_late_dropped")
TRIPS = os.path.join(ROOT, "fixtures", "scenarios", "_data", "trips.jsonl")
TFX = os.path.join(ROOT, "fixtures", "tfx", "pipeline")


@pytest.fixture
def s3(s3_server, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    return s3_server


@pytest.fixture(scope="module")
def local_report(tmp_path_factory) -> bytes:
    """report.json of window_late_dropped, capture and out on the local disk."""
    folder = tmp_path_factory.mktemp("local")
    parity.check(scenario_config(folder / "config", TRIPS), out_dir=str(folder / "out"))
    return (folder / "out" / "report.json").read_bytes()


def _capture_on_s3(s3) -> str:
    url = "s3://parity/out-tests/capture/trips.jsonl"
    if not s3.storage.isfile(url):
        s3.storage.write_bytes(url, open(TRIPS, "rb").read())
    return url


def test_a_check_from_s3_into_s3_writes_the_report_of_the_local_run(s3, tmp_path, local_report):
    out = "s3://parity/out-tests/check"
    report = parity.check(scenario_config(tmp_path / "config", _capture_on_s3(s3)), out_dir=out,
                          pipeline_options=s3.options)

    assert s3.storage.read_bytes(f"{out}/report.json") == local_report
    assert report["verdict"] == json.loads(local_report)["verdict"]
    names = s3.storage.list_names(out)
    assert names == [".parity-out", ".parity-written", "junit.xml", "report.html", "report.json", "report.md", "sides", "timings.json"]
    for side in ("offline", "production"):  # the workers' parts were read back and removed; no spill left
        assert s3.storage.list_names(f"{out}/sides/{side}") == [".parity-out", ".parity-written", "buckets.json", "fingerprints",
                                                          "manifest.json", "timings.json", "values"]
    left = read_set(f"{out}/sides/offline", s3.storage)
    assert left.num_rows == left.manifest["records"]["fingerprinted"] > 0


def test_a_second_check_into_the_same_s3_folder_replaces_the_first_ones_outputs(s3, tmp_path, local_report):
    out = "s3://parity/out-tests/again"
    config = scenario_config(tmp_path / "config", _capture_on_s3(s3))
    parity.check(config, out_dir=out, pipeline_options=s3.options)
    s3.storage.write_bytes(f"{out}/sides/offline/values/stale.parquet", b"left by an earlier run")
    parity.check(config, out_dir=out, pipeline_options=s3.options)
    assert not s3.storage.isfile(f"{out}/sides/offline/values/stale.parquet")
    assert s3.storage.read_bytes(f"{out}/report.json") == local_report


def test_sides_replayed_into_s3_diff_from_s3_into_s3_to_the_report_of_the_local_run(s3, tmp_path, local_report,
                                                                                     capsys, monkeypatch):
    from parity.sets import fingerprint_set

    # buckets of 16 rows: finalize sorts the parts read back from S3 through its bucket files (a local temporary
    # folder when the set is on a URL), as a large set does
    monkeypatch.setattr(fingerprint_set, "SORT_ROWS", 16)
    monkeypatch.setattr(fingerprint_set, "SPILL_ROWS", 40)
    config_path = scenario_config(tmp_path / "config", _capture_on_s3(s3))
    config = load_config(config_path)
    sets = "s3://parity/out-tests/sets"
    for side in ("offline", "production"):
        run.replay(config, side, f"{sets}/{side}", beam_args=s3.options)
    out = "s3://parity/out-tests/diff"
    code = cli.main(["diff", f"{sets}/offline", f"{sets}/production", "--out", out, "--config", config_path,
                     "--", *s3.options])
    assert code == 1  # diverged, as the local run
    assert s3.storage.read_bytes(f"{out}/report.json") == local_report

    local_md = tmp_path / "local.md"
    assert cli.main(["report", f"{out}/report.json", "--format", "md", "--out", str(local_md), "--",
                     *s3.options]) == 0
    assert cli.main(["report", f"{out}/report.json", "--format", "md", "--out", f"{out}/again.md", "--",
                     *s3.options]) == 0
    assert s3.storage.read_bytes(f"{out}/again.md") == local_md.read_bytes()
    capsys.readouterr()


def test_an_s3_prefix_that_parity_did_not_make_is_refused_without_force(s3, tmp_path):
    out = "s3://parity/out-tests/someone-elses"
    s3.storage.write_bytes(f"{out}/data/important.csv", b"a,b\n")
    config = scenario_config(tmp_path / "config", _capture_on_s3(s3))
    with pytest.raises(OutputError, match=r"not empty and was not made by parity \(it holds data\).*--force"):
        parity.check(config, out_dir=out, pipeline_options=s3.options)
    assert s3.storage.list_names(out) == ["data"]  # nothing written, nothing removed

    parity.check(config, out_dir=out, pipeline_options=s3.options, force=True)
    assert s3.storage.isfile(f"{out}/data/important.csv") and s3.storage.isfile(f"{out}/report.json")


def test_a_saved_graph_on_s3_gives_the_report_of_the_same_graph_on_disk(s3, tmp_path):
    graph = os.path.join(TFX, "TransformTF2", "transform_graph", "4")
    url = "s3://parity/out-tests/graphs/tf2"
    for folder, _, names in os.walk(graph):
        for name in names:
            rest = os.path.relpath(os.path.join(folder, name), graph).replace(os.sep, "/")
            s3.storage.write_bytes(f"{url}/{rest}", open(os.path.join(folder, name), "rb").read())
    base = os.path.join(ROOT, "fixtures", "scenarios", "tfx_graph_tf1_vs_tf2", "parity.yaml")
    with open(base, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    folder = os.path.dirname(base)
    doc["capture"]["path"] = os.path.normpath(os.path.join(folder, doc["capture"]["path"]))
    doc["capture"]["schema"] = os.path.normpath(os.path.join(folder, doc["capture"]["schema"]))
    doc["sides"]["offline"]["transform"]["saved"] = os.path.normpath(os.path.join(folder, doc["sides"]["offline"]
                                                                                  ["transform"]["saved"]))
    reports = []
    for name, saved in (("disk", graph), ("s3", url)):
        doc["sides"]["production"]["transform"]["saved"] = saved
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        parity.check(str(path), out_dir=str(tmp_path / f"out-{name}"), pipeline_options=s3.options)
        reports.append((tmp_path / f"out-{name}" / "report.json").read_bytes())
    assert reports[1] == reports[0]


def _upload(s3, local: str, url: str) -> None:
    """A local file, or every file under a local folder, as objects under `url`."""
    if os.path.isfile(local):
        s3.storage.write_bytes(url, open(local, "rb").read())
        return
    for folder, _, names in os.walk(local):
        for name in names:
            rest = os.path.relpath(os.path.join(folder, name), local).replace(os.sep, "/")
            s3.storage.write_bytes(f"{url}/{rest}", open(os.path.join(folder, name), "rb").read())


@pytest.mark.parametrize("model", ["tip_v1", "tip_v1.keras"], ids=["saved-model", "keras-file"])
def test_a_model_on_s3_gives_the_report_of_the_same_model_on_disk(s3, tmp_path, model):
    """`model.saved` as a URL: the workers copy it to a local folder once (`Storage.local_copy`: a SavedModel's
    objects, or the one `.keras` object) and load it from there, as TensorFlow reads no `s3://`."""
    local = os.path.join(ROOT, "fixtures", "scenarios", "_models", model)
    url = f"s3://parity/out-tests/models/{model}"
    _upload(s3, local, url)
    base = os.path.join(ROOT, "fixtures", "scenarios", "model_transform_km_flips_decisions", "parity.yaml")
    with open(base, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    doc["capture"]["path"] = TRIPS
    module = os.path.join(os.path.dirname(base), "sc_model_km_fns.py")  # the scenario's own file: one module of
    for side, function in (("offline", "offline_features"), ("production", "production_features")):  # that name
        doc["sides"][side]["transform"] = {"python": f"{module}:{function}"}
    reports = []
    for name, saved in (("disk", local), ("s3", url)):
        doc["model"]["saved"] = saved
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        parity.check(str(path), out_dir=str(tmp_path / f"out-{name}"), pipeline_options=s3.options)
        reports.append((tmp_path / f"out-{name}" / "report.json").read_bytes())
    assert reports[1] == reports[0]
    assert json.loads(reports[0])["prediction_impact"]["decision_flips"] > 0


def test_a_tft_side_into_an_s3_out_stops_with_exit_two_naming_the_fix(s3, tmp_path, capsys):
    config = os.path.join(ROOT, "fixtures", "scenarios", "clean_tft_serving", "parity.yaml")
    code = cli.main(["check", config, "--out", "s3://parity/out-tests/tft", "--", *s3.options])
    err = capsys.readouterr().err
    assert code == 2
    assert "has none for s3://" in err and "give a local --out or one on a scheme TensorFlow writes (gs://)" in err


def test_taps_write_their_set_to_s3_and_it_diffs_as_the_same_taps_on_disk(s3, tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from parity.beam import TapStage, finalize

    records = [{"id": i, "zone": "abc"[i % 3], "fare": 2.5 * i} for i in range(30)]

    def tapped(set_dir: str) -> None:
        with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(s3.options)) as pipeline:
            rows = pipeline | beam.Create(records)
            rows = rows | "TapInput" >> TapStage("input", set_dir, key_fields=["id"])
            _ = (rows | beam.Map(lambda r: {**r, "fare": r["fare"] * 2})
                 | "TapTransform" >> TapStage("transform", set_dir, key_fields=["id"]))
        finalize(set_dir, key=["id"], storage_options=s3.options)

    tapped(str(tmp_path / "taps"))
    tapped("s3://parity/out-tests/taps")
    assert s3.storage.list_names("s3://parity/out-tests/taps") == ["fingerprints.parquet", "manifest.json", "values"]
    assert cli.main(["diff", str(tmp_path / "taps"), "s3://parity/out-tests/taps", "--out", str(tmp_path / "diff"),
                     "--", *s3.options]) == 0
    report = json.loads((tmp_path / "diff" / "report.json").read_text(encoding="utf-8"))
    assert report["records"]["matched"] == 30


def test_a_capture_glob_on_s3_leaves_out_parity_s_own_output_below_it(s3):
    from parity.capture import list_capture_files

    base = "s3://parity/out-tests/globbed"
    for name in ("a/one.jsonl", "out/.parity-out", "out/sides/offline/quarantine.jsonl", "set/manifest.json",
                 "set/fingerprints.parquet", "set/quarantine.jsonl", "b/two.jsonl"):
        s3.storage.write_bytes(f"{base}/{name}", b"{}\n")
    assert list_capture_files(f"{base}/**/*.jsonl", "/", s3.storage) == [f"{base}/a/one.jsonl", f"{base}/b/two.jsonl"]
    with pytest.raises(Exception, match="matches only files in parity's output folders"):
        list_capture_files(f"{base}/out/**/*.jsonl", "/", s3.storage)
