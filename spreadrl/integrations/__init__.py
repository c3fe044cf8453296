"""The Spreadsheet Gym behind other projects' environment standards.

OpenEnv (``openenv_env``, ``openenv_server``, ``openenv_client``), TRL's
``environment_factory`` (``trl_env``) and verifiers (``verifiers_env``). Each
adapter imports its upstream package inside the module, so the core install
never needs them; they are the ``openenv`` and ``verifiers`` extras
(docs/environments.md).
"""
