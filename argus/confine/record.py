"""``@fields``: a tuple subclass whose annotated names read its items, for the records on
the worker launcher's import path (``argus.confine.worker``). Not ``typing.NamedTuple`` nor
``collections.namedtuple``: the launcher runs before every Ray worker, and typing's import
(with ``re``) was over a quarter of its start-up, collections' 2 ms more."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's (see above)
if TYPE_CHECKING:
    from typing import TypeVar

    Record = TypeVar("Record", bound=tuple)  # type: ignore[type-arg]

__all__ = ["fields"]


def fields(cls: type[Record]) -> type[Record]:
    """Give ``cls`` (a tuple subclass with ``__slots__ = ()`` and a ``__new__`` that takes
    the fields in order and builds the tuple of them) a read-only property for each name
    annotated in its body, the first item first, ``_fields``, the names in order, and what
    pickle and copy need to rebuild it."""
    names = tuple(name for name in cls.__dict__.get("__annotations__", {}) if not name.startswith("_"))
    for index, name in enumerate(names):
        setattr(cls, name, _item(index))
    setattr(cls, "_fields", names)
    # pickle and copy rebuild a tuple subclass as cls.__new__(cls, *__getnewargs__()):
    # tuple's own gives the whole tuple as one argument, which ``__new__`` would take for
    # its first field.
    setattr(cls, "__getnewargs__", _items)
    return cls


def _items(self: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(self)


def _item(index: int) -> property:
    def get(self: tuple[object, ...]) -> object:
        return self[index]

    return property(get, doc=f"item {index}")
