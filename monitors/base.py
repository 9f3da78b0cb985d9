"""The one life cycle every monitor has: start() begins recording, stop() ends it and returns the result.

Like flent's runners: a new data source is one subclass. Monitors are context managers (the block
is the recorded span) and stop() is safe to call twice (teardown paths may reach it again).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

T = TypeVar("T")


class Monitor(ABC, Generic[T]):
    _result: T | None = None
    _running = False

    def start(self):  # noqa: ANN201 - returns self, typed by each subclass's use
        self._begin()
        self._running = True
        return self

    def stop(self) -> T:
        if self._running:
            self._running = False
            self._result = self._end()
        assert self._result is not None, f"{type(self).__name__}.stop() before start()"
        return self._result

    @abstractmethod
    def _begin(self) -> None: ...

    @abstractmethod
    def _end(self) -> T: ...

    def __enter__(self):  # noqa: ANN204
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._running:
            self.stop()
