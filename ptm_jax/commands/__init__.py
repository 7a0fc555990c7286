"""The `ptm` subcommands: one module per group holds their handlers (``cmd_*``), arguments and printed results.

Each module has ``register(subparsers)``, which adds its subcommands with ``handler=`` set (the handler returns an
exit code and raises ``PtmError`` subclasses for user errors); ``ptm_jax/cli.py`` assembles the groups (``GROUPS``).
The work itself (training, evaluation, conversion, inference) lives in the logic modules the handlers call.
"""
