"""Switching policies for the hybrid loop: the :class:`Policy` interface, built-ins and plug-in discovery."""

from .base import JobView, Policy, PolicyError
from .loader import available_policies, load_policy, policy_class

__all__ = ["JobView", "Policy", "PolicyError", "available_policies", "load_policy", "policy_class"]
