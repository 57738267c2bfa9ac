"""The views the comparison walks, in this order: within one level, the differences keep it.

Adding a view: a `View` subclass in one of these modules (or a new one), listed here.
"""

from __future__ import annotations

from farm.assure.elfdiff.views.base import View
from farm.assure.elfdiff.views.code import Descriptors, Text
from farm.assure.elfdiff.views.identity import Linker, Target
from farm.assure.elfdiff.views.metadata import Kernels, OtherMetadata
from farm.assure.elfdiff.views.structure import ElfHeader, Layout, Sections, Symbols

VIEWS: tuple[View, ...] = (Linker(), Target(), Kernels(), OtherMetadata(), Descriptors(), Text(), Sections(),
                           Symbols(), ElfHeader(), Layout())

__all__ = ["VIEWS", "View"]
