"""scripts/imagenet_domain.py: the domain file's numbers are the training photos' mean class probabilities
and the quantile of their surprise; the class names are the classifier's order; the record it writes
is the one the captioner reads."""

from __future__ import annotations

import numpy as np
import torch

from captioning.inference.domain import Domain, surprise

from support.helpers import load_script

script = load_script("imagenet_domain")


def test_derive_keeps_the_mean_probabilities_and_the_quantile_of_the_training_surprise():
    rng = np.random.default_rng(0)
    train = rng.dirichlet(np.full(5, 0.3), size=200).astype(np.float32)  # (N, C) probabilities
    frequency, threshold = script.derive(train, 0.9)
    np.testing.assert_allclose(frequency, train.mean(0), rtol=1e-6)
    own = -(train * np.log(train.mean(0))).sum(1)
    assert abs(threshold - np.quantile(own, 0.9)) < 1e-5
    assert (own > threshold).sum() == 20  # 10% of the training photos above it, by construction


def test_the_notices_of_known_probabilities_are_the_photos_above_the_threshold():
    domain = Domain("toy", "lite1", 240, ("a", "b"), (0.9, 0.1), 1.0, "toy")

    class Check:  # what notices() reads of a DomainCheck, without loading the classifier
        frequency = torch.tensor(domain.frequency)

    Check.domain = domain
    probs = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], dtype=np.float32)  # 0.105, 2.303, 1.204 nats
    flagged = script.notices(Check, probs)
    assert flagged[0] is None and flagged[1] == np.float32(
        surprise(torch.tensor(probs[1:2]), Check.frequency)[0]
    )
    assert flagged[2] is not None


def test_the_class_names_are_imagenet_in_the_classifier_order():
    classes = script.imagenet_classes()
    assert len(classes) == 1000 and classes[207] == "golden retriever" and classes[285] == "Egyptian cat"
