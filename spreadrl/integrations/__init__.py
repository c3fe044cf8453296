"""The Spreadsheet Gym behind other projects' environment standards.

OpenEnv (``openenv_env``, ``openenv_server``, ``openenv_client``) and TRL's
``environment_factory`` over it (``trl_env``). The command line and the rest of
the package import these modules only when used, so the core install never
needs openenv: it is the ``openenv`` extra (docs/environments.md). The
verifiers taskset is a package of its own, an Environments Hub module in
``packages/verifiers-spreadsheet`` at the repository root, which runs the gym in
the rollout's own tool server (docs/verifiers.md).
"""
