"""Benchmarks (`python -m bench`): training speed, CEM variant costs, MFU, GPU, orchestration.

These are measurements, not tests: `python -m bench` runs every benchmark and
writes `bench/results/latest.md` and `latest.json` (machine, versions, date and
one table per benchmark, with each speed target marked met / missed).
`python -m bench --quick --out DIR` is the CI smoke mode: the same code on the
smallest inputs, only checking that everything runs and writes its tables.
See bench/README.md for what each number means and how it is measured.
"""
