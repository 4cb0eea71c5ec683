"""The fault suite (a package, so its private stacks are shared by its modules and stopped after them)."""
