"""Lightning (``Trainer`` with the DDP strategy on CPU/Gloo) fed by youmu
(youmu.integrations.lightning), in the real package on 2 ranks: a mixture streamed by
``MapStream`` trained exactly once per epoch with Lightning's ``use_distributed_sampler``
left on, a resume from a ``ModelCheckpoint`` file continuing the stream exactly (same
samples, same final parameters), dynamic batches with equal steps on every rank and the
exact token-level gradient, and the loader's metrics in Lightning's logged metrics."""

from __future__ import annotations

import glob
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from batching_mp import run_world
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy
from trainers_mp import N, TinyLM, collate, dataset, gather, grads_match, length, params, reference_grad, torchrun_env

from youmu.batching import DynamicBatchLoader
from youmu.errors import ArgumentTypeError, InvalidArgumentError
from youmu.integrations import TrainerLoader, odb_steps_per_epoch, scale_loss, split_info
from youmu.integrations.lightning import LoaderMetrics, YoumuDataModule
from youmu.mixture import MixtureDataset
from youmu.torch import MapStream


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = TinyLM()
        self.first_grads: list[torch.Tensor] | None = None
        self.steps: list[int] = []  # the samples seen at each optimizer step

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        inputs, info = split_info(batch)
        return scale_loss(self.model(**inputs)["loss"], info)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.steps.append(len(self.model.seen))
        if self.first_grads is None:
            self.first_grads = [p.grad.detach().clone() for p in self.model.parameters()]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _mixture_loader() -> TrainerLoader:
    data = dataset()
    children = {"web": [{**s, "src": "web"} for s in data[:36]], "code": [{**s, "src": "code"} for s in data[36:]]}
    mix = MixtureDataset(children, {"web": 0.75, "code": 0.25}, block_size=8, length=N)
    return TrainerLoader(MapStream(mix, drop_last=True), batch_size=4, collate_fn=collate, source_key="src")


def _fit(tmp: str, make_loader: Any, *, ckpt: str | None = None, callbacks: tuple = (), devices: int = 2,
         **kw: Any) -> tuple[Any, Module]:
    module = Module()
    trainer = pl.Trainer(
        accelerator="cpu", devices=devices, num_nodes=1, strategy=DDPStrategy(process_group_backend="gloo"),
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks), callbacks=list(callbacks), **kw,
    )
    trainer.fit(module, datamodule=YoumuDataModule(make_loader), ckpt_path=ckpt)
    return trainer, module


def lightning_world(rank: int, world: int, tmp: str) -> dict[str, Any]:
    torchrun_env(rank, world)
    res: dict[str, Any] = {}
    # (a) + (b) two epochs of a mixture uninterrupted (metrics through the module's log_dict), then
    # stopped at step 8 (mid epoch 2) and resumed from the checkpoint file
    trainer, full = _fit(f"{tmp}/full", _mixture_loader, max_epochs=2, callbacks=(LoaderMetrics(every_n_steps=1),))
    res["a_ids"], res["a_steps"] = full.model.seen[: N // 2], trainer.global_step
    res["a_metrics"] = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("youmu/")}
    saver = ModelCheckpoint(dirpath=f"{tmp}/ckpt", every_n_train_steps=8, save_top_k=-1)
    _fit(f"{tmp}/cut", _mixture_loader, max_epochs=2, max_steps=8, callbacks=(saver,))
    path = sorted(glob.glob(f"{tmp}/ckpt/*step=8*.ckpt"))[0]
    trainer, resumed = _fit(f"{tmp}/cut", _mixture_loader, max_epochs=2, ckpt=path)
    res["b_full"], res["b_resumed"], res["b_steps"] = full.model.seen, resumed.model.seen, trainer.global_step
    res["b_params"] = all(torch.equal(a, b) for a, b in zip(params(full.model), params(resumed.model)))
    # (c) dynamic batches
    box: dict[str, int] = {}

    def odb() -> TrainerLoader:
        dbl = DynamicBatchLoader(dataset(), token_budget=40, length_fn=length, collate_fn=collate, pool_size=8,
                                 num_workers=0, uneven="pad", seed=7)
        box["steps"] = odb_steps_per_epoch(dbl)
        return TrainerLoader(dbl, steps_per_epoch=box["steps"])

    trainer, module = _fit(f"{tmp}/odb", odb, max_epochs=1)
    res["c_steps"], res["c_predicted"], res["c_ids"] = trainer.global_step, box["steps"], module.model.seen
    res["c_grad_exact"] = grads_match(module.first_grads, reference_grad(gather(module.model.batches[0])))
    # (d) gradient accumulation, resumed mid-epoch from a ModelCheckpoint file: batches of 3 make 8
    # micro-batches per rank and epoch, so accumulate_grad_batches=3 gives optimizer steps of 3, 3
    # and 2 micro-batches (the short last one on the epoch's end); stopped after optimizer step 1
    # (micro-batch 3) and after step 4 (micro-batch 11, 3 into epoch 2). 2 divides the epoch
    for ga, stops in ((3, (1, 4)), (2, (3,))):
        trainer, full = _fit(f"{tmp}/ga{ga}", _plain_loader, max_epochs=2, accumulate_grad_batches=ga)
        for stop in stops:
            saver = ModelCheckpoint(dirpath=f"{tmp}/ga{ga}-{stop}", every_n_train_steps=stop, save_top_k=-1)
            _, head = _fit(f"{tmp}/ga{ga}-{stop}", _plain_loader, max_epochs=2, max_steps=stop, callbacks=(saver,),
                           accumulate_grad_batches=ga)
            path = sorted(glob.glob(f"{tmp}/ga{ga}-{stop}/*step={stop}.ckpt"))[0]
            resumed_trainer, resumed = _fit(f"{tmp}/ga{ga}-{stop}", _plain_loader, max_epochs=2, ckpt=path,
                                            accumulate_grad_batches=ga)
            res[f"d{ga}-{stop}"] = dict(
                full=full.model.seen, steps=full.steps, global_step=trainer.global_step, head=head.steps,
                resumed=resumed.model.seen, tail=resumed.steps, resumed_global_step=resumed_trainer.global_step,
                params=all(torch.equal(a, b) for a, b in zip(params(full.model), params(resumed.model))))
    return res


