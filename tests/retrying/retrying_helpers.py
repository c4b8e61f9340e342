"""A fake monotonic clock and scripted callables for the retry-wrapper tests."""

from __future__ import annotations

from collections.abc import Iterable


class FakeClock:
    """Monotonic seconds that move only when slept on or when an attempt 'runs'."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Script:
    """A callable that raises the scripted errors in order, then returns ``result``.

    ``duration`` advances ``clock`` on every call, so deadlines see attempts take time;
    ``starts`` records the clock at each call.
    """

    def __init__(self, errors: Iterable[BaseException | None], result: object = "ok", *,
                 clock: FakeClock | None = None, duration: float = 0.0) -> None:
        self.errors = list(errors)
        self.result = result
        self.calls = 0
        self.clock = clock
        self.duration = duration
        self.starts: list[float] = []
        self.ends: list[float] = []

    def __call__(self) -> object:
        index = self.calls
        self.calls += 1
        if self.clock is not None:
            self.starts.append(self.clock.now)
            self.clock.now += self.duration
            self.ends.append(self.clock.now)
        error = self.errors[index] if index < len(self.errors) else None
        if error is not None:
            raise error
        return self.result
