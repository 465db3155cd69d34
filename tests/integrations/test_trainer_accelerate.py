"""Accelerate (a plain ``Accelerator`` loop) fed by youmu (youmu.integrations.accelerate), in
the real package on 2 CPU ranks over Gloo: Parquet rows (``YoumuDataset``) trained exactly
once per epoch, packed sequences with equal steps on every rank, ``save_state`` /
``load_state`` resuming the stream exactly, and dynamic batches of different shapes per
rank (what ``dispatch_batches`` cannot carry) with the exact token-level gradient."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.distributed as dist
from accelerate import Accelerator
from batching_mp import run_world
from parquet_fixtures import write_columns
from trainers_mp import (
    VOCAB,
    N,
    TinyLM,
    collate,
    dataset,
    gather,
    grads_match,
    length,
    params,
    reference_grad,
    sample,
    torchrun_env,
)

from youmu.batching import DynamicBatchLoader
from youmu.errors import ArgumentTypeError
from youmu.integrations import TrainerLoader, scale_loss, split_info
from youmu.integrations.accelerate import log_metrics, prepare
from youmu.torch import MapStream, YoumuDataset, collate_packed, pack


def _with_labels(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "labels": (row["input_ids"] * 7 + 3) % VOCAB}


def _rows(path: str) -> TrainerLoader:
    ds = YoumuDataset(path, shuffle="page", buffer_size=8, seed=1, drop_last=True, transform=_with_labels)
    return TrainerLoader(ds, batch_size=4, collate_fn=collate)


def _run(path: str, *, epochs: int = 2, stop: int | None = None, save: str | None = None,
         load: str | None = None, loader: TrainerLoader | None = None, ga: int | None = None) -> tuple[TinyLM, list[int]]:
    """Train; the samples seen at each optimizer step (their count is the steps). With ``ga``,
    Accelerate's gradient accumulation (``accelerator.accumulate``); ``stop``: save and return
    after that many optimizer steps."""
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=ga or 1)
    model = TinyLM()
    raw = model
    loader = prepare(accelerator, loader or _rows(path))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    if load:
        accelerator.load_state(load)
    steps: list[int] = []
    for _ in range(loader.epoch, epochs):
        for batch in loader:
            with accelerator.accumulate(model) if ga else contextlib.nullcontext():
                inputs, info = split_info(batch)
                accelerator.backward(scale_loss(model(**inputs)["loss"], info))
                opt.step()
                opt.zero_grad()
            if accelerator.sync_gradients:
                steps.append(len(raw.seen))
                if len(steps) == stop:
                    accelerator.save_state(save)
                    return raw, steps
    log_metrics(accelerator, loader)
    return raw, steps


def _stream() -> TrainerLoader:
    return TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=3, collate_fn=collate)


def accelerate_world(rank: int, world: int, tmp: str) -> dict[str, Any]:
    torchrun_env(rank, world)
    path = f"{tmp}/rows.parquet"
    if rank == 0:
        rows = dataset()
        write_columns(path, {"id": [r["id"] for r in rows], "input_ids": [r["input_ids"].tolist() for r in rows]},
                      data_page_size=64, write_page_index=True, row_group_size=16)
    dist.barrier()
    res: dict[str, Any] = {}
    # (a) Parquet rows (the first epoch of the uninterrupted run below); packed sequences
    # (unsized: ranks agree each step)
    packed = pack(YoumuDataset(path, columns=["input_ids"], buffer_size=8, seed=1), seq_len=16, eos_id=0)
    it = TrainerLoader(packed, batch_size=2, collate_fn=collate_packed)
    res["pack_steps"] = sum(1 for _ in it)
    res["pack_local"] = sum(1 for _ in TrainerLoader(packed, batch_size=2, collate_fn=collate_packed, even=False))
    # a bound on the steps (what a trainer's len() wants) is no count: the ranks still agree
    res["pack_bounded"] = sum(1 for _ in TrainerLoader(packed, batch_size=2, collate_fn=collate_packed,
                                                       steps_per_epoch=10_000))
    # (b) two epochs uninterrupted vs stopped at step 8 (mid epoch 2), save_state, load_state
    full, steps = _run(path)
    res["a_ids"], res["a_steps"] = full.seen[: N // 2], len(steps)
    _run(path, stop=8, save=f"{tmp}/ckpt")
    resumed, _ = _run(path, load=f"{tmp}/ckpt")
    res["b_full"], res["b_resumed"] = full.seen, resumed.seen
    res["b_params"] = all(torch.equal(a, b) for a, b in zip(params(full), params(resumed)))
    # (c) dynamic batches through a plain Accelerate loop
    dbl = DynamicBatchLoader(dataset(), token_budget=40, length_fn=length, collate_fn=collate, pool_size=8,
                             num_workers=0, uneven="pad", seed=5)
    accelerator = Accelerator(cpu=True)
    model = TinyLM()
    loader = prepare(accelerator, TrainerLoader(dbl))
    res["c_unwrapped"] = accelerator.prepare(loader) is loader  # Accelerate leaves it alone
    ddp = accelerator.prepare(model)
    grads, shapes, steps = None, [], 0
    for batch in loader:
        inputs, info = split_info(batch)
        shapes.append(tuple(inputs["input_ids"].shape))
        accelerator.backward(scale_loss(ddp(**inputs)["loss"], info))
        if grads is None:
            grads = [p.grad.detach().clone() for p in model.parameters()]
        model.zero_grad()
        steps += 1
    res["c_steps"], res["c_ids"], res["c_shapes"] = steps, model.seen, shapes
    res["c_grad_exact"] = grads_match(grads, reference_grad(gather(model.batches[0])))
    # (d) gradient accumulation, resumed mid-epoch from save_state: batches of 3 make 8 micro-batches
    # per rank and epoch, so GA=3 gives optimizer steps of 3, 3 and 2 micro-batches (the short last
    # one on the epoch's end, as Accelerate's own DataLoaders sync there); stopped after optimizer
    # step 1 (micro-batch 3) and after step 4 (micro-batch 11, 3 into epoch 2). GA=2 divides the epoch
    for ga, stops in ((3, (1, 4)), (2, (3,))):
        full, steps = _run(path, loader=_stream(), ga=ga)
        for stop in stops:
            ckpt = f"{tmp}/ga{ga}-{stop}"
            _, head = _run(path, loader=_stream(), ga=ga, stop=stop, save=ckpt)
            resumed, tail = _run(path, loader=_stream(), ga=ga, load=ckpt)
            res[f"d{ga}-{stop}"] = dict(full=full.seen, steps=steps, resumed=resumed.seen, head=head, tail=tail,
                                        params=all(torch.equal(a, b) for a, b in zip(params(full), params(resumed))))
    # (e) a BalancedLoader's micro-batches accumulated by accelerator.accumulate: each optimizer
    # step's gradient (DDP's average) against one process's per-token mean over both ranks' batches
    from youmu.planning import BalancedLoader

    balanced = TrainerLoader(BalancedLoader(dataset(), num_microbatches=2, global_batch_size=8, collate_fn=collate,
                                            prefetch=0))
    res["e_exact"] = [grads_match(grads, reference_grad([b for bs in gather(batches) for b in bs]))
                      for grads, batches in _accumulated_grads(Accelerator(cpu=True, gradient_accumulation_steps=2),
                                                               balanced, steps=2)]
    # (f) ODB steps accumulated into updates of equal loss tokens (TokenUpdates), registered for
    # save_state: stopped at the third update's boundary and resumed, against the run that never stopped
    full = _token_updates_run(tmp)
    head = _token_updates_run(tmp, stop=3)
    tail = _token_updates_run(tmp, load=f"{tmp}/updates")
    res["f"] = dict(full=full, head=head, tail=tail)
    return res


def _token_updates_run(tmp: str, *, stop: int | None = None, load: str | None = None) -> dict[str, Any]:
    """One ODB epoch through the plain Accelerate loop, optimizer updates of 50 loss tokens
    (the recipe of docs/guides/trainer-accelerate.md): each update's closing step and factor,
    and the weights at the end. ``stop``: ``save_state`` at that update's boundary and return."""
    from youmu.batching import TokenUpdates, label_token_count

    accelerator = Accelerator(cpu=True)
    dbl = DynamicBatchLoader(dataset(), token_budget=40, length_fn=length, collate_fn=collate, pool_size=8,
                             num_workers=0, uneven="pad", seed=5, token_count_fn=label_token_count(shift=False))
    loader = prepare(accelerator, TrainerLoader(dbl))
    raw = TinyLM()
    model, opt = accelerator.prepare(raw, torch.optim.SGD(raw.parameters(), lr=0.1))
    updates = TokenUpdates(50)
    accelerator.register_for_checkpointing(updates)
    if load:
        accelerator.load_state(load)
    closed: list[Any] = []

    def take_update(step: int, factor: float) -> None:
        for p in raw.parameters():
            p.grad.mul_(factor)  # the update's per-token mean
        opt.step()
        opt.zero_grad()
        closed.append((step, factor))

    for batch in loader:
        inputs, info = split_info(batch)
        # the model's mean over this rank's loss tokens, times their count: the summed token loss
        accelerator.backward(updates.scaled_loss(model(**inputs)["loss"] * info.num_tokens, info))
        if (factor := updates.add(info)) is not None:
            take_update(info.step, factor)
            if updates.updates == stop:
                accelerator.save_state(f"{tmp}/updates")  # at a boundary: no gradient pending
                loader.close()
                return dict(closed=closed, boundary=updates.at_boundary)
    if (factor := updates.flush()) is not None:
        take_update(-1, factor)
    return dict(closed=closed, params=params(raw), updates=updates.updates)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict[str, Any]]:
    return run_world(accelerate_world, 2, str(tmp_path_factory.mktemp("acc")), timeout=300)


