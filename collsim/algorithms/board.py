"""A board of named SimPy events, so that processes can wait for what others have not started yet."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import simpy
from simpy.events import Event

__all__ = ["EventBoard"]


class EventBoard:
    """Events keyed by ``(who, what)``, created on first use by either side.

    Examples
    --------
    >>> env = simpy.Environment()
    >>> board = EventBoard(env)
    >>> def waiter(env):
    ...     yield board.get("r0", "ready")
    ...     return env.now
    >>> p = env.process(waiter(env))
    >>> _ = env.timeout(3).callbacks.append(lambda _e: board.fire("r0", "ready"))
    >>> env.run()
    >>> p.value
    3
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._events: dict[tuple[Hashable, Hashable], Event] = {}
        self._owned: set[tuple[Hashable, Hashable]] = set()  # keys whose event the board made (a placeholder)
        #: state the processes of one simulation share beyond events (e.g. the ring machines, by entity)
        self.shared: dict[Hashable, Any] = {}
        # one event, already processed, stands for every key whose event has fired and been processed: a process
        # yielding it goes on at once, as with the original; the original (its callbacks, its dict) is freed
        self._fired = Event(env)
        self._fired._ok = True
        self._fired._value = None
        self._fired.callbacks = None  # type: ignore[assignment]  # processed

    def _settle(self, key: tuple[Hashable, Hashable]) -> None:
        """Once ``key``'s event is processed, keep only the shared processed event for it."""
        self._events[key] = self._fired
        self._owned.discard(key)

    def get(self, who: Hashable, what: Hashable) -> Event:
        """The event for ``(who, what)``, created untriggered if nobody asked before."""
        key = (who, what)
        ev = self._events.get(key)
        if ev is None:
            ev = self._events[key] = Event(self.env)
            self._owned.add(key)
            ev.callbacks.append(lambda _e: self._settle(key))  # type: ignore[union-attr]
        return ev

    def fire(self, who: Hashable, what: Hashable) -> None:
        """Trigger the event for ``(who, what)`` now (once); an event bound to a source fires with its source."""
        ev = self.get(who, what)
        if ev is not self._fired and not ev.triggered and (who, what) in self._owned:
            ev.succeed()

    def bind(self, who: Hashable, what: Hashable, source: Event) -> None:
        """Fire ``(who, what)`` when ``source`` fires (``source`` itself stands for it when nobody waits yet)."""
        key = (who, what)
        placeholder = self._events.get(key)
        if placeholder is None:
            self._events[key] = source
            if source.callbacks is None:  # already processed
                self._events[key] = self._fired
            else:
                source.callbacks.append(lambda _e: self._settle(key))
        elif key not in self._owned:
            return  # already bound to another source (a symmetric twin that arrives at the same time)
        elif source.processed:
            self.fire(who, what)
        else:
            source.callbacks.append(lambda _e: self.fire(who, what))
