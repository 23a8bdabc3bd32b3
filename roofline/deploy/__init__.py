"""How it is deployed: the engines' trees, flags and searches, the planner, tree sizing."""
