"""A view: one way of looking at two parsed code objects (their linker, their kernel metadata, their
.text...). Each is a small class; the comparison walks the list in `farm.assure.elfdiff.views`, so adding
a view means adding a class and listing it there."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

from farm.assure.elfdiff.difference import Difference
from farm.assure.elfdiff.parse import Parsed


class View(ABC):
    """Yields the differences this view sees between `a` and `b`, in the order a reader wants them."""

    @abstractmethod
    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        ...
