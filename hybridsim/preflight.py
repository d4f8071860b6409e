"""Checks of a scenario's plug-ins and hybrid-loop sections (``controller``, ``surrogate``) that ``hybridsim validate``
and ``hybridsim run`` make before a run directory exists: the policy resolves (a plug-in imports), takes the given
parameters and constructs; the surrogate model is registered and its ``config`` is accepted by its constructor, or
its checkpoint folder loads (config, constructor, weights); custom workload functions resolve and their first
iteration's ops are valid. Plug-in modules are
imported by :mod:`hybridsim_common.plugins`' rule only. Errors are :class:`~hybridsim.scenario.ScenarioError` located at
the section's field."""

from __future__ import annotations

import difflib
import inspect

from .scenario import Scenario, ScenarioError


def hybrid_problems(scenario: Scenario) -> list[str]:
    """Located messages, one per problem (empty: the sections are usable)."""
    from controllers import PolicyError, load_policy, policy_class
    from controllers.loader import unknown_params
    from surrogate.base import SurrogateError
    from surrogate.loading import checkpoint_folder, load, split_spec
    from surrogate.registry import model_class

    out: list[str] = []

    def problem(loc: tuple, msg: str) -> None:
        out.append(f"{scenario.where(loc)}: {'.'.join(loc)}: {msg}")

    ctl = scenario.controller
    try:
        cls = policy_class(ctl.policy)
    except PolicyError as exc:
        from controllers.loader import available_policies
        from hybridsim_common.plugins import did_you_mean

        hint = did_you_mean(ctl.policy, available_policies()) if str(exc).startswith("unknown policy") else ""
        problem(("controller", "policy"), f"{exc}{hint}")
    else:
        bad = unknown_params(cls, ctl.params)
        for key in bad:
            valid = [n for n in inspect.signature(cls).parameters if n != "self"]
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problem(("controller", "params", key), f"policy {ctl.policy!r} has no parameter {key!r}{hint} "
                                                   f"(it takes: {', '.join(valid) or 'none'})")
        if not bad:
            try:
                load_policy(ctl.policy, ctl.params)
            except PolicyError as exc:
                problem(("controller", "params") if ctl.params else ("controller", "policy"), str(exc))

    sec = scenario.surrogate
    ckpt = checkpoint_folder(sec.model, scenario.base_dir)
    if ckpt is not None:
        path = ckpt[1]
        if not path.is_dir():
            problem(("surrogate", "model"), f"no checkpoint folder {path} (and {sec.model!r} is not a model name)")
            return out
        try:  # loaded, not only found: config, constructor and weights (safetensors only), as the run will
            load(sec.model, base_dir=scenario.base_dir)
        except SurrogateError as exc:
            problem(("surrogate", "model"), f"checkpoint {path}: {exc}")
        return out
    try:
        name, options = split_spec(sec.model)
        mcls = model_class(name)
    except SurrogateError as exc:
        problem(("surrogate", "model"), str(exc))
        return out
    try:
        mcls.check_config({**options, **sec.config})
    except SurrogateError as exc:  # an option over its bound is located at its own key (nothing was built)
        key = getattr(exc, "key", None)
        loc = ("surrogate", "config", key) if key in sec.config else \
            ("surrogate", "config") if sec.config and key is None else ("surrogate", "model")
        problem(loc, str(exc))
        return out
    from surrogate.base import Surrogate

    if mcls.check_run is not Surrogate.check_run:  # a model tied to one run (the oracle) judges this scenario now
        from .scenario import scenario_to_dict

        try:
            mcls(**{**options, **sec.config}).check_run(scenario_to_dict(scenario))
        except SurrogateError as exc:
            problem(("surrogate", "model"), str(exc))
    return out


def plugin_problems(scenario: Scenario) -> list[str]:
    """Located messages for custom workloads (``workload.function``) that do not resolve under
    :mod:`hybridsim_common.plugins`' rule, cannot take the job's ``params``, or whose first iteration (first and last
    rank) is refused by :func:`~hybridsim.workloads.validate_ops` (a tag beyond 64 bits, a bad peer...). A remote engine imports them itself (under
    its operator's allow-list), so its scenarios are not checked here."""
    if scenario.backend.kind == "remote":
        return []
    out = []
    for i, job in enumerate(scenario.jobs):
        if job.workload.kind == "custom":
            from .workloads.base import WorkloadError
            from .workloads.custom import CustomJob

            try:  # the first iteration of its first and last rank is generated and checked, as the run will
                cj = CustomJob(job.name, job.ranks, job.iterations, job.workload)
                for rank in sorted({0, job.ranks - 1}):
                    cj.iteration_ops(rank, 0)
            except WorkloadError as exc:
                loc = ("jobs", i, "workload", "function")
                out.append(f"{scenario.where(loc)}: jobs.{i}.workload.function: {exc}")
    return out


def check_plugins(scenario: Scenario) -> None:
    """Raise a :class:`ScenarioError` listing every problem :func:`plugin_problems` finds (any run mode)."""
    problems = plugin_problems(scenario)
    if problems:
        raise ScenarioError("\n".join(problems), problems)


def check_hybrid(scenario: Scenario) -> None:
    """Raise a :class:`ScenarioError` listing every problem :func:`plugin_problems` and :func:`hybrid_problems`
    find (what ``validate`` checks beyond the file, and ``run --mode hybrid`` before a run directory exists)."""
    problems = plugin_problems(scenario) + hybrid_problems(scenario)
    if problems:
        raise ScenarioError("\n".join(problems), problems)
