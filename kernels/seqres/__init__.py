"""Kernel family ``seqres``: the sequence-resident megakernel (SPEC §1, issue 6).

One Triton launch per forward; see ``megakernel.py`` for the schedule and ``host.py`` for prepare/run.
Parameters: ``config/variant/seqres.yaml``."""
from ..registry import Variant, register
from .host import SeqresPrepared, alternates, interpreting, prepare, rebind, run

register(Variant(
    "seqres", prepare, run, kind="ours", families=("seqres",), alternates=alternates, rebind=rebind,
    description="sequence-resident megakernel: one launch, a group of co-resident programs per sequence(s), "
                "scratch in L2, split-precision tensor-core GEMMs"))

__all__ = ["SeqresPrepared", "interpreting", "prepare", "run"]
