"""`import parity.beam as pb`: the taps users insert into their own Beam pipelines (defined in parity.taps).

The public name predates the package's layout; it stays the one users import, and the pickled DoFns of a tapped
job name `parity.taps`.
"""
from parity.taps import DROPPED_LATE, NOT_SEEN, UNTAPPED, TapStage, finalize, key_sampled, sampled

__all__ = ["DROPPED_LATE", "NOT_SEEN", "UNTAPPED", "TapStage", "finalize", "key_sampled", "sampled"]
