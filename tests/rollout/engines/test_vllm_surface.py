"""The recorded vLLM surface: the fakes match it, the pin matches it, the checker reads source."""

import ast
import dataclasses
import inspect
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from spreadrl.rollout.engines.vllm_sync import EngineClient
from tests.rollout import fake_vllm as fake
from tools.vllm import surface
from tools.vllm.contract import check_surface

ROOT = Path(__file__).resolve().parents[3]

# each fake callable, and the surface entry whose recorded parameters it must take
FAKE_CALLABLES = [
    (fake.FakeLLM.__init__, "LLM"),
    (fake.FakeLLM.generate, "LLM.generate"),
    (fake.FakeLLM.sleep, "LLM.sleep"),
    (fake.FakeLLM.wake_up, "LLM.wake_up"),
    (fake.FakeLLM.reset_prefix_cache, "LLM.reset_prefix_cache"),
    (fake.FakeLLM.init_weight_transfer_engine, "LLM.init_weight_transfer_engine"),
    (fake.FakeLLM.start_weight_update, "LLM.start_weight_update"),
    (fake.FakeLLM.update_weights, "LLM.update_weights"),
    (fake.FakeLLM.finish_weight_update, "LLM.finish_weight_update"),
    (fake.FakeLLM.collective_rpc, "LLM.collective_rpc"),
    (fake.LLMEngine.add_request, "LLMEngine.add_request"),
    (fake.LLMEngine.step, "LLMEngine.step"),
    (fake.LLMEngine.has_unfinished_requests, "LLMEngine.has_unfinished_requests"),
    (fake.LLMEngine.abort_request, "LLMEngine.abort_request"),
    (fake.EngineCoreClient.shutdown, "EngineCoreClient.shutdown"),
    (fake.SamplingParams.__init__, "SamplingParams"),
    (fake.RequestOutput.__init__, "RequestOutput"),
    (fake.CompletionOutput, "CompletionOutput"),
    (fake.Logprob, "Logprob"),
    (fake.ParamMeta, "ParamMeta"),
    (fake.WeightTransferTrainerFactory.trainer_init, "trainer_init"),
    (fake.IPCTrainer.send_weights, "send_weights"),
    # our own client implements vLLM's protocol: same recorded signatures
    (EngineClient.init_weight_transfer_engine, "client.init_weight_transfer_engine"),
    (EngineClient.start_weight_update, "client.start_weight_update"),
    (EngineClient.update_weights, "client.update_weights"),
    (EngineClient.finish_weight_update, "client.finish_weight_update"),
]


@pytest.mark.parametrize(("fn", "key"), FAKE_CALLABLES, ids=[k for _, k in FAKE_CALLABLES])
def test_fakes_take_exactly_the_recorded_parameters(fn, key):
    params = inspect.signature(fn).parameters.values()
    kinds = {p.kind for p in params}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{key}: no **kwargs catch-all"
    assert inspect.Parameter.VAR_POSITIONAL not in kinds, f"{key}: no *args catch-all"
    names = {p.name for p in params} - {"self", "cls"}
    assert names == set(surface.recorded_params(key))


def test_fake_classes_have_only_recorded_members():
    info_fields = {f.name for f in dataclasses.fields(fake.IPCTrainerInitInfo)} | {"backend"}
    recorded = set(surface.SURFACE["IPCTrainerInitInfo"].names)
    assert info_fields == recorded | set(surface.SURFACE["TrainerInitInfo"].names)
    assert {m.name for m in fake.RequestOutputKind} == set(
        surface.SURFACE["RequestOutputKind"].names
    )
    source_members = {n for n in vars(fake.WeightSource) if not n.startswith("_")}
    assert source_members == set(surface.SURFACE["WeightSource"].names)
    engine = fake.LLMEngine(None)
    assert [n for n in surface.SURFACE["LLMEngine.members"].names if not hasattr(engine, n)] == []


def test_the_fake_ipc_trainer_has_the_recorded_members(monkeypatch):
    # the members the torchrun design rests on (every rank a sender, handles by UUID)
    fake.install(monkeypatch)
    import torch

    from spreadrl.rollout.engines.vllm_sync import weight_source

    trainer = fake.IPCTrainer(None, weight_source(torch.nn.Linear(1, 1)), True, True)
    recorded = surface.SURFACE["IPCTrainerWeightTransferEngine"].names
    assert [n for n in recorded if not hasattr(trainer, n)] == []


def test_a_fake_refuses_an_unrecorded_argument():
    with pytest.raises(TypeError):
        fake.FakeLLM("m", max_num_seqs=8)  # a real EngineArgs field, but spreadrl records none
    with pytest.raises(TypeError):
        fake.SamplingParams(n=2)


def test_the_gpu_extra_pins_the_checked_range():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    gpu = [Requirement(r) for r in project["optional-dependencies"]["gpu"]]
    (vllm,) = [r for r in gpu if r.name == "vllm"]
    assert str(vllm) == str(Requirement(surface.VLLM_REQUIREMENT))
    assert all(vllm.specifier.contains(version) for _, version in surface.WHEELS)
    assert not [r for r in gpu if r.name == "flash-attn"]  # no wheel on PyPI, never imported


