"""scripts/gpu_check.sh, the GPU check, runs on the CPU (--device cpu: the CPU compared with itself), and
its comparisons apply the stated tolerances."""

import json
import os
import subprocess
import sys

import pytest

from experiments.benchmarks import gpu_check

from support import REPO

SYNTHETIC = REPO / "docs" / "models" / "synthetic_soft.safetensors"


def _caption(tokens: list[str], log_probs: list[float], image: str = "a.png") -> dict:
    return {"image": image, "caption": " ".join(tokens), "tokens": tokens, "token_log_probs": log_probs,
            "score": sum(log_probs)}  # fmt: skip


def test_compare_applies_the_tolerances():
    ref = [
        _caption(["a", "red", "square"], [-0.1, -0.2, -0.3], "1.png"),
        _caption(["a", "dog"], [-1.0, -2.0], "2.png"),
    ]
    same = [
        _caption(["a", "red", "square"], [-0.1, -0.2, -0.3005], "1.png"),
        _caption(["a", "dog"], [-1.0, -2.0], "2.png"),
    ]
    out = gpu_check.compare(ref, same, "fp32")
    assert out["identical"] == 1.0 and out["within_tolerance"]
    assert out["max_token_logprob_diff"] == pytest.approx(5e-4)
    # a flipped near-tie (score 0.05 apart) is within bf16's tolerance, not fp32's
    tie = [same[0], _caption(["a", "cat"], [-1.0, -2.05], "2.png")]
    assert gpu_check.compare(ref, tie, "bf16")["within_tolerance"]
    fp32 = gpu_check.compare(ref, tie, "fp32")
    assert (
        not fp32["within_tolerance"] and fp32["identical"] == 0.5 and fp32["differing"][0]["other"] == "a cat"
    )
    # log-probs off by more than bf16's 0.25 nats a token
    far = [_caption(["a", "red", "square"], [-0.1, -0.2, -0.6], "1.png"), ref[1]]
    assert not gpu_check.compare(ref, far, "bf16")["within_tolerance"]
    with pytest.raises(ValueError, match="different images"):
        gpu_check.compare(ref, list(reversed(same)), "fp32")


def test_summary_reports_the_fraction_of_the_peaks(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    rows = [{"decoder": "soft", "what": "train step (ours)", "seconds": 0.01, "tokens/s": 64000.0, "GFLOP": 79.2,
             "of peak": 0.01, "of spec": 0.008}]  # fmt: skip
    args = {"batch": 32, "length": 20, "grid": 14, "feature_dim": 2048, "dim": 512, "vocab": 10000, "bf16": True,
            "device": "cuda", "peak": 7.9e14, "peak_size": 8192}  # fmt: skip
    (work / "bench_paper.json").write_text(json.dumps({"args": args, "rows": rows}))
    (work / "parts.jsonl").write_text(
        json.dumps({"part": "bench_paper", "status": "ok", "seconds": 40.0, "note": "", "rc": 0}) + "\n"
    )
    assert gpu_check.main(["summary", "--work", str(work), "--out", str(out), "--device", "cuda"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    bench = summary["bench_paper"]
    assert bench["soft_train_tflops"] == pytest.approx(7.92)
    assert bench["soft_of_spec_peak"] == pytest.approx(7.92 / 989)
    assert bench["soft_of_reference_matmul"] == pytest.approx(7.92 / 790)
    assert bench["soft_of_measured_matmul"] == pytest.approx(7.92 / 790)
    assert {"torch", "gpu", "cuda", "python"} <= set(summary["environment"])
    assert "of the 989 TFLOP/s spec" in (out / "summary.md").read_text()


@pytest.mark.slow
@pytest.mark.skipif(not SYNTHETIC.is_file(), reason="the zoo's synthetic model is not in this checkout")
def test_gpu_check_script_on_the_cpu(tmp_path):
    """The script end to end on the CPU, small (bench left out: tests/test_bench.py runs it): a short bf16
    training run, `caption` and `evaluate` twice on the CPU (identical), the Captioner in bf16."""
    out = tmp_path / "out"
    cmd = ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--device", "cpu", "--quick", "--out", str(out),
           "--parts", "train,cli,api", "--train-time", "00:20", "--checkpoints", str(SYNTHETIC)]  # fmt: skip
    env = {**os.environ, "PYTHON": sys.executable}  # this interpreter, wherever its environment lives
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert {"device", "environment", "parts", "train", "cli", "captioner", "tolerance_note"} <= set(summary)
    assert {p["part"]: p["status"] for p in summary["parts"]} == {"train": "ok", "cli": "ok", "api": "ok"}
    assert summary["train"]["validations"] >= 1 and summary["train"]["best_checkpoint"]
    captions = summary["cli"]["caption"]
    assert len(captions) == 2  # the zoo's model and the one just trained
    for entry in captions.values():
        assert entry["identical"] == 1.0 and entry["max_token_logprob_diff"] == 0.0, entry
    evaluate = summary["cli"]["evaluate"]
    assert evaluate["identical"] == 1.0 and evaluate["max_score_diff"] == 0.0
    api = summary["captioner"]["checkpoints"]["synthetic_soft"]
    assert api["cpu_fp32"]["identical"] == 1.0 and api["cpu_bf16"]["within_tolerance"]
    assert {"summary.json", "summary.md", "gpu_check.log", "train_metrics.csv"} <= {
        p.name for p in out.iterdir()
    }
