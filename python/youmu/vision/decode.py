"""Decode image bytes into RGB pixels, under a pixel limit, and resize them by the
Qwen2-VL rule.

Why Pillow: it reads every format image-text datasets publish (JPEG, PNG, WebP, GIF,
TIFF, BMP) in one package with wheels everywhere; its JPEG path is libjpeg-turbo, and
:meth:`PIL.Image.Image.draft` lets the JPEG decoder scale by 1/2, 1/4 or 1/8 inside
the DCT, which is most of what a faster decoder would buy on photos that are resized
down anyway (``draft=True``: a 4000×3000 JPEG resized to about 1 MP decodes at 1/2
scale). It is imported on first use, so ``import youmu`` does not need it
(``pip install youmu[vision]``).

Bad inputs get an :class:`~youmu.errors.ImageError`, never another exception: bytes no
decoder identifies, truncated files, and images with more than ``max_image_pixels``
pixels — checked from the header, before any pixel is decoded, so a 40,000×40,000
PNG of 100 KB (a decompression bomb) costs nothing. Pillow's own bomb check (a
warning above ``Image.MAX_IMAGE_PIXELS``, an error above twice that) is not relied on.
The EXIF orientation is applied (as ``transformers``' ``load_image`` and Hugging Face
``datasets`` apply it, with ``ImageOps.exif_transpose``): a phone photo stored sideways
with orientation 6 is fed upright, and its cost is that of the upright size.
Modes other than RGB are converted: CMYK and palette images by Pillow, 16-bit and
32-bit grey scaled to 8 bits, transparency composited on white; animated images
(GIF, WebP, APNG) give their first frame.

Example:
    >>> import io
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.new("CMYK", (640, 480)).save(buf, "JPEG")
    >>> from youmu.vision import load_image
    >>> pixels, cost = load_image(buf.getvalue())
    >>> pixels.shape, pixels.dtype.name, cost.backbone_tokens
    ((476, 644, 3), 'uint8', 391)
"""

from __future__ import annotations

import io
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from youmu._internal.args import instance_arg, int_arg
from youmu.errors import ImageError
from youmu.vision.resize import (
    MAX_PIXELS,
    MERGE_SIZE,
    MIN_PIXELS,
    PATCH_SIZE,
    TEMPORAL_PATCH_SIZE,
    VisualCost,
    visual_cost,
)

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["MAX_IMAGE_PIXELS", "open_image", "upright_size", "image_cost", "to_rgb", "load_image"]

#: Default limit on an image's pixels before decoding (64 Mi pixels: 192 MiB of RGB).
MAX_IMAGE_PIXELS = 64 << 20


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise ImportError("youmu.vision needs Pillow: pip install 'youmu[vision]'") from e
    return Image


def _image_arg(img: Any) -> Any:
    """``img`` when it is a Pillow image (what :func:`open_image` returns), else an
    :class:`~youmu.errors.ArgumentTypeError` saying so."""
    return instance_arg("img", img, _pil().Image, "a PIL.Image.Image (open bytes with youmu.vision.open_image)")


def open_image(data: bytes, *, max_image_pixels: int = MAX_IMAGE_PIXELS) -> Image:
    """Open image bytes lazily (header only) and check the pixel limit.

    >>> open_image(b"not an image")
    Traceback (most recent call last):
    ...
    youmu.errors.ImageError: cannot decode image: UnidentifiedImageError: cannot identify image file ...
    """
    Image = _pil()
    int_arg("max_image_pixels", max_image_pixels, minimum=1)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageError(f"image bytes expected, got {type(data).__name__}")
    try:
        with warnings.catch_warnings():
            # youmu's limit below decides; Pillow's warning is not the check
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:
        raise ImageError(f"image over the pixel limit (decompression bomb?): {e}") from None
    except Exception as e:  # Pillow's plugins raise many types on hostile bytes
        raise ImageError(f"cannot decode image: {type(e).__name__}: {e}") from None
    w, h = img.size
    if w * h > max_image_pixels:
        raise ImageError(
            f"image of {w}×{h} = {w * h:,} pixels is over max_image_pixels={max_image_pixels:,} "
            "(a decompression bomb?). If such images are expected, raise the limit: "
            "VisionTransform(..., max_image_pixels=N) or load_image(..., max_image_pixels=N); "
            "decoding one takes about 3·N bytes of RGB"
        )
    if w < 1 or h < 1:
        raise ImageError(f"image of {w}×{h} pixels has no pixels")
    return img


