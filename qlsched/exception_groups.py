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
    """Whether ``exc`` is a Ctrl-C: ``KeyboardInterrupt`` itself, a group holding one (Trio
    delivers it inside the group of whichever nursery it crossed), or an error raised from
    one: Python 3.11 wraps what a class body's ``__set_name__`` raises in a RuntimeError,
    and a Ctrl-C landing in a dataclass's creation (a module imported late, ``rich.table``
    as ``edge status`` renders) came out as "Error calling __set_name__", exit 1."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:  # a chain can loop back
        if isinstance(cause, KeyboardInterrupt):
            return True
        if isinstance(cause, BaseExceptionGroup) and cause.subgroup(KeyboardInterrupt) is not None:
            return True
        seen.add(id(cause))
        cause = cause.__cause__
    return False
