"""A nursery's group of one error comes out as that error; a group of several stays whole."""

from __future__ import annotations

import pytest

from qlsched.exception_groups import single_leaf, single_leaf_unwrapped

KEY = KeyError("k")
VALUE = ValueError("v")


@pytest.mark.parametrize(
    ("group", "leaf"),
    [
        (ExceptionGroup("one", [KEY]), KEY),
        (ExceptionGroup("outer", [ExceptionGroup("inner", [KEY])]), KEY),
        (BaseExceptionGroup("base", [KeyboardInterrupt()]), "KeyboardInterrupt"),
        (ExceptionGroup("two", [KEY, VALUE]), None),
        (ExceptionGroup("outer", [ExceptionGroup("inner", [KEY, VALUE])]), None),
    ],
    ids=["one", "nested-one", "base", "two", "nested-two"],
)
def test_single_leaf(
    group: BaseExceptionGroup[BaseException], leaf: BaseException | str | None
) -> None:
    """Rule: the one exception through nested groups of one (a BaseException too); None
    when some level holds more than one."""
    found = single_leaf(group)
    if isinstance(leaf, str):
        assert type(found).__name__ == leaf
    else:
        assert found is leaf


def test_unwrapped_raises_the_leaf_itself_and_keeps_a_group_of_several() -> None:
    """Rule: inside ``single_leaf_unwrapped`` a group of one leaf is raised as that very
    exception; a group of several is raised unchanged, hiding none of them."""
    with pytest.raises(KeyError) as caught, single_leaf_unwrapped():
        raise ExceptionGroup("outer", [ExceptionGroup("inner", [KEY])])
    assert caught.value is KEY
    several = ExceptionGroup("two", [KEY, VALUE])
    with pytest.raises(ExceptionGroup) as group, single_leaf_unwrapped():
        raise several
    assert group.value is several
