"""Rendezvous ownership: every member computes the same owner, the split is even, and a member that
joins or leaves moves only the items it wins or held."""

from __future__ import annotations

from collections import Counter

from jqruntime.stores.membership import deal_evenly, owned_by, owner

ITEMS = [f"queue.{i}" for i in range(3000)]


def test_no_member_owns_nothing_and_a_single_member_owns_all() -> None:
    assert owner("q", []) is None
    assert owned_by("a", ["a"], ITEMS) == ITEMS


def test_the_owner_does_not_depend_on_the_order_of_the_member_list() -> None:
    assert [owner(i, ["a", "b", "c"]) for i in ITEMS] == [owner(i, ["c", "a", "b"]) for i in ITEMS]


def test_three_members_split_the_items_evenly_and_exactly() -> None:
    members = ["host-1:10", "host-2:11", "host-3:12"]
    shares = [owned_by(m, members, ITEMS) for m in members]
    assert sorted(i for share in shares for i in share) == sorted(ITEMS), "each item exactly once"
    assert all(800 <= len(share) <= 1200 for share in shares), [len(s) for s in shares]


def test_a_member_leaving_moves_only_its_own_items_and_a_joiner_takes_only_what_it_wins() -> None:
    before = {i: owner(i, ["a", "b", "c"]) for i in ITEMS}
    after_leave = {i: owner(i, ["a", "c"]) for i in ITEMS}
    moved = [i for i in ITEMS if before[i] != after_leave[i]]
    assert moved, "b owned something"
    assert {before[i] for i in moved} == {"b"}
    after_join = {i: owner(i, ["a", "b", "c", "d"]) for i in ITEMS}
    changed = Counter(after_join[i] for i in ITEMS if before[i] != after_join[i])
    assert set(changed) == {"d"}


def test_an_even_deal_gives_each_member_its_share_the_same_for_every_member() -> None:
    parts = [f"jobq.schedule/{p}" for p in range(24)]
    dealt = deal_evenly(parts, ["a", "b", "c"])
    assert sorted(dealt) == sorted(parts)
    assert Counter(dealt.values()) == {"a": 8, "b": 8, "c": 8}
    assert deal_evenly(parts, ["c", "a", "b"]) == dealt, "the member list's order does not matter"
    assert Counter(deal_evenly(parts[:7], ["a", "b", "c"]).values()).most_common(1)[0][1] == 3
    assert deal_evenly(parts, []) == {}


def test_a_member_gone_from_an_even_deal_moves_its_items_and_few_others() -> None:
    parts = [f"jobq.schedule/{p}" for p in range(24)]
    before = deal_evenly(parts, ["a", "b", "c"])
    after = deal_evenly(parts, ["a", "b"])
    assert Counter(after.values()) == {"a": 12, "b": 12}
    moved_between_survivors = [p for p in parts if before[p] != "c" and after[p] != before[p]]
    assert len(moved_between_survivors) <= 2
