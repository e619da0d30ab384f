"""Reconnect backoff, shared by the hook's reporter and a relaying sidecar."""

from __future__ import annotations

import random


class Backoff:
    """Capped exponential backoff with full jitter."""

    def __init__(self, initial_s: float = 0.1, cap_s: float = 5.0) -> None:
        self.initial_s = initial_s
        self.cap_s = cap_s
        self._next = initial_s

    def reset(self) -> None:
        self._next = self.initial_s

    def next_delay(self, permanent: bool = False) -> float:
        if permanent:
            self._next = self.cap_s
        delay = random.uniform(self._next / 2, self._next)
        self._next = min(self.cap_s, self._next * 2)
        return delay
