"""The process around a command: the terminal, progress lines, signals, child processes."""
