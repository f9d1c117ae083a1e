"""griffe extension: the names a package exports lazily (``__all__`` + a module ``__getattr__``) in the API reference.

``graphnorm.train`` and ``graphnorm.sweep`` list ``run``, ``train``, ``CollapseMonitor``, ``run_sweep``, ... in
``__all__`` but import them only on first use, through ``__getattr__``, so that their light submodules import
alone. griffe reads the code without running it and finds no such member in the package, so mkdocstrings would
document only the package docstring. :class:`LazyExports` adds, for each exported name the package does not define,
an alias to the one submodule that defines it (searched statically, no import), so ``::: graphnorm.train`` lists
them under the names users import (``graphnorm.train.run``).
"""

from __future__ import annotations

import ast
import contextlib

import griffe


def defining_submodule(package: griffe.Module, name: str) -> griffe.Object | None:
    """The object ``name`` as defined (not imported) by a submodule of ``package``, if exactly one defines it."""
    found = [
        module.members[name]
        for module in package.modules.values()
        if name in module.members and not module.members[name].is_alias
    ]
    return found[0] if len(found) == 1 else None


def exported_names(module: griffe.Module) -> list[str]:
    """The names of ``module.__all__`` as griffe read them (strings or name expressions), then the keys of a
    ``_LAZY`` table of names loaded on first use (where one exports a name that ``__all__`` leaves out because it
    needs an optional package)."""
    names = [str(getattr(name, "name", name)) for name in module.exports or []]
    lazy = module.members.get("_LAZY")
    if lazy is not None and not lazy.is_alias and getattr(lazy, "value", None) is not None:
        with contextlib.suppress(ValueError, SyntaxError):  # not a literal table: __all__ alone
            names += [name for name in ast.literal_eval(str(lazy.value)) if name not in names]
    return names


def add_lazy_exports(package: griffe.Module) -> list[str]:
    """Aliases for the exported names that ``package`` and its subpackages do not define; their dotted paths."""
    added = []
    for name in exported_names(package):
        if name in package.members:
            continue
        target = defining_submodule(package, name)
        if target is not None:
            package.set_member(name, griffe.Alias(name, target.path, parent=package))
            added.append(f"{package.path}.{name}")
    for sub in package.modules.values():
        if sub.is_package or sub.is_subpackage:
            added += add_lazy_exports(sub)
    return added


class LazyExports(griffe.Extension):
    """Adds the lazily exported names of every loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        add_lazy_exports(pkg)
