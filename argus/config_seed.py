"""Keys of the seed platform's configuration that Argus replaced.

A team moving over keeps its config file (the seed's ``dev.yaml`` with its ``v2:``
section): each key listed here is dropped with a one-line warning naming what replaced it,
so the file loads. A key listed nowhere (a typo) is still refused, by name."""

from __future__ import annotations

import logging
from typing import Any, Mapping

__all__ = ["SEED_KEYS", "drop_seed_keys", "seed_key_of_variable"]

log = logging.getLogger("argus.config")

# The seed's key -> what replaced it in Argus, and what to set instead.
SEED_KEYS: dict[str, str] = {
    "v2.scheduler.tick_s": "v2.scheduler.poll_interval_s (the reactor acts on every new event "
                           "and follows Ray every poll_interval_s seconds)",
    "ray.verl_code_path": "user_code_path (the seed's own top-level key for the verl code on the workers)",
    "service.verl_code_path": "user_code_path (the seed's own top-level key for the verl code on the workers)",
}


def _warning(key: str, where: str) -> str:
    return f"{key} ({where}) is the seed platform's key, ignored: Argus replaced it with {SEED_KEYS[key]}"


def drop_seed_keys(doc: dict[str, Any], where: str) -> list[str]:
    """Remove each seed key from ``doc`` (a section it leaves empty goes too), log and
    return one warning line per key found."""
    said: list[str] = []
    for dotted in SEED_KEYS:
        *parents, leaf = dotted.split(".")
        chain: list[dict[str, Any]] = [doc]
        for part in parents:
            child = chain[-1].get(part)
            if not isinstance(child, dict):
                break
            chain.append(child)
        else:
            if leaf in chain[-1]:
                del chain[-1][leaf]
                for parent, part in zip(reversed(chain[:-1]), reversed(parents)):
                    if parent[part] == {}:
                        del parent[part]
                said.append(_warning(dotted, f"in {where}"))
    for line in said:
        log.warning(line)
    return said


def seed_key_of_variable(variable: str, path: list[str]) -> str | None:
    """The warning for an ``ARGUS_*`` variable that sets a seed key (logged), else None."""
    dotted = ".".join(path)
    if dotted not in SEED_KEYS:
        return None
    line = _warning(dotted, f"set by {variable}")
    log.warning(line)
    return line

