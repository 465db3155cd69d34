"""State and resume: the stream contract every youmu stream keeps (``contract``), the stream
state's format (``stream``) and its merge (``stream_merge``, ``pack_merge``), the merged
job-states header (``jobs``), the file codec (``files``) and the bounds a decoded state must
keep (``bounds``). Loaders' own formats live with their loaders."""
