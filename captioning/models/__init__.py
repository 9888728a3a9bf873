"""The network parts: encoders (images -> grid), attention layers, decoders (grid -> words), CaptionModel.

Importing the package imports every module that registers a class (``@register``:
``captioning.models.registry``), and Python runs this file before any module of the package, so the closed
registry is complete before anything can read it. A new part's module is imported here
(``tests/models/test_registry.py`` fails, naming it, until it is).
"""

from captioning.models import caption_model, encoders  # noqa: F401 - each import registers its classes
from captioning.models.attention import dot, gumbel, multihead, reinforce, soft  # noqa: F401
from captioning.models.decoders import lstm, top_down, transformer  # noqa: F401
