"""NCCL's own memory: the buffers of one communicator, as measured (``runtime`` adds them per parallel group;
vLLM's start-up, ``serving``, counts the tensor-parallel group's as non-torch memory)."""

from __future__ import annotations

from memderive.symbolic.formula import Citation

__all__ = ["NCCL", "NCCL_PAIR", "NCCL_GROUP", "NCCL_ALL_TO_ALL_PER_PEER", "nccl_bytes"]

MIB = 2**20

#: NCCL buffers of one communicator after its first collective, measured with nvidia-smi on 4 A100s
#: with NVLink (NVIDIA/nccl#964: 544 MB for a group of 2, 688 MB for larger groups). NCCL's memory
#: grows with its channels and peers (NVIDIA/nccl#986), so other topologies differ.
NCCL_PAIR, NCCL_GROUP = 544 * MIB, 688 * MIB
#: All-to-all (expert parallelism) connects every peer: 8 H100s went from 1.06 GB to 4.34 GB after the
#: first all_to_all_single (NVIDIA/nccl#1685), 3.28 GB for 7 peers.
NCCL_ALL_TO_ALL_PER_PEER = (434 - 106) * 10**7 // 7
NCCL = Citation("nccl-memory-964", "per communicator after a 4 MB all-reduce: 544 MB (2 ranks), 688 MB (more); "
                "4 A100 with NVLink", also=(Citation("nccl-alltoall-1685", "all-to-all: 1.06 GB to 4.34 GB on 8 H100"),))


def nccl_bytes(group: str, ranks: int) -> int:
    """NCCL buffers of one communicator of ``ranks`` ranks (all-to-all for the expert group).

    >>> nccl_bytes("tensor", 2) // 2**20, nccl_bytes("data", 8) // 2**20
    (544, 688)
    """
    base = NCCL_PAIR if ranks == 2 else NCCL_GROUP
    return base + (NCCL_ALL_TO_ALL_PER_PEER * (ranks - 1) if group == "expert" else 0)
