"""Self-critical training: the fast CIDEr-D reward equals the toolkit's, the baseline is leave-one-out,
and a run starts from a cross-entropy checkpoint's weights (refusing another vocabulary)."""

import json
import math
import os
import random
import re
import signal

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf, open_dict
from pycocoevalcap.cider.cider import Cider

from captioning.checkpoints.load import CheckpointError, load_checkpoint
from captioning.errors import ConfigError
from captioning.metrics.cider import CiderD
from captioning.models.attention.estimators import leave_one_out_baseline
from captioning.training.build import build_model
from captioning.training.resume import ResumeError
from captioning.training.train import StoppedBySignal, train
from captioning.training.validate import check_config

from support import SHARED_DATA, TINY, compose_train
from support.helpers import random_caption

DEMO = SHARED_DATA / "coco_caption_eval"


def test_cider_d_equals_pycocoevalcap_on_random_captions():
    rng = random.Random(0)
    refs = {i: [random_caption(rng) for _ in range(rng.randint(1, 5))] for i in range(60)}
    hyps = {i: [random_caption(rng)] for i in range(60)}
    theirs, per_image = Cider().compute_score(refs, hyps)
    reward = CiderD([refs[i] for i in range(60)])
    assert reward.corpus_score([hyps[i][0] for i in range(60)]) == pytest.approx(theirs, abs=1e-9)
    assert reward.scores([hyps[i][0] for i in range(60)], range(60)) == pytest.approx(per_image, abs=1e-9)


@pytest.mark.skipif(not DEMO.is_dir(), reason="needs ../shared/data/coco_caption_eval")
def test_cider_d_equals_pycocoevalcap_on_the_official_demo_to_4_decimals():
    refs = json.loads((DEMO / "references_ptbtokenized.json").read_text())
    hyps = json.loads((DEMO / "results_ptbtokenized.json").read_text())
    ids = list(refs)
    theirs, _ = Cider().compute_score({i: refs[i] for i in ids}, {i: hyps[i] for i in ids})
    ours = CiderD([refs[i] for i in ids]).corpus_score([hyps[i][0] for i in ids])
    assert round(ours, 4) == round(theirs, 4) == 0.5998  # the demo's printed CIDEr: 0.600


def test_leave_one_out_baseline_is_the_mean_of_the_other_samples():
    rewards = torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 3.0])  # two images, K = 3
    torch.testing.assert_close(
        leave_one_out_baseline(rewards, 3), torch.tensor([4.0, 3.5, 1.5, 1.5, 1.5, 0.0])
    )


def test_scst_starts_from_the_cross_entropy_weights_and_trains_them(tmp_path):
    xe = train(compose_train([*TINY, "trainer.max_epochs=1"], tmp_path / "xe"))
    start = load_checkpoint(xe).net.state_dict()
    overrides = [*TINY, "objective=scst", f"init_from={xe}", "trainer.max_steps=3", "logger=csv",
                 "trainer.log_every_n_steps=1", "model.num_samples=3"]  # fmt: skip
    cfg = compose_train(overrides, tmp_path / "scst")
    assert cfg.model._target_.endswith("SelfCriticalLitModule") and cfg.data.train_items == "images"
    module = build_model(cfg.model, load_checkpoint(xe).vocab)
    assert any(not torch.equal(start[n], t) for n, t in module.net.state_dict().items())  # fresh init
    module.load_initial_weights(xe)
    assert all(torch.equal(start[n], t) for n, t in module.net.state_dict().items())  # exactly the XE weights
    after = load_checkpoint(train(cfg)).net.state_dict()
    moved = [n for n in start if not torch.equal(start[n], after[n])]
    assert moved  # and the self-critical updates moved them
    (metrics,) = (tmp_path / "scst").rglob("metrics.csv")
    header = metrics.read_text().splitlines()[0].split(",")
    assert {"train/reward", "train/sample_length", "train/sample_truncated", "train/token_entropy"} <= set(
        header
    )


