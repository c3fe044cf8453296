"""`spreadrl bench`: throughput benchmarks (figures go to docs/benchmarks.md, never into tests).

Each benchmark is a typer command defined in its own module of
:mod:`spreadrl.bench`, and those modules load torch, transformers, the gym or
TRL at import. The group imports a benchmark's module only when that command
is looked up (run, or its ``--help`` shown), so ``spreadrl --help`` and every
other command start without them (tests/cli/test_startup.py).
"""

from __future__ import annotations

import importlib

import typer
import typer.main

from spreadrl.cli.console import PlainHelpCommand, PlainHelpGroup

# command name -> (module, function): the typer command of each benchmark
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("spreadrl.bench.check", "bench_check"),
    "env": ("spreadrl.bench.env", "bench_env"),
    "gpu": ("spreadrl.bench.gpu", "bench_gpu"),
    "recalc-fidelity": ("spreadrl.bench.recalc_fidelity", "bench_recalc_fidelity"),
    "rollout": ("spreadrl.bench.rollout", "bench_rollout"),
    "train": ("spreadrl.bench.train", "bench_train"),
    "logprobs": ("spreadrl.bench.train", "bench_logprobs"),
    "trl": ("spreadrl.bench.trl", "bench_trl"),
}


class LazyBenchGroup(PlainHelpGroup):
    """A click group whose commands are built from their module on first lookup."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> PlainHelpCommand | None:
        if cmd_name not in COMMANDS:
            return None
        module, function = COMMANDS[cmd_name]
        single = typer.Typer(
            rich_markup_mode="rich", pretty_exceptions_enable=False, add_completion=False
        )
        single.command(cmd_name, cls=PlainHelpCommand)(
            getattr(importlib.import_module(module), function)
        )
        command = typer.main.get_command(single)  # one command: the command itself
        assert isinstance(command, PlainHelpCommand)
        return command


app = typer.Typer(
    help="Benchmarks: check, env, gpu, recalc-fidelity, rollout, train, logprobs, trl.",
    no_args_is_help=True,
    cls=LazyBenchGroup,
)
