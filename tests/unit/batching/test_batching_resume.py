"""Resume: (k steps, state_dict, fresh loader, load_state_dict, rest) equals the
uninterrupted epoch, step for step, on every rank (W=3)."""

from __future__ import annotations

import pytest
from batching_mp import resume_scenario, run_world
from where import SUPPORT

CASES = [
    (dict(dist="uniform-wide"), 7),  # map-style, join
    (dict(dist="bimodal", join=False), 11),  # map-style, non-join
    (dict(dist="longtail", iterable=True, stateful=True, empty_last=True), 40),  # a rank is already done
    (dict(dist="bimodal", iterable=True, stateful=True, empty_last=True, uneven="pad"), 25),  # filler steps
    (dict(dist="all-short", workers=2), 2),  # map-style with DataLoader workers
]


def _resume_all(rank: int, world: int, cases: list) -> list:
    return [resume_scenario(rank, world, cfg, k) for cfg, k in cases]


@pytest.fixture(scope="module")
def results():
    return run_world(_resume_all_entry, 3, CASES, timeout=200)


def _resume_all_entry(rank: int, world: int, cases: list) -> list:  # module level: picklable
    return _resume_all(rank, world, cases)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("k", range(len(CASES)))
def test_resume_equals_uninterrupted(results, k: int) -> None:
    cfg, stop_after = CASES[k]
    saw_done = saw_replay = False
    for rank, per_case in enumerate(results):
        r = per_case[k]
        assert r["first"] + r["rest"] == r["full"], f"rank {rank}: resumed run differs ({cfg})"
        assert len(r["first"]) <= stop_after
        saw_done |= r["done"]
        saw_replay |= r["replay"] > 0
    if cfg.get("iterable") and cfg.get("uneven") != "pad":
        assert saw_done, "the case should checkpoint a rank that already finished"
    assert saw_replay or k == 4, "the checkpoint should fall inside a round"


# -- an iterable dataset read by DataLoader workers: the README's SFT recipe ------------------------
CHATS = 90


@pytest.fixture(scope="module")
def chats(tmp_path_factory) -> str:
    from textutil import ultrachat, write_chats

    return str(write_chats(tmp_path_factory.mktemp("sft") / "chats.parquet", ultrachat(CHATS, seed=4)))


def _sft(path: str, workers: int):
    from resume_odb_mp import _ids, input_len, sft_dataset

    from youmu.batching import DynamicBatchLoader, label_token_count

    return DynamicBatchLoader(sft_dataset(path), token_budget=600, length_fn=input_len,
                              token_count_fn=label_token_count(), collate_fn=_ids, pool_size=16, num_workers=workers,
                              timeout=60, heartbeat=0.1)


def _chat_ids(loader, steps: int | None = None):
    """The batches' chat ids (of the first ``steps`` steps), and the state after them as a
    checkpoint file holds it (youmu's JSON state codec)."""
    from youmu.state.files import dumps, loads

    batches = []
    for batch, _ in loader:
        batches.append(batch)
        if len(batches) == steps:
            break
    state = loads(dumps(loader.state_dict()), where="checkpoint")
    loader.close()
    return batches, state


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("before", "after"), [(2, 2), (2, 0), (0, 2)])
def test_chats_templated_in_workers_resume_mid_epoch_exactly_once(chats: str, before: int, after: int) -> None:
    """DynamicBatchLoader(num_workers=2) over YoumuDataset(transform=ChatTemplate(tok))
    checkpoints mid-epoch, and a new loader resumed from the state delivers every chat
    left exactly once: with the same workers, in the uninterrupted run's batches; with
    another number (its rows are split over the workers), through merge_states."""
    from collections import Counter

    import youmu
    from youmu.errors import StateError

    head, state = _chat_ids(_sft(chats, before), 5)
    assert state["format"] == "youmu.batching/2" and not state["done"]
    assert state["replay"], "the checkpoint should fall inside a round"
    if before:
        assert len(state["workers"]["states"]) == before
    resumed = _sft(chats, after)
    if before != after:
        with pytest.raises(StateError, match="merge_states"):
            resumed.load_state_dict(state)
        state = youmu.merge_states([state])
    resumed.load_state_dict(state)
    rest, _ = _chat_ids(resumed)
    delivered = Counter(i for b in head + rest for i in b)
    assert delivered == Counter(range(CHATS)), sorted((delivered - Counter(range(CHATS))).elements())[:8]
    if before == after:
        assert head + rest == _chat_ids(_sft(chats, before))[0]


