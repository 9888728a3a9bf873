"""Until the files that import it move to ``support.corpus``: that module, under its former name."""

from support.corpus import *  # noqa: F403
from support.corpus import build_module, checkpoint_dict, write_checkpoint  # noqa: F401
