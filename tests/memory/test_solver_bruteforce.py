"""solve_buffer_memory against exhaustive search: on small hand-made lifetime sets its arena is the smallest
any placement at aligned offsets achieves; on random sets it is valid (buffers alive together never share
bytes) and never worse than placing the buffers in any one of its orders; buffers of one size (the
Snippets scratchpad rows) take exactly as many slots as are ever alive at once."""
import itertools

import pytest
from hypothesis import given, settings, strategies as st

from snipjit.memory.solver import ALIGNMENT, BufferRequest, solve_buffer_memory


def slots(r: BufferRequest) -> int:
    """The buffer's size in aligned slots (an empty buffer takes one)."""
    return -(-max(r.size, 1) // ALIGNMENT)


def alive_together(a: BufferRequest, b: BufferRequest) -> bool:
    return a.first <= b.last and b.first <= a.last


def optimal_slots(requests: list[BufferRequest], bound: int) -> int:
    """The smallest arena (in slots) over every placement of the buffers at aligned offsets below
    `bound`: depth-first over the offsets of each buffer in turn, pruned by the best arena found."""
    n = len(requests)
    size = [slots(r) for r in requests]
    order = sorted(range(n), key=lambda i: -size[i])
    clashes = [[j for j in range(n) if j != i and alive_together(requests[i], requests[j])] for i in range(n)]
    offset: list[int | None] = [None] * n
    best = bound

    def place(k: int, top: int) -> None:
        nonlocal best
        if top >= best:
            return
        if k == n:
            best = top
            return
        i = order[k]
        for o in range(best - size[i] + 1):
            if all(offset[j] is None or o + size[i] <= offset[j] or offset[j] + size[j] <= o for j in clashes[i]):
                offset[i] = o
                place(k + 1, max(top, o + size[i]))
                offset[i] = None

    place(0, 0)
    return best


def check_valid(requests: list[BufferRequest], plan) -> None:
    assert set(plan.offsets) == {r.key for r in requests}
    for r in requests:
        off = plan.offsets[r.key]
        assert off % ALIGNMENT == 0 and 0 <= off and off + slots(r) * ALIGNMENT <= plan.arena_size, (r, off)
    for a, b in itertools.combinations(requests, 2):
        if alive_together(a, b):
            lo_a, lo_b = plan.offsets[a.key] // ALIGNMENT, plan.offsets[b.key] // ALIGNMENT
            assert lo_a + slots(a) <= lo_b or lo_b + slots(b) <= lo_a, f"{a} and {b} are alive together but overlap"


def buffers(*specs) -> list[BufferRequest]:
    """Buffers named b0, b1, ... from (slots, first, last); sizes are odd byte counts within their slots."""
    return [BufferRequest(f"b{i}", n * ALIGNMENT - 3, first, last) for i, (n, first, last) in enumerate(specs)]


HAND_MADE = {
    # two buffers alive at every step: the widest step decides
    "pair_per_step": buffers((2, 0, 1), (3, 1, 2), (1, 2, 3), (4, 3, 3)),
    # a long-lived small buffer under short big ones
    "long_small_under_big": buffers((1, 0, 9), (4, 1, 2), (4, 3, 4), (4, 5, 6), (2, 7, 9)),
    # a big buffer freed half way: the later ones fit into its place
    "refill_a_hole": buffers((5, 0, 2), (2, 0, 5), (2, 3, 5), (3, 3, 4), (1, 5, 6)),
    # a diamond: split, two branches, join
    "diamond": buffers((2, 0, 1), (3, 1, 3), (3, 1, 2), (2, 3, 4), (2, 4, 5)),
    # all alive at one step but never all at once elsewhere
    "crowded_step": buffers((1, 0, 3), (2, 1, 3), (3, 2, 3), (1, 3, 6), (2, 3, 4)),
    # the same buffer sizes in a chain: the smallest arena is two of them
    "chain_of_equals": buffers(*((2, i, i + 1) for i in range(6))),
    # one step per buffer: all at offset 0
    "sequence": buffers((3, 0, 0), (1, 1, 1), (6, 2, 2), (2, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(HAND_MADE))
def test_hand_made_sets_are_packed_as_tightly_as_any_placement(name):
    requests = HAND_MADE[name]
    plan = solve_buffer_memory(requests)
    check_valid(requests, plan)
    assert plan.arena_size == optimal_slots(requests, plan.arena_size // ALIGNMENT + 1) * ALIGNMENT


def test_the_brute_force_finds_better_placements_than_a_bad_bound():
    # the search is not just echoing its bound: from a loose one it finds the tight arena
    assert optimal_slots(HAND_MADE["diamond"], 100) == 8          # b0, b1 and b2 at step 1
    assert optimal_slots(HAND_MADE["sequence"], 100) == 6
    assert optimal_slots(HAND_MADE["chain_of_equals"], 100) == 4


@pytest.mark.xfail(strict=True, reason="solve_buffer_memory keeps the best of four greedy orders; none puts b1 at the "
                                       "bottom (below b0 and b2, beside b3), so it needs 11 slots where 9 suffice")
def test_four_buffers_where_every_order_misses_the_optimum():
    requests = buffers((3, 2, 4), (3, 3, 6), (3, 4, 4), (5, 5, 8))
    plan = solve_buffer_memory(requests)
    check_valid(requests, plan)
    assert plan.arena_size == optimal_slots(requests, plan.arena_size // ALIGNMENT) * ALIGNMENT == 9 * ALIGNMENT


# ---- random sets -----------------------------------------------------------------------------------
def lowest_fit(order: list[BufferRequest]) -> int:
    """Place buffers in this order, each at the lowest aligned offset free over its lifetime; the arena."""
    placed: list[tuple[BufferRequest, int]] = []
    for r in order:
        offset = 0
        while clash := [o + slots(p) for p, o in placed if alive_together(p, r)
                        and o < offset + slots(r) and offset < o + slots(p)]:
            offset = max(clash)
        placed.append((r, offset))
    return max((o + slots(r) for r, o in placed), default=0) * ALIGNMENT


ORDERS = {   # the orders the solver documents
    "largest first": lambda r: (-r.size, r.first, r.last),
    "longest-lived first": lambda r: (-(r.last - r.first), -r.size, r.first),
    "largest size x lifetime first": lambda r: (-r.size * (r.last - r.first + 1), r.first),
    "by start": lambda r: (r.first, -r.size),
}

lifetimes = st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 10), st.integers(0, 5)), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(lifetimes)
def test_random_sets_are_valid_and_no_worse_than_any_order(specs):
    requests = [BufferRequest(i, size, first, first + length) for i, (size, first, length) in enumerate(specs)]
    plan = solve_buffer_memory(requests)
    check_valid(requests, plan)
    assert plan.arena_size <= min(lowest_fit(sorted(requests, key=key)) for key in ORDERS.values())
    assert plan.total_size == sum(slots(r) for r in requests) * ALIGNMENT


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), min_size=1, max_size=15))
def test_equal_sizes_take_as_many_slots_as_are_ever_alive_at_once(specs):
    # Snippets buffers are all one row: the placement is an interval colouring, which by-start order solves
    requests = [BufferRequest(i, ALIGNMENT, first, first + length) for i, (first, length) in enumerate(specs)]
    plan = solve_buffer_memory(requests)
    check_valid(requests, plan)
    alive = max(sum(1 for r in requests if r.first <= t <= r.last) for t in range(40))
    assert plan.arena_size == alive * ALIGNMENT
