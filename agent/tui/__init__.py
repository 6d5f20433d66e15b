"""`horizon chat`: a Textual coding assistant over the agent runtime (events in, approvals out)."""
