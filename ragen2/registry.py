"""A tiny name -> object registry, so components are chosen by config name instead of if-chains."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps config names to implementations; unknown names fail with the list of allowed ones.

    ``ordered``: list the names in the order they were registered (the built-ins in their
    documented order, then a plugin's) instead of sorted."""

    def __init__(self, kind: str, *, ordered: bool = False) -> None:
        self.kind = kind
        self.ordered = ordered
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T) -> T:
        return self.register(name)(obj)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            allowed = ", ".join(self.names()) or "(none registered)"
            raise KeyError(f"unknown {self.kind} {name!r}; allowed: {allowed}") from None

    def names(self) -> list[str]:
        return list(self._items) if self.ordered else sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
