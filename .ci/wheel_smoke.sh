#!/usr/bin/env bash
# Build the wheel, install it into a fresh virtual environment (system site packages allowed for the
# heavy dependencies: torch, pandas, ...) and run cemctl from an empty folder, as a user of `pip install`
# would: `cemctl --version`, `python -m cemctl --version`, `cemctl plan demo --json` (a packaged grid).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel -q . --no-deps --no-build-isolation -w "$work/dist"
python3 -m venv --system-site-packages "$work/venv"
# Run from a virtual environment (.ci/run makes one where the system Python refuses pip installs): its packages are
# not the system's, so the new venv also sees them (after its own: the wheel's cemctl is the one imported).
outer=$(python3 -c "import sys, sysconfig; print(sysconfig.get_paths()['purelib'] if sys.prefix != sys.base_prefix else '')")
if [ -n "$outer" ]; then
  inner=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$outer" > "$inner/_ci_outer_env.pth"
fi
"$work/venv/bin/python" -m pip install -q --no-deps "$work"/dist/cemctl-*.whl
mkdir "$work/empty" && cd "$work/empty"
where=$("$work/venv/bin/python" -c "import cemctl, sys; print(cemctl.__file__)")
case "$where" in "$work/venv/"*) ;; *) echo "wheel smoke: cemctl imported from $where, not the venv" >&2; exit 1;; esac
"$work/venv/bin/cemctl" --version
"$work/venv/bin/python" -m cemctl --version
"$work/venv/bin/cemctl" plan demo --json > plan.json
"$work/venv/bin/python" -c "import json; d = json.load(open('plan.json')); assert d['experiment'] == 'demo' and len(d['runs']) == 4, d"
"$work/venv/bin/python" -c "
import pathlib, cemctl.serve
p = pathlib.Path(cemctl.serve.__file__).parent
assert list((p / 'templates').glob('*.html')) and list((p / 'static').iterdir()), 'the dashboard files are not in the wheel'"
echo "wheel smoke: ok ($(ls "$work"/dist))"
