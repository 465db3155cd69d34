"""Loss scaling (ODB, Eq. 2) and loss-token counting.

DDP averages gradients over ``W`` ranks. With dynamic batches the ranks hold different
token counts ``t_r``, so averaging per-rank mean losses is biased. Multiplying rank r's
per-token mean loss by ``W * t_r / T_tok`` makes the average equal the per-token mean
over the whole step: ``(1/W) * sum_r (W t_r / T_tok) * (1/t_r) sum l = (1/T_tok) sum l``.

Modes:
    ``"exact"``: ``t_r`` and ``T_tok`` of the aligned groups (a second all_gather when
    alignment changed any rank's groups). ``"approx"``: the same formula with the
    aligned groups' tokens estimated from the pre-alignment counts (no second
    gather). ``"sample"``: ``W * n_r / N_step`` (exact only if tokens per sample are
    equal across ranks). ``"none"``: 1.

Eq. 2 makes each step a per-token mean over *that step's* loss tokens. ODB sizes a step
by its budget (memory: padded tokens), so where the budget counts tokens the loss does
not (image tokens of a VLM, masked prompts) the loss tokens per step vary widely, and an
optimizer that normalises its updates (Adam) gives a step with one caption the weight of
one with twenty. :class:`TokenUpdates` accumulates emitted steps into optimizer updates
of a set number of loss tokens, as gradient accumulation does for fixed batches.

Example:
    >>> loss_scale("exact", world_size=2, local_tokens=30, global_tokens=40,
    ...            local_samples=1, global_samples=3)
    1.5
"""

from __future__ import annotations

from typing import Any

from youmu._internal.args import int_arg
from youmu.errors import InvalidArgumentError, StateError
from youmu.state.formats import StateField, StateFormat, a_number, an_int

__all__ = ["LOSS_SCALING_MODES", "loss_scale", "scaled_token_loss", "label_token_count", "TokenUpdates",
           "TOKEN_UPDATES_STATE"]

LOSS_SCALING_MODES = ("exact", "approx", "sample", "none")


def loss_scale(
    scaling: str,
    world_size: int,
    local_tokens: float,
    global_tokens: float,
    local_samples: int,
    global_samples: int,
) -> float:
    """The factor for this rank's mean loss (0 when this rank contributes nothing)."""
    if scaling in ("exact", "approx"):
        return world_size * local_tokens / global_tokens if global_tokens > 0 else 0.0
    if scaling == "sample":
        return world_size * local_samples / global_samples if global_samples > 0 else 0.0
    if scaling == "none":
        return 1.0 if local_samples > 0 else 0.0
    raise InvalidArgumentError(f"loss_scaling must be one of {LOSS_SCALING_MODES}, got {scaling!r}")


def scaled_token_loss(token_loss_sum: Any, info: Any) -> Any:
    """``sum of per-token losses * W / T_tok``: ODB, Eq. 2 without dividing by ``t_r``.

    Equal to ``mean_loss * info.loss_scale`` but finite when this rank has no loss
    tokens (``t_r = 0``), where the per-rank mean would be 0/0.

    >>> from youmu.batching.algo.step_info import StepInfo
    >>> info = StepInfo(step=0, num_samples=1, num_tokens=3, global_num_samples=2,
    ...                 global_num_tokens=6, loss_scale=1.0, world_size=2)
    >>> scaled_token_loss(1.5, info)
    0.5
    """
    if info.global_num_tokens <= 0:
        return token_loss_sum * 0.0
    return token_loss_sum * (info.world_size / info.global_num_tokens)


class label_token_count:
    """A picklable ``token_count_fn`` counting the tokens that enter a causal LM's loss.

    With ``shift=True`` (Hugging Face causal LMs) the first label never has a
    prediction, so it is not counted.

    >>> count = label_token_count()
    >>> count({"labels": [-100, -100, 5, 6, 7]})
    3
    >>> count({"labels": [5, 6, -100, 7]})
    2
    """

    def __init__(self, key: str = "labels", ignore_index: int = -100, shift: bool = True) -> None:
        self.key = key
        self.ignore_index = ignore_index
        self.shift = shift

    def __call__(self, sample: Any) -> int:
        labels = sample[self.key]
        values = labels.tolist() if hasattr(labels, "tolist") else list(labels)
        if values and isinstance(values[0], list):  # a [1, seq] tensor
            values = values[0]
        if self.shift:
            values = values[1:]
        return sum(1 for x in values if x != self.ignore_index)

    def __repr__(self) -> str:
        return f"label_token_count(key={self.key!r}, ignore_index={self.ignore_index}, shift={self.shift})"


#: The ``TokenUpdates`` state format, declared once (:mod:`youmu.state.formats`). Every
#: value is the same on every rank (global token counts), so any rank's state resumes
#: any rank, on any number of ranks. The next update's boundary is not saved: it is the
#: next multiple of ``tokens_per_update`` above ``tokens_seen``.
TOKEN_UPDATES_STATE = StateFormat("TokenUpdates", "youmu.TokenUpdates/1", (
    StateField("tokens_per_update", an_int(1)),
    StateField("tokens_seen", a_number),
    StateField("pending", a_number),
    StateField("updates", an_int()),
))


