"""How far it is from published runs: the published table, kernel tables, error bands."""
