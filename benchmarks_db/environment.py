"""What a benchmark ran on: host, driver and software versions, read without importing torch."""

from __future__ import annotations

import socket
from importlib import metadata
from typing import Optional

from pydantic import BaseModel


class RunEnvironment(BaseModel):
    host: str
    driver: Optional[str] = None
    torch_version: Optional[str] = None
    deepspeed_version: Optional[str] = None
    transformers_version: Optional[str] = None
    hardware_selector_version: Optional[str] = None


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
