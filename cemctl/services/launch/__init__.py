"""Launching runs (`cemctl launch`): code snapshot, selection of what to (re)start, orchestration."""
