"""env.kind openenv's settings: env.url goes with it, and with it only."""

import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import env_factory
from spreadrl.errors import ConfigError, SpreadrlError


def test_openenv_needs_an_http_or_ws_url():
    assert EnvConfig(kind="openenv", url="http://127.0.0.1:8000").url == "http://127.0.0.1:8000"
    for url in (None, "", "127.0.0.1:8000", "ftp://host"):
        with pytest.raises(ConfigError, match="env.url"):
            EnvConfig(kind="openenv", url=url)


def test_url_without_openenv_is_refused():
    with pytest.raises(ConfigError, match="env.kind openenv only"):
        EnvConfig(url="http://127.0.0.1:8000")


def test_openenv_has_no_in_process_environment():
    with pytest.raises(SpreadrlError, match="make_env_pool"):
        env_factory(EnvConfig(kind="openenv", url="http://127.0.0.1:8000"))


def test_a_reset_names_the_task_or_for_the_servers_own_tasks_only_the_seed():
    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.openenv_pool import reset_arguments

    own = resolve_tasks("openenv:3").tasks[2]
    assert reset_arguments(own, 1) == {"seed": 2}
    task = resolve_tasks("builtin-code:test").tasks[0]
    assert reset_arguments(task, 1) == {"task_id": task.id, "case": 1}
