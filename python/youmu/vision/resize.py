"""Qwen2-VL's "smart resize" rule and the visual-token counts it implies.

Qwen2-VL's vision encoder cuts an image into 14×14 patches and its merger joins 2×2
patches into one token of the LLM backbone, so both sides of a resized image are
multiples of 28 (``factor = patch · merge``). The rule keeps the aspect ratio as
closely as rounding to 28 allows and scales the image into
``[min_pixels, max_pixels]`` (as ``qwen_vl_utils.smart_resize`` and the
``Qwen2VLImageProcessor`` of ``transformers`` do): round each side to the nearest
multiple of 28 (at least 28); if that is above ``max_pixels``, scale both sides down
by ``√(h·w / max_pixels)`` and floor to 28; if below ``min_pixels``, scale up by
``√(min_pixels / (h·w))`` and ceil to 28.

The cost of a sample is known once the size is (no pixel needs decoding):
``encoder_patches = (h/14)·(w/14)`` (what the image encoder computes on) and
``backbone_tokens = encoder_patches / 4`` (the visual tokens the LLM sees). Online
dynamic batching (ODB) needs exactly these: the true cost of a sample is only
observable after preprocessing and visual-token expansion.

Example:
    >>> from youmu.vision import smart_resize, visual_cost
    >>> smart_resize(480, 640)
    (476, 644)
    >>> c = visual_cost(480, 640)
    >>> c.encoder_patches, c.backbone_tokens
    (1564, 391)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from youmu.errors import ImageError

__all__ = [
    "PATCH_SIZE",
    "MERGE_SIZE",
    "FACTOR",
    "MIN_PIXELS",
    "MAX_PIXELS",
    "MAX_ASPECT_RATIO",
    "VisualCost",
    "smart_resize",
    "visual_cost",
]

#: Side of one vision-encoder patch (pixels).
PATCH_SIZE = 14
#: Patches merged per side into one backbone token (2×2 → 1).
MERGE_SIZE = 2
#: Resized sides are multiples of this.
FACTOR = PATCH_SIZE * MERGE_SIZE
#: Qwen2-VL's image processor defaults (``min_pixels = 56·56``, ``max_pixels = 28·28·1280``).
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280
#: Images more elongated than this are refused, as Qwen2-VL refuses them.
MAX_ASPECT_RATIO = 200


@dataclass(frozen=True)
class VisualCost:
    """Size after the resize rule and what it costs the two halves of a VLM."""

    height: int
    width: int
    #: 14×14 patches the image encoder computes on
    encoder_patches: int
    #: visual tokens in the LLM backbone's sequence (patches / merge²)
    backbone_tokens: int

    @property
    def grid_thw(self) -> tuple[int, int, int]:
        """``(t, h, w)`` in patches, as Qwen2-VL's ``image_grid_thw`` (one frame)."""
        return (1, self.height // PATCH_SIZE, self.width // PATCH_SIZE)


def _round(x: float, factor: int) -> int:
    return round(x / factor) * factor


def smart_resize(height: int, width: int, *, factor: int = FACTOR, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """``(height, width)`` an image of ``height × width`` is resized to (see the module
    docstring). Raises :class:`~youmu.errors.ImageError` for an empty image or an
    aspect ratio above :data:`MAX_ASPECT_RATIO`, :class:`~youmu.errors.InvalidArgumentError`
    for bad limits.

    >>> smart_resize(28, 28)          # scaled up to min_pixels
    (56, 56)
    >>> smart_resize(4000, 3000)      # scaled down to max_pixels
    (1148, 840)
    """
    from youmu._args import int_arg

    int_arg("factor", factor, minimum=1)
    int_arg("min_pixels", min_pixels, minimum=1)
    int_arg("max_pixels", max_pixels, minimum=min_pixels)
    if height < 1 or width < 1:
        raise ImageError(f"image of {width}×{height} pixels has no pixels")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ImageError(
            f"image of {width}×{height} pixels has an aspect ratio above {MAX_ASPECT_RATIO} (Qwen2-VL refuses those)"
        )
    h = max(factor, _round(height, factor))
    w = max(factor, _round(width, factor))
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def visual_cost(height: int, width: int, *, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> VisualCost:
    """The size an image of ``height × width`` is resized to and its encoder patches and
    backbone tokens (Qwen2-VL: 14-pixel patches, 2×2 merge).

    >>> visual_cost(56, 56)
    VisualCost(height=56, width=56, encoder_patches=16, backbone_tokens=4)
    """
    h, w = smart_resize(height, width, min_pixels=min_pixels, max_pixels=max_pixels)
    patches = (h // PATCH_SIZE) * (w // PATCH_SIZE)
    return VisualCost(h, w, patches, patches // (MERGE_SIZE * MERGE_SIZE))
