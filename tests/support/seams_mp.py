"""The trainer side of the seam matrix (tests/integrations/test_seams.py): one youmu loader of each kind
over one Parquet corpus, a probe model that logs what every training step consumed, and
real trainer jobs (Lightning, Hugging Face ``Trainer``, Accelerate, a ``DeviceMesh`` loop
with DCP) that checkpoint every few steps and can be SIGKILLed at a step. Module level so
that the ranks spawned by ``batching_mp.run_world`` import it.

A job's log is one JSON line per consumed batch, ``[serial, items]`` (``serial``: the
batch's 1-based index in the job's training run, counted from the resume point), written
and flushed before the batch trains, so what a killed job trained survives the kill.
"""

from __future__ import annotations

import functools
import json
import os
import signal
from typing import Any

import torch
from trainers_mp import torchrun_env, write_corpus

from youmu.integrations import TrainerLoader, scale_loss, split_info

EOS, PAD = -2, -1
ROWS = 96  # rows of the corpus
BATCH = 4  # rows per batch (streams); pack: 2 sequences of SEQ tokens
SEQ = 9
MICRO = 2  # micro-batches per optimizer step of the balanced and ray rows


def micro_batches(kind: str) -> int:
    """Batches per optimizer step a row's loader yields (what a trainer accumulates)."""
    return MICRO if kind == "balanced" or kind.startswith("ray") else 1


def corpus(tmp: str) -> str:
    path = f"{tmp}/rows.parquet"
    if not os.path.exists(path):
        write_corpus(path, ROWS)
    return path


def chat_corpus(tmp: str) -> str:
    """``ROWS`` chats in UltraChat's layout with an ``id`` (the ``sft`` row's data)."""
    from textutil import ultrachat, write_chats

    path = f"{tmp}/chats.parquet"
    if not os.path.exists(path):
        write_chats(path, ultrachat(ROWS, seed=9))  # type: ignore[arg-type]
    return path


# -- the loaders of the matrix ----------------------------------------------------------------
def _stream(tmp: str, shuffle: str = "page", *, columns: list[str] | None = None, output: str = "python") -> Any:
    from youmu.torch import YoumuDataset

    return YoumuDataset(corpus(tmp), shuffle=shuffle, buffer_size=8, seed=1, columns=columns, output=output)


def _row_len(row: Any) -> int:
    return len(row["input_ids"])


