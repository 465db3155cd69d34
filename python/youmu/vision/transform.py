"""The per-row transform DataLoader workers run on image-text rows: decode, resize,
template, tokenize — after which the sample's costs are known.

Example:
    >>> import io
    >>> from PIL import Image
    >>> from youmu.vision import ByteTokenizer, VisionTransform
    >>> buf = io.BytesIO(); Image.new("RGB", (640, 480)).save(buf, "PNG")
    >>> t = VisionTransform(ByteTokenizer(), text_column="caption")
    >>> s = t({"image": {"bytes": buf.getvalue(), "path": "a.png"}, "caption": "black"})
    >>> s["encoder_patches"], s["backbone_tokens"], s["image_grid_thw"]
    (1564, 391, [(1, 34, 46)])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from youmu._internal.args import bool_arg, choice_arg, int_arg
from youmu.errors import ArgumentTypeError, ColumnNotFoundError, ImageError, TextError
from youmu.streams.skips import ON_ERROR
from youmu.text.layouts import Layout, layout_arg, read_conversation
from youmu.vision.decode import MAX_IMAGE_PIXELS, image_cost, load_image
from youmu.vision.resize import MAX_PIXELS, MERGE_SIZE, MIN_PIXELS, PATCH_SIZE, TEMPORAL_PATCH_SIZE, processor_geometry
from youmu.vision.template import DEFAULT_SYSTEM, tokenize_chat

__all__ = ["VisionTransform", "images_of"]


def images_of(value: Any, column: str) -> list[tuple[bytes, str | None]]:
    """``(bytes, path)`` of every image in a row's image cell, in any stored form: raw
    bytes, ``{"bytes", "path"}`` (Hugging Face ``Image()`` and LLaVA dumps), a list of
    those, or ``None`` (a text-only row)."""
    if value is None:
        return []
    if isinstance(value, (bytes, bytearray, memoryview)):
        return [(bytes(value), None)]
    if isinstance(value, Mapping):
        data, path = value.get("bytes"), value.get("path")
        if data is None:
            raise ImageError("image cell has no bytes (only a path; youmu reads images stored in the rows)",
                             column=column, path=path)
        return [(data, path)]
    if isinstance(value, (list, tuple, np.ndarray)):
        out = []
        for i, v in enumerate(value):
            try:
                out.extend(images_of(v, column))
            except ImageError as e:
                raise e.located(image=i) from None
        return out
    raise ImageError(f"image cell of type {type(value).__name__}", column=column)


class VisionTransform:
    """Turn an image-text row (``output="python"``) into a training sample.

    Args:
        tokenizer: ``encode(text) -> list[int]`` with Qwen2-VL's special tokens (a
            Hugging Face tokenizer, or :class:`~youmu.vision.ByteTokenizer`).
        image_column, text_column: the row's columns (images: see :func:`images_of`;
            text: a LLaVA ``conversations`` list, chat ``messages`` or a caption).
        layout: how the rows store a conversation, as :class:`~youmu.text.ChatTemplate`'s
            ``layout=`` (:mod:`youmu.text.layouts`; ``"alpaca"``: its columns, not
            ``text_column``); both transforms read a row the same way.
        min_pixels, max_pixels: the resize rule's range (Qwen2-VL's defaults).
        patch_size, merge_size, temporal_patch_size: the vision encoder's geometry
            (Qwen2-VL's: 14, 2, 2); :meth:`from_processor` takes all five from the
            ``transformers`` image processor the model is served with.
        max_image_pixels: images with more pixels are refused before decoding.
        draft: let JPEG decode at a reduced scale that is still at least the target.
        pixels: decode and resize (``False``: sizes from the headers only, the costs
            without the pixels — for planning).
        on_error: ``"raise"`` (default) an :class:`~youmu.errors.ImageError` naming the
            column, image, file and row; ``"skip"``: the error is marked ``skip`` and
            :class:`~youmu.torch.YoumuDataset` drops the row, counts it and reports it
            with its position in the ``"skipped"`` entry of a delivered sample.

    A sample: ``pixel_values`` (list of ``(h, w, 3)`` uint8 arrays), ``image_grid_thw``,
    ``input_ids`` and ``labels`` (int64 arrays), ``encoder_patches`` (14×14 patches,
    what the image encoder computes on), ``backbone_tokens`` (visual tokens in the LLM
    sequence), ``num_tokens`` (the whole sequence) and ``skipped`` (rows skipped before
    it, filled in by the dataset).

    Both columns must be in every row: a row without ``image_column`` or
    ``text_column`` (a misspelt name, or a ``columns=`` selection that left it out) is
    a :class:`~youmu.errors.ColumnNotFoundError` naming the columns the row has —
    never a silent text-only sample or one with nothing to learn. A ``None`` value
    (a text-only row, a row with no text) is data, not an error.
    """

    #: YoumuDataset locates this transform's ImageErrors and reports the rows it skips
    reports_rows = True

    def __init__(self, tokenizer: Any, *, image_column: str = "image", text_column: str = "conversations",
                 layout: str | Layout | None = None,
                 min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS,
                 max_image_pixels: int = MAX_IMAGE_PIXELS, draft: bool = True, pixels: bool = True,
                 system: str | None = DEFAULT_SYSTEM, on_error: str = "raise", patch_size: int = PATCH_SIZE,
                 merge_size: int = MERGE_SIZE, temporal_patch_size: int = TEMPORAL_PATCH_SIZE) -> None:
        if not (hasattr(tokenizer, "encode") or callable(tokenizer)):
            raise ArgumentTypeError(f"tokenizer must have encode(text) -> list[int], got {type(tokenizer).__name__}")
        if not isinstance(image_column, str) or not isinstance(text_column, str):
            raise ArgumentTypeError(f"image_column and text_column must be column names (str), got "
                                    f"{type(image_column).__name__} and {type(text_column).__name__}")
        self.tokenizer = tokenizer
        self.image_column = image_column
        self.text_column = text_column
        self.layout = layout_arg(layout)
        self.geometry = {"patch_size": int_arg("patch_size", patch_size, minimum=1),
                         "merge_size": int_arg("merge_size", merge_size, minimum=1),
                         "temporal_patch_size": int_arg("temporal_patch_size", temporal_patch_size, minimum=1)}
        self.min_pixels = int_arg("min_pixels", min_pixels, minimum=1)
        self.max_pixels = int_arg("max_pixels", max_pixels, minimum=self.min_pixels)
        self.max_image_pixels = int_arg("max_image_pixels", max_image_pixels, minimum=1)
        self.draft = bool_arg("draft", draft)
        self.pixels = bool_arg("pixels", pixels)
        self.system = system
        self.on_error = choice_arg("on_error", on_error, ON_ERROR)

    @classmethod
    def from_processor(cls, tokenizer: Any, processor: Any, **kwargs: Any) -> VisionTransform:
        """A transform that resizes and counts as ``processor`` does (a ``transformers``
        Qwen2-VL-style image processor, or a processor holding one): its pixel limits,
        patch, merge and temporal patch sizes (see
        :func:`~youmu.vision.processor_geometry`); ``kwargs`` as the constructor's."""
        return cls(tokenizer, **{**processor_geometry(processor), **kwargs})

    @property
    def required_columns(self) -> tuple[str, ...]:
        """The columns every row must have: datasets check them against the data when
        they are built (:class:`~youmu.torch.YoumuDataset`), before any worker starts."""
        return (self.image_column, *self.layout.columns(self.text_column))

    def _check_columns(self, row: Mapping[str, Any]) -> None:
        texts = self.layout.columns(self.text_column)
        named = [("text_column" if name == self.text_column else "layout", name) for name in texts]
        for role, name in [("image_column", self.image_column), *named]:
            if name not in row:
                raise ColumnNotFoundError(
                    f"VisionTransform({role}={name!r}): the rows have no column {name!r}; they have "
                    f"{sorted(row)} (check the name, and that columns= selects it)"
                )

    def __call__(self, row: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self._sample(row)
        except ImageError as e:
            if e.column is None:
                e = e.located(column=self.image_column)
            raise e.located(skip=self.on_error == "skip") from None

    def _text(self, row: Mapping[str, Any]) -> tuple[Any, Layout | None]:
        """The row's text as :func:`~youmu.vision.tokenize_chat` takes it, and the layout
        it is read with: the text column's value (read with the transform's layout), or
        (a layout over other columns) the row's conversation, already read (as
        ``{"role", "content"}`` messages: any message layout reads them)."""
        if self.layout.columns(self.text_column) == (self.text_column,):
            return row.get(self.text_column), self.layout
        try:
            return read_conversation(self.layout, row, self.text_column, images=True), None
        except TextError as e:
            where = "" if e.message is None else f" (message {e.message})"
            raise ImageError(f"{e.reason}{where}", column=self.layout.columns(self.text_column)[0]) from None

    def _sample(self, row: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(row, Mapping):
            raise ArgumentTypeError(f"VisionTransform takes rows as dicts (output='python'), got {type(row).__name__}")
        self._check_columns(row)
        pixels, costs = [], []
        for i, (data, path) in enumerate(images_of(row.get(self.image_column), self.image_column)):
            try:
                if self.pixels:
                    p, c = load_image(data, min_pixels=self.min_pixels, max_pixels=self.max_pixels,
                                      max_image_pixels=self.max_image_pixels, draft=self.draft, **self.geometry)
                    pixels.append(p)
                else:
                    c = image_cost(data, min_pixels=self.min_pixels, max_pixels=self.max_pixels,
                                   max_image_pixels=self.max_image_pixels, **self.geometry)
            except ImageError as e:
                raise e.located(column=self.image_column, image=i, path=path) from None
            costs.append(c)
        text, layout = self._text(row)
        tokens = tokenize_chat(text, [c.backbone_tokens for c in costs], self.tokenizer, system=self.system,
                               layout=layout)
        out: dict[str, Any] = {
            "image_grid_thw": [c.grid_thw for c in costs],
            "input_ids": np.asarray(tokens["input_ids"], dtype=np.int64),
            "labels": np.asarray(tokens["labels"], dtype=np.int64),
            "encoder_patches": sum(c.encoder_patches for c in costs),
            "backbone_tokens": sum(c.backbone_tokens for c in costs),
            "num_tokens": len(tokens["input_ids"]),
            "skipped": [],
        }
        if self.pixels:
            out["pixel_values"] = pixels
        return out
