"""The input-pipeline benchmark (experiments/benchmarks/data_pipeline.py, ``bench.py --data-pipeline``): it
measures the datamodule's loader with and without workers, and its projection is the stated arithmetic."""

import pytest

from experiments.benchmarks.data_pipeline import (
    build_cache,
    coco_cache_bytes,
    generate_jpegs,
    loader_rate,
    projection,
    workers_needed,
)


def test_loader_rate_on_generated_jpegs_with_0_and_1_workers(tmp_path):
    paths = generate_jpegs(tmp_path, 16, size=(120, 90))
    assert len(paths) == 16 and all(p.stat().st_size > 0 for p in paths)
    for workers in (0, 1):
        row = loader_rate(paths, image_size=32, workers=workers, batch_size=8, repeats=1)
        assert row["images/s"] > 0 and row["seconds"] > 0
        assert row["batch shape"] == [8, 3, 32, 32]  # 16 images in batches of 8: every batch full
        assert row["images"] == 16


def test_the_cache_written_by_feature_cache_reads_back_49_by_1280_rows(tmp_path):
    encoder, keys = build_cache(tmp_path, rows=5)
    assert tuple(encoder.lookup(keys[:3]).shape) == (3, 49, 1280)


def test_projection_arithmetic():
    assert coco_cache_bytes() == 123_287 * 49 * 1280 * 2 == 15_465_121_280
    # 64 images every 16 ms = 4,000 images/s; at 100 images/s a worker, 40 workers
    assert workers_needed(64, 0.016, 100.0) == pytest.approx(40.0)
    assert workers_needed(64, 0.017, 64 / 0.017) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        workers_needed(64, 0.0, 100.0)
    rows = [
        {"what": "input", "source": "photos", "image_size": 224, "workers": 1, "images/s": 200.0},
        {"what": "input", "source": "photos", "image_size": 96, "workers": 1, "images/s": 900.0},
        {"what": "feature cache lookup, 1 reader, warm: ...", "readers": 1, "rows/s": 32_000.0},
    ]
    p = projection(rows, images_per_step=64, step_seconds=0.016)
    assert p["images_per_second_needed"] == pytest.approx(4000.0)
    assert p["workers per GPU, photos, rate of num_workers=1"] == pytest.approx(20.0)  # the 224 px row only
    assert not any("decode rate" in k for k in p)  # no num_workers=0 row given
    assert p["cache lookup ms per step (1 reader, warm)"] == pytest.approx(2.0)
    assert p["cache lookup share of the GPU step"] == pytest.approx(0.125)
    assert "not measured: no GPU" in p["gpu_jpeg_decode"]
