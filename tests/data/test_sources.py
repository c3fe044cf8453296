"""Task-set arguments: openenv:<n>, the episodes of a server that brings its own tasks."""

import pytest

from spreadrl.data.sources import OPENENV_SOURCE, resolve_tasks
from spreadrl.errors import TaskFormatError


def test_openenv_n_is_n_episodes_seeded_by_their_index_with_no_workbook():
    tasks = resolve_tasks("openenv:3")
    assert [t.id for t in tasks] == ["openenv-00000", "openenv-00001", "openenv-00002"]
    assert [t.metadata["seed"] for t in tasks] == [0, 1, 2]
    assert {t.source for t in tasks} == {OPENENV_SOURCE}
    assert tasks.episode_keys() == [(t.id, 1) for t in tasks]


@pytest.mark.parametrize("spec", ["openenv:", "openenv:0", "openenv:many"])
def test_openenv_without_a_count_is_one_clear_error(spec):
    with pytest.raises(TaskFormatError, match="give the number of episodes, e.g. openenv:64"):
        resolve_tasks(spec)
