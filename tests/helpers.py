"""Until the files that import it move to ``support.helpers``: that module, under its former name."""

from support.helpers import *  # noqa: F403
from support.helpers import build_net  # noqa: F401
