"""parity's version, in a module that imports nothing: the package exports it (`parity.__version__`) and a
replay's environment records it (`parity.replay.environment`), which must not import the package's API
(that imports the commands, which import the replay)."""
__version__ = "0.1.0"
