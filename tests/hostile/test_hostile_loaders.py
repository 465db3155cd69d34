"""Hostile use of the loaders that trainers iterate: workers whose batches cannot leave
them, read-ahead threads whose source fails, absurd batch sizes, edited or foreign ``TrainerLoader`` states, a resume on
another number of DataLoader workers, and arguments of the wrong type.

Each case ends in a typed youmu error naming what is wrong — never a hang (every test
here has a hard timeout well below CI's), a silent restart, a skip, or an untyped
error from deep inside a dependency.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from youmu.batching import DynamicBatchLoader
from youmu.errors import ArgumentTypeError, InvalidArgumentError, LoaderError, PrefetchError, StateError
from youmu.integrations.lightning import YoumuDataModule
from youmu.integrations.trainer_loader import GATHERED_FORMAT, TRAINER_LOADER_FORMAT, TrainerLoader
from youmu.planning import BalancedLoader
from youmu.torch import MapStream
from youmu.torch.sendable import SendCollate, unpicklable_field

ROWS = [{"id": i, "input_ids": [i] * (1 + i % 5)} for i in range(24)]


class Unpicklable:
    """What a careless transform returns: it lives fine in its process but cannot cross to another."""

    def __reduce__(self) -> Any:
        raise TypeError("Unpicklable objects stay in their process")


def with_unpicklable(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "handle": Unpicklable()}


def lengths(sample: dict[str, Any]) -> int:
    return len(sample["input_ids"])


def keep(samples: list[Any]) -> dict[str, Any]:
    return {"samples": samples}


# -- a worker's batch that cannot leave it ----------------------------------------------------
@pytest.mark.timeout(60)
def test_a_trainer_loader_worker_whose_batch_cannot_be_pickled_fails_the_loop_at_once() -> None:
    loader = TrainerLoader(MapStream(ROWS, transform=with_unpicklable), batch_size=4, num_workers=2, collate_fn=keep)
    with pytest.raises(LoaderError, match=r"cannot send its batch.*\['samples'\]\[0\]\['handle'\].*TypeError"):
        next(iter(loader))


@pytest.mark.timeout(60)
def test_a_dynamic_batch_loader_worker_whose_sample_cannot_be_pickled_fails_at_once_with_the_cause() -> None:
    data = [with_unpicklable(r) for r in ROWS]
    # data_timeout above the test's timeout: a stall would fail the test, not turn into an error
    loader = DynamicBatchLoader(data, token_budget=16, length_fn=lengths, num_workers=2, collate_fn=None,
                                data_timeout=300)
    with pytest.raises(LoaderError, match=r"cannot send its batch.*\[2\]\['handle'\].*Unpicklable objects stay"):
        next(iter(loader))
    loader.close()


@pytest.mark.timeout(60)
def test_a_balanced_loader_over_such_a_dynamic_batch_loader_fails_at_once() -> None:
    data = [with_unpicklable(r) for r in ROWS]
    dbl = DynamicBatchLoader(data, token_budget=16, length_fn=lengths, num_workers=2, collate_fn=None,
                             data_timeout=300)
    loader = BalancedLoader(dbl, num_microbatches=2, global_batch_size=4, cost="llama-12b", length_fn=lengths)
    with pytest.raises(LoaderError, match="cannot send its batch"):
        next(iter(loader))
    loader.close()
    dbl.close()


def test_the_unpicklable_field_is_found_by_its_path() -> None:
    batch = {"ids": [1, 2], "meta": [{"ok": 1}, {"ok": 2, "gen": (x for x in ())}]}
    assert unpicklable_field(batch) == "['meta'][1]['gen']"
    assert unpicklable_field(lambda: 0) == ""
    loop: list[Any] = [threading.Lock()]
    loop.append(loop)  # a self-reference does not send the search round in circles
    assert unpicklable_field(loop) == "[0]"


def test_a_batch_made_in_a_worker_reaches_the_trainer_unchanged() -> None:
    loader = TrainerLoader(MapStream(ROWS), batch_size=4, num_workers=2)
    got = sorted(i for b in loader for i in b["id"].tolist())
    assert got == list(range(24))
    assert pickle.loads(pickle.dumps(SendCollate(keep)))([1]) == {"samples": [1]}
    assert isinstance(next(iter(loader))["input_ids"], torch.Tensor)


# -- a read-ahead thread whose source fails ---------------------------------------------------
class FailsAtThird:
    """A user's loader whose third batch fails with ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __iter__(self) -> Any:
        yield {"x": torch.ones(1)}
        yield {"x": torch.ones(1)}
        raise self.error


