"""What a stage needs of a user's `module:attr` reference (a timestamp function, a WindowFn, a key function, a
coder factory, a seed function): its text, for messages, and the object it names.

A protocol rather than the config's `Ref` itself: a reference is imported with its config's folder first on
sys.path and names the process that loaded it when the import fails on a worker, which the config knows and the
stages need not. `parity.config.Ref` is the one implementation; the stages only hold and resolve it, so they
import nothing of the config that is built from them.
"""
from __future__ import annotations

from typing import Any, Protocol


class Reference(Protocol):
    """A `module:attr` reference to user code, imported when a stage is built."""

    @property
    def text(self) -> str:
        """The reference as the config gives it, e.g. `my_module:key_fn`."""

    def resolve(self) -> Any:
        """The object the reference names, imported.

        Raises:
            parity.errors.UserCodeError: the module or attribute cannot be imported.
        """
