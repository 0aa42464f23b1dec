"""The TUI's screens."""
