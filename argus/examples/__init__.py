"""Example workloads for demos and tests (NOT training code): ``toy_trainer`` behaves toward
Ray as verl does (overrides, GPU check, placement groups, logs, checkpoints) but learns a
tiny numpy policy on CPU; ``reward_example`` is a sample custom reward."""

__all__: list[str] = []
