"""Image-text rows through real DataLoader workers and misconfigured transforms: an
ImageError keeps its file, row and position across the worker boundary; the good
sample before a bad row is delivered before the error; a column that is not there
is an error naming the columns that are; a skip policy under which no row is good
is loud; every youmu error pickles with its attributes."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
from parquet_fixtures import flat_png, write_image_rows
from torch.utils.data import DataLoader

import youmu
import youmu.errors
from youmu.torch import YoumuDataset
from youmu.vision import ByteTokenizer, VisionTransform


def _write(path: Path, bad: set[int], n: int = 12) -> Path:
    return write_image_rows(path, [flat_png(i) for i in range(n)], bad=bad, row_group_size=n, data_page_size=1,
                            write_batch_size=4, write_page_index=True)


class Tagged(VisionTransform):  # keeps the row id so the test sees who was delivered
    def __call__(self, row):
        out = super().__call__(row)
        out["id"] = row["id"]
        return out


def _tagged(**kw) -> Tagged:
    return Tagged(ByteTokenizer(), text_column="caption", pixels=False, **kw)


@pytest.fixture(scope="module")
def row_7_bad(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("bad7") / "bad7.parquet", {7})


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_an_image_error_keeps_its_fields_through_dataloader_workers(row_7_bad, workers) -> None:
    ds = YoumuDataset(row_7_bad, output="python", shuffle="none", transform=_tagged())
    with pytest.raises(youmu.ImageError) as info:
        list(DataLoader(ds, batch_size=None, num_workers=workers))
    e = info.value
    assert (e.file, e.row, e.column, e.path, e.skip) == (str(row_7_bad), 7, "image", "7.png", False)
    assert e.position is not None and e.reason.startswith("cannot decode image")
    assert "file " + str(row_7_bad) in str(e) and "youmu.ImageError fields" not in str(e)
    if workers:
        assert "DataLoader worker" in e.worker_traceback


@pytest.mark.parametrize("workers", [0, 1])
def test_the_good_row_before_a_bad_one_is_delivered_before_the_error(row_7_bad, workers) -> None:
    ds = YoumuDataset(row_7_bad, output="python", shuffle="none", transform=_tagged())
    got = []
    with pytest.raises(youmu.ImageError):
        for s in DataLoader(ds, batch_size=None, num_workers=workers):
            got.append(s["id"])
    assert got == list(range(7))


def test_a_misspelt_image_column_is_an_error_naming_the_columns(row_7_bad) -> None:
    # when the dataset is built, before any worker starts
    with pytest.raises(youmu.ColumnNotFoundError, match=r"\['images'\].*\['id', 'image', 'caption'\]"):
        YoumuDataset(row_7_bad, output="python", shuffle="none",
                     transform=VisionTransform(ByteTokenizer(), image_column="images", text_column="caption"))
    # and at a row, wherever the transform runs (a skip policy does not skip it)
    t = VisionTransform(ByteTokenizer(), image_column="images", text_column="caption", on_error="skip")
    with pytest.raises(youmu.ColumnNotFoundError, match=r"image_column='images'.*\['caption', 'id', 'image'\]"):
        t({"id": 0, "image": None, "caption": "x"})


def test_a_missing_text_column_is_an_error_not_samples_without_loss_tokens(row_7_bad) -> None:
    with pytest.raises(youmu.ColumnNotFoundError, match=r"\['conversations'\].*'caption'"):
        YoumuDataset(row_7_bad, output="python", shuffle="none",
                     transform=VisionTransform(ByteTokenizer()))  # text_column="conversations"
    # columns= that leaves the text out is named too
    with pytest.raises(youmu.ColumnNotFoundError, match=r"\['caption'\].*columns= leaves them out.*\['image'\]"):
        YoumuDataset(row_7_bad, output="python", shuffle="none", columns=["image"],
                     transform=VisionTransform(ByteTokenizer(), text_column="caption"))
    t = VisionTransform(ByteTokenizer())
    with pytest.raises(youmu.ColumnNotFoundError, match=r"text_column='conversations'.*columns="):
        t({"image": None, "caption": "x"})


def test_a_null_image_or_text_is_data_not_an_error() -> None:
    t = VisionTransform(ByteTokenizer(), text_column="caption")
    s = t({"image": None, "caption": "text only"})
    assert s["backbone_tokens"] == 0 and (s["labels"] != -100).sum() > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_a_skip_policy_under_which_no_row_is_good_is_an_error_with_the_count(tmp_path, workers) -> None:
    path = _write(tmp_path / "allbad.parquet", set(range(12)))
    ds = YoumuDataset(path, output="python", shuffle="none", transform=_tagged(on_error="skip"))
    with pytest.raises(youmu.ImageError, match=r"skipped all \d+ rows .* delivered none") as info:
        list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert info.value.file == str(path) and not info.value.skip


def test_a_resumed_pass_that_only_sees_bad_rows_warns() -> None:
    """A pass resumed past its shard's last good row (as after resharding) that only
    finds bad rows warns with the count rather than failing the run."""
    from youmu.streams.skips import SkipLog, reporting_pass

    def where(pos):
        return {"file": "f.parquet", "row": pos, "position": pos}

    transform = _tagged(on_error="skip")
    rows = [{"id": i, "image": b"not an image", "caption": "x"} for i in range(3)]
    log = SkipLog()
    with pytest.warns(youmu.YoumuWarning, match=r"skipped all 3 rows of this resumed pass \(stream positions 5-7\)"):
        out = list(reporting_pass(iter(rows), transform, 5, where, log))
    assert len(out) == 3 and log.count == 3
    with pytest.raises(youmu.ImageError, match=r"skipped all 3 rows of this pass"):
        list(reporting_pass(iter(rows), transform, 0, where, SkipLog()))


def test_some_bad_rows_under_skip_are_quiet(tmp_path) -> None:
    path = _write(tmp_path / "somebad.parquet", {3, 4})
    ds = YoumuDataset(path, output="python", shuffle="none", transform=_tagged(on_error="skip"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(s["id"] for s in ds) == [i for i in range(12) if i not in (3, 4)]


def _instances():
    for name in youmu.errors.__all__:
        cls = getattr(youmu.errors, name)
        if not (isinstance(cls, type) and issubclass(cls, youmu.errors.YoumuError)):
            continue
        if cls is youmu.errors.ImageError:
            yield cls("bad", column="c", image=1, path="p", file="f", row=3, position=4, skip=True)
        elif cls is youmu.errors.CapacityError:
            yield cls("full", [2, 5])
        elif cls in (youmu.errors.RankFailedError, youmu.errors.PeerClosedError):
            yield cls("rank", (1, 3))
        elif cls is youmu.errors.LoaderUnavailableError:
            yield cls("gone", actor="job.loader0")
        else:
            yield cls("message")


@pytest.mark.parametrize("error", list(_instances()), ids=lambda e: type(e).__name__)
def test_every_youmu_error_pickles_with_its_attributes(error) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert {k: v for k, v in vars(back).items()} == {k: v for k, v in vars(error).items()}
