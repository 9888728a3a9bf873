"""scripts/soft_vs_hard.py and its pages (soft_vs_hard_pages.py): seeds, halves and bootstrap intervals read from a
comparison's run folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from captioning.metrics.bootstrap import (
    image_stats,
    paired_bootstrap,
    pooled,
    seed_image_bootstrap,
    welch_interval,
)
from captioning.metrics.coco import tokenize_captions
from experiments import (
    soft_vs_hard,
    soft_vs_hard_pages,
)

N = 40


def write_run(root: Path, name: str, captions: dict) -> None:
    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "results.json").write_text(
        json.dumps([{"image_id": k, "caption": c} for k, c in captions.items()])
    )


@pytest.fixture(scope="module")
def refs() -> dict:
    return soft_vs_hard.references("synthetic", "val", [f"data.val.num_images={N}"])


def test_report_numbers_equal_the_bootstrap_on_the_same_captions(tmp_path, refs):
    ids = list(refs)
    good = [{k: refs[k][s % len(refs[k])] for k in ids} for s in range(3)]  # a reference: near perfect
    bad = [{k: " ".join(refs[k][0].split()[: 2 + s]) for k in ids} for s in range(2)]  # truncated
    for s, caps in enumerate(good):
        write_run(tmp_path, f"soft-seed{s}", caps)
    for s, caps in enumerate(bad):
        write_run(tmp_path, f"hard-seed{s}", caps)
    write_run(tmp_path, "single-seed0", bad[0])  # one seed: no seed level to resample
    (tmp_path / "runs" / "hard-seed2").mkdir()  # a run that never finished
    out = tmp_path / "out"
    assert soft_vs_hard.main([str(tmp_path), "--data", "synthetic", "--baseline", "soft", "--tokenizer",
                              "simple", "--resamples", "200", "--out", str(out), f"data.val.num_images={N}"]) == 0  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["failed_or_unfinished"] == ["hard-seed2"]
    assert report["configs"]["soft"]["seeds"] == [0, 1, 2] and report["configs"]["hard"]["seeds"] == [0, 1]
    # the pooled difference equals the library's on the same tokenised captions
    tok = tokenize_captions(refs, "simple")

    def stats(caps: dict):
        tokenised = tokenize_captions({k: [c] for k, c in caps.items()}, "simple")
        return image_stats(tok, {k: v[0] for k, v in tokenised.items()})

    expected = paired_bootstrap(
        pooled([stats(c) for c in good]), pooled([stats(c) for c in bad]), resamples=200
    )
    got = report["configs"]["hard"]["vs_baseline"]["all"]
    expected_nobp = paired_bootstrap(
        pooled([stats(c) for c in good]), pooled([stats(c) for c in bad]), resamples=200,
        metrics=("Bleu_4_nobp",),
    )["Bleu_4_nobp"]  # fmt: skip
    assert got["Bleu_4_nobp"]["delta"] == pytest.approx(expected_nobp.delta)
    both = seed_image_bootstrap([stats(c) for c in good], [stats(c) for c in bad], resamples=200)
    for m in ("Bleu_4", "CIDEr"):
        assert got[m]["delta"] == pytest.approx(expected[m].delta)
        assert got[m]["high"] < 0 and got[m]["significant"] and got[m]["seed_pair_wins"] == 0
        # the seeds resampled too: the library's two-level interval on the same runs
        assert (got[m]["seeds_too"]["low"], got[m]["seeds_too"]["high"]) == pytest.approx(
            (both[m].low, both[m].high)
        )
    single = report["configs"]["single"]["vs_baseline"]["all"]["CIDEr"]
    assert single["significant"] and single["seeds_too"] is None and single["seed_means_t"] is None
    halves = report["configs"]["soft"]["per_seed"]
    assert set(halves) == {"all", "even", "odd"}
    md = (out / "report.md").read_text()
    assert "hard-seed2" in md and "| hard | 2 |" in md and (out / "seeds.png").stat().st_size > 1000
    assert "BLEU-4 without BP (all)" in md and "Length ratio c / r" in md
    d = got["CIDEr"]  # one setting: the verdict is read on the whole split
    assert "Read on the whole split" in md
    assert f"- hard against soft: below on BLEU-4 ({100 * got['Bleu_4']['delta']:+.2f}" in md
    seeds_too, means_t = d["seeds_too"], d["seed_means_t"]
    assert (
        f"below on CIDEr-D ({100 * d['delta']:+.2f} [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}]; seeds too "
        f"[{100 * seeds_too['low']:+.2f}, {100 * seeds_too['high']:+.2f}]; seed means' t "
        f"[{100 * means_t['low']:+.2f}, {100 * means_t['high']:+.2f}])" in md
    )
    per_seed = report["configs"]["soft"]["per_seed"]["all"], report["configs"]["hard"]["per_seed"]["all"]
    welch = welch_interval(*([v["CIDEr"] for v in seeds.values()] for seeds in per_seed))
    assert (means_t["delta"], means_t["low"], means_t["high"]) == pytest.approx(welch)
    assert "- single against soft (single: one seed, so over images only): below on BLEU-4" in md
    summary = (out / "summary.md").read_text()  # at a glance: the whole split here (one setting, none chosen)
    assert summary.startswith(f"At `runs`, on all {N} images, ×100")
    c = report["configs"]["hard"]["summary"]["all"]["CIDEr"]
    assert (
        f"| hard | 2 | {100 * report['configs']['hard']['summary']['all']['Bleu_4']['mean']:.1f} ± "
        in summary
    )
    assert f"{100 * c['mean']:.1f} ± {100 * c['std']:.1f} |" in summary
    assert (
        f"| {100 * d['delta']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] * "
        f"| [{100 * seeds_too['low']:+.1f}, {100 * seeds_too['high']:+.1f}] * "
        f"| [{100 * means_t['low']:+.1f}, {100 * means_t['high']:+.1f}]{' *' if means_t['significant'] else ''} "
        "| 0 of 6 |" in summary
    )
    assert "- hard against soft: below on BLEU-4" in summary  # the verdicts come with the table
    assert "| soft | 3 |" in summary and summary.count("| – |") >= 1
    ratio = report["configs"]["hard"]["per_seed"]["all"]["0"]["length_ratio"]  # JSON: seeds as text
    assert ratio == pytest.approx(stats(bad[0]).length_ratio()) and ratio < 1  # truncated captions


def test_missing_baseline_and_empty_folder_are_one_line(tmp_path, refs):
    with pytest.raises(SystemExit, match="run scripts/compare.py first"):
        soft_vs_hard.main([str(tmp_path), "--out", str(tmp_path / "o")])
    write_run(tmp_path, "hard-seed0", {k: "a" for k in refs})
    with pytest.raises(SystemExit, match="--baseline 'soft' has no finished run"):
        soft_vs_hard.main([str(tmp_path), "--data", "synthetic", "--baseline", "soft", "--tokenizer", "simple",
                           "--out", str(tmp_path / "o"), f"data.val.num_images={N}"])  # fmt: skip


def test_a_sweep_aggregated_by_compare_is_read_by_its_rows(tmp_path, refs):
    """The sweep layout: JOB/compare/<split>-beam<k>/{row.json, results.json}; a job without is unfinished."""
    sweep = tmp_path / "sweep"
    for job, (label, seed, words) in enumerate(
        [("soft", 0, 9), ("soft", 1, 9), ("hard", 0, 3), ("hard", 1, 3)]
    ):
        out = sweep / str(job) / "compare" / "val-beam3"
        out.mkdir(parents=True)
        (sweep / str(job) / ".hydra").mkdir()
        (out / "row.json").write_text(json.dumps({"label": label, "seed": seed}))
        captions = {k: " ".join(refs[k][seed].split()[:words]) for k in refs}
        (out / "results.json").write_text(
            json.dumps([{"image_id": k, "caption": c} for k, c in captions.items()])
        )
    (sweep / "4" / ".hydra").mkdir(parents=True)  # a job that never finished
    runs, missing = soft_vs_hard.find_runs(sweep)
    assert {label: sorted(seeds) for label, seeds in runs.items()} == {"soft": [0, 1], "hard": [0, 1]}
    assert missing == ["4"]
    out = tmp_path / "out"
    assert soft_vs_hard.main([str(sweep), "--data", "synthetic", "--baseline", "soft", "--tokenizer", "simple",
                              "--resamples", "100", "--out", str(out), f"data.val.num_images={N}"]) == 0  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["failed_or_unfinished"] == ["4"]
    assert report["configs"]["hard"]["vs_baseline"]["all"]["CIDEr"]["delta"] < 0


def write_evaluation(sweep: Path, job: int, setting: str, label: str, seed: int, captions: dict) -> None:
    out = sweep / str(job) / "compare" / setting
    out.mkdir(parents=True)
    (sweep / str(job) / ".hydra").mkdir(exist_ok=True)
    (out / "row.json").write_text(json.dumps({"label": label, "seed": seed}))
    (out / "results.json").write_text(
        json.dumps([{"image_id": k, "caption": c} for k, c in captions.items()])
    )


def test_one_decoding_is_chosen_for_every_model_on_the_even_half(tmp_path, refs):
    """Two settings for every run: the one with the higher mean CIDEr-D over all runs on the even half wins,
    whatever one model prefers; a setting only the hard runs have is an extra configuration."""
    sweep = tmp_path / "sweep"
    even = set(np.array(sorted(refs, key=str))[0::2].tolist())
    for job, (label, seed) in enumerate([("soft", 0), ("soft", 1), ("hard", 0), ("hard", 1)]):
        full = {k: refs[k][seed] for k in refs}  # a reference: near perfect
        short = {k: " ".join(refs[k][seed].split()[:3]) for k in refs}
        # beam5 is better on the even half for every run; soft alone is better at beam3 on the odd half
        write_evaluation(
            sweep, job, "val-beam5", label, seed, {k: full[k] if k in even else short[k] for k in refs}
        )
        beam3 = {k: short[k] if k in even else full[k] for k in refs} if label == "soft" else short
        write_evaluation(sweep, job, "val-beam3", label, seed, beam3)
        if label == "hard":
            write_evaluation(sweep, job, "val-beam5-hard_attention=expected", label, seed, full)
    out = tmp_path / "out"
    argv = [str(sweep), "--data", "synthetic", "--baseline", "soft", "--tokenizer", "simple", "--resamples", "100",
            "--out", str(out), f"data.val.num_images={N}"]  # fmt: skip
    assert soft_vs_hard.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["setting"]["chosen"] == "val-beam5" and report["setting"]["chosen_on"] == "even"
    cands = report["setting"]["candidates"]
    assert (
        set(cands) == {"val-beam3", "val-beam5"} and cands["val-beam5"]["CIDEr"] > cands["val-beam3"]["CIDEr"]
    )
    assert set(report["configs"]) == {"soft", "hard", "hard @ val-beam5-hard_attention=expected"}
    md = (out / "report.md").read_text()
    assert "Decoding: `val-beam5`, chosen once for every model" in md and "| `val-beam5` (chosen) |" in md
    assert "Read on the held-out odd half" in md
    # --setting overrides the choice; a setting not every run has is refused in one line
    assert soft_vs_hard.main([*argv, "--setting", "val-beam3"]) == 0
    assert json.loads((out / "report.json").read_text())["setting"] == {
        "chosen": "val-beam3", "chosen_on": None, "candidates": {}
    }  # fmt: skip
    with pytest.raises(SystemExit, match="--setting 'val-beam5-hard_attention=expected' is not evaluated"):
        soft_vs_hard.main([*argv, "--setting", "val-beam5-hard_attention=expected"])


def test_jobs_are_labelled_by_the_sweep_as_it_is_not_by_the_row_stored_when_first_evaluated(tmp_path, refs):
    """A job evaluated while it was alone in its sweep stored the decoder's name as its label; once the
    sweep holds the other experiment, both are labelled by the swept key, and the seed comes from the job."""
    sweep = tmp_path / "sweep"
    for job, (experiment, seed, stored) in enumerate(
        [("flickr8k_transformer", 1, ("transformer", 0)), ("flickr8k_soft", 0, ("flickr8k_soft", 0))]
    ):
        (sweep / str(job) / ".hydra").mkdir(parents=True)
        (sweep / str(job) / ".hydra" / "overrides.yaml").write_text(
            f"- seed={seed}\n- experiment={experiment}\n"
        )
        (sweep / str(job) / "run.json").write_text(json.dumps({"finished": True}))
        out = sweep / str(job) / "compare" / "val-beam5"
        out.mkdir(parents=True)
        (out / "row.json").write_text(json.dumps({"label": stored[0], "seed": stored[1]}))
        (out / "results.json").write_text(json.dumps([{"image_id": k, "caption": refs[k][0]} for k in refs]))
    runs, missing = soft_vs_hard.find_runs(sweep)
    assert {label: sorted(seeds) for label, seeds in runs.items()} == {
        "flickr8k_transformer": [1],
        "flickr8k_soft": [0],
    }
    assert missing == []


def test_the_charts_labels_drop_the_shared_prefix_and_name_an_extra_readings_setting():
    labels = [
        "flickr8k_soft",
        "flickr8k_hard_gumbel",
        "flickr8k_hard_gumbel @ val-beam5-hard_attention=expected",
    ]
    assert soft_vs_hard_pages.short_labels(labels) == [
        "soft",
        "hard_gumbel",
        "hard_gumbel\n@ beam5\nhard_attention=expected",
    ]
    assert soft_vs_hard_pages.short_labels(["hard_a", "hard_b"]) == [
        "a",
        "b",
    ]  # a whole word of the prefix only
    assert soft_vs_hard_pages.short_labels(["softer", "soft"]) == ["softer", "soft"]  # never half a name
    assert soft_vs_hard_pages.short_labels(["soft"]) == ["soft"]
    assert soft_vs_hard_pages.short_labels(["a", "b @ val-beam5-length_penalty=-0.5"])[1] == (
        "b\n@ beam5\nlength_penalty=-0.5"
    )


def test_two_jobs_of_one_configuration_and_seed_are_refused_by_name(tmp_path):
    # the same pair trained twice (e.g. a record that skipped the wrong pair), beside another experiment
    for job, experiment in (("0", "flickr8k_soft"), ("3", "flickr8k_transformer"), ("4", "flickr8k_soft")):
        folder = tmp_path / job
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "overrides.yaml").write_text(f"- seed=0\n- experiment={experiment}\n")
        (folder / "compare" / "val-beam5").mkdir(parents=True)
        (folder / "compare" / "val-beam5" / "row.json").write_text(json.dumps({"label": "x", "seed": 0}))
        (folder / "compare" / "val-beam5" / "results.json").write_text("[]")
    with pytest.raises(
        SystemExit, match="0 and 4 under .* are both flickr8k_soft seed 0: one run per configuration"
    ):
        soft_vs_hard.find_runs(tmp_path)


def test_the_reports_command_names_no_machine_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [
        str(tmp_path / "docs" / "xe"),
        "--out",
        str(tmp_path / "docs" / "r"),
        f"paths.val_json={tmp_path}/v.json",
    ]
    assert soft_vs_hard.shown(argv) == ["docs/xe", "--out", "docs/r", "paths.val_json=v.json"]
    assert soft_vs_hard.shown(["/elsewhere/xe", "data.val.num_images=5"]) == [
        "/elsewhere/xe",
        "data.val.num_images=5",
    ]


def test_the_verdicts_say_at_which_level_a_difference_holds():
    """Every level, images only, or one seed (its spread unknown): each verdict says which, and the summary
    shows the seed-level intervals only where they exist."""

    def iv(low, high):
        return {"low": low, "high": high, "significant": low > 0 or high < 0}

    def diff(delta, low, high, seeds_too, means_t):
        return {"delta": delta, **iv(low, high), "seed_pair_wins": 0.0, "seeds_too": seeds_too,
                "seed_means_t": means_t}  # fmt: skip

    def config(seeds, vs):
        stat = {"mean": 0.5, "std": float("nan") if seeds == 1 else 0.01, "ci95": 0.0}
        return {"seeds": list(range(seeds)), "summary": {"all": {m: stat for m in ("Bleu_4", "Bleu_4_nobp", "CIDEr")}},
                "vs_baseline": {"all": vs} if vs else {}}  # fmt: skip

    flat = diff(0.001, -0.01, 0.012, iv(-0.02, 0.02), iv(-0.03, 0.03))
    report = {
        "baseline": "soft", "images": 40, "setting": {"chosen": "val-beam5", "candidates": {}},
        "configs": {
            "soft": config(3, None),
            "both": config(3, {"Bleu_4": flat, "Bleu_4_nobp": flat,
                               "CIDEr": diff(-0.07, -0.1, -0.04, iv(-0.11, -0.03), iv(-0.09, -0.05))}),
            "images": config(3, {"Bleu_4": flat, "Bleu_4_nobp": flat,
                                 "CIDEr": diff(-0.03, -0.05, -0.01, iv(-0.06, 0.005), iv(-0.2, 0.1))}),
            "single": config(1, {"Bleu_4": flat, "Bleu_4_nobp": flat, "CIDEr": diff(-0.07, -0.1, -0.04, None, None)}),
        },
    }  # fmt: skip
    lines = soft_vs_hard_pages.verdict_lines(report)
    assert lines[0].startswith("Read on the whole split")
    assert lines[2] == (
        "- both against soft: not different on BLEU-4; not different on BLEU-4 without BP; below on CIDEr-D "
        "(-7.00 [-10.00, -4.00]; seeds too [-11.00, -3.00]; seed means' t [-9.00, -5.00])."
    )
    assert lines[3].endswith(
        "below on CIDEr-D (-3.00 [-5.00, -1.00]; seeds too [-6.00, +0.50]; seed means' t [-20.00, +10.00]), "
        "over images only: not with seeds too or seed means' t."
    )
    assert lines[4] == (
        "- single against soft (single: one seed, so over images only): not different on BLEU-4; not different "
        "on BLEU-4 without BP; below on CIDEr-D (-7.00 [-10.00, -4.00])."
    )
    summary = soft_vs_hard_pages.summary_table(report)
    assert "| -7.0 [-10.0, -4.0] * | [-11.0, -3.0] * | [-9.0, -5.0] * | 0 of 9 |" in summary
    assert "| -3.0 [-5.0, -1.0] * | [-6.0, +0.5] | [-20.0, +10.0] | 0 of 9 |" in summary
    assert (
        "| single | 1 | 50.0 | 50.0 | 50.0 |" in summary
        and "| -7.0 [-10.0, -4.0] * | – | – | 0 of 3 |" in summary
    )
    assert summary.endswith(lines[-1] + "\n")
