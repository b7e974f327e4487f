"""Argus: an event-sourced control plane for RL post-training (verl on Ray).

The event log (``argus.store``) is the only source of truth; everything else is a
projection of it (``projections``) or reacts to it (``argus.reactor``).
"""

__version__ = "0.1.0"
