"""A user's task, registered in one place (docs/method.md §1): the tests' ``task.module``.

y_t = sum_k c_k tanh(2 u . x_{t-l_k}) 1[t >= l_k] + eps_t on the synthetic task's inputs, noise and
u (``learnwin.tasks.synthetic``): a saturating read of the same delays. numpy only, so the
Snakefile parse that imports this module loads no torch.
"""

import numpy as np

from learnwin.infra.tasks import TaskSpec, register_task
from learnwin.tasks.synthetic import components, make_split, task_vector


def draw(seed, task, split, n):
    x, noise = make_split(seed, split, n, task["T"], task["D"], [], [], task["noise_std"])
    proj = np.tanh(2 * components(x, task_vector(seed, task["D"])))
    y = noise.copy()
    for lag, coef in zip(task["lags"], task["coefs"]):
        y[:, lag:] += coef * proj[:, :-lag]
    return x, y.astype(np.float32)


register_task("tanh", TaskSpec("toy_task:draw", "learnwin.tasks.synthetic:direction"))