def test_ci_runs_the_contract_check_after_the_tests():
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    test = lines.index("make test")
    assert any("tools/vllm/contract.py" in line for line in lines[test + 1 :])
    makefile = (ROOT / "Makefile").read_text()
    assert "tools/vllm/contract" not in makefile  # the download never runs in make test


def test_the_package_never_imports_the_tooling():
    # the contract tooling is CI's, outside the wheel: spreadrl must run without it
    offenders = []
    for path in sorted((ROOT / "spreadrl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {n}"
                for n in names
                if n == "tools" or n.startswith("tools.")
            ]
    assert offenders == []


def test_the_contract_check_runs_as_a_file_from_anywhere(tmp_path):
    # .ci/run's command line: the file path, not -m, from a directory that is not the repo
    wheel = tmp_path / "vllm-0.33.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/__init__.py", '__all__ = ["LLM", "SamplingParams"]\n')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "vllm" / "contract.py"), "--wheel", str(wheel)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    # it imports its manifest, reads the wheel and names what the stub lacks, exit 1
    assert proc.returncode == 1, proc.stderr
    assert "vllm/entrypoints/llm.py: file missing (needed by LLM)" in proc.stderr
    assert f"entries against {wheel.name}: " in proc.stdout


SOURCES = {
    "vllm/entrypoints/llm.py": (
        "class LLM(RLOfflineMixin):\n"
        "    def __init__(self, model, *, seed=0, **kwargs):\n"
        "        self.llm_engine = None\n"
        "    def sleep(self, level=1, mode='abort'):\n"
        "        pass\n"
    ),
    "vllm/engine/arg_utils.py": "class EngineArgs:\n    max_model_len: int = 0\n",
    "vllm/v1/engine/__init__.py": 'FINISH_REASON_STRINGS = ("stop", "length", "abort")\n',
    "vllm/envs.py": 'environment_variables = {"VLLM_X": lambda: 1}\n',
    "vllm/__init__.py": '__all__ = ["LLM"]\n',
}


def _surface(**changes):
    entries = {
        "LLM": surface.Params(
            "vllm/entrypoints/llm.py",
            "LLM.__init__",
            ("model", "seed", "max_model_len"),
            via=("vllm/engine/arg_utils.py", "EngineArgs"),
        ),
        "members": surface.Members("vllm/entrypoints/llm.py", "LLM", ("llm_engine", "sleep")),
        "bases": surface.Bases("vllm/entrypoints/llm.py", "LLM", ("RLOfflineMixin",)),
        "sleep": surface.Params("vllm/entrypoints/llm.py", "LLM.sleep", ("level",)),
        "finish": surface.Values("vllm/v1/engine/__init__.py", "FINISH_REASON_STRINGS", ("abort",)),
        "env": surface.EnvVar("VLLM_X"),
        "exports": surface.Exports("vllm/__init__.py", ("LLM",)),
    }
    entries.update(changes)
    return entries


def test_contract_check_passes_on_matching_source():
    assert check_surface(SOURCES.get, _surface()) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"sleep": surface.Params("vllm/entrypoints/llm.py", "LLM.sleep", ("level", "tags"))},
            "vllm/entrypoints/llm.py:4: LLM.sleep has no parameter 'tags'",
        ),
        (
            {
                "LLM": surface.Params(
                    "vllm/entrypoints/llm.py",
                    "LLM.__init__",
                    ("enable_sleep_mode",),
                    via=("vllm/engine/arg_utils.py", "EngineArgs"),
                )
            },
            "vllm/entrypoints/llm.py:2: LLM.__init__ has no parameter 'enable_sleep_mode'",
        ),
        (
            {
                "finish": surface.Values(
                    "vllm/v1/engine/__init__.py", "FINISH_REASON_STRINGS", ("cancelled",)
                )
            },
            "vllm/v1/engine/__init__.py:1: FINISH_REASON_STRINGS no longer holds 'cancelled'",
        ),
        ({"env": surface.EnvVar("VLLM_Y")}, "vllm/envs.py:1: environment variable VLLM_Y"),
        (
            {"bases": surface.Bases("vllm/entrypoints/llm.py", "LLM", ("Other",))},
            "vllm/entrypoints/llm.py:1: LLM no longer derives from Other",
        ),
        (
            {"members": surface.Members("vllm/entrypoints/llm.py", "LLM", ("engine",))},
            "vllm/entrypoints/llm.py:1: LLM has no member 'engine'",
        ),
        (
            {"gone": surface.Params("vllm/v1/gone.py", "f")},
            "vllm/v1/gone.py: file missing",
        ),
        (
            {"exports": surface.Exports("vllm/__init__.py", ("SamplingParams",))},
            "vllm/__init__.py:1: __all__ no longer exports 'SamplingParams'",
        ),
    ],
)
def test_contract_check_names_file_and_line_of_a_break(change, expected):
    problems = check_surface(SOURCES.get, _surface(**change))
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_a_keyword_reaches_engine_args_only_through_kwargs():
    sources = dict(SOURCES)
    sources["vllm/entrypoints/llm.py"] = sources["vllm/entrypoints/llm.py"].replace(
        ", **kwargs", ""
    )
    problems = check_surface(sources.get, _surface())
    assert problems == [
        "vllm/entrypoints/llm.py:2: LLM.__init__ has no parameter 'max_model_len' (spreadrl: LLM)"
    ]
