"""Decoding options with the names and meaning of Hugging Face ``generate`` (one set for every decoder).

| option | meaning |
|---|---|
| ``num_beams`` | beams per image (1 = greedy, or sampling with ``do_sample``) |
| ``num_return_sequences`` | captions returned per image: the n best beams, or n independent samples |
| ``do_sample`` | sample each token instead of searching (with ``num_beams=1``; ``replace(do_sample=True)`` without a ``num_beams`` sets it to 1) |
| ``temperature`` / ``top_k`` / ``top_p`` | sampling warpers, applied in that order (0 / 1.0 disable top-k / top-p) |
| ``length_penalty`` | ranking score = log p / length ** length_penalty (0: no normalisation) |
| ``no_repeat_ngram_size`` | no n-gram of this size occurs twice in a caption (0 = off) |
| ``repetition_penalty`` | CTRL's penalty on the logits of words already generated (1.0 = off) |
| ``max_new_tokens`` | the most tokens generated, ``<end>`` included |
| ``allow_unk`` | let ``<unk>`` (a word rarer than the vocabulary's cut-off) be generated; off by default: its log-probability is masked in every strategy, as HF's ``bad_words_ids`` does |
| ``hard_attention`` | hard-attention decoders only: ``"cell"`` reads the most likely cell a_{argmax α}; ``"expected"`` the expected context Σ_i α_i a_i, as the authors' code decodes its stochastic-attention models (arctic-captions ``capgen.py``: ``alpha_sample = alpha`` when not sampling). Soft attention is the expectation already |

Differences from HF's defaults, both deliberate: ``length_penalty`` defaults to 0 (our beam search keeps
finished beams competing, so a caption needs no length bonus to win), and ``top_k`` defaults to 0 (no
filter unless asked). Beam-search sampling (``do_sample`` with ``num_beams > 1``) is not offered: asking
for ``do_sample`` without naming ``num_beams`` replaces the stored beam count (a search setting, e.g. the
checkpoint's 5 beams) with 1, so ``model.caption(images, do_sample=True)`` samples with any checkpoint;
``do_sample`` with an explicit ``num_beams > 1`` is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from captioning.bounds import Between

# Names of earlier checkpoints, CLIs and configs, and the option each became.
LEGACY_OPTIONS = {"beam_size": "num_beams", "max_length": "max_new_tokens"}


def option(
    default: Any, help: str, bound: Between | None = None, note: str = "", choices: dict | None = None
):
    """A decoding option declared once: its default, its ``--flag``'s help, its bound (captioning.bounds) or
    its ``choices`` (value -> meaning), and a ``note`` added to the expected-value text of an error."""
    return field(default=default, metadata={"help": help, "bound": bound, "note": note, "choices": choices})


@dataclass(frozen=True)
class GenerationConfig:
    num_beams: int = option(1, "beams per image (1 = greedy)", Between(1, 64))
    num_return_sequences: int = option(1, "n-best list / samples per image", Between(1, 64))
    do_sample: bool = option(False, "sample instead of searching")
    # Below 1e-4, logits / T overflow float32 to inf (NaN probabilities): greedy decoding is that limit.
    temperature: float = option(
        1.0, "sampling temperature", Between(1e-4, 100), note="(for T -> 0 use greedy decoding)"
    )
    top_k: int = option(0, "sample among the k most likely words (0 = all)", Between(0, 1_000_000))
    top_p: float = option(1.0, "nucleus sampling mass (1.0 = off)", Between(0, 1, low_open=True))
    length_penalty: float = option(0.0, "score = log p / length**penalty", Between(-10, 10))
    no_repeat_ngram_size: int = option(0, "block repeated n-grams (0 = off)", Between(0, 100))
    repetition_penalty: float = option(
        1.0, "CTRL penalty (1.0 = off)", Between(0, 100, low_open=True), note="(1.0 = off)"
    )
    max_new_tokens: int = option(20, "the most tokens generated", Between(1, 1000))
    allow_unk: bool = option(
        False, "let <unk> be generated (default: masked, as HF's bad_words_ids; printed captions drop it)"
    )
    hard_attention: str = option(
        "cell",
        "hard-attention models: read the most likely cell, or the expected context Σ α_i a_i "
        "(refused for a soft-attention model, where it would change nothing)",
        choices={"cell": "the most likely cell", "expected": "the expected context, Σ α_i a_i"},
    )

    def __post_init__(self) -> None:
        for name, value in self.to_dict().items():
            check_option(name, value)
        if not (self.do_sample or self.num_return_sequences <= self.num_beams):
            raise ValueError(
                f"num_return_sequences={self.num_return_sequences}: expected at most "
                f"num_beams={self.num_beams} without do_sample (the n best of the beams)"
            )
        if self.do_sample and self.num_beams > 1:
            raise ValueError(
                f"num_beams={self.num_beams}: expected 1 with do_sample (beam-search "
                "sampling is not offered; use num_return_sequences for n samples)"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, options: dict[str, Any] | None, where: str = "decoding") -> GenerationConfig:
        """Options by name (legacy names accepted and renamed); an unknown name is a ValueError naming it."""
        known = {f.name for f in fields(cls)}
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(
                f"{where}: expected a mapping of decoding options (name: value), got a "
                f"{type(options).__name__}"
            )
        renamed: dict[str, Any] = {}
        for name, value in dict(options or {}).items():
            name = LEGACY_OPTIONS.get(name, name)
            if name not in known:
                raise ValueError(
                    f"{where}: unknown decoding option {name!r}; expected one of {sorted(known)}"
                )
            renamed[name] = value
        try:
            return cls(**renamed)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    def replace(self, **options: Any) -> GenerationConfig:
        """A copy with ``options`` changed (``None`` values keep the current setting).

        ``do_sample=True`` without ``num_beams`` also sets ``num_beams=1``: sampling draws one path per
        sample whatever beam width the current (stored) config searches with. An explicit ``num_beams > 1``
        with ``do_sample`` stays an error (beam-search sampling is not offered)."""
        changed = {k: v for k, v in options.items() if v is not None}
        if not changed:
            return self
        merged = {**self.to_dict(), **changed}
        named = {LEGACY_OPTIONS.get(k, k) for k in changed}
        if changed.get("do_sample") is True and "num_beams" not in named:
            merged["num_beams"] = 1
        return GenerationConfig.from_dict(merged)


def _check_of(f) -> tuple[Callable[[Any], bool], str]:
    """(is the value valid, what is expected) for one field of GenerationConfig, from its type and metadata."""
    meta = f.metadata
    if meta["choices"]:
        expected = " or ".join(f"{value!r} ({meaning})" for value, meaning in meta["choices"].items())
        return (lambda v: isinstance(v, str) and v in meta["choices"]), expected
    if f.type in ("bool", bool):
        return (lambda v: isinstance(v, bool)), "true or false"
    integer = f.type in ("int", int)
    bound: Between = meta["bound"]
    expected = bound.describe("an integer" if integer else "a number") + (
        f" {meta['note']}" if meta["note"] else ""
    )

    def ok(v: Any) -> bool:
        kinds = int if integer else int | float
        return isinstance(v, kinds) and not isinstance(v, bool) and bound.holds(v)

    return ok, expected


# Each option alone: what it must be (derived from the fields above). Checked for every config, by the CLIs
# before anything loads, and for SCST's sampling settings.
OPTION_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    f.name: _check_of(f) for f in fields(GenerationConfig)
}

# What ``hard_attention`` may be (scripts offer them as choices).
HARD_ATTENTION_CONTEXTS = tuple(GenerationConfig.__dataclass_fields__["hard_attention"].metadata["choices"])


def check_option(name: str, value: Any) -> None:
    """ValueError naming the option, its value and what was expected, unless ``value`` is valid alone."""
    ok, expected = OPTION_CHECKS[name]
    if not ok(value):
        raise ValueError(f"decoding option {name}={value!r}: expected {expected}")