# -- the states of version 2, frozen -----------------------------------------------------------------
def fixture_loader(workers: int):
    """The loader ``loader_states_v2.json`` was saved with: a MapStream (an iterable dataset
    sharded over the DataLoader workers) of token sequences, some ids past int16."""
    from batching_mp import collate_ids

    from youmu.batching import DynamicBatchLoader
    from youmu.torch import MapStream

    rows = [{"id": i, "input_ids": [(i * 7919 + t) % (300 if i % 5 else 70000) for t in range(3 + i % 13)],
             "labels": [-100] * (i % 3) + list(range(3 + i % 13 - i % 3))} for i in range(120)]
    return DynamicBatchLoader(MapStream(rows, rank=0, world_size=1), token_budget=64,
                              length_fn=lambda s: len(s["input_ids"]), collate_fn=collate_ids, pool_size=16,
                              num_workers=workers, timeout=60, heartbeat=0.1)


def test_a_version_2_state_with_workers_resumes_as_saved() -> None:
    """``loader_states_v2.json`` holds a state of version 2 saved mid-epoch by a loader
    with 2 DataLoader workers (each worker's stream state, the rotation's turn, the
    pool's samples packed): it resumes in the batches the saving run went on with, and
    merged (another number of workers) delivers the same samples."""
    import json

    import youmu
    from youmu.state.files import from_plain

    case = json.loads((SUPPORT / "loader_states_v2.json").read_text())["DynamicBatchLoader"]
    state = from_plain(case["workers"], where="loader_states_v2.json")
    assert state["format"] == "youmu.batching/2" and state["workers"]["turn"] in (0, 1)
    loader = fixture_loader(2)
    loader.load_state_dict(state)
    assert [list(b) for b, _ in loader] == case["workers_rest"]
    loader.close()
    alone = fixture_loader(0)
    alone.load_state_dict(youmu.merge_states([state]))
    assert sorted(i for b, _ in alone for i in b) == sorted(i for b in case["workers_rest"] for i in b)
    alone.close()


def test_a_states_samples_are_packed_and_come_back_the_same() -> None:
    """The samples a state carries: integer sequences in the narrowest type, a tensor
    that views a page's column without the page (pickled, a view takes its whole
    storage), and the same samples after a resume."""
    import pickle

    import numpy as np
    import torch

    from youmu.batching.payloads import pack_sample, unpack_sample

    page = torch.arange(200_000)  # one column of a page: the samples are views into it
    sample = {"input_ids": page[70_000:70_010], "labels": torch.tensor([-100, -100, 5]), "id": page[3],
              "mask": np.array([1, 0, 1], dtype=np.uint8), "text": "hi", "ids": [1, 2, 40_000], "score": 0.5}
    packed = pack_sample(sample)
    assert len(pickle.dumps(packed)) < 2_000 < len(pickle.dumps(sample))
    assert packed["fields"]["labels"].dtype == np.int8 and packed["fields"]["ids"].dtype == np.int32
    back = unpack_sample(pickle.loads(pickle.dumps(packed)), where="payload")
    assert back.keys() == sample.keys()
    for k in ("input_ids", "labels", "id"):
        assert back[k].dtype == sample[k].dtype and torch.equal(back[k], sample[k])
    assert back["mask"].dtype == np.uint8 and back["mask"].tolist() == [1, 0, 1]
    assert (back["text"], back["ids"], back["score"]) == ("hi", [1, 2, 40_000], 0.5)
    assert unpack_sample({"x": 1}, where="payload") == {"x": 1}  # a sample of a version-1 state
