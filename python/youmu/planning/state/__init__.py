"""``BalancedLoader``'s state: its checkpoint format, the loader's state methods and the
merge across topologies."""
