"""The `model` stage (contract section 8): a side's transform outputs fed to a trained model, batch by batch.

The stage answers on-call's second question, "does the skew change what the model decides?". Its value per record
is the model's outputs (output name -> value), fingerprinted and compared per output like the transform's
features. `ModelSpec` is what the config says; `LoadedModel.apply` is the stage's one batch function: it feeds the
records' features by name with the signature's dtypes and shapes (`[N]` or `[N, k]`) in one call per batch, never
per record, since a model call costs the same for one record as for a few thousand.

Loads TF2 SavedModels (Keras 3 `model.export`, `tf.saved_model.save`, a TFX Trainer's serving export whose
signature takes transformed features) through their signature, and `.keras` files through Keras. A path may be a
URL: it is copied to a local folder first (TensorFlow reads local files whatever Beam's FileSystems serve).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.errors import ConfigError
from parity.storage.context import Storage

DECISION_RULES = ("argmax", "threshold")
_BLOCK = 64  # rows a model batch is padded to a multiple of: above any SIMD packet TensorFlow's CPU kernels use
_ACCEPTED = "float32, float64, int32, int64, bool or string features of one value (shape [N] or [N, 1]) or of a " \
            "fixed length k (shape [N, k])"


@dataclass(frozen=True)
class DecisionSpec:
    """How an output becomes a decision: `argmax` of its values, or `threshold` (value >= `at`)."""

    output: str
    rule: str = "argmax"
    at: float = 0.5

    def decide(self, value: Any) -> Any:
        """The decision one output value makes (an int class index, or a bool)."""
        array = np.asarray(value, dtype=np.float64).reshape(-1)
        if self.rule == "argmax":
            return int(np.argmax(array)) if array.size else None
        return bool(array[0] >= self.at) if array.size else None


@dataclass(frozen=True)
class ModelSpec:
    """A side's `model:` (or the top-level one): the model, its signature, how inputs map to features, which
    outputs are compared and the decision they make."""

    saved: str                                   # absolute local path, or a URL
    signature: str | None = None                 # None: serving_default, else the only signature
    inputs: tuple[tuple[str, str], ...] = ()     # model input -> transform feature (default: the same name)
    outputs: tuple[str, ...] = ()                # () : all of the signature's outputs
    decision: DecisionSpec | None = None
    where: str = "model"                         # the config file and field path, for messages

    def feature_for(self, input_name: str) -> str:
        return dict(self.inputs).get(input_name, input_name)


def model_identity(path: str) -> str:
    """A fingerprint of the model's files (names and bytes): two sides whose identities differ use different
    models, which is what `model.version` says. A URL is identified by its text (its bytes are the worker's)."""
    if "://" in path and not path.startswith("file://"):
        return hashlib.sha256(path.encode()).hexdigest()[:16]
    digest = hashlib.sha256()
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            digest.update(handle.read())
        return digest.hexdigest()[:16]
    for folder, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(folder, name)
            digest.update(os.path.relpath(full, path).encode() + b"\0")
            with open(full, "rb") as handle:
                digest.update(handle.read())
    return digest.hexdigest()[:16]


class LoadedModel:
    """A model loaded once per worker, with its signature's input specs, applied a batch at a time."""

    def __init__(self, spec: ModelSpec, side: str, storage: Storage = Storage()):
        self.spec, self.side, self._storage = spec, side, storage
        self._load()

    def _where(self) -> str:
        return self.spec.where

    def _load(self) -> None:
        import tensorflow as tf

        path = _local(self.spec.saved, self._storage)
        try:
            if path.endswith(".keras"):
                self._load_keras(path)
                return
            loaded = tf.saved_model.load(path)
        except Exception as exc:  # TensorFlow's many load errors: one message naming the model
            raise ConfigError(f"{self._where()}.saved: cannot load the model {self.spec.saved}: "
                              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; expected a TF2 "
                              f"SavedModel folder (saved_model.pb) or a .keras file") from exc
        signatures = dict(loaded.signatures)
        name = self.spec.signature or ("serving_default" if "serving_default" in signatures else
                                       next(iter(signatures)) if len(signatures) == 1 else None)
        if name not in signatures:
            raise ConfigError(f"{self._where()}.signature: {name!r} is not a signature of {self.spec.saved}; "
                              f"expected one of {', '.join(sorted(signatures)) or '(none: export one)'}")
        self._loaded = loaded  # keeps the signature's variables alive
        function = signatures[name]
        self._specs = {key: (spec.dtype.name, tuple(spec.shape.as_list()))
                       for key, spec in function.structured_input_signature[1].items()}
        self._call = lambda tensors: function(**tensors)
        self.output_names = tuple(sorted(function.structured_outputs))
        self._check_outputs()

    def _load_keras(self, path: str) -> None:
        import keras

        model = keras.saving.load_model(path, compile=False)
        self._specs = {tensor.name.split(":")[0]: (_dtype_name(tensor.dtype), tuple(tensor.shape))
                       for tensor in model.inputs}
        names = list(model.output_names) if getattr(model, "output_names", None) else ["output_0"]

        def call(tensors: dict) -> dict:
            out = model(tensors if len(tensors) > 1 else next(iter(tensors.values())), training=False)
            if isinstance(out, dict):
                return out
            out = out if isinstance(out, (list, tuple)) else [out]
            return dict(zip(names, out))

        self._call = call
        self.output_names = tuple(sorted(names))
        self._check_outputs()

    def _check_outputs(self) -> None:
        wanted = set(self.spec.outputs) | ({self.spec.decision.output} if self.spec.decision else set())
        missing = sorted(wanted - set(self.output_names))
        if missing:
            raise ConfigError(f"{self._where()}: output {missing[0]!r} is not an output of the model "
                              f"{self.spec.saved}; expected one of {', '.join(self.output_names)}")

    def check_features(self, features: set[str]) -> None:
        """Refuses a signature input with no matching feature (named with what would be accepted)."""
        for name in sorted(self._specs):
            feature = self.spec.feature_for(name)
            if feature not in features:
                raise ConfigError(f"{self._where()}.inputs: model input {name!r} takes feature {feature!r}, which "
                                  f"the transform of side '{self.side}' does not output; expected one of "
                                  f"{', '.join(sorted(features))} (map it with "
                                  f"{self.spec.where.rsplit(': ', 1)[-1]}.inputs: {{{name}: FEATURE}})")

    def apply(self, records: list[dict]) -> list[dict]:
        """The stage's batch function: the model's outputs (name -> numpy value) of each record's features, from
        one call on the whole batch."""
        if not records:
            return []
        self.check_features(set().union(*(set(r) for r in records)))
        # padded to whole blocks: TensorFlow's vectorised kernels (sigmoid, exp, ...) compute a batch's last
        # n % packet elements another way, so unpadded a record's outputs would depend on where in its batch it
        # falls, which differs between sides that drop or quarantine other records (a false model.version)
        padded = records + [records[-1]] * (-len(records) % _BLOCK)
        tensors = {name: self._column(name, dtype, shape, padded) for name, (dtype, shape) in self._specs.items()}
        out = self._call(tensors)
        names = self.spec.outputs or self.output_names
        arrays = {name: np.asarray(out[name]) for name in names}
        return [{name: _plain(arrays[name][i]) for name in names} for i in range(len(records))]

    def _column(self, name: str, dtype: str, shape: tuple, records: list[dict]) -> Any:
        """One input's tensor for the batch: the feature's values cast to the signature's dtype and shaped [N],
        [N, 1] or [N, k]; a feature that cannot be is a ConfigError naming the input and the feature."""
        import tensorflow as tf

        feature = self.spec.feature_for(name)
        values = [r.get(feature) for r in records]
        try:
            if dtype == "string":
                array = np.array([_bytes(v) for v in values], dtype=object)
            else:
                array = np.array([_unwrapped(v) for v in values], dtype=np.dtype(dtype))
            if array.ndim == 1 and len(shape) == 2:
                array = array.reshape(-1, 1)
            elif array.ndim == 2 and array.shape[1] == 1 and len(shape) == 1:
                array = array.reshape(-1)
            if array.ndim != len(shape) or any(want is not None and want != got
                                               for want, got in zip(shape[1:], array.shape[1:])):
                raise ValueError(f"shape {list(array.shape)} for the signature's {list(shape)}")
            return tf.constant(array, dtype=getattr(tf, dtype))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ConfigError(f"{self._where()}.inputs: model input {name!r} ({dtype}, shape {_shape_text(shape)}) "
                              f"cannot be fed feature {feature!r}: {exc}; expected {_ACCEPTED}") from exc


def _unwrapped(value: Any) -> Any:
    """A feature value as numpy takes it: a one-value list (or array) as its value, so that a batch mixing the
    two is one column; None refused."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if value is None:
        raise ValueError("a record has no value (null)")
    if isinstance(value, (str, bytes)):
        raise TypeError(f"a string value {value!r:.40}")
    return value


def _bytes(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if len(value) == 1 else value
    return value


def _plain(value: Any) -> Any:
    """An output value as the canonical encoding takes it: a float for one value, else a list of floats."""
    array = np.asarray(value)
    if array.dtype.kind == "f":
        array = array.astype(np.float64)
    return array.item() if array.size == 1 else array.tolist()


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join("N" if i == 0 else str(d) if d is not None else "?" for i, d in enumerate(shape)) + "]"


def _dtype_name(dtype: Any) -> str:
    return dtype if isinstance(dtype, str) else getattr(dtype, "name", str(dtype))


def _local(path: str, storage: Storage) -> str:
    """A local copy of a model at a URL (`Storage.local_copy`, once per process: TensorFlow's own file system
    reads no `s3://`); a local path, or a `file://` URL's, as it is."""
    from parity.storage import urls

    return storage.local_copy(urls.resolved(path, "model.saved"), prefix="parity-model-")
