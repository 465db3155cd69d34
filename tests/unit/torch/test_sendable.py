"""What a DataLoader worker hands to the training process through ``SendCollate``:
small tensors inside the pickled batch (no shared-memory segment and descriptor per
tensor), large ones through torch's shared memory, every one equal to what the worker
made."""

from __future__ import annotations

import io
import pickle
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from youmu.torch.sendable import INLINE_TENSOR_BYTES, SendCollate, SendPickler


def _keep(x: Any) -> Any:
    return x


def _send(value: Any) -> tuple[Any, int]:
    buf = io.BytesIO()
    SendPickler(buf, pickle.HIGHEST_PROTOCOL).dump(value)
    return pickle.loads(buf.getvalue()), len(buf.getvalue())


class _Rows(IterableDataset):
    def __iter__(self):
        for i in range(3):
            yield {"ids": torch.arange(i, i + 100), "image": torch.full((INLINE_TENSOR_BYTES // 4 + 1,), i,
                                                                      dtype=torch.float32)}


@pytest.mark.timeout(120)
def test_small_tensors_leave_a_worker_inside_the_batch_and_large_ones_in_shared_memory() -> None:
    rows = list(DataLoader(_Rows(), batch_size=None, num_workers=1, collate_fn=SendCollate(_keep)))
    assert [r["ids"].tolist() for r in rows] == [list(range(i, i + 100)) for i in range(3)]
    assert [int(r["image"][-1]) for r in rows] == [0, 1, 2]
    assert not any(r["ids"].is_shared() for r in rows)  # copied: no segment, no descriptor
    assert all(r["image"].is_shared() for r in rows)  # over INLINE_TENSOR_BYTES: torch's shared memory


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (5,), (2, 3, 4)])
def test_an_inlined_tensor_keeps_its_dtype_shape_and_values(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    t = (torch.rand(shape) * 100).to(dtype)
    got, _ = _send({"t": t})
    assert got["t"].dtype == dtype and got["t"].shape == t.shape and torch.equal(got["t"], t)
    assert not got["t"].is_shared()


def test_a_view_is_copied_alone_and_the_copy_is_its_own() -> None:
    big = torch.arange(100_000)
    row, size = _send(big[500:510])
    assert row.tolist() == list(range(500, 510)) and size < 1_000  # not the 800 kB it looks into
    row += 1  # writable, and not the worker's memory
    assert big[500] == 500


def test_tensors_not_copied_arrive_as_torch_sends_them() -> None:
    leaf = torch.ones(3, requires_grad=True)
    strided = torch.arange(12).reshape(3, 4).t()
    got, _ = _send([leaf, strided, torch.nn.Parameter(torch.zeros(2))])
    assert got[0].requires_grad and torch.equal(got[0], leaf)
    assert torch.equal(got[1], strided) and got[1].stride() == strided.stride()
    assert isinstance(got[2], torch.nn.Parameter)
