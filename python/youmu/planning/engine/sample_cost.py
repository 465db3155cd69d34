"""A ``cost`` setting as a function of a step's sample metadata: the per-sample cost
of the backbone (:func:`cost_function`: a :class:`~youmu.planning.engine.cost.CostModel`, a
:class:`~youmu.planning.engine.cost.ModelConfig`, a preset name or any ``fn(seqs) -> costs``)
and of an image encoder (:func:`encoder_cost_function` per sample,
:func:`image_cost_function` per image). The planner (:meth:`Planner.cost
<youmu.planning.engine.planner.Planner.cost>`, :meth:`~youmu.planning.engine.planner.Planner.encoder`)
and the plan settings check a setting by building its function once.

Example:
    >>> from youmu.planning import SampleMeta
    >>> meta = SampleMeta.build(ids=range(2), lengths=[30, 70])
    >>> cost_function(lambda seqs: [sum(s) for s in seqs])(meta).tolist()
    [30.0, 70.0]
    >>> cost_function(42)
    Traceback (most recent call last):
    ...
    youmu.errors.ArgumentTypeError: cost must be a CostModel, a ModelConfig, a preset name or a callable seqs -> costs
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from youmu.errors import ArgumentTypeError
from youmu.planning.engine.cost import CostModel, ModelConfig
from youmu.planning.engine.meta import SampleMeta

__all__ = ["cost_function", "encoder_cost_function", "image_cost_function"]


def encoder_cost_function(fn: Any) -> Callable[[SampleMeta], np.ndarray]:
    """Encoder cost per sample from its images' patches (each image its own
    attention block, as a variable-resolution ViT runs them), of an ``encoder_cost``
    setting (see :meth:`youmu.planning.Planner.encoder`); refused where it is not one."""
    if isinstance(fn, (ModelConfig, str)):
        fn = CostModel.from_config(fn)
    if isinstance(fn, CostModel):
        model = fn
        return lambda meta: model(meta.image_csr())
    if not callable(fn):
        raise ArgumentTypeError("encoder cost must be a CostModel, a ModelConfig, a preset name (e.g. 'vit-1b') "
                                "or a callable image_patch_lists -> costs")

    def call(meta: SampleMeta) -> np.ndarray:
        return np.asarray(fn(meta.image_lists()), dtype=np.float64).reshape(-1)

    return call


def image_cost_function(fn: Any) -> Callable[[SampleMeta], np.ndarray]:
    """Encoder cost per *image* (``meta.image_patches`` order): each image a sample of
    its own to the encoder cost model."""
    per_sample = encoder_cost_function(fn)

    def call(meta: SampleMeta) -> np.ndarray:
        p, _ = meta.image_csr()
        alone = SampleMeta.build(ids=range(p.size), lengths=[1] * p.size, images=[[int(x)] for x in p])
        return per_sample(alone)

    return call


def cost_function(fn: Any) -> Callable[[SampleMeta], np.ndarray]:
    """The per-sample cost of a ``cost`` setting (see :meth:`youmu.planning.Planner.cost`), refused
    with :class:`~youmu.errors.ArgumentTypeError` where it is not one."""
    if fn is None:
        fn = CostModel.from_config(None)
    elif isinstance(fn, (ModelConfig, str)):
        fn = CostModel.from_config(fn)
    if isinstance(fn, CostModel):
        model = fn
        return lambda meta: model((meta.doc_lengths, meta.doc_offsets))
    if not callable(fn):
        raise ArgumentTypeError("cost must be a CostModel, a ModelConfig, a preset name or a callable seqs -> costs")

    def call(meta: SampleMeta) -> np.ndarray:
        return np.asarray(fn(meta.seqs()), dtype=np.float64).reshape(-1)

    return call