def test_bleu_reward_weight_rewards_cider_d_plus_w_times_the_toolkits_sentence_bleu_4(tmp_path, monkeypatch):
    from pycocoevalcap.bleu.bleu import Bleu

    from captioning.training import scst

    texts, calls = [], []
    own_references, mixed = scst.references, scst.CiderBleuReward.scores
    monkeypatch.setattr(
        scst, "references", lambda *sources: texts.append(own_references(*sources)) or texts[-1]
    )
    monkeypatch.setattr(
        scst.CiderBleuReward,
        "scores",
        lambda self, captions, images: (
            calls.append((captions, images, mixed(self, captions, images))) or calls[-1][-1]
        ),
    )
    xe = train(compose_train([*TINY, "trainer.max_steps=2"], tmp_path / "xe"))
    overrides = [*TINY, "objective=scst", f"init_from={xe}", "trainer.max_steps=2", "model.num_samples=2",
                 "model.bleu_reward_weight=0.5"]  # fmt: skip
    train(compose_train(overrides, tmp_path / "scst"))
    assert len(calls) == 2 and len(texts[-1]) == 24  # a reward call a step; TINY's 24 training scenes
    refs = texts[-1]
    for captions, images, got in calls:
        ids = range(len(captions))
        _, bleu = Bleu(4).compute_score(
            {j: refs[images[j]] for j in ids}, {j: [captions[j]] for j in ids}, verbose=0
        )
        expected = CiderD(refs).scores(captions, images) + 0.5 * np.array(bleu[3])
        assert got == pytest.approx(expected, abs=1e-9)  # CIDEr-D + 0.5 x the toolkit's per-caption BLEU-4
    assert any((got - CiderD(refs).scores(c, i)).any() for c, i, got in calls)  # the BLEU term is not inert


def test_init_from_another_vocabulary_is_refused_naming_both(tmp_path):
    xe = train(compose_train([*TINY, "trainer.max_epochs=1", "data.train.num_images=4"], tmp_path / "xe"))
    overrides = [*TINY, "objective=scst", f"init_from={xe}", "trainer.max_steps=1"]
    with pytest.raises(
        CheckpointError,
        match=r"init_from=.*its vocabulary is not this run's \(\d+ words against this run's \d+, first apart at id",
    ):
        train(compose_train(overrides, tmp_path / "scst"))


def _hard_module():
    from support.corpus import build_module

    return build_module(["a", "red", "circle", "square", "left", "of"], ["model/decoder=hard_reinforce"])


def test_replay_takes_the_recorded_cells_and_returns_their_log_alpha():
    decoder = _hard_module().net.decoder.eval()
    torch.manual_seed(0)
    b, t, n_loc = 3, 4, 16
    features = torch.randn(b, n_loc, decoder.feature_dim)
    tokens = torch.randint(4, 10, (b, t))
    locations = torch.randint(0, n_loc, (b, t))
    with torch.no_grad(), decoder.attention.replay(locations):
        out = decoder(features, tokens)
    assert torch.equal(out.attention.argmax(-1), locations) and torch.equal(
        out.attention.sum(-1), torch.ones(b, t)
    )
    expected = out.alphas.log().gather(-1, locations.unsqueeze(-1)).squeeze(-1)  # log α_{t, s_t}
    torch.testing.assert_close(out.aux["location_log_prob"], expected)
    with torch.no_grad():  # outside the block it chooses again (argmax in eval mode)
        assert torch.equal(
            decoder(features, tokens).attention.argmax(-1), decoder(features, tokens).alphas.argmax(-1)
        )
    with pytest.raises(RuntimeError, match="eval mode"), decoder.train().attention.replay(locations):
        pass


def test_sampling_block_samples_cells_in_eval_mode_and_restores_argmax():
    attention = _hard_module().net.decoder.attention.eval()
    alphas = torch.tensor([[0.5, 0.5, 0.0]]).repeat(400, 1)
    assert torch.equal(attention.choose(alphas), torch.zeros(400, dtype=torch.long))
    with attention.sampling():
        drawn = attention.choose(alphas)
    assert 150 < int((drawn == 1).sum()) < 250 and not (drawn == 2).any()
    assert not attention.sample_at_inference


