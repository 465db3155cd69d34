"""The batching layer's contracts with the rest of youmu: imports without torch, the
package's names, the stream contract (``state_dict`` / ``load_state_dict`` /
``set_epoch`` with validated states), arguments through ``youmu._internal.args``, memory that
follows the data, and the interpreter-exit hook's rule (no thread left running)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import textwrap
import tracemalloc

import pytest
from batching_mp import LengthDataset, StatefulRankIterable, collate_ids, sample_len, sample_tok, token_counts
from synthetic import synthetic_lengths

import youmu.batching
from youmu.batching import DynamicBatchLoader, simulate
from youmu.errors import ArgumentTypeError, InvalidArgumentError, LoaderError, StateError
from youmu.state import files as statefile

LENGTHS = synthetic_lengths("uniform-wide", 200, seed=5)


def _loader(ds=None, **kw):
    args = dict(token_budget=4096, length_fn=sample_len, token_count_fn=sample_tok, collate_fn=collate_ids,
                pool_size=32, num_workers=0, timeout=20, heartbeat=0.1)
    args.update(kw)
    return DynamicBatchLoader(ds if ds is not None else LengthDataset(LENGTHS, token_counts(LENGTHS)), **args)


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)


# -- imports and names -----------------------------------------------------------------------
def test_no_batching_module_imports_torch() -> None:
    _run(
        """
        import importlib, pkgutil, sys, warnings
        import youmu.batching
        warnings.simplefilter("ignore", DeprecationWarning)
        for m in pkgutil.iter_modules(youmu.batching.__path__):
            importlib.import_module("youmu.batching." + m.name)
        assert "torch" not in sys.modules, "torch imported"
        """
    )


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = youmu.batching.__all__
    assert names == sorted(names) and len(set(names)) == len(names)
    for name in names:
        assert getattr(youmu.batching, name) is not None, name
    assert set(names) <= set(dir(youmu.batching))


def test_names_of_other_packages_have_one_public_path() -> None:
    # the channel, the status codes and the collates are youmu.distributed's and
    # youmu.torch's, the errors youmu's; lm_collate alone stays reachable here, as an
    # alias earlier READMEs and examples imported
    import youmu.distributed
    import youmu.torch.collate

    errors = ("ChannelError", "DataStallError", "PeerClosedError", "RankFailedError")
    for name in ("GlooChannel", "FAILED", "CLOSED", "PadCollate", "lm_collate", *errors):
        assert name not in youmu.batching.__all__, name
    assert not set(errors) & set(youmu.distributed.__all__)
    assert set(errors) <= set(youmu.__all__)
    import youmu.planning

    assert not {"CapacityError", "PlanError"} & set(youmu.planning.__all__)
    for name in ("GlooChannel", "FAILED", "CLOSED", "PadCollate"):
        assert not hasattr(youmu.batching, name), name
    assert youmu.batching.lm_collate is youmu.torch.collate.lm_collate


# -- arguments -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(timeout=float("inf")), "timeout"),
        (dict(data_timeout=float("nan")), "data_timeout"),
        (dict(heartbeat=float("inf")), "heartbeat"),
        (dict(pool_size=-1), "pool_size"),
        (dict(max_outstanding=0), "max_outstanding"),
    ],
)
def test_values_out_of_range_name_the_argument(kw, name) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        _loader(**kw)


def test_settings_are_frozen_and_assignments_are_validated() -> None:
    loader = _loader()
    with pytest.raises(dataclasses.FrozenInstanceError):
        loader.config.seed = 1  # type: ignore[misc]
    with pytest.raises(InvalidArgumentError, match="pool_size"):
        loader.pool_size = 0
    with pytest.raises(ArgumentTypeError, match="collate_fn"):
        loader.collate_fn = 3
    loader.collate_fn = lambda samples: len(samples)
    assert all(isinstance(b, int) for b, _ in loader)
    with pytest.raises(ArgumentTypeError, match="epoch"):
        loader.set_epoch(1.0)


def test_huge_pool_size_allocates_for_the_data_only() -> None:
    """``pool_size`` bounds a round; the exchanged rows follow the groups buffered."""
    ref = [b for b, _ in _loader(pool_size=1000)]
    tracemalloc.start()
    try:
        got = [b for b, _ in _loader(pool_size=10**7, max_outstanding=10**7)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == ref  # a buffer larger than the data: one round either way
    assert peak < 32 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_rows_grow_when_a_round_has_more_groups_than_they_hold() -> None:
    # 5000 samples of the full budget: 5000 single-sample groups in one round (> 4096)
    n = 5000
    ds = LengthDataset([64] * n, [64] * n)
    loader = _loader(ds, token_budget=64, pool_size=n)
    steps = [(b, i) for b, i in loader]
    assert sorted(x for b, _ in steps for x in b) == list(range(n))
    sim = simulate([64] * n, 1, 64, n, keep_trace=True)
    assert [b for b, _ in steps] == [list(s.info.sample_indices) for s in sim.trace[0]]


# -- states ----------------------------------------------------------------------------------------
def _old_fingerprint(cfg: dict) -> int:
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def test_fingerprints_of_saved_states_are_unchanged() -> None:
    loader = _loader(seed=3)
    cfg = dict(token_budget=4096, buffer_size=32, join=True, loss_scaling="exact", shuffle=True, seed=3, quota=None,
               shuffle_steps=True, uneven="stop", pad_sampler=False, kind="map", n=len(LENGTHS), world_size=1)
    assert loader.config_fingerprint() == _old_fingerprint(cfg) == 8924914591818337882
    assert loader.state_dict()["config"] == loader.config_fingerprint()


def _mid_epoch_state(loader) -> dict:
    it = iter(loader)
    for _ in range(3):
        next(it)
    st = statefile.loads(statefile.dumps(loader.state_dict()), where="checkpoint")
    loader.close()
    return st


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda st: None, "dict"),
        (lambda st: [st], "dict"),
        (lambda st: {**st, "format": "youmu.YoumuDataset/1"}, "format"),
        (lambda st: {k: v for k, v in st.items() if k != "replay"}, "replay"),
        (lambda st: {**st, "world_size": 2}, "world_size"),
        (lambda st: {**st, "rank": 1}, "rank"),
        (lambda st: {**st, "kind": "iterable"}, "kind"),
        (lambda st: {**st, "config": 1}, "config"),
        (lambda st: {**st, "epoch": "0"}, "epoch"),
        (lambda st: {**st, "position": -1}, "position"),
        (lambda st: {**st, "position": 10**6}, "out of range"),
        (lambda st: {**st, "done": 1}, "done"),
        (lambda st: {**st, "overflow": [1.5]}, "overflow"),
        (lambda st: {**st, "replay": [{"keys": [0]}]}, "replay"),
        (lambda st: {**st, "replay": [{"keys": [0], "info": {"bogus": 1}}]}, "info"),
    ],
)
def test_foreign_and_malformed_states_are_state_errors(change, field) -> None:
    st = _mid_epoch_state(_loader())
    assert st["replay"] or st["overflow"]
    with pytest.raises(StateError, match=field):
        _loader().load_state_dict(change(st))


def test_iterable_states_need_their_payloads() -> None:
    make = lambda: _loader(StatefulRankIterable([LENGTHS], 0))  # noqa: E731
    st = _mid_epoch_state(make())
    keys = [k for s in st["replay"] for k in s["keys"]] + st["overflow"]
    assert keys
    with pytest.raises(StateError, match="payloads"):
        make().load_state_dict({**st, "payloads": {}})
    with pytest.raises(StateError, match="dataset state"):  # the same settings, a dataset without states
        _loader(LengthListIterable(LENGTHS)).load_state_dict(st)


class LengthListIterable:
    """An iterable dataset without state_dict/load_state_dict."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __iter__(self):
        return iter({"id": i, "len": n, "tok": n} for i, n in enumerate(self.lengths))


