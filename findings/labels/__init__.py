"""Labels: what a config, workload or campaign name stands for, checked at
write time (``identity``), and the store's undo (``amend``: retract,
relabel, list). docs/store.md and docs/decisions.md D89."""
