"""User-facing errors. The CLI prints these as one clear message (no traceback) and exits with status 2."""
from __future__ import annotations


class PtmError(Exception):
    """Base class of every error caused by the user's input (files, config, flags)."""


class ConfigError(PtmError):
    """A config key, value or preset is wrong; the message names the field and what is allowed."""


class DataError(PtmError):
    """An input file is missing or malformed; the message names the file (and line) and what to do."""


class CheckpointError(PtmError):
    """A checkpoint is missing, incomplete or does not match the model."""


class NumericalError(PtmError):
    """Training diverged: too many consecutive non-finite losses or gradients."""


class DistributedError(PtmError):
    """A multi-process run lost a process: a barrier timed out; the message names who did not arrive."""
