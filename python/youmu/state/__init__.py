"""State and resume: the stream contract every youmu stream keeps (``contract``), state formats
declared field by field (``formats``), the stream state's formats (``stream``) and their merge
(``stream_merge``), the step-planning loaders' shared merge prologue (``step_states``), the
merged job-states header (``jobs``), the file codec (``files``) and the bounds a decoded state
must keep (``bounds``). Loaders' own formats live with their loaders.

Example:
    >>> from youmu.state.files import dumps, loads
    >>> loads(dumps({"epoch": 1, "position": 40}), where="example")
    {'epoch': 1, 'position': 40}
"""

__all__: list[str] = []
