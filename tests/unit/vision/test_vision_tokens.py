"""Visual tokens equal those of the image processor the model is served with:
``transformers``' Qwen2-VL ``smart_resize`` and ``Qwen2VLImageProcessorPil`` (installed)
are the oracle, for every shape their rule accepts — sides of 14 pixels or less
included — and youmu refuses (typed) exactly the shapes they refuse. Other models'
geometry (patch, merge, temporal patch) comes from their processor. EXIF orientation
is applied as ``transformers``' ``load_image`` applies it."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import youmu
from youmu.vision import (
    ByteTokenizer,
    VisionTransform,
    image_cost,
    load_image,
    processor_geometry,
    smart_resize,
    visual_cost,
)

qwen2_vl = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
ImageUtils = pytest.importorskip("transformers.image_utils")

LIMITS = [(56 * 56, 28 * 28 * 1280), (4 * 784, 16384 * 784), (256 * 784, 1280 * 784), (100, 5000)]


def oracle(h: int, w: int, factor: int = 28, lo: int = 56 * 56, hi: int = 28 * 28 * 1280) -> tuple[int, int] | None:
    """transformers' answer, or None where it refuses the shape."""
    try:
        return qwen2_vl.smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
    except ValueError:
        return None


def youmu_resize(h: int, w: int, factor: int = 28, lo: int = 56 * 56, hi: int = 28 * 28 * 1280) -> tuple[int, int] | None:
    try:
        return smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
    except youmu.ImageError as e:
        assert "aspect ratio" in str(e)
        return None


def test_the_example_of_a_thin_image() -> None:
    assert oracle(10, 1000) == (28, 560)
    assert smart_resize(10, 1000) == (28, 560)
    assert visual_cost(10, 1000).backbone_tokens == 20


def test_every_shape_with_a_side_of_14_pixels_or_less_matches() -> None:
    """Exhaustive where youmu used to differ: one side 1–14 px, the other 1–2,900 px
    (past the aspect-ratio limit), both orientations, at Qwen2-VL's limits."""
    for short in range(1, 15):
        for long in range(1, 2901):
            for h, w in ((short, long), (long, short)):
                assert youmu_resize(h, w) == oracle(h, w), (h, w)


@settings(max_examples=800, deadline=None)
@given(st.integers(1, 30000), st.integers(1, 30000), st.sampled_from(LIMITS), st.sampled_from([28, 32]))
def test_every_shape_matches_the_processor_rule(h, w, limits, factor) -> None:
    lo, hi = limits
    want = oracle(h, w, factor, lo, hi)
    assert youmu_resize(h, w, factor, lo, hi) == want
    if want is not None:  # the counts follow from the size
        patch = factor // 2
        cost = visual_cost(h, w, min_pixels=lo, max_pixels=hi, patch_size=patch)
        assert (cost.height, cost.width) == want
        assert cost.encoder_patches == (want[0] // patch) * (want[1] // patch) == 4 * cost.backbone_tokens


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 20), st.integers(1, 4000))
def test_thin_shapes_match_at_random_limits(short, long) -> None:
    for h, w in ((short, long), (long, short)):
        assert youmu_resize(h, w) == oracle(h, w)


def test_shapes_transformers_refuses_are_refused_with_a_typed_error() -> None:
    for h, w in [(1, 201), (201, 1), (10, 2001), (14, 2801), (1, 10**6)]:
        assert oracle(h, w) is None
        with pytest.raises(youmu.ImageError, match="aspect ratio"):
            smart_resize(h, w)
    for h, w in [(0, 10), (10, 0)]:
        with pytest.raises(youmu.ImageError, match="no pixels"):
            smart_resize(h, w)


def _png(w: int, h: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("geometry", [
    {},  # Qwen2-VL's defaults
    {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2, "min_pixels": 65536, "max_pixels": 16777216},
    {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 1, "min_pixels": 100, "max_pixels": 200_000},
])
def test_images_through_the_processor_give_youmus_grids_and_patches(geometry) -> None:
    """The installed processor run on real images: its image_grid_thw and the shape of
    its pixel_values equal youmu's grid_thw, encoder_patches and patch_dim — youmu's
    transform built from that processor."""
    lo, hi = geometry.pop("min_pixels", None), geometry.pop("max_pixels", None)
    kw = {**geometry, **({"min_pixels": lo, "max_pixels": hi} if lo else {})}
    proc = qwen2_vl.Qwen2VLImageProcessorPil(**kw)
    transform = VisionTransform.from_processor(ByteTokenizer(), proc, text_column="caption")
    for w, h in [(10, 1000), (1000, 10), (3, 3), (14, 14), (15, 600), (640, 480), (1, 150), (2000, 1300)]:
        data = _png(w, h)
        out = proc(images=[Image.open(io.BytesIO(data))])
        sample = transform({"image": data, "caption": "x"})
        grid = tuple(int(x) for x in out["image_grid_thw"][0])
        assert sample["image_grid_thw"] == [grid], (w, h)
        assert sample["encoder_patches"] == out["pixel_values"].shape[0]
        merge = proc.merge_size
        assert sample["backbone_tokens"] == out["pixel_values"].shape[0] // (merge * merge)
        cost = image_cost(data, **processor_geometry(proc))
        assert cost.patch_dim == out["pixel_values"].shape[1]
        assert sample["pixel_values"][0].shape == (grid[1] * proc.patch_size, grid[2] * proc.patch_size, 3)


def test_processor_geometry_refuses_what_is_not_an_image_processor() -> None:
    with pytest.raises(youmu.ArgumentTypeError, match="patch_size"):
        processor_geometry(object())


# -- EXIF orientation ------------------------------------------------------------------------
def _sideways_jpeg(orientation: int) -> tuple[bytes, np.ndarray]:
    """A 640×480 JPEG stored as a camera stores it, with the EXIF orientation tag; and
    the pixels transformers' load_image gives (upright)."""
    rng = np.random.default_rng(3)
    small = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)  # big flat blocks survive JPEG
    img = Image.fromarray(small).resize((640, 480), Image.NEAREST)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=95, exif=exif.tobytes())
    data = buf.getvalue()
    upright = np.asarray(ImageUtils.load_image(Image.open(io.BytesIO(data))))
    return data, upright


@pytest.mark.parametrize("orientation", [6, 8, 3])
def test_exif_orientation_is_applied_as_transformers_load_image_applies_it(orientation) -> None:
    data, upright = _sideways_jpeg(orientation)
    if orientation in (6, 8):
        assert upright.shape == (640, 480, 3)  # stored 640 wide, shown 640 tall
    pixels, cost = load_image(data, draft=False)
    assert image_cost(data) == cost == visual_cost(*upright.shape[:2])
    want = np.asarray(Image.fromarray(upright).resize((cost.width, cost.height), Image.BICUBIC))
    assert pixels.shape == want.shape
    assert np.abs(pixels.astype(int) - want).mean() < 2  # the same picture, the same way up
    drafted, cost2 = load_image(data)  # JPEG draft decoding sizes the stored (unturned) image
    assert cost2 == cost and drafted.shape == pixels.shape


def test_the_pixel_limit_says_how_to_raise_it() -> None:
    with pytest.raises(youmu.ImageError, match=r"raise the limit: VisionTransform\(\.\.\., max_image_pixels=N\)"):
        load_image(_png(300, 200), max_image_pixels=300 * 200 - 1)