class TokenUpdates:
    """Optimizer updates of ``tokens_per_update`` loss tokens each, from ODB's steps.

    An update closes at the first emitted step where the loss tokens emitted so far
    (``info.global_num_tokens`` summed, the same figure on every rank) reach the next
    multiple of ``tokens_per_update`` (a step that crosses several closes one update):
    every rank closes it at the same step, and an update's tokens stay within one step
    of ``tokens_per_update`` instead of drifting. Backpropagate
    :meth:`scaled_loss` for every step (padding steps included: their loss is 0, the
    collectives still run); when :meth:`add` returns a factor, multiply the gradients by
    it and take the optimizer step: the gradient is then the per-token mean over the
    update's loss tokens (ODB, Eq. 2, over the update instead of the step). Call
    :meth:`flush` after the epoch for the last, partial update.

    Checkpoints: :meth:`state_dict` / :meth:`load_state_dict` (plain data, the same on
    every rank) continue with the same update boundaries and factors as an
    uninterrupted run. Save it with the loader's and the model's state where
    :attr:`at_boundary` holds (right after the optimizer step of an update :meth:`add`
    closed): between two boundaries the update's gradient so far lives in the
    parameters' ``.grad``, which trainers' checkpoints leave out, and the resumed
    update's factor would count tokens whose gradient is gone (a gradient too small by
    their share). A job that must checkpoint mid-update saves and restores the ``.grad``
    tensors itself. ``register_for_checkpointing(updates)`` puts it in Accelerate's
    ``save_state``; elsewhere keep ``updates.state_dict()`` beside the loader's.

    >>> from youmu.batching.algo.step_info import StepInfo
    >>> updates = TokenUpdates(100)
    >>> steps = [StepInfo(step=k, num_samples=1, num_tokens=t, global_num_samples=2,
    ...                   global_num_tokens=t, loss_scale=1.0, world_size=2) for k, t in enumerate([30, 60, 150, 40])]
    >>> updates.scaled_loss(1.5, steps[0])  # 1.5 * W / 100
    0.03
    >>> [updates.add(info) for info in steps[:3]]  # 240 tokens cross 100 and 200: one update
    [None, None, 0.4166666666666667]
    >>> updates.at_boundary  # a checkpoint here resumes exactly
    True
    >>> resumed = TokenUpdates(100)
    >>> resumed.load_state_dict(updates.state_dict())
    >>> resumed.add(steps[3]), resumed.flush(), resumed.updates  # the 40 tokens left (the next boundary is 300)
    (None, 2.5, 2)
    >>> resumed.load_state_dict({**updates.state_dict(), "pending": -1})
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: TokenUpdates state field 'pending' must be a finite number in [0, 2**63), got -1
    """

    def __init__(self, tokens_per_update: int) -> None:
        self.tokens_per_update = int_arg("tokens_per_update", tokens_per_update, minimum=1)
        self.tokens_seen = 0.0  # loss tokens of every step added, over all ranks
        self.pending = 0.0  # loss tokens of the update being accumulated
        self.updates = 0  # updates closed (flush included)
        self.boundary = 1  # the multiple of tokens_per_update the next update closes at

    @property
    def at_boundary(self) -> bool:
        """No update is half accumulated: nothing added since the last update closed (or
        since the start). The place to checkpoint (see the class doc)."""
        return self.pending == 0

    def scaled_loss(self, token_loss_sum: Any, info: Any) -> Any:
        """This rank's summed token loss times ``W / tokens_per_update``: DDP's average then
        sums the update's token losses over a fixed denominator until :meth:`add`
        corrects it to the update's real count. 0 on a padding step (its batch repeats
        one already trained on)."""
        if getattr(info, "is_padding", False):
            return token_loss_sum * 0.0
        return token_loss_sum * (info.world_size / self.tokens_per_update)

    def add(self, info: Any) -> float | None:
        """Count a step's loss tokens; the gradient factor when the update is complete.

        With DDP keep each step's all-reduce (no ``no_sync``): the epoch's last,
        partial update is known only after its last step, when :meth:`flush` runs."""
        t = float(info.global_num_tokens)
        self.tokens_seen += t
        self.pending += t
        if self.tokens_seen >= self.boundary * self.tokens_per_update:
            self.boundary = int(self.tokens_seen // self.tokens_per_update) + 1
            return self._close()
        return None

    def flush(self) -> float | None:
        """The factor of the partial update left at the end of an epoch (``None`` if none)."""
        return self._close() if self.pending > 0 else None

    def _close(self) -> float:
        factor = self.tokens_per_update / self.pending
        self.updates += 1
        self.pending = 0.0
        return factor

    def state_dict(self) -> dict[str, Any]:
        """The counts, as plain data (:data:`TOKEN_UPDATES_STATE`)."""
        return TOKEN_UPDATES_STATE.write({"tokens_per_update": self.tokens_per_update,
                                          "tokens_seen": self.tokens_seen, "pending": self.pending,
                                          "updates": self.updates})

    def load_state_dict(self, state: Any) -> None:
        """Continue from a :meth:`state_dict` of a ``TokenUpdates`` with the same
        ``tokens_per_update``; a :class:`~youmu.errors.StateError` names the first field
        that does not fit (and nothing is changed)."""
        _, values = TOKEN_UPDATES_STATE.read(state, expect={"tokens_per_update": self.tokens_per_update})
        seen, pending = values["tokens_seen"], values["pending"]
        if pending > seen:
            raise StateError(f"TokenUpdates state field 'pending' is {pending!r} loss tokens, more than the "
                             f"{seen!r} seen in all ('tokens_seen'): a forged or corrupted state")
        self.tokens_seen, self.pending, self.updates = seen, pending, values["updates"]
        self.boundary = int(seen // self.tokens_per_update) + 1

    def __repr__(self) -> str:
        return f"TokenUpdates(tokens_per_update={self.tokens_per_update}, updates={self.updates})"
