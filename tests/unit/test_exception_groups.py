"""A nursery's group of one error comes out as that error; a group of several stays whole."""

from __future__ import annotations

import pytest

from qlsched.exception_groups import interrupted, single_leaf, single_leaf_unwrapped

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


def _raised_from(cause: BaseException | None) -> BaseException:
    try:
        raise RuntimeError("Error calling __set_name__") from cause
    except RuntimeError as exc:
        return exc


def _raised_while_handling(handled: BaseException) -> BaseException:
    try:
        try:
            raise handled
        except BaseException:
            raise ValueError("a bug in the handling")  # noqa: B904
    except ValueError as exc:
        return exc


def test_interrupted_sees_a_ctrl_c_as_the_cause_of_an_error() -> None:
    """Rule: an error raised from a KeyboardInterrupt (Python 3.11 wraps what a class's
    ``__set_name__`` raises, a dataclass's creation among them) is a Ctrl-C, through
    groups and chains; an error merely raised while one was handled is not, nor a chain
    that loops back on itself."""
    assert interrupted(_raised_from(KeyboardInterrupt()))
    assert interrupted(_raised_from(_raised_from(KeyboardInterrupt())))
    assert interrupted(_raised_from(BaseExceptionGroup("g", [KeyboardInterrupt()])))
    assert not interrupted(_raised_from(None))
    assert not interrupted(_raised_from(ValueError()))
    assert not interrupted(_raised_while_handling(KeyboardInterrupt()))
    loop = _raised_from(ValueError())
    assert loop.__cause__ is not None
    loop.__cause__.__cause__ = loop
    assert not interrupted(loop)
