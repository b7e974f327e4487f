"""The one exception the TaskSpec package raises for bad input."""

from __future__ import annotations

__all__ = ["TaskSpecError"]


class TaskSpecError(ValueError):
    """A TaskSpec was rejected (the API answers 4xx).

    ``field`` names what is wrong: a spec field (``nnodes``, ``train_file``,
    ``extra_overrides[2]``), or a token of an advanced command (``command[;]``,
    ``command[data.train_files]``). ``message`` says what is wrong and what would be accepted.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[type[TaskSpecError], tuple[str, str]]:
        # Keep the two-argument constructor working through pickle (multiprocessing, Ray).
        return (type(self), (self.field, self.message))
