"""What a benchmark ran on: driver and software versions, read without importing torch.

A record says nothing about who made it or where: `host` stays empty (docs/benchmarks.md; the hardware is
told by the record's GPU, count, driver and interconnect). The field remains so that older databases, which
kept a host name, still read.
"""

from __future__ import annotations

from importlib import metadata

from pydantic import BaseModel


class RunEnvironment(BaseModel):
    host: str = ""  # never filled in: no host names in a record
    driver: str | None = None
    torch_version: str | None = None
    deepspeed_version: str | None = None
    transformers_version: str | None = None
    hardware_selector_version: str | None = None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def current_environment(driver: str | None = None) -> RunEnvironment:
    return RunEnvironment(
        driver=driver,
        torch_version=_version("torch"),
        deepspeed_version=_version("deepspeed"),
        transformers_version=_version("transformers"),
        hardware_selector_version=_version("hardware-selector"),
    )
