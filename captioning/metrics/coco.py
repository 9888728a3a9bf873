"""MS-COCO caption metrics (BLEU-1..4, METEOR, ROUGE-L, CIDEr-D, SPICE) through pycocoevalcap.

All scores are on the toolkit's scale (0-1; CIDEr-D 0-10; papers usually print them x100). ``evaluate_results`` with
``tokenizer="ptb"`` reproduces the official coco-caption demo; ``score_captions`` with
``tokenizer="simple"`` is the fast, Java-free path used for validation during training.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import subprocess
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nltk.translate.bleu_score import corpus_bleu
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.meteor.meteor import Meteor
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.spice import get_stanford_models as spice_models
from pycocoevalcap.spice.spice import Spice
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
from pycocotools.coco import COCO

from captioning import progress
from captioning.data.files import read_utf8_text
from captioning.data.tokenize import tokenize
from captioning.metrics.names import METRICS, TEXT_METRICS, TOKENIZERS  # noqa: E402  (METRICS re-exported)
from captioning.metrics.text import Refs, TextMetric, text_metric


class _ClosingMeteor(Meteor):
    """pycocoevalcap's Meteor with a ``close`` that ends java without the scorer lock: the original
    ``__del__`` takes the lock first and blocks forever if ``compute_score`` raised while holding it."""

    def close(self) -> str:
        """Kill the java process (no-op if it exited), reap it and return the end of its stderr."""
        self.meteor_p.kill()
        _, stderr = self.meteor_p.communicate(timeout=30)  # also closes the pipes
        return stderr.decode(errors="replace")[-500:]

    def __del__(self) -> None:
        proc = getattr(self, "meteor_p", None)  # absent when starting java failed in __init__
        if proc is not None and proc.returncode is None:
            self.close()


def _java_missing() -> str | None:
    return None if shutil.which("java") else "`java` is not on PATH (METEOR, SPICE and PTB tokenizer need it)"


def spice_models_missing() -> str | None:
    """Why SPICE cannot run here, or None. Checked up front because pycocoevalcap's ``Spice()`` would
    otherwise try to download Stanford CoreNLP (~400 MB) from nlp.stanford.edu and hang or fail."""
    lib = Path(spice_models.SPICEDIR) / spice_models.SPICELIB
    needed = [lib / f"{spice_models.JAR}.jar", lib / f"{spice_models.JAR}-models.jar"]
    missing = [p.name for p in needed if not p.is_file()]
    if missing:
        site = Path(spice_models.__file__).resolve().parents[2]  # .../site-packages (a namespace package)
        # Inside the installed package: say so without this machine's path (reports get committed).
        where = lib.resolve().relative_to(site) if lib.resolve().is_relative_to(site) else lib
        return (
            f"Stanford CoreNLP jars {missing} are not in {where} (pycocoevalcap would try to download them)"
        )
    return None


def _spice_missing() -> str | None:
    return _java_missing() or spice_models_missing()


def _ptb_tokenize(captions: Mapping[Hashable, Sequence[str]]) -> Refs:
    if reason := _java_missing():
        raise RuntimeError(f"tokenizer='ptb' needs Java: {reason}; use tokenizer='simple' instead")
    # The wrapper writes one caption per line and zips Java's output lines with its inputs: a line
    # break inside a caption ("\r", "\u2028", "\x85", ...) would pair every later caption with the
    # wrong image. Every whitespace run becomes one space first (str.split knows them all).
    flat = {k: [{"caption": " ".join(c.split())} for c in v] for k, v in captions.items()}
    with contextlib.redirect_stdout(io.StringIO()):
        out = PTBTokenizer().tokenize(flat)
    # Still check that nothing was lost.
    if sum(map(len, out.values())) != sum(map(len, captions.values())):
        raise RuntimeError("PTB tokenizer returned a different number of captions than it was given")
    return out


def tokenize_captions(captions: Mapping[Hashable, Sequence[str]], tokenizer: str) -> Refs:
    """Tokenise every caption with ``ptb`` (Stanford PTBTokenizer, Java), ``simple``
    (:func:`captioning.data.tokenize.tokenize`) or ``none`` (already tokenised); tokens joined by spaces."""
    if tokenizer == "ptb":
        return _ptb_tokenize(captions)
    if tokenizer == "simple":
        return {k: [" ".join(tokenize(c)) for c in v] for k, v in captions.items()}
    if tokenizer == "none":
        return {k: [str(c) for c in v] for k, v in captions.items()}
    raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")


def _check_inputs(references: Mapping[Hashable, Sequence[str]], hypotheses: Mapping[Hashable, str]) -> None:
    ref_ids, hyp_ids = set(references), set(hypotheses)
    if ref_ids != hyp_ids:
        no_ref = sorted(hyp_ids - ref_ids, key=repr)
        no_hyp = sorted(ref_ids - hyp_ids, key=repr)
        raise ValueError(
            "hypotheses and references must have the same image ids: "
            f"{len(no_ref)} hypothesis ids have no references (e.g. {no_ref[:5]}), "
            f"{len(no_hyp)} reference ids have no hypothesis (e.g. {no_hyp[:5]})"
        )
    if not ref_ids:
        raise ValueError("no captions to score: references and hypotheses are empty")
    for k in ref_ids:
        if not isinstance(hypotheses[k], str):
            raise ValueError(f"hypothesis of image {k!r} must be one string, got {hypotheses[k]!r}")
        if isinstance(references[k], str) or len(references[k]) == 0:
            raise ValueError(
                f"image {k!r}: references must be a non-empty list of str, got {references[k]!r}"
            )


def _tokenize_pair(
    references: Mapping[Hashable, Sequence[str]], hypotheses: Mapping[Hashable, str], tokenizer: str
) -> tuple[Refs, Refs]:
    """Checked and tokenised ``(gts, res)`` in pycocoevalcap's format (``res`` values: one-element lists)."""
    _check_inputs(references, hypotheses)
    # One tokenizer call for both sides saves a JVM start with tokenizer="ptb".
    refs = {("ref", k): v for k, v in references.items()}
    both = tokenize_captions({**refs, **{("hyp", k): [h] for k, h in hypotheses.items()}}, tokenizer)
    return {k: both[("ref", k)] for k in references}, {k: both[("hyp", k)] for k in references}


