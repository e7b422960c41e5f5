"""What one function's analysis read of its file's module level: imports, integer constants, string lines.

A function's diagnostics depend on its own text, the settings, the file's API generation — and on what
the analysis reads of the module: the imports its names resolve through (``nl`` ->
``neuronxcc.nki.language``), the integer constants it reads (a tile size), and, if a rule reads the
context's ``text`` (a task's ``TARGET = "trn3"``), the file's column-0 ``NAME = "string"`` lines. ``Recording`` is the dict the analysis gets for ``aliases`` and ``constants``: it
notes every key looked up, with the value it had (``None``: not bound), and notes "everything" as soon as
anything reads the dict as a whole (iteration, ``len``, comparison, a copy) — so whatever the
interpreter or a rule does with the context, what it could have seen is recorded. ``Reads`` is that
record, and ``Reads.hold(now)`` says whether the file's current bindings give every recorded read the
same answer: the analysis is a deterministic function of its inputs, so if they do, running it again
would give the same diagnostics, and ``check_text`` reuses them. Adding an unrelated constant, import
or helper re-analyses nothing; changing a constant a kernel uses re-analyses exactly the functions that
read it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

V = TypeVar("V")
# (name, value it had or None) for each key read; or None: the whole dict was read (then ``whole`` holds it)
KeyReads = tuple[tuple[str, Any], ...] | None


class Recording(dict[str, V]):
    """A dict that records the keys read from it (and whether it was read as a whole)."""

    __slots__ = ("read", "whole")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: dict[str, Any] = {}
        self.whole = False

    # -- reads of one key ---------------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        value = dict.get(self, key)
        self.read[key] = value
        return default if value is None else value

    def __getitem__(self, key: str) -> V:
        value = dict.get(self, key)
        self.read[key] = value
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            self.whole = True
            return dict.__contains__(self, key)
        value = dict.get(self, key)
        self.read[key] = value
        return value is not None

    # -- reads of the whole dict (and mutations: nothing should mutate a context, but if it does it saw it all)
    def _all(self) -> None:
        self.whole = True

    def __iter__(self) -> Iterator[str]:
        self._all()
        return dict.__iter__(self)

    def __reversed__(self) -> Iterator[str]:
        self._all()
        return dict.__reversed__(self)

    def __len__(self) -> int:
        self._all()
        return dict.__len__(self)

    def __eq__(self, other: object) -> bool:
        self._all()
        if isinstance(other, Recording):
            other._all()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._all()
        return dict.__repr__(self)

    def __or__(self, other: Any) -> Any:
        self._all()
        return dict(dict.items(self)) | other

    def __ror__(self, other: Any) -> Any:
        self._all()
        return other | dict(dict.items(self))

    def keys(self) -> Any:
        self._all()
        return dict.keys(self)

    def values(self) -> Any:
        self._all()
        return dict.values(self)

    def items(self) -> Any:
        self._all()
        return dict.items(self)

    def copy(self) -> dict[str, V]:
        self._all()
        return dict(dict.items(self))

    def __copy__(self) -> dict[str, V]:
        return self.copy()

    def __deepcopy__(self, memo: Any) -> dict[str, V]:
        return self.copy()

    def __reduce__(self) -> Any:
        self._all()
        return (dict, (dict(dict.items(self)),))

    def __setitem__(self, key: str, value: V) -> None:
        self._all()
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        self._all()
        dict.__delitem__(self, key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._all()
        return dict.setdefault(self, key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self._all()
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, V]:
        self._all()
        return dict.popitem(self)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._all()
        dict.update(self, *args, **kwargs)

    def clear(self) -> None:
        self._all()
        dict.clear(self)

    def recorded(self) -> KeyReads:
        return None if self.whole else tuple(self.read.items())


@dataclass(frozen=True)
class Now:
    """The file's current module-level bindings, in the forms ``Reads.hold`` compares with."""

    aliases: dict[str, str]
    constants: dict[str, int]
    all_aliases: tuple[tuple[str, str], ...]  # in file order: a rule may depend on the order
    all_constants: tuple[tuple[str, int], ...]
    module_text: str  # the column-0 ``NAME = "string"`` lines

    @staticmethod
    def of(aliases: dict[str, str], constants: dict[str, int], module_text: str) -> Now:
        return Now(aliases, constants, tuple(aliases.items()), tuple(constants.items()), module_text)


@dataclass(frozen=True)
class Reads:
    """What one analysis read: per dict, the keys with the values they had, or the whole dict."""

    aliases: KeyReads
    constants: KeyReads
    whole_aliases: tuple[tuple[str, str], ...] = ()  # when ``aliases`` is None
    whole_constants: tuple[tuple[str, int], ...] = ()
    module_text: str | None = None  # the string lines, if the analysis read them

    @staticmethod
    def of(aliases: Recording[str], constants: Recording[int], module_text: str | None) -> Reads:
        a, c = aliases.recorded(), constants.recorded()
        return Reads(a, c, tuple(dict.items(aliases)) if a is None else (),
                     tuple(dict.items(constants)) if c is None else (), module_text)

    def hold(self, now: Now) -> bool:
        """Whether every recorded read gives the same answer under ``now``."""
        if self.module_text is not None and self.module_text != now.module_text:
            return False
        if self.aliases is None:
            if self.whole_aliases != now.all_aliases:
                return False
        else:
            get = now.aliases.get
            for key, value in self.aliases:
                if get(key) != value:
                    return False
        if self.constants is None:
            return self.whole_constants == now.all_constants
        get_c = now.constants.get
        return all(get_c(key) == value for key, value in self.constants)
