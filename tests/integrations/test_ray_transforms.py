"""youmu.ray with the transforms users train with: ``Tokenize`` and ``ChatTemplate``
(batched: a page's rows at a time) and ``VisionTransform(on_error="skip")`` (bad rows
skipped and reported) on a real local Ray cluster. A deployment's loaders read through
the stream's one Parquet pass, so every rank's samples are the in-process
``ParquetStream``'s — the skip reports included, each skipped row reported once.

One small Ray cluster (a head node) serves the module: its start is the expensive part.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from typing import Any

import numpy as np
import pytest
from parquet_fixtures import flat_png, write_image_rows

ray = pytest.importorskip("ray", reason="youmu.ray needs Ray: pip install 'youmu[ray]'")
pytest.importorskip("transformers")
import textutil  # noqa: E402

from youmu.ray import RayLoaders, Source  # noqa: E402
from youmu.streams.parquet import ParquetStream  # noqa: E402
from youmu.text import ChatTemplate, Tokenize  # noqa: E402
from youmu.vision import ByteTokenizer, VisionTransform  # noqa: E402

# a Ray cluster per module: the whole module runs in make test-system
pytestmark = pytest.mark.slow

WORLD = 2
BAD = {0, 5, 6, 13, 20, 21, 22, 31}  # rows whose image does not decode (the first, runs across pages)


class Tagged(VisionTransform):
    """Keeps the row id, so a test sees which rows were delivered."""

    def __call__(self, row: Any) -> Any:
        out = super().__call__(row)
        out["id"] = row["id"]
        return out


@pytest.fixture(scope="module")
def cluster() -> Any:
    from ray.cluster_utils import Cluster

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Tagged reaches the actors by value
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                      "object_store_memory": 80 << 20})
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("ray-transforms")
    texts = [textutil.CORPUS[i % 5] + f" {i}" for i in range(40)]
    textutil.write_texts(tmp / "texts.parquet", texts, row_group_size=4, id=list(range(40)))
    textutil.write_chats(tmp / "chats.parquet", textutil.ultrachat(40), row_group_size=4)
    write_image_rows(tmp / "images.parquet", [flat_png(i, 20, 20) for i in range(36)], bad=BAD, row_group_size=4)
    return {k: str(tmp / f"{k}.parquet") for k in ("texts", "chats", "images")}


def _transform(kind: str) -> Any:
    if kind == "tokenize":
        return Tokenize(textutil.bpe_tokenizer(), batch_rows=5)
    if kind == "chat":
        return ChatTemplate(textutil.chat_tokenizer(), batch_rows=5)
    return Tagged(ByteTokenizer(), text_column="caption", pixels=False, on_error="skip")


def plain(x: Any) -> Any:
    """A sample as compared: arrays as lists, no object addresses (a skip report's reason
    quotes PIL's error, which names the ``BytesIO`` it read)."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, str):
        return re.sub(r" at 0x[0-9a-f]+", "", x)
    return x.tolist() if isinstance(x, np.ndarray) else x


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind,data_key", [("tokenize", "texts"), ("chat", "chats"), ("vision-skip", "images")])
def test_ray_loaders_deliver_the_in_process_samples(cluster: Any, data: dict[str, str], kind: str,
                                                    data_key: str) -> None:
    transform = _transform(kind)
    src = Source(data[data_key], shuffle="page", buffer_size=8, seed=3, output="python", transform=transform)
    want = [plain(item) for r in range(WORLD)
            for item in ParquetStream(data[data_key], src.spec, rank=r, world_size=WORLD)]
    loaders = RayLoaders(src, world_size=WORLD, num_microbatches=1, global_batch_size=4, collate_fn=list,
                         length_fn=lambda s: len(s["input_ids"]), name=f"transforms-{kind}",
                         namespace="youmu-tests", timeout=60.0, cache_rows=16)
    try:
        clients = [loaders.client(r) for r in range(WORLD)]
        got = [plain(s) for c in clients for batch, _ in c for s in batch or []]
    finally:
        loaders.shutdown()
    key = lambda s: s["id"]  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert len(got) == len({s["id"] for s in got})  # each sample once
    if kind == "vision-skip":
        reported = Counter(r["row"] for s in got for r in s.get("skipped", []))
        assert reported == Counter(BAD), "every skipped row reported once"
        assert {s["id"] for s in got} == set(range(36)) - BAD
    else:
        assert {s["id"] for s in got} == set(range(40))
