"""The robustness suite's hypothesis profiles (`ci`, `ci-readers`, `ci-engine`) are registered with the whole
suite's in `tests/conftest.py`: derandomized unless `PARITY_HYPOTHESIS_PROFILE=explore`."""
