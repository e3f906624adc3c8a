#!/usr/bin/env bash
# Runs once inside the new conda env (Snakemake's post-deploy hook), from the working directory
# of the snakemake call: the repository root. Installs this checkout's learnwin package.
set -euo pipefail
test -f learnwin/__init__.py || { echo "learnwin.post-deploy.sh: run snakemake from the repository root" >&2; exit 1; }
pip install --no-deps -e .
