"""The one-off used for docs/results/flickr8k/wise_ft: theta = alpha * theta_A + (1 - alpha) * theta_B, written
as an fp16 export with A's header (its vocabulary, network config and stored decoding).

    python docs/results/flickr8k/wise_ft/interpolate.py A.safetensors B.safetensors ALPHA OUT.safetensors
"""

import sys
from pathlib import Path

from captioning.checkpoints.export import _save
from captioning.checkpoints.load import read_weights_and_meta

a, b, alpha, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
state_a, meta = read_weights_and_meta(a)
state_b, _ = read_weights_and_meta(b)
assert state_a.keys() == state_b.keys(), "not the same network"
state = {
    k: (alpha * v + (1 - alpha) * state_b[k]).half() if v.is_floating_point() else v
    for k, v in state_a.items()
}
_save(state, {**meta, "provenance": {**meta.get("provenance", {}), "interpolated": [a, b, alpha]}}, Path(out))
