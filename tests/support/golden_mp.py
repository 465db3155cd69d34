"""Shared pieces of the golden-stream tests (``tests/promises/test_golden_streams.py``): the
deterministic corpus, the one way every stream is hashed, and the scenario that the
spawned Gloo ranks run.

Everything a spawned rank imports lives here, at module level (``spawn`` children
import this module by name; ``tests/support`` is on their ``sys.path`` as on the parent's).

The corpus
    Two sources written by :func:`write_corpus`. ``main``: three files whose row groups
    hold 7, 13 and 20 rows; ``aux``: two files of 5- and 11-row groups (the mixtures'
    second source). Every file is written without a page index, with one data page
    per column chunk (a page-size limit far above any chunk, no dictionary), so the
    page structure is exactly the row-group structure and cannot drift with the
    pyarrow version. Columns: ``id`` (int64, unique over both sources) and
    ``input_ids`` (list<int32>, 5–300 tokens). Lengths and tokens come from
    ``numpy.random.RandomState``, whose streams numpy keeps stable across releases.

The hash
    :func:`digest` turns a sequence of items into ``(count, sha256)``: each item is
    reduced to plain JSON values by :func:`canon` (tensors, arrays and Arrow rows to
    lists, floats rounded to 9 decimals) and written as one line of sorted-key JSON.
    The ``*_key`` helpers pick what counts in an item: a row's ``id`` and tokens (with
    the value types, for the output-format cases), a packed sequence's tokens,
    boundaries and positions with their dtypes, a collated batch's tensors with
    dtypes and shapes, a batch loader step's sample ids and the step fields a
    trainer acts on (step, micro-batch, sample and token counts, ``loss_scale``
    rounded, ``is_padding``).

The batch loader cases
    :func:`dbl_cases` and :func:`balanced_cases` build every ``DynamicBatchLoader`` and
    ``BalancedLoader`` case for one rank; the test runs them in its own process (no
    group) and :func:`golden_rank_scenario` runs them on two spawned Gloo ranks, in
    one launch, and sends back only digests and delivered sample ids.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

# (file name, rows, rows per row group): pages = row groups, the last one short
MAIN_FILES = [("part-0.parquet", 95, 7), ("part-1.parquet", 110, 13), ("part-2.parquet", 105, 20)]
AUX_FILES = [("aux-0.parquet", 40, 5), ("aux-1.parquet", 33, 11)]
AUX_FIRST_ID = 10_000
CORPUS_SEED = 20_250_601
MIN_TOKENS, MAX_TOKENS = 5, 300
VOCAB = 32_000

# collective timeout of the spawned ranks' channels and loaders (2 shared cores)
TIMEOUT = 120.0


# ----------------------------------------------------------------------------------------
# corpus
# ----------------------------------------------------------------------------------------
def expected_page_rows(files: list[tuple[str, int, int]]) -> list[int]:
    """Rows of every page, in index order, that the writer is meant to produce."""
    out: list[int] = []
    for _, n, rg in files:
        out += [rg] * (n // rg) + ([n % rg] if n % rg else [])
    return out


def _write_source(directory: Path, files: list[tuple[str, int, int]], first_id: int,
                  rng: np.random.RandomState) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    next_id = first_id
    for name, n, rg in files:
        lengths = rng.randint(MIN_TOKENS, MAX_TOKENS + 1, size=n)
        tokens = rng.randint(1, VOCAB, size=int(lengths.sum())).astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        table = pa.table({
            "id": pa.array(np.arange(next_id, next_id + n, dtype=np.int64)),
            "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens, pa.int32())),
        })
        # written here, every writer option spelled out: the golden streams pin this exact layout
        pq.write_table(
            table, directory / name, row_group_size=rg, data_page_size=64 << 20, write_page_index=False,
            use_dictionary=False, compression="none", write_statistics=False, data_page_version="1.0",
        )
        next_id += n


def write_corpus(root: Path) -> dict[str, str]:
    """Write both sources under ``root``; returns ``{"main": dir, "aux": dir}``."""
    rng = np.random.RandomState(CORPUS_SEED)
    _write_source(root / "main", MAIN_FILES, 0, rng)
    _write_source(root / "aux", AUX_FILES, AUX_FIRST_ID, rng)
    return {"main": str(root / "main"), "aux": str(root / "aux")}


# ----------------------------------------------------------------------------------------
# hashing
# ----------------------------------------------------------------------------------------
def canon(x: Any) -> Any:
    """Plain JSON values for ``x`` (the same for every output format of a row)."""
    import pyarrow as pa

    if isinstance(x, dict):
        return {str(k): canon(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [canon(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return round(float(x), 9)
    if isinstance(x, np.ndarray):
        return canon(x.tolist())
    if isinstance(x, (pa.RecordBatch, pa.Table)):
        rows = x.to_pylist()
        return canon(rows[0] if len(rows) == 1 else rows)
    if isinstance(x, (pa.Array, pa.ChunkedArray)):
        return canon(x.to_pylist())
    if x is None or isinstance(x, str):
        return x
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return canon(x.tolist())
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot canonicalise a {type(x).__name__}")


def digest(items: Iterable[Any]) -> dict[str, Any]:
    """``{"count": n, "sha256": hex}`` of a sequence of (canonicalisable) items."""
    h = hashlib.sha256()
    n = 0
    for item in items:
        h.update(json.dumps(canon(item), sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
        n += 1
    return {"count": n, "sha256": h.hexdigest()}


def row_key(row: Any) -> dict[str, Any]:
    """A row: its ``id`` and tokens, whatever the output format."""
    r = canon(row)
    return {"id": r["id"], "input_ids": r["input_ids"]}


def type_sig(x: Any) -> Any:
    """What kind of value ``x`` is (library, dtype, rank), for the cases that pin the
    output types too (:func:`typed_row_key`, :func:`tensors_key`)."""
    import pyarrow as pa

    if isinstance(x, dict):
        return {str(k): type_sig(v) for k, v in x.items()}
    if isinstance(x, (pa.RecordBatch, pa.Table)):
        return "arrow:" + ", ".join(f"{f.name}: {f.type}" for f in x.schema)
    if isinstance(x, np.ndarray):
        return f"numpy:{x.dtype}:{x.ndim}d"
    if isinstance(x, np.generic):
        return f"numpy:{x.dtype}"
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return f"torch:{x.dtype}:{x.dim()}d"
    except ImportError:  # pragma: no cover
        pass
    if isinstance(x, list):
        return "list[" + ",".join(sorted({json.dumps(type_sig(v)) for v in x})) + "]"
    return type(x).__name__


def typed_row_key(row: Any) -> dict[str, Any]:
    """A row with the types of its values (output-format cases)."""
    return {"row": row_key(row), "types": type_sig(row)}


def tensors_key(batch: dict[str, Any]) -> dict[str, Any]:
    """A collated batch: every value with its type and shape."""
    out = {}
    for k, v in batch.items():
        shape = list(v.shape) if hasattr(v, "shape") else None
        out[str(k)] = {"type": type_sig(v), "shape": shape, "values": canon(v)}
    return out


def packed_key(seq: dict[str, Any]) -> dict[str, Any]:
    """A packed sequence: tokens, boundaries and positions, with their dtypes."""
    return {k: {"type": type_sig(seq[k]), "values": canon(seq[k])} for k in ("input_ids", "cu_seqlens", "position_ids")}


def step_key(batch: Any, info: Any) -> dict[str, Any]:
    """A ``DynamicBatchLoader`` step (``collate_fn=collate_ids``): the batch's sample
    ids in order and the ``StepInfo`` fields a trainer acts on."""
    return {
        "ids": canon(batch), "step": info.step, "num_samples": info.num_samples, "num_tokens": info.num_tokens,
        "global_num_samples": info.global_num_samples, "global_num_tokens": info.global_num_tokens,
        "loss_scale": round(float(info.loss_scale), 9), "is_padding": info.is_padding,
        "active_ranks": info.active_ranks, "sample_indices": list(info.sample_indices),
    }


def microbatch_key(batch: Any, info: Any) -> dict[str, Any]:
    """A ``BalancedLoader`` micro-batch: its samples (ids, or tokens of packed
    samples) and the ``MicroBatchInfo`` fields a trainer acts on."""
    if isinstance(batch, list) and batch and isinstance(batch[0], dict) and "id" in batch[0]:
        content: Any = [int(canon(s["id"])) for s in batch]
    elif isinstance(batch, list):
        content = [packed_key(s) if isinstance(s, dict) and "cu_seqlens" in s else canon(s) for s in batch]
    else:
        content = canon(batch)
    return {
        "batch": content, "step": info.step, "microbatch": info.microbatch, "num_samples": info.num_samples,
        "num_tokens": info.num_tokens, "real_tokens": info.real_tokens,
        "global_num_samples": info.global_num_samples, "global_num_tokens": info.global_num_tokens,
        "loss_scale": round(float(info.loss_scale), 9), "is_padding": info.is_padding,
        "sample_ids": list(info.sample_ids), "deferred": info.deferred,
        "source_counts": dict(sorted(info.source_counts.items())),
    }


def delivered_ids(items: list[dict[str, Any]]) -> list[int]:
    """Sample ids a batch loader delivered (``step_key`` or ``microbatch_key`` items),
    padding steps and slots left out."""
    return [i for x in items if not x["is_padding"] for i in (x["ids"] if "ids" in x else x["sample_ids"])]


# ----------------------------------------------------------------------------------------
# datasets and loader arguments shared by the single-process tests and the ranks
# ----------------------------------------------------------------------------------------
def mixture(paths: dict[str, str]) -> Any:
    """Three ``RowDataset`` children (two of main's files, main's third file, aux), a
    stage switch at index 96, blocks of 16."""
    from youmu import RowDataset
    from youmu.mixture import MixtureDataset

    main = sorted(Path(paths["main"]).glob("*.parquet"))
    kids = {"early": RowDataset([str(p) for p in main[:2]]), "late": RowDataset(str(main[2])),
            "aux": RowDataset(paths["aux"])}
    return MixtureDataset(kids, [(0, {"early": 0.5, "late": 0.3, "aux": 0.2}),
                                 (96, {"early": 0.2, "late": 0.2, "aux": 0.6})], seed=11, block_size=16)


def flat_mixture(paths: dict[str, str]) -> Any:
    from youmu import FlatMixture, RowDataset

    return FlatMixture({"main": RowDataset(paths["main"]), "aux": RowDataset(paths["aux"])}, seed=7)


def sample_id(sample: Any) -> int:
    return int(canon(sample["id"]))


def sample_len(sample: Any) -> int:
    return len(sample["input_ids"])


def sample_loss_tokens(sample: Any) -> int:
    """Loss tokens that differ from the length (a masked prompt of id % 5 tokens)."""
    return max(len(sample["input_ids"]) - sample_id(sample) % 5, 0)


def collate_ids(samples: list[Any]) -> list[int]:
    return [sample_id(s) for s in samples]


# ----------------------------------------------------------------------------------------
# batch loader cases: run in one process (no group) and on the spawned Gloo ranks
# ----------------------------------------------------------------------------------------
def default_group_channel() -> Any:
    """A fresh Gloo channel over the initialised default group (collective)."""
    from youmu.distributed import GlooChannel

    return GlooChannel.from_default_group(timeout=TIMEOUT)


def dbl(dataset: Any, group: Any, workers: int = 0, **kw: Any) -> Any:
    """The DynamicBatchLoader of every case (``group=None``: single process)."""
    from youmu.batching import DynamicBatchLoader

    kw.setdefault("collate_fn", collate_ids)
    return DynamicBatchLoader(
        dataset, token_budget=1024, length_fn=sample_len, token_count_fn=sample_loss_tokens,
        pool_size=32, num_workers=workers, seed=3, group=group, timeout=TIMEOUT, heartbeat=0.2,
        multiprocessing_context="fork" if workers else None, **kw,
    )


def drain_steps(loader: Any, limit: int | None = None) -> list[dict[str, Any]]:
    """A DynamicBatchLoader's steps (at most ``limit``) as :func:`step_key` items."""
    it = iter(loader)
    out = []
    for batch, info in it:
        out.append(step_key(batch, info))
        if limit is not None and len(out) >= limit:
            break
    else:
        assert it.wait_finished(TIMEOUT), "aligner did not finish"
    return out


