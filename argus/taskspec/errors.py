"""The one exception the TaskSpec package raises for bad input, and a collector that lets a
check report every problem it can find instead of stopping at the first."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import NamedTuple

__all__ = ["MAX_PROBLEMS", "Problem", "Problems", "TaskSpecError"]

# A hostile spec could name thousands of bad paths; the answer stays small.
MAX_PROBLEMS = 50


class Problem(NamedTuple):
    """One thing to change: where (``field``) and what (``message``)."""

    field: str
    message: str


class TaskSpecError(ValueError):
    """A TaskSpec was rejected (the API answers 4xx).

    ``field`` names what is wrong: a spec field (``nnodes``, ``train_file``,
    ``extra_overrides[2]``), or a token of an advanced command (``command[;]``,
    ``command[data.train_files]``). ``message`` says what is wrong and what would be accepted.
    ``problems`` holds every problem found (the first is ``field``/``message``);
    ``str(exc)`` joins them all.
    """

    def __init__(self, field: str, message: str, *, more: Iterable[Problem] = ()) -> None:
        self.problems: tuple[Problem, ...] = (Problem(field, message), *more)
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in self.problems))
        self.field = field
        self.message = message

    @classmethod
    def of(cls, problems: Iterable[Problem]) -> TaskSpecError:
        """One error carrying ``problems`` (at least one)."""
        first, *rest = problems
        return cls(first.field, first.message, more=rest)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # Keep every problem through pickle (multiprocessing, Ray).
        return (_rebuild, (type(self), self.problems))


def _rebuild(cls: type[TaskSpecError], problems: tuple[tuple[str, str], ...]) -> TaskSpecError:
    return cls.of(Problem(*p) for p in problems)


class Problems:
    """Problems found so far. Checks that do not depend on each other run under
    :meth:`catch`, so one refusal does not hide the next; :meth:`raise_if_any` ends it."""

    def __init__(self, items: Iterable[Problem] = ()) -> None:
        self.items: list[Problem] = list(items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, field: str, message: str) -> None:
        self.items.append(Problem(field, message))

    @contextlib.contextmanager
    def catch(self) -> Iterator[None]:
        """Record a TaskSpecError raised inside the block instead of letting it escape."""
        try:
            yield
        except TaskSpecError as exc:
            self.items.extend(exc.problems)

    def raise_if_any(self) -> None:
        """Raise one TaskSpecError with every problem (at most MAX_PROBLEMS, then a count)."""
        if not self.items:
            return
        unique = list(dict.fromkeys(self.items))  # the same problem found twice is one
        if len(unique) > MAX_PROBLEMS:
            hidden = len(unique) - MAX_PROBLEMS
            unique = unique[:MAX_PROBLEMS] + [
                Problem("document", f"{hidden} more problems not shown; fix these first")
            ]
        raise TaskSpecError.of(unique)