def _meteor(gts: Refs, res: Refs) -> dict[str, float]:
    meteor = _ClosingMeteor()
    try:
        return {"METEOR": float(meteor.compute_score(gts, res)[0])}
    except (OSError, ValueError) as err:
        raise RuntimeError(f"{err!r}; java stderr: {meteor.close()}") from err
    finally:
        if meteor.meteor_p.returncode is None:
            meteor.close()


def _spice(gts: Refs, res: Refs) -> dict[str, float]:
    with contextlib.redirect_stdout(io.StringIO()):
        return {"SPICE": float(Spice().compute_score(gts, res)[0])}


# The caption metrics of the registry (captioning.metrics.names.TEXT_METRICS), through pycocoevalcap.
BLEU = TextMetric(  # one Bleu(4) pass yields BLEU-1..4
    names=METRICS[:4],
    compute=lambda gts, res: dict(zip(METRICS[:4], Bleu(4).compute_score(gts, res, verbose=0)[0])),
)
ROUGE_L = TextMetric(
    names=("ROUGE_L",), compute=lambda gts, res: {"ROUGE_L": Rouge().compute_score(gts, res)[0]}
)
CIDER = TextMetric(  # the toolkit's Cider is CIDEr-D (sigma 6, clipped counts, x10)
    names=("CIDEr",), compute=lambda gts, res: {"CIDEr": Cider().compute_score(gts, res)[0]}
)
METEOR = TextMetric(names=("METEOR",), compute=_meteor, unavailable=_java_missing, external=True)
SPICE = TextMetric(names=("SPICE",), compute=_spice, unavailable=_spice_missing, external=True)


