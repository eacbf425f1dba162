"""Analyzer outputs of an exported TFT transform graph, as a fingerprint set keeps them (`analyzers.json`).

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
import os
import re
from typing import Any

import numpy as np

from parity.storage import urls

ANALYZERS_FILE = "analyzers.json"
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
    urls.write_text(urls.child(set_dir, ANALYZERS_FILE),
                     json.dumps(analyzers, ensure_ascii=False, sort_keys=True, indent=1) + "\n")


def read(set_dir: str) -> dict[str, Any] | None:
    path = urls.child(set_dir, ANALYZERS_FILE)
    if not urls.exists(path):
        return None
    data = json.loads(urls.read_text(path))
    return data if isinstance(data, dict) else None
