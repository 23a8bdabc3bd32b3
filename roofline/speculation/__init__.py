"""What speculation buys: trees, acceptance, drafters, verification, rounds and speedup."""
