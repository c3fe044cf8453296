"""The environment leg's packages: `openenv` (never the retired openenv-core, which installs
the same module), in the range spreadrl claims. make test-envs runs this in both of its
venvs: openenv 0.10.0 (newest) and 0.4.1 (beside verifiers, the range's low end)."""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.envs
ROOT = Path(__file__).resolve().parents[2]


def claimed_openenv() -> Requirement:
    text = (ROOT / "pyproject.toml").read_text()
    (spec,) = re.findall(r'^openenv = \["(openenv[^"]*)"\]', text, flags=re.M)
    return Requirement(spec)


def test_openenv_is_the_maintained_package_in_the_claimed_range():
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("openenv-core")
    version = metadata.version("openenv")
    assert claimed_openenv().specifier.contains(version), (version, str(claimed_openenv()))
    from openenv.core.env_server.mcp_environment import MCPEnvironment

    from spreadrl.integrations.openenv_env import SpreadsheetEnvironment
    from spreadrl.integrations.openenv_server import build_app  # noqa: F401

    assert issubclass(SpreadsheetEnvironment, MCPEnvironment)