def make_loader(kind: str, tmp: str, *, workers: int = 0, channel: Any = None, ray: Any = None) -> TrainerLoader:
    """The ``TrainerLoader`` of a matrix row: ``rows-<shuffle mode>``, ``pack``,
    ``mixture`` (``MapStream`` over a ``MixtureDataset``), ``dbl`` (an unsized
    ``DynamicBatchLoader``), ``sft`` (one over chats templated by ``ChatTemplate`` in
    ``workers`` DataLoader workers), ``balanced`` (``BalancedLoader``), ``ray`` (a
    ``RayBalancedLoader`` client of the deployment ``ray``, with this job's rank)."""
    from youmu.torch import collate_packed, collate_pad, pack

    if kind.startswith("rows-"):
        return TrainerLoader(_stream(tmp, kind[5:]), batch_size=BATCH, num_workers=workers, channel=channel)
    if kind == "pack":
        ds = _stream(tmp, columns=["input_ids"], output="numpy")
        return TrainerLoader(pack(ds, seq_len=SEQ, eos_id=EOS, pad_id=PAD), batch_size=2, collate_fn=collate_packed,
                             num_workers=workers, channel=channel)
    if kind == "mixture":
        from trainers_mp import collate, dataset

        from youmu.mixture import MixtureDataset
        from youmu.torch import MapStream

        data = dataset(ROWS)
        mix = MixtureDataset({"web": data[:64], "code": data[64:]}, {"web": 0.75, "code": 0.25}, block_size=8,
                             length=ROWS)
        return TrainerLoader(MapStream(mix, drop_last=True), batch_size=BATCH, collate_fn=collate,
                             num_workers=workers, channel=channel)
    if kind == "dbl":
        from youmu.batching import DynamicBatchLoader

        dbl = DynamicBatchLoader(_stream(tmp), token_budget=24, length_fn=_row_len, collate_fn=collate_pad,
                                 pool_size=8, num_workers=0, uneven="pad", seed=7)  # over the default group
        return TrainerLoader(dbl)
    if kind == "sft":  # the README's SFT recipe: chats templated in `workers` DataLoader workers per rank
        from resume_odb_mp import input_len, sft_dataset

        from youmu.batching import DynamicBatchLoader, label_token_count
        from youmu.torch import lm_collate

        dbl = DynamicBatchLoader(sft_dataset(chat_corpus(tmp)), token_budget=600, length_fn=input_len,
                                 token_count_fn=label_token_count(), collate_fn=lm_collate, pool_size=8,
                                 num_workers=workers, uneven="pad", seed=7)
        # a bound above the epoch: the Trainer runs one epoch, which ends when the loader does
        return TrainerLoader(dbl, steps_per_epoch=ROWS)
    if kind == "balanced":
        from youmu.planning import BalancedLoader

        bl = BalancedLoader(_stream(tmp), num_microbatches=MICRO, global_batch_size=8, length_fn=_row_len,
                            collate_fn=collate_pad, seed=3, drop_last=True, channel=channel)
        return TrainerLoader(bl)
    if kind.startswith("ray"):  # ray, ray-sft: the deployment says what it serves
        import ray as ray_mod

        from youmu.ray import RayBalancedLoader, RayLoaders

        address, name = ray  # each job has a deployment of its own: nothing survives a kill but the states
        if not ray_mod.is_initialized():
            ray_mod.init(address=address, log_to_driver=False)
        deployment = RayLoaders.connect(name, namespace="youmu-seams")
        rank = channel.rank if channel is not None else int(os.environ.get("RANK", "0"))
        # ray-sft: its epochs whole (96 chats in steps of 8, MICRO batches a step), so every chat trains
        steps = ROWS // 8 * MICRO if kind == "ray-sft" else None
        return TrainerLoader(RayBalancedLoader(deployment, rank), channel=channel, steps_per_epoch=steps)
    raise ValueError(kind)


def deploy_ray(tmp: str, name: str, kind: str = "ray") -> Any:
    """A Ray deployment serving the corpus as one source to 2 ranks (balanced steps of 2
    micro-batches, as the ``balanced`` row), named ``name`` in the namespace the ``ray``
    row's clients look in; call it after ``ray.init``. ``kind="ray-sft"``: the chat
    corpus through ``ChatTemplate`` (a batched transform, run in the source loader),
    batches padded as a language model takes them (labels with -100)."""
    from youmu.ray import RayLoaders, Source
    from youmu.torch import collate_pad, lm_collate

    if kind == "ray-sft":
        source = Source(chat_corpus(tmp), shuffle="page", buffer_size=8, seed=1, output="numpy", transform=chat_template())
    else:
        source = Source(corpus(tmp), shuffle="page", buffer_size=8, seed=1, output="numpy")
    return RayLoaders({"default": source}, world_size=2, num_microbatches=MICRO, global_batch_size=8,
                      length_fn=_row_len, collate_fn=lm_collate if kind == "ray-sft" else collate_pad, seed=3,
                      drop_last=True, name=name, namespace="youmu-seams", timeout=60.0)


def chat_template() -> Any:
    """``ChatTemplate`` with the tests' chat tokenizer (a ChatML template whose assistant
    answers are ``{% generation %}`` blocks; trained here, never downloaded)."""
    from textutil import chat_tokenizer

    from youmu.text import ChatTemplate

    return ChatTemplate(chat_tokenizer())


def assistant_tokens(tmp: str) -> dict[int, int]:
    """Each chat's assistant (label) tokens, by the chat's id, templated in this process."""
    from youmu.streams.parquet import ParquetStream

    rows = ParquetStream(chat_corpus(tmp), shuffle="none", output="numpy", transform=chat_template(), rank=0,
                         world_size=1)
    return {int(r["id"]): int((r["labels"] != -100).sum()) for r in rows}


