"""Context parallelism: each sequence split over `cp` ranks (docs/parallelism.md, "Context parallelism").

- sharding.py: the zig-zag split of a batch's tokens, positions and shifted labels;
- attention.py: the attention that gathers every rank's keys and values;
- apply.py: the engine's forward under cp, and the groups.
"""
