"""Marking bookkeeping shared by Marker and Predictive Marker.

Cached keys sit in slots; a phase ends when a miss finds every cached key marked,
and then every key is unmarked. The unmarked keys are kept in a list (slot order at
the phase start, then swap-remove), so a random pick is O(1) and every engine that
follows the same steps with the same generator makes the same choice.
"""
from __future__ import annotations

from typing import Iterator


class MarkedCache:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.slots: list[int] = []        # slot -> key
        self.slot_of: dict[int, int] = {}  # key -> slot
        self.unmarked: list[int] = []
        self._unmarked_pos: dict[int, int] = {}
        self.phases = 0

    def __contains__(self, key: int) -> bool:
        return key in self.slot_of

    def __len__(self) -> int:
        return len(self.slots)

    def __iter__(self) -> Iterator[int]:
        return iter(self.slots)

    def is_marked(self, key: int) -> bool:
        return key in self.slot_of and key not in self._unmarked_pos

    def mark(self, key: int) -> None:
        pos = self._unmarked_pos.pop(key, None)
        if pos is None:
            return
        last = self.unmarked.pop()
        if last != key:
            self.unmarked[pos] = last
            self._unmarked_pos[last] = pos

    def start_phase_if_all_marked(self) -> bool:
        if self.unmarked:
            return False
        self.unmarked = list(self.slots)
        self._unmarked_pos = {key: i for i, key in enumerate(self.unmarked)}
        self.phases += 1
        return True

    def replace(self, victim: int, key: int) -> None:
        """Put ``key`` (marked) in ``victim``'s slot; the victim must be unmarked."""
        self.mark(victim)  # drops it from the unmarked list
        slot = self.slot_of.pop(victim)
        self.slots[slot] = key
        self.slot_of[key] = slot

    def add(self, key: int) -> None:
        """Insert ``key`` (marked) into a free slot."""
        self.slot_of[key] = len(self.slots)
        self.slots.append(key)
