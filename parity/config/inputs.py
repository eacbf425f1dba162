"""The files and folders a run reads: its config, capture files, TFMD schema, the modules and saved graphs it names.
An output folder that holds one of them is refused (`parity.storage.outdir.claim`): a run removes and writes
files there, and `--out .` beside the config once removed a capture named `report.json`."""
from __future__ import annotations

import dataclasses
import os

from parity.capture import list_capture_files
from parity.config.model import FILE_REF, Config, Ref
from parity.errors import ParityError
from parity.storage import urls
from parity.storage.context import Storage


def run_inputs(config: Config, sides: tuple[str, ...] | None = None,
               storage: Storage = Storage()) -> list[tuple[str, str]]:
    """`(path, what)` of each input of a run of `config` (of the named `sides` only, when given); capture URLs are
    listed with `storage`."""
    found: list[tuple[str, str]] = [(config.path, "the config")]
    for side in config.sides:
        if sides is not None and side.name not in sides:
            continue
        try:
            files = list_capture_files(side.capture.path, side.base_dir, storage)
        except ParityError:  # nothing to protect: the replay says what is wrong with the path
            files = []
        found.extend((path, f"a capture file of side '{side.name}'") for path in files)
        if side.capture.tfmd_path:
            found.append((side.capture.tfmd_path, f"the TFMD schema of side '{side.name}'"))
        transform = side.transform
        if transform is not None and transform.path:
            path = transform.path if urls.is_url(transform.path) else os.path.join(side.base_dir, transform.path)
            found.append((path, f"the saved transform graph of side '{side.name}'"))
        found.extend((path, f"the module {ref.text!r} of side '{side.name}'") for ref in _refs(side)
                     for path in _module_files(ref))
    return found


def _refs(value: object) -> list[Ref]:
    """Every `Ref` in a config object's fields, at any depth."""
    refs: list[Ref] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Ref):
            refs.append(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return refs


def _module_files(ref: Ref) -> list[str]:
    """The module file (or package folder) beside the config that `ref` names, when there is one."""
    file_ref = FILE_REF.match(ref.text)
    if file_ref:
        return [os.path.join(ref.base_dir, file_ref.group("file"))]
    top = ref.text.split(":", 1)[0].split(".")[0]
    return [path for path in (os.path.join(ref.base_dir, top + ".py"), os.path.join(ref.base_dir, top))
            if os.path.exists(path)]