def resumed_steps(make: Any, stop_after: int) -> list[dict[str, Any]]:
    """The rest of an epoch resumed from a state saved after ``stop_after`` steps
    (checked against the uninterrupted epoch)."""
    full = drain_steps(make())
    first = make()
    head = drain_steps(first, limit=stop_after)
    state = pickle.loads(pickle.dumps(first.state_dict()))  # as a checkpoint would
    first.close()
    first.wait_finished(TIMEOUT)
    second = make()
    second.load_state_dict(state)
    rest = drain_steps(second)
    assert len(head) == stop_after and head + rest == full, \
        f"DynamicBatchLoader resumed after {stop_after} steps is not the uninterrupted epoch's rest"
    return rest


def dbl_cases(paths: dict[str, str], rank: int, world: int, channel: Any, workers2: bool = True) -> dict[str, Any]:
    """DynamicBatchLoader cases: ``{name: [step_key items]}``. ``channel()`` gives
    each loader its group (``None`` in one process)."""
    from youmu import RowDataset
    from youmu.torch import YoumuDataset

    def youmu_ds() -> Any:
        return YoumuDataset(paths["main"], shuffle="page", buffer_size=30, seed=5, rank=rank, world_size=world,
                            output="python")

    out: dict[str, Any] = {}
    # map-style datasets: the loader shuffles and shards them
    out["map/RowDataset/workers0"] = drain_steps(dbl(RowDataset(paths["main"]), channel()))
    out["map/MixtureDataset/workers0"] = drain_steps(dbl(mixture(paths), channel()))
    if workers2:
        out["map/MixtureDataset/workers2"] = drain_steps(dbl(mixture(paths), channel(), workers=2))
    out["map/RowDataset/non_join"] = drain_steps(dbl(RowDataset(paths["main"]), channel(), join=False))
    # a YoumuDataset shards itself over the ranks
    out["iterable/YoumuDataset/workers0"] = drain_steps(dbl(youmu_ds(), channel()))
    if workers2:
        out["iterable/YoumuDataset/workers2"] = drain_steps(dbl(youmu_ds(), channel(), workers=2))
    out["iterable/YoumuDataset/uneven_pad"] = drain_steps(dbl(youmu_ds(), channel(), uneven="pad"))
    # resumes from a mid-epoch state (on every rank)
    out["map/MixtureDataset/resumed_after3"] = resumed_steps(lambda: dbl(mixture(paths), channel()), 3)
    out["iterable/YoumuDataset/resumed_after3"] = resumed_steps(lambda: dbl(youmu_ds(), channel()), 3)
    return out


