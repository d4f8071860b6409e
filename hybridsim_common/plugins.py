"""Where plug-in code named ``module:attr`` in a scenario (a policy, a custom workload) is imported from: the one rule.

A scenario is data; naming a module in it must not run whatever file of that name lies next to it. So a plug-in
module is imported from the installed packages (``sys.path`` as the interpreter and ``PYTHONPATH`` set it) and from
the folders the user names (``--plugin-path DIR``, :func:`add_path`), and never

* from the scenario's folder (it is not searched), nor
* from the working directory that the interpreter put at the front of ``sys.path`` by itself (``python -m``,
  ``python -c``): a module found there is refused, with the option that allows it.

Installed plug-ins can also register under an entry-point group (``hybridsim.policies``, ``hybridsim.queues``,
``hybridsim.backends``, ``hybridsim.surrogates``), which needs no path at all; a ``*.dist-info`` in the working
directory is not read, and an entry point's module is imported by the same rule. :class:`Registry` is the one
lookup of a kind of plug-in (built-in names, entry points, ``module:attr``), with the one "did you mean" of
:func:`did_you_mean`; the scenario schema checks names against it. Everything here imports nothing first-party.
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


def did_you_mean(name: str, options) -> str:
    """``"; did you mean 'x'?"`` for the option closest to ``name`` (empty if none is close): the one hint every
    unknown plug-in name, key or option gets."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(o) for o in options], n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


class Registry:
    """The names of one kind of plug-in, and the one rule that finds a name's class: a built-in (``builtin``: name
    -> class, or ``"module:attr"`` of the package that owns the registry, imported on first use), an entry point of
    ``group`` in an installed package (or a ``*.dist-info`` on ``sys.path``: ``PYTHONPATH`` or ``--plugin-path``), or
    an explicit ``module:attr`` imported by :func:`resolve` (never from the working directory or a scenario's
    folder). The scenario schema checks names with :meth:`check` (nothing imported), the runner loads them with
    :meth:`load`. ``label`` names the kind in messages (``"queue policy"``)."""

    def __init__(self, group: str, label: str, builtin: dict, base: type | None = None):
        self.group, self.label, self.builtin, self.base = group, label, dict(builtin), base

    def entry_points(self) -> dict:
        """The group's entry points by name, bar those of a distribution in the implicit working directory."""
        from importlib.metadata import distributions, entry_points

        cwd = implicit_working_dir()

        def in_cwd(dist) -> bool:
            where = getattr(dist, "_path", None)  # the .dist-info folder of a distribution found on sys.path
            return cwd is not None and where is not None and _real(os.path.dirname(str(where))) == cwd

        out = {}
        for ep in entry_points(group=self.group):
            if not in_cwd(ep.dist):
                out.setdefault(ep.name, ep)
        if cwd is not None:
            # importlib keeps one distribution per name, the first on sys.path: an editable install's own metadata
            # folder in the checkout (``hybridsim.egg-info``, first when the checkout is the working directory) would
            # hide the installed one, whose entry points count
            for dist in distributions():
                if not in_cwd(dist):
                    for ep in dist.entry_points:
                        if ep.group == self.group:
                            out.setdefault(ep.name, ep)
        return out

    def names(self) -> list[str]:
        """Built-in names first, then the installed ones (sorted); nothing is imported."""
        return list(self.builtin) + sorted(set(self.entry_points()) - set(self.builtin))

    def unknown(self, name: str) -> str:
        return (f"unknown {self.label} {name!r}{did_you_mean(name, self.names())} (built-in and installed: "
                f"{', '.join(self.names())}; or module:Class of an installed package or a --plugin-path folder)")

    def check(self, name) -> str:
        """``name`` if it is a known name or a ``module:attr`` spec, else ``ValueError`` with the closest name (the
        schema's check: nothing is imported)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.label} must be a name, got {name!r}")
        if name in self.builtin or ":" in name or name in self.entry_points():
            return name
        raise ValueError(self.unknown(name))

    def load(self, name: str):
        """The class ``name`` stands for. ``ValueError`` for an unknown name, :class:`PluginError` for one that
        cannot be imported or is not a ``base`` subclass (the message says which and why)."""
        self.check(name)
        if name in self.builtin:
            obj = self.builtin[name]
            if isinstance(obj, str):
                mod, _, attr = obj.partition(":")
                obj = getattr(importlib.import_module(mod), attr)
        elif ":" in name:
            try:
                obj = resolve(name)
            except Exception as exc:  # ImportError, AttributeError, or a plug-in's own code failing at import
                raise PluginError(f"{self.label} {name!r}: cannot load it: {type(exc).__name__}: {exc}") from None
        else:
            ep = self.entry_points()[name]
            try:
                obj = import_module(ep.module)  # under this module's rule, as a module:attr spec
                for part in (ep.attr or "").split(".") if ep.attr else ():
                    obj = getattr(obj, part)
            except Exception as exc:  # a plug-in's own import failed
                raise PluginError(f"{self.label} {name!r}: entry point {ep.value} ({self.group}) failed to load: "
                                  f"{type(exc).__name__}: {exc}") from None
        if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise PluginError(f"{self.label} {name!r} is not a {self.base.__module__}.{self.base.__qualname__} "
                              f"subclass")
        return obj