def _plain_loader() -> TrainerLoader:
    return TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=3, collate_fn=collate)


def lightning_resize_world(rank: int, world: int, tmp: str, save: bool) -> dict[str, Any]:
    """3 ranks save at step 2 (``ModelCheckpoint``); 2 ranks resume from that file."""
    torchrun_env(rank, world)
    if save:
        saver = ModelCheckpoint(dirpath=f"{tmp}/ckpt", every_n_train_steps=2, save_top_k=-1)
        _, module = _fit(f"{tmp}/three", _plain_loader, devices=world, max_epochs=2, max_steps=2, callbacks=(saver,))
        return {"seen": module.model.seen}
    path = sorted(glob.glob(f"{tmp}/ckpt/*step=2*.ckpt"))[0]
    trainer, module = _fit(f"{tmp}/two", _plain_loader, devices=world, max_epochs=2, ckpt=path)
    return {"seen": module.model.seen, "steps": trainer.global_step}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict[str, Any]]:
    return run_world(lightning_world, 2, str(tmp_path_factory.mktemp("pl")), timeout=300)


def test_every_sample_once_per_epoch_without_a_sampler(results) -> None:
    assert sorted(i for r in results for i in r["a_ids"]) == list(range(N))
    assert results[0]["a_steps"] == results[1]["a_steps"] == 2 * N // 8


def test_metrics_in_lightning_logs(results) -> None:
    m = results[0]["a_metrics"]
    assert m["youmu/tokens_per_s"] > 0 and 0 < m["youmu/padding_ratio"] < 1
    # rank 0's share of each source, close to the weights (exact over both ranks' blocks)
    assert m["youmu/mixture/web"] + m["youmu/mixture/code"] == pytest.approx(1.0)
    assert 0.6 <= m["youmu/mixture/web"] <= 0.9


def test_resume_from_checkpoint_continues_exactly(results) -> None:
    for r in results:
        assert len(r["b_full"]) == N
        assert r["b_resumed"] == r["b_full"][8 * 4:]
        assert r["b_params"]
        assert r["b_steps"] == 2 * N // 8


def test_dynamic_batches_same_steps_and_exact_scale(results) -> None:
    assert results[0]["c_steps"] == results[1]["c_steps"] == results[0]["c_predicted"]
    assert sorted(i for r in results for i in r["c_ids"]) == list(range(N))
    assert results[0]["c_grad_exact"] and results[1]["c_grad_exact"]