def balanced(source: Any, channel: Any, **kw: Any) -> Any:
    """The BalancedLoader of every case (``channel=None``: single process)."""
    from youmu.planning import BalancedLoader

    kw.setdefault("num_microbatches", 2)
    kw.setdefault("cost", "llama-12b")
    kw.setdefault("id_fn", sample_id)
    return BalancedLoader(source, channel=channel, timeout=TIMEOUT, **kw)


def balanced_cases(paths: dict[str, str], rank: int, world: int, channel: Any) -> dict[str, Any]:
    """BalancedLoader cases: ``{name: [microbatch_key items]}``; ``channel()`` gives
    each loader its channel (``None`` in one process)."""
    from youmu import RowDataset
    from youmu.torch import MapStream, YoumuDataset, pack

    def youmu_ds() -> Any:
        return YoumuDataset(paths["main"], shuffle="page", buffer_size=30, seed=5, rank=rank, world_size=world,
                            output="python")

    def run(loader: Any) -> list[dict[str, Any]]:
        return [microbatch_key(b, i) for b, i in loader]

    out: dict[str, Any] = {}
    out["global_batch_size"] = run(balanced(youmu_ds(), channel(), global_batch_size=16, prefetch=1))
    out["token_budget"] = run(balanced(MapStream(mixture(paths), rank=rank, world_size=world), channel(),
                                       token_budget=4096, capacity=1200, method="kk", num_microbatches=3, prefetch=0,
                                       id_fn=None))  # a mixture repeats rows: arrival ids
    out["multi_source"] = run(balanced(
        {"main": youmu_ds(), "aux": MapStream(RowDataset(paths["aux"]), rank=rank, world_size=world)}, channel(),
        global_batch_size=12, schedule=[(0, {"main": 3, "aux": 1}), (5, {"main": 1, "aux": 1})], prefetch=1))
    out["packed"] = run(balanced(pack(youmu_ds(), seq_len=128, eos_id=0), channel(), global_batch_size=8,
                                 id_fn=None, prefetch=0))
    # a DynamicBatchLoader's steps as the source: flattened into samples, or kept
    # as formed micro-batches (reorder_only)
    out["dbl_source"] = run(balanced(dbl(RowDataset(paths["main"]), channel(), collate_fn=None), channel(),
                                     global_batch_size=16, prefetch=1))
    out["reorder_only"] = run(balanced(dbl(RowDataset(paths["main"]), channel(), collate_fn=None), channel(),
                                       reorder_only=True, method="interleave", num_microbatches=3, prefetch=0))

    # resume (state mode: the YoumuDataset's own state) after 5 micro-batches
    def make() -> Any:
        return balanced(youmu_ds(), channel(), global_batch_size=16, prefetch=1)

    full = run(make())
    first = make()
    head = []
    for b, i in first:
        head.append(microbatch_key(b, i))
        if len(head) == 5:
            break
    state = pickle.loads(pickle.dumps(first.state_dict()))
    first.close()
    assert state["mode"] == "state", state["mode"]
    second = make()
    second.load_state_dict(state)
    rest = run(second)
    assert head + rest == full, "BalancedLoader resumed after 5 micro-batches is not the uninterrupted run's rest"
    out["resumed_after5"] = rest

    # replay resume: a fresh loader over fresh streams re-reads the first steps
    def make_replay() -> Any:
        return balanced(youmu_ds(), channel(), global_batch_size=16, prefetch=0, resume_mode="replay")

    first = make_replay()
    head = []
    for b, i in first:
        head.append(microbatch_key(b, i))
        if len(head) == 7:
            break
    state = pickle.loads(pickle.dumps(first.state_dict()))
    first.close()
    assert state["mode"] == "replay", state["mode"]
    second = make_replay()
    second.load_state_dict(state)
    rest = run(second)
    assert head + rest == full, "BalancedLoader replayed after 7 micro-batches is not the uninterrupted run's rest"
    out["replayed_after7"] = rest
    return out


