"""make_room: a full memo drops other owners' entries before the running owner's, and never exceeds its cap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dnnplace.utils.owned_cache import make_room

OWNERS = [object() for _ in range(3)]


@given(st.lists(st.integers(0, 2), max_size=40), st.integers(0, 2), st.integers(1, 30), st.integers(1, 10))
def test_make_room_against_the_rule(owned: list[int], who: int, cap: int, incoming: int) -> None:
    cache = {k: (OWNERS[o], k) for k, o in enumerate(owned)}
    before = dict(cache)
    owner = OWNERS[who]
    make_room(cache, owner, cap, incoming)
    mine = {k: v for k, v in before.items() if v[0] is owner}
    if len(before) + incoming <= cap:
        assert cache == before  # room enough: nothing dropped
    elif len(mine) + incoming <= cap:
        assert cache == mine  # the other owners' entries went, the running owner's stayed
    else:
        assert cache == {}
    assert len(cache) + incoming <= cap or incoming > cap

