"""Reading a config file into a YAML document: the only place YAML is parsed, with the file's bounds.

A config is a few kilobytes written by hand, so the bounds only stop hostile or broken files (a YAML "billion
laughs", a generated 5 MB schema) before they cost memory.
"""
from __future__ import annotations

import math
import re
import sys
from typing import Any

import yaml

from parity.errors import ConfigError, first_line
from parity.storage.files import special_kind

MAX_CONFIG_BYTES = 1 << 20            # the file's size
MAX_CONFIG_NODES = 100_000            # YAML nodes once every alias is expanded


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, refusing a key repeated in one mapping (PyYAML would keep the last one silently) and a
    document whose aliases expand to more than MAX_CONFIG_NODES nodes (a "billion laughs")."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            expanded = _expanded_nodes(node, MAX_CONFIG_NODES)
            if expanded > MAX_CONFIG_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"the document's aliases (*name) expand to more than {MAX_CONFIG_NODES:,} "
                                f"values; a parity config needs far fewer: write the repeated parts out or "
                                f"remove the aliases", node.start_mark)
        return node


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes the YAML graph under `root` holds with every alias expanded (a node an alias shares is
    counted at each use), up to `limit + 1`; a recursive alias (`&a [*a]`) counts as `limit + 1`. Iterative,
    each distinct node visited once."""
    sizes: dict[int, int] = {}
    opened: set[int] = set()  # nodes whose children are being counted: meeting one again is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_counted = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_counted:
            opened.discard(id(node))
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(child)] for child in children))
            continue
        if id(node) in opened:
            return limit + 1
        if not children:
            sizes[id(node)] = 1
            continue
        opened.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    """The mapping, refusing a key written twice in it. Merge keys (`<<: *side`) are YAML's own and safe:
    `construct_mapping` merges them, and a key written beside one overrides the merged value, as YAML says."""
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: construct_mapping reports it
            break
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1}); keep one", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)

# YAML 1.2's floats: PyYAML resolves YAML 1.1's, which need a dot, so `1e-6` (the README's own spelling),
# `1e308` and `1e-300` were strings and refused. Added after the int resolver: `1` stays an integer.
_FLOAT_12 = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def _finite_float(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> float:
    """A YAML float; a literal beyond the float64 range (`1e400`) is refused rather than read as an infinity,
    which would switch a tolerance off. `.inf` spelled out stays an infinity."""
    value = loader.construct_yaml_float(node)
    if math.isinf(value) and "inf" not in node.value.lower():
        raise yaml.constructor.ConstructorError(
            None, None, f"the number {node.value[:40]} (line {node.start_mark.line + 1}) is beyond the float64 "
                        f"range (magnitude above 1.8e308)", node.start_mark)
    return value


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _finite_float)


def read_document(path: str) -> Any:
    """The YAML document in the file `path` (None when it holds only comments).

    Raises:
        ConfigError: the file is missing, unreadable, too large or not YAML parity can use.
    """
    special = special_kind(path)
    if special is not None:
        raise ConfigError(f"{path}: is {special}, not a regular file; pass the path of a parity YAML config file")
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_CONFIG_BYTES + 1)
            if len(text) > MAX_CONFIG_BYTES:
                raise ConfigError(f"{path}: the config is larger than {MAX_CONFIG_BYTES >> 20} MiB; a parity "
                                  f"config is a few kilobytes: keep large schemas out of it (capture.schema "
                                  f"may name a schema file)")
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no object construction
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such config file; pass the path of a parity YAML config") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {first_line(exc)}") from exc
    except RecursionError as exc:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{path}: not a usable YAML config: its lists or mappings are nested too deeply for "
                          f"Python's recursion limit ({sys.getrecursionlimit():,}); a parity config is a few "
                          f"levels deep") from exc
    except ValueError as exc:  # PyYAML's int() of an integer beyond Python's 4,300-digit limit
        raise ConfigError(f"{path}: not a usable YAML config: {first_line(exc)}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc.strerror}") from exc
