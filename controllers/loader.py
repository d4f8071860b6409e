"""Find a policy by name: built-ins, the ``hybridsim.policies`` entry-point group, or ``module:Class`` (imported
by :mod:`hybridsim_common.plugins`' rule: never from the scenario's folder or the working directory unless allowed)."""

from __future__ import annotations

import inspect

import hybridsim_common.plugins as plugins

from .base import Policy, PolicyError
from .builtin import BUILTIN

ENTRY_POINT_GROUP = "hybridsim.policies"


#: the policies' registry: built-ins, the ``hybridsim.policies`` entry points and ``module:Class`` specs, found by the
#: one rule every plug-in kind shares (:class:`hybridsim_common.plugins.Registry`; a policy may be duck-typed, so no
#: base class is required here: :func:`policy_class` checks for ``decide``)
POLICIES = plugins.Registry(ENTRY_POINT_GROUP, "policy", BUILTIN)


def available_policies() -> list[str]:
    return POLICIES.names()


def _resolve(spec: str) -> type:
    try:
        return POLICIES.load(spec)
    except ValueError as exc:   # unknown name: the registry's message, with the closest name
        raise PolicyError(f"{exc}") from None
    except ImportError as exc:  # PluginError included: which plug-in, and why it does not load
        raise PolicyError(str(exc)) from exc


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
