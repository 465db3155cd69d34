"""Plumbing every layer uses: argument checks (``args``), lazy package attributes, fork safety,
garbage-collector timing, shared integers across DataLoader workers, secret redaction, the shape
of a Hub resolve URL (`hub_urls`).
Nothing here knows what a stream, a state or a loader is."""
