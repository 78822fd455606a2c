"""``advisor try``'s trial edits: each fix of a finding applied to the user's run without
changing its code (a setting, an argument, a module hook), in a child ``advisor profile`` run,
then the runs compared (see docs/try.md). Not the replay's fixes
(:mod:`advisor.replay.fixes`), which are edits of a step's dependency graph."""