def compute_scores(gts: Refs, res: Refs, metrics: Sequence[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Score tokenised captions (``res`` values are one-element lists, as in pycocoevalcap).

    Returns ``(scores, skipped)``: scores on the toolkit's scale (0-1; CIDEr-D 0-10) in registry order (``TEXT_METRICS``), and
    ``metric -> reason`` for the metrics of external tools that could not be computed here.
    """
    registered = tuple(TEXT_METRICS)  # read now: a metric registered after import counts
    unknown = [m for m in metrics if m not in registered]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; choose from {registered}")
    # One computation per metric object (BLEU's one pass serves Bleu_1..4), in registry order.
    wanted: dict[int, tuple[TextMetric, list[str]]] = {}
    for name in (m for m in registered if m in metrics):
        metric = text_metric(name)
        wanted.setdefault(id(metric), (metric, []))[1].append(name)
    scores: dict[str, float] = {}
    skipped: dict[str, str] = {}
    report = progress.bar(len(metrics), "scoring", unit="metric")  # captioning/progress.py
    for metric, names in wanted.values():
        if reason := metric.unavailable():
            skipped.update(dict.fromkeys(names, reason))
        else:
            try:
                values = metric.compute(gts, res)
                scores.update({name: float(values[name]) for name in names})
            except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as err:
                if not metric.external:
                    raise
                skipped.update({name: f"{name} failed: {err}" for name in names})
        # A skip counts as done: the closing line reads n/n, skips are reported apart.
        report.update(len(names))
    report.close()
    return {m: scores[m] for m in registered if m in scores}, skipped


def nltk_bleu(gts: Refs, res: Refs) -> dict[str, float]:
    """NLTK ``corpus_bleu`` BLEU-1..4 (0-1 scale, no smoothing) on the same tokens, as a cross-check.

    It agrees with pycocoevalcap's BLEU up to the toolkit's 1e-9/1e-15 anti-zero constants, except
    that NLTK returns 0 when some n-gram order has no match at all.
    """
    ids = list(gts)
    refs = [[r.split() for r in gts[k]] for k in ids]
    hyps = [res[k][0].split() for k in ids]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLTK warns for every n-gram order without matches
        return {f"Bleu_{n}": float(corpus_bleu(refs, hyps, weights=(1.0 / n,) * n)) for n in range(1, 5)}


def score_captions(
    references: Mapping[Hashable, Sequence[str]],
    hypotheses: Mapping[Hashable, str],
    metrics: Sequence[str] = ("Bleu_4", "CIDEr"),
    tokenizer: str = "simple",
) -> dict[str, float]:
    """Corpus-level caption metrics on the toolkit's scale (0-1; CIDEr-D 0-10), ``{metric: score}`` in :data:`METRICS` order.

    ``references`` maps image id -> reference captions, ``hypotheses`` image id -> one generated
    caption; both must have the same ids. Metrics that cannot run here (SPICE without CoreNLP, Java
    metrics without ``java``) are left out with a warning; :func:`evaluate_results` reports why.
    """
    gts, res = _tokenize_pair(references, hypotheses, tokenizer)
    scores, skipped = compute_scores(gts, res, metrics)
    for name, reason in skipped.items():
        warnings.warn(f"{name} skipped: {reason}", RuntimeWarning, stacklevel=2)
    return scores


@dataclass
class EvalReport:
    """Result of :func:`evaluate_results`; every score is on the toolkit's scale (0-1; CIDEr-D 0-10)."""

    scores: dict[str, float]
    skipped: dict[str, str]  # metric -> why it was not computed
    nltk_bleu: dict[str, float]  # NLTK corpus_bleu BLEU-1..4 on the same tokens
    num_images: int
    tokenizer: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scale": "0-1"}


def evaluate_results(
    results: Sequence[Mapping[str, Any]],
    references: Mapping[Hashable, Sequence[str]],
    metrics: Sequence[str] | None = None,
    tokenizer: str = "ptb",
) -> EvalReport:
    """Score a COCO results list ``[{"image_id", "caption"}]`` against ``references`` (id -> captions).

    As in the official demo (``cocoEval.params['image_id'] = cocoRes.getImgIds()``), only the images in
    ``results`` are scored; every one of them must have references and exactly one caption. ``metrics``:
    names of ``TEXT_METRICS`` (None: every registered one).
    """
    metrics = tuple(TEXT_METRICS) if metrics is None else metrics
    hypotheses: dict[Hashable, str] = {}
    for i, result in enumerate(results):
        if not isinstance(result, Mapping) or not {"image_id", "caption"} <= set(result):
            raise ValueError(f"result {i} must be a mapping with 'image_id' and 'caption', got {result!r}")
        if (image_id := result["image_id"]) in hypotheses:
            raise ValueError(
                f"image {image_id!r} has several captions in the results; the toolkit scores one"
            )
        hypotheses[image_id] = result["caption"]
    refs = {k: references[k] for k in hypotheses if k in references}  # _check_inputs reports the missing
    gts, res = _tokenize_pair(refs, hypotheses, tokenizer)
    scores, skipped = compute_scores(gts, res, metrics)
    return EvalReport(scores, skipped, nltk_bleu(gts, res), len(hypotheses), tokenizer)


def _check_regular_file(path: Path, what: str) -> None:
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; expected a JSON file")
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    if not path.is_file():
        raise ValueError(f"{what} {path} is not a regular file (a pipe or device); expected a JSON file")


def _read_json(path: Path, what: str, expected: str) -> Any:
    """``path`` parsed as JSON, or one ValueError naming it (as ``what``) and what is wrong with it."""
    _check_regular_file(path, what)
    text = read_utf8_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {path} is not valid JSON: {err}") from err
    except RecursionError:
        raise ValueError(f"{what} {path}: JSON nested too deeply; expected {expected}") from None


def load_coco_references(annotations_json: str | Path) -> dict[int, list[str]]:
    """Image id -> reference captions from a COCO captions annotation file (e.g. captions_val2014.json)."""
    path = Path(annotations_json)
    data = _read_json(path, "reference annotations", "a COCO captions JSON")
    anns = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(anns, list) or not isinstance(data.get("images", []), list):
        raise ValueError(f"{path}: expected a COCO captions object with 'images' and 'annotations' lists")
    for j, a in enumerate(anns):
        ok = isinstance(a, dict) and isinstance(a.get("caption"), str) and isinstance(a.get("image_id"), int)
        if not ok or isinstance(a.get("image_id"), bool):
            raise ValueError(
                f"{path}: annotations[{j}] is {a!r:.80}; expected {{'image_id': int, 'caption': str}}"
            )
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
            coco = COCO()
            coco.dataset = data
            coco.createIndex()
            anns = coco.imgToAnns
        refs = {int(i): [a["caption"] for a in anns[i]] for i in sorted(anns) if anns[i]}
    except (AssertionError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path} is not a COCO captions annotation file: {err!r}") from err
    if not refs:
        raise ValueError(f"{path} has no caption annotations")
    blank = [i for i, captions in refs.items() if not any(c.strip() for c in captions)]
    if blank:  # every hypothesis of such an image would score 0 against nothing, dragging each mean down
        raise ValueError(
            f"{path}: {len(blank)} image(s) with only empty reference captions (e.g. image ids {blank[:5]}); "
            "expected at least one caption with words per image"
        )
    return refs


def load_results(results_json: str | Path, references: Mapping[Hashable, Sequence[str]]) -> list[dict]:
    """Read a COCO results file ``[{"image_id", "caption"}]`` through pycocotools ``COCO.loadRes``.

    Raises ``ValueError`` naming the file when it is malformed or has image ids not in ``references``.
    """
    path = Path(results_json)
    anns = _read_json(path, "results file", "a JSON list of {image_id, caption}")
    if not isinstance(anns, list):
        raise ValueError(
            f"{path}: the top level is a JSON {type(anns).__name__}; expected a list of {{image_id, caption}}"
        )
    entries = anns
    bad = [a for a in entries if not isinstance(a, dict) or not isinstance(a.get("caption"), str)]
    bad += [a for a in entries if isinstance(a, dict) and "image_id" not in a]
    bad += [  # ids are numbers or strings (a list or a mapping cannot name an image)
        a for a in entries if isinstance(a, dict) and isinstance(a.get("image_id"), list | dict | bool | None)
    ]
    if not anns or bad:
        raise ValueError(f"{path}: expected a non-empty list of {{image_id, caption: str}}, got {bad[:1]}")
    unknown = sorted({a["image_id"] for a in anns} - set(references), key=repr)
    if unknown:
        raise ValueError(f"{path}: {len(unknown)} image ids are not in the references, e.g. {unknown[:5]}")
    # loadRes needs the references as a COCO object; build one in memory.
    coco, captions = COCO(), [(k, c) for k, caps in references.items() for c in caps]
    coco.dataset = {
        "images": [{"id": k} for k in references],
        "annotations": [{"id": n, "image_id": k, "caption": c} for n, (k, c) in enumerate(captions, start=1)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        res = coco.loadRes(copy.deepcopy(anns))  # loadRes adds "id" to the dicts in place
    return [{"image_id": a["image_id"], "caption": a["caption"]} for a in res.dataset["annotations"]]
