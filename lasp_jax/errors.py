"""Errors that reach the user as one clear line (see ``main.py``), and the flag parsing and script entry point
that say them so."""

import os
import sys

from absl import flags
from ml_collections.config_flags import config_flags  # the module: is_config_flag is not re-exported


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


def script_args(count: int, usage: str, files: tuple = (), optional: int = 0) -> list:
  """A positional-argument script's arguments (``sys.argv[1:]``), or ``usage`` as one line and exit 2 when there
  are not ``count`` of them (up to ``optional`` more allowed) or an argument at a position in ``files`` names no
  file."""
  args = sys.argv[1:]
  counted = count <= len(args) <= count + optional
  missing = [args[i] for i in files if i < len(args) and not os.path.exists(args[i])]
  if not counted or missing:
    print(f"error: no such file {missing[0]}" if counted else f"usage: {usage}", file=sys.stderr)
    sys.exit(2)
  return args


def one_line(e: BaseException) -> str:
  """The error's message on one line (a KeyError's without its quotes)."""
  text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
  return " ".join(part.strip() for part in text.splitlines() if part.strip())


def parse_flags(argv, usage: str = ""):
  """absl flag parsing that reports a bad flag, config file or config key in one line and exits 2 (no traceback);
  ``--help`` prints ``usage`` when given. For ``app.run(main, flags_parser=...)``."""
  if usage and any(a in ("--help", "-h", "-?", "--usage") for a in argv[1:]):
    print(usage, end="")
    sys.exit(0)
  try:
    parsed = flags.FLAGS(argv)
    _load_config_files()
    return parsed
  except ConfigError as e:
    message = f"error: {e}"
  except flags.Error as e:
    message = f"error: {one_line(e)}"
  except Exception as e:  # noqa: BLE001  (the command line's edge: whatever a config file raises is one line)
    # a misspelled --config.key on the locked ConfigDict, a value its key cannot take, a config file that fails
    message = unknown_key(argv) or f"error: cannot use the --config flag: {one_line(e)}"
  print(message, file=sys.stderr)
  sys.exit(2)


def unknown_key(argv) -> str:
  """'error: unknown config key K; the nearest: N' for the first ``--NAME.K=V`` of ``argv`` whose K is not a key of
  NAME's config file, or ''."""
  import difflib  # noqa: PLC0415
  import runpy  # noqa: PLC0415
  for arg in argv[1:]:
    name, _, rest = arg.lstrip("-").partition(".")
    if not rest or name not in flags.FLAGS or not config_flags.is_config_flag(flags.FLAGS[name]):
      continue
    key = rest.split("=")[0]
    files = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]  # the flag is not parsed yet
    try:
      config = runpy.run_path(files[-1].split(":")[0])["get_config"]()
    except Exception:  # noqa: BLE001  (a broken file is reported as such by the caller)
      return ""
    keys = _dotted(config)
    if key not in keys and not any(k.startswith(key + ".") for k in keys):
      near = difflib.get_close_matches(key, keys, n=1, cutoff=0.0)
      return f"error: unknown config key {key}" + (f"; the nearest: {near[0]}" if near else "")
  return ""


def _dotted(config, prefix: str = "") -> list[str]:
  out = []
  for k, v in config.items():
    out += _dotted(v, f"{prefix}{k}.") if hasattr(v, "items") else [f"{prefix}{k}"]
  return out


def _load_config_files() -> None:
  """Loads every config-file flag's file now: config_flags defers a failed load until the config's first use."""
  for name in list(flags.FLAGS):
    flag = flags.FLAGS[name]
    if not config_flags.is_config_flag(flag) or flag.value is None:
      continue
    try:
      flag.value.to_dict()
    except Exception as e:  # noqa: BLE001  (config_flags defers whatever get_config raised to here)
      path = config_flags.get_config_filename(flag)
      # config_flags' own message lists every path it attempted, over several lines
      reason = f"no such file '{path}'" if not os.path.isfile(path) else one_line(e)
      raise ConfigError(f"cannot load --{name}: {reason}") from e


def run_app(main, usage: str = "") -> None:
  """``absl.app.run(main)`` for a command-line script: a bad flag (:func:`parse_flags`), or a :class:`LaspError`
  or ``app.UsageError`` that ``main`` raises, is one line on stderr and exit code 2, never a traceback."""
  from absl import app  # noqa: PLC0415  (the library's modules raise these errors without absl's app)

  def checked(argv):
    try:
      return main(argv)
    except (LaspError, app.UsageError) as e:
      print(f"error: {one_line(e)}", file=sys.stderr)
      sys.exit(2)

  app.run(checked, flags_parser=lambda argv: parse_flags(argv, usage))
