"""``qlsched demo``: replica processes, one crashed mid-way, verified exactly once."""
