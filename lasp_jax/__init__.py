"""lasp_jax: Look-Ahead Selective Plasticity (LASP) and Co2L in JAX/Flax.

The pieces, for use in your own training loop (every loss takes keyword arguments; embeddings of two
augmented views are stacked view-major, row ``v * B + n`` = view ``v`` of sample ``n``):

* :func:`supcon_loss`: Co2L's asymmetric supervised contrastive loss (only current-task anchors count).
* :func:`ird_loss`: instance-wise relation distillation against a frozen past model's embeddings.
* :func:`selective_ird_loss`: LASP's selective distillation, IRD on a salient subset of embedding dims.
* :func:`search_mask`: the batched nearest-class-mean search for that subset (all restarts in one program).
* :func:`excitation_backprop`: excitation-backprop parameter salience of a Flax model.
* :func:`gradient_modulation`, :func:`set_salience`: LASP's gradient modulation as an optax transformation.
* :mod:`lasp_jax.eval.health`: checks that flag a collapsed or stuck task.

The full continual-learning runner is ``python -m lasp_jax.main`` (or the ``lasp-jax`` script).
"""

import importlib

# Exported lazily: `python -m lasp_jax.main` rejects a bad config before jax loads (~3 s).
_EXPORTS = {"supcon_loss": "method.losses", "ird_loss": "method.losses", "selective_ird_loss": "method.losses",
            "l2_normalize": "method.losses", "search_mask": ("method.mask_search", "search"),
            "SearchResult": "method.mask_search", "excitation_backprop": "method.salience",
            "gradient_modulation": "method.modulation", "set_salience": "method.modulation",
            "get_salience": "method.modulation"}
__all__ = list(_EXPORTS)


def __getattr__(name):
  if name not in _EXPORTS:
    raise AttributeError(f"module 'lasp_jax' has no attribute {name!r}")
  module, attr = _EXPORTS[name] if isinstance(_EXPORTS[name], tuple) else (_EXPORTS[name], name)
  return getattr(importlib.import_module(f"lasp_jax.{module}"), attr)


def __dir__():
  return sorted(list(globals()) + __all__)
