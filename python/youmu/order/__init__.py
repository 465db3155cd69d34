"""Pure order maps: which positions a (rank, worker) owns (``sharding``), the shuffle modes
(``modes``) and the order of an epoch (``shuffle``), and the resume math over chains of levels
(``resume``). Functions of (seed, epoch, position) only: no I/O, no state formats."""
