"""Analyzer outputs of an exported TFT transform graph, and their comparison between two sides.

A TFT `transform_fn` carries what its analyzers computed as (a) asset files (vocabularies) and (b) constants
captured by the serving function (means, variances, quantile boundaries, vocabulary sizes, min/max, ...).
Constants are named after the argument of the pruned transform function they feed, e.g.
`scale_to_z_score_sub_y` (the mean) or `bucketize_apply_buckets_1496` (the boundaries); the trailing uid is
dropped so graphs exported by two runs of the same `preprocessing_fn` line up.

A TF1-compat export (`force_tf_compat_v1`) has no functions: TFT replaced each analyzer output by a `Const` at
the graph's root. Such a constant is named the way TF2 names its argument, after the op that reads it: its
scope without `transform/` and the op's input (`transform/scale_to_z_score/sub`, input `y`:
`scale_to_z_score_sub_y`), or the `apply_buckets` scope that reads bucket boundaries (`bucketize_apply_buckets`),
so that the statistics of a TF1 and a TF2 export of the same `preprocessing_fn` line up too.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import numpy as np

ANALYZERS_FILE = "analyzers.json"
_MAX_TOKENS_SHOWN = 5
_UID = re.compile(r"_\d+$")


def extract(tft_output_dir: str) -> dict[str, Any]:
    """`{name: value}` of a TFT output dir's analyzer outputs (JSON-ready, deterministic)."""
    transform_fn = os.path.join(tft_output_dir, "transform_fn")
    result: dict[str, Any] = {}
    assets = os.path.join(transform_fn, "assets")
    if os.path.isdir(assets):
        for name in sorted(os.listdir(assets)):
            path = os.path.join(assets, name)
            if os.path.isfile(path):
                with open(path, "rb") as handle:
                    tokens = [line.rstrip(b"\n").decode("utf-8", "backslashreplace") for line in handle]
                result[f"vocabulary:{name}"] = tokens
    result.update(_constants(os.path.join(transform_fn, "saved_model.pb")))
    return dict(sorted(result.items()))


def _constants(saved_model_path: str) -> dict[str, Any]:
    if not os.path.exists(saved_model_path):
        return {}
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import tensor_util

    model = saved_model_pb2.SavedModel()
    with open(saved_model_path, "rb") as handle:
        model.ParseFromString(handle.read())
    graph = model.meta_graphs[0].graph_def
    if not graph.library.function:
        return _tf1_constants(graph)
    functions = {f.signature.name: f for f in graph.library.function}
    consts = {n.name: n for n in graph.node if n.op == "Const"}
    names: dict[str, str] = {}
    for node in graph.node:
        if node.op != "StatefulPartitionedCall" or "signature_wrapper" not in node.attr["f"].func.name:
            continue
        wrapper = functions[node.attr["f"].func.name]
        outer = dict(zip((a.name for a in wrapper.signature.input_arg), node.input))
        for inner_call in wrapper.node_def:
            called = inner_call.attr["f"].func.name if "f" in inner_call.attr else ""
            if called not in functions:
                continue
            inner_args = [a.name for a in functions[called].signature.input_arg]
            for arg_name, source in zip(inner_args, inner_call.input):
                const_name = outer.get(source.split(":")[0])
                if const_name in consts and const_name not in names:
                    names[const_name] = _UID.sub("", arg_name)
    result: dict[str, Any] = {}
    for const_name, label in names.items():
        array = tensor_util.MakeNdarray(consts[const_name].attr["value"].tensor)
        if array.dtype == object or array.size > 100_000:
            continue
        result[f"constant:{label}"] = _plain(array)
    return result


def _tf1_constants(graph: Any) -> dict[str, Any]:
    """The analyzer outputs of a TF1-compat graph: its root-scope constants, named after the op reading them."""
    from tensorflow.python.framework import op_def_registry, tensor_util

    consts = {n.name: n for n in graph.node if n.op == "Const" and "/" not in n.name}
    result: dict[str, Any] = {}
    for node in graph.node:
        for position, source in enumerate(node.input):
            name = source.split(":")[0]
            if name not in consts:
                continue
            array = tensor_util.MakeNdarray(consts[name].attr["value"].tensor)
            if array.dtype == object or array.size > 100_000:
                continue  # asset paths (the vocabularies are compared as files) and huge tables
            op_def = op_def_registry.get(node.op)
            arg = op_def.input_arg[position].name if op_def and position < len(op_def.input_arg) else str(position)
            scopes = node.name.removeprefix("transform/").split("/")
            if "apply_buckets" in scopes:
                label = "_".join(scopes[:scopes.index("apply_buckets") + 1])
            else:
                label = "_".join([*scopes, arg])
            label = _UID.sub("", label.lower())
            result.setdefault(f"constant:{label}", _plain(array))
    return result


