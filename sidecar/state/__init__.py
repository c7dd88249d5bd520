"""A run's live state, changed only by applying facts: accounting, in flight, timeline, agents."""
