"""What a Hugging Face Hub file's resolve URL looks like: the pattern the Hub layer
(:mod:`youmu.streams.hub`) resolves ``hf://`` paths to, and the test a state's data
fingerprint (:func:`youmu.state.contract.data_fingerprint`) uses to take a file's ETag
as its content. Plumbing, below both: a URL's shape, nothing about reading it.

Example:
    >>> RESOLVE_URL.search("https://huggingface.co/datasets/o/n/resolve/" + "a" * 40 + "/x.parquet").group(1)
    'o/n'
"""

from __future__ import annotations

import re

__all__ = ["RESOLVE_URL", "is_hub_file"]

#: ``/datasets/<owner>/<name>/resolve/<40-hex commit>/``: groups are the repository and the commit.
RESOLVE_URL = re.compile(r"/datasets/([^/]+/[^/]+)/resolve/([0-9a-f]{40})/")


def is_hub_file(url: str) -> bool:
    """Whether ``url`` is a Hub file's resolve URL pinned to a commit (what an ``hf://``
    path resolves to): its ETag is a hash of its bytes (the LFS object's SHA-256, a git
    blob's id), the same at every commit and on every mirror of those bytes, which is
    what a state's data fingerprint takes as the file's content.

    >>> is_hub_file("https://huggingface.co/datasets/o/n/resolve/" + "a" * 40 + "/x.parquet")
    True
    >>> is_hub_file("s3://bucket/datasets/o/n/resolve/main/x.parquet")
    False
    """
    return url[:4].lower() == "http" and RESOLVE_URL.search(url) is not None