def _plain(array: np.ndarray) -> Any:
    if array.ndim == 0:
        return array.item()
    return array.tolist()


def write(set_dir: str, analyzers: dict[str, Any]) -> None:
    with open(os.path.join(set_dir, ANALYZERS_FILE), "w", encoding="utf-8") as handle:
        json.dump(analyzers, handle, ensure_ascii=False, sort_keys=True, indent=1)
        handle.write("\n")


def read(set_dir: str) -> dict[str, Any] | None:
    path = os.path.join(set_dir, ANALYZERS_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return data if isinstance(data, dict) else None


def kind_of(name: str) -> str:
    """`vocabulary` and `statistic` are analyzer outputs; `lookup` constants parameterise a mapping
    (table sizes with OOV buckets, default values), so they tell mapping differences, not analyzer ones."""
    if name.startswith("vocabulary:"):
        return "vocabulary"
    label = name.split(":", 1)[-1].lower()
    if "lookup" in label or "vocab" in label or label.endswith("default_value"):
        return "lookup"
    return "statistic"


def compare(left: dict[str, Any] | None, right: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One entry per analyzer output on either side: `{name, equal, detail, kind}`, sorted by name.

    A constant exported by one side only is graph structure (`kind: graph`), not an analyzer difference.
    """
    if left is None or right is None:
        return []
    entries = []
    for name in sorted(set(left) | set(right)):
        if name not in left or name not in right:
            side = "right" if name in right else "left"
            kind = "vocabulary" if name.startswith("vocabulary:") else "graph"
            entries.append({"name": name, "equal": False, "detail": f"exported by the {side} side only",
                            "kind": kind})
            continue
        a, b = left[name], right[name]
        if name.startswith("vocabulary:"):
            entries.append({"name": name, "equal": a == b, "detail": _vocabulary_detail(a, b),
                            "kind": "vocabulary"})
        else:
            entries.append({"name": name, "equal": _same_numbers(a, b), "detail": _constant_detail(a, b),
                            "kind": kind_of(name)})
    return entries


def analyzers_differ(entries: list[dict[str, Any]]) -> bool | None:
    """True when a real analyzer output (vocabulary or statistic) differs; None when nothing was compared."""
    if not entries:
        return None
    return any(not e["equal"] and e.get("kind", "statistic") in ("vocabulary", "statistic") for e in entries)


def _vocabulary_detail(a: list[str], b: list[str]) -> str:
    if a == b:
        return f"{len(a)} tokens, same order"
    only_left = sorted(set(a) - set(b))
    only_right = sorted(set(b) - set(a))
    if not only_left and not only_right:
        moved = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        return (f"same {len(a)} tokens in a different order (first difference at rank {moved}: "
                f"{a[moved]!r} vs {b[moved]!r}); ties or counts differ")
    parts = [f"{len(a)} vs {len(b)} tokens"]
    if only_left:
        parts.append(f"left only: {_tokens(only_left)}")
    if only_right:
        parts.append(f"right only: {_tokens(only_right)}")
    return "; ".join(parts)


def _tokens(tokens: list[str]) -> str:
    shown = ", ".join(repr(t[:40]) for t in tokens[:_MAX_TOKENS_SHOWN])
    more = len(tokens) - _MAX_TOKENS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _flat(value: Any) -> list:
    if isinstance(value, list):
        return [x for item in value for x in _flat(item)]
    return [value]


# Analyzer statistics are float32 and summed in bundle order, which runners choose: two runs over the same
# data differ in the last bits (seen on Flink vs the DirectRunner). Within this relative distance they count
# as equal, so a mapping difference is not blamed on the analyzers.
FLOAT32_REL = 1e-6


def _close(x: Any, y: Any) -> bool:
    if x == y:
        return True
    if isinstance(x, float) and isinstance(y, float):
        if math.isnan(x) and math.isnan(y):
            return True
        return abs(x - y) <= FLOAT32_REL * max(abs(x), abs(y))
    return False


def _same_numbers(a: Any, b: Any) -> bool:
    fa, fb = _flat(a), _flat(b)
    if len(fa) != len(fb):
        return False
    return all(_close(x, y) for x, y in zip(fa, fb))


def _constant_detail(a: Any, b: Any) -> str:
    fa, fb = _flat(a), _flat(b)
    if _same_numbers(a, b):  # same words whether exact or within float32 rounding: runners must agree
        return f"{len(fa)} value{'s' if len(fa) != 1 else ''}, equal (within float32 rounding)"
    if len(fa) != len(fb):
        return f"{len(fa)} vs {len(fb)} values"
    diffs = [(i, x, y) for i, (x, y) in enumerate(zip(fa, fb)) if x != y]
    i, x, y = diffs[0]
    where = "" if len(fa) == 1 else f" at index {i} ({len(diffs)} of {len(fa)} differ)"
    return f"{x!r} vs {y!r}{where}"