@pytest.mark.timeout(60)
def test_a_prefetcher_whose_loader_fails_names_it_at_the_failed_batch_with_the_cause() -> None:
    from youmu.torch import Prefetcher

    it = iter(Prefetcher(FailsAtThird(ZeroDivisionError("the user's batch code divided by zero")), depth=2))
    next(it), next(it)  # the batches before the failure arrive
    with pytest.raises(PrefetchError, match=r"^Prefetcher over FailsAtThird fetching its batches ahead failed on its "
                       r"background thread 'youmu-prefetch': ZeroDivisionError: the user's batch code") as info:
        next(it)
    assert isinstance(info.value.__cause__, ZeroDivisionError) and isinstance(info.value, LoaderError)
    assert info.value.__cause__.__traceback__ is not None  # the thread's traceback comes along


@pytest.mark.timeout(60)
def test_a_youmu_error_on_a_read_ahead_thread_keeps_its_kind() -> None:
    from youmu.torch import Prefetcher

    it = iter(Prefetcher(FailsAtThird(StateError("field 'epoch' of the state is -1")), depth=2))
    next(it), next(it)
    with pytest.raises(StateError, match="field 'epoch'") as info:
        next(it)
    assert not isinstance(info.value, PrefetchError)


@pytest.mark.timeout(60)
def test_a_balanced_loader_whose_collate_fails_ahead_names_itself() -> None:
    def collate(samples: list[Any]) -> Any:
        raise KeyError("input_ids")

    loader = BalancedLoader(ROWS, num_microbatches=2, global_batch_size=4, cost="llama-12b", length_fn=lengths,
                            collate_fn=collate, prefetch=1)
    with pytest.raises(PrefetchError, match=r"^BalancedLoader \(rank 0\) computing its steps ahead failed on its "
                       r"background thread 'youmu-balanced-r0': KeyError: 'input_ids'") as info:
        next(iter(loader))
    assert isinstance(info.value.__cause__, KeyError)
    loader.close()


@pytest.mark.timeout(60)
def test_a_dynamic_batch_loader_whose_length_fn_fails_ahead_names_itself() -> None:
    loader = DynamicBatchLoader(ROWS, token_budget=16, length_fn=lambda s: s["no_such_field"], num_workers=0,
                                collate_fn=None, data_timeout=300)
    with pytest.raises(PrefetchError, match=r"^DynamicBatchLoader \(rank 0\) drawing its samples ahead failed on "
                       r"its background thread 'youmu-fetcher-r0': KeyError: 'no_such_field'") as info:
        next(iter(loader))
    assert isinstance(info.value.__cause__, KeyError)
    loader.close()


# -- absurd sizes -----------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [2**70, 2**40, 10**12])
def test_an_absurd_batch_size_is_refused_by_name(size: int) -> None:
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        TrainerLoader(MapStream(ROWS), batch_size=size)


# -- TrainerLoader states that would skip or replay ------------------------------------------------
def _saved_after(steps: int, num_workers: int = 0) -> dict[str, Any]:
    loader = TrainerLoader(MapStream(ROWS), batch_size=2, num_workers=num_workers)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    return loader.state_dict()


@pytest.mark.parametrize("field, value, match", [
    ("finished", "no", "'finished' must be a bool"),
    ("finished", 0, "'finished' must be a bool"),
    ("steps", 10**6, "'steps' must be at most 12"),
    ("steps", -1, "'steps' must be >= 0"),
    ("epoch_steps", 2, "'steps' must be at most 2"),
    ("epoch_steps", 0, "'epoch_steps' must be >= 1"),
    ("epoch_steps", 10**9, "exceeds the steps taken"),
    ("source", None, "'source' must be the source's state dict, got NoneType"),
    ("source", [], "'source' must be the source's state dict, got list"),
])
def test_an_edited_trainer_loader_state_is_refused_by_field(field: str, value: Any, match: str) -> None:
    state = {**_saved_after(3), field: value}
    loader = TrainerLoader(MapStream(ROWS), batch_size=2)
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(state)
    with pytest.raises(StateError, match=match):  # every rank's states: the same checks
        loader.load_state_dict({"format": GATHERED_FORMAT, "ranks": [state]})


def test_a_trainer_loader_state_with_an_epoch_count_resumes_its_rest() -> None:
    state = {**_saved_after(3), "epoch_steps": 12}
    loader = TrainerLoader(MapStream(ROWS), batch_size=2)
    loader.load_state_dict(state)
    assert len(loader) == 12 and [i for b in loader for i in b["id"].tolist()] == list(range(6, 24))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("saved_workers, workers", [(0, 2), (2, 0), (2, 1)])
