"""Text that reaches a terminal, a report or a shell: control characters shown, never sent (pure).

Captured keys and values, config names and the side names of a manifest can hold anything. An ESC sequence
printed raw retitles or repaints the terminal it reaches, a NUL or a bidi override hides what follows; in a
command line such a character cannot be typed back. `printable` shows each as a visible escape, and
`shell_quote` quotes a word so that the command runs in a POSIX shell when the word is plain, and in bash or
zsh (`$'...'`) when it holds control characters, whose escapes are then part of the quoting.
"""
from __future__ import annotations

import json
import re
import shlex
from typing import Any

__all__ = ["page_printable", "printable", "printable_json", "shell_quote", "show_command"]

# C0 controls (tab and newline included: a one-line message or cell must stay one line), DEL, C1 controls, the
# bidi embeddings, overrides and isolates, and the line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
# what json.dumps leaves raw inside strings (it escapes C0 controls; its own newlines and indents are C0)
_JSON_RAW = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any) -> str:
    """`text` (str() of anything) with every control character shown as an escape: ESC as `\\x1b`, NUL as
    `\\x00`, newline as `\\n`, a bidi override as `\\u202e`. Text without them is returned unchanged."""
    text = str(text)
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


# the same, but for a page, where a tab, a newline or a carriage return is whitespace and harmless
_PAGE_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
                           "\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def page_printable(text: Any) -> str:
    """`printable` for an HTML page: every control character an escape but tab, newline and carriage return,
    which a page shows as whitespace (a value's own line breaks stay as they were)."""
    text = str(text)
    return _PAGE_CONTROL.sub(_escape, text) if _PAGE_CONTROL.search(text) else text


def printable_json(text: str) -> str:
    """JSON text (as `json.dumps(..., ensure_ascii=False)` writes it) with the control characters it left raw
    (DEL, C1 controls, bidi overrides, line separators; C0 ones are escaped already) written as `\\uXXXX`
    escapes: the same JSON value, safe on a terminal. They occur only inside strings, where the escape is valid."""
    return _JSON_RAW.sub(lambda m: "\\u%04x" % ord(m.group()), text) if _JSON_RAW.search(text) else text


def shell_quote(word: str) -> str:
    """`word` as one shell word that gives back exactly `word`: `shlex.quote` when it holds no control
    character; else ANSI-C quoting, `$'...'` (bash, zsh, ksh), with the control characters, backslashes
    and single quotes escaped, so the command is both visible and runnable."""
    if not _CONTROL.search(word):
        return shlex.quote(word)
    body = word.replace("\\", "\\\\").replace("'", "\\'")
    body = _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()) if ord(m.group()) < 0x100
                        else "\\u%04x" % ord(m.group()), body)
    return f"$'{body}'"


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(key, ensure_ascii=False, sort_keys=True)


def show_command(out_dir: str, key: Any) -> str:
    """The `parity show` command for one record (a `<dir>` placeholder kept as is), each word `shell_quote`d:
    a key with control characters gives `parity show out $'a\\x1bb'`, which runs."""
    directory = out_dir if out_dir.startswith("<") else shell_quote(out_dir)
    return f"parity show {directory} {shell_quote(_key_text(key))}"
