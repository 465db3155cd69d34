"""Qwen2-VL's "smart resize" rule and the visual-token counts it implies.

Qwen2-VL's vision encoder cuts an image into 14×14 patches and its merger joins 2×2
patches into one token of the LLM backbone, so both sides of a resized image are
multiples of 28 (``factor = patch · merge``). The rule is the one of the
``Qwen2VLImageProcessor`` of ``transformers`` (what the model is served with, by
``transformers`` and vLLM): round each side to the nearest multiple of 28; if the
product is above ``max_pixels``, scale both sides down by ``√(h·w / max_pixels)`` and
floor to 28 (at least 28); if below ``min_pixels`` — a side that rounds to 0 makes it
0 — scale both up by ``√(min_pixels / (h·w))`` and ceil to 28. (``qwen_vl_utils``
clamps a rounded side to 28 before comparing, which differs for sides of 14 pixels or
less: a 10×1000 image is 28×560 in ``transformers`` and 28×1008 there; the processor
decides what the model sees, so youmu follows it.)

Other models use the same rule with other constants — Qwen3-VL has 16-pixel patches
(``factor`` 32) — so the patch side, the merge size and the temporal patch are
parameters; :func:`processor_geometry` reads all of them, and the pixel limits, from
a ``transformers`` image processor.

The cost of a sample is known once the size is (no pixel needs decoding):
``encoder_patches = (h/patch)·(w/patch)`` (what the image encoder computes on) and
``backbone_tokens = encoder_patches / merge²`` (the visual tokens the LLM sees). Online
dynamic batching (ODB) needs exactly these: the true cost of a sample is only
observable after preprocessing and visual-token expansion.

Example:
    >>> from youmu.vision import smart_resize, visual_cost
    >>> smart_resize(480, 640)
    (476, 644)
    >>> c = visual_cost(480, 640)
    >>> c.encoder_patches, c.backbone_tokens, c.grid_thw
    (1564, 391, (1, 34, 46))
    >>> visual_cost(480, 640, patch_size=16).grid_thw   # Qwen3-VL's 16-pixel patches
    (1, 30, 40)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from youmu.errors import ArgumentTypeError, ImageError

__all__ = [
    "PATCH_SIZE",
    "MERGE_SIZE",
    "TEMPORAL_PATCH_SIZE",
    "FACTOR",
    "MIN_PIXELS",
    "MAX_PIXELS",
    "MAX_ASPECT_RATIO",
    "VisualCost",
    "smart_resize",
    "visual_cost",
    "processor_geometry",
]

#: Side of one vision-encoder patch (pixels).
PATCH_SIZE = 14
#: Patches merged per side into one backbone token (2×2 → 1).
MERGE_SIZE = 2
#: Frames per patch along time: an image is repeated this many times into each patch
#: (it sets the length of a flattened patch, not the number of patches).
TEMPORAL_PATCH_SIZE = 2
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
    #: patches the image encoder computes on
    encoder_patches: int
    #: visual tokens in the LLM backbone's sequence (patches / merge²)
    backbone_tokens: int
    #: the geometry the counts were computed with
    patch_size: int = field(default=PATCH_SIZE, repr=False)
    merge_size: int = field(default=MERGE_SIZE, repr=False)
    temporal_patch_size: int = field(default=TEMPORAL_PATCH_SIZE, repr=False)

    @property
    def grid_thw(self) -> tuple[int, int, int]:
        """``(t, h, w)`` in patches, as Qwen2-VL's ``image_grid_thw`` (one frame)."""
        return (1, self.height // self.patch_size, self.width // self.patch_size)

    @property
    def patch_dim(self) -> int:
        """Values in one flattened patch of RGB ``pixel_values`` (3 · temporal · patch²:
        1176 for Qwen2-VL)."""
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size


def _round(x: float, factor: int) -> int:
    return round(x / factor) * factor


def smart_resize(height: int, width: int, *, factor: int = FACTOR, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """``(height, width)`` an image of ``height × width`` is resized to (see the module
    docstring). Raises :class:`~youmu.errors.ImageError` for an empty image or an
    aspect ratio above :data:`MAX_ASPECT_RATIO` (where ``transformers`` raises its
    ``ValueError``), :class:`~youmu.errors.InvalidArgumentError` for bad limits.

    >>> smart_resize(28, 28)          # scaled up to min_pixels
    (56, 56)
    >>> smart_resize(4000, 3000)      # scaled down to max_pixels
    (1148, 840)
    >>> smart_resize(10, 1000)        # a side that rounds to 0 scales the image up
    (28, 560)
    """
    from youmu._internal.args import int_arg

    int_arg("factor", factor, minimum=1)
    int_arg("min_pixels", min_pixels, minimum=1)
    int_arg("max_pixels", max_pixels, minimum=min_pixels)
    height, width = int_arg("height", height), int_arg("width", width)
    if height < 1 or width < 1:
        raise ImageError(f"image of {width}×{height} pixels has no pixels")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ImageError(
            f"image of {width}×{height} pixels has an aspect ratio above {MAX_ASPECT_RATIO} (Qwen2-VL refuses those)"
        )
    h, w = _round(height, factor), _round(width, factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def visual_cost(height: int, width: int, *, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS,
                patch_size: int = PATCH_SIZE, merge_size: int = MERGE_SIZE,
                temporal_patch_size: int = TEMPORAL_PATCH_SIZE) -> VisualCost:
    """The size an image of ``height × width`` is resized to and its encoder patches and
    backbone tokens (Qwen2-VL's defaults: 14-pixel patches, 2×2 merge, 2 frames per
    patch; :func:`processor_geometry` gives another model's).

    >>> visual_cost(56, 56)
    VisualCost(height=56, width=56, encoder_patches=16, backbone_tokens=4)
    """
    from youmu._internal.args import int_arg

    int_arg("patch_size", patch_size, minimum=1)
    int_arg("merge_size", merge_size, minimum=1)
    int_arg("temporal_patch_size", temporal_patch_size, minimum=1)
    h, w = smart_resize(height, width, factor=patch_size * merge_size, min_pixels=min_pixels, max_pixels=max_pixels)
    patches = (h // patch_size) * (w // patch_size)
    return VisualCost(h, w, patches, patches // (merge_size * merge_size), patch_size, merge_size,
                      temporal_patch_size)


def processor_geometry(processor: Any) -> dict[str, int]:
    """``{"min_pixels", "max_pixels", "patch_size", "merge_size", "temporal_patch_size"}``
    of a ``transformers`` Qwen2-VL-style image processor (or a processor holding one as
    ``image_processor``): the keyword arguments that make :func:`visual_cost` and
    :class:`~youmu.vision.VisionTransform` count as it does.

    >>> class P:  # what a Qwen3-VL image processor carries
    ...     patch_size, merge_size, temporal_patch_size = 16, 2, 2
    ...     size = {"shortest_edge": 65536, "longest_edge": 16777216}
    >>> processor_geometry(P())["patch_size"]
    16
    """
    proc = getattr(processor, "image_processor", processor)
    out: dict[str, int] = {}
    for name in ("patch_size", "merge_size", "temporal_patch_size"):
        value = getattr(proc, name, None)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ArgumentTypeError(f"processor has no integer {name} (got {value!r}): not a Qwen2-VL-style "
                                    "image processor")
        out[name] = value
    size = getattr(proc, "size", None)
    get = size.get if isinstance(size, Mapping) else (lambda k: getattr(size, k, None))
    lo = get("shortest_edge") or getattr(proc, "min_pixels", None)
    hi = get("longest_edge") or getattr(proc, "max_pixels", None)
    if not isinstance(lo, int) or not isinstance(hi, int):
        raise ArgumentTypeError(f"processor's size {size!r} has no pixel limits (shortest_edge, longest_edge)")
    out["min_pixels"], out["max_pixels"] = lo, hi
    return out
