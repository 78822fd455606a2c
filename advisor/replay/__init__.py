"""What-if replay of the steady steps: the step model, the replay, fixes and the bound.

Private: not an API; a detector reaches the fixes and ``whatif`` through :mod:`advisor.detect`.
"""