def test_every_row_once_per_epoch(results) -> None:
    assert sorted(i for r in results for i in r["a_ids"]) == list(range(N))
    assert results[0]["a_steps"] == results[1]["a_steps"] == 2 * N // 8


def test_packed_ranks_take_the_same_steps(results) -> None:
    assert results[0]["pack_steps"] == results[1]["pack_steps"] == min(r["pack_local"] for r in results)
    assert results[0]["pack_local"] != results[1]["pack_local"]  # the ranks' sequences differ
    assert [r["pack_bounded"] for r in results] == [r["pack_steps"] for r in results]


def test_resume_continues_exactly(results) -> None:
    for r in results:
        assert len(r["b_full"]) == N
        assert r["b_resumed"] == r["b_full"][8 * 4:]
        assert r["b_params"]


def test_dynamic_batches_same_steps_and_exact_scale(results) -> None:
    assert all(r["c_unwrapped"] for r in results)
    assert results[0]["c_steps"] == results[1]["c_steps"]
    assert sorted(i for r in results for i in r["c_ids"]) == list(range(N))
    # the shapes differ between the ranks at some step: rank-0 dispatch could not carry them
    assert any(a != b for a, b in zip(results[0]["c_shapes"], results[1]["c_shapes"]))
    assert results[0]["c_grad_exact"] and results[1]["c_grad_exact"]


