"""The multisource planning engine (MegaScale-Data): schedules, costs, balancing, packing
into micro-batches, placement and the planner. Pure: no loader, no state.

Example:
    >>> from youmu.planning.engine.schedule import MixingSchedule
    >>> MixingSchedule({"code": 1.0, "web": 3.0}).counts(0, batch_size=8)
    {'code': 2, 'web': 6}
"""

__all__: list[str] = []
