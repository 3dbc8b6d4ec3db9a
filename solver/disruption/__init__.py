"""Consolidation: which nodes to remove and what replaces them, within budgets and PDBs (``consolidate``)."""
