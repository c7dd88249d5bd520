"""The write path: an event's body decoded and validated, its fact derived, journaled and applied."""
