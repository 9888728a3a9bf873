"""Show, Attend and Tell (Xu et al., 2015) image captioning."""

__version__ = "0.1.0"