@pytest.mark.parametrize("location_policy", [True, False])
def test_scst_trains_reinforce_locations_only_with_the_composed_term(tmp_path, location_policy):
    """With the location term the attention's scoring weights learn from the reward; without it (argmax
    cells) they get no gradient at all, so they stay exactly as the cross-entropy left them."""
    hard = [*TINY, "model/decoder=hard_reinforce"]
    xe = train(compose_train([*hard, "trainer.max_epochs=1"], tmp_path / "xe"))
    start = load_checkpoint(xe).net.state_dict()
    overrides = [*hard, "objective=scst", f"init_from={xe}", "trainer.max_steps=3", "logger=csv",
                 "trainer.log_every_n_steps=1", "model.num_samples=3",
                 f"model.location_policy={str(location_policy).lower()}"]  # fmt: skip
    after = load_checkpoint(train(compose_train(overrides, tmp_path / "scst"))).net.state_dict()
    scoring = [n for n in start if n.startswith("decoder.attention.") and n.endswith("weight")]
    moved = [n for n in scoring if not torch.equal(start[n], after[n])]
    assert scoring and (moved if location_policy else not moved), (scoring, moved)
    assert any(
        not torch.equal(start[n], after[n]) for n in start if n.startswith("decoder.out")
    )  # words learn
    header = next((tmp_path / "scst").rglob("metrics.csv")).read_text().splitlines()[0].split(",")
    assert ("train/location_log_prob" in header) == location_policy


def test_diagnostics_count_samples_cut_before_end_and_the_word_entropy(tmp_path):
    from captioning.data.vocab import Vocab

    cfg = compose_train([*TINY, "objective=scst", "init_from=null"], tmp_path)
    module = build_model(cfg.model, load_captioner_vocab())
    logged: dict[str, float] = {}
    module.log = lambda name, value, **kwargs: logged.__setitem__(name, float(value))
    end, pad = Vocab.end_id, Vocab.pad_id
    tokens = torch.tensor([[5, end, pad], [5, 6, 7], [6, 7, end], [8, 8, 8]])  # samples 2 and 4: cut at 3
    mask = (tokens != pad).float()  # 11 sampled tokens
    vocab_size = 10
    logits = torch.zeros(4, 3, vocab_size)  # uniform: entropy log 10 ...
    logits[0, 0, 5] = 1e4  # ... except one certain step: entropy 0
    module._log_diagnostics(torch.log_softmax(logits, -1), tokens, mask, batch_size=2)
    assert logged["train/sample_truncated"] == pytest.approx(0.5)
    assert logged["train/token_entropy"] == pytest.approx(10 * math.log(vocab_size) / 11, rel=1e-5)


def test_location_policy_is_refused_for_soft_attention(tmp_path):
    cfg = compose_train([*TINY, "objective=scst", "init_from=null", "model.location_policy=true"], tmp_path)
    from hydra.errors import InstantiationException

    with pytest.raises(
        InstantiationException,
        match=r"location_policy=true needs an attention layer whose cells are a policy "
        r"\(location_policy: ReinforceHardAttention\), the decoder has AdditiveAttention",
    ):
        build_model(cfg.model, load_captioner_vocab())


def load_captioner_vocab():
    from captioning.data.vocab import SPECIALS, Vocab

    return Vocab([*SPECIALS, "a", "dog"])


def test_a_soft_attention_checkpoint_starts_a_hard_attention_run(tmp_path):
    from support.corpus import build_module, write_checkpoint

    words = ["a", "red", "circle", "square", "left", "of"]
    soft = write_checkpoint(tmp_path / "soft.ckpt", words)
    hard = build_module(words, ["model/decoder=hard_reinforce"])
    hard.load_initial_weights(str(soft))  # soft-to-hard: every parameter fits, the buffers start at 0
    loaded = load_checkpoint(soft).net.state_dict()
    for name, tensor in hard.net.state_dict().items():
        fresh = name.rsplit(".", 1)[-1] in ("baseline", "sampled_batches", "step")
        assert torch.equal(tensor, loaded[name]) if name in loaded else fresh and not tensor.any(), name
    learned = build_module(
        words, ["model/decoder=hard_reinforce", "model.decoder.attention.baseline=learned"]
    )
    head = learned.net.decoder.attention.value_head.weight.clone()
    learned.load_initial_weights(str(soft))  # the value head is the estimator's: it keeps its initialisation
    assert torch.equal(learned.net.decoder.attention.value_head.weight, head)
    transformer = write_checkpoint(tmp_path / "tr.ckpt", words, ["model/decoder=transformer"])
    with pytest.raises(
        CheckpointError, match=r"its network \(TransformerDecoder over SmallCNN\) does not fit"
    ):
        hard.load_initial_weights(str(transformer))


