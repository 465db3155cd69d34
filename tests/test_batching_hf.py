"""Hugging Face ``Trainer`` integration (optional: skipped without transformers)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from batching_mp import LMDataset, TinyLM, lm_collate, lm_len, lm_lengths  # noqa: E402

from youmu.batching import DynamicBatchLoader, StepInfo, label_token_count, make_odb_trainer  # noqa: E402
from youmu.batching.integrations import STEP_INFO_KEY  # noqa: E402


class HFTiny(torch.nn.Module):
    """A model with the HF calling convention: ``model(input_ids=..., labels=...)["loss"]``."""

    def __init__(self) -> None:
        super().__init__()
        self.lm = TinyLM()

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **kwargs) -> dict:
        logits = self.lm(input_ids)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        return out


def _collate(samples):
    batch = lm_collate(samples)
    batch.pop("ids")
    return batch


def _loader() -> DynamicBatchLoader:
    return DynamicBatchLoader(
        LMDataset(lm_lengths("longtail", 60)), token_budget=96, length_fn=lm_len, collate_fn=_collate,
        token_count_fn=label_token_count(), buffer_size=16, num_workers=0,
    )


@pytest.mark.timeout(120)
def test_trainer_equals_manual_loop(tmp_path) -> None:
    steps = 9
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=1, learning_rate=0.05,
        lr_scheduler_type="constant", optim="sgd", weight_decay=0.0, max_grad_norm=0.0, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, seed=0, dataloader_num_workers=0,
    )
    Trainer = make_odb_trainer()
    model = HFTiny()
    trainer = Trainer(model=model, args=args)
    trainer.odb_loader = _loader()
    trainer.train()
    assert trainer.state.global_step == steps

    manual = HFTiny()
    opt = torch.optim.SGD(manual.parameters(), lr=0.05)
    loader = _loader()
    done = 0
    while done < steps:  # the Trainer starts a new epoch when the loader runs out
        loader.set_epoch(done and loader.epoch + 1)
        for batch, info in loader:
            (manual(**batch)["loss"] * info.loss_scale).backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if done == steps:
                break
    for a, b in zip(model.parameters(), manual.parameters()):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)


def test_compute_loss_applies_the_scale() -> None:
    Trainer = make_odb_trainer()
    model = HFTiny()
    batch = _collate([LMDataset([5, 7])[i] for i in range(2)])
    base = model(**batch)["loss"]
    info = StepInfo(step=0, num_samples=2, num_tokens=10, global_num_samples=4, global_num_tokens=20, loss_scale=1.0)
    inputs = {**batch, STEP_INFO_KEY: replace(info, loss_scale=0.25)}
    loss = Trainer.compute_loss(object.__new__(Trainer), model, inputs)
    assert torch.allclose(loss, base * 0.25)
    assert STEP_INFO_KEY not in inputs
