"""Runs mammoth's main.py unchanged (same arguments, as __main__, from mammoth's folder) and prints one line on
stderr at the end: ``TIMING train_call_s=.. eval_s=.. training_s=.. process_s=..``. training_s is the time inside
mammoth's training function less its end-of-task evaluations (mammoth logs no timings of its own).

Run with mammoth's Python, from its folder (perf/against_mammoth.py does): python PATH/mammoth_timed.py ARGS...
"""

import os
import runpy
import sys
import time

START = time.perf_counter()
sys.path.insert(0, os.getcwd())
import utils.training as training  # noqa: E402  (mammoth's, importable once its folder is on the path)
from datasets.utils.continual_dataset import ContinualDataset  # noqa: E402

spent = {"train": 0.0, "eval": 0.0}


def timed(name, fn):
  def wrapper(*args, **kwargs):
    t0 = time.perf_counter()
    try:
      return fn(*args, **kwargs)
    finally:
      spent[name] += time.perf_counter() - t0
  return wrapper


ContinualDataset.evaluate = staticmethod(timed("eval", ContinualDataset.evaluate))
training.train = timed("train", training.train)
sys.argv[0] = "main.py"
try:
  keep = os.environ.get("MAMMOTH_MINIBATCH")
  if keep:
    # mammoth sets minibatch_size to batch_size whenever a batch size is set (its extend_args): put the draw size
    # back after it, as the DER paper ran its best arguments; main.py itself runs unchanged.
    main = runpy.run_path("main.py", run_name="mammoth_main")["main"]
    extend = main.__globals__["extend_args"]

    def extend_keeping_the_draw(args, dataset):
      extend(args, dataset)
      print(f"MINIBATCH {keep} (mammoth had set {args.minibatch_size})", file=sys.stderr, flush=True)
      args.minibatch_size = int(keep)

    main.__globals__["extend_args"] = extend_keeping_the_draw
    main()
  else:
    runpy.run_path("main.py", run_name="__main__")
finally:
  print(f"TIMING train_call_s={spent['train']:.1f} eval_s={spent['eval']:.1f} "
        f"training_s={spent['train'] - spent['eval']:.1f} process_s={time.perf_counter() - START:.1f}",
        file=sys.stderr, flush=True)