#: EXIF orientations that turn the image a quarter (width and height swap)
_QUARTER_TURNS = (5, 6, 7, 8)
_ORIENTATION = 0x0112


def _orientation(img: Image) -> int:
    try:
        value = img.getexif().get(_ORIENTATION, 1)
    except Exception:  # a malformed EXIF block: Pillow's exif_transpose ignores it too
        return 1
    return value if isinstance(value, int) else 1


def upright_size(img: Image) -> tuple[int, int]:
    """``(width, height)`` of an opened image once its EXIF orientation is applied
    (from the header: no pixel decoded)."""
    w, h = _image_arg(img).size
    return (h, w) if _orientation(img) in _QUARTER_TURNS else (w, h)


def image_cost(data: bytes, *, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS,
               max_image_pixels: int = MAX_IMAGE_PIXELS, patch_size: int = PATCH_SIZE,
               merge_size: int = MERGE_SIZE, temporal_patch_size: int = TEMPORAL_PATCH_SIZE) -> VisualCost:
    """The cost of an image from its header alone (no pixel decoded): what a planner
    needs before committing a sample to a batch. Corrupt pixel data past the header is
    only found by :func:`load_image`.
    """
    w, h = upright_size(open_image(data, max_image_pixels=max_image_pixels))
    return visual_cost(h, w, min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch_size,
                       merge_size=merge_size, temporal_patch_size=temporal_patch_size)


def to_rgb(img: Image) -> Image:
    """An 8-bit RGB copy of the (first frame of the) image: CMYK, YCbCr, L, 1 and
    palette by Pillow's conversions; 16/32-bit grey scaled to 8 bits (Pillow would clip
    it); transparency composited on white."""
    Image = _pil()
    img = _image_arg(img)
    if getattr(img, "n_frames", 1) > 1:
        img.seek(0)
    mode = img.mode
    if mode == "RGB":
        return img
    if mode.startswith("I;16") or mode in ("I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        grey = np.clip(arr / 257.0 if mode != "F" else arr * 255.0, 0, 255).round().astype(np.uint8)
        return Image.fromarray(grey, mode="L").convert("RGB")
    if mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
        mode = img.mode
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


def load_image(data: bytes, *, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS,
               max_image_pixels: int = MAX_IMAGE_PIXELS, draft: bool = True, patch_size: int = PATCH_SIZE,
               merge_size: int = MERGE_SIZE,
               temporal_patch_size: int = TEMPORAL_PATCH_SIZE) -> tuple[np.ndarray, VisualCost]:
    """Decode, turn upright (EXIF orientation), convert to RGB and resize by the
    Qwen2-VL rule: ``(pixels, cost)`` with
    ``pixels`` a ``(height, width, 3)`` uint8 array of the resized size. Normalising and
    cutting into patches is left to the model side (4× smaller to ship as uint8).

    ``draft``: let the JPEG decoder scale down by a power of two while staying at least
    the target size (the cost is computed from the original size either way).
    """
    Image = _pil()
    from PIL import ImageOps

    img = open_image(data, max_image_pixels=max_image_pixels)
    w, h = upright_size(img)
    turned = (w, h) != img.size
    cost = visual_cost(h, w, min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch_size,
                       merge_size=merge_size, temporal_patch_size=temporal_patch_size)
    try:
        if draft and img.format == "JPEG":  # the decoder's sides are the stored (unturned) ones
            img.draft("RGB", (cost.height, cost.width) if turned else (cost.width, cost.height))
        img.load()
        upright = ImageOps.exif_transpose(img) if _orientation(img) != 1 else img
        rgb = to_rgb(upright)
        if rgb.size != (cost.width, cost.height):
            rgb = rgb.resize((cost.width, cost.height), Image.BICUBIC)
        pixels = np.asarray(rgb, dtype=np.uint8)
    except ImageError:
        raise
    except Exception as e:  # truncated or corrupt pixel data
        raise ImageError(f"cannot decode image: {type(e).__name__}: {e}") from None
    finally:
        img.close()
    if pixels.shape != (cost.height, cost.width, 3):
        raise ImageError(f"decoded image has shape {pixels.shape}, expected {(cost.height, cost.width, 3)}")
    return pixels, cost
