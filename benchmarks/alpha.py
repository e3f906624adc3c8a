"""Benchmark of the alpha estimators (docs/method.md §6): time per fit and bias / RMSE at n = 1e3, 1e4.

Run: ``OMP_NUM_THREADS=1 python benchmarks/alpha.py``. scipy's private McCulloch start
(``scipy.stats._levy_stable._fitstart_S1``) is a reference only; it is skipped when absent.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.stats import levy_stable

from learnwin.stats import alpha as A

try:  # private scipy API: may move in any release
    from scipy.stats._levy_stable import _fitstart_S1
except ImportError:  # pragma: no cover
    _fitstart_S1 = None

ALPHAS = (1.2, 1.5, 1.8, 2.0)
REPS = 20


def estimators():
    out = {"ecf": lambda x: A.ecf_fit(x)[0], "mcc_fine": A.mcculloch_alpha}
    if _fitstart_S1 is not None:
        out["mcc_scipy"] = lambda x: min(_fitstart_S1(x)[0], 2.0)
    return out


def main() -> None:
    rng = np.random.default_rng(2024)
    A.mcculloch_table()  # load the cached table outside the timings
    for n in (1_000, 10_000):
        samples = {a: levy_stable.rvs(a, 0.0, size=(REPS, n), random_state=rng) for a in ALPHAS}
        print(f"n = {n}: bias / RMSE over {REPS} draws; median time per fit")
        print(f"{'method':<10}" + "".join(f"{'alpha=' + str(a):>18}" for a in ALPHAS) + f"{'time':>12}")
        for name, est in estimators().items():
            cells, times = [], []
            for a in ALPHAS:
                est_a = []
                for x in samples[a]:
                    t0 = time.perf_counter()
                    est_a.append(est(x))
                    times.append(time.perf_counter() - t0)
                err = np.asarray(est_a) - a
                cells.append(f"{err.mean():+.3f} / {np.sqrt(np.mean(err**2)):.3f}")
            print(f"{name:<10}" + "".join(f"{c:>18}" for c in cells) + f"{np.median(times) * 1e3:>9.2f} ms")
        print()
    x = levy_stable.rvs(1.5, 0.0, size=10_000, random_state=rng)
    times = []
    for rep in range(10):
        t0 = time.perf_counter()
        A.bootstrap_mcculloch(x, 500, np.random.default_rng(rep))
        times.append(time.perf_counter() - t0)
    print(f"McCulloch bootstrap, 500 resamples, n = 1e4: median {np.median(times) * 1e3:.2f} ms")
    times = []
    for rep in range(10):
        t0 = time.perf_counter()
        A.fit_sample(x, bootstrap=500, min_samples=1000, max_samples=100_000, ci_width_max=0.3, seed=rep)
        times.append(time.perf_counter() - t0)
    print(f"fit_sample (ECF + bootstrap 500 + selection), n = 1e4: median {np.median(times) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
