"""Image-text preprocessing for DataLoader workers: decode (Pillow), resize by Qwen2-VL's
rule, chat-template and tokenize with visual-token expansion — after which a sample's
true costs are known (``encoder_patches`` for the image encoder, ``backbone_tokens``
for the LLM), as online dynamic batching and encoder/backbone balancing need them.

Pure functions plus one worker transform (:class:`VisionTransform`); Pillow is
imported on first decode (``pip install 'youmu[vision]'``), never by ``import youmu``.

Example:
    >>> from youmu.vision import visual_cost
    >>> visual_cost(1080, 1920).backbone_tokens
    1222
"""

from youmu.streams.skips import ON_ERROR
from youmu.text.layouts import IMAGE_PLACEHOLDER
from youmu.vision.decode import MAX_IMAGE_PIXELS, image_cost, load_image, open_image, to_rgb, upright_size
from youmu.vision.resize import (
    FACTOR,
    MAX_PIXELS,
    MERGE_SIZE,
    MIN_PIXELS,
    PATCH_SIZE,
    TEMPORAL_PATCH_SIZE,
    VisualCost,
    processor_geometry,
    smart_resize,
    visual_cost,
)
from youmu.vision.template import ByteTokenizer, tokenize_chat
from youmu.vision.transform import VisionTransform, images_of

__all__ = [
    "MAX_IMAGE_PIXELS",
    "image_cost",
    "load_image",
    "open_image",
    "to_rgb",
    "upright_size",
    "FACTOR",
    "MAX_PIXELS",
    "MERGE_SIZE",
    "MIN_PIXELS",
    "PATCH_SIZE",
    "TEMPORAL_PATCH_SIZE",
    "VisualCost",
    "processor_geometry",
    "smart_resize",
    "visual_cost",
    "IMAGE_PLACEHOLDER",
    "ByteTokenizer",
    "tokenize_chat",
    "ON_ERROR",
    "VisionTransform",
    "images_of",
]