# ----------------------------------------------------------------------------------------
# the 2-rank scenario: one launch computes every multi-rank case
# ----------------------------------------------------------------------------------------
def golden_rank_scenario(rank: int, world: int, paths: dict[str, str]) -> dict[str, Any]:
    """Every multi-rank case on this rank: ``{"digests": {case name: digest}, "ids":
    {case name: delivered sample ids}}`` (names without the world size and rank,
    which the test adds)."""
    from youmu.torch import YoumuDataset

    # a YoumuDataset takes its rank and world size from the initialised group
    implicit = YoumuDataset(paths["main"], shuffle="page", buffer_size=30, seed=5, output="python")
    explicit = YoumuDataset(paths["main"], shuffle="page", buffer_size=30, seed=5, output="python", rank=rank,
                            world_size=world)
    assert (implicit.rank, implicit.world_size) == (rank, world)
    assert [row_key(r) for r in implicit] == [row_key(r) for r in explicit]

    out = {f"DynamicBatchLoader/{k}": v for k, v in dbl_cases(paths, rank, world, default_group_channel).items()}
    out.update({f"BalancedLoader/{k}": v for k, v in balanced_cases(paths, rank, world, default_group_channel).items()})
    return {"digests": {name: digest(items) for name, items in out.items()},
            "ids": {name: delivered_ids(items) for name, items in out.items()}}
