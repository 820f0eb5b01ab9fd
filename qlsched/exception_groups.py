"""Exception groups at the edge of a nursery: a group of one error comes out as that error.

Trio wraps whatever a nursery's body or tasks raise in an ``ExceptionGroup``. Where the
caller handles one typed error (a command mapping it to a line and an exit code, an
embedder's ``except KeyError``), the owner of the nursery hands back the error alone when
the group holds exactly one; a group of several stays a group, so none of them is hidden.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def single_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` (through nested groups of one), or None when
    some level holds several."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc


@contextmanager
def single_leaf_unwrapped() -> Iterator[None]:
    """Within the block, a group with a single leaf is raised as that leaf."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaf = single_leaf(group)
        if leaf is None:
            raise
        raise leaf from None


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C: ``KeyboardInterrupt`` itself, or a group holding one
    (Trio delivers it inside the group of whichever nursery it crossed)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None
