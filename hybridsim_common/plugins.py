"""Where plug-in code named ``module:attr`` in a scenario (a policy, a custom workload) is imported from: the one rule.

A scenario is data; naming a module in it must not run whatever file of that name lies next to it. So a plug-in
module is imported from the installed packages (``sys.path`` as the interpreter and ``PYTHONPATH`` set it) and from
the folders the user names (``--plugin-path DIR``, :func:`add_path`), and never

* from the scenario's folder (it is not searched), nor
* from the working directory that the interpreter put at the front of ``sys.path`` by itself (``python -m``,
  ``python -c``): a module found there is refused, with the option that allows it.

Installed plug-ins can also register under an entry-point group (``hybridsim.policies``), which needs no path at
all. Everything here imports nothing first-party.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

#: folders the user allowed (``--plugin-path``), resolved
_ALLOWED: list[str] = []


class PluginError(ImportError):
    """A plug-in module that may not be imported, or cannot be."""


def _real(path: str) -> str:
    return os.path.realpath(path or ".")


def add_path(path: str | os.PathLike) -> str:
    """Allow plug-in modules from folder ``path`` (put first on ``sys.path``); returns the resolved folder.
    ``NotADirectoryError`` if it is not a folder."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise NotADirectoryError(f"--plugin-path {path}: not a folder")
    real = _real(str(p))
    if real not in _ALLOWED:
        _ALLOWED.append(real)
    if real not in sys.path:
        sys.path.insert(0, real)
    importlib.invalidate_caches()
    return real


def allowed_paths() -> list[str]:
    return list(_ALLOWED)


def implicit_working_dir() -> str | None:
    """The working directory if the interpreter alone put it on ``sys.path`` (``''`` or ``sys.path[0]`` being
    it, as ``python -m`` / ``-c`` do) and neither ``PYTHONPATH`` nor ``--plugin-path`` named it; else None."""
    if sys.flags.safe_path or not sys.path:
        return None
    cwd = _real(os.getcwd())
    implicit = [i for i, p in enumerate(sys.path) if p in ("", ".")]
    if _real(sys.path[0]) == cwd:
        implicit.append(0)
    if not implicit:
        return None
    named = [p for i, p in enumerate(sys.path) if i not in implicit and _real(p) == cwd]
    return None if named or cwd in _ALLOWED else cwd


def _found_in(spec) -> list[str]:
    """The ``sys.path`` folder(s) a top-level module's spec was found in."""
    if spec.submodule_search_locations is not None:          # a package (or a namespace package)
        return [_real(os.path.dirname(loc)) for loc in spec.submodule_search_locations]
    if spec.origin and os.path.isabs(spec.origin):
        return [_real(os.path.dirname(spec.origin))]
    return []                                                 # built-in, frozen


def import_module(name: str):
    """``importlib.import_module(name)`` under the rule of this module. Raises :class:`PluginError` when the
    module would come from the working directory, ``ImportError`` when it is not found, and whatever the module
    raises while it is imported."""
    top = name.partition(".")[0]
    if top not in sys.modules:
        cwd = implicit_working_dir()
        if cwd is not None:
            try:
                spec = importlib.util.find_spec(top)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and cwd in _found_in(spec):
                raise PluginError(f"module {top!r} is in the working directory ({cwd}), which is not searched for "
                                  f"plug-ins; to use it, pass --plugin-path {cwd} (or install it)", name=top)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise ModuleNotFoundError(f"{exc}; plug-ins are imported from installed packages and --plugin-path "
                                      f"folders (a module next to the scenario needs --plugin-path DIR)",
                                      name=exc.name) from None
        raise


def resolve(spec: str):
    """The object ``module:attr`` names (``module`` imported by :func:`import_module`). Raises ``ValueError`` for a
    spec without ``:``, :class:`ImportError` (:class:`PluginError` included) and ``AttributeError`` as those."""
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"expected 'module:name', got {spec!r}")
    module = import_module(mod)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
