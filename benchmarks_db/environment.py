"""What a benchmark ran on: host, driver and software versions, read without importing torch."""

from __future__ import annotations

import socket
from importlib import metadata

from pydantic import BaseModel


class RunEnvironment(BaseModel):
    host: str
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
        host=socket.gethostname(),
        driver=driver,
        torch_version=_version("torch"),
        deepspeed_version=_version("deepspeed"),
        transformers_version=_version("transformers"),
        hardware_selector_version=_version("hardware-selector"),
    )
