"""Confining a job's processes to its user's files with Linux Landlock (docs/security.md).

``landlock``: the kernel interface; ``rules``: what a job may reach; ``job``: one job's
ruleset on this node, and whether this node confines at all.
"""

from argus.confine.job import Decision, confinement_line, decide, interpreter_paths, job_ruleset, ray_logs_dirs
from argus.confine.landlock import Access, LandlockError, Rule, Ruleset, abi_version
from argus.confine.rules import Confinement, carve, job_confinement, rules_for

__all__ = [
    "Access",
    "Confinement",
    "Decision",
    "LandlockError",
    "Rule",
    "Ruleset",
    "abi_version",
    "carve",
    "confinement_line",
    "decide",
    "interpreter_paths",
    "job_confinement",
    "job_ruleset",
    "ray_logs_dirs",
    "rules_for",
]
