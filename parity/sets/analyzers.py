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
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.storage import urls
from parity.storage.context import Storage

ANALYZERS_FILE = "analyzers.json"
FEEDS_FILE = "analyzer_feeds.json"
_UID = re.compile(r"_\d+$")


@dataclass(frozen=True)
class GraphAnalyzers:
    """What a set keeps of a TFT output dir's graph: its analyzer outputs (`analyzers.json`) and, per constant,
    the output features it flows into (`analyzer_feeds.json`)."""

    outputs: dict[str, Any]
    feeds: dict[str, list[str]]


def read_graph(tft_output_dir: str) -> GraphAnalyzers:
    """The analyzer outputs of a TFT output dir (`{name: value}`, JSON-ready, deterministic) and which features
    each constant feeds, from one parse of its SavedModel."""
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
    model = _saved_model(os.path.join(transform_fn, "saved_model.pb"))
    labels: dict[str, str] = {}
    if model is not None:
        result.update(_constants(model, labels))
    return GraphAnalyzers(outputs=dict(sorted(result.items())),
                          feeds=_feeds(model, labels) if model is not None else {})


def _constants(model: Any, labels: dict[str, str]) -> dict[str, Any]:
    """The graph's analyzer constants by label; `labels` gets each one's graph node name -> its label."""
    from tensorflow.python.framework import tensor_util

    graph = model.meta_graphs[0].graph_def
    if not graph.library.function:
        return _tf1_constants(graph, labels)
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
        labels[const_name] = f"constant:{label}"
    return result


def _saved_model(saved_model_path: str) -> Any:
    if not os.path.exists(saved_model_path):
        return None
    from tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    with open(saved_model_path, "rb") as handle:
        model.ParseFromString(handle.read())
    return model


def _tf1_constants(graph: Any, labels: dict[str, str]) -> dict[str, Any]:
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
            if f"constant:{label}" not in result:
                result[f"constant:{label}"] = _plain(array)
                labels.setdefault(name, f"constant:{label}")
    return result


_CALLS = frozenset(("StatefulPartitionedCall", "PartitionedCall"))


def _feeds(model: Any, labels: dict[str, str]) -> dict[str, list[str]]:
    """`{constant label: [output features it flows into]}` of a parsed graph (JSON-ready, sorted); `labels` maps
    a constant's node name to its label (`_constants`).

    Analysis noise (`parity.compare.noise`) widens a feature only by the analyzer outputs it is computed from, so
    the graph is walked back from each output of its serving signature to the constants it reads: through the
    graph's nodes (TF1-compat) or into the called functions, output by output (TF2). A feature whose output has no
    tensor (a sparse output's components) reads none."""
    meta = model.meta_graphs[0]
    graph = meta.graph_def
    functions = {f.signature.name: f for f in graph.library.function}
    nodes = {n.name: n for n in graph.node}
    traced: dict[tuple[str, int], set[str]] = {}
    found: dict[str, set[str]] = {}
    for signature in meta.signature_def.values():
        for feature, tensor in signature.outputs.items():
            if not tensor.name:
                continue
            for const_name in _reach(nodes, set(), [tensor.name], functions, traced):
                if const_name in labels:
                    found.setdefault(labels[const_name], set()).add(feature)
    return {label: sorted(names) for label, names in sorted(found.items())}


def _reach(nodes: dict[str, Any], args: set[str], refs: list[str], functions: dict[str, Any],
           traced: dict[tuple[str, int], set[str]]) -> set[str]:
    """The names in `args` (a function's input args), or else the source-less nodes (a graph's constants), that
    the tensors `refs` are computed from. A call is followed into its function for the one output read, so a
    function computing every feature does not tie each feature to every constant; each (function, output) is
    traced once (`traced`), whichever feature reaches it."""
    reached: set[str] = set()
    seen: set[str] = set()
    stack = list(refs)
    while stack:
        ref = stack.pop()
        if ref.startswith("^") or ref in seen:
            continue
        seen.add(ref)
        parts = ref.split(":")
        name = parts[0]
        if name in args:
            reached.add(name)
            continue
        node = nodes.get(name)
        if node is None:
            continue
        inputs = [i for i in node.input if not i.startswith("^")]
        callee = functions.get(node.attr["f"].func.name) if node.op in _CALLS else None
        if callee is None:
            if not inputs:
                reached.add(name)
            stack.extend(inputs)
            continue
        index = int(parts[-1]) if len(parts) > 1 else 0
        outputs = callee.signature.output_arg
        if index >= len(outputs):  # not a plain list of outputs: every input may feed it
            stack.extend(inputs)
            continue
        inner = traced.get((callee.signature.name, index))
        if inner is None:
            inner = traced[(callee.signature.name, index)] = _reach(
                {n.name: n for n in callee.node_def}, {a.name for a in callee.signature.input_arg},
                [callee.ret[outputs[index].name]], functions, traced)
        stack.extend(source for arg, source in zip(callee.signature.input_arg, inputs) if arg.name in inner)
    return reached


def _plain(array: np.ndarray) -> Any:
    if array.ndim == 0:
        return array.item()
    return array.tolist()


def write(set_dir: str, found: GraphAnalyzers, storage: Storage) -> None:
    """Writes the analyzer outputs and which features each constant feeds."""
    for name, data in ((ANALYZERS_FILE, found.outputs), (FEEDS_FILE, found.feeds)):
        storage.write_text(urls.child(set_dir, name),
                           json.dumps(data, ensure_ascii=False, sort_keys=True, indent=1) + "\n")


def read(set_dir: str, storage: Storage) -> dict[str, Any] | None:
    path = urls.child(set_dir, ANALYZERS_FILE)
    if not storage.exists(path):
        return None
    data = json.loads(storage.read_text(path))
    return data if isinstance(data, dict) else None


def read_feeds(set_dir: str, storage: Storage) -> dict[str, list[str]]:
    """`feeds` as written beside the analyzer outputs; empty for a set written without them."""
    path = urls.child(set_dir, FEEDS_FILE)
    if not storage.exists(path):
        return {}
    data = json.loads(storage.read_text(path))
    return data if isinstance(data, dict) else {}
