"""Image-text Parquet as it is published (``struct<bytes, path>``, lists of them, raw
binary; JPEG/PNG/WebP) read page by page value-for-value with pyarrow, windows sized in
bytes (peak RSS within the budget, measured in a subprocess), Qwen2-VL's resize rule
against an independent reference, and the bad-image families (typed errors naming the
file and row, or skipped and reported with their positions)."""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
import sys
import textwrap
import warnings
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_fixtures import IMAGE, write_ids, write_image_rows
from PIL import Image
from torch.utils.data import DataLoader

import youmu
from youmu.streams.rowstream import RowStream, window_layout
from youmu.torch import YoumuDataset
from youmu.vision import ByteTokenizer, VisionTransform, load_image, tokenize_chat

TURN = pa.struct([("from", pa.string()), ("value", pa.string())])
N = 40


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def photo(w: int, h: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def conversation(i: int, images: int = 1) -> list[dict]:
    return [{"from": "human", "value": "<image>\n" * images + f"What is in picture {i}?"},
            {"from": "gpt", "value": f"Noise number {i}."}]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """Rows of every stored form: one image as a struct, a list of images (0–3), raw
    bytes; JPEG, PNG and WebP, sizes from a few hundred bytes to ~100 KB."""
    rng = np.random.default_rng(1)
    fmts = ["JPEG", "PNG", "WEBP"]
    out = []
    for i in range(N):
        img = photo(int(rng.integers(20, 200)), int(rng.integers(20, 200)), i)
        data = encode(img, fmts[i % 3])
        extra = [{"bytes": encode(photo(30 + 10 * k, 40, 100 * i + k), fmts[k % 3]), "path": None}
                 for k in range(int(rng.integers(0, 4)))]
        out.append({"id": i, "image": {"bytes": data, "path": f"img/{i}.{fmts[i % 3].lower()}"}, "images": extra,
                    "raw": data, "conversations": conversation(i, 1), "multi": conversation(i, len(extra))})
    return out


def table_of(rows: list[dict]) -> pa.Table:
    return pa.table({
        "id": pa.array([r["id"] for r in rows], pa.int64()),
        "image": pa.array([r["image"] for r in rows], IMAGE),
        "images": pa.array([r["images"] for r in rows], pa.list_(IMAGE)),
        "raw": pa.array([r["raw"] for r in rows], pa.large_binary()),
        "conversations": pa.array([r["conversations"] for r in rows], pa.list_(TURN)),
        "multi": pa.array([r["multi"] for r in rows], pa.list_(TURN)),
    })


WRITERS = {
    # a writer's defaults: a row group is one page of images
    "defaults": dict(row_group_size=N),
    # small pages with a page index (pages split inside row groups)
    "paged": dict(row_group_size=16, data_page_size=32 << 10, write_batch_size=4, write_page_index=True),
    # no dictionary, pages without an index, v1 pages
    "plain": dict(row_group_size=10, use_dictionary=False, data_page_size=8 << 10, write_batch_size=2,
                  data_page_version="1.0"),
}


@pytest.fixture(scope="module", params=list(WRITERS))
def image_file(request, rows, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vision") / f"{request.param}.parquet"
    # written here: the writer's settings (WRITERS) are what this fixture varies
    pq.write_table(table_of(rows), path, **WRITERS[request.param])
    return path


@pytest.mark.parametrize("columns", [["image", "conversations", "id"], ["images", "id"], ["raw", "id"],
                                     ["conversations", "image", "images", "raw", "id"]])
def test_image_columns_read_page_by_page_equal_pyarrow(image_file, columns) -> None:
    expect = pq.read_table(image_file, columns=columns)
    index = youmu.PageIndex(image_file, columns=columns)
    assert sum(index.page_num_rows()) == N
    for page in range(len(index)):
        info = index.page_info(page)
        got = pa.Table.from_batches([index.read_page(page)])
        want = expect.slice(int(info["global_first_row"]), int(info["num_rows"]))
        assert got.equals(want.cast(got.schema)), (page, columns)
    everything = pa.Table.from_batches(index.read_pages(np.arange(len(index))))
    assert everything.to_pylist() == expect.to_pylist()


def test_image_rows_through_youmu_dataset_with_workers(image_file, rows) -> None:
    ds = YoumuDataset(image_file, columns=["image", "images", "conversations", "id"], output="python", seed=3)
    got = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(r["id"] for r in got) == list(range(N))
    by_id = {r["id"]: r for r in rows}
    for r in got:
        want = by_id[r["id"]]
        assert r["image"] == want["image"] and r["images"] == want["images"]
        assert r["conversations"] == want["conversations"]


def test_vision_transform_in_workers_gives_the_costs(image_file, rows) -> None:
    tok = ByteTokenizer()
    transform = VisionTransform(tok, image_column="images", text_column="multi")
    ds = YoumuDataset(image_file, columns=["images", "multi", "id"], output="python", transform=transform)
    samples = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(samples) == N
    for s in samples:
        assert len(s["pixel_values"]) == len(s["image_grid_thw"])
        patches = sum(h * w for _, h, w in s["image_grid_thw"])
        assert s["encoder_patches"] == patches and s["backbone_tokens"] == patches // 4
        for px, (_, h, w) in zip(s["pixel_values"], s["image_grid_thw"]):
            px = np.asarray(px)  # the DataLoader hands arrays over as tensors
            assert px.shape == (h * 14, w * 14, 3) and px.dtype == np.uint8
        ids = np.asarray(s["input_ids"])
        assert int((ids == tok.image_token_id).sum()) == s["backbone_tokens"]
        assert s["num_tokens"] == len(ids) == len(s["labels"]) and s["skipped"] == []
    # header-only costs equal the decoded ones
    costs = VisionTransform(tok, image_column="images", text_column="multi", pixels=False)
    for r in rows[:8]:
        assert costs(r)["backbone_tokens"] == transform(r)["backbone_tokens"]


# -- windows sized in bytes ----------------------------------------------------------------
def _image_file(path: Path, n: int, size: int, per_page: int) -> Path:
    blob = np.random.default_rng(0).bytes(size)
    return write_image_rows(path, [blob[i:] + blob[:i] for i in range(n)], suffix=".jpg", captions=False, id_first=False,
                            row_group_size=per_page, compression="none", use_dictionary=False)


def test_windows_are_sized_in_bytes_not_rows(tmp_path) -> None:
    small = youmu.PageIndex(_image_file(tmp_path / "small.parquet", 256, 1 << 10, 4))
    big = youmu.PageIndex(_image_file(tmp_path / "big.parquet", 32, 2 << 20, 1))
    budget = 24 << 20
    # the same rows per window asked for: 1 KB images keep their windows, 2 MB ones shrink
    assert window_layout(small, 64, 1, memory_budget=budget) == window_layout(small, 64, 1) == (16, 1)
    assert window_layout(big, 64, 1) == (32, 1)
    page = int(big.page_decoded_bytes().max())
    assert page > 2 << 20 and window_layout(big, 64, 1, memory_budget=budget) == (budget // (3 * page), 1) == (3, 1)


@pytest.mark.parametrize("slices", [1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_reading_alone_gives_the_rows_of_the_read_ahead_path(tmp_path, slices, drop_last) -> None:
    write_ids(tmp_path / "ids.parquet", 3000, row_group_size=500, data_page_size=256, write_batch_size=50,
              write_page_index=True)
    index = youmu.PageIndex(tmp_path / "ids.parquet")

    def ids(ahead: int, start: int = 0) -> list[int]:
        s = RowStream(index, "page", 300, seed=2, page_slices=slices, drop_last=drop_last, world_size=2, rank=1,
                      read_ahead=ahead)
        return [i for t in s.iter_tables(start) for i in t.column("id").to_pylist()]

    base = ids(1)
    assert ids(0) == base and ids(0, 77) == base[77:] and len(base) >= 1496


RSS_SCRIPT = """
import json, sys
import youmu
from youmu.streams.convert import rows
from youmu.streams.rowstream import RowStream

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) << 10

path, budget = sys.argv[1], int(sys.argv[2])
# what a YoumuDataset (or a DataLoader worker) runs, without importing torch (fast)
ds = RowStream(youmu.PageIndex(path), "page", memory_budget=budget or 1 << 50, seed=1)  # 0: unbounded
try:  # restart the high-water mark from here (Linux >= 4.0)
    open("/proc/self/clear_refs", "w").write("5")
except OSError:
    pass
base = rss("VmRSS:")
n = 0
for table in ds.iter_tables():
    n += sum(1 for _ in rows(table, "python"))
    del table
print(json.dumps({"rows": n, "window_pages": ds.window_pages, "read_ahead": ds.read_ahead,
                  "added": rss("VmHWM:") - base, "page": int(ds.index.page_decoded_bytes().max())}))
"""


def _rss(path: Path, budget: int) -> dict:
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(path), str(budget)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def big_images(tmp_path_factory) -> Path:
    """10 images of 20 MB, two per page (pages of 40 MB)."""
    return _image_file(tmp_path_factory.mktemp("rss") / "20mb.parquet", 10, 20 << 20, 2)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_peak_memory_stays_within_the_budget_with_20mb_and_1kb_images(big_images, tmp_path) -> None:
    budget = 256 << 20
    m = _rss(big_images, budget)
    assert m["rows"] == 10 and (m["window_pages"], m["read_ahead"]) == (2, 1)
    # what streaming added to the process: the budget's decoded windows, plus the I/O and
    # decode buffers of the window being read and the rows handed out (measured: 1.0×)
    assert m["added"] < 1.1 * budget, m
    unbounded = _rss(big_images, 0)  # windows of every page
    assert unbounded["window_pages"] == 5 and unbounded["added"] > 1.5 * budget, unbounded
    small = _rss(_image_file(tmp_path / "1kb.parquet", 2000, 1 << 10, 50), budget)
    assert small["rows"] == 2000 and small["window_pages"] == 40 and small["added"] < 16 << 20, small


def test_large_rows_get_a_budget_by_default_and_say_so(big_images, tmp_path) -> None:
    """No memory_budget: rows of 20 MB images would make windows of all 5 pages of 40 MB
    (3 in flight: 600 MB); youmu reads them with its default budget, and warns."""
    from youmu.streams.rowstream import DEFAULT_MEMORY_BUDGET

    with pytest.warns(youmu.YoumuWarning, match=r"no memory_budget given and rows of 20,97\d,\d{3} decoded bytes.*"
                                                r"windows of 4 pages; pass memory_budget="):
        ds = YoumuDataset(big_images, output="python")
    page = int(ds.index.page_decoded_bytes().max())
    assert ds.window_pages == 4 and 3 * ds.window_pages * page <= DEFAULT_MEMORY_BUDGET
    assert YoumuDataset(big_images, output="python", memory_budget=1 << 40).window_pages == 5  # a given budget decides
    # small rows: no budget, no warning, the windows the rows ask for
    small = _image_file(tmp_path / "1kb.parquet", 2000, 1 << 10, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert YoumuDataset(small, output="python").window_pages == 40


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_a_page_over_the_budget_is_read_alone_at_about_its_size(big_images) -> None:
    m = _rss(big_images, 64 << 20)  # a 40 MB page, 3 windows in flight would need 120 MB
    assert m["rows"] == 10 and (m["window_pages"], m["read_ahead"]) == (1, 0)
    # one page at a time: its raw bytes and the decoded copy arrow-rs grows while it
    # decodes (measured about 3.5 pages' worth at the peak), not windows of all pages
    assert m["added"] < 4.5 * m["page"], m
    # pages of 40 MB of binary values read value for value
    index = youmu.PageIndex(big_images)
    expect = pq.read_table(big_images)
    for page in (0, len(index) - 1):
        info = index.page_info(page)
        want = expect.slice(int(info["global_first_row"]), int(info["num_rows"]))
        assert pa.Table.from_batches([index.read_page(page)]).equals(want)


# -- the resize rule: see tests/unit/vision/test_vision_tokens.py (transformers' processor as the oracle)


# -- bad images --------------------------------------------------------------------------------
def _png(width: int, height: int) -> bytes:
    """A 1-bit grey PNG of zeros, written by hand: a 40,000² image in ~100 KB that no
    one needs to hold in memory to write."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    comp = zlib.compressobj(9)
    line = bytes(1 + (width + 7) // 8)
    idat = b"".join(comp.compress(line) for _ in range(height)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def bomb() -> bytes:
    data = _png(40000, 40000)
    assert len(data) < 400_000
    return data


def test_bad_images_raise_image_errors(bomb) -> None:
    jpeg = encode(photo(300, 200, 0), "JPEG")
    for data, match in [(b"\x00garbage", "cannot decode"), (jpeg[: len(jpeg) // 2], "cannot decode"),
                        (encode(photo(300, 200, 0), "PNG")[:300], "cannot decode"), (bomb, "pixel"),
                        (b"", "cannot decode")]:
        with pytest.raises(youmu.ImageError, match=match):
            load_image(data)
    # youmu's limit holds whatever Pillow's global limit says
    old = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        with pytest.raises(youmu.ImageError, match="max_image_pixels"):
            load_image(_png(9000, 9000), max_image_pixels=50_000_000)
    finally:
        Image.MAX_IMAGE_PIXELS = old
    with pytest.raises(youmu.ImageError, match="aspect ratio"):
        load_image(encode(Image.new("RGB", (4000, 10)), "PNG"))


def test_odd_modes_become_rgb_first_frame() -> None:
    cmyk = encode(Image.new("CMYK", (100, 80), (0, 255, 255, 0)), "JPEG")  # red in CMYK
    px, _ = load_image(cmyk)
    assert px[..., 0].mean() > 200 and px[..., 1].mean() < 60
    grey16 = Image.fromarray(np.full((60, 90), 65535, np.uint16))  # 16-bit white
    px, _ = load_image(encode(grey16, "PNG"))
    assert px.min() == 255
    pal = Image.new("P", (64, 64), 1)
    pal.putpalette([0, 0, 0, 0, 0, 255] + [0] * 762)
    px, _ = load_image(encode(pal, "PNG"))
    assert tuple(px[10, 10]) == (0, 0, 255)
    pal.info["transparency"] = 1  # transparent blue: composited on white
    px, _ = load_image(encode(pal, "PNG", transparency=1))
    assert tuple(px[10, 10]) == (255, 255, 255)
    frames = [Image.new("RGB", (64, 64), c) for c in [(0, 255, 0), (255, 0, 0)]]
    for fmt in ("GIF", "WEBP"):
        buf = io.BytesIO()
        frames[0].save(buf, fmt, save_all=True, append_images=frames[1:], lossless=True)
        px, _ = load_image(buf.getvalue())
        assert px[..., 1].mean() > 200 and px[..., 0].mean() < 60, fmt
    px, cost = load_image(encode(Image.new("LA", (56, 56), (0, 0)), "PNG"))
    assert px.shape == (56, 56, 3) and px.min() == 255 and cost.backbone_tokens == 4


@pytest.fixture(scope="module")
def bad_file(tmp_path_factory, bomb) -> Path:
    """Rows 0–29 in one file of pages of 4 rows; rows 5, 6, 17 and 29 have bad images."""
    bad = {5: b"not an image", 6: encode(photo(80, 80, 6), "JPEG")[:200], 17: bomb, 29: b"\xff\xd8\xff"}
    images = [bad.get(i) or encode(photo(40 + i, 50, i), "PNG") for i in range(30)]
    return write_image_rows(tmp_path_factory.mktemp("bad") / "bad.parquet", images, id_first=False, row_group_size=8,
                            data_page_size=1, write_batch_size=4, write_page_index=True)


BAD = [5, 6, 17, 29]


def _tagging(on_error: str) -> VisionTransform:
    class Tagged(VisionTransform):  # keeps the row id so the test can check who was delivered
        def __call__(self, row):
            out = super().__call__(row)
            out["id"] = row["id"]
            return out

    return Tagged(ByteTokenizer(), text_column="caption", on_error=on_error, pixels=False)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_image_raises_naming_the_file_and_row(bad_file, workers) -> None:
    ds = YoumuDataset(bad_file, output="python", shuffle="page", seed=4, transform=_tagging("raise"))
    with pytest.raises(youmu.ImageError) as info:
        list(DataLoader(ds, batch_size=None, num_workers=workers))
    e = info.value
    row = int(re.search(r"image '(\d+)\.png', file ", str(e)).group(1))
    assert row in BAD and f"file {bad_file}, row {row}, stream position " in str(e)
    if workers == 0:  # (a DataLoader re-raises a worker's error from its message alone)
        assert (e.file, e.row, e.column, e.path) == (str(bad_file), row, "image", f"{row}.png")


@pytest.mark.parametrize("shuffle", ["page", "row"])
def test_skipped_rows_are_reported_with_their_positions_not_lost(bad_file, shuffle) -> None:
    def make():
        return YoumuDataset(bad_file, output="python", shuffle=shuffle, seed=4, transform=_tagging("skip"))

    samples = list(DataLoader(make(), batch_size=None, num_workers=2))
    reports = [r for s in samples for r in s["skipped"]]
    assert sorted(s["id"] for s in samples) == [i for i in range(30) if i not in BAD]
    assert sorted(r["row"] for r in reports) == BAD and all(r["file"] == str(bad_file) for r in reports)
    # a report's position is where the row sits in its worker's stream
    ds = make()
    for r in reports:
        assert r["reason"]
    solo = make()
    got = list(solo)
    assert solo.skip_log.count == 4 and sorted(r["row"] for r in solo.skip_log.rows) == BAD
    stream = RowStream(ds.index, shuffle, seed=4, window_pages=ds.window_pages)
    order = [int(i) for t in stream.iter_tables() for i in t.column("id").to_pylist()]
    assert sorted((r["position"], r["row"]) for r in solo.skip_log.rows) == sorted((order.index(b), b) for b in BAD)
    # resuming mid-epoch: every row delivered or reported exactly once over both runs
    import torchdata.stateful_dataloader as tdl

    loader = tdl.StatefulDataLoader(make(), batch_size=None, num_workers=2)
    it = iter(loader)
    first = [next(it) for _ in range(9)]
    state = loader.state_dict()
    del it
    resumed = tdl.StatefulDataLoader(make(), batch_size=None, num_workers=2)
    resumed.load_state_dict(state)
    rest = list(resumed)
    seen = [s["id"] for s in first + rest] + [r["row"] for s in first + rest for r in s["skipped"]]
    assert sorted(seen) == list(range(30)) and len(got) == 26


def test_import_youmu_does_not_import_pil() -> None:
    code = "import sys, youmu, youmu.streams.rowstream, youmu.vision; assert 'PIL' not in sys.modules, 'PIL imported'"
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)


def test_the_template_is_qwen2_vl_chatml_with_images_expanded() -> None:
    tok = ByteTokenizer()
    conv = [{"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "A cat."}]
    out = tokenize_chat(conv, [2], tok)
    assert tok.decode(out["input_ids"]) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|image_pad|><|vision_end|>\nWhat is this?<|im_end|>\n"
        "<|im_start|>assistant\nA cat.<|im_end|>\n"
    )
    learned = [i for i, lab in zip(out["input_ids"], out["labels"]) if lab != -100]
    assert tok.decode(learned) == "A cat.<|im_end|>"
    # a caption: images first, the caption as the answer; chat "messages" with typed content
    assert tok.decode(tokenize_chat("a cat", [1], tok, system=None)["input_ids"]) == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
        "<|im_start|>assistant\na cat<|im_end|>\n")
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "image"}]}]
    assert tok.image_token_id in tokenize_chat(msgs, [1], tok)["input_ids"]
    with pytest.raises(youmu.ImageError, match="placeholders"):
        tokenize_chat(conv, [], tok)