def test_states_round_trip_through_the_contract() -> None:
    from youmu.state.contract import Stream

    loader = _loader()
    assert isinstance(loader, Stream)
    full = [b for b, _ in _loader()]
    st = _mid_epoch_state(loader)
    again = _loader()
    again.load_state_dict(st)
    rest = [b for b, _ in again]
    assert rest == full[3:]


def test_a_failing_iteration_is_a_loader_error_not_a_dead_thread() -> None:
    loader = _loader(length_fn=lambda s: 1.5)
    with pytest.raises(ArgumentTypeError, match="length_fn must return an integer"):
        list(loader)
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(LoaderError, RuntimeError)


# -- the exit hook -----------------------------------------------------------------------------
def test_exit_hook_waits_for_a_thread_that_still_runs() -> None:
    """A thread that is not waiting on a peer (so it never parks) and is still running
    when its peers are given up on: the hook returns only once it has ended."""
    _run(
        """
        import threading, time
        from youmu.batching.runtime import shutdown
        class Busy:
            timeout, heartbeat = 0.2, 0.01
            parked = threading.Event()
            def __init__(self):
                self.aligner_thread = threading.Thread(target=time.sleep, args=(3.0,), daemon=True)
                self.aligner_thread.start()
            def serving_peers(self): return False
            def leave(self): pass
            def stop_fetching(self): return None

        busy = Busy()
        shutdown.register(busy)
        t0 = time.monotonic()
        shutdown.drain_at_exit()
        assert not busy.aligner_thread.is_alive(), "the hook returned while the thread still ran"
        assert 2.5 < time.monotonic() - t0 < 30
        """
    )
