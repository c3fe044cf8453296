"""`spreadrl bench`: throughput benchmarks (figures go to docs/benchmarks.md, never into tests).

Each benchmark is a thin typer command in its own module here, over the library
functions of :mod:`spreadrl.bench` (which know no typer and print nothing); both
load torch, transformers, the gym or TRL at import. The group imports a
command's module only when that command is looked up (run, or its ``--help``
shown), so ``spreadrl --help`` and every other command start without them
(tests/cli/test_startup.py).
"""

from __future__ import annotations

import importlib

import typer
import typer.main

from spreadrl.cli.console import PlainHelpCommand, PlainHelpGroup

# command name -> (module, function): the typer command of each benchmark
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("spreadrl.cli.bench.check", "bench_check"),
    "env": ("spreadrl.cli.bench.env", "bench_env"),
    "gpu": ("spreadrl.cli.bench.gpu", "bench_gpu"),
    "recalc-fidelity": ("spreadrl.cli.bench.recalc_fidelity", "bench_recalc_fidelity"),
    "rollout": ("spreadrl.cli.bench.rollout", "bench_rollout"),
    "train": ("spreadrl.cli.bench.train", "bench_train"),
    "logprobs": ("spreadrl.cli.bench.train", "bench_logprobs"),
    "trl": ("spreadrl.cli.bench.trl", "bench_trl"),
    "levers": ("spreadrl.cli.bench.levers", "bench_levers"),
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
    help="Benchmarks: check, env, gpu, recalc-fidelity, rollout, train, logprobs, trl, levers.",
    no_args_is_help=True,
    cls=LazyBenchGroup,
)
