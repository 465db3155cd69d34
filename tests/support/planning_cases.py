"""Bad arguments to ``youmu.planning``'s public names, each with the exception it must raise
and a word the message must contain: shared by the unit test that checks the messages and
the hostile test that checks every one is a ``YoumuError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from youmu.planning import (
    CostModel,
    Mesh,
    MixingSchedule,
    ModelConfig,
    Planner,
    SampleMeta,
    as_schedule,
    attention_cost,
    balance,
    imbalance,
    pack_microbatch,
)

__all__ = ["BAD_ARGUMENTS"]

BAD_ARGUMENTS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    # balance
    ("costs string", lambda: balance("abc", 1), TypeError, "costs"),
    ("costs scalar", lambda: balance(5.0, 1), TypeError, "costs"),
    ("costs 2-d", lambda: balance([[1, 2], [3, 4]], 1), ValueError, "costs"),
    ("costs negative", lambda: balance([-1], 1), ValueError, "costs"),
    ("num_buckets 0", lambda: balance([1], 0), ValueError, "num_buckets"),
    ("num_bins float", lambda: balance([1], 1, 1.5), TypeError, "num_bins"),
    ("method", lambda: balance([1], 1, method="lpt"), ValueError, "method"),
    ("capacity string", lambda: balance([1], 1, capacity="10", sizes=[1]), TypeError, "capacity"),
    ("capacity 0", lambda: balance([1], 1, capacity=0, sizes=[1]), ValueError, "capacity"),
    ("capacity without sizes", lambda: balance([1], 1, capacity=10), ValueError, "sizes"),
    ("sizes length", lambda: balance([1, 2], 1, sizes=[1]), ValueError, "sizes"),
    ("group_size float", lambda: balance([1, 2], 2, group_size=1.5), TypeError, "group_size"),
    ("group_size divides", lambda: balance([1, 2], 2, group_size=3), ValueError, "group_size"),
    ("placement", lambda: balance([1], 1, placement="random"), ValueError, "placement"),
    ("on_overflow", lambda: balance([1], 1, on_overflow="drop"), ValueError, "on_overflow"),
    ("reorder_only string", lambda: balance([1], 1, reorder_only="yes"), TypeError, "reorder_only"),
    ("assignment entry", lambda: imbalance([1], [(0,)], 1), TypeError, "assignment"),
    # cost
    ("seqs bare ints", lambda: attention_cost([30, 70]), TypeError, "[[l]]"),
    ("seqs fractional", lambda: attention_cost([[1.5]]), ValueError, "document lengths"),
    ("seqs nested too deep", lambda: attention_cost([[[1]]]), ValueError, "document lengths"),
    ("config int", lambda: attention_cost([[1]], 5), TypeError, "config"),
    ("preset", lambda: attention_cost([[1]], "gpt-5"), ValueError, "preset"),
    ("ModelConfig.hidden float", lambda: ModelConfig(hidden=2.0), TypeError, "hidden"),
    ("ModelConfig.vocab_size bool", lambda: ModelConfig(vocab_size=True), TypeError, "vocab_size"),
    ("ModelConfig.causal", lambda: ModelConfig(causal="yes"), TypeError, "causal"),
    ("ModelConfig.num_kv_heads", lambda: ModelConfig(num_heads=8, num_kv_heads=16), ValueError, "num_kv_heads"),
    ("CostModel.a string", lambda: CostModel(a="x"), TypeError, "CostModel.a"),
    ("CostModel.b negative", lambda: CostModel(a=1.0, b=-1.0), ValueError, "CostModel.b"),
    ("scaled factor", lambda: CostModel(a=1.0).scaled("x"), TypeError, "factor"),
    ("fit times 2-d", lambda: CostModel.fit([[1], [2], [3]], [[1], [2], [3]]), ValueError, "times"),
    ("fit times count", lambda: CostModel.fit([[1], [2], [3]], [1.0, 2.0]), ValueError, "times"),
    # plan
    ("SampleMeta ids", lambda: SampleMeta.build(ids="ab", lengths=[1, 2]), TypeError, "ids"),
    ("SampleMeta lengths fractional", lambda: SampleMeta.build(ids=[1], lengths=[1.5]), ValueError, "lengths"),
    ("SampleMeta unique", lambda: SampleMeta.build(ids=[1, 1], lengths=[1, 2]), ValueError, "unique"),
    ("Planner seed", lambda: Planner(seed="x"), TypeError, "seed"),
    ("distribute num_buckets", lambda: Planner().distribute(2.5), TypeError, "num_buckets"),
    ("distribute num_microbatches", lambda: Planner().distribute(2, 0), ValueError, "num_microbatches"),
    ("distribute capacity", lambda: Planner().distribute(2, capacity="x"), TypeError, "capacity"),
    ("distribute group_size", lambda: Planner().distribute(4, group_size=3), ValueError, "group_size"),
    ("mix global_batch_size", lambda: Planner().mix({"a": 1}, 2.5), TypeError, "global_batch_size"),
    ("mix select", lambda: Planner().mix({"a": 1}, 2, select="lifo"), ValueError, "select"),
    ("balance method", lambda: Planner().balance("lpt"), ValueError, "method"),
    ("cost fn", lambda: Planner().cost(42), TypeError, "cost"),
    ("plan meta", lambda: Planner().distribute(1).plan(0, [1, 2]), TypeError, "meta"),
    ("plan step", lambda: Planner().distribute(1).plan(-1, SampleMeta.empty()), ValueError, "step"),
    ("Mesh axis", lambda: Mesh(2).num_buckets("TP"), ValueError, "axis"),
    ("Mesh rank", lambda: Mesh(2).bucket_of(0.5, "DP"), TypeError, "rank"),
    # schedules
    ("schedule string", lambda: MixingSchedule("abc"), TypeError, "schedule"),
    ("schedule None", lambda: as_schedule(None), TypeError, "schedule"),
    ("schedule stage", lambda: MixingSchedule([(0, 1.0)]), TypeError, "stage 0"),
    ("schedule weights", lambda: MixingSchedule({"a": -1}), ValueError, "weights"),
    ("schedule batch_size", lambda: MixingSchedule({"a": 1}).counts(0, 2.5), ValueError, "batch_size"),
    # collate
    ("pack empty", lambda: pack_microbatch([]), ValueError, "empty"),
    ("pack non-mapping", lambda: pack_microbatch([[1, 2]]), TypeError, "input_ids"),
]
