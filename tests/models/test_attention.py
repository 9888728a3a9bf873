import hydra
import pytest
import torch
from omegaconf import OmegaConf

from support import ATTENTIONS, CONF


def build_attention(name: str, feature_dim: int = 8, query_dim: int = 6):
    """The layer of captioning/conf/model/decoder/attention/<name>.yaml: a partial, given its sizes as a decoder would."""
    cfg = OmegaConf.load(CONF / "model" / "decoder" / "attention" / f"{name}.yaml")
    return hydra.utils.instantiate(cfg)(feature_dim=feature_dim, query_dim=query_dim)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_weights_sum_to_one_and_respect_the_mask(name):
    torch.manual_seed(0)
    att = build_attention(name).eval()
    features, query = torch.randn(4, 9, 8), torch.randn(4, 6)  # (B, L, D), (B, H)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[1, 5:] = False
    mask[3, :8] = False  # only one valid location
    out = att(query, features, att.precompute(features), mask)
    assert out.context.shape == (4, 8) and out.weights.shape == (4, 9) and out.alphas.shape == (4, 9)
    torch.testing.assert_close(out.alphas.sum(-1), torch.ones(4))
    assert torch.all(out.alphas[~mask] == 0) and torch.all(out.weights[~mask] == 0)
    torch.testing.assert_close(out.weights[3, 8], torch.tensor(1.0))
    torch.testing.assert_close(out.context[3], features[3, 8])  # all weight on the only valid location
    # the context is the weights applied to the features
    torch.testing.assert_close(out.context, torch.einsum("bl,bld->bd", out.weights, features))


def test_additive_scores_match_the_equation():
    torch.manual_seed(0)
    att = build_attention("additive")
    a, h = torch.randn(2, 5, 8), torch.randn(2, 6)
    # e_ti = v^T tanh(W_k a_i + b + W_q h), α = softmax(e) (Xu et al. eq. 4-5), written out by hand
    e = torch.tanh(a @ att.key_proj.weight.T + att.key_proj.bias + (h @ att.query_proj.weight.T)[:, None])
    expected = torch.softmax((e @ att.score.weight.T).squeeze(-1), -1)
    torch.testing.assert_close(att(h, a, att.precompute(a)).alphas, expected)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_every_constructor_option_of_a_layer_is_in_its_config(name):
    """An option missing from the YAML could not be set from the command line (struct mode refuses it)."""
    import inspect

    from captioning.models.registry import MODEL_CLASSES

    cfg = OmegaConf.load(CONF / "model" / "decoder" / "attention" / f"{name}.yaml")
    params = set(inspect.signature(MODEL_CLASSES[cfg._target_]).parameters) - {"feature_dim", "query_dim"}
    assert params == set(cfg) - {"_target_", "_partial_"}, params ^ (set(cfg) - {"_target_", "_partial_"})
