"""learnwin.infra.layout: the one place that knows where a run's artifacts live."""

from pathlib import Path

from learnwin.infra import layout


def test_under_fills_the_wildcards_and_reroots():
    snap = layout.under("/runs/x", layout.SNAP, optimizer="adamw", model="gru", seed=2, epoch="best")
    assert snap == Path("/runs/x/snapshots/adamw/gru/seed2/epochbest")
    assert layout.under("/runs/x", layout.STATS["H_N"]) == Path("/runs/x/stats/H_N.parquet")
    assert layout.figure("H_N", "pdf") == f"{layout.ROOT}/figures/H_N.pdf"


def test_glob_matches_any_value_of_a_wildcard_not_given(tmp_path):
    made = [layout.under(tmp_path, layout.SNAP, optimizer=o, model=m, seed=s, epoch="best") / "window.parquet"
            for o in ("adamw", "sgd") for m in ("const", "gru") for s in (2, 12)]
    for p in made:
        p.parent.mkdir(parents=True)
        p.write_text("")
    found = layout.glob(tmp_path, f"{layout.SNAP}/window.parquet", optimizer="sgd", epoch="best")
    assert found == sorted(p for p in made if "/sgd/" in str(p)) and len(found) == 4
    assert layout.glob(tmp_path, f"{layout.SNAP}/window.parquet", epoch="0") == []
