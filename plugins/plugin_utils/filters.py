"""The entry point of the collection's filter plugins (plugins/filter/), written once.

Ansible loads a filter plugin file's ``FilterModule`` class and asks an instance for
``filters()``: filter name -> function. Each file subclasses :class:`FilterTable` and
names its filters in ``FILTERS``::

    class FilterModule(FilterTable):
        \"\"\"Ansible entry point.\"\"\"

        FILTERS: ClassVar[Filters] = {"bai_clock_assess": assess}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, ClassVar

# Filter name -> function.
Filters = Mapping[str, Callable[..., Any]]


class FilterTable:
    """A filter plugin's ``FilterModule``: ``filters()`` is its ``FILTERS``."""

    FILTERS: ClassVar[Filters] = {}

    def filters(self) -> dict[str, Any]:
        return dict(self.FILTERS)
