"""Start torch.distributed in a process launched by torchrun, safely across `--max-restarts`.

torchrun's agent keeps one key-value store for the whole job. A restarted
worker that calls plain init_process_group reads the previous attempt's gloo
addresses from it (same keys) and fails with "connection refused" or hangs.
Prefixing every key with the restart count gives each attempt a clean slate.
"""

from __future__ import annotations

import os
from datetime import timedelta


def init_distributed(backend: str, timeout_minutes: float = 10) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or "MASTER_ADDR" not in os.environ:
        dist.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes))
        return
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(minutes=timeout_minutes))
    dist.init_process_group(
        backend, store=dist.PrefixStore(f"attempt{attempt}", store), rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(minutes=timeout_minutes),
    )
