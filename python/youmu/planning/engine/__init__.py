"""The multisource planning engine (MegaScale-Data): schedules, costs, balancing, packing
into micro-batches, placement and the planner. Pure: no loader, no state."""
