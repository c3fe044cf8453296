"""`spreadrl bench`: throughput benchmarks (figures go to docs/benchmarks.md, never into tests)."""

import typer

from spreadrl.bench.check import bench_check
from spreadrl.bench.env import bench_env
from spreadrl.bench.gpu import bench_gpu
from spreadrl.bench.recalc_fidelity import bench_recalc_fidelity
from spreadrl.bench.rollout import bench_rollout
from spreadrl.bench.train import bench_logprobs, bench_train
from spreadrl.bench.trl import bench_trl

app = typer.Typer(
    help="Benchmarks: check, env, gpu, recalc-fidelity, rollout, train, logprobs, trl.",
    no_args_is_help=True,
)
app.command("check")(bench_check)
app.command("env")(bench_env)
app.command("gpu")(bench_gpu)
app.command("recalc-fidelity")(bench_recalc_fidelity)
app.command("rollout")(bench_rollout)
app.command("train")(bench_train)
app.command("trl")(bench_trl)
app.command("logprobs")(bench_logprobs)