@pytest.mark.parametrize("ga, stop", [(3, 1), (3, 4), (2, 3)])
def test_gradient_accumulation_resumes_exactly(results, ga, stop) -> None:
    for r in results:
        d = r[f"d{ga}-{stop}"]
        # the samples seen at each optimizer step: the epoch's 8 micro-batches of 3 in steps of ga,
        # the last one short, and the next epoch's first step of its own micro-batches only
        epoch = [min(8, i * ga) * 3 for i in range(1, -(-8 // ga) + 1)]
        assert d["steps"] == epoch + [24 + n for n in epoch]
        assert d["global_step"] == d["resumed_global_step"] == len(d["steps"])
        assert len(d["full"]) == N and len(set(d["full"])) == N // 2  # this rank's half, once per epoch
        # after the resume: the micro-batches after the checkpoint's optimizer step, nothing
        # skipped or replayed, and the uninterrupted run's optimizer steps
        done = d["steps"][stop - 1]
        assert d["head"] == d["steps"][:stop]
        assert d["resumed"] == d["full"][done:]
        assert [done + n for n in d["tail"]] == d["steps"][stop:]
        assert d["params"]


def test_data_module_refuses_other_loaders() -> None:
    dm = YoumuDataModule(lambda: [1, 2, 3])
    with pytest.raises(ArgumentTypeError, match="TrainerLoader"):
        dm.setup("fit")


@pytest.mark.slow  # a multi-process job of 15-45 s: make test-system
def test_checkpoint_of_three_ranks_resumes_on_two(tmp_path) -> None:
    old = run_world(lightning_resize_world, 3, str(tmp_path), True, timeout=300)
    new = run_world(lightning_resize_world, 2, str(tmp_path), False, timeout=300)
    # 3 ranks x 2 steps x 3 samples trained; the other 30 are 15 per rank of the 2-rank job:
    # 5 more steps, so the resumed epoch has 7; the next epoch is a full one of 8 steps on 2
    # ranks, which Lightning sees only if it re-reads the loader's length after the resize
    resumed = [i for r in old for i in r["seen"]] + [i for r in new for i in r["seen"][:15]]
    assert sorted(resumed) == list(range(N))
    assert sorted(i for r in new for i in r["seen"][15:]) == list(range(N))
    assert [r["steps"] for r in new] == [2 + 5 + 8] * 2


def _balanced_loader() -> TrainerLoader:
    """A BalancedLoader of 2 micro-batches per optimizer step, one rank (no process group)."""
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader

    bl = BalancedLoader(MapStream(dataset(), drop_last=True), num_microbatches=2, global_batch_size=8,
                        length_fn=length, collate_fn=collate, seed=3, drop_last=True, channel=GlooChannel.local())
    return TrainerLoader(bl)


def _fit_one(tmp: str, *, ckpt: str | None = None, callbacks: tuple = (), **kw: Any) -> tuple[Any, Module]:
    """Lightning on one CPU device in this process, fed by :func:`_balanced_loader`."""
    module = Module()
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp, callbacks=list(callbacks),
                         enable_checkpointing=bool(callbacks), **kw)
    trainer.fit(module, datamodule=YoumuDataModule(_balanced_loader), ckpt_path=ckpt)
    return trainer, module


def test_balanced_micro_batches_need_as_many_accumulated(tmp_path) -> None:
    # each micro-batch's loss_scale is for the whole step: stepping the optimizer on one
    # micro-batch trains on part of a step, and its checkpoints fall inside a step
    with pytest.raises(InvalidArgumentError, match="accumulate_grad_batches=2, got 1"):
        _fit_one(str(tmp_path), max_epochs=1)


def test_balanced_loader_resumes_from_a_checkpoint_inside_the_epoch(tmp_path) -> None:
    # Lightning fetches one batch ahead of an unsized loader: the checkpoint of optimizer
    # step 2 holds the position after micro-batch 4, not the fetched 5th
    _, full = _fit_one(f"{tmp_path}/full", max_epochs=2, accumulate_grad_batches=2)
    saver = ModelCheckpoint(dirpath=f"{tmp_path}/ckpt", every_n_train_steps=2, save_top_k=-1)
    _, head = _fit_one(f"{tmp_path}/cut", max_epochs=2, max_steps=2, callbacks=(saver,), accumulate_grad_batches=2)
    path = sorted(glob.glob(f"{tmp_path}/ckpt/*step=2.ckpt"))[0]
    _, resumed = _fit_one(f"{tmp_path}/cut", max_epochs=2, ckpt=path, accumulate_grad_batches=2)
    assert sorted(full.model.seen) == sorted(list(range(N)) * 2)  # two epochs, every sample once in each
    done = full.steps[1]
    assert head.steps == full.steps[:2] and head.model.seen[:done] == full.model.seen[:done]
    assert resumed.model.seen == full.model.seen[done:]
    assert [done + n for n in resumed.steps] == full.steps[2:]
    assert all(torch.equal(a, b) for a, b in zip(params(full.model), params(resumed.model)))


def test_accumulated_micro_batches_give_the_per_token_mean_gradient(tmp_path) -> None:
    """Lightning divides ``training_step``'s loss by ``accumulate_grad_batches``; a
    BalancedLoader micro-batch's ``loss_scale`` already weighs it for the whole step, so the
    data module makes up for that division: the first optimizer step's gradient is the
    per-token mean over both micro-batches, not half of it."""
    _, module = _fit_one(str(tmp_path), max_steps=1, accumulate_grad_batches=2)
    assert len(module.model.batches) == 2
    assert module.first_grads is not None
    assert grads_match(module.first_grads, reference_grad(module.model.batches))