def test_accumulated_micro_batches_on_two_ranks_give_the_per_token_mean_gradient(results) -> None:
    assert results[0]["e_exact"] == results[1]["e_exact"] == [True, True]


def test_token_updates_resumed_from_save_state_take_the_uninterrupted_runs_updates(results) -> None:
    """``TokenUpdates`` registered with ``accelerator.register_for_checkpointing`` and saved
    at an update's boundary: the resumed job closes the remaining updates at the same steps
    with the same factors, on every rank, and ends with the same weights."""
    for r in results:
        f = r["f"]
        assert f["head"]["boundary"] and len(f["head"]["closed"]) == 3
        assert f["full"]["closed"] == f["head"]["closed"] + f["tail"]["closed"]
        assert len(f["full"]["closed"]) >= 6 and f["tail"]["updates"] == f["full"]["updates"]
        assert all(torch.equal(a, b) for a, b in zip(f["full"]["params"], f["tail"]["params"]))
    assert results[0]["f"]["full"]["closed"] == results[1]["f"]["full"]["closed"]


@pytest.mark.parametrize("ga, stop", [(3, 1), (3, 4), (2, 3)])
def test_gradient_accumulation_resumes_exactly(results, ga, stop) -> None:
    for r in results:
        d = r[f"d{ga}-{stop}"]
        # the samples seen at each optimizer step: the epoch's 8 micro-batches of 3 in steps of ga,
        # the last one short, and the next epoch's first step of its own micro-batches only
        epoch = [min(8, i * ga) * 3 for i in range(1, -(-8 // ga) + 1)]
        assert d["steps"] == epoch + [24 + n for n in epoch]
        assert len(d["full"]) == N and len(set(d["full"])) == N // 2  # this rank's half, once per epoch
        # after the resume: the micro-batches after the checkpoint's optimizer step, nothing
        # skipped or replayed, and the uninterrupted run's optimizer steps
        done = d["steps"][stop - 1]
        assert d["head"] == d["steps"][:stop]
        assert d["resumed"] == d["full"][done:]
        assert [done + n for n in d["tail"]] == d["steps"][stop:]
        assert d["params"]


def test_prepare_refuses_a_raw_stream() -> None:
    with pytest.raises(ArgumentTypeError, match="TrainerLoader"):
        prepare(Accelerator(cpu=True), [sample(0)])  # type: ignore[arg-type]


def test_an_accumulation_that_disagrees_with_the_loaders_micro_batches_is_refused() -> None:
    """A BalancedLoader's ``num_microbatches`` batches make one optimizer step (their
    loss_scale is the step's), a DynamicBatchLoader's batches one each: Accelerate's
    ``accumulate`` over another count would step the optimizer on other groups, so
    ``prepare`` refuses it, as the HF Trainer and Lightning do; the matching count, and
    1 (the loop steps the optimizer itself), are taken."""
    from youmu.errors import InvalidArgumentError
    from youmu.planning import BalancedLoader

    def balanced() -> TrainerLoader:
        return TrainerLoader(BalancedLoader(dataset(16), num_microbatches=2, global_batch_size=4, collate_fn=collate,
                                            prefetch=0))

    with pytest.raises(InvalidArgumentError, match=r"Accelerator.s gradient_accumulation_steps=2, got 3"):
        prepare(Accelerator(cpu=True, gradient_accumulation_steps=3), balanced())
    dbl = DynamicBatchLoader(dataset(), token_budget=40, length_fn=length, collate_fn=collate, num_workers=0)
    with pytest.raises(InvalidArgumentError, match=r"Accelerator.s gradient_accumulation_steps=1, got 2"):
        prepare(Accelerator(cpu=True, gradient_accumulation_steps=2), TrainerLoader(dbl))
    dbl.close()
    for steps in (2, 1):
        loader = balanced()
        assert prepare(Accelerator(cpu=True, gradient_accumulation_steps=steps), loader) is loader
    stream = _stream()  # a stream of samples takes any accumulation
    assert prepare(Accelerator(cpu=True, gradient_accumulation_steps=3), stream) is stream


def test_balanced_loader_micro_batches_resume_exactly() -> None:
    from youmu.planning import BalancedLoader

    def loader() -> TrainerLoader:
        return TrainerLoader(BalancedLoader(dataset(16), num_microbatches=2, global_batch_size=4, collate_fn=collate,
                                            prefetch=0))

    full = [b["id"].tolist() for b in loader()]
    first = loader()
    it = iter(first)
    head = [next(it)["id"].tolist() for _ in range(3)]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    batches = list(resumed)
    assert head + [b["id"].tolist() for b in batches] == full
    assert all(split_info(b)[1].num_microbatches == 2 for b in batches)
    assert sorted(i for ids in full for i in ids) == list(range(16))


def test_a_prefetching_loaders_channel_is_not_shared() -> None:
    """A BalancedLoader plans steps ahead in a thread, all-gathering on its channel; the
    checkpoint's gather of every rank's state runs in the main thread, so it needs another
    channel (on one, the two threads' messages pair up differently on different ranks:
    the seam matrix's Accelerate x BalancedLoader cell crashed in save_state)."""
    from youmu.planning import BalancedLoader

    ahead = BalancedLoader(dataset(8), num_microbatches=2, global_batch_size=4, collate_fn=collate, prefetch=1)
    assert TrainerLoader(ahead).channel is not ahead.channel
    inline = BalancedLoader(dataset(8), num_microbatches=2, global_batch_size=4, collate_fn=collate, prefetch=0)
    assert TrainerLoader(inline).channel is inline.channel


def test_a_dynamic_batch_loaders_channel_is_not_shared() -> None:
    """DynamicBatchLoader's aligner exchanges its rounds in a background thread, so the
    checkpoint's gather needs another channel here too (on one, the seam matrix's
    DeviceMesh x DynamicBatchLoader cell aborted in Gloo now and then: "Received data size
    doesn't match expected size", rank 0 killed by SIGABRT in the resumed job)."""
    from youmu.batching import DynamicBatchLoader

    dbl = DynamicBatchLoader(dataset(8), token_budget=64, length_fn=lambda s: 4, collate_fn=collate, pool_size=4)
    assert TrainerLoader(dbl).channel is not dbl.channel


@pytest.mark.timeout(120)
def test_dataloader_workers_batch_their_own_shares() -> None:
    def loader() -> TrainerLoader:
        return TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=7, collate_fn=collate, num_workers=2)

    full = [b["id"].tolist() for b in loader()]
    assert len(loader()) == len(full) == 8  # 2 workers x ceil(24 / 7), not ceil(48 / 7)
    assert sorted(i for ids in full for i in ids) == list(range(N))
    first = loader()
    it = iter(first)
    head = [next(it)["id"].tolist() for _ in range(3)]
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert head + [b["id"].tolist() for b in resumed] == full


def _accumulated_grads(accelerator: Accelerator, loader: TrainerLoader, steps: int = 1) -> list[Any]:
    """The gradient at each of the first ``steps`` optimizer steps of the plain Accelerate loop
    (``accelerator.accumulate``, ``accelerator.backward(scale_loss(...))``), and each step's
    micro-batches (the non-padding ones: what the per-token mean runs over)."""
    model = TinyLM()
    raw = model
    loader = prepare(accelerator, loader)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay those of the reference's model
    model, opt = accelerator.prepare(model, opt)
    out: list[Any] = []
    batches: list[dict[str, torch.Tensor]] = []
    for batch in loader:
        with accelerator.accumulate(model):
            inputs, info = split_info(batch)
            accelerator.backward(scale_loss(model(**inputs)["loss"], info))
            if not info.is_padding:
                batches.append(raw.batches[-1])
            if accelerator.sync_gradients:
                out.append(([p.grad.detach().clone() for p in raw.parameters()], batches))
                batches = []
            opt.step()
            opt.zero_grad()
        if len(out) == steps:
            break
    loader.close()
    return out


def test_accumulated_micro_batches_give_the_per_token_mean_gradient() -> None:
    """A BalancedLoader's ``loss_scale`` already makes its ``num_microbatches`` micro-batches
    sum to the step's per-token mean; ``accelerator.backward`` divides every loss by
    ``gradient_accumulation_steps`` on top. The integration makes up for that division, so
    the loop written as Accelerate documents it (``accumulate`` + ``backward``) steps the
    optimizer on the per-token mean over the step's tokens, not half of it."""
    from youmu.planning import BalancedLoader

    loader = TrainerLoader(BalancedLoader(dataset(16), num_microbatches=2, global_batch_size=4, collate_fn=collate,
                                          prefetch=0))
    for grads, batches in _accumulated_grads(Accelerator(cpu=True, gradient_accumulation_steps=2), loader, steps=2):
        assert len(batches) == 2
        assert grads_match(grads, reference_grad(batches))
