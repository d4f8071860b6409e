"""Find a policy by name: built-ins, the ``hybridsim.policies`` entry-point group, or ``module:Class`` (imported
by :mod:`hybridsim_common.plugins`' rule: never from the scenario's folder or the working directory unless allowed)."""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points

import hybridsim_common.plugins as plugins

from .base import Policy, PolicyError
from .builtin import BUILTIN

ENTRY_POINT_GROUP = "hybridsim.policies"


def _entry_point_policies() -> dict:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_policies() -> list[str]:
    return sorted(set(BUILTIN) | set(_entry_point_policies()))


def _resolve(spec: str) -> type:
    if spec in BUILTIN:
        return BUILTIN[spec]
    eps = _entry_point_policies()
    if spec in eps:
        try:
            return eps[spec].load()
        except Exception as exc:
            raise PolicyError(f"policy {spec!r}: entry point {eps[spec].value} failed to load: {exc}") from exc
    if ":" in spec:
        mod, _, attr = spec.partition(":")
        try:
            module = plugins.import_module(mod)
        except ImportError as exc:
            raise PolicyError(f"policy {spec!r}: cannot import module {mod!r}: {exc}") from exc
        except Exception as exc:  # a plug-in's own code failed at import
            raise PolicyError(f"policy {spec!r}: importing module {mod!r} raised {type(exc).__name__}: {exc}") from exc
        try:
            return getattr(module, attr)
        except AttributeError:
            raise PolicyError(f"policy {spec!r}: module {mod!r} has no attribute {attr!r}") from None
    raise PolicyError(f"unknown policy {spec!r}; built-in and installed: {', '.join(available_policies())}; "
                      "or give 'module:Class'")


def policy_class(spec: str) -> type:
    """The class the policy name ``spec`` stands for (imports a plug-in under :mod:`hybridsim_common.plugins`' rule:
    installed or ``--plugin-path`` folders only; instantiates nothing)."""
    cls = _resolve(spec)
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        # duck typing is allowed: any class with decide(view)
        if not callable(getattr(cls, "decide", None)):
            raise PolicyError(f"policy {spec!r} is not a Policy (no decide(view) method)")
    return cls


def unknown_params(cls: type, params: dict) -> list[str]:
    """The keys of ``params`` that ``cls``'s constructor does not take (none if it takes ``**kwargs``)."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):  # no introspectable signature: let the constructor judge
        return []
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return []
    ok = {n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [k for k in params if k not in ok]


def load_policy(spec: str, params: dict | None = None) -> Policy:
    """Instantiate the policy named ``spec`` with keyword ``params``. Any failure, including an exception a
    plug-in's import or constructor raises, is a :class:`PolicyError`."""
    cls = policy_class(spec)
    params = params or {}
    bad = unknown_params(cls, params)
    if bad:
        valid = [n for n in inspect.signature(cls).parameters if n != "self"]
        raise PolicyError(f"policy {spec!r}: unknown parameter {bad[0]!r} (it takes: {', '.join(valid) or 'none'})")
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"policy {spec!r}: bad parameters {params}: {exc}") from None
    except Exception as exc:  # a plug-in's constructor failed
        raise PolicyError(f"policy {spec!r}: constructor raised {type(exc).__name__}: {exc}") from None
