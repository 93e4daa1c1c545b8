"""Derivations at the edges of a verdict: where a threshold policy's ratio
really crosses the baseline (``crossover``). Pure: no I/O."""
