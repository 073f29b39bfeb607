"""Read-only analysis of one module, computed once per file and shared by every rule: which calls are pmaps (and jits) and which functions they map, how names resolve through imports and scopes, which values are pmap outputs or replicated stacks, where pmaps nest. It builds nothing and changes nothing; the fix builders and the rules ask it questions instead of walking the tree again.
"""
