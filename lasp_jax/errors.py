"""Errors that reach the user as one clear line (see ``main.py``)."""


class LaspError(Exception):
  """Base class: the message alone is shown, without a traceback."""


class ConfigError(LaspError):
  """A configuration value is unknown, out of range or inconsistent."""


class DataError(LaspError):
  """A dataset is missing, has the wrong layout, or is corrupted."""


class TrainingError(LaspError):
  """Training cannot continue (for example a non-finite loss)."""


class NonFiniteLoss(TrainingError):
  """A step's loss was not finite: ``what`` says where and what the step measured; ``checkpoint`` is the last good
  checkpoint to resume from (the message has both)."""

  def __init__(self, what: str, checkpoint):
    super().__init__(f"{what}; last good checkpoint: {checkpoint}")
    self.what, self.checkpoint = what, checkpoint
