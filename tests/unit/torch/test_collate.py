"""PadCollate pads numpy rows (a stream's ``output="numpy"``) in one array; the batch
is the one the general path builds from the same rows as tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu.torch import PadCollate, collate_pad, lm_collate

lengths = st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=9)


def _rows(lens: list[int], dtype: str, as_tensor: bool) -> list[dict]:
    rng = np.random.default_rng(len(lens))
    rows = []
    for n in lens:
        ids = rng.integers(1, 1000, n).astype(dtype)
        labels = ids.copy()
        rows.append({"input_ids": torch.from_numpy(ids) if as_tensor else ids,
                     "labels": torch.from_numpy(labels) if as_tensor else labels, "n": n})
    return rows


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


@settings(max_examples=60, deadline=None)
@given(lens=lengths)
def test_numpy_rows_collate_as_tensor_rows_do(lens: list[int]) -> None:
    for collate in (lm_collate, collate_pad, PadCollate({"labels": -7}, lengths=True)):
        _same(collate(_rows(lens, "int64", as_tensor=False)), collate(_rows(lens, "int64", as_tensor=True)))


@pytest.mark.parametrize("dtype", ["int32", "int16", "float32"])
def test_the_padded_batch_keeps_the_rows_dtype(dtype: str) -> None:
    rows = _rows([3, 1, 4], dtype, as_tensor=False)
    batch = lm_collate(rows)
    assert batch["input_ids"].dtype == torch.from_numpy(rows[0]["input_ids"]).dtype
    assert batch["labels"][1].tolist()[1:] == [-100, -100, -100]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert batch["attention_mask"].dtype == torch.long


def test_rows_of_mixed_dtypes_take_the_general_path() -> None:
    rows = [{"input_ids": np.array([1, 2], dtype=np.int64)}, {"input_ids": torch.tensor([3])}]
    batch = lm_collate(rows)
    assert batch["input_ids"].tolist() == [[1, 2], [3, 0]] and batch["attention_mask"].tolist() == [[1, 1], [1, 0]]


def test_the_padded_batch_does_not_share_memory_with_the_rows() -> None:
    rows = _rows([2, 2], "int64", as_tensor=False)
    batch = lm_collate(rows)
    batch["input_ids"][0, 0] = -1
    assert rows[0]["input_ids"][0] != -1
