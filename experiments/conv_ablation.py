"""A block of the convolution test (docs/method.md §2c, the pre-registered convolution test): Hawk's
recurrent block without its short convolution, registered as a user's block would be.

Named by ``model.cells_module: conv_ablation`` with ``experiments/`` on PYTHONPATH
(config/stacks-conv.yaml); torch-free, like any registration module.
"""

from dataclasses import replace

from learnwin.infra.registry import BLOCKS, register_block

register_block("hawk_noconv", replace(BLOCKS["hawk"], conv=0, cite="Hawk's block without its convolution"))
