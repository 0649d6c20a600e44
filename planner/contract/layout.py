"""ParallelDims: how one run splits over its ranks (dp x tp x pp x cp, experts over ep).

This is the one layout value of the project (docs/architecture.md): the plan,
plan.json's run block, engine.json and engine checkpoints all store a
ParallelDims, and `backends/parallel_dims.py` only builds the device mesh
from it. It is pure data (no torch), frozen and validated on construction,
so a layout that cannot exist is a one-line error where it is written, not a
hang where it is run.

- dp: data-parallel replicas (ZeRO and FSDP shard over them); None in a training config, which states the
  model-parallel split and leaves dp to the cluster: `with_world_size` fills it;
- tp: tensor-parallel ranks (inside a node);
- pp: pipeline stages, each holding `virtual_stages` model chunks;
- cp: context-parallel ranks splitting the sequence;
- ep: expert-parallel ranks; experts split over a sub-group of dp, so ep divides dp;
- stage_layers: decoder layers per pipeline chunk (pp x virtual_stages entries), or None
  for the balanced split. When pp does not divide the layers, the planner writes
  `default_stage_layers` here (the map its memory and speed were computed for).
  The first and last chunks may hold 0 layers: the embedding alone and the head
  (with the loss) alone, each taking a layer's slot, as Llama 3 405B split 126
  layers into 128 one-layer chunks over 16 ranks (docs/parallelism.md).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_RANKS = 1 << 20  # about a million ranks: beyond any cluster, and it keeps arithmetic instant


class ParallelDims(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    dp: int | None = Field(default=None, ge=1, le=MAX_RANKS)  # None: every rank the model split leaves
    tp: int = Field(default=1, ge=1, le=MAX_RANKS)
    pp: int = Field(default=1, ge=1, le=MAX_RANKS)
    cp: int = Field(default=1, ge=1, le=MAX_RANKS)
    ep: int = Field(default=1, ge=1, le=MAX_RANKS)
    virtual_stages: int = Field(default=1, ge=1, le=1024)
    stage_layers: tuple[int, ...] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ParallelDims:
        if self.model_parallel * (self.dp or 1) > MAX_RANKS:
            raise ValueError(
                f"dp x tp x pp x cp = {self.model_parallel * (self.dp or 1)} ranks is more than the "
                f"{MAX_RANKS} supported"
            )
        if self.dp is not None and self.dp % self.ep:
            raise ValueError(f"ep {self.ep} must divide dp {self.dp}: experts split over data-parallel ranks")
        if self.virtual_stages > 1 and self.pp == 1:
            raise ValueError("virtual_stages > 1 needs pipeline parallelism (pp > 1)")
        if self.stage_layers is not None:
            chunks = self.pp * self.virtual_stages
            listed = len(self.stage_layers)
            if listed != chunks:
                interleaved = listed % self.pp == 0 and listed > self.pp
                hint = (
                    f" (for {listed // self.pp} chunks per rank: --virtual-stages {listed // self.pp} "
                    "--pp-schedule interleaved-1f1b)"
                    if interleaved
                    else ""
                )
                raise ValueError(f"stage_layers lists {listed} stages; pp x virtual_stages is {chunks}{hint}")
            if not stage_map_runs(self.stage_layers):
                raise ValueError(
                    "every pipeline chunk needs at least one layer in stage_layers, except that the first may "
                    "hold the embedding alone and the last the head alone (0 layers)"
                )
        return self

    @property
    def data_parallel(self) -> int:
        """dp of a placed layout; a split whose dp the cluster has not filled yet raises."""
        if self.dp is None:
            raise ValueError("this layout leaves dp to the cluster; place it first with with_world_size(ranks)")
        return self.dp

    @property
    def world_size(self) -> int:
        return self.data_parallel * self.tp * self.pp * self.cp

    @property
    def resolved(self) -> bool:
        return self.dp is not None

    @property
    def model_parallel(self) -> int:
        """Ranks that hold different parts of one model replica."""
        return self.tp * self.pp * self.cp

    def with_world_size(self, world_size: int) -> ParallelDims:
        """The same model-parallel split on another number of ranks (dp absorbs the difference)."""
        if world_size < 1 or world_size % self.model_parallel:
            raise ValueError(
                f"{world_size} ranks cannot hold tp {self.tp} x pp {self.pp} x cp {self.cp}; "
                f"use a multiple of {self.model_parallel}"
            )
        dp = world_size // self.model_parallel
        if dp % self.ep:
            raise ValueError(f"ep {self.ep} does not divide the {dp} data-parallel ranks left by {world_size} ranks")
        return self.model_copy(update={"dp": dp})

    def model_split(self) -> ParallelDims:
        """The same split with dp left to the cluster (what a training config states)."""
        return self.model_copy(update={"dp": None})

    def describe(self) -> str:
        parts = [f"dp {self.dp if self.dp is not None else 'the rest'}", f"tp {self.tp}", f"pp {self.pp}"]
        parts += [f"{name} {value}" for name, value in (("cp", self.cp), ("ep", self.ep)) if value > 1]
        return " x ".join(parts)


def stage_map_runs(chunk_layers: tuple[int, ...] | list[int]) -> bool:
    """Whether a stage map can run: at least one layer per chunk, except that the first may hold the
    embedding alone and the last the head alone (0 layers); the engine's split applies the same rule."""
    inner = chunk_layers[1:-1] if len(chunk_layers) > 1 else chunk_layers
    return bool(chunk_layers) and min(chunk_layers) >= 0 and all(count >= 1 for count in inner)


def default_stage_layers(layers: int, chunks: int) -> tuple[int, ...]:
    """Layers per pipeline chunk when `chunks` does not divide `layers`: every chunk gets ceil(layers/chunks)
    and the surplus comes off the end chunks first, which also run the embedding and the output head (the
    layout Llama 3 405B used for 126 layers over 16 stages: 7, 8 x 14, 7; BLOOM's 70 over 12: 5, 6 x 10, 5).
    One or two chunks more than layers leave the end chunks empty, the embedding and the head each taking a
    layer's slot (Llama 3 405B's interleaved schedule: 126 layers in 128 chunks, 0, 1 x 126, 0)."""
    if chunks < 1 or layers + min(chunks - 1, 2) < chunks:
        raise ValueError(f"{chunks} pipeline chunks need at least {max(chunks - 2, 1)} layers, not {layers}")
    base = -(-layers // chunks)
    counts = [base] * chunks
    surplus = base * chunks - layers
    ends = (0, chunks - 1)
    left, right = 0, chunks - 1
    while surplus:
        for index in (left, right) if left != right else (left,):
            if surplus and counts[index] > (0 if index in ends else 1):
                counts[index] -= 1
                surplus -= 1
        left, right = left + 1, right - 1
        if left > right:
            left, right = 0, chunks - 1
    return tuple(counts)


def layers_per_rank(chunk_layers: tuple[int, ...], pp: int) -> tuple[int, ...]:
    """Layers each pipeline rank holds: its virtual chunks are r, r + pp, r + 2 pp, ... of the chunk map."""
    return tuple(sum(chunk_layers[rank::pp]) for rank in range(pp))


def describe_stage_layers(chunk_layers: tuple[int, ...]) -> str:
    """A stage map in the shorthand `--pp-layers` reads, runs of equal counts as NxM: 0,1x126,0."""
    runs: list[list[int]] = []
    for count in chunk_layers:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    return ",".join(f"{count}x{repeat}" if repeat > 1 else str(count) for count, repeat in runs)
