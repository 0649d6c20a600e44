"""Where each figure of a GPU catalog entry comes from.

Every figure of `planner/catalog/gpus.json` (memory, bandwidth, each dense TFLOP/s rate, the link, the power)
carries a `FigureSource` in its entry's `sources` map, keyed by the figure's path ("dense_tflops.bf16").
Five kinds, from strongest to weakest:

- "vendor": a document of the GPU's maker (datasheet, product page, its documentation, its own published
  benchmark submission);
- "secondary": a third party's page that prints the figure (a reseller's copy of the datasheet table, a
  trade-press report of the launch slides, a cloud provider's spec page);
- "reference": the row of the shared published reference (`published_reference.yaml`, `gpu_specs`) named by
  the entry's `reference_gpu`, which cites its own sources but gives no URL or date per figure;
- "derived": no document prints it, but one rule computes it from figures that are cited: the entry's own
  `derived_from.base` figure scaled by another catalog GPU's ratio of this figure to that base (the A10G's TF32 is
  its cited FP16 at the A10's TF32/FP16, one Ampere die); `note` gives the rule's premise and its sources, and
  tests/test_gpu_sources.py recomputes every derived figure from cited inputs only;
- "unsourced": recalled, not read at any source; `note` says so and, where something close was read, what.

vendor and secondary sources carry the URL and a date: the document's own (`date_kind: "published"`) or the day
it was read (`"accessed"`). `read_via` names the copy actually read when that was not the URL itself (a
verbatim transcription of a PDF, the documentation's source file). `note` says what the document printed and
the arithmetic to our convention, in particular "sparse" figures halved to dense.
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer, model_validator

SourceKind = Literal["vendor", "secondary", "reference", "derived", "unsourced"]

# The figures a catalog entry states, by path; dense_tflops.<dtype> only where the dtype is supported.
SCALAR_FIGURES: tuple[str, ...] = ("memory_bytes", "memory_bandwidth_GBps", "interconnect", "tdp_watts")
TFLOPS_FIGURES: tuple[str, ...] = tuple(f"dense_tflops.{dtype}" for dtype in ("fp32", "tf32", "fp16", "bf16", "fp8"))
# Optional: a source may be given, none is required (the link figure covers the PCIe cards).
OPTIONAL_FIGURES: tuple[str, ...] = ("pcie_generation",)
KNOWN_FIGURES: frozenset[str] = frozenset((*SCALAR_FIGURES, *TFLOPS_FIGURES, *OPTIONAL_FIGURES))

# Short labels for the `gpus` table's footnotes.
FIGURE_LABELS: dict[str, str] = {
    "memory_bytes": "mem",
    "memory_bandwidth_GBps": "mem-bw",
    "interconnect": "link",
    "tdp_watts": "power",
    "pcie_generation": "pcie",
    **{path: path.split(".")[1] for path in TFLOPS_FIGURES},
}


class DerivedRule(BaseModel):
    """figure = this entry's `base` x (`like_gpu`'s figure / `like_gpu`'s `base`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str  # a figure path of the same entry, itself cited
    like_gpu: str  # the catalog name of the GPU whose ratio is taken

    @model_validator(mode="after")
    def _base_is_a_figure(self) -> DerivedRule:
        if self.base not in KNOWN_FIGURES:
            raise ValueError(f"derived_from.base {self.base!r} is not a catalog figure")
        return self


class FigureSource(BaseModel):
    """The provenance of one figure of one catalog entry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: SourceKind
    url: str | None = None
    date: str | None = None  # ISO yyyy-mm-dd
    date_kind: Literal["published", "accessed"] | None = None
    read_via: str | None = None
    note: str = ""
    derived_from: DerivedRule | None = None  # "derived" only

    @model_validator(mode="after")
    def _cited_sources_have_url_and_date(self) -> FigureSource:
        if self.kind in ("vendor", "secondary"):
            if not (self.url and self.url.startswith("https://")):
                raise ValueError(f"a {self.kind} source needs an https URL")
            if self.date is None or self.date_kind is None:
                raise ValueError(f"a {self.kind} source needs a date and whether it is published or accessed")
            datetime.date.fromisoformat(self.date)
        elif self.kind == "derived" and self.derived_from is None:
            raise ValueError("a derived source needs `derived_from`: the base figure and the GPU whose ratio it takes")
        if self.kind != "derived" and self.derived_from is not None:
            raise ValueError(f"a {self.kind} source is not derived; drop `derived_from`")
        if not self.cited:
            if self.url or self.date or self.date_kind or self.read_via:
                raise ValueError(f"a {self.kind} source has no URL or date; say what it is in `note`")
            if not self.note:
                raise ValueError(f"a {self.kind} source must say in `note` what it is")
        return self

    @model_serializer(mode="wrap")
    def _omit_no_rule(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`derived_from` is printed only where a figure is derived: every other source reads as before."""
        data: dict[str, Any] = handler(self)
        if self.derived_from is None:
            data.pop("derived_from", None)
        return data

    @property
    def cited(self) -> bool:
        """True for a URL and a date: vendor or secondary."""
        return self.kind in ("vendor", "secondary")

    def short(self) -> str:
        """One line for tables: 'vendor https://... (2025-01-14)' or 'unsourced (recalled)'."""
        if self.kind == "unsourced":
            for start in ("placeholder", "measured"):  # the cpu entry's: measured on the build machine
                if self.note.startswith(start):
                    return f"unsourced ({start})"
            return "unsourced (recalled)"
        if self.kind == "reference":
            return "shared reference row"
        if self.derived_from is not None:
            return f"derived ({FIGURE_LABELS[self.derived_from.base]} at the {self.derived_from.like_gpu}'s ratio)"
        label = "read " if self.date_kind == "accessed" else ""
        return f"{self.kind} {self.url} ({label}{self.date})"


def summarize_sources(sources: dict[str, FigureSource], paths: list[str]) -> list[tuple[str, list[str]]]:
    """(one-line source, figure labels it backs) in first-use order; figures without a source count as unsourced."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        source = sources.get(path)
        line = source.short() if source is not None else "unsourced (recalled)"
        if source is not None and source.kind == "reference":
            line = f"shared reference ({source.note.removeprefix('published_reference.yaml ')})"
        groups.setdefault(line, []).append(FIGURE_LABELS[path])
    return list(groups.items())
