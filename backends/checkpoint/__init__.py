"""Sharded checkpoints: torch.distributed.checkpoint shards, atomic commit, keep-last-N, resume, export."""
