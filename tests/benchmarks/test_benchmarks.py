"""The issue-5 benchmark harness keeps working: a tiny run writes both tables with every contender's row.

The default test runs the python-transform variant (no TensorFlow in the contender processes, so it stays
well under a minute and a half); set PARITY_BENCH_TFT=1 to also run the TFT variant (the shipped taxi config,
a few minutes: every contender process imports TensorFlow and runs a TFT job). TFDV needs its own virtualenv
(benchmarks/README.md) and is not run here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(REPO, "benchmarks", "run.py")
CONTENDERS = ["floor", "parity", "naive", "kernel"]


def _load_run_module():
    spec = importlib.util.spec_from_file_location("bench_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _run(tmp_path, transform: str) -> tuple[dict, str]:
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, RUN, "--records", "300", "--transform", transform, "--contenders", ",".join(CONTENDERS),
         "--kernel-records", "300", "--work", str(tmp_path / "work"), "--results", str(results)],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    suffix = "" if transform == "tft" else f"-{transform}"
    with open(results / f"300{suffix}.json", encoding="utf-8") as handle:
        data = json.load(handle)
    markdown = (results / f"300{suffix}.md").read_text(encoding="utf-8")
    return data, markdown


def _check(data: dict, markdown: str, transform: str) -> None:
    assert data["records"] == 300 and data["transform"] == transform
    rows = data["contenders"]
    assert sorted(rows) == sorted(CONTENDERS)
    for name in ("floor", "parity", "naive"):
        row = rows[name]
        assert row["runs"] == 1 and row["failed"] == 0, (name, data["runs"][name])
        assert row["wall_s"] > 0 and row["process_s"] >= row["wall_s"] and row["records_per_s"] > 0
        assert row["peak_rss_mib"] > 0
        assert f"| {name} | 1 |" in markdown
    kernel = rows["kernel"]
    assert kernel["kernel_records"] == 300
    assert all(v > 0 for v in kernel["kernel_records_per_s"].values())
    assert "## kernel" in markdown and "plain `xxh3_64_intdigest`" in markdown
    ratios = data["ratios"]
    for key in ("parity_over_floor", "naive_over_floor", "fingerprint_diff_speedup_vs_naive",
                "kernel_vs_plain_xxh3_record", "kernel_vs_plain_xxh3_stages", "kernel_vs_plain_xxh3_arrow",
                "kernel_vs_c_xxh3_record", "kernel_vs_c_xxh3_arrow"):
        assert key in ratios, key
    assert "`parity.encoding.columnar.row_encodings(batch)`" in markdown
    assert ratios["parity_over_floor"] > 0
    assert "## issue-5 targets" in markdown
    # Both comparers saw the planted bug (production drops late trips) on the same records.
    assert rows["parity"]["outcome"]["paired"] == 300
    assert rows["parity"]["outcome"]["diverged"] >= 1
    naive = rows["naive"]["outcome"]
    assert sum(naive.values()) == 300 and naive.get("first:window", 0) >= 1


def test_harness_tiny_python(tmp_path):
    data, markdown = _run(tmp_path, "python")
    _check(data, markdown, "python")


@pytest.mark.skipif(os.environ.get("PARITY_BENCH_TFT") != "1", reason="set PARITY_BENCH_TFT=1 (a few minutes)")
def test_harness_tiny_tft(tmp_path):
    data, markdown = _run(tmp_path, "tft")
    _check(data, markdown, "tft")
    assert set(data["contenders"]["floor"]["timings"]) == {"offline_tft_seconds", "production_serving_seconds"}


def test_targets_and_markdown_from_synthetic_runs(tmp_path):
    run = _load_run_module()
    args = run.parse_args(["--records", "1000000", "--results", str(tmp_path), "--contenders",
                           "floor,parity,naive,tfdv,kernel"])
    runs = {
        "floor": [{"wall_s": 100.0, "process_s": 110.0, "peak_rss_mib": 2000.0}],
        "parity": [{"wall_s": 120.0, "process_s": 130.0, "peak_rss_mib": 2500.0, "records": {"paired": 5}}],
        "naive": [{"wall_s": 400.0, "process_s": 410.0, "peak_rss_mib": 5000.0, "outcome": {"matched": 5}}],
        "tfdv": [{"skipped": "no interpreter"}],
        "kernel": [{"wall_s": 1.0, "process_s": 2.0, "peak_rss_mib": 100.0, "records": 10,
                    "hashes_per_record_stages": 21, "ratio_record": 0.5, "ratio_stages": 0.25, "ratio_arrow": 0.7,
                    "ratio_c_record": 0.2, "ratio_c_arrow": 1.5,
                    "records_per_second": {"plain_xxh3_record": 100, "parity_fingerprints_record": 50,
                                           "parity_arrow_batch_record": 70,
                                           "c_xxh3_record": 105,
                                           "parity_encode_many_record": 60, "json_dumps_xxh3_record": 10,
                                           "plain_xxh3_stages": 40, "parity_writebatch_stages": 10}}],
    }
    result = run.summarize(args, runs)
    assert result["ratios"]["parity_over_floor"] == 1.2
    assert result["ratios"]["fingerprint_diff_speedup_vs_naive"] == 15.0
    targets = {t["target"]: t for t in result["targets"]}
    assert targets["parity / floor wall time"]["met"] is True
    assert targets["(naive - floor) / (parity - floor)"]["met"] is True
    assert targets["kernel records/s / plain xxh3 loop (one hash per record)"]["met"] is False
    assert targets["kernel records/s / plain xxh3 loop (Arrow record batches, parity.encoding.columnar)"]["met"] is False
    assert targets["kernel records/s / C xxh3 loop, one thread each (record dicts: the JSONL, CSV and TFRecord "
                   "read path)"]["met"] is False
    assert targets["kernel records/s / C xxh3 loop, one thread each (Arrow record batches: the Parquet read path)"][
        "met"] is True
    assert targets["parity peak RSS (GiB)"]["met"] is True
    markdown = run.render_markdown(result)
    assert "| tfdv | skipped: no interpreter |" in markdown
    assert "| parity | 1 | 120.0 |" in markdown


def test_the_order_of_contenders_rotates_each_round_so_none_always_runs_first():
    run = _load_run_module()
    names = ["floor", "parity", "naive"]
    assert [run.round_order(names, r) for r in (1, 2, 3, 4)] == [
        ["floor", "parity", "naive"], ["parity", "naive", "floor"], ["naive", "floor", "parity"],
        ["floor", "parity", "naive"]]


def test_a_difference_within_the_rounds_noise_is_not_measurable_and_every_round_is_reported(tmp_path):
    run = _load_run_module()
    args = run.parse_args(["--records", "1000000", "--results", str(tmp_path), "--contenders",
                           "floor,parity,naive", "--repeat", "2"])
    runs = {  # parity is 2 s over the floor, and the floor's own rounds are 6 s apart: no measurable part
        "floor": [{"round": 1, "position": 0, "wall_s": 100.0, "cpu_s": 150.0, "process_s": 110.0,
                   "peak_rss_mib": 2000.0, "load_before": [1.5, 1.0, 1.0]},
                  {"round": 2, "position": 2, "wall_s": 106.0, "cpu_s": 151.0, "process_s": 116.0,
                   "peak_rss_mib": 2000.0, "load_before": [2.5, 1.0, 1.0]}],
        "parity": [{"round": 1, "position": 1, "wall_s": 104.0, "cpu_s": 190.0, "process_s": 114.0,
                    "peak_rss_mib": 2500.0}, {"round": 2, "position": 0, "wall_s": 106.0, "cpu_s": 192.0,
                                              "process_s": 116.0, "peak_rss_mib": 2500.0}],
        "naive": [{"round": 1, "position": 2, "wall_s": 400.0, "cpu_s": 420.0, "process_s": 410.0,
                   "peak_rss_mib": 5000.0}, {"round": 2, "position": 1, "wall_s": 402.0, "cpu_s": 421.0,
                                             "process_s": 412.0, "peak_rss_mib": 5000.0}],
    }
    result = run.summarize(args, runs)
    assert result["ratios"]["fingerprint_diff_speedup_vs_naive"] == "not measurable"
    # in CPU seconds parity's part (40.5 s) is far above the rounds' spread (2 s): a ratio
    assert result["ratios"]["fingerprint_diff_speedup_vs_naive_cpu"] == round((420.5 - 150.5) / 40.5, 2)
    assert result["contenders"]["floor"]["wall_s_spread"] == 6.0
    result["machine"] = run.machine_state()
    assert result["machine"]["commit"] and result["machine"]["packages"]["apache-beam"]
    assert "cpu_model" in result["machine"]
    result["machine"]["cpu_model"] = "AMD EPYC"
    markdown = run.render_markdown(result)
    assert f" {result['machine']['cpus']} CPUs (AMD EPYC); " in markdown
    assert "| (naive - floor) / (parity - floor) (parity's part within the rounds' noise) | not measurable |" \
        in markdown
    every = markdown.split("## every round", 1)[1]
    assert every.count("| floor |") == every.count("| parity |") == every.count("| naive |") == 2
    assert "| 2 | 1 | parity | 106.0 |" in every  # round 2 started with parity


def test_a_sweep_level_plants_the_same_share_of_production_records_in_company_only(tmp_path):
    run = _load_run_module()
    capture = tmp_path / "trips-000.jsonl"
    records = [{"trip_id": 2**60 + 7919 * i, "company": "Flash Cab", "fare": 10.0 + i} for i in range(4000)]
    capture.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (planted_file,) = run.planted_capture([str(capture)], 25)
    planted = [json.loads(line) for line in open(planted_file, encoding="utf-8")]
    changed = [i for i, (a, b) in enumerate(zip(records, planted)) if a != b]
    assert all(planted[i]["company"] == run.PLANTED_COMPANY and planted[i]["fare"] == records[i]["fare"]
               for i in changed)
    assert 0.22 < len(changed) / len(records) < 0.28
    assert changed == [i for i, r in enumerate(records) if run.planted(r["trip_id"], 25)]
    # 0%: a file of its own, written the same way, with every record as it was
    (clean_file,) = run.planted_capture([str(capture)], 0)
    assert clean_file != str(capture) and os.path.dirname(clean_file) == os.path.dirname(planted_file).replace(
        "production-d25", "production-d0")
    assert [json.loads(line) for line in open(clean_file, encoding="utf-8")] == records
    assert run.production_capture([str(capture)], "fixed") == [clean_file]
    assert run.production_capture([str(capture)], "bug") == [str(capture)]


def test_every_sweep_level_runs_in_one_command(tmp_path):
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, RUN, "--records", "300", "--transform", "python", "--contenders", "floor,parity,naive",
         "--variant", "fixed,diverged25,diverged100", "--work", str(tmp_path / "work"), "--results", str(results)],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    diverged = {}
    for variant in ("fixed", "diverged25", "diverged100"):
        with open(results / f"300-python-{variant}.json", encoding="utf-8") as handle:
            data = json.load(handle)
        outcome = data["contenders"]["parity"]["outcome"]
        assert outcome["paired"] == 300
        diverged[variant] = outcome["diverged"]
        markdown = (results / f"300-python-{variant}.md").read_text(encoding="utf-8")
        assert "## every round" in markdown and "diff " in markdown  # the replay and the diff apart
    assert diverged["fixed"] == 0 < diverged["diverged25"] < diverged["diverged100"] == 300
    history = (results / "history.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["file"] for line in history] == [
        f"300-python-{variant}.json" for variant in ("fixed", "diverged25", "diverged100")]
    assert (results / "history.md").read_text(encoding="utf-8").count("\n## 300-python-") == 3


def test_the_sweep_levels_take_turns_within_each_round_rotated_like_the_contenders(tmp_path):
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, RUN, "--records", "300", "--transform", "python", "--contenders", "parity", "--repeat", "2",
         "--variant", "fixed,diverged25", "--work", str(tmp_path / "work"), "--results", str(results)],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    turns = re.findall(r"round (\d): variant (\w+)", done.stdout)
    assert turns == [("1", "fixed"), ("1", "diverged25"), ("2", "diverged25"), ("2", "fixed")]
    for variant in ("fixed", "diverged25"):
        with open(results / f"300-python-{variant}.json", encoding="utf-8") as handle:
            row = json.load(handle)["contenders"]["parity"]
        assert len(row["wall_s_runs"]) == 2, row


def test_the_fair_floors_spill_every_batch_that_waits_and_serve_every_record_through_the_offline_graph(tmp_path):
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, RUN, "--records", "300", "--contenders", "floor_concurrent,floor,parity_serial",
         "--variant", "diverged25", "--work", str(tmp_path / "work"), "--results", str(results), "--keep"],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(results / "300-diverged25.json", encoding="utf-8") as handle:
        data = json.load(handle)
    floor = data["contenders"]["floor_concurrent"]
    assert floor["runs"] == 1 and floor["failed"] == 0
    timings = floor["timings"]
    assert timings["both_seconds"] >= timings["offline_tft_seconds"] > 0
    assert timings["production_own_seconds"] > 0 and timings["production_waited_seconds"] >= 0
    assert data["contenders"]["floor"]["runs"] == 1 and data["contenders"]["floor"]["failed"] == 0
    (work,) = [p for p in (tmp_path / "work" / "runs").iterdir()]
    for name in ("floor_concurrent", "floor"):
        with open(work / f"{name}-r1.result.json", encoding="utf-8") as handle:
            served = json.load(handle)["served"]
        assert served == {"offline": 300, "production": 300}, name  # every record through the graph, both sides
        # every batch spilled while it waited was read back and removed: nothing waited in memory or is left
        for side in ("offline", "production"):
            assert list((work / f"{name}-r1" / f"{side}-spill").iterdir()) == [], (name, side)
    serial = data["contenders"]["parity_serial"]
    assert serial["runs"] == 1 and serial["outcome"]["paired"] == 300 and 0 < serial["outcome"]["diverged"] < 300


def test_the_digests_memory_benchmark_measures_both_layouts_of_a_tiny_pair_and_their_reports_agree(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "digests_memory.py"), "--records", "300",
                           "--work", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| 300 |")]
    assert [row[1].strip() for row in rows] == ["bucketed", "one file"]
    assert all(row[2].strip() == "0" and row[-1].strip() == "True" for row in rows)


def test_the_value_codecs_benchmark_writes_and_reads_a_replayed_sides_parts_with_both_codecs(tmp_path):
    from parity.commands import replay
    from parity.config import load_config

    replay(load_config(os.path.join(REPO, "pipelines", "taxi", "parity.yaml")), "offline", str(tmp_path / "set"))
    parts = len(os.listdir(tmp_path / "set" / "values"))
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "value_codecs.py"), str(tmp_path / "set"),
                           "--repeat", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["parts"] == parts and found["files"] == 2 * parts  # a spilled TFT side: both folders
    for codec in ("zstd", "lz4"):
        assert len(found[codec]["rounds"]) == 2 and found[codec]["bytes"] > 0
    assert found["zstd"]["bytes"] < found["lz4"]["bytes"]


def test_the_diff_half_benchmark_streams_and_tallies_half_the_key_ranges_of_two_replayed_sides(tmp_path):
    from parity.commands import replay
    from parity.compare.diff import DiffStream
    from parity.config import ToleranceSpec, load_config
    from parity.sets.fingerprint_set import KEY_RANGE_BITS, read_set

    config = load_config(os.path.join(REPO, "pipelines", "taxi", "parity.yaml"))
    for side in ("offline", "production"):
        replay(config, side, str(tmp_path / side))
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "diff_half.py"), str(tmp_path / "offline"),
                           str(tmp_path / "production"), "--rounds", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert list(found) == [REPO] and len(found[REPO]["cpu_s"]) == 2
    half = DiffStream(read_set(str(tmp_path / "offline")), read_set(str(tmp_path / "production")), ToleranceSpec()
                      ).of_ranges(frozenset(range((1 << KEY_RANGE_BITS) // 2)))
    differing = sum(1 for _ in half)
    assert differing > 0 and f"{differing} pairs" in done.stdout.splitlines()[0]


def test_the_plain_naive_benchmark_runs_both_contenders_on_the_same_events_and_they_count_the_same(tmp_path):
    result = tmp_path / "plain.json"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "plain_check.py"), "--records", "500",
                           "--rounds", "2", "--work", str(tmp_path / "work"), "--json", str(result)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(result.read_text(encoding="utf-8"))
    # the planted bug: production's hour is one off for event ids 0, 100, 200, 300, 400
    assert data["counts"] == {"matched": 495, "first:transform": 5}
    rounds = data["every_round"]
    assert [(r["round"], r["contender"]) for r in rounds] == [
        (1, "parity"), (1, "plain_naive"), (2, "plain_naive"), (2, "parity")]
    assert all(r["counts"] == data["counts"] and r["wall_s"] > 0 and r["cpu_s"] > 0 for r in rounds)
    assert data["naive_over_parity_cpu"] > 0 and "| plain_naive |" in done.stdout


def test_the_engine_diff_benchmark_measures_both_diffs_of_a_set_whose_every_record_diverged(tmp_path):
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "engine_diff.py"), "--records", "1500",
                           "--rounds", "2", "--work", str(tmp_path)], capture_output=True, text=True, timeout=900,
                          env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["paired"] == found["diverged"] == 1500  # the reports of both contenders are the same bytes
    for name in ("local", "engine-direct"):
        assert len(found[name]["rounds"]) == 2 and found[name]["cpu_s_median"] > 0
    assert [line.split(":")[0] for line in done.stdout.splitlines() if line.startswith("round ")] == \
        ["round 1 local", "round 1 engine-direct", "round 2 engine-direct", "round 2 local"]


def test_the_plain_benchmark_with_sides_in_turn_also_runs_the_check_with_its_sides_one_after_the_other(tmp_path):
    result = tmp_path / "plain.json"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "plain_check.py"), "--records", "300",
                           "--rounds", "1", "--sides-in-turn", "--work", str(tmp_path / "work"), "--json", str(result)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(result.read_text(encoding="utf-8"))
    assert [r["contender"] for r in data["every_round"]] == ["parity", "plain_naive", "parity_in_turn"]
    assert all(r["counts"] == {"matched": 297, "first:transform": 3} for r in data["every_round"])
    timings = json.loads((tmp_path / "work" / "plain-runs" / "parity_in_turn" / "out" / "timings.json").read_text(
        encoding="utf-8"))
    assert "sides_at_once" not in timings and data["in_turn_over_parity_cpu"] > 0


def test_compare_trees_at_once_runs_both_trees_in_each_round_and_finds_their_reports_identical(tmp_path):
    results = tmp_path / "trees.md"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "compare_trees.py"), "--before", REPO,
                           "--after", REPO, "--records", "300", "--rounds", "1", "--at-once", "--work", str(tmp_path),
                           "--results", str(results)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    text = results.read_text()
    assert "1 rounds each, both at once; reports identical: True" in text
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| 1 |")]
    assert sorted(row[1].strip() for row in rows) == ["after", "before"]
    # both started in the same round: each one's CPU seconds are its own process tree's
    assert all(float(row[3]) > 0 for row in rows)
    assert "at once" in done.stderr + done.stdout
