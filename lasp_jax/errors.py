"""Errors that reach the user as one clear line (see ``main.py``)."""


class LaspError(Exception):
  """Base class: the message alone is shown, without a traceback."""


class ConfigError(LaspError):
  """A configuration value is unknown, out of range or inconsistent."""


class DataError(LaspError):
  """A dataset is missing, has the wrong layout, or is corrupted."""


class TrainingError(LaspError):
  """Training cannot continue (for example a non-finite loss)."""