def items(batch: Any) -> list[int]:
    """What a batch carries, as compared: its row ids, or its tokens (``pack``)."""
    inputs, _ = split_info(batch)
    if "id" in inputs:
        ids = inputs["id"]
        return [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
    return [int(t) for t in inputs["input_ids"].flatten().tolist() if t not in (EOS, PAD)]


def on_gpu() -> bool:
    """Whether this job trains on a CUDA device (``YOUMU_SEAMS_DEVICE=cuda``, set by the
    GPU cells of the matrix): the trainers then move every batch to the device, pin host
    memory and (Lightning) run DDP over NCCL, as GPU jobs do."""
    return os.environ.get("YOUMU_SEAMS_DEVICE", "cpu") == "cuda"


# -- the probe: logs each consumed batch, dies at a step -------------------------------------
class Probe(torch.nn.Module):
    """A one-parameter model whose loss depends on the batch (so DDP has a gradient to
    reduce); ``forward`` logs the batch it trains, and SIGKILLs its own process when it
    would train batch ``kill_at`` (serial), before training it."""

    def __init__(self, log: str, kill_at: int | None = None) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.kill_at = kill_at
        self.serial = 0
        os.makedirs(os.path.dirname(log), exist_ok=True)
        self._log = open(log, "a", buffering=1)  # noqa: SIM115 - open for the job's life

    def forward(self, **batch: Any) -> dict[str, torch.Tensor]:
        if self.training:
            self.serial += 1
            if self.serial == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            self._log.write(json.dumps([self.serial, items(batch)]) + "\n")
            self._log.flush()
        x = batch["input_ids"].float()
        return {"loss": ((self.w * x.mean()) ** 2 * 1e-6).sum()}


def read_log(path: str, upto: int | None = None) -> list[list[int]]:
    """The batches a job logged, in order (those up to serial ``upto``)."""
    out: list[list[int]] = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            serial, got = json.loads(line)
            if upto is None or serial <= upto:
                out.append(got)
    return out


# -- the trainer jobs -------------------------------------------------------------------------
# A job trains `epochs` epochs (unsized loaders under the HF Trainer: MAX_STEPS steps),
# checkpoints every `save_every` optimizer steps, is killed at batch `kill_at` and resumes
# from the checkpoint (folder, step) `resume`.
MAX_STEPS = 8

def job(rank: int, world: int, trainer: str, kind: str, tmp: str, run: str, save_every: int,
        kill_at: int | None = None, resume: tuple[str, int] | None = None, epochs: int = 2, workers: int = 0,
        ray: Any = None) -> int:
    """Rank ``rank`` of a job (see the comment above); its checkpoints go to
    ``tmp/<run>/ckpt``, ``resume=(run, step)`` loads that run's checkpoint of ``step``."""
    torchrun_env(rank, world)
    torch.manual_seed(0)
    probe = Probe(f"{tmp}/{run}/rank{rank}.jsonl", kill_at)
    # the trainer accumulates a step's micro-batches (Lightning's accumulate_grad_batches: its
    # data module builds the loader after the Trainer, so the count comes from the row)
    lightning = functools.partial(_lightning, per_step=micro_batches(kind))
    run_fn = {"lightning": lightning, "hf": _hf, "accelerate": _accelerate, "mesh": _mesh}[trainer]

    def make(channel: Any = None) -> TrainerLoader:
        return make_loader(kind, tmp, workers=workers, channel=channel, ray=ray)

    where = None if resume is None else (f"{tmp}/{resume[0]}/ckpt", resume[1])
    return run_fn(probe, make, f"{tmp}/{run}/ckpt", save_every, where, epochs)


def _lightning(probe: Probe, make: Any, ckpt: str, save_every: int, resume: tuple[str, int] | None, epochs: int,
               per_step: int = 1) -> int:
    import glob

    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.strategies import DDPStrategy

    from youmu.integrations.lightning import YoumuDataModule

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.probe = probe

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            inputs, info = split_info(batch)
            return scale_loss(self.probe(**inputs)["loss"], info)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    saver = ModelCheckpoint(dirpath=ckpt, every_n_train_steps=save_every, save_top_k=-1)
    world = int(os.environ["WORLD_SIZE"])
    trainer = pl.Trainer(accelerator="gpu" if on_gpu() else "cpu", devices=world, num_nodes=1,
                         strategy=DDPStrategy(process_group_backend="nccl" if on_gpu() else "gloo"), logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=ckpt, callbacks=[saver], max_epochs=epochs,
                         accumulate_grad_batches=per_step)
    path = None if resume is None else sorted(glob.glob(f"{resume[0]}/*step={resume[1]}.ckpt"))[0]
    trainer.fit(Module(), datamodule=YoumuDataModule(make), ckpt_path=path)
    return trainer.global_step


def _hf(probe: Probe, make: Any, ckpt: str, save_every: int, resume: tuple[str, int] | None, epochs: int) -> int:
    import transformers

    from youmu.integrations.hf import make_trainer

    loader = make()
    per_step = int(getattr(loader.source, "num_microbatches", 1)) if loader.pairs else 1
    kw: dict[str, Any] = {"num_train_epochs": epochs} if loader.has_length() else {"max_steps": MAX_STEPS}
    args = transformers.TrainingArguments(
        output_dir=ckpt, per_device_train_batch_size=1, learning_rate=0.1, lr_scheduler_type="constant", optim="sgd",
        weight_decay=0.0, max_grad_norm=0.0, report_to=[], save_strategy="steps", save_steps=save_every,
        logging_strategy="no", use_cpu=not on_gpu(), seed=0, dataloader_num_workers=0, disable_tqdm=True,
        gradient_accumulation_steps=per_step, **kw)
    trainer = make_trainer()(model=probe, args=args, train_loader=loader)
    trainer.train(resume_from_checkpoint=None if resume is None else f"{resume[0]}/checkpoint-{resume[1]}")
    return int(trainer.state.global_step)


def _own_loop(probe: Probe, loader: TrainerLoader, epochs: int, save: Any, opt: Any, model: Any,
              backward: Any, step: int) -> int:
    """The loop a user writes: ``epochs`` passes (from the loader's epoch on), a
    checkpoint through ``save(step)`` after each optimizer step."""
    per_step = int(getattr(loader.source, "num_microbatches", 1)) if loader.pairs else 1
    while True:
        k = 0
        for batch in loader:
            inputs, info = split_info(batch)
            backward(scale_loss(model(**inputs)["loss"], info))
            k += 1
            if k % per_step == 0 or loader.epoch_ended:
                opt.step()
                opt.zero_grad()
                step += 1
                save(step)
        # after a whole pass loader.epoch is still the epoch it finished
        if not loader.epoch_ended or loader.epoch + 1 >= epochs:
            return step


def _accelerate(probe: Probe, make: Any, ckpt: str, save_every: int, resume: tuple[str, int] | None, epochs: int) -> int:
    from accelerate import Accelerator

    from youmu.integrations.accelerate import prepare

    accelerator = Accelerator(cpu=True)
    loader = prepare(accelerator, make())
    opt = torch.optim.SGD(probe.parameters(), lr=0.1)
    model, opt = accelerator.prepare(probe, opt)
    step = 0
    if resume is not None:
        accelerator.load_state(f"{resume[0]}/step-{resume[1]}")
        step = resume[1]

    def save(s: int) -> None:
        if s % save_every == 0:
            accelerator.save_state(f"{ckpt}/step-{s}")

    return _own_loop(probe, loader, epochs, save, opt, model, accelerator.backward, step)


def _mesh(probe: Probe, make: Any, ckpt: str, save_every: int, resume: tuple[str, int] | None, epochs: int) -> int:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel

    from youmu.integrations.mesh import LoaderState, data_parallel

    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    _, _, channel = data_parallel(mesh)
    loader = make(channel)
    model = DistributedDataParallel(probe)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    if resume is not None:
        state = {"loader": LoaderState(loader, mesh)}
        dcp.load(state, checkpoint_id=f"{resume[0]}/step-{resume[1]}")
        step = resume[1]

    def save(s: int) -> None:
        if s % save_every == 0:
            dcp.save({"loader": LoaderState(loader, mesh)}, checkpoint_id=f"{ckpt}/step-{s}")

    return _own_loop(probe, loader, epochs, save, opt, model, lambda loss: loss.backward(), step)


def batch_rows(kind: str) -> int:
    """Rows (tokens for ``pack``) one batch carries at most: the unit of the counted
    exclusions (a rank's rows past the step count every rank agrees on)."""
    return 2 * SEQ if kind == "pack" else 8 if kind in ("dbl", "sft", "balanced", "ray") else BATCH


