"""Saved states of the step-planning loaders' released formats keep loading: a
``BalancedLoader`` state (``youmu.planning.BalancedLoader/2``, ``"state"`` mode, with
carried samples and two sources) and its merged state, and a Ray deployment's client
state (``youmu.ray.RayBalancedLoader/1``) after a resize — its planner chain in the one
wire form of a chain — and the merged state of that deployment.

``saved_states_plan_v1.json`` was written by youmu before the formats got one owner
module each (:func:`_freeze` made it): each state with the steps a loader delivered
after loading it. Every state must load, deliver those steps, and save again to the
same bytes where it is saved unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from where import SUPPORT

pytest.importorskip("torch")

import youmu  # noqa: E402
from youmu.planning import BalancedLoader  # noqa: E402
from youmu.torch import MapStream  # noqa: E402

FIXTURE = SUPPORT / "saved_states_plan_v1.json"

ROWS = {name: [{"id": base + k, "input_ids": [base + k] * (1 + (k * 7 + base) % 11)} for k in range(n)]
        for name, base, n in (("web", 0, 40), ("code", 1000, 30))}
SCHEDULE = {"web": 2, "code": 1}


# -- BalancedLoader --------------------------------------------------------------------------------
def _balanced() -> BalancedLoader:
    # a tight capacity: samples are deferred, and carried over step boundaries
    return BalancedLoader({n: MapStream(r, run=1) for n, r in ROWS.items()}, num_microbatches=2,
                          global_batch_size=6, capacity=16, schedule=SCHEDULE, prefetch=0)


def _balanced_steps(loader: BalancedLoader) -> list[list[Any]]:
    out: list[list[Any]] = []
    for items in loader.iter_steps():
        out.append([items[0][1].step, [[int(s["id"]) for s in b] for b, info in items if not info.is_padding]])
    loader.close()
    return out


# -- Ray ---------------------------------------------------------------------------------------------
def _stream(name: str) -> Any:
    def make(rank: int, world: int) -> MapStream:
        return MapStream(ROWS[name], rank=rank, world_size=world)

    # a stream function is fingerprinted by its name: a fixed one, wherever this file lives
    make.__module__, make.__qualname__ = "saved_states_plan", f"stream_{name}"
    return make


def _deploy(world: int, batch: int) -> Any:
    pytest.importorskip("ray")
    from youmu.ray import RayLoaders, Source

    return RayLoaders({n: Source(stream=_stream(n)) for n in ROWS}, world_size=world, num_microbatches=1,
                      global_batch_size=batch, schedule=SCHEDULE, capacity=14, local=True)


def _ray_steps(clients: list[Any], limit: int | None = None) -> list[list[Any]]:
    """Every client's steps in lockstep: per step, ``[step, ids of each rank]``."""
    its = [c.iter_steps() for c in clients]
    out: list[list[Any]] = []
    while limit is None or len(out) < limit:
        got = [next(it, None) for it in its]
        if got[0] is None:
            break
        out.append([got[0][0][1].step, [[int(s["id"]) for b, info in items if not info.is_padding for s in b]
                                        for items in got]])
    return out


def _freeze() -> dict[str, Any]:
    """The states and what loaders delivered after them (run once, before the change)."""
    out: dict[str, Any] = {}
    loader = _balanced()
    it = loader.iter_steps()
    for _ in range(3):
        next(it)
    live = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    assert live["mode"] == "state" and live["carry"], "the state carries samples"
    merged = youmu.merge_states([live])
    out["BalancedLoader"] = {"live": live, "merged": merged}
    for key in ("live", "merged"):
        again = _balanced()
        again.load_state_dict(out["BalancedLoader"][key])
        out["BalancedLoader"][f"{key}_steps"] = _balanced_steps(again)

    two = [_deploy(2, 6).client(r, prefetch=0) for r in range(2)]
    _ray_steps(two, 2)
    first = youmu.merge_states([c.state_dict() for c in two])
    three = [_deploy(3, 9).client(r, prefetch=0) for r in range(3)]
    for c in three:
        c.load_state_dict(first)
    _ray_steps(three, 1)
    client = json.loads(json.dumps(three[0].state_dict()))
    merged = youmu.merge_states([c.state_dict() for c in three])
    assert merged["planner"]["resumed"] and any(merged["planner"]["carry"]), "a chain, and carried samples"
    out["RayBalancedLoader"] = {"client": client, "client_steps": None, "merged": merged}
    again = [_deploy(3, 9).client(r, prefetch=0) for r in range(3)]
    for r, c in enumerate(again):
        c.load_state_dict(client if r == 0 else json.loads(json.dumps(three[r].state_dict())))
    out["RayBalancedLoader"]["client_others"] = [json.loads(json.dumps(three[r].state_dict())) for r in (1, 2)]
    out["RayBalancedLoader"]["client_steps"] = _ray_steps(again)
    two = [_deploy(2, 4).client(r, prefetch=0) for r in range(2)]
    for c in two:
        c.load_state_dict(merged)
    out["RayBalancedLoader"]["merged_steps"] = _ray_steps(two)
    return out


