"""The one registry idiom: things of one kind (ops, boards, flash methods, NPU backends, schedulers,
losses, planners, engines) by name.

A thing is declared once, where it is defined, with `REGISTRY.register(name)` (a decorator) or
`REGISTRY.add(name, thing)`; the package that holds a kind imports its modules in its
`__init__.py`, so importing the package registers every member. Looking a name up with `get`
answers an unknown name with one message that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from zoflash.errors import ZoflashError

T = TypeVar("T")


class UnknownName(ZoflashError):
    """A name no thing of its kind is registered under."""


class Registry(Generic[T]):
    def __init__(self, kind: str, hint: str = ""):
        self.kind = kind  # what the things are, for messages: "flash method", "scheduler", ...
        self.hint = hint  # where to look for the known ones, e.g. "see `zoflash boards`"
        self._items: dict[str, T] = {}

    def add(self, name: str, thing: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        self._items[name] = thing
        return thing

    def register(self, name: str) -> Callable[[T], T]:
        def declare(thing: T) -> T:
            return self.add(name, thing)

        return declare

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(self._items) or "none"
            hint = f"; {self.hint}" if self.hint else ""
            raise UnknownName(f"unknown {self.kind} '{name}' (known: {known}){hint}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(self._items.items())

    def values(self) -> Iterator[T]:
        return iter(self._items.values())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
