"""youmu inside the trainers people use: Hugging Face ``Trainer``
(:mod:`~youmu.integrations.hf`), Accelerate (:mod:`~youmu.integrations.accelerate`),
Lightning (:mod:`~youmu.integrations.lightning`) and ``DeviceMesh`` jobs
(:mod:`~youmu.integrations.mesh`).

All of them hand the trainer one :class:`~youmu.integrations.trainer_loader.TrainerLoader`: youmu
shards (the trainer neither re-shards nor re-samples), every rank takes the same number
of steps, the loader's per-rank state rides in the trainer's own checkpoint, and
resuming continues the stream exactly in constant time. Nothing here imports a trainer
package until its module is used (the trainers are optional extras:
``pip install youmu[hf]``, ``youmu[accelerate]``, ``youmu[lightning]``).

Example:
    >>> import youmu.integrations as yi
    >>> yi.__all__[:3]
    ['INFO_KEY', 'TrainerLoader', 'odb_steps_per_epoch']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from youmu._internal.lazy import lazy_attributes

if TYPE_CHECKING:
    from youmu.integrations.trainer.batch_info import INFO_KEY, scale_loss, split_info
    from youmu.integrations.trainer.steps import odb_steps_per_epoch
    from youmu.integrations.trainer_loader import TrainerLoader

_LAZY: dict[str, str] = {
    "INFO_KEY": "youmu.integrations.trainer.batch_info",
    "TrainerLoader": "youmu.integrations.trainer_loader",
    "odb_steps_per_epoch": "youmu.integrations.trainer.steps",
    "scale_loss": "youmu.integrations.trainer.batch_info",
    "split_info": "youmu.integrations.trainer.batch_info",
}

__all__ = ["INFO_KEY", "TrainerLoader", "odb_steps_per_epoch", "scale_loss", "split_info"]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