CASES = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}


@pytest.mark.parametrize("saved", ["live", "merged"])
def test_a_balanced_loader_state_of_format_2_delivers_the_same_steps(saved: str) -> None:
    case = CASES["BalancedLoader"]
    loader = _balanced()
    loader.load_state_dict(case[saved])
    assert loader.state_dict() == case[saved], "a loaded state saves as it was until the next pass"
    assert _balanced_steps(loader) == case[f"{saved}_steps"]


def test_a_balanced_loader_state_merges_to_the_same_merged_state() -> None:
    case = CASES["BalancedLoader"]
    assert json.loads(json.dumps(youmu.merge_states([case["live"]]))) == case["merged"]


def test_a_resized_ray_client_state_delivers_the_same_steps() -> None:
    case = CASES["RayBalancedLoader"]
    clients = [_deploy(3, 9).client(r, prefetch=0) for r in range(3)]
    for c, st in zip(clients, [case["client"], *case["client_others"]]):
        c.load_state_dict(st)
    assert clients[0].state_dict() == case["client"], "a loaded state saves as it was until the next pass"
    assert _ray_steps(clients) == case["client_steps"]


def test_a_merged_ray_state_with_a_chain_delivers_the_same_steps() -> None:
    case = CASES["RayBalancedLoader"]
    assert json.loads(json.dumps(youmu.merge_states([case["client"], *case["client_others"]]))) == case["merged"]
    clients = [_deploy(2, 4).client(r, prefetch=0) for r in range(2)]
    for c in clients:
        c.load_state_dict(case["merged"])
    assert _ray_steps(clients) == case["merged_steps"]


def test_today_s_balanced_loader_saves_the_frozen_bytes() -> None:
    """``state_dict`` writes through the declared format (``BALANCED_LOADER_STATE``): the
    loader run to the frozen point saves the frozen state, key order included."""
    loader = _balanced()
    it = loader.iter_steps()
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    loader.close()
    assert json.dumps(state) == json.dumps(CASES["BalancedLoader"]["live"])


def _refuses_every_forgery_its_declaration_refuses(loader: Any, fmt: Any, state: dict[str, Any]) -> int:
    """Each forged value a field's declared check refuses, and each required field left
    out: ``load_state_dict`` refuses with a StateError naming the field (or the setting
    that differs). The number of forged states refused."""
    from youmu.errors import StateError

    refused = 0
    for field in fmt.fields:
        forged_states = [{k: v for k, v in state.items() if k != field.name}] if field.required else []
        for value in ("forged", -1, 1.5, [None], {"forged": 1}, None):
            forged = {**state, field.name: value}
            try:
                field.check(forged, field.name, fmt.owner)
            except StateError:
                forged_states.append(forged)
        for forged in forged_states:
            with pytest.raises(StateError, match=f"'{field.name}'|{field.name}="):
                loader.load_state_dict(forged)
            refused += 1
    return refused


def test_every_value_a_declared_balanced_loader_field_refuses_a_load_refuses_naming_it() -> None:
    """The hostile checks walk the declaration (youmu.state.formats)."""
    from youmu.planning.state.checkpoint import BALANCED_LOADER_STATE

    loader = _balanced()
    refused = _refuses_every_forgery_its_declaration_refuses(loader, BALANCED_LOADER_STATE,
                                                             CASES["BalancedLoader"]["live"])
    assert refused >= 2 * len(BALANCED_LOADER_STATE.fields)
    loader.close()


def test_every_value_a_declared_ray_client_field_refuses_a_load_refuses_naming_it() -> None:
    from youmu.ray.state import CLIENT_STATE

    client = _deploy(3, 9).client(0, prefetch=0)
    refused = _refuses_every_forgery_its_declaration_refuses(client, CLIENT_STATE, CASES["RayBalancedLoader"]["client"])
    assert refused >= 2 * len(CLIENT_STATE.fields)
    client.load_state_dict(CASES["RayBalancedLoader"]["client"])
    assert json.dumps(client.state_dict()) == json.dumps(CASES["RayBalancedLoader"]["client"]), \
        "the declared writer keeps the frozen key order"


if __name__ == "__main__":  # PYTHONPATH=tests/support python tests/promises/test_planning_saved_states.py: writes the fixture (before a change)
    FIXTURE.write_text(json.dumps(_freeze(), separators=(",", ":")) + "\n")
