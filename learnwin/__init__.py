"""learnwin: how far back in time a gated recurrent network can learn.

Reproduces and extends L. Livi, "Learnability Window in Gated Recurrent Neural Networks"
(arXiv:2512.05790). The specification is docs/method.md; modules cite its sections.
Importing the package is cheap: torch is only imported by the modules that need it.
"""

__version__ = "0.1.0"
