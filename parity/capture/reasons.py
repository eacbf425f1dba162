"""The one formatter of the reasons readers give for a record they cannot read: `<what>: <detail> <where>`,
e.g. `invalid JSON: Invalid control character at column 18`.

A library's message often ends with the word parity's place starts with (`json` says "Invalid control
character at", and "at column 18" followed: "at at"); `reader_error` joins them without repeating it, and
drops any word a message repeats back to back, so that a reason reads as one sentence.
"""
from __future__ import annotations

import re

__all__ = ["doubled_word", "reader_error"]

_DOUBLED = re.compile(r"\b([A-Za-z]+)(\s+\1\b)+", re.IGNORECASE)


def doubled_word(text: str) -> str | None:
    """The first word `text` repeats back to back ("at at"), or None."""
    found = _DOUBLED.search(text)
    return found.group(1) if found else None


def reader_error(what: str, detail: object, where: str = "") -> str:
    """`what: detail where` as one line: `detail` (a library's message) cut to its first line, without a
    trailing word that `where` starts with, and without words repeated back to back.

    Args:
        what: what could not be read, e.g. `invalid JSON`, `invalid CSV`, `cannot read Parquet file`.
        detail: the library's message (an exception or its text).
        where: the place in the record, e.g. `at column 18` or `at byte 19`; empty when the location says it.
    """
    text = str(detail).strip()
    text = text.splitlines()[0].strip() if text else type(detail).__name__
    if where:
        first = where.split()[0]
        words = text.split()
        if words and words[-1].lower() == first.lower():
            text = text[: text.lower().rfind(first.lower())].rstrip()
        text = f"{text} {where}" if text else where
    return _DOUBLED.sub(r"\1", f"{what}: {text}")