def test_a_trainer_loader_state_resumes_on_another_number_of_workers_exactly(saved_workers: int,
                                                                             workers: int) -> None:
    before = TrainerLoader(MapStream(ROWS), batch_size=2, num_workers=saved_workers)
    it = iter(before)
    seen = [i for _ in range(3) for i in next(it)["id"].tolist()]
    state = before.state_dict()
    assert state["format"] == TRAINER_LOADER_FORMAT
    loader = TrainerLoader(MapStream(ROWS), batch_size=2, num_workers=workers)
    loader.load_state_dict(state)
    rest = [i for b in loader for i in b["id"].tolist()]
    assert sorted(seen + rest) == list(range(24))  # every row of the epoch once: nothing skipped or replayed
    assert loader.epoch_ended and sorted(i for b in loader for i in b["id"].tolist()) == list(range(24))  # epoch 1


# -- a checkpoint that cannot resume the data ---------------------------------------------------
class _Linear:
    """A Lightning module that records the ids it trains on."""

    @staticmethod
    def make() -> Any:
        class Module(pl.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.zeros(1))
                self.seen: list[int] = []

            def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
                self.seen += batch["id"].tolist()
                return (self.w * batch["id"].float()).sum()

            def configure_optimizers(self) -> Any:
                return torch.optim.SGD(self.parameters(), lr=0.0)

        return Module()


def _fit(tmp: Any, ckpt: str | None = None, **dm_kw: Any) -> Any:
    from lightning.pytorch.callbacks import ModelCheckpoint

    module = _Linear.make()
    saver = ModelCheckpoint(dirpath=str(tmp / "ckpt"), every_n_train_steps=4, save_top_k=-1)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, max_steps=-1 if ckpt else 4, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[saver],
                         default_root_dir=str(tmp))
    dm = YoumuDataModule(lambda: TrainerLoader(MapStream(ROWS[:16]), batch_size=2), **dm_kw)
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
    return module


@pytest.mark.timeout(240)
def test_a_lightning_checkpoint_without_the_loader_state_is_refused_not_replayed(tmp_path: Any) -> None:
    assert _fit(tmp_path).seen == list(range(8))
    path = str(next((tmp_path / "ckpt").glob("*step=4*.ckpt")))
    ckpt = torch.load(path, weights_only=False)
    assert "YoumuDataModule" in ckpt
    assert _fit(tmp_path, ckpt=path).seen == list(range(8, 16))  # with the entry: the rest of the epoch, once
    del ckpt["YoumuDataModule"]
    stripped = str(tmp_path / "no_loader.ckpt")
    torch.save(ckpt, stripped)
    with pytest.raises(StateError, match=r"no youmu loader state.*step 4.*restart_data=True"):
        _fit(tmp_path, ckpt=stripped)
    # asked for: the data starts over (Lightning counts the 4 steps done and takes the epoch's 4 others)
    assert _fit(tmp_path, ckpt=stripped, restart_data=True).seen == list(range(8))


def test_restart_data_must_be_a_bool() -> None:
    with pytest.raises(ArgumentTypeError, match="restart_data"):
        YoumuDataModule(lambda: None, restart_data="yes")


# -- the command line -------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_python_dash_m_youmu_runs_the_command_line(tmp_path: Any) -> None:
    import subprocess
    import sys

    from parquet_fixtures import write_columns

    path = write_columns(tmp_path / "t.parquet", {"input_ids": [[1, 2], [3]]}, write_page_index=True)
    run = subprocess.run([sys.executable, "-m", "youmu", "inspect", str(path)], capture_output=True, text=True,
                         timeout=100)
    assert run.returncode == 0, run.stderr
    assert "rows 2" in run.stdout and "input_ids" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "youmu", "nonsense"], capture_output=True, text=True, timeout=100)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2**70, 10**6])
def test_an_absurd_number_of_workers_is_refused_by_name_not_started(workers: int) -> None:
    with pytest.raises(InvalidArgumentError, match="num_workers must be at most 1,024"):
        TrainerLoader(MapStream(ROWS), batch_size=2, num_workers=workers)
    with pytest.raises(InvalidArgumentError, match="num_workers must be at most 1,024"):
        DynamicBatchLoader(ROWS, token_budget=16, length_fn=lengths, num_workers=workers)
