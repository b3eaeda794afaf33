"""Sym: polynomials over master dims, with static dims folded to numbers."""
from hypothesis import given, settings, strategies as st

from snipjit.snippets.symbolic import Sym

D0, D1, D2 = Sym.dim(0), Sym.dim(1), Sym.dim(2)


def test_constants_and_dims():
    assert Sym.const(0) == Sym() and Sym.const(0).is_zero
    assert Sym.const(5).is_const and Sym.const(5).value == 5
    assert not D1.is_const and D1.value is None
    assert Sym.dim(1, [4, 37, None]) == Sym.const(37)
    assert Sym.dim(2, [4, 37, None]) == D2


def test_arithmetic_normalizes():
    assert D0 * D1 == D1 * D0
    assert D0 + D1 == D1 + D0
    assert D1 - D1 == Sym() and (D1 - D1).is_zero
    assert 3 * D1 + D1 == 4 * D1 == D1 * 4
    assert (D0 + 1) * (D0 - 1) == D0 * D0 - 1
    assert -(D0 * D2) + D2 * D0 == Sym()
    assert D1 + 0 == D1 and D1 * 1 == D1 and (D1 * 0).is_zero
    assert 2 + D1 == D1 + 2


def test_syms_are_hashable_keys():
    assert len({D0 * D1, D1 * D0, D0 + D1 - D1 + D1}) == 2


def test_text_form():
    assert str(Sym()) == "0"
    assert str(Sym.const(-37)) == "-37"
    assert str(-(D2 * 37)) == "-37*D2"
    assert str(D1 * D2 - D2) == "D1*D2 - D2"
    assert str(D0 + 2) == "2 + D0"


polys = st.recursive(
    st.one_of(st.integers(-50, 50).map(Sym.const), st.integers(0, 2).map(Sym.dim)),
    lambda inner: st.one_of(st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
                            st.tuples(inner, inner).map(lambda t: t[0] - t[1]),
                            st.tuples(inner, inner).map(lambda t: t[0] * t[1]),
                            inner.map(lambda p: -p)),
    max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(polys, polys, st.lists(st.integers(0, 40), min_size=3, max_size=3))
def test_evaluation_agrees_with_integer_arithmetic(p, q, dims):
    assert (p + q).evaluate(dims) == p.evaluate(dims) + q.evaluate(dims)
    assert (p - q).evaluate(dims) == p.evaluate(dims) - q.evaluate(dims)
    assert (p * q).evaluate(dims) == p.evaluate(dims) * q.evaluate(dims)
    if p.is_const:
        assert p.value == p.evaluate(dims)
