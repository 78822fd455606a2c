"""What-if replay of the steady steps: the step model, the replay, fixes and the bound."""
