"""The out-of-domain notice (captioning/inference/domain.py): the rule's numbers, the shipped Flickr8k domain
file and its measurement, and the notice on a real photo through the API, the CLI and the demo's text."""

from __future__ import annotations

import json
import math

import pytest
import torch

from captioning.cli.main import main
from captioning.inference.captioner import Captioner
from captioning.inference.demo import captions_markdown
from captioning.inference.domain import DOMAINS, Domain, DomainCheck, DomainNotice, domain_for, surprise

from support import REPO

EXAMPLE = REPO / "examples" / "cameraman.png"  # CC0 (examples/README.md): a man, a camera on a tripod
MEASURED = REPO / "docs" / "results" / "domain_notice.json"


def test_surprise_is_the_expected_surprisal_under_the_training_frequencies():
    frequency = torch.tensor([0.5, 0.25, 0.25])
    probs = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.5, 0.5, 0.0]])
    expected = [math.log(2), math.log(4), 0.5 * math.log(2) + 0.5 * math.log(4)]
    assert surprise(probs, frequency).tolist() == pytest.approx(expected)


def test_a_notice_above_the_threshold_names_the_two_most_probable_classes(monkeypatch):
    domain = Domain(
        "toy", "lite1", 240, ("dog", "cat", "cup"), (0.98, 0.01, 0.01), 1.0, "toy models know dogs"
    )
    check = DomainCheck(domain)
    probs = torch.tensor([[0.9, 0.05, 0.05], [0.1, 0.7, 0.2]])  # surprise 0.48 and 3.69 nats
    monkeypatch.setattr(check, "probabilities", lambda batch: probs)
    dog, cat = check.notices(torch.zeros(2, 3, 8, 8))
    assert dog is None
    assert cat.looks_like == (("cat", pytest.approx(0.7)), ("cup", pytest.approx(0.2)))
    assert cat.surprise == pytest.approx(-(0.1 * math.log(0.98) + 0.9 * math.log(0.01)), rel=1e-5)
    assert str(cat) == "looks like: cat (0.70), cup; toy models know dogs"
    assert cat.to_json()["looks_like"] == [
        {"class": "cat", "probability": 0.7},
        {"class": "cup", "probability": 0.2},
    ]


def test_the_shipped_flickr8k_domain_is_the_measured_one():
    domain = domain_for("flickr8k")
    raw = json.loads((DOMAINS / "flickr8k.json").read_text())
    assert len(domain.classes) == len(domain.frequency) == 1000
    assert sum(domain.frequency) == pytest.approx(1.0, abs=1e-3)
    assert domain.classes[285] == "Egyptian cat" and domain.classes[967] == "espresso"
    measured = json.loads(MEASURED.read_text())
    assert measured["threshold"] == domain.threshold == raw["rule"]["threshold"]
    assert measured["dev"]["notices"] == len(measured["dev_examples"]) <= 50  # few of the 1,000 dev photos
    assert domain_for("synthetic") is None and domain_for("../flickr8k") is None


@pytest.fixture(scope="module")
def flickr8k_model():
    return Captioner.from_pretrained("flickr8k-soft-scst")


def test_the_api_result_carries_the_notice_of_a_photo_unlike_flickr8k(flickr8k_model):
    (result,) = flickr8k_model.caption(str(EXAMPLE))
    notice = result.domain_notice
    assert isinstance(notice, DomainNotice) and notice.looks_like[0][0] == "tripod"
    assert notice.surprise > notice.threshold == flickr8k_model.domain.threshold
    assert result.to_json()["domain_notice"] == notice.to_json()
    assert "**Unlike the training photos**: looks like: tripod (0." in captions_markdown(result)
    flickr8k_model.domain = None  # the check off: no notice
    (plain,) = flickr8k_model.caption(str(EXAMPLE))
    assert plain.domain_notice is None and plain.caption == result.caption
    assert "domain_notice" not in plain.to_json()


def test_a_model_without_a_domain_file_gets_no_notice():
    model = Captioner.from_pretrained("synthetic-soft")
    assert model.domain is None
    assert model.caption(torch.rand(3, 64, 64))[0].domain_notice is None


def test_the_cli_prints_the_notice_on_stderr_and_in_json(capsys):
    assert main(["caption", str(EXAMPLE), "--checkpoint", "flickr8k-soft-scst"]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and out.startswith(f"{EXAMPLE}\t")
    assert err.startswith(f"captioning caption: note: {EXAMPLE}: looks like: tripod (0.")
    assert err.rstrip().endswith("Flickr8k models know people, dogs and outdoor scenes")
    assert main(["caption", str(EXAMPLE), "--checkpoint", "flickr8k-soft-scst", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["domain_notice"]["looks_like"][0]["class"] == "tripod"
