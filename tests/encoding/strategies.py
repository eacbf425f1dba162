"""The hypothesis strategies of values the canonical encoding covers, shared by the encoding's property tests:
text of any code point, integers past 64 bits, floats with their edge cases, hashable scalars, and values nested
from given leaves."""
from __future__ import annotations

from hypothesis import strategies as st


def text(max_size: int = 12) -> st.SearchStrategy[str]:
    """Text of any code point, surrogates and unassigned ones included."""
    return st.text(st.characters(exclude_categories=()), max_size=max_size)


TEXT = text()
INTS = st.integers() | st.integers(-(2**130), 2**130) | st.integers(-(2**64), 2**64)
FLOATS = st.floats() | st.sampled_from([0.0, -0.0, float("nan"), -float("nan"), float("inf"), -float("inf")])
HASHABLE = st.none() | st.booleans() | INTS | FLOATS | TEXT | st.binary(max_size=8) | st.dates()


def nested(leaves: st.SearchStrategy, *, keys: st.SearchStrategy = TEXT, dict_size: int = 6,
           hashable_keys: st.SearchStrategy | None = HASHABLE, max_leaves: int = 30) -> st.SearchStrategy:
    """Values nested from `leaves`: lists (at most 5 items), pairs, dicts with `keys` (at most `dict_size`
    entries) and, unless `hashable_keys` is None, dicts with those keys (at most 4 entries)."""
    def containers(children: st.SearchStrategy) -> st.SearchStrategy:
        found = (st.lists(children, max_size=5) | st.tuples(children, children)
                 | st.dictionaries(keys, children, max_size=dict_size))
        if hashable_keys is not None:
            found |= st.dictionaries(hashable_keys, children, max_size=4)
        return found

    return st.recursive(leaves, containers, max_leaves=max_leaves)