class SigtermAtStep2(pl.Callback):
    """A real SIGTERM to this process after the second optimizer step (Lightning stops after the batch)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == 2 and not trainer.received_sigterm:
            os.kill(os.getpid(), signal.SIGTERM)


class StartProbe(pl.Callback):
    seen: dict = {}

    def on_train_start(self, trainer, pl_module) -> None:
        StartProbe.seen.update(
            step=trainer.global_step, weights={k: v.clone() for k, v in pl_module.net.state_dict().items()}
        )

    def on_train_end(self, trainer, pl_module) -> None:
        StartProbe.seen["end"] = trainer.global_step


def _with(cfg, name: str):
    with open_dict(cfg):
        cfg.callbacks[name.lower()] = OmegaConf.create({"_target_": f"{__name__}.{name}"})
        cfg.allowed_targets = [__name__]  # this test module's class (config_safety.py)
    return cfg


def test_an_scst_run_stopped_by_sigterm_resumes_with_the_command_its_message_advises(tmp_path):
    xe = train(compose_train([*TINY, "trainer.max_epochs=1"], tmp_path / "xe"))
    run = [*TINY, "objective=scst", f"init_from={xe}", "model.num_samples=2", "trainer.max_steps=5",
           "trainer.num_sanity_val_steps=0"]  # fmt: skip
    with pytest.raises(StoppedBySignal, match=r"at step 2; resume with ckpt_path=last") as stopped:
        train(_with(compose_train(run, tmp_path / "scst"), "SigtermAtStep2"))
    advised = re.search(r"resume with (ckpt_path=\S+)", str(stopped.value)).group(1)
    saved = torch.load(tmp_path / "scst" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 2
    StartProbe.seen.clear()
    train(_with(compose_train([*run, advised], tmp_path / "scst"), "StartProbe"))  # init_from kept
    assert StartProbe.seen["step"] == 2 and StartProbe.seen["end"] == 5  # continued from the saved step
    for name, tensor in StartProbe.seen["weights"].items():  # the resumed weights won over init_from's
        assert torch.equal(tensor, saved["state_dict"][f"net.{name}"]), name
    check_config(compose_train([*TINY, "objective=scst", "ckpt_path=last"], tmp_path))  # resuming alone
    with pytest.raises(
        ResumeError, match=r"is a cross-entropy checkpoint and this run is an SCST run; start"
    ):
        train(compose_train([*TINY, "objective=scst", f"ckpt_path={xe}", "trainer.max_steps=9"], tmp_path))
    with pytest.raises(ConfigError, match=r"init_from=None: objective=scst starts from .*or ckpt_path=last"):
        check_config(compose_train([*TINY, "objective=scst"], tmp_path))


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("model.sample_temperature=0", r"sample_temperature=0, expected a number in \[1e-4, 100\]"),
        ("model.sample_max_new_tokens=0", r"sample_max_new_tokens=0, expected an integer in \[1, 1000\]"),
        ("model.bleu_reward_weight=-1", r"bleu_reward_weight=-1, expected >= 0"),
    ],
)
def test_sampling_settings_that_fail_at_the_first_step_are_refused_at_start_up(tmp_path, override, fragment):
    from captioning.training.startup import check_model_config

    cfg = compose_train([*TINY, "objective=scst", "init_from=x.ckpt", override], tmp_path)
    with pytest.raises(ConfigError, match=rf"^model(\.\w+)?: objective scst: {fragment}"):
        check_model_config(cfg)  # the start-up build: before any data is read
