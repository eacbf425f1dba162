"""`report.redact`: what parity writes into the out folder and prints when no raw value may leave (pure).

Under redaction reports carry hashes and field names only (docs/contract.md, section 3). The same holds for
the other text a run leaves: a quarantine entry keeps its location, its reason with the values taken out and no
preview; an error message names a record by its key fingerprint, not its key, and withholds what user code
said (an exception's message can quote any value).
"""
from __future__ import annotations

import json
import re
from typing import Any

from parity.encoding import fingerprint

__all__ = ["REDACTED", "key_fingerprint", "redact_entry", "redact_message", "redact_reason"]

REDACTED = "<redacted>"
# a value as parity's reasons show it: a quoted string (maybe bytes), a number, a list or mapping shown short
_VALUE = r"""(?:b?'(?:[^'\\]|\\.)*'|b?"(?:[^"\\]|\\.)*"|[-+]?(?:\d|\.\d|inf|nan)[\w.+-]*|\[[^\]]*\]?|\{[^}]*\}?)"""
# "got 'abc'", "got the string 'yesterday'", "the number 1e400", "cannot take the value 'abc'"; not counts such
# as "expected 5 columns, got 3" or "got 2 values"
_SHOWN = re.compile(r"(?<!columns, )(\bgot (?:the string )?|\bthe number |\bthe value )" + _VALUE +
                    r"(?! values?\b)")
_RECORD = re.compile(r"\brecord ")
_SAID = re.compile(r"\b(raised [A-Za-z_][\w.]*)(: .*?)(?=(?:; [a-z]| \(traceback: |$))", re.S)


def redact_reason(reason: str) -> str:
    """A quarantine reason (or any message) with the values it shows replaced by `<redacted>`; field names,
    types and positions stay: `field 'id': expected int64, got 'abc'` gives `field 'id': expected int64, got
    <redacted>`."""
    return _SHOWN.sub(lambda m: m.group(1) + REDACTED, reason)


def redact_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A quarantine.jsonl entry as written under redaction: location, redacted reason and kind, no preview."""
    from parity.capture import reason_kind

    reason = redact_reason(str(entry.get("reason", "")))
    return dict(entry, reason=reason, reason_kind=reason_kind(reason), preview="")


def key_fingerprint(key: Any) -> str:
    """How a redacted message names a record: the XXH3-128 of its key's canonical bytes, in hex (the
    `key_fp` of its fingerprint set rows)."""
    return fingerprint.key_fingerprint(key).hex()


def redact_message(message: str) -> str:
    """An error message with each `record <key>` naming the key's fingerprint instead (`record key_fp
    9f..`), what user code said in `raised ValueError: ...` withheld, and shown values redacted."""
    out, position = [], 0
    for match in _RECORD.finditer(message):
        if match.start() < position:
            continue
        try:
            key, end = json.JSONDecoder().raw_decode(message, match.end())
        except ValueError:
            continue
        out.append(message[position:match.end()])
        try:
            out.append(f"key_fp {key_fingerprint(key)}")
        except TypeError:
            out.append(REDACTED)
        position = end
    out.append(message[position:])
    text = "".join(out)
    text = _SAID.sub(lambda m: m.group(1) + " (its message is withheld under report.redact)", text)
    return redact_reason(text)
