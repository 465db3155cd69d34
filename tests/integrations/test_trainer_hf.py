"""Hugging Face ``Trainer`` fed by youmu (youmu.integrations.hf), in the real package on 2
CPU ranks over Gloo: every sample trained exactly once per epoch, a resume from the
Trainer's own checkpoint continues the stream exactly (same samples, same final
parameters), and with dynamic batches every rank takes the same optimizer steps with the
exact token-level gradient."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
import transformers
from batching_mp import run_world
from trainers_mp import N, TinyLM, collate, dataset, gather, grads_match, length, params, reference_grad, torchrun_env

from youmu.batching import DynamicBatchLoader, StepInfo
from youmu.errors import InvalidArgumentError, StateError
from youmu.integrations import INFO_KEY, TrainerLoader, odb_steps_per_epoch
from youmu.integrations.hf import loader_state_path, make_trainer
from youmu.torch import MapStream


def _args(out: str, **kw: Any) -> Any:
    base = dict(output_dir=out, per_device_train_batch_size=1, learning_rate=0.1, lr_scheduler_type="constant",
                optim="sgd", weight_decay=0.0, max_grad_norm=0.0, report_to=[], save_strategy="no",
                logging_strategy="no", use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True)
    base.update(kw)
    return transformers.TrainingArguments(**base)


def _stream_loader(batch_size: int = 4) -> TrainerLoader:
    return TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=batch_size, collate_fn=collate,
                         source_key="src")


class _StopAt(transformers.TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kw):
        if state.global_step == self.step:
            control.should_training_stop = True


class _FirstGrad(transformers.TrainerCallback):
    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.grads = model, None

    def on_pre_optimizer_step(self, args, state, control, **kw):
        if self.grads is None:
            self.grads = [p.grad.detach().clone() for p in self.model.parameters()]


def _train(out: str, loader: TrainerLoader, *, stop: int | None = None, resume: str | None = None,
           **kw: Any) -> tuple[Any, TinyLM]:
    model = TinyLM()
    Trainer = make_trainer()
    trainer = Trainer(model=model, args=_args(out, **kw), train_loader=loader)
    if stop is not None:
        trainer.add_callback(_StopAt(stop))
    trainer.train(resume_from_checkpoint=resume)
    return trainer, model


def hf_world(rank: int, world: int, tmp: str) -> dict[str, Any]:
    torchrun_env(rank, world)
    torch.manual_seed(0)
    res: dict[str, Any] = {}
    # (a) + (b) two epochs from the sized stream (num_train_epochs works, no max_steps), then the
    # same stopped at step 9 (mid epoch 2) and resumed from the checkpoint
    trainer, full = _train(f"{tmp}/full", _stream_loader(), num_train_epochs=2, logging_strategy="steps",
                           logging_steps=2)
    res["a_ids"], res["a_steps"] = full.seen[: N // 2], trainer.state.global_step
    res["a_logs"] = [h for h in trainer.state.log_history if "youmu/tokens_per_s" in h]
    _train(f"{tmp}/cut", _stream_loader(), num_train_epochs=2, stop=9, save_strategy="steps", save_steps=9)
    ckpt = f"{tmp}/cut/checkpoint-9"
    res["b_state_file"] = os.path.exists(loader_state_path(ckpt, rank))
    trainer, resumed = _train(f"{tmp}/cut", _stream_loader(), num_train_epochs=2, resume=ckpt)
    res["b_full"], res["b_resumed"] = full.seen, resumed.seen
    res["b_params"] = all(torch.equal(a, b) for a, b in zip(params(full), params(resumed)))
    res["b_steps"] = trainer.state.global_step
    # (c) dynamic batches: same steps on every rank, exact token-level gradient
    dbl = DynamicBatchLoader(dataset(), token_budget=40, length_fn=length, collate_fn=collate, pool_size=8,
                             num_workers=0, uneven="pad", seed=3)
    steps = odb_steps_per_epoch(dbl)
    model = TinyLM()
    Trainer = make_trainer()
    trainer = Trainer(model=model, args=_args(f"{tmp}/odb", num_train_epochs=1),
                      train_loader=TrainerLoader(dbl, steps_per_epoch=steps))
    probe = _FirstGrad(model)
    trainer.add_callback(probe)
    trainer.train()
    res["c_steps"], res["c_predicted"], res["c_ids"] = trainer.state.global_step, steps, model.seen
    first = gather(model.batches[0])
    res["c_grad_exact"] = grads_match(probe.grads, reference_grad(first))
    # (d) gradient accumulation, resumed mid-epoch from the Trainer's checkpoint: batches of 3
    # make 8 micro-batches per rank and epoch, so GA=3 gives optimizer steps of 3, 3 and 2
    # micro-batches (the Trainer's short last step); GA=2 divides the epoch (4 steps of 2)
    for ga, stop in ((3, 1), (2, 3)):
        kw: dict[str, Any] = dict(num_train_epochs=2, gradient_accumulation_steps=ga)
        trainer, full = _train(f"{tmp}/ga{ga}-full", _stream_loader(3), **kw)
        steps = trainer.state.global_step
        _train(f"{tmp}/ga{ga}-cut", _stream_loader(3), stop=stop, save_strategy="steps", save_steps=stop, **kw)
        trainer, resumed = _train(f"{tmp}/ga{ga}-cut", _stream_loader(3), resume=f"{tmp}/ga{ga}-cut/checkpoint-{stop}",
                                  **kw)
        res[f"d{ga}"] = dict(stop=stop, full=full.seen, resumed=resumed.seen, steps=steps,
                             resumed_steps=trainer.state.global_step,
                             params=all(torch.equal(a, b) for a, b in zip(params(full), params(resumed))))
    return res


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict[str, Any]]:
    return run_world(hf_world, 2, str(tmp_path_factory.mktemp("hf")), timeout=300)


def test_every_sample_once_per_epoch(results) -> None:
    ids = [i for r in results for i in r["a_ids"]]
    assert sorted(ids) == list(range(N))
    assert [r["a_steps"] for r in results] == [2 * N // 8] * 2


def test_metrics_reach_the_trainer_log(results) -> None:
    logs = results[0]["a_logs"]
    assert logs and all(h["youmu/tokens_per_s"] > 0 for h in logs)
    assert 0 < logs[-1]["youmu/padding_ratio"] < 1
    assert logs[-1]["youmu/mixture/a"] == pytest.approx(0.5)  # sources alternate in pairs of ids
    assert "youmu/data_wait_p99_ms" in logs[-1]


def test_resume_continues_exactly(results) -> None:
    for r in results:
        assert r["b_state_file"]
        assert len(r["b_full"]) == 2 * N // 2
        assert r["b_resumed"] == r["b_full"][9 * 4:]  # the samples after step 9, nothing skipped or replayed
        assert r["b_params"]
        assert r["b_steps"] == 2 * N // 8


@pytest.mark.parametrize("ga", [3, 2])
def test_gradient_accumulation_resumes_exactly(results, ga) -> None:
    for r in results:
        d = r[f"d{ga}"]
        assert d["steps"] == 2 * (3 if ga == 3 else 4)  # 2 epochs of ceil(8 / ga) optimizer steps
        assert len(d["full"]) == N and len(set(d["full"])) == N // 2  # this rank's half, once per epoch
        # the micro-batches after the checkpoint's optimizer step, nothing skipped or replayed
        assert d["resumed"] == d["full"][d["stop"] * ga * 3:]
        assert d["resumed_steps"] == d["steps"]
        assert d["params"]


def test_dynamic_batches_same_steps_and_exact_scale(results) -> None:
    assert results[0]["c_steps"] == results[1]["c_steps"] == results[0]["c_predicted"]
    assert sorted(i for r in results for i in r["c_ids"]) == list(range(N))
    assert results[0]["c_grad_exact"] and results[1]["c_grad_exact"]


def test_compute_loss_applies_the_scale() -> None:
    Trainer = make_trainer()
    model = TinyLM()
    batch = collate(dataset(2))
    base = model(**batch)["loss"]
    info = StepInfo(step=0, num_samples=2, num_tokens=10, global_num_samples=4, global_num_tokens=20, loss_scale=0.25)
    loss = Trainer.compute_loss(object.__new__(Trainer), model, {**batch, INFO_KEY: info})
    assert torch.allclose(loss, base * 0.25)


def test_refuses_accumulation_with_dynamic_batches_and_foreign_checkpoints(tmp_path) -> None:
    dbl = DynamicBatchLoader(dataset(8), token_budget=40, length_fn=length, collate_fn=collate, pool_size=4,
                             num_workers=0)
    Trainer = make_trainer()
    with pytest.raises(InvalidArgumentError, match="uneven='pad'"):  # ranks could stop at different steps
        Trainer(model=TinyLM(), args=_args(str(tmp_path), max_steps=2), train_loader=TrainerLoader(dbl))
    dbl.uneven = "pad"
    with pytest.raises(InvalidArgumentError, match="gradient_accumulation_steps"):
        Trainer(model=TinyLM(), args=_args(str(tmp_path), gradient_accumulation_steps=2, max_steps=2),
                train_loader=TrainerLoader(dbl))
    from youmu.planning import BalancedLoader

    balanced = TrainerLoader(BalancedLoader(dataset(8), num_microbatches=2, global_batch_size=4, collate_fn=collate,
                                            prefetch=0))
    with pytest.raises(InvalidArgumentError, match="gradient_accumulation_steps=2"):
        Trainer(model=TinyLM(), args=_args(str(tmp_path), max_steps=2), train_loader=balanced)
    trainer = Trainer(model=TinyLM(), args=_args(str(tmp_path), max_steps=2, gradient_accumulation_steps=2),
                      train_loader=balanced)
    assert trainer.loss_is_scaled_for_ga  # youmu's scale covers the step: no division by the accumulation
    (tmp_path / "checkpoint-1").mkdir()
    trainer = Trainer(model=TinyLM(), args=_args(str(tmp_path), max_steps=2), train_loader=_stream_loader())
    with pytest.raises(StateError, match="no youmu loader state"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))


def test_a_loader_without_mid_epoch_states_is_refused_when_the_trainer_takes_it(tmp_path) -> None:
    """A DynamicBatchLoader over an iterable dataset without state_dict() cannot save a
    mid-epoch state: a Trainer that saves checkpoints refuses it when it is built (not
    at its first checkpoint); one that saves none takes it."""

    class Stateless(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(dataset(8))

    Trainer = make_trainer()
    for workers in (0, 2):
        dbl = DynamicBatchLoader(Stateless(), token_budget=40, length_fn=length, collate_fn=collate, pool_size=4,
                                 num_workers=workers, uneven="pad")
        with pytest.raises(InvalidArgumentError, match="saves checkpoints.*Stateless has none"):
            Trainer(model=TinyLM(), args=_args(str(tmp_path), max_steps=2, save_strategy="steps", save_steps=1),
                    train_loader=TrainerLoader(dbl))
        Trainer(model=TinyLM(), args=_args(str(tmp_path), max_steps=2), train_loader=TrainerLoader(dbl))
        dbl.close()


def test_import_youmu_imports_no_trainer() -> None:
    import subprocess
    import sys

    code = ("import sys, youmu, youmu.integrations, youmu.batching; youmu.integrations.TrainerLoader; "
            "print(sorted(m for m in ('transformers', 'accelerate', 'lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # a multi-process job of 15-45 s: make test-system
def test_the_trainers_epoch_count_never_resets_the_loaded_epoch(tmp_path) -> None:
    """A loader of unknown length under ``max_steps``: the resumed Trainer cannot tell how
    many epochs the steps covered, counts from epoch 0 again and calls ``set_epoch(0)``.
    The loader continues the epoch its state was saved in (the one epoch rule would start
    epoch 0 afresh if the Trainer's call reached it)."""
    from youmu.integrations.hf import _TrainerView

    def loader() -> TrainerLoader:
        return TrainerLoader(DynamicBatchLoader(dataset(12), token_budget=40, length_fn=length, collate_fn=collate,
                                                pool_size=4, num_workers=0, uneven="pad", seed=3))

    steps = odb_steps_per_epoch(loader().source)
    stop, total = steps + 1, 2 * steps
    _, full = _train(f"{tmp_path}/full", loader(), max_steps=total)
    _, cut = _train(f"{tmp_path}/cut", loader(), max_steps=total, stop=stop, save_strategy="steps",
                    save_steps=stop)
    trainer, resumed = _train(f"{tmp_path}/cut", loader(), max_steps=total, resume=f"{tmp_path}/cut/checkpoint-{stop}")
    assert trainer.youmu_loader.epoch == 1
    assert cut.seen + resumed.seen == full.seen
    assert not hasattr(_TrainerView(loader()), "set_epoch")  # what the Trainer is handed


def test_accumulated_balanced_micro_batches_give_the_per_token_mean_gradient(tmp_path) -> None:
    """A BalancedLoader's micro-batches already carry ``loss_scale``, which makes the
    step's ``num_microbatches`` losses sum to its per-token mean; the Trainer, accumulating
    them with ``gradient_accumulation_steps=num_microbatches``, must not divide by the
    accumulation on top (as Accelerate's and Lightning's loops did): every optimizer step's
    gradient is the per-token mean over the step's micro-batches, computed in one process."""
    from youmu.planning import BalancedLoader

    grads: list[list[torch.Tensor]] = []

    class Grads(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            grads.append([p.grad.detach().clone() for p in model.parameters()])

    loader = TrainerLoader(BalancedLoader(dataset(16), num_microbatches=2, global_batch_size=4, collate_fn=collate,
                                          prefetch=0))
    model = TinyLM()
    Trainer = make_trainer()
    trainer = Trainer(model=model, args=_args(str(tmp_path), max_steps=2, gradient_accumulation_steps=2, learning_rate=0.0),
                      train_loader=loader, callbacks=[Grads()])
    trainer.train()
    assert len(grads) == 2 and len(model.batches) == 4
    for k, got in enumerate(grads):
        assert grads_match(got, reference_grad(model.batches[2 * k: 2 * k + 2])), f"optimizer step {k}"
