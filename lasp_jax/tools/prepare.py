"""Fetches the original dataset archives once, on a machine with a network.

    python -m lasp_jax.tools.prepare --dataset=cifar10 --data_dir=~/data

Each archive is checked against its published checksum and unpacked into
``data_dir`` in the layout the loaders in ``sources.py`` read. TensorFlow is not
needed. Nothing in training or tests ever downloads.
"""

from __future__ import annotations

import pathlib
import sys
import tarfile
import urllib.request
import zipfile

import tqdm
from absl import flags

from lasp_jax import errors
from lasp_jax.data.sources import file_digest
from lasp_jax.errors import DataError

ARCHIVES = {
    "cifar10": [("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530")],
    "mnist": [(f"https://ossci-datasets.s3.amazonaws.com/mnist/{f}.gz", md5) for f, md5 in [
        ("train-images-idx3-ubyte", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        ("train-labels-idx1-ubyte", "d53e105ee54ea40749a09fcbcd1e9432"),
        ("t10k-images-idx3-ubyte", "9fb629c4189551a2d022fa330f9573f3"),
        ("t10k-labels-idx1-ubyte", "ec29112dd5afa0611ce80d1b7f02629c")]],
    "tiny_imagenet": [("http://cs231n.stanford.edu/tiny-imagenet-200.zip", "90528d7ca1a48142e341f4ef8d21d0de")],
}


def verify(path: pathlib.Path, md5: str) -> None:
  got = file_digest(path, "md5")
  if got != md5:
    raise DataError(f"{path}: md5 {got} != expected {md5} (incomplete download?); delete it and retry")


def unpack(archive: pathlib.Path, data_dir: pathlib.Path) -> None:
  """Extracts a .tar.gz or .zip; a .gz of an IDX file stays as it is (read directly)."""
  if archive.name.endswith(".tar.gz"):
    with tarfile.open(archive) as t:
      t.extractall(data_dir, filter="data")
  elif archive.suffix == ".zip":
    with zipfile.ZipFile(archive) as z:
      z.extractall(data_dir)


def prepare(dataset: str, data_dir: str) -> None:
  if dataset not in ARCHIVES:
    raise DataError(f"nothing to prepare for {dataset!r}; choose one of {sorted(ARCHIVES)}")
  out = pathlib.Path(data_dir).expanduser()
  out.mkdir(parents=True, exist_ok=True)
  for url, md5 in ARCHIVES[dataset]:
    target = out / url.rsplit("/", 1)[1]
    if not target.exists():
      tmp = target.with_suffix(target.suffix + ".part")
      with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f, tqdm.tqdm(
          total=int(r.headers.get("Content-Length") or 0) or None, unit="B", unit_scale=True,
          desc=f"download {target.name}", file=sys.stderr) as bar:
        for block in iter(lambda: r.read(1 << 20), b""):
          f.write(block)
          bar.update(len(block))
      tmp.rename(target)
    verify(target, md5)
    unpack(target, out)
  print(f"{dataset} ready in {out}")


def define_flags() -> None:
  """The command's flags (defined only when it runs: the tests import this module)."""
  flags.DEFINE_string("dataset", None, "cifar10 | mnist | tiny_imagenet")
  flags.DEFINE_string("data_dir", "data", "where to put the files")


def main(argv):
  del argv
  try:
    prepare(flags.FLAGS.dataset, flags.FLAGS.data_dir)
  except OSError as e:  # a failed download: one line, exit 2 (a bad name or checksum, DataError: errors.run_app)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
