"""Kernel family ``dag`` (SPEC §1, cases 2, 3, 4, 12): the persistent task-graph megakernel.

One Triton launch per forward; ``graph.py`` builds the task graph, ``sim.py`` simulates its schedules,
``kernel.py`` runs it, ``host.py`` prepares and launches. Parameters: ``config/variant/dag.yaml``."""
from ..registry import Variant, register
from .host import DagPrepared, interpreting, prepare, rebind, run

register(Variant(
    "dag", prepare, run, kind="ours", families=("dag",), rebind=rebind,
    description="persistent task-graph megakernel: one launch, tasks per row block / tile / head taken from a "
                "queue, dependency counters in global memory, split-precision tensor-core GEMMs"))

__all__ = ["DagPrepared", "interpreting", "prepare", "run"]
