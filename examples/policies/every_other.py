"""An example plug-in policy: after a warm-up, predict every other iteration.

Use it from a scenario with::

    controller: {policy: "examples.policies.every_other:EveryOther", params: {warmup: 4}}

and allow the checkout's folder as a plug-in folder (``hybridsim run S.yaml --mode hybrid --plugin-path .`` from the
repository root; plug-ins are never imported from the working directory unasked),

or register it for ``policy: every-other`` in your package's ``pyproject.toml``::

    [project.entry-points."hybridsim.policies"]
    every-other = "examples.policies.every_other:EveryOther"
"""

from controllers.base import JobView, Policy
from hybridsim_common.backend import Mode


class EveryOther(Policy):
    name = "every-other"

    def __init__(self, warmup: int = 4):
        self.warmup = int(warmup)

    def decide(self, view: JobView) -> Mode:
        if view.iteration < self.warmup:
            return Mode.SIMULATE
        return Mode.PREDICT if view.mode == Mode.SIMULATE else Mode.SIMULATE
