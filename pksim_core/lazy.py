"""The one place that imports a module by a name it is given: a table of names, each to
``"module:attribute"``, resolved when first asked for. The CLI's commands and the package's
API attributes are such tables (``pksim_cli.main.COMMANDS``, ``pksim.API``), so that
``pksim --version`` or ``import pksim`` loads nothing it does not use (docs/design/layout.md, Code
layout). The tables are data: tests/test_structure.py reads every ``LazyTable({...})`` as
the import edges of the module that holds it and checks them like any import."""
from __future__ import annotations

import importlib
from typing import Any


class LazyTable:
    """Names to ``"module:attribute"``; ``load(name)`` imports the module once (Python keeps
    it) and gives the attribute."""

    def __init__(self, entries: dict[str, str]):
        for name, target in entries.items():
            module, sep, attribute = target.partition(":")
            if not (sep and module and attribute):
                raise ValueError(f"lazy entry {name!r}: expected 'module:attribute', "
                                 f"got {target!r}")
        self.entries = dict(entries)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def names(self) -> list[str]:
        return list(self.entries)

    def load(self, name: str) -> Any:
        module, _, attribute = self.entries[name].partition(":")
        return getattr(importlib.import_module(module), attribute)
