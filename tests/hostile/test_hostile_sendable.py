"""A hostile user's tensors through ``SendCollate``: every view torch can make arrives
in the training process with exactly the values the worker saw — lazily conjugated
and negated views included, whose flag torch's own reducer drops — at sizes that
travel inside the pickle and at sizes that travel through shared memory."""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from youmu.torch.sendable import INLINE_TENSOR_BYTES, SendCollate, SendPickler


def _send(value: Any) -> Any:
    buf = io.BytesIO()
    SendPickler(buf, pickle.HIGHEST_PROTOCOL).dump(value)
    return pickle.loads(buf.getvalue())


def _complex(n: int) -> torch.Tensor:
    return torch.complex(torch.arange(n, dtype=torch.float32), -torch.arange(n, dtype=torch.float32) - 1)


_SMALL, _LARGE = 64, INLINE_TENSOR_BYTES // 4 + 7  # inside the pickle / through shared memory

_VIEWS: dict[str, Callable[[int], torch.Tensor]] = {
    "conj": lambda n: _complex(n).conj(),
    "conj of a transposed matrix": lambda n: _complex(2 * n).reshape(2, n).t().conj(),
    "conj of a slice": lambda n: _complex(n + 3)[3:].conj(),
    "conj_physical": lambda n: _complex(n).conj_physical(),
    "negative view": lambda n: torch.arange(n, dtype=torch.float32)._neg_view(),
    "negative view of a conj": lambda n: _complex(n).conj()._neg_view(),
    "imag of a conj": lambda n: _complex(n).conj().imag,
    "real of a conj": lambda n: _complex(n).conj().real,
    "non-contiguous": lambda n: torch.arange(2 * n).reshape(n, 2).t(),
    "every other element": lambda n: torch.arange(2 * n)[::2],
    "expanded (stride 0)": lambda n: torch.tensor([7, 8]).expand(n, 2),
    "offset view": lambda n: torch.arange(n + 10)[10:],
    "zero-size": lambda n: torch.arange(n)[n:],
    "zero-size conj": lambda n: _complex(n)[n:].conj(),
    "bool": lambda n: torch.arange(n) % 3 == 0,
    "bool, non-contiguous": lambda n: (torch.arange(2 * n) % 3 == 0)[1::2],
    "complex128 conj": lambda n: _complex(n).to(torch.complex128).conj(),
    "bfloat16 negative view": lambda n: (torch.arange(n) % 128).to(torch.bfloat16)._neg_view(),
    "int64 negative view": lambda n: torch.arange(n)._neg_view(),
    "unsqueezed conj": lambda n: _complex(n).conj().unsqueeze(0),
}


@pytest.mark.parametrize("size", [_SMALL, _LARGE], ids=["inline", "shared memory"])
@pytest.mark.parametrize("kind", list(_VIEWS))
def test_every_view_arrives_with_the_values_the_worker_saw(kind: str, size: int) -> None:
    t = _VIEWS[kind](size)
    got = _send({"t": t})["t"]
    assert got.dtype == t.dtype and got.shape == t.shape
    assert torch.equal(got.resolve_conj().resolve_neg(), t.resolve_conj().resolve_neg()), kind
    assert not got.is_conj() and not got.is_neg()  # what arrives is materialized


def test_a_conjugated_view_that_needs_grad_is_refused_as_torch_refuses_any_non_leaf() -> None:
    # autograd does not cross processes: torch refuses a non-leaf needing grad, and a
    # materialized view is one — refused, never sent with its values unconjugated
    leaf = _complex(5).requires_grad_(True)
    for view in (leaf.conj(), torch.nn.Parameter(torch.arange(3.0))._neg_view()):
        with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
            _send([view])


class _Views(IterableDataset):
    def __iter__(self):
        yield {kind: make(_SMALL) for kind, make in _VIEWS.items()}
        yield {kind: make(_LARGE) for kind, make in _VIEWS.items()}


def _keep(x: Any) -> Any:
    return x


@pytest.mark.timeout(120)
def test_a_dataloader_worker_hands_over_every_view_exactly() -> None:
    batches = list(DataLoader(_Views(), batch_size=None, num_workers=1, collate_fn=SendCollate(_keep)))
    for batch, size in zip(batches, (_SMALL, _LARGE), strict=True):
        for kind, make in _VIEWS.items():
            want = make(size).resolve_conj().resolve_neg()
            assert torch.equal(batch[kind], want), (kind, size)
