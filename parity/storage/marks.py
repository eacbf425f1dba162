"""What marks a folder as parity's own: the `--out` folder's marker file, and the files that make a folder a
fingerprint set. The out folder's claim (`parity.storage.outdir`) writes and reads the marker; the capture
listing (`parity.storage.capture_listing`) leaves out the files under either, so that a capture never reads
parity's own output. `is_parity_folder` is the one rule, for a local folder and a URL alike: each side says
only whether the folder holds a file of a name."""
from __future__ import annotations

import os
from typing import Callable

MARKER = ".parity-out"
# a folder holding both files of either pair is a fingerprint set (one fingerprints file, or bucket files)
SET_FILES = (("manifest.json", "fingerprints.parquet"), ("manifest.json", "buckets.json"))


def is_parity_folder(holds: Callable[[str], bool]) -> bool:
    """Whether a folder is parity's own output: it holds the marker, or both files of a fingerprint set's pair
    (a one-file set's or a bucketed set's). `holds(name)` tells whether the folder holds the file `name`
    (`local_holds` on disk; on a URL, whether an object of that name is listed under it)."""
    return holds(MARKER) or any(all(holds(name) for name in names) for names in SET_FILES)


def local_holds(folder: str) -> Callable[[str], bool]:
    """`holds` of the local folder `folder`: a regular file of that name, except that a link planted under the
    marker's name is no marker."""
    def holds(name: str) -> bool:
        path = os.path.join(folder, name)
        return os.path.isfile(path) and not (name == MARKER and os.path.islink(path))

    return holds


def has_marker(path: str) -> bool:
    """Whether the local folder `path` holds the marker as a regular file (a link planted under its name is no
    marker)."""
    return local_holds(path)(MARKER)
