"""Tessera's version: the installed distribution's, else the one in ``pyproject.toml``."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path


def _version() -> str:
    try:
        return metadata.version("tessera")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            match = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        except OSError:
            match = None
        return match.group(1) if match else "0+unknown"


__version__: str = _version()
