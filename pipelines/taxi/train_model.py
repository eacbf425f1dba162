"""Trains the taxi example's small model once and exports it as `pipelines/taxi/tip_model/` (committed, a few
tens of KB), so that `make demo` shows what the planted bug does to the model's decisions, not only to the
features.

The model is a logistic regression "will this trip tip well (tips > 18% of the fare)?" over three of
`preprocess.py`'s features: `fare_z`, `trips_1h` and `fare_vs_zone_mean`. The last two come from the per-(hour,
zone) aggregates the production bug changes. Training features are computed here with numpy from the capture,
as the offline job computes them (every trip in its hour, no late drops); the model is exported with Keras 3's
`model.export`, a SavedModel whose `serving_default` takes the transformed features by name, as a TFX Trainer's
serving export of a model trained on Transform's outputs does. Seeded: the same capture gives the same weights.

    python pipelines/taxi/train_model.py
"""
from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "..", "..", "fixtures", "taxi", "capture", "trips.jsonl")
EXPORT = os.path.join(HERE, "tip_model")
GOOD_TIP = 0.18


def features(trips: list[dict]) -> dict[str, np.ndarray]:
    """fare_z, trips_1h and fare_vs_zone_mean of every trip, as the offline job computes them."""
    fares = np.array([t["fare"] or 0.0 for t in trips], np.float64)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(trips):
        groups[(t["event_time"] // 3600, t["pickup_zone"])].append(i)
    count, mean = np.zeros(len(trips)), np.zeros(len(trips))
    for members in groups.values():
        count[members] = len(members)
        mean[members] = fares[members].mean()
    return {"fare_z": ((fares - fares.mean()) / fares.std()).astype(np.float32),
            "trips_1h": count.astype(np.float32), "fare_vs_zone_mean": (fares - mean).astype(np.float32)}


def main() -> None:
    import keras

    keras.utils.set_random_seed(42)
    with open(CAPTURE, encoding="utf-8") as handle:
        trips = [json.loads(line) for line in handle if line.strip()]
    x = features(trips)
    y = np.array([(t["tips"] or 0.0) > GOOD_TIP * max(t["fare"] or 0.0, 1.0) for t in trips], np.float32)
    inputs = {name: keras.Input(shape=(), name=name, dtype="float32") for name in x}
    stacked = keras.layers.Concatenate()([keras.layers.Reshape((1,))(inputs[name]) for name in sorted(inputs)])
    scaled = keras.layers.Normalization(name="scale")
    scaled.adapt(np.stack([x[name] for name in sorted(x)], axis=1))
    output = keras.layers.Dense(1, activation="sigmoid", name="tip_probability")(scaled(stacked))
    model = keras.Model(inputs, {"tip_probability": output})
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss={"tip_probability": "binary_crossentropy"})
    model.fit(x, {"tip_probability": y}, epochs=30, batch_size=256, shuffle=False, verbose=0)
    shutil.rmtree(EXPORT, ignore_errors=True)
    model.export(EXPORT, verbose=False)
    predicted = model.predict(x, verbose=0)["tip_probability"].reshape(-1) >= 0.5
    print(f"exported {EXPORT}: accuracy {np.mean(predicted == (y > 0)):.3f} on {len(y)} trips "
          f"({int(y.sum())} good tippers)")


if __name__ == "__main__":
    main()
